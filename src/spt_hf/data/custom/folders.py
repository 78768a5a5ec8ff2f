"""A custom task's ``data_dir``: the folder's layout, detected in this order (the first that matches wins).

1. A ``save_to_disk`` folder (``dataset_dict.json``: a ``DatasetDict``; ``state.json``: one ``Dataset``, the
   ``train`` split): read with ``datasets.load_from_disk``, memory-mapped.
2. A ``<name>_TRAIN.ts`` / ``<name>_TEST.ts`` pair. Several pairs (aeon's unequal-length folders also hold
   ``<name>_eq_*``) are refused: name the files with ``data_files``.
3. Split-named files at the top of the folder (``train.csv``, ``test.parquet``, ``dev.jsonl``...; see
   :func:`.files.split_of`), in one format; else split folders of data files (``train/part-0.parquet``...).
4. Class folders ``[split/]<label>/<file>``: each file is one example, its folder name the label. A ``.npy`` file
   (``(L,)`` or ``(L, C)``) or a ``.csv`` file (one time step per line, channels separated by ``,``, an optional
   header line) is a series, stored ``(L, C)`` in ``input_values``; when any other file holds a NUL byte in its
   first 8000 bytes (git's test; MIDI, images, archives...), every file is read as raw bytes (``binary``, tokenized
   with ``tokenizer: bytes``); else each is UTF-8 text (``text``). The class names, in natural order
   (``"2" < "10"``), go in the ``LabelHint``. When every top-level folder is a split name (``train/``, ``test/``...),
   those are the splits; otherwise all is ``train``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np

from ..spec import DataFormatError, text_lines
from . import readers
from .files import SPLIT_WORDS, read_files, split_of
from .formats import Format, class_label_hint, detect, format_named
from .raw import LabelHint, RawSource

SERIES_SUFFIXES = (".npy", ".csv")  # class folders' series files: one example each, not a source format
TS = format_named("ts")  # the format of a <name>_TRAIN.ts / <name>_TEST.ts pair
SNIFF_BYTES = 8000  # a file with a NUL byte among its first SNIFF_BYTES bytes is binary (git's heuristic)

LOOKED_FOR = (
    "a save_to_disk folder (dataset_dict.json or state.json), a <name>_TRAIN.ts/<name>_TEST.ts pair, "
    "split-named files (train.csv, test.parquet, ...) or folders (train/*.parquet), "
    "or class folders [split/]<label>/<file>"
)


def natural_key(text: str) -> tuple:
    """Sort key putting numbers in numeric order: ``"2" < "10"``, ``"a2" < "a10"``."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t)


def read_data_dir(root: Path, fmt: Format | None, cache_dir: Path | None) -> RawSource:
    """The splits of ``root`` by the first layout (module docstring) that matches."""
    if not root.is_dir():
        raise FileNotFoundError(f"custom task: data_dir {str(root)!r} is not a folder; check the path")
    if (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        loaded = datasets.load_from_disk(str(root))
        splits = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
        return RawSource(splits, "save_to_disk", (root,), f"{root.name} (save_to_disk)", class_label_hint(splits))
    if (pair := _ts_pair(root)) is not None:
        return read_files(pair, TS, cache_dir)
    if named := _split_files(root):
        return read_files(named, fmt, cache_dir)
    if any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir()):
        return read_class_folders(root, cache_dir)
    raise FileNotFoundError(f"custom task: data_dir {str(root)!r} holds none of: {LOOKED_FOR}; or use data_files")


def _split_files(root: Path) -> dict[str, list[Path]]:
    """Split-named data files at the top of ``root``; else split folders (``train/``, ``test/``) holding data files
    and no subfolders (those are class folders)."""
    named: dict[str, list[Path]] = {}
    for path in sorted(root.iterdir()):
        if path.is_file() and detect(path) is not None and (split := split_of(path)):
            named.setdefault(split, []).append(path)
    if named:
        return named
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name.lower() in SPLIT_WORDS):
        inside = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
        files = [p for p in inside if p.is_file() and detect(p) is not None]
        if files and not any(p.is_dir() for p in inside):
            named[SPLIT_WORDS[folder.name.lower()]] = files
    return named


def _ts_pair(root: Path) -> dict[str, list[Path]] | None:
    names: dict[str, dict[str, Path]] = {}
    for path in sorted(root.glob("*.ts")):
        match = re.fullmatch(r"(.+)_(TRAIN|TEST)\.ts", path.name, flags=re.IGNORECASE)
        if match:
            names.setdefault(match[1], {})[match[2].lower()] = path
    if not names:
        return None
    if len(names) > 1:
        raise ValueError(
            f"custom task: data_dir {str(root)!r} holds several .ts sets ({', '.join(sorted(names))}); "
            "name the files with data_files: {train: ..._TRAIN.ts, test: ..._TEST.ts}"
        )
    (pair,) = names.values()
    return {split: [path] for split, path in sorted(pair.items(), key=lambda kv: kv[0] != "train")}


