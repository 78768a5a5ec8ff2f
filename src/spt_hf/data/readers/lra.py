"""Readers for the Long Range Arena release formats (docs/data.md §1): ListOps TSV, AAN TSV and Pathfinder PNGs.

Each reader yields examples already in the task's features (token ids, or raw pixel values of shape (L, 1)) and
raises :class:`DataFormatError` naming the file, the line and the expected format for a bad row (bytes that are
not UTF-8, a wrong number of fields, a label out of range, an unbalanced ListOps expression, a file without
examples). Pathfinder metadata rows must point inside the dataset folder: an absolute path or a ``..`` component
is refused before anything is opened (symbolic links inside the folder are the user's own and are followed).
"""

from __future__ import annotations

import csv
import re
import struct
import sys
import warnings
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..spec import DataFormatError, text_lines
from ..vocab import BYTE_VOCAB, EOS_ID, LISTOPS_VOCAB

LISTOPS_FORMAT = "a header 'Source<TAB>Target', then one 'EXPRESSION<TAB>LABEL' row per line, LABEL an int 0-9"
AAN_FORMAT = "5 tab-separated fields without header: 'LABEL ID1 ID2 TEXT1 TEXT2', LABEL 0 or 1 (may be '1.0')"
PATHFINDER_FORMAT = "text rows 'imgs/<b> sample_<i>.png <i> <label> ...', label 0 or 1"
_LISTOPS_IDS = {s: LISTOPS_VOCAB.token_to_id(s) for s in LISTOPS_VOCAB.symbols}
_PAREN_TABLE = str.maketrans("()", "  ")
_INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII only: int() would also take "0_1", "٣" or "３"
_BINARY = re.compile(r"[01](?:\.0*)?")  # AAN labels: 0, 1, 0.0, 1.0
# what PIL raises on a corrupt or truncated image (the empty PNG of the release among them)
_IMAGE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error)


def find_folder(data_dir: str | Path, task: str, candidates: Sequence[str], required: Sequence[str]) -> Path:
    """Return the first ``data_dir / candidate`` holding every path in ``required`` (regular files or folders).

    ``candidates`` are relative folders, ``""`` meaning ``data_dir`` itself; the error lists every path tried.
    A named pipe or device in place of a file does not count (opening one would block).
    """
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"{task}: data_dir {str(root)!r} is not a directory")
    tried = []
    for cand in candidates:
        folder = root / cand if cand else root
        if all((folder / r).is_file() or (folder / r).is_dir() for r in required):
            return folder
        tried.append(str(folder))
    looked = "\n  ".join(tried)
    raise FileNotFoundError(
        f"{task}: could not find {list(required)} under {str(root)!r}. Looked in:\n  {looked}\n"
        "Point data_dir at the lra_release root, at the task folder, or at a folder written by "
        "`spt-hf generate-data`."
    )


def lra_candidates(folder: str) -> list[str]:
    """Candidate sub-folders for an LRA task folder: the folder itself, or below one or two ``lra_release``."""
    return ["", folder, f"lra_release/{folder}", f"lra_release/lra_release/{folder}"]


def listops_example(source: str, target: str, keep: int, tail: list[int], where: str) -> dict:
    """One ListOps example from its expression and label text; ``where`` names the row in errors.

    The expression must be balanced (one ``]`` per operator): a row cut short is refused rather than trained on
    with the label of the whole expression.
    """
    label = _parse_label(target, 10, where, LISTOPS_FORMAT)
    if not isinstance(source, str):
        raise DataFormatError(f"{where}: expression {source!r} is not text; expected format: {LISTOPS_FORMAT}")
    try:
        ids = list(map(_LISTOPS_IDS.__getitem__, source.translate(_PAREN_TABLE).split()))
    except KeyError as err:
        raise DataFormatError(
            f"{where}: unknown ListOps symbol {err.args[0]!r}; expected symbols {LISTOPS_VOCAB.symbols} and parentheses"
        ) from None
    if not ids:
        raise DataFormatError(f"{where}: empty expression; expected format: {LISTOPS_FORMAT}")
    operators, closing = source.count("["), source.count("]")  # parentheses are dropped by the tokenisation
    if operators != closing:
        raise DataFormatError(
            f"{where}: unbalanced expression ({operators} operators, {closing} ']'; a truncated row?); "
            f"expected format: {LISTOPS_FORMAT}"
        )
    return {"input_ids": ids[:keep] + tail, "label": label}


