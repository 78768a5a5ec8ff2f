"""Our readers for the sequence formats ``datasets`` has no builder for: ``.ts``, UCR text, FASTA and ``.npz``.

Each yields rows into ``datasets.Dataset.from_generator`` (cached under ``cache_dir``, keyed by the files' paths,
sizes and modification times), so the rows end up in a memory-mapped Arrow table, never in a Python list.

Series are stored as ``input_values`` of shape ``(L, C)`` (time first, channels last; ``C == 1`` for univariate
series) as an ``Array2D`` whose first dimension is free, so unequal lengths are kept, unpadded.

FASTA: each record is ``>header`` then sequence lines. The ``id`` is the header's first word; the label is the
value of a ``label=VALUE`` word in the header, else the last ``|``-separated field of the first word
(``>seq7|promoter``: id ``seq7``, label ``promoter``). Files whose headers carry no label give no ``label`` column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import datasets
import numpy as np

from ..readers.timeseries import TS_FORMAT, iter_ts, read_ts_header
from ..spec import DataFormatError, text_lines
from .raw import LabelHint

UCR_FORMAT = "UCR text: one series per line, the label first, then the values, separated by whitespace or commas"
UCR_NAME = re.compile(r".+_(TRAIN|TEST)")  # the archive's own file names (stem), upper case as it ships them
UCR_SUFFIXES = ("", ".txt", ".tsv", ".csv")  # the endings the archive's releases use (2015: none, 2018: .tsv)
UCR_SEPARATORS = re.compile(r"[\s,]+")
FASTA_FORMAT = "FASTA: '>id label=VALUE' (or '>id|VALUE') header lines, each followed by sequence lines"
NPZ_FORMAT = "an .npz file with arrays X (N, L) or (N, L, C) and y (N,), or X_<split> and y_<split>"
CLASSIFICATION = "single_label_classification"
SERIES_INFO = {"input_values": "series (L, C) float32: time first, channels last; lengths may differ; NaN = missing"}


def file_stamp(paths: list[Path]) -> str:
    """Paths, sizes and modification times: the cache key of a generated dataset (an edited file rebuilds it)."""
    return ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in paths)


def series_features(num_channels: int, label: datasets.Value | None) -> datasets.Features:
    """``input_values`` (L, C) float32 with a free length, and a ``label`` column when given."""
    features = {"input_values": datasets.Array2D((None, num_channels), "float32")}
    return datasets.Features({**features, **({"label": label} if label is not None else {})})


def generate(
    gen: Callable[..., Iterator[dict]], paths: list[Path], features: datasets.Features, cache_dir: Path | None, **kw
) -> datasets.Dataset:
    """``Dataset.from_generator`` over ``paths``; our one-line errors come out unwrapped."""
    kwargs = {"paths": "\n".join(str(p) for p in paths), "stamp": file_stamp(paths), **kw}
    try:
        return datasets.Dataset.from_generator(
            gen, features=features, gen_kwargs=kwargs, cache_dir=str(cache_dir) if cache_dir else None
        )
    except datasets.exceptions.DatasetGenerationError as err:
        if isinstance(err.__cause__, (DataFormatError, ValueError)):
            raise err.__cause__ from None
        raise


def _paths(paths: str) -> list[Path]:
    return [Path(p) for p in paths.split("\n")]


# ---------------------------------------------------------------- .ts (UCR/UEA, Monash)
def ts_label_hint(path: Path, header: dict[str, str]) -> LabelHint | None:
    """``@classLabel true a b c`` -> classification with the header's class order; ``@targetLabel true`` ->
    regression; neither -> no label."""
    cls = header.get("classlabel", "false").split()
    if cls and cls[0].lower() == "true":
        names = tuple(cls[1:]) or None
        return LabelHint(CLASSIFICATION, names, f"@classLabel {header['classlabel']} in {path.name}", "label")
    if header.get("targetlabel", "false").lower() == "true":
        return LabelHint("regression", None, f"@targetLabel true in {path.name}", "label")
    return None


def _gen_ts(paths: str, stamp: str, has_target: bool, regression: bool, classes: str) -> Iterator[dict]:
    channels, names = None, set(classes.split("\n")) if classes else None
    for path in _paths(paths):
        for where, values, target in iter_ts(path, channels, has_target=has_target, missing_ok=True):
            channels = values.shape[1]
            row = {"input_values": values}
            if has_target:
                target = target.strip()
                if not target or target == "?":
                    raise DataFormatError(f"{where}: the label (last ':' field) is empty or '?'; expected {TS_FORMAT}")
                if names is not None and target not in names:
                    raise DataFormatError(
                        f"{where}: label {target!r} is not among the header's @classLabel names; add it to the header"
                    )
                row["label"] = _float_label(target, where, TS_FORMAT) if regression else target
            yield row


def read_ts_split(paths: list[Path], cache_dir: Path | None) -> tuple[datasets.Dataset, LabelHint | None]:
    """One split from ``.ts`` files sharing a header kind; ``?`` values are kept as NaN."""
    headers = [read_ts_header(p) for p in paths]
    hint = ts_label_hint(paths[0], headers[0])
    for path, header in zip(paths[1:], headers[1:]):
        other = ts_label_hint(path, header)
        if (other and other.problem_type) != (hint and hint.problem_type):
            raise DataFormatError(f"{path}: its label header differs from {paths[0].name}'s; one kind per source")
    first = next(iter_ts(paths[0], None, has_target=hint is not None, missing_ok=True))
    regression = hint is not None and hint.problem_type == "regression"
    label = (datasets.Value("float64") if regression else datasets.Value("string")) if hint else None
    features = series_features(first[1].shape[1], label)
    classes = "\n".join(hint.class_names) if hint and hint.class_names else ""
    ds = generate(_gen_ts, paths, features, cache_dir, has_target=bool(hint), regression=regression, classes=classes)
    return ds, hint


# ---------------------------------------------------------------- UCR whitespace text
def _float_label(text: str, where: str, fmt: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise DataFormatError(f"{where}: label {text!r} is not a number; expected {fmt}") from None


def ucr_label(text: str) -> str:
    """UCR writes classes as numbers, sometimes as floats (``1.0000000e+00``): integral numbers become ``"1"``."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def ucr_row(line: str) -> bool:
    """Whether a line reads as a UCR series: two or more numbers (``?``/``NaN`` for missing values), separated by
    whitespace or commas, the first an integral number (the class, ``1`` or ``1.0000000e+00``)."""
    fields = UCR_SEPARATORS.split(line.strip())
    try:
        label = float(fields[0])
        [float("nan" if f == "?" else f) for f in fields[1:]]
    except ValueError:
        return False
    return len(fields) >= 2 and math.isfinite(label) and label.is_integer()


