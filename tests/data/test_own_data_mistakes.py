"""A new user's mistakes with their own data (`task: custom`), through `spt-hf inspect --task_config` on fresh files:
each ends in one `error:` line naming the fix (or, where the data is fine, in a card), and leaves no partial entry in
the task cache and nothing in the data folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from spt_hf.cli import main as cli_main
from spt_hf.data.custom import task as custom_task
from spt_hf.data.custom.formats import detect, format_named

DOCS = Path(__file__).resolve().parents[2] / "docs" / "own-data.md"
RNG = np.random.default_rng(0)


def write(folder: Path, files: dict[str, str]) -> Path:
    """Writes ``files`` (relative name -> text; ``None`` makes an empty folder) and a task file naming the source."""
    for name, text in files.items():
        path = folder / name
        if text is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return folder / "task.yaml"


def left_behind(cache: Path) -> list[str]:
    """What a failed inspect must not leave in the task cache: an inference, or a half-written file."""
    return sorted(
        str(p.relative_to(cache))
        for p in cache.rglob("*")
        if "custom-inference" in p.parts or re.search(r"\.tmp\d*$|\.incomplete$", p.name)  # not datasets' locks
    )


def inspect(folder: Path, capsys, *flags: str) -> tuple[int, str, str]:
    """(exit status, stdout, the one error message or "") of `spt-hf inspect --task_config folder/task.yaml`."""
    custom_task._MEMO.clear()
    status = cli_main(["inspect", "--task_config", str(folder / "task.yaml"), *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == (status != 0), err
    return status, out, errors[0].split(": error: ", 1)[1] if errors else ""


def fails_in_one_line(folder: Path, cache: Path, capsys) -> str:
    """The one-line message of a failed inspect, checking that nothing was left behind."""
    before = sorted(p.name for p in folder.rglob("*"))
    status, _, message = inspect(folder, capsys)
    assert status == 1 and message
    assert left_behind(cache) == [] and sorted(p.name for p in folder.rglob("*")) == before
    return message


def task_file(**options) -> str:
    return "task: custom\ntask_options:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in options.items())


def text_csv(n: int = 40, labels: tuple[str, ...] = ("neg", "pos")) -> str:
    rows = [f"{'ab' * (1 + i % 3) if i % 2 else 'cd' * (1 + i % 4)},{labels[i % len(labels)]}" for i in range(n)]
    return "text,label\n" + "\n".join(rows) + "\n"


def ucr_text(n: int, sep: str = " ") -> str:
    """UCR's own text: the class first, written as a float, then the values."""
    rows = [[float(1 + i % 2), *RNG.normal(size=12)] for i in range(n)]
    return "".join(sep.join(f"{v:.7e}" for v in row) + "\n" for row in rows)


# ---------------------------------------------------------------- problem_type in a task file
def test_problem_type_in_a_task_file_is_taken(tmp_path, capsys):
    rows = "".join(f"{'ab' * (1 + i % 5)},{i % 3}\n" for i in range(30))
    write(tmp_path, {"data.csv": "text,label\n" + rows, "task.yaml": task_file(data_files="data.csv")})
    (tmp_path / "task.yaml").write_text(task_file(data_files="data.csv", problem_type="regression"))
    status, out, _ = inspect(tmp_path, capsys, "--json")
    card = json.loads(out)
    assert status == 0 and card["problem_type"] == "regression" and card["num_labels"] == 1
    assert card["problem_type_evidence"] == "problem_type set in task_options"


def test_an_unknown_problem_type_names_the_allowed(tmp_path, capsys, isolated_cache):
    write(tmp_path, {"data.csv": text_csv(), "task.yaml": task_file(data_files="data.csv", problem_type="regresion")})
    message = fails_in_one_line(tmp_path, isolated_cache, capsys)
    assert message == "problem_type='regresion'; allowed: ['single_label_classification', 'regression']"