def read_listops(path: Path, max_length: int, append_eos: bool) -> Iterator[dict]:
    """Examples of one LRA ListOps TSV (CRLF or LF line ends, header optional)."""
    keep = max_length - 1 if append_eos else max_length
    tail = [EOS_ID] if append_eos else []
    empty = True
    for lineno, line in text_lines(path, LISTOPS_FORMAT):
        line = line.rstrip("\r\n")
        if lineno == 1 and line.replace(" ", "").lower() == "source\ttarget":
            continue
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataFormatError(
                f"{path}:{lineno}: expected 2 tab-separated fields, got {len(fields)}; "
                f"expected format: {LISTOPS_FORMAT}"
            )
        empty = False
        yield listops_example(fields[0], fields[1], keep, tail, f"{path}:{lineno}")
    if empty:
        raise DataFormatError(f"{path}: no examples (empty, or a header only); expected format: {LISTOPS_FORMAT}")


def read_aan(path: Path, max_length: int, append_eos: bool) -> Iterator[dict]:
    """Examples of one AAN retrieval TSV, read with quoting disabled (raw ``"`` would merge rows)."""
    keep = max_length - 1 if append_eos else max_length
    tail = [EOS_ID] if append_eos else []
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    empty = True
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in reader:
            if not row:
                continue
            if len(row) != 5:
                raise DataFormatError(
                    f"{path}:{reader.line_num}: expected 5 tab-separated fields, got {len(row)}; "
                    f"expected format: {AAN_FORMAT}"
                )
            empty = False
            yield aan_example(row[0], row[3], row[4], keep, tail, f"{path}:{reader.line_num}")
    if empty:
        raise DataFormatError(f"{path}: no examples (empty file); expected format: {AAN_FORMAT}")


def aan_example(label: str, text1: str, text2: str, keep: int, tail: list[int], where: str) -> dict:
    """One retrieval example: both documents as byte ids, label 0/1 (``"1.0"`` accepted)."""
    text = str(label).strip()
    if not _BINARY.fullmatch(text):
        raise DataFormatError(f"{where}: label {label!r} is not 0 or 1; expected format: {AAN_FORMAT}")
    for doc in (text1, text2):
        if not isinstance(doc, str):
            raise DataFormatError(f"{where}: document {doc!r} is not text; expected format: {AAN_FORMAT}")
    return {
        "input_ids": BYTE_VOCAB.encode_text(text1, keep) + tail,
        "input_ids_2": BYTE_VOCAB.encode_text(text2, keep) + tail,
        "label": int(text[0]),
    }


def _parse_label(text: str | int, num_labels: int, where: str, fmt: str) -> int:
    if not _INTEGER.fullmatch(str(text).strip()):
        raise DataFormatError(f"{where}: label {text!r} is not an integer; expected format: {fmt}")
    label = int(str(text).strip())
    if not 0 <= label < num_labels:
        raise DataFormatError(f"{where}: label {label} is outside 0..{num_labels - 1}; expected format: {fmt}")
    return label


def _numeric_key(path: Path) -> tuple[int, str]:
    match = re.fullmatch(r"\d+", path.stem)
    return (int(path.stem) if match else sys.maxsize, path.name)


