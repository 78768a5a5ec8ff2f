"""Hostile and malformed input for every reader of a real format, and the guard against pickle loading.

Hypothesis writes random and mutated files in each real format (ListOps TSV, AAN TSV, Pathfinder metadata and
PNGs, ``.ts`` series, WAV clips, gzipped IDX, the SPT fingerprint ``.npy``) and checks that every outcome is either
a correct parse or a clear error: ``DataFormatError`` (or ``FileNotFoundError`` / ``ValueError``) naming the file,
the line or item and the expected format; never a bare ``IndexError`` / ``KeyError`` / ``UnicodeDecodeError`` /
``struct.error`` and never a hang (per-example deadlines, per-test timeouts). Mutations that make a file wrong (a
label out of range, a missing value, a path out of the dataset folder) must be caught. A failed ``load_task``
leaves nothing in the cache.

Runs derandomised (same inputs every run, no example database). A table of what was tried and caught per reader
is printed at the end of the module.
"""

from __future__ import annotations

import ast
import gzip
import io
import os
import re
import struct
import tempfile
import warnings
import wave
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from unittest import mock

import datasets
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

import spt_hf
from spt_hf.data import (
    BYTE_VOCAB,
    EOS_ID,
    LISTOPS_VOCAB,
    DataFingerprint,
    DataFormatError,
    load_task,
)
from spt_hf.data.readers import audio, lra, offline, timeseries
from spt_hf.data.readers import hub_datasets as hub
from spt_hf.data.vocab import tokenize_listops

