"""Reading a custom task's source (data/custom/sources.py): files, folders, Hub ids, and the real UCR/UEA archives
shipped inside the aeon and tslearn wheels (tests skip, saying why, when those are not installed)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spt_hf.data.custom.folders import natural_key
from spt_hf.data.custom.sources import read_source, split_of
from spt_hf.data.spec import DataFormatError


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


AEON, TSLEARN = package_dir("aeon"), package_dir("tslearn")
needs_aeon = pytest.mark.skipif(AEON is None, reason="aeon absent: pip install --no-deps aeon==1.6.0")
needs_tslearn = pytest.mark.skipif(TSLEARN is None, reason="tslearn absent: pip install --no-deps tslearn==0.10.0")


def aeon_set(name: str) -> Path:
    return AEON / "datasets" / "data" / name


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def arrow_backed(ds: datasets.Dataset) -> bool:
    """Memory-mapped from an Arrow file in the cache, not an in-memory table."""
    return bool(ds.cache_files)


# ---------------------------------------------------------------- the options
def test_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data_files and hub_id are both given; set exactly one"):
        read_source({"data_files": "a.csv", "hub_id": "x/y"})
    with pytest.raises(ValueError, match="no source is given"):
        read_source({"input_column": "text"})
    with pytest.raises(ValueError, match="format 'xls' is unknown; use one of csv, tsv"):
        read_source({"data_files": "a.csv", "format": "xls"})


def test_split_names_from_files() -> None:
    assert split_of(Path("GunPoint_TRAIN.ts")) == "train"
    assert split_of(Path("x/test.csv")) == "test"
    assert split_of(Path("dev-00000-of-00001.parquet")) == "validation"
    assert split_of(Path("reviews.csv")) is None
    assert sorted(["10", "2", "1", "a10", "a2"], key=natural_key) == ["1", "2", "10", "a2", "a10"]


# ---------------------------------------------------------------- packaged builders
def test_csv_splits_from_names(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "train.csv").write_text("text,label\nhello world,pos\nbad day,neg\nfine,pos\n")
    (tmp_path / "test.csv").write_text("text,label\nok,pos\n")
    raw = read_source({"data_files": str(tmp_path / "*.csv"), "label_column": "ignored"}, cache)
    assert raw.kind == "csv" and sorted(raw.splits) == ["test", "train"]
    assert raw.splits["train"]["label"] == ["pos", "neg", "pos"] and raw.columns == ["text", "label"]
    assert arrow_backed(raw.splits["train"]) and raw.label_hint is None
    assert str(cache) in raw.splits["train"].cache_files[0]["filename"]


def test_json_parquet_tsv_mapping(tmp_path: Path, cache: Path) -> None:
    rows = [{"seq": [1, 2, 3], "y": 0.5}, {"seq": [4], "y": 1.5}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    (tmp_path / "c.tsv").write_text("s\ty\nab\t1\n")
    raw = read_source({"data_files": {"train": str(tmp_path / "a.jsonl"), "eval": [str(tmp_path / "a.jsonl")]}}, cache)
    assert sorted(raw.splits) == ["eval", "train"] and raw.splits["train"]["seq"] == [[1, 2, 3], [4]]
    raw = read_source({"data_files": str(tmp_path / "b.parquet")}, cache)
    assert list(raw.splits) == ["train"] and raw.splits["train"]["y"] == [0.5, 1.5] and raw.kind == "parquet"
    raw = read_source({"data_files": str(tmp_path / "c.tsv")}, cache)
    assert raw.splits["train"].column_names == ["s", "y"]


def test_bad_files(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"empty.csv: the file is empty"):
        read_source({"data_files": str(tmp_path / "empty.csv")}, cache)
    (tmp_path / "latin.csv").write_bytes(b"text,label\ncaf\xe9,1\n")
    with pytest.raises(DataFormatError, match=r"latin.csv:2: not UTF-8 text \(byte 0xE9"):
        read_source({"data_files": str(tmp_path / "latin.csv")}, cache)
    (tmp_path / "x.xlsx").write_text("a")
    with pytest.raises(ValueError, match=r"x.xlsx: unknown format '.xlsx'; use files ending in .csv"):
        read_source({"data_files": str(tmp_path / "x.xlsx")}, cache)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        read_source({"data_files": str(tmp_path / "*.nothing")}, cache)
    with pytest.raises(ValueError, match="is a folder; use data_dir"):
        read_source({"data_files": str(tmp_path)}, cache)
    (tmp_path / "train.txt").write_text("a\n")
    (tmp_path / "notes.txt").write_text("b\n")
    with pytest.raises(ValueError, match="notes.txt name no split while other data_files do"):
        read_source({"data_files": [str(tmp_path / "train.txt"), str(tmp_path / "notes.txt")]}, cache)


# ---------------------------------------------------------------- save_to_disk and the Hub
def test_save_to_disk_and_class_label_hint(tmp_path: Path, cache: Path) -> None:
    features = datasets.Features({"x": datasets.Value("string"), "label": datasets.ClassLabel(names=["no", "yes"])})
    part = datasets.Dataset.from_dict({"x": ["a", "b"], "label": [1, 0]}, features=features)
    dd = datasets.DatasetDict({"train": part, "test": part})
    dd.save_to_disk(str(tmp_path / "dd"))
    raw = read_source({"data_dir": str(tmp_path / "dd")}, cache)
    assert raw.kind == "save_to_disk" and sorted(raw.splits) == ["test", "train"] and arrow_backed(raw.splits["test"])
    assert raw.label_hint.class_names == ("no", "yes") and raw.label_hint.column == "label"
    assert raw.label_hint.problem_type == "single_label_classification"
    dd["train"].save_to_disk(str(tmp_path / "one"))
    assert list(read_source({"data_dir": str(tmp_path / "one")}, cache).splits) == ["train"]


def test_hub_id_offline_not_cached(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=r"hub_id 'someone/absent-set' is not in the local cache and this machine is "):
        read_source({"hub_id": "someone/absent-set", "hub_revision": "main"}, cache)


def test_empty_data_dir(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "readme.md").write_text("nothing here")
    with pytest.raises(FileNotFoundError, match="holds none of: a save_to_disk folder"):
        read_source({"data_dir": str(tmp_path)}, cache)
