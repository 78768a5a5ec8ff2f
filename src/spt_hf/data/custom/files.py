"""Local data files of a custom task: their splits, from a mapping or from the file names, read in their one format.

Without a mapping, split names come from the file names (:func:`split_of`); files that name no split are one
``train`` split. The format is ``task_options.format`` or the files' suffix (:mod:`.formats`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..spec import DataFormatError
from .formats import Format, format_of
from .raw import RawSource

SPLIT_WORDS = {"train": "train", "training": "train", "test": "test", "testing": "test", "validation": "validation"}
SPLIT_WORDS |= {"valid": "validation", "val": "validation", "dev": "validation"}


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


def read_files(files: dict[str | None, list[Path]], fmt: Format | None, cache_dir: Path | None) -> RawSource:
    """The splits of local files, each split from its files, all in one format (``fmt``, else their suffix's)."""
    splits = name_splits(files)
    all_paths = [p for paths in splits.values() for p in paths]
    fmt = format_of(all_paths, fmt)
    for path in all_paths:
        if path.stat().st_size == 0:
            raise DataFormatError(f"{path}: the file is empty; give a file with rows")
    out, hint = fmt.read(fmt, splits, cache_dir)
    description = " + ".join(p.name for p in all_paths)
    return RawSource(out, fmt.name, tuple(all_paths), description, label_hint=hint, columns_info=dict(fmt.columns_info))