# ---------------------------------------------------------------- multichannel rows
def test_channels_of_different_lengths_name_the_row(tmp_path, capsys, isolated_cache):
    rows = [{"series": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "label": i % 2} for i in range(20)]
    rows[5]["series"][1] = [4.0, 5.0]
    data = "".join(json.dumps(row) + "\n" for row in rows)
    write(tmp_path, {"data.jsonl": data, "task.yaml": task_file(data_files="data.jsonl")})
    message = fails_in_one_line(tmp_path, isolated_cache, capsys)
    assert re.fullmatch(
        r".*data\.jsonl train row 6: column 'series' holds lists of different lengths \[3, 2\]: a series' "
        r"channels \(or each step's channels\) must be equally long; make them equal",
        message,
    ), message


# ---------------------------------------------------------------- a numeric target stored as text
def test_numbers_stored_as_text_suggest_regression(tmp_path, capsys, isolated_cache):
    labels = [f"{RNG.uniform(0, 100):.3f}" for _ in range(183)]
    rows = "".join(json.dumps({"text": "ab" * (1 + i % 4), "label": label}) + "\n" for i, label in enumerate(labels))
    write(tmp_path, {"data.jsonl": rows, "task.yaml": task_file(data_files="data.jsonl")})
    message = fails_in_one_line(tmp_path, isolated_cache, capsys)
    assert "the labels all parse as numbers (183 distinct, e.g. " in message
    assert message.endswith(
        "a regression target? set problem_type: regression (or problem_type: single_label_classification for classes)"
    )
    (tmp_path / "task.yaml").write_text(task_file(data_files="data.jsonl", problem_type="regression"))
    status, out, _ = inspect(tmp_path, capsys, "--json")
    assert status == 0 and json.loads(out)["problem_type"] == "regression"


def test_integer_classes_stored_as_text_stay_classes(tmp_path, capsys):
    rows = "".join(json.dumps({"text": "ab" * (1 + i % 4), "label": str(i % 3)}) + "\n" for i in range(60))
    write(tmp_path, {"data.jsonl": rows, "task.yaml": task_file(data_files="data.jsonl")})
    status, out, _ = inspect(tmp_path, capsys, "--json")
    assert status == 0 and json.loads(out)["label_names"] == ["0", "1", "2"]


# ---------------------------------------------------------------- UCR text
@pytest.mark.parametrize(
    ("suffix", "sep"), [(".txt", " "), (".txt", "  "), (".tsv", "\t"), ("", ","), (".csv", ",")], ids=repr
)
def test_ucr_text_is_detected_by_its_archive_names(suffix, sep, tmp_path, capsys):
    files = {f"GunPoint_TRAIN{suffix}": ucr_text(30, sep), f"GunPoint_TEST{suffix}": ucr_text(10, sep)}
    write(tmp_path, {**files, "task.yaml": task_file(data_dir=".")})
    assert all(detect(tmp_path / name) is format_named("ucr") for name in files)
    status, out, _ = inspect(tmp_path, capsys, "--json")
    card = json.loads(out)
    assert status == 0 and card["source"]["kind"] == "ucr" and card["label_names"] == ["1", "2"]
    assert card["splits"]["test"] == 10 and card["num_channels"] == 1


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("train.csv", "x,y,label\n1,2,a\n"),
        ("GunPoint_TRAIN.csv", "value,label\n1.5,2\n"),  # a header: ordinary csv
        ("GunPoint_TRAIN.tsv", "1.5\t2.5\t3\n"),  # the first value is no class
        ("GunPoint_TRAIN.txt", "the first line\n"),
        ("notes_TRAIN.txt", "1\n"),  # one number: no series
        ("gunpoint_train.txt", "1 0.5 0.25\n"),  # not the archive's name
    ],
)
def test_ordinary_files_are_not_taken_for_ucr(name, text, tmp_path):
    (tmp_path / name).write_text(text)
    assert detect(tmp_path / name) is not format_named("ucr")


