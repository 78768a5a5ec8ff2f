"""Several tasks in one `spt-hf compare`: task files (`--task_config A.yaml B.yaml`, YAML `task_configs:` or
`task_config:`) beside named tasks, each task file a task named after its file, colliding names refused in one line;
end to end, the report's across-task numbers (aggregate.json) equal to those recomputed from runs.csv."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import error_line
from scipy import stats

from spt_hf.cli import main as cli_main
from spt_hf.compare import CompareSpec, build_plan


def custom_task_file(folder: Path, name: str, letters: tuple[str, str]) -> Path:
    """A task file of `task: custom` over a CSV of 48 short texts, two classes told apart by their letters."""
    rows = [f"{letters[i % 2] * (1 + i % 3)}{i},{'pos' if i % 2 else 'neg'}" for i in range(48)]
    (folder / f"{name}.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    path = folder / f"{name}.yaml"
    path.write_text(f"task: custom\ntask_options: {{data_files: {name}.csv, leakage_check: 'off'}}\n")
    return path


@pytest.fixture
def task_files(tmp_path) -> list[Path]:
    return [custom_task_file(tmp_path, "alpha", ("ab", "cd")), custom_task_file(tmp_path, "beta", ("ac", "bd"))]


def test_task_files_and_named_tasks_plan_one_comparison(task_files, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", "--task_config", *map(str, task_files), "--tasks", "digits", "--recipes_dir", "cpu"]
    argv += ["--architectures", "transformer", "--preset", "tiny", "--seeds", "0", "--output_dir", str(out)]
    assert cli_main([*argv, "--dry_run"]) == 0
    printed = capsys.readouterr().out
    assert (
        f"Recipes: the recipes shipped with spt_hf (recipes/cpu) for digits; written into {out}/recipes from the task "
        f"files (alpha <- {task_files[0]}, beta <- {task_files[1]})." in printed
    )
    for task, recipe in (("digits", "cpu/digits-transformer-spt.yaml"), ("alpha", f"{out}/recipes/alpha-transformer")):
        assert f"| {task}/transformer/full/seed0/spt | scratch | new |" in printed and f"| {recipe}" in printed
    assert "| beta/transformer/full/seed0/scratch | scratch | new |" in printed
    assert sorted(p.name for p in (out / "recipes").iterdir())[::2] == [
        "alpha-transformer-finetune.yaml",
        "beta-transformer-finetune.yaml",
    ]


def test_a_compare_yaml_lists_task_files_under_task_configs_or_gives_one_as_task_config(task_files, tmp_path, capsys):
    common = {"architectures": ["transformer"], "preset": "tiny", "seeds": [0], "output_dir": str(tmp_path / "cmp")}
    for key, value in (("task_configs", list(map(str, task_files))), ("task_config", str(task_files[1]))):
        config = tmp_path / f"{key}.yaml"
        config.write_text(json.dumps({**common, key: value}))
        assert cli_main(["compare", "--config", str(config), "--dry_run"]) == 0
        printed = capsys.readouterr().out
        assert ("| alpha/transformer/full/seed0/spt |" in printed) == (key == "task_configs")
        assert "| beta/transformer/full/seed0/spt |" in printed
    config.write_text(json.dumps({**common, "task_config": str(task_files[0]), "task_configs": [str(task_files[1])]}))
    assert cli_main(["compare", "--config", str(config), "--dry_run"]) == 1
    assert "gives `task_config` and `task_configs`" in error_line(capsys)


def test_two_task_files_of_one_name_are_refused_in_one_line_naming_both(task_files, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    twin = custom_task_file(other, "alpha", ("ab", "cd"))
    common = {"architectures": ["transformer"], "output_dir": str(tmp_path / "cmp")}
    with pytest.raises(ValueError, match=rf"^The task files {task_files[0]} and {twin} both name the task 'alpha'"):
        CompareSpec(task_configs=[str(task_files[0]), str(twin)], **common)
    digits = tmp_path / "digits.yaml"
    digits.write_text("task: digits\n")
    with pytest.raises(ValueError, match=r"names the task 'digits', as --tasks digits does: rename the file"):
        CompareSpec(task_configs=[str(digits)], tasks=["digits"], recipes_dir="cpu", **common)
    with pytest.raises(ValueError, match=r"^--recipes_dir is the folder of the --tasks' recipes"):
        CompareSpec(task_configs=[str(task_files[0])], recipes_dir="cpu", **common)
    assert not (tmp_path / "cmp").exists()


def test_task_overrides_reach_a_task_file_by_its_name(task_files, tmp_path):
    spec = CompareSpec(
        task_configs=list(map(str, task_files)),
        architectures=["transformer"],
        preset="tiny",
        seeds=[0],
        output_dir=str(tmp_path / "cmp"),
        task_overrides={"beta": {"learning_rate": 0.002}},
    )
    rates = {job.task: job.overrides.get("learning_rate") for job in build_plan(spec).jobs}
    assert rates == {"alpha": None, "beta": 0.002}
    with pytest.raises(
        ValueError, match=r"names tasks \['gamma'\] that the comparison does not run: \['alpha', 'beta'"
    ):
        CompareSpec(task_configs=list(map(str, task_files)), architectures=["s4"], task_overrides={"gamma": {}})


@pytest.mark.slow  # about 85 s on 2 shared cores (6 phases, each its own process)
def test_one_compare_of_two_task_files_writes_the_across_task_numbers_of_its_runs_csv(task_files, tmp_path):
    out = tmp_path / "cmp"
    argv = ["compare", "--task_config", *map(str, task_files), "--architectures", "transformer", "--preset", "tiny"]
    assert cli_main([*argv, "--seeds", "0", "--output_dir", str(out), "--max_parallel", "2", "--max_steps", "2"]) == 0
    with open(out / "runs.csv") as handle:
        records = [r for r in csv.DictReader(handle) if r["test"]]
    means = {}
    for task in ("alpha", "beta"):
        arms = {
            arm: [float(r["test"]) for r in records if r["task"] == task and (r["kind"] == "spt") == spt]
            for arm, spt in (("spt", True), ("baseline", False))
        }
        means[task] = {arm: np.mean(values) for arm, values in arms.items()}
    deltas = [means[t]["spt"] - means[t]["baseline"] for t in ("alpha", "beta")]
    aggregate = json.loads((out / "aggregate.json").read_text())
    got = aggregate["architectures"]["spt_rotary_transformer"]
    assert got["tasks"] == 2 and got["mean_delta"] == pytest.approx(np.mean(deltas))
    assert (got["wins"], got["ties"], got["losses"]) == tuple(
        sum(f(d) for d in deltas) for f in (lambda d: d > 0, lambda d: d == 0, lambda d: d < 0)
    )
    expected_p = stats.wilcoxon(deltas).pvalue if any(deltas) else None
    assert got["wilcoxon_p"] == pytest.approx(expected_p)
    assert aggregate["ranks"]["tasks"] == ["alpha", "beta"] and (out / "critical_difference.png").is_file()
    assert "## Across tasks" in (out / "report.md").read_text()


def test_a_mistake_in_the_last_task_file_leaves_no_recipe_of_the_first(task_files, tmp_path, capsys):
    """Every task file is read before any recipe is written: the dry run that fails on the second file leaves no
    `recipes/` folder, so correcting the file and running again is not refused as 'recipes differ'."""
    broken = tmp_path / "gamma.yaml"
    broken.write_text("task: custom\ntask_options: {data_files: missing.csv}\n")
    out = tmp_path / "cmp"
    argv = ["compare", "--task_config", str(task_files[0]), str(broken), "--architectures", "transformer"]
    argv += ["--preset", "tiny", "--seeds", "0", "--output_dir", str(out), "--dry_run"]
    assert cli_main(argv) != 0
    assert "missing.csv" in capsys.readouterr().err.splitlines()[-2]  # the one line before the debug hint
    assert not (out / "recipes").exists()
    argv[3] = str(task_files[1])  # the mistake corrected: the same folder plans
    assert cli_main(argv) == 0