def _class_files(folder: Path) -> dict[str, list[Path]]:
    """label -> files (sorted) of ``folder/<label>/<file>``; hidden entries skipped."""
    out = {}
    for label_dir in sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_name_key):
        files = sorted(p for p in label_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
        if files:
            out[label_dir.name] = files
    return out


def _name_key(path: Path) -> tuple:
    return natural_key(path.name)


def read_class_folders(root: Path, cache_dir: Path | None) -> RawSource:
    """Class folders ``[split/]<label>/<file>`` (module docstring, layout 4)."""
    tops = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if tops and all(p.name.lower() in SPLIT_WORDS for p in tops):
        layout = {SPLIT_WORDS[p.name.lower()]: _class_files(p) for p in tops}
    else:
        layout = {"train": _class_files(root)}
    if not any(layout.values()):
        raise FileNotFoundError(f"custom task: data_dir {str(root)!r} holds none of: {LOOKED_FOR}; or use data_files")
    all_files = [f for split in layout.values() for files in split.values() for f in files]
    series = {f.suffix.lower() in SERIES_SUFFIXES for f in all_files}
    if len(series) > 1:
        raise ValueError(f"custom task: {root}: class folders mix series (.npy, .csv) and other files; use one kind")
    is_series = series.pop()
    kind = "series" if is_series else ("binary" if any(map(is_binary, all_files)) else "text")
    names = tuple(sorted({label for split in layout.values() for label in split}, key=natural_key))
    out = {}
    for split, classes in layout.items():
        listing = "\n".join(f"{label}\t{f}" for label, files in classes.items() for f in files)
        paths = [f for files in classes.values() for f in files]
        channels = load_series(paths[0]).shape[1] if is_series else 0
        if is_series:
            features = readers.series_features(channels, datasets.Value("string"))
        else:
            column = datasets.Value("binary") if kind == "binary" else datasets.Value("string")
            features = datasets.Features({kind: column, "label": datasets.Value("string")})
        features["file"] = datasets.Value("string")
        out[split] = readers.generate(
            _gen_class_files,
            paths,
            features,
            cache_dir,
            listing=listing,
            root=str(root),
            kind=kind,
            channels=channels,
        )
    hint = LabelHint(readers.CLASSIFICATION, names, f"class folders in {root.name} (natural order)", "label")
    info = readers.SERIES_INFO if is_series else {kind: FILE_INFO[kind]}
    return RawSource(out, "class_folders", tuple(all_files), f"{root.name}/<label>/<file>", hint, columns_info=info)


FILE_INFO = {"text": "one file's UTF-8 text per example", "binary": "one file's raw bytes per example"}


def is_binary(path: Path) -> bool:
    """Whether ``path`` holds a NUL byte in its first :data:`SNIFF_BYTES` bytes (then it is not text)."""
    with open(path, "rb") as f:
        return b"\0" in f.read(SNIFF_BYTES)


def load_series(path: Path) -> np.ndarray:
    """A series file as float32 ``(L, C)``: ``.npy`` ``(L,)``/``(L, C)``, or ``.csv`` lines of ``,``-separated
    channels with an optional header line."""
    if path.suffix.lower() == ".npy":
        values = np.load(path, allow_pickle=False)
    else:
        lines = [line for _, line in text_lines(path, "a .csv series: one time step per line") if line.strip()]
        header = bool(lines) and not _all_numbers(lines[0])
        try:
            values = np.array([line.split(",") for line in lines[int(header) :]], dtype=np.float32)
        except ValueError:
            raise DataFormatError(
                f"{path}: not a rectangle of numbers; one time step per line, channels by ','"
            ) from None
    if values.ndim not in (1, 2) or values.shape[0] == 0 or values.dtype.kind not in "iuf":
        raise DataFormatError(f"{path}: a series of shape {values.shape}; expected (L,) or (L, C) numbers with L > 0")
    values = values.astype(np.float32)
    return values[:, None] if values.ndim == 1 else values


def _all_numbers(line: str) -> bool:
    try:
        [float(x) for x in line.split(",")]
    except ValueError:
        return False
    return True


def _gen_class_files(paths: str, stamp: str, listing: str, root: str, kind: str, channels: int) -> Iterator[dict]:
    for line in listing.split("\n"):
        label, _, name = line.partition("\t")
        path = Path(name)
        rel = str(path.relative_to(root))
        if kind == "series":
            values = load_series(path)
            if values.shape[1] != channels:
                raise DataFormatError(
                    f"{path}: {values.shape[1]} channels, the first series has {channels}; give every series the same"
                )
            yield {"input_values": values, "label": label, "file": rel}
            continue
        data = path.read_bytes()
        if kind == "binary":
            if not data:
                raise DataFormatError(f"{path}: the file is empty; remove it or give it content")
            yield {"binary": data, "label": label, "file": rel}
            continue
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            line_no = data[: err.start].count(b"\n") + 1
            raise DataFormatError(
                f"{path}:{line_no}: not UTF-8 text (byte 0x{data[err.start]:02X}); save it as UTF-8 or remove it"
            ) from None
        if not text.strip():
            raise DataFormatError(f"{path}: the file is empty; remove it or give it content")
        yield {"text": text, "label": label, "file": rel}