def pathfinder_metadata_files(folder: Path) -> list[Path]:
    """The metadata files of a Pathfinder level folder, in numeric order (``0.npy``, ``1.npy``, ..., text)."""
    for sub in ("metadata", "imgs"):
        if not (folder / sub).is_dir():
            raise FileNotFoundError(
                f"pathfinder: {folder / sub} is not a folder; expected the LRA layout 'imgs/<b>/sample_<i>.png' "
                f"and 'metadata/<b>.npy' files of {PATHFINDER_FORMAT}"
            )
    files = sorted((p for p in (folder / "metadata").iterdir() if p.is_file()), key=_numeric_key)
    if not files:
        raise FileNotFoundError(
            f"pathfinder: {folder / 'metadata'} holds no metadata files; expected "
            f"'metadata/<b>.npy' files of {PATHFINDER_FORMAT}"
        )
    return files


def read_pathfinder_metadata(path: Path) -> list[tuple[str, str, int, int]]:
    """Rows ``(folder, file, lineno, label)`` of one Pathfinder metadata file (plain text despite ``.npy``)."""
    fmt = f"{PATHFINDER_FORMAT} (plain text despite the .npy suffix)"
    rows = []
    for lineno, line in text_lines(path, fmt):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 4:
            raise DataFormatError(
                f"{path}:{lineno}: expected at least 4 fields, got {len(fields)}; expected format: {fmt}"
            )
        rows.append((fields[0], fields[1], lineno, _parse_label(fields[3], 2, f"{path}:{lineno}", PATHFINDER_FORMAT)))
    return rows


def image_path(folder: Path, sub: str, name: str, where: str) -> Path:
    """``folder / sub / name``, refused (before anything is opened) when it would point outside ``folder``."""
    rel = Path(sub, name)
    if rel.is_absolute() or rel.drive or ".." in rel.parts:
        raise DataFormatError(
            f"{where}: image path {str(rel)!r} points outside the dataset folder {folder}; refused. Expected format: "
            f"{PATHFINDER_FORMAT}, paths relative to the folder, without '..'"
        )
    return folder / rel


def _decode_grey(path: Path, resolution: int, where: str) -> np.ndarray | None:
    """Raw intensities (side, side) of one image, ``None`` when unreadable; a wrong size raises, naming the file.

    The size is checked on the header, before decoding: a huge image is never decompressed.
    """
    try:
        with Image.open(path) as img:
            size = img.size
            if size == (resolution, resolution):
                img.load()
                return np.asarray(img.convert("L"), dtype=np.float32)  # (side, side)
    except Image.DecompressionBombError as err:
        raise DataFormatError(
            f"{path} (listed at {where}): {err}; expected {resolution}x{resolution} 8-bit grey"
        ) from None
    except _IMAGE_ERRORS:
        return None
    raise DataFormatError(
        f"{path} (listed at {where}): image is {size[0]}x{size[1]}, expected {resolution}x{resolution} 8-bit grey"
    )


def read_pathfinder(folder: Path, metadata_files: Sequence[Path], resolution: int) -> Iterator[dict]:
    """Examples of the images listed in ``metadata_files``, skipping unreadable PNGs with one counting warning.

    Pixels are the raw 8-bit intensities in raster order, as float32 of shape (L, 1) with L = resolution².
    """
    skipped: list[str] = []
    for meta in metadata_files:
        for sub, name, lineno, label in read_pathfinder_metadata(meta):
            path = image_path(folder, sub, name, f"{meta}:{lineno}")
            if not path.is_file():
                raise FileNotFoundError(
                    f"{meta}:{lineno}: image {path} listed in the metadata is missing or not a file"
                )
            pixels = _decode_grey(path, resolution, f"{meta}:{lineno}")
            if pixels is None:
                skipped.append(str(path))
                continue
            yield {"input_values": pixels.reshape(-1, 1), "label": label}  # (L, 1)
    if skipped:
        warnings.warn(
            f"pathfinder: skipped {len(skipped)} unreadable image(s) under {folder} (first: {skipped[0]})", stacklevel=2
        )
