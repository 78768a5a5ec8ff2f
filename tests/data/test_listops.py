"""ListOps: LRA's file format in, our generator out, checked by an independent evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest

from spt_hf.cli import main as cli_main
from spt_hf.data import LISTOPS_VOCAB, DataFormatError, generate_listops, get_task_spec, load_task
from spt_hf.data.generators.listops import write_listops_splits
from spt_hf.data.vocab import EOS_ID, tokenize_listops


def test_reads_lra_generator_output(tmp_path: Path, lra_listops_writer) -> None:
    rows = lra_listops_writer(tmp_path / "out", (30, 6, 7), seed=3)
    assert (tmp_path / "out" / "basic_train.tsv").read_bytes().startswith(b"Source\tTarget\r\n")
    ds = load_task("listops", data_dir=tmp_path / "out")
    assert {k: len(v) for k, v in ds.items()} == {"train": 30, "validation": 6, "test": 7}
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test")):
        assert ds[split]["label"] == [int(r[1]) for r in rows[name]]
        expected = [*LISTOPS_VOCAB.encode(tokenize_listops(rows[name][0][0])), EOS_ID]
        assert ds[split][0]["input_ids"] == expected
    assert ds["train"].features["label"].num_classes == 10


def test_finds_lra_release_layouts(tmp_path: Path, lra_listops_writer) -> None:
    lra_listops_writer(tmp_path / "lra_release" / "lra_release" / "listops-1000", (5, 2, 2))
    for data_dir in (tmp_path, tmp_path / "lra_release", tmp_path / "lra_release" / "lra_release" / "listops-1000"):
        assert len(load_task("listops", data_dir=data_dir)["train"]) == 5


def test_missing_files_name_every_place_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        load_task("listops", data_dir=tmp_path)
    message = str(err.value)
    assert "basic_train.tsv" in message and str(tmp_path / "lra_release" / "listops-1000") in message
    with pytest.raises(FileNotFoundError, match="no official Hub host"):
        load_task("listops")


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("( [MAX 2 3 ] )\t11", "outside 0..9"),
        ("( [MAX 2 3 ] )\tseven", "not an integer"),
        ("( [MAX 2 3 ] )", "expected 2 tab-separated fields"),
        ("( [MAXX 2 3 ] )\t3", "unknown ListOps symbol '[MAXX'"),
    ],
)
def test_bad_rows_name_file_line_and_format(tmp_path: Path, lra_listops_writer, row: str, problem: str) -> None:
    lra_listops_writer(tmp_path, (4, 2, 2))
    path = tmp_path / "basic_val.tsv"
    path.write_text(path.read_text() + row + "\r\n")
    with pytest.raises(DataFormatError) as err:
        load_task("listops", data_dir=tmp_path)
    assert f"{path}:4:" in str(err.value) and problem in str(err.value) and "expected" in str(err.value)


def test_failed_build_leaves_nothing_in_cache(tmp_path: Path, lra_listops_writer, isolated_cache: Path) -> None:
    lra_listops_writer(tmp_path, (4, 2, 2))
    (tmp_path / "basic_test.tsv").write_text("Source\tTarget\r\n( [SM 1 2 ] )\t42\r\n")
    with pytest.raises(DataFormatError):
        load_task("listops", data_dir=tmp_path)
    assert list(isolated_cache.iterdir()) == []


def test_max_length_truncates_and_keeps_end_token(tmp_path: Path, lra_listops_writer) -> None:
    lra_listops_writer(tmp_path, (6, 2, 2), min_length=60)
    ds = load_task("listops", data_dir=tmp_path, max_length=32)
    assert all(len(ids) == 32 and ids[-1] == EOS_ID for ids in ds["train"]["input_ids"])
    no_eos = load_task("listops", data_dir=tmp_path, max_length=32, append_eos=False)
    assert EOS_ID not in no_eos["train"][0]["input_ids"]


def test_generator_values_checked_by_independent_evaluator(listops_evaluator) -> None:
    rows = generate_listops(300, min_length=10, max_length=150, max_depth=6, max_args=6, seed=5)
    assert len({r[0] for r in rows}) == 300
    for expression, value in rows:
        assert listops_evaluator(expression) == value
        assert 10 < len(tokenize_listops(expression)) < 150
        assert expression.count("(") == expression.count(")")


def test_generator_full_lra_bounds(listops_evaluator) -> None:
    rows = generate_listops(20, seed=1)
    for expression, value in rows:
        assert 500 < len(tokenize_listops(expression)) < 2000
        assert listops_evaluator(expression) == value


def test_generator_is_seeded() -> None:
    kwargs = dict(min_length=5, max_length=60, max_depth=5, max_args=4)
    assert generate_listops(50, seed=2, **kwargs) == generate_listops(50, seed=2, **kwargs)
    assert generate_listops(50, seed=2, **kwargs) != generate_listops(50, seed=3, **kwargs)


def test_generator_rejects_impossible_bounds() -> None:
    with pytest.raises(ValueError):
        generate_listops(5, min_length=100, max_length=50)


def test_cli_output_loads_and_evaluates(tmp_path: Path, listops_evaluator, capsys) -> None:
    argv = [
        "listops",
        "--output_dir",
        str(tmp_path / "gen"),
        "--num-train",
        "40",
        "--num-val",
        "5",
        "--num-test",
        "5",
        "--seed",
        "7",
        "--min-length",
        "10",
        "--max-length",
        "100",
        "--max-depth",
        "5",
        "--max-args",
        "5",
    ]
    assert cli_main(["generate-data", *argv]) == 0
    assert "examples/s" in capsys.readouterr().out
    for name in ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv"):
        lines = (tmp_path / "gen" / name).read_bytes().split(b"\r\n")
        assert lines[0] == b"Source\tTarget"
        for line in filter(None, lines[1:]):
            source, target = line.decode().split("\t")
            assert listops_evaluator(source) == int(target)
    ds = load_task("listops", data_dir=tmp_path / "gen")
    assert [len(ds[s]) for s in ("train", "validation", "test")] == [40, 5, 5]
    spec = get_task_spec("listops")
    assert max(max(ids) for ids in ds["train"]["input_ids"]) < spec.vocab_size


def test_written_splits_are_disjoint(tmp_path: Path) -> None:
    paths = write_listops_splits(tmp_path, 30, 10, 10, seed=0, min_length=5, max_length=60, max_depth=5, max_args=4)
    sources = [set(p.read_text().splitlines()[1:]) for p in paths.values()]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])


def test_hub_override_with_column_mapping(tmp_path: Path, lra_listops_writer) -> None:
    import datasets

    rows = lra_listops_writer(tmp_path / "tsv", (6, 2, 2))
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test")):
        data = {"expr": [r[0] for r in rows[name]], "answer": [int(r[1]) for r in rows[name]]}
        datasets.Dataset.from_dict(data).to_parquet(str(tmp_path / "hub" / f"{split}-00000-of-00001.parquet"))
    columns = {"source": "expr", "target": "answer"}
    ds = load_task("listops", data_dir=tmp_path / "hub", hub_id="someone/listops", hub_columns=columns)
    reference = load_task("listops", data_dir=tmp_path / "tsv")
    assert (
        ds["test"]["input_ids"] == reference["test"]["input_ids"]
        and ds["train"]["label"] == reference["train"]["label"]
    )
