"""Reading a custom task's source (data/custom/sources.py): files, folders, Hub ids, and the real UCR/UEA archives
shipped inside the aeon and tslearn wheels (tests skip, saying why, when those are not installed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spt_hf.data.custom.files import split_of
from spt_hf.data.custom.folders import natural_key
from spt_hf.data.custom.sources import read_source
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


def test_an_edited_file_is_read_again(tmp_path: Path, cache: Path) -> None:
    for name, first, second in [("a.csv", "x\n1\n", "x\n2\n"), ("a.fa", ">s|p\nAC\n", ">s|p\nGG\n")]:
        path = tmp_path / name
        path.write_text(first)
        column = "x" if name.endswith("csv") else "sequence"
        before = read_source({"data_files": str(path)}, cache).splits["train"][column]
        path.write_text(second)
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # a later modification time
        assert read_source({"data_files": str(path)}, cache).splits["train"][column] != before


def test_json_parquet_tsv_mapping(tmp_path: Path, cache: Path) -> None:
    rows = [{"seq": [1, 2, 3], "y": 0.5}, {"seq": [4], "y": 1.5}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    (tmp_path / "c.tsv").write_text("s\ty\nab\t1\n")
    raw = read_source({"data_files": {"train": str(tmp_path / "a.jsonl"), "eval": [str(tmp_path / "a.jsonl")]}}, cache)
    assert sorted(raw.splits) == ["eval", "train"] and raw.splits["train"]["seq"] == [[1, 2, 3], [4]]
    raw = read_source({"data_files": str(tmp_path / "b.parquet")}, cache)
    assert list(raw.splits) == ["train"] and raw.splits["train"]["y"] == [0.5, 1.5] and raw.kind == "parquet"
    assert read_source({"data_files": str(tmp_path / "a.jsonl"), "format": "jsonl"}, cache).kind == "json"
    raw = read_source({"data_files": str(tmp_path / "c.tsv")}, cache)
    assert raw.splits["train"].column_names == ["s", "y"]
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(tmp_path / "train.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as writer:
        writer.write_table(table)
    raw = read_source({"data_files": str(tmp_path / "train.arrow")}, cache)
    assert raw.kind == "arrow" and raw.splits["train"]["seq"] == [[1, 2, 3], [4]]


def test_bad_files(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"empty.csv: the file is empty"):
        read_source({"data_files": str(tmp_path / "empty.csv")}, cache)
    (tmp_path / "latin.csv").write_bytes(b"text,label\ncaf\xe9,1\n")
    with pytest.raises(DataFormatError, match=r"latin.csv:2: not UTF-8 text \(byte 0xE9"):
        read_source({"data_files": str(tmp_path / "latin.csv")}, cache)
    assert not list(cache.rglob("*.arrow"))  # nothing half-written
    (tmp_path / "x.xlsx").write_text("a")
    with pytest.raises(ValueError, match=r"x.xlsx: unknown format '.xlsx'; use files ending in .csv"):
        read_source({"data_files": str(tmp_path / "x.xlsx")}, cache)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        read_source({"data_files": str(tmp_path / "*.nothing")}, cache)
    with pytest.raises(ValueError, match="data_files for split 'test' is empty; give files"):
        read_source({"data_files": {"train": str(tmp_path / "empty.csv"), "test": []}}, cache)
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
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)  # datasets' own cache, here a fresh one
    with pytest.raises(ValueError, match=r"hub_id 'someone/absent-set' is not in the local cache and this machine is "):
        read_source({"hub_id": "someone/absent-set", "hub_revision": "main"}, cache)


def test_hub_id_loads_through_load_dataset(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The success path, offline: ``load_dataset`` also takes a local repository folder as its id."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "train.csv").write_text("text,label\na,1\nb,2\n")
    (tmp_path / "repo" / "test.csv").write_text("text,label\nc,1\n")
    raw = read_source({"hub_id": str(tmp_path / "repo"), "hub_revision": None, "input_column": "text"})
    assert raw.kind == "hub" and raw.hub_id == str(tmp_path / "repo") and raw.files == ()
    assert {s: d.num_rows for s, d in raw.splits.items()} == {"train": 2, "test": 1} and raw.label_hint is None


def test_empty_data_dir(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "readme.md").write_text("nothing here")
    with pytest.raises(FileNotFoundError, match="holds none of: a save_to_disk folder"):
        read_source({"data_dir": str(tmp_path)}, cache)


# ---------------------------------------------------------------- .ts, UCR text, npz: the real archives
@needs_aeon
def test_ts_pair_in_data_dir(cache: Path) -> None:
    raw = read_source({"data_dir": str(aeon_set("GunPoint"))}, cache)
    assert raw.kind == "ts" and list(raw.splits) == ["train", "test"]
    assert (raw.splits["train"].num_rows, raw.splits["test"].num_rows) == (50, 150)
    series = np.asarray(raw.splits["train"].with_format("numpy")[0]["input_values"])
    assert series.shape == (150, 1) and series.dtype == np.float32 and arrow_backed(raw.splits["test"])
    assert (
        raw.label_hint.class_names == ("1", "2")
        and "@classLabel true 1 2 in GunPoint_TRAIN.ts" in raw.label_hint.evidence
    )
    assert set(raw.splits["test"]["label"]) == {"1", "2"} and "input_values" in raw.columns_info


@needs_aeon
def test_ts_arrowhead(cache: Path) -> None:
    raw = read_source({"data_dir": str(aeon_set("ArrowHead"))}, cache)
    assert {s: d.num_rows for s, d in raw.splits.items()} == {"train": 36, "test": 175}
    assert {len(x) for x in raw.splits["test"]["input_values"]} == {251}
    assert raw.label_hint.class_names == ("0", "1", "2") and set(raw.splits["train"]["label"]) == {"0", "1", "2"}


@needs_aeon
def test_ts_multichannel_and_unequal(cache: Path) -> None:
    folder = aeon_set("JapaneseVowels")
    with pytest.raises(ValueError, match=r"several .ts sets \(JapaneseVowels, JapaneseVowels_eq\); name the files"):
        read_source({"data_dir": str(folder)}, cache)
    files = {"train": str(folder / "JapaneseVowels_TRAIN.ts"), "test": str(folder / "JapaneseVowels_TEST.ts")}
    raw = read_source({"data_files": files}, cache)
    train = raw.splits["train"].with_format("numpy")
    assert (raw.splits["train"].num_rows, raw.splits["test"].num_rows) == (270, 370)
    lengths = {np.asarray(train[i]["input_values"]).shape for i in range(0, 270, 9)}
    assert {c for _, c in lengths} == {12} and len({n for n, _ in lengths}) > 1  # (L, 12), L from 7 to 29
    assert raw.label_hint.class_names == tuple(str(i) for i in range(1, 10))
    folder = aeon_set("PickupGestureWiimoteZ")
    raw = read_source({"data_files": str(folder / "PickupGestureWiimoteZ_T*.ts")}, cache)  # TRAIN and TEST
    lengths = [len(x) for x in raw.splits["train"]["input_values"]]
    assert sorted(raw.splits) == ["test", "train"] and len(lengths) == 50 and min(lengths) < 100 < max(lengths)


@needs_aeon
def test_ucr_text_and_ts_agree(cache: Path) -> None:
    folder = aeon_set("GunPoint")
    with pytest.raises(DataFormatError, match=r"GunPoint_TRAIN.tsv:1: the first line is all numbers, .*format: ucr"):
        read_source({"data_files": str(folder / "GunPoint_TRAIN.tsv")}, cache)
    ucr = read_source({"data_files": str(folder / "GunPoint_TRAIN.tsv"), "format": "ucr"}, cache)
    ts = read_source({"data_files": str(folder / "GunPoint_TRAIN.ts")}, cache)
    assert ucr.kind == "ucr" and ucr.label_hint.problem_type == "single_label_classification"
    assert ucr.splits["train"]["label"] == ts.splits["train"]["label"]
    a, b = (np.asarray(r.splits["train"].with_format("numpy")[3]["input_values"]) for r in (ucr, ts))
    assert a.shape == b.shape == (150, 1) and np.allclose(a, b, atol=1e-6)


@needs_tslearn
def test_npz_trace(cache: Path) -> None:
    raw = read_source({"data_files": str(TSLEARN / ".cached_datasets" / "Trace.npz")}, cache)
    assert raw.kind == "npz" and sorted(raw.splits) == ["test", "train"] and raw.splits["train"].num_rows == 100
    assert np.asarray(raw.splits["test"].with_format("numpy")[0]["input_values"]).shape == (275, 1)
    assert raw.splits["train"].features["label"].dtype == "int64"


def test_npz_layouts_and_bad_arrays(tmp_path: Path, cache: Path) -> None:
    np.savez(tmp_path / "multi.npz", X=np.arange(24.0).reshape(2, 4, 3), y=np.array(["a", "b"]))
    raw = read_source({"data_files": str(tmp_path / "multi.npz")}, cache)
    first = np.asarray(raw.splits["train"].with_format("numpy")[0]["input_values"])
    assert first.shape == (4, 3) and first[1, 2] == 5 and raw.splits["train"]["label"] == ["a", "b"]
    np.savez(tmp_path / "objects.npz", X=np.zeros((2, 3)), y=np.array(["a", None], dtype=object))
    with pytest.raises(DataFormatError, match=r"objects.npz: X/y: .*; save numeric or string arrays"):
        read_source({"data_files": str(tmp_path / "objects.npz")}, cache)
    np.savez(tmp_path / "wrong.npz", X=np.zeros((2, 3)), y=np.zeros(3))
    with pytest.raises(DataFormatError, match=r"wrong.npz: X \(2, 3\) and y \(3,\) do not fit"):
        read_source({"data_files": str(tmp_path / "wrong.npz")}, cache)
    np.savez(tmp_path / "odd.npz", data=np.zeros(3))
    with pytest.raises(DataFormatError, match=r"odd.npz: arrays \['data'\] found; expected an .npz file with arrays X"):
        read_source({"data_files": str(tmp_path / "odd.npz")}, cache)


def write_ts(path: Path, header: str, lines: list[str]) -> Path:
    path.write_text(f"@problemName X\n{header}\n@data\n" + "\n".join(lines) + "\n")
    return path


def test_ts_headers_missing_values_and_regression(tmp_path: Path, cache: Path) -> None:
    path = write_ts(tmp_path / "r.ts", "@TARGETLABEL true", ["1,?,3:4,5,6:0.25", "1,2:3,4:1.5"])
    raw = read_source({"data_files": str(path)}, cache)
    first = np.asarray(raw.splits["train"].with_format("numpy")[0]["input_values"])
    assert first.shape == (3, 2) and np.isnan(first[1, 0]) and first[2, 1] == 6
    assert raw.splits["train"]["label"] == [0.25, 1.5] and raw.label_hint.problem_type == "regression"
    path = write_ts(tmp_path / "u.ts", "@classLabel false", ["1,2,3", "4,5"])
    raw = read_source({"data_files": str(path)}, cache)
    assert raw.columns == ["input_values"] and raw.label_hint is None


@needs_aeon
def test_ts_percent_comments_and_timestamps(cache: Path) -> None:
    folder = aeon_set("UnitTest")  # '%' comments before the header (ARFF style)
    raw = read_source({"data_files": str(folder / "UnitTest_T*.ts")}, cache)
    assert (raw.splits["train"].num_rows, raw.splits["test"].num_rows) == (20, 22)
    with pytest.raises(DataFormatError, match=r"UnitTestTimeStamps_TRAIN.ts: series with timestamps"):
        read_source({"data_files": str(folder / "UnitTestTimeStamps_TRAIN.ts")}, cache)


@pytest.mark.parametrize(
    ("header", "lines", "message"),
    [
        ("@classLabel true a b", ["1,2:3,4:a", "1,2:b"], r"bad.ts:5: 1 dimensions, expected 2"),
        ("@timeStamps true\n@classLabel true a", ["(0,1):a"], r"bad.ts: series with timestamps .* not supported"),
        ("@classLabel true a", [], r"bad.ts: no series after '@data'"),
        ("@classLabel true a", ["1,x:a"], r"bad.ts:4: dimension 0, step 1: value 'x' is not a number"),
        ("@classLabel true a", ["1,2:"], r"bad.ts:4: the label \(last ':' field\) is empty"),
        ("@classLabel true a b", ["1,2:a", "3:c"], r"bad.ts:5: label 'c' is not among the header's @classLabel names"),
    ],
)
def test_ts_bad_input(tmp_path: Path, cache: Path, header: str, lines: list[str], message: str) -> None:
    path = write_ts(tmp_path / "bad.ts", header, lines)
    with pytest.raises(DataFormatError, match=message):
        read_source({"data_files": str(path)}, cache)
    assert not list(cache.rglob("*.arrow"))  # nothing half-written


def test_ucr_float_labels_and_bad_rows(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "s_TRAIN.txt").write_text("1.0000000e+00 0.5 0.25\n2.0000000e+00\t1 2 3\n")
    raw = read_source({"data_files": str(tmp_path / "s_TRAIN.txt"), "format": "ucr"}, cache)
    assert raw.splits["train"]["label"] == ["1", "2"] and [len(x) for x in raw.splits["train"]["input_values"]] == [
        2,
        3,
    ]
    (tmp_path / "archive").mkdir()  # the UCR 2018 archive's layout: <name>/<name>_TRAIN.tsv and <name>_TEST.tsv
    (tmp_path / "archive" / "S_TRAIN.tsv").write_text("1\t0.5\t0.25\n")
    (tmp_path / "archive" / "S_TEST.tsv").write_text("2\t1\t2\n1\t3\t4\n")
    raw = read_source({"data_dir": str(tmp_path / "archive"), "format": "ucr"}, cache)
    assert raw.kind == "ucr" and raw.splits["test"]["label"] == ["2", "1"] and raw.splits["train"].num_rows == 1
    (tmp_path / "bad.txt").write_text("1 0.5\n2 0.1 oops\n")
    with pytest.raises(DataFormatError, match=r"bad.txt:2: a value is not a number"):
        read_source({"data_files": str(tmp_path / "bad.txt"), "format": "ucr"}, cache)


# ---------------------------------------------------------------- FASTA
def test_fasta_labels(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "train.fa").write_text(">s1 label=promoter extra\nACGT\nAC\n>s2 label=none\nGG\n")
    (tmp_path / "test.fasta").write_text(">t1|promoter\nTTTT\n")
    raw = read_source({"data_files": [str(tmp_path / "train.fa"), str(tmp_path / "test.fasta")]}, cache)
    assert raw.kind == "fasta" and raw.splits["train"].to_dict() == {
        "id": ["s1", "s2"],
        "sequence": ["ACGTAC", "GG"],
        "label": ["promoter", "none"],
    }
    assert raw.splits["test"]["id"] == ["t1"] and raw.splits["test"]["label"] == ["promoter"]
    (tmp_path / "mixed.fna").write_text(">a label=x\nAC\n>b\nGT\n")
    with pytest.raises(DataFormatError, match=r"mixed.fna:3: record 'b' has no label while the first record has one"):
        read_source({"data_files": str(tmp_path / "mixed.fna")}, cache)
    (tmp_path / "late.fa").write_text(">a\nAC\n>b|x\nGT\n")
    with pytest.raises(DataFormatError, match=r"late.fa:3: record 'b' has a label while the first has none"):
        read_source({"data_files": str(tmp_path / "late.fa")}, cache)
    (tmp_path / "plain.fa").write_text(">a\nAC\n")
    assert read_source({"data_files": str(tmp_path / "plain.fa")}, cache).columns == ["id", "sequence"]


# ---------------------------------------------------------------- class folders and split-named files
def test_class_folders_text_and_series(tmp_path: Path, cache: Path) -> None:
    for split, label, name, text in [
        ("train", "10", "a.txt", "ten"),
        ("train", "2", "b.txt", "two"),
        ("test", "2", "c", "2"),
    ]:
        (tmp_path / "t" / split / label).mkdir(parents=True, exist_ok=True)
        (tmp_path / "t" / split / label / name).write_text(text)
    raw = read_source({"data_dir": str(tmp_path / "t")}, cache)
    assert raw.kind == "class_folders" and raw.label_hint.class_names == ("2", "10")
    assert raw.splits["train"].to_dict() == {
        "text": ["two", "ten"],
        "label": ["2", "10"],
        "file": ["train/2/b.txt", "train/10/a.txt"],
    }
    for label, shape in [("up", (5, 2)), ("down", (7, 2))]:
        (tmp_path / "s" / label).mkdir(parents=True)
        np.save(tmp_path / "s" / label / "x.npy", np.ones(shape))
    raw = read_source({"data_dir": str(tmp_path / "s")}, cache)
    assert list(raw.splits) == ["train"] and [len(x) for x in raw.splits["train"]["input_values"]] == [7, 5]
    (tmp_path / "s" / "up" / "y.csv").write_text("a,b\n1,2\n3,4\n")
    raw = read_source({"data_dir": str(tmp_path / "s")}, cache)
    assert [len(x) for x in raw.splits["train"]["input_values"]] == [7, 5, 2]
    assert raw.splits["train"]["input_values"][2] == [[1, 2], [3, 4]]
    (tmp_path / "s" / "up" / "y.csv").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(DataFormatError, match=r"up/y.csv: 3 channels, the first series has 2"):
        read_source({"data_dir": str(tmp_path / "s")}, cache)
    (tmp_path / "s" / "up" / "y.csv").write_text("1,2\n4\n")
    with pytest.raises(DataFormatError, match=r"up/y.csv: not a rectangle of numbers"):
        read_source({"data_dir": str(tmp_path / "s")}, cache)
    (tmp_path / "s" / "up" / "bad.bin").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"class folders mix series \(.npy, .csv\) and other files"):
        read_source({"data_dir": str(tmp_path / "s")}, cache)


def test_class_folder_bad_text(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "pos").mkdir()
    (tmp_path / "pos" / "a.txt").write_bytes(b"fine\nline \xff\n")
    with pytest.raises(DataFormatError, match=r"pos/a.txt:2: not UTF-8 text \(byte 0xFF\)"):
        read_source({"data_dir": str(tmp_path)}, cache)


def test_split_named_files_in_data_dir(tmp_path: Path, cache: Path) -> None:
    for split in ("train", "valid", "test"):
        pq.write_table(pa.table({"seq": [[1, 2], [3]], "label": [0, 1]}), tmp_path / f"{split}.parquet")
    raw = read_source({"data_dir": str(tmp_path)}, cache)
    assert sorted(raw.splits) == ["test", "train", "validation"] and raw.kind == "parquet"
    for split in ("train", "test"):
        (tmp_path / "nested" / split).mkdir(parents=True)
        (tmp_path / "nested" / split / "part-0.jsonl").write_text('{"text": "a b", "label": 1}\n')
        (tmp_path / "nested" / split / "part-1.jsonl").write_text('{"text": "c", "label": 0}\n')
    raw = read_source({"data_dir": str(tmp_path / "nested")}, cache)
    assert raw.kind == "json" and raw.splits["test"]["label"] == [1, 0] and sorted(raw.splits) == ["test", "train"]


@pytest.mark.slow  # about 30 s: two fresh processes importing datasets and spt_hf
def test_bench_data_rows_compares_the_custom_source_with_plain_map() -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_data.py"
    done = subprocess.run(
        [sys.executable, str(script), "--rows", "3000"], capture_output=True, text=True, timeout=600, env=os.environ
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["arm"] for r in rows] == ["custom", "plain"] and rows[0]["checksum"] == rows[1]["checksum"]
    assert all(r["rows"] == 3000 and r["rows_per_s"] > 0 for r in rows) and "| custom / plain |" in done.stdout


def test_hub_revision_from_the_cache_path(tmp_path: Path) -> None:
    from spt_hf.data.custom.sources import _resolved_revision

    commit = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "user___set" / "default" / "0.0.0" / commit).mkdir(parents=True)
    in_memory = datasets.Dataset.from_dict({"a": [1, 2]})
    cached = in_memory.map(lambda x: x, cache_file_name=str(tmp_path / "user___set/default/0.0.0" / commit / "t.arrow"))
    assert _resolved_revision({"train": cached}) == commit and _resolved_revision({"train": in_memory}) is None
