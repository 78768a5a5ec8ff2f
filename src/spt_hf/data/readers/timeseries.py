"""The ``.ts`` time-series format of the Monash TSER / UEA archives (BIDMC32HR/RR/SpO2, aeon's bundled sets).

A ``.ts`` file is a header of ``@key value`` lines (``#`` and ``%`` comments allowed) closed by ``@data``, then one
series per line: the dimensions separated by ``:``, the values of a dimension by ``,``, and the target last (a float
for regression files, which declare ``@targetLabel true``).

For BIDMC (:func:`read_ts`), missing values (``?``, ``NaN``, ``inf``) are refused with an error naming the file,
the line, the dimension and the step: the models cannot train on them, and how to fill them (interpolation, a mask
channel) is the user's choice, to be made before loading. The custom task's reader (:func:`iter_ts` with
``missing_ok``) keeps ``?``/``NaN`` as NaN for its ``missing`` policy, and reads ``@classLabel`` files too.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..spec import DataFormatError, Source, text_lines

TS_FORMAT = (
    "a .ts file: '@key value' header lines, '@targetLabel true', '@data', then one series per line as "
    "'v,v,...:v,v,...:TARGET' (dimensions separated by ':', no timestamps, no missing values)"
)


def aeon_data_dir() -> Path | None:
    """The folder of ``.ts`` sets bundled with the optional ``aeon`` package, found without importing it."""
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    return folder if folder.is_dir() else None


def locate_ts(dataset_name: str, data_dir: str | Path | None) -> Source:
    """``<name>_TRAIN.ts`` and ``<name>_TEST.ts`` in ``data_dir`` or ``data_dir/<name>``; aeon's data by default."""
    roots = [Path(data_dir).expanduser()] if data_dir is not None else []
    if data_dir is None and (aeon := aeon_data_dir()) is not None:
        roots.append(aeon)
    tried = []
    for root in roots:
        for folder in (root, root / dataset_name):
            files = (folder / f"{dataset_name}_TRAIN.ts", folder / f"{dataset_name}_TEST.ts")
            if all(f.is_file() for f in files):
                return Source(root=folder, files=files)
            tried.append(str(folder))
    raise FileNotFoundError(
        f"bidmc: could not find {dataset_name}_TRAIN.ts and {dataset_name}_TEST.ts; looked in {tried or 'nothing'}. "
        "Point data_dir at the folder of the Monash TSER .ts files (BIDMC32HR/RR/SpO2) or install `aeon` for its "
        "bundled regression sets (dataset_name='Covid3Month' or 'CardanoSentiment')."
    )


def _parse_header(path: Path, lines: Iterator[tuple[int, str]]) -> dict[str, str]:
    header: dict[str, str] = {}
    for lineno, line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "%")):
            continue
        if not line.startswith("@"):
            raise DataFormatError(f"{path}:{lineno}: expected a header line before '@data'; expected {TS_FORMAT}")
        key, _, value = line[1:].partition(" ")
        if key.lower() == "data":
            return header
        header[key.lower()] = value.strip()
    raise DataFormatError(f"{path}: no '@data' line; expected {TS_FORMAT}")


def read_ts_header(path: Path) -> dict[str, str]:
    """The ``@key value`` header of a ``.ts`` file, keys lower-cased (``@problemName`` and ``@problemname`` alike)."""
    header = _parse_header(path, text_lines(path, TS_FORMAT, newline=None))
    if header.get("timestamps", "false").lower() == "true":
        raise DataFormatError(
            f"{path}: series with timestamps ('@timeStamps true') are not supported; "
            f"write the values only (drop the '(time,value)' pairs) and set '@timeStamps false'; expected {TS_FORMAT}"
        )
    return header