pytestmark = pytest.mark.timeout(240)
HOSTILE = settings(
    max_examples=150,  # per test; tests parametrised by mutation use PER_MUTATION
    deadline=5000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
PER_MUTATION = settings(HOSTILE, max_examples=25)
CLEAN_ERRORS = (DataFormatError, FileNotFoundError, ValueError)
TALLY: dict[tuple[str, str], Counter] = defaultdict(Counter)


@pytest.fixture(scope="module", autouse=True)
def hostile_tally(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print, after the module, how many hostile inputs each reader was given and how many it caught."""
    yield
    if not TALLY:
        return
    lines = ["", "hostile inputs per reader: tried / caught (clear error) / accepted (valid parse)"]
    for reader in sorted({r for r, _ in TALLY}):
        total = sum((c for (r, _), c in TALLY.items() if r == reader), Counter())
        lines.append(f"  {reader:<40} {total['tried']:>5} / {total['caught']:>5} / {total['accepted']:>5}")
        for (r, category), c in sorted(TALLY.items()):
            if r == reader:
                lines.append(f"      {category:<36} {c['tried']:>5} / {c['caught']:>5} / {c['accepted']:>5}")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else nullcontext():  # shown without -s too
        print("\n".join(lines))


def attempt(reader: str, category: str, read: Callable[[], Any], names: tuple[Any, ...], count: bool = True) -> Any:
    """Run ``read``; return its result or the clear error it raised, which must name one of ``names`` (if any)."""
    tally = TALLY[(reader, category)] if count else Counter()
    tally["tried"] += 1
    try:
        result = read()
    except CLEAN_ERRORS as err:
        message = str(err)
        assert not names or any(str(n) in message for n in names), (
            f"{type(err).__name__} names none of {names}: {message}"
        )
        if isinstance(err, DataFormatError):
            assert "expected" in message.lower(), f"no expected format in: {message}"
        tally["caught"] += 1
        return err
    tally["accepted"] += 1
    return result


def must_catch(outcome: Any, *fragments: str) -> None:
    assert isinstance(outcome, Exception), f"accepted hostile input: {str(outcome)[:300]}"
    for fragment in fragments:
        assert fragment in str(outcome), f"{fragment!r} not in: {outcome}"


@contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


# ---------------------------------------------------------------- ListOps TSV
OPS = ("[MIN", "[MAX", "[MED", "[SM")
expression_st = st.recursive(
    st.integers(0, 9).map(str),
    lambda sub: st.builds(
        lambda op, args: f"( {op} {' '.join(args)} ] )", st.sampled_from(OPS), st.lists(sub, min_size=2, max_size=4)
    ),
    max_leaves=10,
)
listops_rows_st = st.lists(st.tuples(expression_st, st.integers(0, 9).map(str)), min_size=1, max_size=6)
no_break_text = st.text(st.characters(blacklist_characters="\t\r\n", blacklist_categories=("Cs",)), max_size=12)
soup_st = st.text(alphabet="()[]MAXINEDS0123456789 \t\r\n\"'", max_size=400).map(str.encode)


def _listops_read(path: Path) -> Callable[[], list[dict]]:
    return lambda: list(lra.read_listops(path, 4096, True))


def _listops_expected(rows: list[tuple[str, str]]) -> list[dict]:
    return [{"input_ids": [*LISTOPS_VOCAB.encode(tokenize_listops(e)), EOS_ID], "label": int(t)} for e, t in rows]


@HOSTILE
@given(data=st.one_of(st.binary(max_size=3000), soup_st, soup_st.map(lambda b: b"Source\tTarget\r\n" + b)))
def test_listops_random_bytes(data: bytes) -> None:
    with workdir() as d:
        path = d / "basic_train.tsv"
        path.write_bytes(data)
        out = attempt("listops", "random bytes / token soup", _listops_read(path), (path,))
        if not isinstance(out, Exception):
            assert out and all(0 <= ex["label"] <= 9 and max(ex["input_ids"]) < len(LISTOPS_VOCAB) for ex in out)


LISTOPS_MUTATIONS = (
    "clean variations",
    "wrong column count",
    "label out of range",
    "label not an integer",
    "truncated row",
    "expression cut, label kept",
    "unknown symbol",
    "bad utf-8",
    "empty / header only",
)


@pytest.mark.parametrize("mutation", LISTOPS_MUTATIONS)
@PER_MUTATION
@given(rows=listops_rows_st, data=st.data())
def test_listops_malformed_rows(rows: list[tuple[str, str]], mutation: str, data: st.DataObject) -> None:
    header, bom = data.draw(st.booleans()), data.draw(st.booleans())
    lines = ["Source\tTarget"] if header else []
    row_line = []
    for expr, label in rows:
        lines += [""] * data.draw(st.integers(0, 1))  # blank lines are skipped
        lines.append(f"{expr}\t{label}")
        row_line.append(len(lines))  # 1-based line number of the row
    k = data.draw(st.integers(0, len(rows) - 1))
    expr, label = rows[k]
    fragment, harmless = "", mutation == "clean variations"
    if mutation == "wrong column count":
        lines[row_line[k] - 1] = data.draw(st.sampled_from([expr, f"{expr}\t{label}\tX", f"{expr}\t\t{label}"]))
        fragment = "tab-separated fields"
    elif mutation == "label out of range":
        bad = data.draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=10)))
        lines[row_line[k] - 1], fragment = f"{expr}\t{bad}", "outside 0..9"
    elif mutation == "label not an integer":
        bad = data.draw(no_break_text.filter(lambda t: not re.fullmatch(r"[+-]?[0-9]+", t.strip())))
        lines[row_line[k] - 1], fragment = f"{expr}\t{bad}", "not an integer"
    elif mutation == "truncated row":
        row = lines[row_line[k] - 1]
        lines[row_line[k] - 1] = row[: data.draw(st.integers(1, len(row) - 1))]
    elif mutation == "expression cut, label kept":
        cut = expr[: data.draw(st.integers(0, len(expr) - 1))]
        lines[row_line[k] - 1] = f"{cut}\t{label}"
        harmless = tokenize_listops(cut) == tokenize_listops(expr)  # only ')' lost: the same tokens, accepted
    elif mutation == "unknown symbol":
        word = data.draw(st.text("[ABCDEFGHKLMNOPQRSTUVWXYZ0123456789_", min_size=1, max_size=6))
        assume(word not in LISTOPS_VOCAB.symbols)
        lines[row_line[k] - 1], fragment = f"( {word} {expr} ] )\t{label}", "unknown ListOps symbol"
    elif mutation == "empty / header only":
        lines = data.draw(st.sampled_from([[], [""], ["Source\tTarget"], ["Source\tTarget", ""]]))
        row_line = []
    endings = data.draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=len(lines), max_size=len(lines)))
    for i in range(len(lines) - 1):
        if endings[i] == "\r" and endings[i + 1].startswith("\n") and not lines[i + 1]:
            endings[i] = "\r\n"  # "\r" then an empty "\n" line would read as one "\r\n"
    text = "".join(line + end for line, end in zip(lines, endings))
    if data.draw(st.booleans()) and text:
        text = text.rstrip("\r\n")  # no line end after the last row
    raw = ("\ufeff" if bom else "").encode() + text.encode()
    if mutation == "bad utf-8":
        start = sum(len((line + end).encode()) for line, end in zip(lines[: row_line[k] - 1], endings))
        at = start + data.draw(st.integers(0, len(lines[row_line[k] - 1])))
        raw = raw[: at + 3 * bom] + bytes([data.draw(st.integers(0x80, 0xFF))]) + raw[at + 3 * bom :]
        fragment = "not UTF-8"
    with workdir() as d:
        path = d / "basic_val.tsv"
        path.write_bytes(raw)
        out = attempt("listops", mutation, _listops_read(path), (path,))
    if harmless:
        assert out == _listops_expected(rows)
    elif mutation == "empty / header only":
        must_catch(out, f"{path}: no examples")
    else:
        must_catch(out, f"{path}:{row_line[k]}:", fragment)


# ---------------------------------------------------------------- AAN TSV (5 columns, quoting off)
aan_text_st = st.text(
    st.one_of(st.just('"'), st.characters(blacklist_characters="\t\r\n", blacklist_categories=("Cs",))), max_size=40
)
aan_rows_st = st.lists(
    st.tuples(st.sampled_from(["0", "1", "0.0", "1.0"]), no_break_text, no_break_text, aan_text_st, aan_text_st),
    min_size=1,
    max_size=6,
)
AAN_MUTATIONS = ("clean variations (quotes, CRLF)", "wrong column count", "label not 0 or 1", "empty file")


def _aan_read(path: Path, max_length: int = 64) -> Callable[[], list[dict]]:
    return lambda: list(lra.read_aan(path, max_length, False))


@HOSTILE
@given(data=st.one_of(st.binary(max_size=2000), soup_st))
def test_aan_random_bytes(data: bytes) -> None:
    with workdir() as d:
        path = d / "new_aan_pairs.train.tsv"
        path.write_bytes(data)
        out = attempt("aan", "random bytes / token soup", _aan_read(path), (path,))
        if not isinstance(out, Exception):
            assert all(ex["label"] in (0, 1) for ex in out)


@pytest.mark.parametrize("mutation", AAN_MUTATIONS)
@PER_MUTATION
@given(rows=aan_rows_st, data=st.data())
def test_aan_malformed_rows(rows: list[tuple[str, ...]], mutation: str, data: st.DataObject) -> None:
    lines = ["\t".join(r) for r in rows]
    k = data.draw(st.integers(0, len(rows) - 1))
    fragment = ""
    if mutation == "wrong column count":
        fields = list(rows[k])
        if data.draw(st.booleans()):
            del fields[data.draw(st.integers(0, 4))]
        else:
            fields.insert(data.draw(st.integers(0, 5)), data.draw(no_break_text))
        lines[k], fragment = "\t".join(fields), "expected 5 tab-separated fields"
    elif mutation == "label not 0 or 1":
        bad = data.draw(
            st.one_of(
                st.sampled_from(["2", "-1", "0.5", "nan", "inf", "1e0", "0_0", "", "yes", "１"]),
                no_break_text.filter(lambda t: not re.fullmatch(r"[01](\.0*)?", t.strip())),
            )
        )
        lines[k], fragment = "\t".join([bad, *rows[k][1:]]), "is not 0 or 1"
    elif mutation == "empty file":
        lines = []
    endings = data.draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    with workdir() as d:
        path = d / "new_aan_pairs.eval.tsv"
        path.write_bytes("".join(line + end for line, end in zip(lines, endings)).encode())
        out = attempt("aan", mutation, _aan_read(path), (path,))
    if mutation.startswith("clean"):
        assert len(out) == len(rows)  # raw quotes never merge rows
        for ex, row in zip(out, rows):
            assert ex["label"] == int(row[0][0])
            assert ex["input_ids"] == BYTE_VOCAB.encode_text(row[3], 64)
            assert ex["input_ids_2"] == BYTE_VOCAB.encode_text(row[4], 64)
    elif mutation == "empty file":
        must_catch(out, f"{path}: no examples")
    else:
        must_catch(out, f"{path}:{k + 1}:", fragment)


# ---------------------------------------------------------------- Pathfinder metadata and PNGs
def _png(size: tuple[int, int] = (32, 32), seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0]), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` (a decompression bomb if large) and holds no pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


GOOD_PNGS = [_png(seed=i) for i in range(4)]


def _level(root: Path, images: list[bytes]) -> tuple[Path, Path]:
    """A Pathfinder level folder ``root/a/b/level`` with the given images listed in ``metadata/0.npy``."""
    folder = root / "a" / "b" / "level"
    (folder / "imgs" / "0").mkdir(parents=True)
    (folder / "metadata").mkdir()
    rows = []
    for i, data in enumerate(images):
        (folder / "imgs" / "0" / f"sample_{i}.png").write_bytes(data)
        rows.append(f"imgs/0 sample_{i}.png {i} {i % 2}")
    meta = folder / "metadata" / "0.npy"
    meta.write_text("\n".join(rows) + "\n")
    return folder, meta


def _pathfinder_read(folder: Path, meta: Path) -> Callable[[], tuple[list[dict], list[str]]]:
    def read() -> tuple[list[dict], list[str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            examples = list(lra.read_pathfinder(folder, [meta], 32))
        return examples, [str(w.message) for w in caught]

    return read


component_st = st.sampled_from(["..", ".", "imgs", "0", "etc", "secret.png", "passwd", "sample_0.png"])


@HOSTILE
@given(
    parts=st.lists(component_st, min_size=1, max_size=7),
    absolute=st.booleans(),
    split=st.integers(1, 6),
    to_secret=st.integers(0, 4),
)
def test_pathfinder_rows_outside_the_folder_are_refused(
    parts: list[str], absolute: bool, split: int, to_secret: int
) -> None:
    """Rows pointing outside the dataset folder are refused before anything is opened, even a readable image."""
    with workdir() as d:
        folder, meta = _level(d, GOOD_PNGS[:1])
        for place in (d / "secret.png", d / "a" / "secret.png", d / "a" / "b" / "secret.png"):
            place.write_bytes(GOOD_PNGS[1])  # a valid 32x32 image outside the folder: following the row would work
        if to_secret:  # the direct ways out: ../../secret.png and the absolute path
            rel = str(d / "secret.png") if absolute else "/".join([".."] * (to_secret - 1) + ["secret.png"])
        else:
            rel = ("/" if absolute else "") + "/".join(parts)
        pieces = rel.split("/")
        cut = min(split, len(pieces) - 1)
        sub, name = "/".join(pieces[:cut]) or ("/" if rel.startswith("/") else "."), "/".join(pieces[cut:]) or "."
        meta.write_text(f"imgs/0 sample_0.png 0 1\n{sub} {name} 1 0\n")
        resolved = os.path.normpath(os.path.join(folder, sub, name))
        escapes = not resolved.startswith(str(folder) + os.sep) and resolved != str(folder)
        refuse = escapes or ".." in Path(sub, name).parts or Path(sub, name).is_absolute()
        category = "metadata row out of the folder" if refuse else "metadata row inside the folder"
        with mock.patch.object(lra.Image, "open", wraps=Image.open) as opened:
            out = attempt("pathfinder", category, _pathfinder_read(folder, meta), (meta,))
        outside = [c.args[0] for c in opened.call_args_list if not str(c.args[0]).startswith(str(folder) + os.sep)]
        assert not outside, f"opened {outside}"
    if refuse:
        must_catch(out, f"{meta}:2:", "points outside the dataset folder", "refused")
    elif isinstance(out, Exception):  # inside the folder: a missing file or a folder is named as such
        assert "outside" not in str(out)


IMAGE_KINDS = ("ok", "empty", "truncated", "random bytes", "fuzzed")


@HOSTILE
@given(kinds=st.lists(st.sampled_from(IMAGE_KINDS), min_size=1, max_size=6), data=st.data())
def test_pathfinder_unreadable_images_are_skipped_and_counted(kinds: list[str], data: st.DataObject) -> None:
    images = []
    for i, kind in enumerate(kinds):
        png = GOOD_PNGS[i % len(GOOD_PNGS)]
        if kind == "empty":
            png = b""
        elif kind == "truncated":  # cut inside the pixel data
            png = png[: data.draw(st.integers(len(png) // 10, len(png) // 2))]
        elif kind == "random bytes":
            png = data.draw(st.binary(max_size=300))
        elif kind == "fuzzed":
            body = bytearray(png)
            for _ in range(data.draw(st.integers(1, 6))):
                body[data.draw(st.integers(8, len(body) - 1))] = data.draw(st.integers(0, 255))
            png = bytes(body)
        images.append(png)
    with workdir() as d:
        folder, meta = _level(d, images)
        out = attempt("pathfinder", "", _pathfinder_read(folder, meta), (folder, meta), count=False)  # counted below
    certain_bad = sum(k in ("empty", "truncated") for k in kinds)
    per_image = TALLY[("pathfinder", "unreadable images (skipped = caught)")]
    per_image["tried"] += len(kinds) - kinds.count("ok")
    if isinstance(out, Exception):  # only a fuzzed header can turn an image into one of another size
        assert {"fuzzed", "random bytes"} & set(kinds) and "expected 32x32" in str(out), out
        per_image["caught"] += len(kinds) - kinds.count("ok")
        return
    examples, messages = out
    skipped = len(kinds) - len(examples)
    per_image["caught"] += skipped
    per_image["accepted"] += len(kinds) - kinds.count("ok") - skipped
    assert certain_bad <= skipped <= certain_bad + sum(k in ("fuzzed", "random bytes") for k in kinds)
    assert all(ex["input_values"].shape == (1024, 1) for ex in examples)
    if skipped:
        assert any(f"skipped {skipped} unreadable image(s)" in m for m in messages), messages
    else:
        assert not messages


@HOSTILE
@given(size=st.tuples(st.integers(1, 80), st.integers(1, 80)).filter(lambda s: s != (32, 32)), bomb=st.booleans())
def test_pathfinder_wrong_size_names_the_file(size: tuple[int, int], bomb: bool) -> None:
    with workdir() as d:
        folder, meta = _level(d, [GOOD_PNGS[0], _png_header_only(60_000, 60_000) if bomb else _png(size)])
        out = attempt("pathfinder", "image of the wrong size", _pathfinder_read(folder, meta), (meta,))
    bad = folder / "imgs" / "0" / "sample_1.png"
    must_catch(out, str(bad), f"{meta}:2", "expected 32x32", *([] if bomb else [f"{size[0]}x{size[1]}"]))


@HOSTILE
@given(data=st.one_of(st.binary(max_size=1000), soup_st, st.text(max_size=300).map(str.encode)))
def test_pathfinder_garbage_metadata(data: bytes) -> None:
    with workdir() as d:
        folder, meta = _level(d, GOOD_PNGS[:1])
        meta.write_bytes(data)
        out = attempt("pathfinder", "garbage metadata file", _pathfinder_read(folder, meta), (meta,))
        if not isinstance(out, Exception):
            assert out[0] == []  # nothing but blank lines


def test_pathfinder_wrong_layout_says_what_is_expected(tmp_path: Path) -> None:
    folder, _ = _level(tmp_path, GOOD_PNGS[:1])
    for broken in ("metadata", "imgs"):
        moved = folder.parent / "moved"
        (folder / broken).rename(moved)
        (folder / broken).write_text("not a folder")
        out = attempt("pathfinder", "wrong directory layout", lambda: load_task("pathfinder", data_dir=folder), ())
        must_catch(out, str(folder / broken), "expected the LRA layout")
        (folder / broken).unlink()
        moved.rename(folder / broken)


# ---------------------------------------------------------------- .ts time series
TS_HEADER = "@problemName X\n@timeStamps false\n@univariate false\n@targetLabel true\n@data\n"
TS_MUTATIONS = (
    "clean variations",
    "missing or non-finite value",
    "missing target",
    "wrong dimension count",
    "unequal lengths",
    "bad utf-8",
    "no @data",
    "no series",
    "not regression",
)
BAD_VALUES = ("NaN", "nan", "?", "", " ", "inf", "-Infinity", "1e999", "abc", "1 2", "0x1F")
series_st = st.integers(1, 3).flatmap(
    lambda c: st.lists(
        st.tuples(
            st.integers(1, 6).flatmap(
                lambda n: st.lists(
                    st.lists(st.floats(-1e6, 1e6, width=32), min_size=n, max_size=n), min_size=c, max_size=c
                )
            ),
            st.floats(-1e6, 1e6, width=32),
        ),
        min_size=1,
        max_size=4,
    )
)


def _ts_line(dims: list[list[str]], target: str) -> str:
    return ":".join(",".join(d) for d in dims) + f":{target}"


@HOSTILE
@given(data=st.one_of(st.binary(max_size=1500), st.binary(max_size=500).map(lambda b: TS_HEADER.encode() + b)))
def test_ts_random_bytes(data: bytes) -> None:
    with workdir() as d:
        path = d / "X_TRAIN.ts"
        path.write_bytes(data)
        out = attempt("ts", "random bytes", lambda: list(timeseries.read_ts(path, 1)), (path,))
        if not isinstance(out, Exception):
            assert all(np.isfinite(v).all() and np.isfinite(t) for v, t in out)


@pytest.mark.parametrize("mutation", TS_MUTATIONS)
@PER_MUTATION
@given(series=series_st, data=st.data())
def test_ts_malformed_series(series: list, mutation: str, data: st.DataObject) -> None:
    channels = len(series[0][0])
    text = [[[repr(v) for v in dim] for dim in dims] for dims, _ in series]
    targets = [repr(t) for _, t in series]
    k = data.draw(st.integers(0, len(series) - 1))
    header, fragment = TS_HEADER, ""
    line_of = [TS_HEADER.count("\n") + 1 + i for i in range(len(series))]
    if mutation == "missing or non-finite value":
        dim = data.draw(st.integers(0, channels - 1))
        step = data.draw(st.integers(0, len(text[k][dim]) - 1))
        text[k][dim][step] = data.draw(st.sampled_from(BAD_VALUES))
        fragment = f"dimension {dim}, step {step}"
    elif mutation == "missing target":
        targets[k], fragment = data.draw(st.sampled_from(["", "NaN", "?", "inf", "x"])), "target"
    elif mutation == "wrong dimension count":
        text[k] = text[k][:-1] if channels > 1 and data.draw(st.booleans()) else [*text[k], ["1.0"]]
        fragment = "dimensions, expected"
    elif mutation == "unequal lengths":
        assume(channels > 1)
        dim = data.draw(st.integers(0, channels - 1))
        text[k][dim] = [*text[k][dim], "1.0"]
        fragment = "different lengths"
    elif mutation == "no @data":
        header = header.replace("@data\n", "")
    elif mutation == "no series":
        text, targets = [], []
    elif mutation == "not regression":
        header = header.replace("@targetLabel true\n", "@classLabel true 0 1\n")
    lines = [_ts_line(dims, t) for dims, t in zip(text, targets)]
    if mutation == "clean variations":  # comments, blank lines and any line ends
        lines = [f"{line}\n# comment" if data.draw(st.booleans()) else line for line in lines]
    endings = data.draw(st.sampled_from(["\n", "\r\n", "\r"]))
    raw = (header + "\n".join(lines) + "\n").replace("\n", endings).encode()
    if mutation == "bad utf-8":
        at = len((header + "".join(line + "\n" for line in lines[:k])).replace("\n", endings).encode())
        raw, fragment = raw[:at] + b"\xff" + raw[at:], "not UTF-8"
    with workdir() as d:
        path = d / "X_TEST.ts"
        path.write_bytes(raw)
        out = attempt("ts", mutation, lambda: list(timeseries.read_ts(path, channels)), (path,))
    if mutation == "clean variations":
        assert len(out) == len(series)
        for (values, target), (dims, expected) in zip(out, series):
            assert np.array_equal(values, np.array(dims, dtype=np.float32).T) and target == expected
    elif mutation in ("no @data", "no series", "not regression"):
        must_catch(out, f"{path}")
    else:
        must_catch(out, f"{path}:{line_of[k]}:", fragment)


# ---------------------------------------------------------------- WAV clips
def _wav(rate: int, width: int, channels: int, frames: bytes) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)
    return buffer.getvalue()


wav_st = st.tuples(st.sampled_from([8000, 16000, 22050, 44100]), st.sampled_from([1, 2, 4]), st.integers(1, 2)).flatmap(
    lambda p: st.tuples(
        st.just(p),
        st.binary(min_size=p[1] * p[2], max_size=800).map(lambda b: b[: len(b) // (p[1] * p[2]) * p[1] * p[2]]),
    )
)


def _wav_read(path: Path) -> Callable[[], tuple[np.ndarray, int, np.ndarray]]:
    def read() -> tuple[np.ndarray, int, np.ndarray]:
        samples, rate = audio.read_wav(path)
        return samples, rate, audio.to_fixed_length(samples, rate)

    return read


@pytest.mark.parametrize("mutation", ["valid", "truncated", "header fuzz", "random bytes"])
@settings(HOSTILE, max_examples=40)
@given(clip=wav_st, data=st.data())
def test_wav_garbage(clip: tuple, mutation: str, data: st.DataObject) -> None:
    (rate, width, channels), frames = clip
    raw = _wav(rate, width, channels, frames)
    if mutation == "truncated":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif mutation == "header fuzz":
        body = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 4))):
            body[data.draw(st.integers(0, 43))] = data.draw(st.integers(0, 255))
        raw = bytes(body)
    elif mutation == "random bytes":
        raw = data.draw(
            st.one_of(st.binary(max_size=400), st.binary(max_size=200).map(lambda b: b"RIFF\0\0\0\0WAVE" + b))
        )
    with workdir() as d:
        path = d / "clip.wav"
        path.write_bytes(raw)
        out = attempt("wav", mutation, _wav_read(path), (path,))
    if mutation == "truncated":  # any cut, in the header or in the samples, is caught
        must_catch(out, "expected a PCM WAV file")
    if mutation == "valid":
        assert not isinstance(out, Exception), out
    if not isinstance(out, Exception):
        samples, got_rate, fixed = out
        assert np.isfinite(samples).all() and np.abs(samples).max(initial=0) <= 1.0
        assert fixed.shape == (16000, 1) and audio.RATE_RANGE[0] <= got_rate <= audio.RATE_RANGE[1]
        if mutation == "valid":
            assert got_rate == rate and samples.shape == (len(frames) // (width * channels),)


# ---------------------------------------------------------------- gzipped IDX (Fashion-MNIST)
@pytest.mark.parametrize("kind", ["random bytes", "gzip of random bytes", "wrong sizes", "corrupt stream"])
@settings(HOSTILE, max_examples=40)
@given(data=st.data())
def test_idx_garbage(kind: str, data: st.DataObject) -> None:
    valid = (2049).to_bytes(4, "big") + (5).to_bytes(4, "big") + bytes([1, 2, 3, 4, 5])
    if kind == "random bytes":
        raw = data.draw(st.binary(max_size=300))
    elif kind == "gzip of random bytes":
        raw = gzip.compress(data.draw(st.binary(max_size=300)))
    elif kind == "wrong sizes":
        raw = gzip.compress(valid[:4] + data.draw(st.integers(0, 2**32 - 1)).to_bytes(4, "big") + valid[8:])
    else:
        body = bytearray(gzip.compress(valid))
        body[data.draw(st.integers(10, len(body) - 1))] ^= data.draw(st.integers(1, 255))
        raw = bytes(body)
    with workdir() as d:
        path = d / "train-labels-idx1-ubyte.gz"
        path.write_bytes(raw)
        out = attempt("idx", kind, lambda: offline.read_idx(path, 2049), (path,))
    if not isinstance(out, Exception):
        assert out.dtype == np.uint8 and out.ndim == 1


# ---------------------------------------------------------------- the SPT fingerprint shipped with a checkpoint
@HOSTILE
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=200).map(lambda b: b"\x93NUMPY\x01\x00" + b),
        st.binary(max_size=200).map(lambda b: b"PK\x03\x04" + b),
        st.sampled_from(["object", "float", "2-D", "forged shape", "valid"]),
    )
)
def test_fingerprint_file_garbage(data: bytes | str) -> None:
    with workdir() as d:
        path = d / "spt_fingerprint.npy"
        arrays = {"object": np.array([{"a": 1}], dtype=object), "float": np.array([1.5]), "2-D": np.ones((2, 2), int)}
        if isinstance(data, str) and data in arrays:
            np.save(path, arrays[data], allow_pickle=True)
        elif data == "forged shape":  # 256 GiB declared, 64 bytes held: nothing may be allocated for it
            with open(path, "wb") as f:
                np.lib.format.write_array_header_1_0(f, {"descr": "<u8", "fortran_order": False, "shape": (2**35,)})
                f.write(bytes(64))
        elif isinstance(data, str):
            np.save(path, np.array([5, 3], dtype=np.uint64))
        else:
            path.write_bytes(data)
        category = f"{data} array" if isinstance(data, str) else "random bytes"
        out = attempt("fingerprint", category, lambda: DataFingerprint.load(path), (path, "fingerprint hashes"))
    if data == "valid":
        assert out.hashes.tolist() == [3, 5]
    elif isinstance(data, str):
        must_catch(out)


# ---------------------------------------------------------------- Hub copies with unexpected columns or values
def test_hub_columns_and_null_values_are_named(tmp_path: Path) -> None:
    for split in ("train", "validation", "test"):
        ds = datasets.Dataset.from_dict({"expr": ["( [MAX 2 3 ] )"], "answer": [3]})
        ds.to_parquet(str(tmp_path / f"{split}-00000-of-00001.parquet"))
    wrong = {"source": "expression", "target": "answer"}
    out = attempt(
        "hub", "wrong hub_columns", lambda: load_task("listops", tmp_path, hub_id="x/y", hub_columns=wrong), ()
    )
    must_catch(out, "['expression']", "expr")
    partial = {"source": "expr"}
    out = attempt(
        "hub", "wrong hub_columns", lambda: load_task("listops", tmp_path, hub_id="x/y", hub_columns=partial), ()
    )
    must_catch(out, "expected exactly the keys ['source', 'target']")
    nulls = datasets.Dataset.from_dict({"text": ["fine", None], "label": [0, 1]})
    out = attempt("hub", "null values", lambda: list(hub.imdb_examples(nulls, 64, False)()), ("imdb item 1",))
    must_catch(out, "not a string")


# ---------------------------------------------------------------- failed builds leave nothing in the cache
def _write_task(task: str, root: Path) -> Path:
    """A tiny valid copy of ``task`` in its real format; returns the folder to pass as ``data_dir``."""
    root.mkdir(parents=True, exist_ok=True)
    if task == "listops":
        for name in ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv"):
            (root / name).write_text("Source\tTarget\r\n( [MAX 2 3 ] )\t3\r\n( [SM 4 5 ] )\t9\r\n", newline="")
    elif task == "retrieval":
        for name in ("train", "eval", "test"):
            (root / f"new_aan_pairs.{name}.tsv").write_text('1.0\ta\tb\t"quoted\tplain\n0\tc\td\tx\ty\n')
    elif task == "bidmc":
        for name in ("TRAIN", "TEST"):
            rows = "\n".join(f"{i},2,3:4,5,6:{i}.5" for i in range(12))
            (root / f"BIDMC32HR_{name}.ts").write_text(TS_HEADER + rows + "\n")
    else:
        return _level(root, [GOOD_PNGS[i % 4] for i in range(10)])[0]
    return root


def _corrupt(task: str, folder: Path, how: int) -> Path:
    """Corrupt one file of the copy in one of three ways; returns the file the error must name."""
    if task == "pathfinder":
        meta = folder / "metadata" / "0.npy"
        if how == 0:
            meta.write_text(meta.read_text() + "../../../../etc passwd 10 1\n")
        elif how == 1:
            (folder / "imgs" / "0" / "sample_9.png").write_bytes(_png((31, 32)))
            return folder / "imgs" / "0" / "sample_9.png"
        else:
            meta.write_text(meta.read_text() + "imgs/0 sample_0.png 10 7\n")
        return meta
    path = sorted(p for p in folder.iterdir() if p.is_file())[how % 2]
    if how == 2:
        path.write_bytes(path.read_bytes()[:-7])  # the last row cut short
    else:
        path.write_bytes(path.read_bytes() + (b"\xff\xfe garbage \x00\r\n" if how else b"1\t2\t3\r\n"))
    return path


@pytest.mark.parametrize("how", [0, 1, 2])
@pytest.mark.parametrize("task", ["listops", "retrieval", "bidmc", "pathfinder"])
def test_failed_build_leaves_nothing_in_the_cache(task: str, how: int, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    folder = _write_task(task, tmp_path / "data")
    corrupted = _corrupt(task, folder, how)
    out = attempt(task, "load_task of a corrupted copy", lambda: load_task(task, folder, cache_dir=cache), ())
    must_catch(out, str(corrupted))
    assert not cache.exists() or list(cache.iterdir()) == [], list(cache.iterdir())
    if how == 0:  # a good build afterwards: exactly one entry, no temporary folder
        load_task(task, _write_task(task, tmp_path / "fresh"), cache_dir=cache)
        entries = list(cache.iterdir())
        assert len(entries) == 1 and (entries[0] / "dataset_dict.json").is_file()


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_not_opened(tmp_path: Path) -> None:
    """A FIFO in place of a data file would block ``open`` forever; it is not taken for the file."""
    _write_task("listops", tmp_path)
    (tmp_path / "basic_test.tsv").unlink()
    os.mkfifo(tmp_path / "basic_test.tsv")
    out = attempt("listops", "named pipe instead of a file", lambda: load_task("listops", tmp_path), ("basic_test",))
    must_catch(out, "could not find")


# ---------------------------------------------------------------- no pickle is ever loaded
UNSAFE_MODULES = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve"}
UNSAFE_YAML = {"load", "unsafe_load", "full_load", "load_all", "unsafe_load_all", "full_load_all"}


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted origin for the file's imports (``np`` -> ``numpy``, ``load`` -> ``torch.load``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _safe_loader_classes(tree: ast.AST, aliases: dict) -> set[str]:
    """Names of the classes `source` defines on top of YAML's safe loaders (which construct plain data only)."""
    safe = {"yaml.SafeLoader", "yaml.CSafeLoader"}
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(_dotted(base, aliases) in safe for base in node.bases)
    }


def _safe_yaml_loader(call: ast.Call, aliases: dict, safe_loaders: set[str]) -> bool:
    """`yaml.load(..., Loader=L)` with L one of YAML's safe loaders or a class of this file built on one."""
    loader = _keyword(call, "Loader")
    if loader is None or _dotted(call.func, aliases).rpartition(".")[2] not in ("load", "load_all"):
        return False
    name = _dotted(loader, aliases)
    return name in ("yaml.SafeLoader", "yaml.CSafeLoader") or name in safe_loaders


def unsafe_loads(source: str, filename: str = "<string>") -> list[str]:
    """Every call in ``source`` that could unpickle or run code from a file: ``file:line: call``."""
    tree = ast.parse(source, filename=filename)
    aliases = _aliases(tree)
    safe_loaders = _safe_loader_classes(tree, aliases)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func, aliases)
        module, _, func = name.rpartition(".")
        weights_only = _keyword(node, "weights_only")
        allow_pickle = _keyword(node, "allow_pickle")
        unsafe = (
            (module in UNSAFE_MODULES and func in ("load", "loads", "Unpickler", "open"))
            or name.endswith("read_pickle")
            or (name == "torch.load" and not (isinstance(weights_only, ast.Constant) and weights_only.value is True))
            or (
                name.startswith("numpy.")
                and allow_pickle is not None
                and not (isinstance(allow_pickle, ast.Constant) and allow_pickle.value is False)
            )
            or (module == "yaml" and func in UNSAFE_YAML and not _safe_yaml_loader(node, aliases, safe_loaders))
            or (isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec") and node.func.id not in aliases)
        )
        if unsafe:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)[:120]}")
    return found