def first_line(path: Path) -> str:
    """The first non-blank line of a file (at most 1 MiB of it), decoded leniently: for sniffing only."""
    with open(path, "rb") as f:
        for raw in f:
            line = raw[: 1 << 20].decode("utf-8", errors="replace").lstrip("\ufeff")
            if line.strip():
                return line
    return ""


def is_ucr_file(path: Path) -> bool:
    """Whether ``path`` is a file of the UCR archive as it ships: named ``<Name>_TRAIN`` or ``<Name>_TEST`` (no
    ending, ``.txt``, ``.tsv`` or ``.csv``) and starting with a :func:`ucr_row` (not a header of column names)."""
    path = Path(path)
    stem = path.name[: len(path.name) - len(path.suffix)]
    if path.suffix.lower() not in UCR_SUFFIXES or not UCR_NAME.fullmatch(stem):
        return False
    return path.is_file() and ucr_row(first_line(path))


def _gen_ucr(paths: str, stamp: str) -> Iterator[dict]:
    for path in _paths(paths):
        empty = True
        for lineno, line in text_lines(path, UCR_FORMAT, newline=None):
            fields = UCR_SEPARATORS.split(line.strip()) if line.strip() else []
            if not fields:
                continue
            where = f"{path}:{lineno}"
            values = np.array(["nan" if f in ("?", "NaN") else f for f in fields[1:]] or ["x"], dtype=object)
            try:
                series = values.astype(np.float32)
            except ValueError:
                raise DataFormatError(
                    f"{where}: a value is not a number (or no values); expected {UCR_FORMAT}"
                ) from None
            empty = False
            yield {"input_values": series[:, None], "label": ucr_label(fields[0])}
        if empty:
            raise DataFormatError(f"{path}: no series in the file; expected {UCR_FORMAT}")


def read_ucr_split(paths: list[Path], cache_dir: Path | None) -> tuple[datasets.Dataset, LabelHint]:
    """One split of UCR text files; the UCR archive is a classification archive, so the hint says so."""
    ds = generate(_gen_ucr, paths, series_features(1, datasets.Value("string")), cache_dir)
    names = ", ".join(p.name for p in paths)
    return ds, LabelHint(CLASSIFICATION, None, f"format: ucr ({names}; UCR is a classification archive)", "label")