def _parse_dimension(text: str, where: str, dim: int, missing_ok: bool = False) -> np.ndarray:
    """One dimension ``v,v,...`` as float64; a missing, non-numeric or non-finite value names its step.

    With ``missing_ok``, ``?`` and ``NaN`` are kept as NaN (the custom task's ``missing`` policy decides later).
    """
    fields = text.split(",")
    if missing_ok:
        fields = ["nan" if f.strip() == "?" else f for f in fields]
    try:
        values = np.array(fields, dtype=np.float64)  # (L,)
    except ValueError:
        values = None
    if values is not None:
        finite = np.isfinite(values) | (np.isnan(values) if missing_ok else False)
    else:
        finite = [_is_finite(f) for f in fields]
    if not np.all(finite):
        step = int(np.argmin(finite))
        kind = "not a number or not finite" if missing_ok else "missing, not a number or not finite"
        fix = "" if missing_ok else " (missing values are refused: fill them before loading)"
        raise DataFormatError(
            f"{where}: dimension {dim}, step {step}: value {fields[step].strip()!r} is {kind}{fix}; "
            f"expected {TS_FORMAT}"
        )
    return values


def _is_finite(text: str) -> bool:
    try:
        return bool(np.isfinite(float(text)))
    except ValueError:
        return False


def iter_ts(
    path: Path, num_channels: int | None, has_target: bool = True, missing_ok: bool = False
) -> Iterator[tuple[str, np.ndarray, str | None]]:
    """``(where, series (L, C) float32, target text)`` for each series of a ``.ts`` file, header skipped.

    Args:
        num_channels: the expected channel count; ``None`` takes it from the first series (later ones must match).
        has_target: the last ``:`` field is the target (``@classLabel true`` or ``@targetLabel true``).
        missing_ok: keep ``?``/``NaN`` as NaN instead of refusing them.
    """
    lines = text_lines(path, TS_FORMAT, newline=None)
    _parse_header(path, lines)
    empty = True
    for lineno, line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "%")):
            continue
        where = f"{path}:{lineno}"
        dims = line.split(":")
        target = dims.pop() if has_target else None
        if num_channels is None:
            num_channels = len(dims)
        if len(dims) != num_channels:
            raise DataFormatError(
                f"{where}: {len(dims)} dimensions, expected {num_channels} (every series needs the same channel count; "
                f"pass num_channels={len(dims)} if that is right); expected {TS_FORMAT}"
            )
        series = [_parse_dimension(d, where, i, missing_ok) for i, d in enumerate(dims)]
        if len({s.shape[0] for s in series}) != 1:
            raise DataFormatError(
                f"{where}: dimensions of different lengths {[s.shape[0] for s in series]}; expected {TS_FORMAT}"
            )
        values = np.stack(series, axis=1).astype(np.float32)  # (L, C)
        if not (np.isfinite(values) | np.isnan(values) if missing_ok else np.isfinite(values)).all():
            raise DataFormatError(f"{where}: values beyond the float32 range; expected {TS_FORMAT}")
        empty = False
        yield where, values, target
    if empty:
        raise DataFormatError(f"{path}: no series after '@data'; expected {TS_FORMAT}")


def read_ts(path: Path, num_channels: int) -> Iterator[tuple[np.ndarray, float]]:
    """Series of shape (L, C) as float32 and float targets of one regression ``.ts`` file."""
    header = read_ts_header(path)
    if header.get("targetlabel", "").lower() != "true":
        raise DataFormatError(
            f"{path}: not a regression file ('@targetLabel true' missing; found {sorted(header)}); expected {TS_FORMAT}"
        )
    for where, values, target in iter_ts(path, num_channels):
        if not _is_finite(target):
            raise DataFormatError(
                f"{where}: target {target.strip()!r} is missing or not a finite number; expected {TS_FORMAT}"
            )
        yield values, float(target)


def ts_examples(path: Path, num_channels: int, max_length: int) -> Callable[[], Iterator[dict]]:
    """Examples ``input_values`` (L, C) raw, truncated to ``max_length``, and a float ``label``."""

    def gen() -> Iterator[dict]:
        for values, target in read_ts(path, num_channels):
            yield {"input_values": values[:max_length], "label": target}

    return gen
