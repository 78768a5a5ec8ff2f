"""benchmarks/beyond_lra.py plans the comparison docs/benchmarks.md reports: its task files, the fortunes corpus it
writes, the task order (cheapest first) and the plan of one fair `compare` call, checked on a dry run (nothing is
trained). The fortunes are a small stand-in folder, so that the test needs no Debian package."""

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "beyond_lra.py"
UCR_ORDER = [
    "ItalyPowerDemand",
    "JapaneseVowels",
    "BasicMotions",
    "GunPoint",
    "ArrowHead",
    "PickupGestureWiimoteZ",
    "OSULeaf",
    "ACSF1",
]
CATEGORIES = ("computers", "politics", "science", "zippy")

pytest.importorskip("aeon", reason="the UCR/UEA files come with aeon's wheel (make installs it)")


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, env=env)


def fortunes_folder(folder: Path, per_category: int = 25) -> Path:
    """Four `.u8` files as the package has them: entries of one or more lines, each followed by a line `%`."""
    folder.mkdir()
    for index, category in enumerate(CATEGORIES):
        entries = [f"Entry {i} of file {index}:\n  a second line, {'x' * (i % 7)}." for i in range(per_category)]
        (folder / f"{category}.u8").write_text("".join(f"{entry}\n%\n" for entry in entries), encoding="utf-8")
    return folder


def test_the_dry_run_plans_every_task_cheapest_first_under_one_budget_rule(tmp_path):
    out = tmp_path / "out"
    done = run_script("--output_dir", str(out), "--fortunes_dir", str(fortunes_folder(tmp_path / "f")), "--dry_run")
    assert done.returncode == 0, done.stderr[-3000:]
    command = done.stdout.splitlines()[0]
    tasks = re.search(r"--task_config (.*?) --architectures", command).group(1).split()
    assert [Path(task).stem for task in tasks] == [*UCR_ORDER[:-1], "Fortunes", "ACSF1"]  # by measured phase cost
    assert "--architectures s4 dlr transformer --seeds 0 1 2 --preset tiny --early_stopping_patience 3" in command

    rows = [line.split(" | ") for line in done.stdout.splitlines() if re.match(r"\| \w+/\w+/full/seed\d/\w+ \|", line)]
    assert len(rows) == 9 * 3 * 3 * 3  # tasks × architectures × seeds × (SPT, finetune, scratch)
    budgets = {row[0].lstrip("| ").rsplit("/", 1)[1]: row[3] for row in rows}
    assert budgets == {
        "spt": "600 steps (tied, early stopping 3)",
        "finetune": "600 steps (tied, early stopping 3)",
        "scratch": "1200 steps (tied, early stopping 3)",
    }
    assert {row[3] for row in rows} == set(budgets.values())  # the same rule for every task and architecture

    for name in UCR_ORDER:  # the published train and test files, a quarter of train carved for validation
        text = (out / "tasks" / f"{name}.yaml").read_text()
        files = re.findall(r"(?:train|test): (\S+)", text)
        assert len(files) == 2 and all(Path(path).is_file() for path in files), text
        assert "validation_size: 0.25" in text
    with (out / "data" / "fortunes.csv").open(newline="", encoding="utf-8") as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == 4 * 25 and {row["label"] for row in written} == set(CATEGORIES)
    assert written[0]["text"] == "Entry 0 of file 0:\n  a second line, ."  # whole entries, lines kept


def test_a_missing_fortunes_folder_is_one_line_naming_the_fix(tmp_path):
    done = run_script("--output_dir", str(tmp_path / "out"), "--fortunes_dir", str(tmp_path / "none"), "--dry_run")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("is missing: apt-get install fortunes (or --fortunes_dir FOLDER)")