@pytest.mark.parametrize("name", ["series.txt", "series.tsv", "series.csv"])
def test_ucr_text_under_another_name_says_format_ucr(name, tmp_path, capsys, isolated_cache):
    text = ucr_text(30, "," if name.endswith("csv") else "\t")
    write(tmp_path, {name: text, "task.yaml": task_file(data_files=name)})
    message = fails_in_one_line(tmp_path, isolated_cache, capsys)
    assert message.startswith(f"{tmp_path / name}:1: ") and "set task_options.format: ucr" in message


# ---------------------------------------------------------------- class folders, row numbers, typos
def test_an_empty_class_folder_is_named(tmp_path, capsys, isolated_cache):
    files = {f"corpus/train/{c}/{i}.txt": "ab" * (i + 1) for c in ("neg", "pos") for i in range(6)}
    write(tmp_path, {**files, "corpus/train/neutral": None, "task.yaml": task_file(data_dir="corpus")})
    message = fails_in_one_line(tmp_path, isolated_cache, capsys)
    assert message == (
        f"custom task: class folder {tmp_path / 'corpus/train/neutral'} holds no files; "
        "put its examples in it or remove it"
    )


def test_an_empty_split_folder_is_named(tmp_path, capsys, isolated_cache):
    files = {f"corpus/train/{c}/{i}.txt": "ab" * (i + 1) for c in ("neg", "pos") for i in range(6)}
    write(tmp_path, {**files, "corpus/test": None, "task.yaml": task_file(data_dir="corpus")})
    message = fails_in_one_line(tmp_path, isolated_cache, capsys)
    assert message.startswith(f"custom task: split folder {tmp_path / 'corpus/test'} holds no class folders")


@pytest.mark.parametrize(
    ("row", "bad", "expected"),
    [
        (3, ",neg", "data.csv train row 3: empty input in column 'text'"),
        (1, "ab,", "data.csv train row 1: no label in column 'label'"),
        (20, "ab,", "data.csv train row 20: no label in column 'label'"),
    ],
)
def test_row_numbers_count_from_one(row, bad, expected, tmp_path, capsys, isolated_cache):
    lines = text_csv(20).splitlines()
    lines[row] = bad  # line 0 is the header: data row 1 is line 1
    write(tmp_path, {"data.csv": "\n".join(lines) + "\n", "task.yaml": task_file(data_files="data.csv")})
    assert expected in fails_in_one_line(tmp_path, isolated_cache, capsys)


def test_row_numbers_of_series_count_from_one(tmp_path, capsys, isolated_cache):
    rows = [{"series": [1.0, 2.0], "label": i % 2} for i in range(10)]
    rows[0]["series"] = [1.0, None]
    data = "".join(json.dumps(r) + "\n" for r in rows)
    write(tmp_path, {"data.jsonl": data, "task.yaml": task_file(data_files="data.jsonl")})
    assert "data.jsonl train row 1: missing value" in fails_in_one_line(tmp_path, isolated_cache, capsys)


@pytest.mark.parametrize(
    ("task_yaml", "expected"),
    [
        ("task: custom\ntask_option:\n  data_files: data.csv\n", "did you mean `task_options`?"),
        (task_file(data_files="data.csv", label_colum="label"), "did you mean label_column?"),
        (task_file(data_files="data.csv", input_columm="text"), "did you mean input_column or input_columns?"),
    ],
)
def test_a_typo_in_a_key_gets_a_did_you_mean(task_yaml, expected, tmp_path, capsys, isolated_cache):
    write(tmp_path, {"data.csv": text_csv(), "task.yaml": task_yaml})
    assert expected in fails_in_one_line(tmp_path, isolated_cache, capsys)


def test_the_docs_list_every_task_option():
    """docs/own-data.md's table of options names each of CustomTask.OPTIONS once, and nothing else."""
    section = DOCS.read_text().split("## Every option", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)
    assert sorted(documented) == sorted(custom_task.CustomTask.OPTIONS)
    assert len(set(documented)) == len(documented)