# ---------------------------------------------------------------- FASTA
def fasta_header(header: str) -> tuple[str, str | None]:
    """``(id, label)`` of a FASTA header without its ``>``, by the rule in this module's docstring."""
    words = header.split()
    first = words[0] if words else ""
    for word in words[1:]:
        if word.startswith("label="):
            return first, word[len("label=") :]
    if "|" in first:
        ident, _, label = first.rpartition("|")
        return ident, label or None
    return first, None


def _fasta_records(path: Path) -> Iterator[tuple[str, str, str | None, list[str]]]:
    where, ident, label, chunks = "", None, None, []
    for lineno, line in text_lines(path, FASTA_FORMAT, newline=None):
        line = line.strip()
        if line.startswith(">"):
            if ident is not None:
                yield where, ident, label, chunks
            where, (ident, label), chunks = f"{path}:{lineno}", fasta_header(line[1:]), []
        elif line and not line.startswith(";"):
            if ident is None:
                raise DataFormatError(f"{path}:{lineno}: sequence before any '>' header; expected {FASTA_FORMAT}")
            chunks.append(line)
    if ident is None:
        raise DataFormatError(f"{path}: no '>' record in the file; expected {FASTA_FORMAT}")
    yield where, ident, label, chunks


def _gen_fasta(paths: str, stamp: str, labelled: bool) -> Iterator[dict]:
    for path in _paths(paths):
        for where, ident, label, chunks in _fasta_records(path):
            if not chunks:
                raise DataFormatError(f"{where}: record {ident!r} has an empty sequence; expected {FASTA_FORMAT}")
            if labelled != (label is not None):
                state = "no label while the first record has one" if labelled else "a label while the first has none"
                raise DataFormatError(f"{where}: record {ident!r} has {state}; expected {FASTA_FORMAT}")
            yield {"id": ident, "sequence": "".join(chunks), **({"label": label} if labelled else {})}


def read_fasta_split(paths: list[Path], cache_dir: Path | None) -> datasets.Dataset:
    """One split of FASTA files: columns ``id``, ``sequence`` and ``label`` when the first header carries one."""
    labelled = next(_fasta_records(paths[0]))[2] is not None
    columns = {"id": datasets.Value("string"), "sequence": datasets.Value("string")}
    features = datasets.Features({**columns, **({"label": datasets.Value("string")} if labelled else {})})
    return generate(_gen_fasta, paths, features, cache_dir, labelled=labelled)


# ---------------------------------------------------------------- .npz
def npz_arrays(path: Path) -> dict[str, tuple[str, str]]:
    """split -> (X key, y key): ``X``/``y`` is one ``train`` split, ``X_<split>``/``y_<split>`` are several."""
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
    if {"X", "y"} <= keys:
        return {"train": ("X", "y")}
    pairs = {k[2:]: (k, "y" + k[1:]) for k in sorted(keys) if k.startswith("X_") and "y" + k[1:] in keys}
    if not pairs:
        raise DataFormatError(f"{path}: arrays {sorted(keys)} found; expected {NPZ_FORMAT}")
    return pairs


def _gen_npz(paths: str, stamp: str, x_key: str, y_key: str) -> Iterator[dict]:
    (path,) = _paths(paths)
    with np.load(path, allow_pickle=False) as z:
        x, y = z[x_key], z[y_key]
    for i in range(x.shape[0]):
        row = x[i].astype(np.float32)
        yield {"input_values": row[:, None] if row.ndim == 1 else row, "label": y[i].item()}


def read_npz(path: Path, cache_dir: Path | None) -> dict[str, datasets.Dataset]:
    """The splits of one ``.npz`` file; ``X`` of shape (N, L) is univariate, (N, L, C) has channels last."""
    splits = {}
    for split, (x_key, y_key) in npz_arrays(path).items():
        try:
            with np.load(path, allow_pickle=False) as z:
                x, y = z[x_key], z[y_key]
        except ValueError as err:  # object arrays need pickle, which is never allowed here
            raise DataFormatError(f"{path}: {x_key}/{y_key}: {err}; save numeric or string arrays") from None
        if x.ndim not in (2, 3) or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise DataFormatError(f"{path}: {x_key} {x.shape} and {y_key} {y.shape} do not fit; expected {NPZ_FORMAT}")
        kind = "string" if y.dtype.kind in "US" else "int64" if y.dtype.kind in "iub" else "float64"
        features = series_features(1 if x.ndim == 2 else x.shape[2], datasets.Value(kind))
        splits[split] = generate(_gen_npz, [path], features, cache_dir, x_key=x_key, y_key=y_key)
    return splits