def test_pickle_scanner_flags_each_pattern() -> None:
    bad = """
import pickle, yaml, torch
import numpy as np
from torch import load as tload
import pandas as pd
pickle.load(f); pickle.loads(b)
torch.load(p); torch.load(p, weights_only=False); tload(p)
np.load(p, allow_pickle=True); np.lib.format.read_array(f, allow_pickle=True)
yaml.load(s); yaml.unsafe_load(s)
pd.read_pickle(p); eval(s)
"""
    assert len(unsafe_loads(bad)) == 11
    good = """
import torch, yaml
import numpy as np
torch.load(p, weights_only=True); np.load(p); np.load(p, allow_pickle=False); yaml.safe_load(s); model.eval()
"""
    assert unsafe_loads(good) == []
    loaders = """
import yaml
class Strict(yaml.SafeLoader):
    pass
class Loose(yaml.FullLoader):
    pass
yaml.load(s, Loader=Strict); yaml.load(s, Loader=yaml.SafeLoader)
yaml.load(s, Loader=Loose); yaml.load(s, Loader=yaml.UnsafeLoader); yaml.full_load(s)
"""
    assert [hit.split(": ", 1)[1] for hit in unsafe_loads(loaders)] == [
        "yaml.load(s, Loader=Loose)",
        "yaml.load(s, Loader=yaml.UnsafeLoader)",
        "yaml.full_load(s)",
    ]


def test_no_pickle_loading_in_the_library() -> None:
    """No pickle from user or Hub files: safetensors / Arrow / JSON / text only; ``torch.load(weights_only=True)``."""
    root = Path(spt_hf.__file__).parent
    found = [hit for path in sorted(root.rglob("*.py")) for hit in unsafe_loads(path.read_text(), str(path))]
    assert not found, "unsafe loading (use safetensors, weights_only=True, allow_pickle=False, yaml.safe_load):\n" + (
        "\n".join(found)
    )
