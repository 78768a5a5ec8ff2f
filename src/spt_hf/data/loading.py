"""``load_task``: find a task's files, build its Arrow cache once, and apply the split conventions.

The cache holds the tokenised raw splits, keyed by the task, its options and the size and mtime of every source
file; it is written into a temporary folder and renamed into place, so a failed build leaves nothing behind.
Splitting, the LRA test-as-validation convention and train subsampling are cheap index selections applied after
loading. Masking never happens here: SPT masks are drawn by the collators, anew for every batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from .cache import default_cache_dir
from .spec import DataFormatError, Source, TaskSpec
from .tasks import get_task_spec

CACHE_VERSION = 2  # 2: continuous values stored flat, 8-bit sources as uint8
VALIDATION_FROM = ("train", "test")


def cache_key(spec: TaskSpec, source: Source) -> str:
    """A hash of the task, its options and its sources (path, size and mtime of every file; or the Hub id)."""
    files = []
    for path in source.files:
        st = path.stat()
        files.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    payload = {
        "version": CACHE_VERSION,
        "task": type(spec).__name__,
        "options": {k: repr(v) for k, v in spec.options().items()},
        "files": files,
        "hub": [source.hub_id, repr(sorted(source.extra.items())) if source.hub_id else None],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _generate(gen: Any, spec: TaskSpec, build_dir: Path, fingerprint: str, what: str) -> datasets.Dataset:
    """``Dataset.from_generator``, re-raising our own errors (bad file, bad row) rather than datasets' wrapper."""

    def checked() -> Any:
        empty = True
        for index, example in enumerate(gen()):
            empty = False
            yield spec.encode(example, f"{spec.name}: {what}, example {index}")
        if empty:
            raise DataFormatError(f"{spec.name}: {what} holds no examples")

    # Rows are held as Python objects until a batch is written: about 4M values per batch bounds that memory.
    rows_per_batch = max(16, min(1000, (1 << 22) // (spec.max_length * spec.num_channels)))
    try:
        return datasets.Dataset.from_generator(
            checked,
            features=spec.features(),
            cache_dir=str(build_dir),
            fingerprint=fingerprint,
            writer_batch_size=rows_per_batch,
        )
    except datasets.exceptions.DatasetGenerationError as err:
        if err.__cause__ is not None:
            raise err.__cause__ from None
        raise


def cache_path(spec: TaskSpec, source: Source, cache_dir: str | Path | None = None) -> Path:
    """The folder of the raw splits of ``spec`` read from ``source`` (:func:`build_cached`), built or not."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / f"{spec.name}-{cache_key(spec, source)}"


def build_cached(spec: TaskSpec, source: Source, cache_dir: str | Path | None = None) -> datasets.DatasetDict:
    """The raw splits of ``spec`` from the cache, building and saving them first if needed."""
    final = cache_path(spec, source, cache_dir)
    root = final.parent
    if (final / "dataset_dict.json").is_file():
        return datasets.load_from_disk(str(final))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=root))
    try:
        built = {}
        for split, gen in spec.build(source).items():
            what = f"split {split!r} read from {source.root or source.hub_id}"
            built[split] = _generate(gen, spec, tmp / "build", f"{final.name}-{split}", what)
        datasets.DatasetDict(built).save_to_disk(str(tmp / "dict"))
        try:
            os.rename(tmp / "dict", final)  # atomic on one file system
        except OSError:
            if not (final / "dataset_dict.json").is_file():  # not a concurrent build that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(final))


def _sizes(total: int, sizes: tuple[float, ...]) -> list[int]:
    if sum(sizes) <= 1.0 + 1e-9:
        counts = [round(s * total) for s in sizes[:-1]]
        return [*counts, total - sum(counts)]
    counts = [int(s) for s in sizes]
    if sum(counts) > total:
        raise ValueError(f"split sizes {counts} need {sum(counts)} examples, the source has {total}")
    return counts


def _carve(ds: datasets.Dataset, sizes: list[int], seed: int) -> list[datasets.Dataset]:
    """Disjoint seeded random parts of ``ds`` of the given sizes (each in the original order)."""
    perm = np.random.default_rng(seed).permutation(len(ds))
    parts, start = [], 0
    for n in sizes:
        parts.append(ds.select(np.sort(perm[start : start + n])))
        start += n
    return parts


def make_splits(
    raw: datasets.DatasetDict, spec: TaskSpec, validation_from: str = "train", split_seed: int = 0
) -> datasets.DatasetDict:
    """Train/validation/test from the raw splits by the paper's conventions.

    A ``pool`` is divided by ``spec.split_sizes``; a source with train and test only gets a validation split of
    ``spec.validation_size`` carved from train. ``validation_from="test"`` uses the test split as validation
    instead (LRA's convention for IMDb), leaving train whole.
    """
    if validation_from not in VALIDATION_FROM:
        raise ValueError(f"validation_from={validation_from!r}; allowed: {VALIDATION_FROM}")
    if "pool" in raw:
        train, val, test = _carve(raw["pool"], _sizes(len(raw["pool"]), spec.split_sizes), split_seed)
    elif "validation" in raw:
        train, val, test = raw["train"], raw["validation"], raw["test"]
    elif validation_from == "test":
        train, val, test = raw["train"], raw["test"], raw["test"]
    else:
        n = len(raw["train"])
        n_val = round(spec.validation_size * n) if spec.validation_size < 1 else int(spec.validation_size)
        if not 0 < n_val < n:
            raise ValueError(
                f"{spec.name}: cannot carve {n_val} validation examples from {n} training examples; "
                "pass validation_from='test' for a tiny copy"
            )
        val, train = _carve(raw["train"], [n_val, n - n_val], split_seed)
        test = raw["test"]
    if validation_from == "test":
        val = test
    return datasets.DatasetDict({"train": train, "validation": val, "test": test})


def subsample_train(
    splits: datasets.DatasetDict,
    num_train_examples: int | None = None,
    train_fraction: float | None = None,
    seed: int = 0,
) -> datasets.DatasetDict:
    """Keep a seeded random subset of train (sample-complexity experiments); other splits unchanged."""
    if num_train_examples is None and train_fraction is None:
        return splits
    if num_train_examples is not None and train_fraction is not None:
        raise ValueError("pass num_train_examples or train_fraction, not both")
    n = len(splits["train"])
    if train_fraction is not None:
        if not 0 < train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
        num_train_examples = max(1, round(train_fraction * n))
    if not 0 < num_train_examples <= n:
        raise ValueError(f"num_train_examples={num_train_examples}, train has {n} examples")
    out = datasets.DatasetDict(splits)
    out["train"] = _carve(splits["train"], [num_train_examples], seed)[0]
    return out


def load_task(
    task: str | TaskSpec,
    /,
    data_dir: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    split_seed: int = 0,
    validation_from: str = "train",
    num_train_examples: int | None = None,
    train_fraction: float | None = None,
    seed: int = 0,
    **options: Any,
) -> datasets.DatasetDict:
    """Load ``task`` as a ``DatasetDict`` with ``train``, ``validation`` and ``test``.

    Args:
        task: a key of :data:`spt_hf.data.tasks.TASKS`, or a spec already built by ``get_task_spec`` (it carries its
            options, so none are given; a caller that needs the spec builds it once and passes it).
        data_dir: the ``lra_release`` root, the task's folder, a folder written by ``spt-hf generate-data``, or
            a local copy of a Hub dataset; ``None`` for Hub tasks (online) and the offline tasks' system paths.
        cache_dir: where the Arrow cache goes (default :func:`default_cache_dir`).
        split_seed: seed of the fixed split conventions (carving validation, dividing a pool).
        validation_from: ``"train"`` (a real validation split) or ``"test"`` (the LRA convention).
        num_train_examples: keep this many training examples (seeded by ``seed``).
        train_fraction: keep this fraction of the training examples (seeded by ``seed``).
        seed: seed of the train subsampling.
        **options: task options (``max_length``, ...), see the task class's ``OPTIONS``.

    Returns:
        Token tasks have ``input_ids`` (python lists; ``input_ids_2`` too for retrieval) and ``label``;
        continuous tasks ``input_values`` (the raw values as a numpy array of L·C values in step-major order, in
        the task's ``storage_dtype``: ``reshape(-1, C)`` gives (L, C)) and ``label``. The splits are memory-mapped
        Arrow files: loading reads nothing into memory.
    """
    if isinstance(task, TaskSpec):
        if options:
            raise TypeError(f"load_task got a built spec and options {sorted(options)}; give them to get_task_spec")
        spec = task
    else:
        spec = get_task_spec(task, split_seed=split_seed, validation_from=validation_from, data_dir=data_dir, **options)
    raw = build_cached(spec, spec.locate(data_dir), cache_dir)
    splits = make_splits(raw, spec, validation_from=validation_from, split_seed=split_seed)
    splits = subsample_train(splits, num_train_examples, train_fraction, seed)
    if spec.input_kind == "continuous":  # (L, C) arrays: ~10x faster to collate than nested python lists
        storage = np.dtype(spec.storage_dtype)  # numpy formatting would widen uint8 to int64 otherwise
        splits = splits.with_format("numpy", columns=["input_values"], output_all_columns=True, dtype=storage)
    return splits
