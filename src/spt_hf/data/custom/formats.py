"""The file formats a custom task reads: one table, :data:`FORMATS`, one :class:`Format` row per format.

A row says how the format is detected (the file's suffix; UCR's whitespace text says nothing in its suffix, so it is
chosen by ``format: ucr`` only), how its files are read, and the reader's defaults. csv, tsv, json/jsonl, parquet,
arrow and txt go through ``datasets``' packaged builders (an Arrow cache under ``cache_dir``, memory-mapped);
``.ts``, UCR text, FASTA and ``.npz`` through our readers (:mod:`.readers`), which also end in an Arrow cache.
Adding a format is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from ..spec import DataFormatError, text_lines
from . import readers
from .raw import LabelHint

Splits = dict[str, list[Path]]
Read = tuple[dict[str, datasets.Dataset], LabelHint | None]
TEXT_BUILDERS = ("csv", "json", "text")  # packaged builders of UTF-8 text: a failed read names the first bad line


@dataclass(frozen=True)
class Format:
    """One row of :data:`FORMATS`.

    Args:
        name: the value of ``task_options.format`` that chooses it, and the source's ``kind`` in the task card.
        suffixes: the lower-case file endings that select it; each one without its dot is a ``format:`` value too
            (``jsonl``, ``txt``, ``fa``). Empty: chosen by ``format:`` only.
        read: ``read(format, {split: [paths]}, cache_dir)`` -> ``({split: Dataset}, LabelHint | None)``.
        defaults: the reader's settings: for a packaged format, the ``datasets`` ``builder`` and its options
            (``sep``).
        columns_info: what the columns the reader makes hold (``spt-hf inspect``).
    """

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Format, Splits, Path | None], Read]
    defaults: Mapping[str, Any] = field(default_factory=dict, hash=False)
    columns_info: Mapping[str, str] = field(default_factory=dict, hash=False)

    def matches(self, path: Path) -> bool:
        """Whether ``path``'s suffix selects this format."""
        return path.suffix.lower() in self.suffixes


def class_label_hint(splits: dict[str, datasets.Dataset]) -> LabelHint | None:
    """A ``ClassLabel`` feature is the source stating its classes (``label`` first, else the first such column)."""
    features = next(iter(splits.values())).features if splits else {}
    found = [name for name, f in features.items() if isinstance(f, datasets.ClassLabel)]
    if not found:
        return None
    column = "label" if "label" in found else found[0]
    names = tuple(features[column].names)
    return LabelHint(readers.CLASSIFICATION, names, f"ClassLabel feature {column!r} ({len(names)} names)", column)


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


def _load_packaged(fmt: Format, split: str, paths: list[Path], cache_dir: Path | None) -> datasets.Dataset:
    """One split through a ``datasets`` packaged builder (Arrow cache, memory-mapped)."""
    options = dict(fmt.defaults)
    builder = options.pop("builder")
    try:
        return datasets.load_dataset(
            builder,
            data_files={split: [str(p) for p in paths]},
            split=split,
            cache_dir=str(cache_dir) if cache_dir else None,
            **options,
        )
    except (datasets.exceptions.DatasetGenerationError, UnicodeDecodeError, ValueError) as err:
        if builder in TEXT_BUILDERS:
            for path in paths:  # only now, on failure: find the first undecodable line
                for _ in text_lines(path, f"UTF-8 {fmt.name}"):
                    pass
        cause = err.__cause__ or err
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        names = ", ".join(str(p) for p in paths)
        raise DataFormatError(
            f"{names}: could not be read as {fmt.name} ({first}); check the file or set format"
        ) from None


def read_packaged(fmt: Format, splits: Splits, cache_dir: Path | None) -> Read:
    """Every split through ``fmt.defaults["builder"]``; a ``ClassLabel`` feature is the label hint."""
    if fmt.defaults["builder"] == "csv":
        for path in (p for paths in splits.values() for p in paths):
            _check_header(path, fmt.defaults.get("sep", ","))
    out = {split: _load_packaged(fmt, split, paths, cache_dir) for split, paths in splits.items()}
    return out, class_label_hint(out)


