"""Reading a custom task's source: exactly one of ``data_files``, ``data_dir`` or ``hub_id`` (``task_options``).

``data_files`` is a path, a glob, a list of them, or ``{split: path | glob | list}``. The format comes from the
extension (:data:`EXTENSIONS`) or ``format`` (:data:`FORMATS`; UCR's whitespace text says nothing in its extension,
so it needs ``format: ucr``). csv, tsv, json/jsonl, parquet, arrow and txt go through ``datasets``' packaged builders
(an Arrow cache under ``cache_dir``, memory-mapped); ``.ts``, UCR text, FASTA and ``.npz`` through our readers
(:mod:`.readers`), which also end in an Arrow cache. Without a mapping, split names come from the file names
(:func:`split_of`); files that name no split are one ``train`` split.

``data_dir`` layouts and ``hub_id`` are in :mod:`.folders` and :func:`read_hub`.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import datasets

from ..spec import DataFormatError, text_lines
from . import readers
from .raw import LabelHint, RawSource

SOURCE_KEYS = ("data_files", "data_dir", "hub_id", "hub_config", "hub_revision", "format")
FORMATS = ("csv", "tsv", "json", "parquet", "arrow", "text", "ts", "ucr", "fasta", "npz")
EXTENSIONS = {
    ".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json", ".parquet": "parquet", ".arrow": "arrow",
    ".txt": "text", ".ts": "ts", ".fa": "fasta", ".fasta": "fasta", ".fna": "fasta", ".npz": "npz",
}  # fmt: skip
FORMAT_ALIASES = {"jsonl": "json", "txt": "text", "fa": "fasta", "fna": "fasta"}  # extensions as format names
SPLIT_WORDS = {"train": "train", "training": "train", "test": "test", "testing": "test", "validation": "validation"}
SPLIT_WORDS |= {"valid": "validation", "val": "validation", "dev": "validation"}
_BUILDERS = {"csv": ("csv", {}), "tsv": ("csv", {"sep": "\t"}), "json": ("json", {}), "parquet": ("parquet", {})}
_BUILDERS |= {"arrow": ("arrow", {}), "text": ("text", {})}


def read_source(options: dict, cache_dir: Path | None = None) -> RawSource:
    """The splits of the source that ``options`` (a custom task's ``task_options``) names, as read.

    Only :data:`SOURCE_KEYS` are looked at. Errors are one line naming the file, the problem and the fix.
    """
    given = [k for k in ("data_files", "data_dir", "hub_id") if options.get(k) not in (None, "", [], {})]
    if len(given) != 1:
        what = f"{' and '.join(given)} are both given" if given else "no source is given"
        raise ValueError(
            f"custom task: {what}; set exactly one of task_options.data_files (files), data_dir (a folder) "
            "or hub_id (a Hub dataset id)"
        )
    fmt = FORMAT_ALIASES.get(options.get("format"), options.get("format"))
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"custom task: format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
    if given[0] == "hub_id":
        return read_hub(options["hub_id"], options.get("hub_config"), options.get("hub_revision"))
    if given[0] == "data_dir":
        from .folders import read_data_dir  # a layout of files, read through read_files

        return read_data_dir(Path(options["data_dir"]).expanduser(), fmt, cache_dir)
    return read_files(resolve_files(options["data_files"]), fmt, cache_dir)


def _expand(pattern: str | Path) -> list[Path]:
    text = str(Path(pattern).expanduser())
    if any(c in text for c in "*?["):
        found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not found:
            raise FileNotFoundError(f"custom task: data_files pattern {text!r} matches no file; check the path")
        return found
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"custom task: data_files {text!r} is a folder; use data_dir for a folder, or a glob")
    if not path.is_file():
        raise FileNotFoundError(f"custom task: data file {text!r} does not exist; check the path")
    return [path]


def resolve_files(data_files) -> dict[str | None, list[Path]]:
    """``{split: [files]}``; the key is ``None`` when no mapping named the splits."""
    if isinstance(data_files, dict):
        return {str(s): _expand_all(v, str(s)) for s, v in data_files.items()}
    return {None: _expand_all(data_files)}


def _expand_all(value, split: str | None = None) -> list[Path]:
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"custom task: data_files{f' for split {split!r}' if split else ''} is empty; give files")
    return [p for item in items for p in _expand(item)]


def split_of(path: Path) -> str | None:
    """The split a file name names: a word ``train``/``training``, ``test``/``testing`` or ``validation``/``valid``/
    ``val``/``dev`` in its stem (``GunPoint_TRAIN.ts``, ``train.csv``, ``dev-00000.parquet``); else ``None``."""
    words = [w for w in re.split(r"[^a-z]+", path.name.lower().split(".")[0]) if w]
    found = {SPLIT_WORDS[w] for w in words if w in SPLIT_WORDS}
    return found.pop() if len(found) == 1 else None


def name_splits(files: dict[str | None, list[Path]]) -> dict[str, list[Path]]:
    """Splits from file names when no mapping named them: all files name a split, or none does (one ``train``)."""
    if None not in files:
        return files
    paths = files[None]
    named = {p: split_of(p) for p in paths}
    if all(s is None for s in named.values()):
        return {"train": paths}
    unnamed = [p.name for p, s in named.items() if s is None]
    if unnamed:
        raise ValueError(
            f"custom task: {', '.join(unnamed)} name no split while other data_files do; "
            "give data_files as a mapping {train: ..., test: ...}"
        )
    splits: dict[str, list[Path]] = {}
    for path, split in named.items():
        splits.setdefault(split, []).append(path)
    return splits


def format_of(paths: list[Path], fmt: str | None) -> str:
    """The one format of ``paths``: ``fmt`` when given, else their extensions (all the same)."""
    if fmt is not None:
        return fmt
    kinds = {EXTENSIONS.get(p.suffix.lower()) for p in paths}
    if None in kinds:
        odd = next(p for p in paths if p.suffix.lower() not in EXTENSIONS)
        raise ValueError(
            f"custom task: {odd}: unknown format {odd.suffix!r}; use files ending in {', '.join(EXTENSIONS)} "
            f"or set task_options.format to one of {', '.join(FORMATS)}"
        )
    if len(kinds) > 1:
        raise ValueError(f"custom task: data_files mix formats {sorted(kinds)}; use one format per source")
    return kinds.pop()


def read_files(files: dict[str | None, list[Path]], fmt: str | None, cache_dir: Path | None) -> RawSource:
    """The splits of local files, each split from its files, all in one format."""
    splits = name_splits(files)
    all_paths = [p for paths in splits.values() for p in paths]
    fmt = format_of(all_paths, fmt)
    for path in all_paths:
        if path.stat().st_size == 0:
            raise DataFormatError(f"{path}: the file is empty; give a file with rows")
    description = " + ".join(p.name for p in all_paths)
    if fmt == "npz":
        if len(all_paths) != 1:
            raise ValueError("custom task: give one .npz file (its arrays X_<split>/y_<split> name the splits)")
        read = readers.read_npz(all_paths[0], cache_dir)
        return RawSource(read, "npz", tuple(all_paths), description, columns_info=readers.SERIES_INFO)
    if fmt in _BUILDERS:
        if fmt in ("csv", "tsv"):
            for path in all_paths:
                _check_header(path, "\t" if fmt == "tsv" else ",")
        out = {split: _load_packaged(fmt, split, paths, cache_dir) for split, paths in splits.items()}
        return RawSource(out, fmt, tuple(all_paths), description, label_hint=class_label_hint(out))
    out, hints = {}, {}
    for split, paths in splits.items():
        if fmt == "ts":
            out[split], hints[split] = readers.read_ts_split(paths, cache_dir)
        elif fmt == "ucr":
            out[split], hints[split] = readers.read_ucr_split(paths, cache_dir)
        else:
            out[split] = readers.read_fasta_split(paths, cache_dir)
    hint = hints.get("train", next(iter(hints.values()), None))  # the training split's header states the classes
    if len({h and h.problem_type for h in hints.values()}) > 1:
        raise DataFormatError(f"custom task: {description}: the splits' label headers disagree; one kind per source")
    info = readers.SERIES_INFO if fmt in ("ts", "ucr") else {}
    return RawSource(out, fmt, tuple(all_paths), description, label_hint=hint, columns_info=info)


def _check_header(path: Path, sep: str) -> None:
    """A csv/tsv's first line must be a header: all numbers there is UCR text or a file without one."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20).decode("utf-8", errors="replace")
    fields = first.strip().split(sep)
    try:
        [float(x) for x in fields]
    except ValueError:
        return
    raise DataFormatError(
        f"{path}:1: the first line is all numbers, not a header of column names; for UCR text (the label first, then "
        "the values) set task_options.format: ucr, otherwise add a header line"
    )


def _load_packaged(fmt: str, split: str, paths: list[Path], cache_dir: Path | None) -> datasets.Dataset:
    """One split through a ``datasets`` packaged builder (Arrow cache, memory-mapped)."""
    builder, kwargs = _BUILDERS[fmt]
    try:
        return datasets.load_dataset(
            builder,
            data_files={split: [str(p) for p in paths]},
            split=split,
            cache_dir=str(cache_dir) if cache_dir else None,
            **kwargs,
        )
    except (datasets.exceptions.DatasetGenerationError, UnicodeDecodeError, ValueError) as err:
        if fmt in ("csv", "tsv", "json", "text"):
            for path in paths:  # only now, on failure: find the first undecodable line
                for _ in text_lines(path, f"UTF-8 {fmt}"):
                    pass
        cause = err.__cause__ or err
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        names = ", ".join(str(p) for p in paths)
        raise DataFormatError(f"{names}: could not be read as {fmt} ({first}); check the file or set format") from None


def class_label_hint(splits: dict[str, datasets.Dataset]) -> LabelHint | None:
    """A ``ClassLabel`` feature is the source stating its classes (``label`` first, else the first such column)."""
    features = next(iter(splits.values())).features if splits else {}
    found = [name for name, f in features.items() if isinstance(f, datasets.ClassLabel)]
    if not found:
        return None
    column = "label" if "label" in found else found[0]
    names = tuple(features[column].names)
    return LabelHint(readers.CLASSIFICATION, names, f"ClassLabel feature {column!r} ({len(names)} names)", column)


def read_hub(hub_id: str, config: str | None, revision: str | None) -> RawSource:
    """A Hub dataset through ``datasets.load_dataset``, in ``datasets``' own cache (``HF_DATASETS_CACHE``), where a
    ``load_dataset(hub_id)`` run once online put it, so that it is found offline."""
    try:
        loaded = datasets.load_dataset(hub_id, name=config, revision=revision)
    except Exception as err:  # datasets raises many kinds here (ConnectionError, DatasetNotFoundError, ...)
        if datasets.config.HF_HUB_OFFLINE:
            raise ValueError(
                f"custom task: hub_id {hub_id!r} is not in the local cache and this machine is offline "
                "(HF_HUB_OFFLINE=1); download it once online (datasets.load_dataset) or use data_files"
            ) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(
            f"custom task: hub_id {hub_id!r} could not be loaded ({type(err).__name__}: {first}); "
            "check the id, hub_config and hub_revision"
        ) from None
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    splits = dict(loaded)
    revision = _resolved_revision(splits) or revision
    description = f"{hub_id}" + (f" ({config})" if config else "") + (f" @ {revision}" if revision else "")
    return RawSource(
        splits,
        "hub",
        (),
        description,
        class_label_hint(splits),
        hub_id=hub_id,
        hub_config=config,
        hub_revision=revision,
    )


def _resolved_revision(splits: dict[str, datasets.Dataset]) -> str | None:
    """The Hub commit a dataset was read at: a 40-hex folder in its cache files' path, when there is one."""
    for ds in splits.values():
        for cache_file in ds.cache_files:
            found = re.findall(r"(?:^|/)([0-9a-f]{40})(?:/|$)", cache_file["filename"])
            if found:
                return found[-1]
    return None
