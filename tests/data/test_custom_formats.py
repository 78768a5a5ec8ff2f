"""The custom task's table of formats (data/custom/formats.py): detection, the `format:` option, one example of every
row read through its reader, and docs/own-data.md listing the same rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spt_hf.data.custom.formats import FORMATS, SUFFIXES, detect, format_named, format_of
from spt_hf.data.custom.sources import read_source

DOCS = Path(__file__).resolve().parents[2] / "docs" / "own-data.md"
ROWS = [{"text": "ab", "label": "x"}, {"text": "ba", "label": "y"}]


def write_example(name: str, folder: Path) -> Path:
    """A small file of format ``name``, named with the row's first suffix (UCR text: ``.txt``)."""
    row = format_named(name)
    path = folder / f"example{row.suffixes[0] if row.suffixes else '.txt'}"
    if name in ("csv", "tsv"):
        sep = "," if name == "csv" else "\t"
        path.write_text("".join(f"{r['text']}{sep}{r['label']}\n" for r in [{"text": "text", "label": "label"}, *ROWS]))
    elif name == "json":
        path.write_text(json.dumps(ROWS))
    elif name in ("parquet", "arrow"):
        table = pa.Table.from_pylist(ROWS)
        if name == "parquet":
            pq.write_table(table, path)
        else:
            with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as writer:
                writer.write_table(table)
    elif name == "text":
        path.write_text("ab\nba\n")
    elif name == "ts":
        path.write_text("@problemName x\n@univariate true\n@classLabel true a b\n@data\n1,2,3:a\n4,5:b\n")
    elif name == "ucr":
        path.write_text("1 0.5 0.25 0.125\n2 1.0 2.0 3.0\n")
    elif name == "fasta":
        path.write_text(">s1 label=a\nACGT\n>s2 label=b\nGG\n")
    elif name == "npz":
        np.savez(path, X=np.zeros((2, 3), np.float32), y=np.array([0, 1]))
    else:
        raise AssertionError(f"no example for format {name!r}: add one with the row")
    return path


def test_the_table_is_unambiguous():
    names = [f.name for f in FORMATS]
    assert len(set(names)) == len(names) and len(set(SUFFIXES)) == len(SUFFIXES)
    assert all(s.startswith(".") and s == s.lower() for s in SUFFIXES)
    for row in FORMATS:  # each ending without its dot names its own row, never another
        assert all(format_named(s[1:]) is row for s in row.suffixes) and format_named(row.name) is row


@pytest.mark.parametrize("row", FORMATS, ids=lambda f: f.name)
def test_every_row_detects_its_own_example_and_reads_it(row, tmp_path):
    path = write_example(row.name, tmp_path)
    if row.suffixes:
        assert detect(path) is row and [f.name for f in FORMATS if f.matches(path)] == [row.name]
        assert format_of([path], None) is row
        options = {"data_files": str(path)}
    else:  # named by `format:` only: its example's ending selects another row, which the option overrides
        assert detect(path) is not row
        options = {"data_files": str(path), "format": row.name}
    raw = read_source(options, tmp_path / "cache")
    assert raw.kind == row.name and raw.splits["train"].num_rows == 2
    assert set(row.columns_info) <= set(raw.splits["train"].column_names) and raw.columns_info == row.columns_info


@pytest.mark.parametrize("given", ["xls", "JSON", "ucr2018"])
def test_an_unknown_format_is_one_line_listing_the_table(given):
    with pytest.raises(ValueError) as error:
        read_source({"data_files": "a.csv", "format": given})
    message = str(error.value)
    assert f"format {given!r} is unknown; use one of {', '.join(f.name for f in FORMATS)}" in message
    assert "\n" not in message


def test_an_unknown_ending_names_the_table_endings_and_names(tmp_path):
    (tmp_path / "a.xlsx").write_text("x")
    with pytest.raises(ValueError) as error:
        read_source({"data_files": str(tmp_path / "a.xlsx")})
    message = str(error.value)
    assert f"use files ending in {', '.join(SUFFIXES)}" in message and "\n" not in message
    assert message.endswith(f"one of {', '.join(f.name for f in FORMATS)}")


def test_the_docs_list_the_table():
    """docs/own-data.md's formats table has one line per row: its name and its endings, in the table's order."""
    lines = [line for line in DOCS.read_text().splitlines() if re.match(r"\| `[a-z]+` \| (`\.|none)", line)]
    documented = [(re.match(r"\| `([a-z]+)`", line)[1], tuple(re.findall(r"`(\.[a-z]+)`", line))) for line in lines]
    assert documented == [(f.name, f.suffixes) for f in FORMATS]