def _labelled_splits(read_split: Callable, splits: Splits, cache_dir: Path | None) -> Read:
    """Each split by ``read_split`` (a dataset and its header's label hint); the splits' hints must agree."""
    out, hints = {}, {}
    for split, paths in splits.items():
        out[split], hints[split] = read_split(paths, cache_dir)
    if len({h and h.problem_type for h in hints.values()}) > 1:
        description = " + ".join(p.name for paths in splits.values() for p in paths)
        raise DataFormatError(f"custom task: {description}: the splits' label headers disagree; one kind per source")
    return out, hints.get("train", next(iter(hints.values()), None))  # the training split's header states classes


def read_ts(fmt: Format, splits: Splits, cache_dir: Path | None) -> Read:
    """``.ts`` files (UCR/UEA, Monash), the label hint from the train split's header."""
    return _labelled_splits(readers.read_ts_split, splits, cache_dir)


def read_ucr(fmt: Format, splits: Splits, cache_dir: Path | None) -> Read:
    """UCR whitespace text: the label first, then the values; a classification archive."""
    return _labelled_splits(readers.read_ucr_split, splits, cache_dir)


def read_fasta(fmt: Format, splits: Splits, cache_dir: Path | None) -> Read:
    """FASTA records: ``id``, ``sequence`` and the header's ``label`` when it carries one."""
    return {split: readers.read_fasta_split(paths, cache_dir) for split, paths in splits.items()}, None


def read_npz(fmt: Format, splits: Splits, cache_dir: Path | None) -> Read:
    """One ``.npz`` file whose arrays ``X_<split>``/``y_<split>`` (or ``X``/``y``) name the splits."""
    paths = [p for group in splits.values() for p in group]
    if len(paths) != 1:
        raise ValueError("custom task: give one .npz file (its arrays X_<split>/y_<split> name the splits)")
    return readers.read_npz(paths[0], cache_dir), None


FORMATS = (
    Format("csv", (".csv",), read_packaged, {"builder": "csv"}),
    Format("tsv", (".tsv",), read_packaged, {"builder": "csv", "sep": "\t"}),
    Format("json", (".json", ".jsonl"), read_packaged, {"builder": "json"}),
    Format("parquet", (".parquet",), read_packaged, {"builder": "parquet"}),
    Format("arrow", (".arrow",), read_packaged, {"builder": "arrow"}),
    Format("text", (".txt",), read_packaged, {"builder": "text"}),
    Format("ts", (".ts",), read_ts, columns_info=readers.SERIES_INFO),
    Format("ucr", (), read_ucr, columns_info=readers.SERIES_INFO),
    Format("fasta", (".fa", ".fasta", ".fna"), read_fasta),
    Format("npz", (".npz",), read_npz, columns_info=readers.SERIES_INFO),
)
_NAMED = {f.name: f for f in FORMATS} | {s[1:]: f for f in FORMATS for s in f.suffixes}
SUFFIXES = tuple(s for f in FORMATS for s in f.suffixes)


def format_named(name: str | None) -> Format | None:
    """The row ``task_options.format`` names (a format's name or one of its suffixes without the dot); ``None``
    when not given. An unknown name is a one-line error listing the table's names."""
    if name is None:
        return None
    if name not in _NAMED:
        raise ValueError(f"custom task: format {name!r} is unknown; use one of {', '.join(f.name for f in FORMATS)}")
    return _NAMED[name]


def detect(path: Path) -> Format | None:
    """The row whose suffix ``path`` has, else ``None``."""
    return next((f for f in FORMATS if f.matches(path)), None)


def format_of(paths: list[Path], fmt: Format | None) -> Format:
    """The one format of ``paths``: ``fmt`` when given, else their suffixes' (all the same)."""
    if fmt is not None:
        return fmt
    found = {path: detect(path) for path in paths}
    odd = next((path for path, f in found.items() if f is None), None)
    if odd is not None:
        raise ValueError(
            f"custom task: {odd}: unknown format {odd.suffix!r}; use files ending in {', '.join(SUFFIXES)} "
            f"or set task_options.format to one of {', '.join(f.name for f in FORMATS)}"
        )
    names = sorted({f.name for f in found.values()})
    if len(names) > 1:
        raise ValueError(f"custom task: data_files mix formats {names}; use one format per source")
    return found[paths[0]]
