"""`spt-hf recipes --task_config` and `spt-hf compare --task_config`: a task file's recipes written as editable YAML
and compared without writing any; listing the shipped recipes unchanged; each mistake one line."""

import json
from pathlib import Path

import pytest
import yaml
from helpers import error_line

from spt_hf.cli import main as cli_main
from spt_hf.compare import CompareSpec, run_compare
from spt_hf.recipes.loading import RECIPES_DIR, read_recipe_file
from spt_hf.training import load_recipe


@pytest.fixture
def task_file(tmp_path) -> Path:
    path = tmp_path / "my-digits.yaml"
    path.write_text("task: digits\ntask_options: {input_kind: tokens}\n")
    return path


def test_recipes_of_a_task_file_are_written_and_load_for_their_phase(task_file, tmp_path, capsys):
    out = tmp_path / "recipes"
    argv = ["recipes", "--task_config", str(task_file), "--architectures", "s4", "transformer", "--preset", "tiny"]
    assert cli_main([*argv, "--out", str(out), "--max_steps", "6"]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == [f"my_digits-{a}-{p}.yaml" for a in ("s4", "transformer") for p in ("finetune", "spt")]
    assert sorted(capsys.readouterr().out.split()) == [str(out / name) for name in written]
    for name in written:
        phase = name.removesuffix(".yaml").rsplit("-", 1)[1]
        recipe = load_recipe(out / name, phase=phase)
        assert recipe.data.task == "digits" and recipe.training.max_steps == 6
    assert cli_main([*argv, "--output_dir", str(out), "--max_steps", "6"]) == 0  # the same recipes: nothing refused
    assert cli_main([*argv, "--output_dir", str(out)]) == 1
    assert "exists and differs from the recipe it would be" in error_line(capsys)
    assert cli_main([*argv, "--output_dir", str(out), "--overwrite"]) == 0
    shipped = read_recipe_file(RECIPES_DIR / "cpu/digits-s4-finetune.yaml")["max_steps"]
    assert yaml.safe_load((out / "my_digits-s4-finetune.yaml").read_text())["max_steps"] == shipped  # the preset's


def test_the_budget_rule_of_written_recipes_is_an_option(task_file, tmp_path, capsys):
    argv = ["recipes", "--task_config", str(task_file), "--architectures", "s4", "--preset", "tiny", "--max_steps", "6"]
    for budget, total in (("tied", 12), ("equal", None)):
        out = tmp_path / budget
        assert cli_main([*argv, "--output_dir", str(out), "--budget", budget]) == 0
        spt = yaml.safe_load((out / "my_digits-s4-spt.yaml").read_text())
        assert spt.get("total_steps") == total and spt["max_steps"] == 6
    assert cli_main([*argv, "--output_dir", str(tmp_path / "default")]) == 0  # tied, as compare's default
    assert yaml.safe_load((tmp_path / "default/my_digits-s4-spt.yaml").read_text())["total_steps"] == 12
    capsys.readouterr()
    assert cli_main(["recipes", "cpu", "--budget", "equal"]) == 1
    assert "--budget go with --task_config TASK.yaml" in error_line(capsys)


def test_listing_the_shipped_recipes_is_unchanged(capsys):
    assert cli_main(["recipes", "cpu"]) == 0
    assert "cpu/digits-s4-spt.yaml" in capsys.readouterr().out.split()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--architectures", "s4"], "needs --architectures A ... and --output_dir DIR"),
        (["--output_dir", "o"], "needs --architectures A ... and --output_dir DIR"),
        (["--architectures", "s4", "--output_dir", "o", "--preset", "paper", "--architectures", "mamba"], "no paper"),
        (["--architectures", "s4", "--out", "o", "--max_steps", "2", "--num_train_epochs", "1"], "not both"),
    ],
)
def test_a_bad_recipes_request_is_one_line(argv, message, task_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["recipes", "--task_config", str(task_file), *argv]) == 1
    assert message in error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_a_missing_task_file_and_task_options_without_one_are_one_line(tmp_path, capsys):
    assert cli_main(["recipes", "--task_config", str(tmp_path / "none.yaml"), "--architectures", "s4", "--out", "o"])
    assert "none.yaml: not found" in error_line(capsys)
    assert cli_main(["recipes", "cpu", "--preset", "tiny"]) == 1
    assert "go with --task_config" in error_line(capsys)


def test_compare_plans_a_task_file_with_its_recipes_written_into_the_output_folder(task_file, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", "--task_config", str(task_file), "--architectures", "s4", "dlr", "--preset", "tiny"]
    assert (
        cli_main([*argv, "--seeds", "0", "--output_dir", str(out), "--dry_run", "--estimate", "--max_steps", "3"]) == 0
    )
    printed = capsys.readouterr().out
    assert (
        f"| my_digits/s4/full/seed0/finetune | spt | waiting | 3 steps (tied) | {out}/recipes/my_digits-s4-finetune"
        ".yaml |" in printed
    )
    assert "| my_digits/s4/full/seed0/scratch | scratch | new | 6 steps (tied) |" in printed  # SPT 3 + finetuning 3
    assert "Total: 6 phases" in printed
    assert sorted(p.name for p in (out / "recipes").iterdir())[0] == "my_digits-dlr-finetune.yaml"
    assert [p.name for p in out.iterdir()] == ["recipes"]  # a dry run writes the recipes, nothing else
    assert cli_main([*argv, "--recipes_dir", "cpu", "--output_dir", str(out), "--dry_run"]) == 1
    assert "--recipes_dir is the folder of the --tasks' recipes" in error_line(capsys)
    assert cli_main([*argv, "--output_dir", str(out), "--dry_run", "--max_steps", "5"]) == 1
    assert f"--recipes_dir {out}/recipes --tasks my_digits" in error_line(capsys)
    assert cli_main(["compare", "--tasks", "digits", "--architectures", "s4", "--preset", "tiny", "--dry_run"]) == 1
    assert "--preset goes with --task_config" in error_line(capsys)


def test_a_pair_missing_from_the_paper_recipes_but_shipped_in_cpu_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="The shipped folder cpu has it: pass --recipes_dir cpu."):
        run_compare(CompareSpec(tasks=["digits"], architectures=["s4"], output_dir=str(tmp_path / "c")), dry_run=True)


@pytest.mark.slow  # about 2 minutes on 2 cores
def test_a_tiny_comparison_of_a_task_file_runs_end_to_end_and_resumes(task_file, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", "--task_config", str(task_file), "--architectures", "s4", "transformer", "--preset", "tiny"]
    argv += ["--seeds", "0", "--output_dir", str(out), "--max_parallel", "2", "--max_steps", "4"]
    assert cli_main(argv) == 0
    results = sorted(out.glob("my_digits/*/full/seed0/*/results.json"))
    steps = {p.parent.name: json.loads(p.read_text())["budget"]["steps"] for p in results}
    assert len(results) == 6 and steps == {"spt": 4, "finetune": 4, "scratch": 8}  # tied: the baseline gets both
    assert "| digits | spt_s4 |" in (out / "report.md").read_text()
    capsys.readouterr()
    assert cli_main(argv) == 0
    assert "compare: 0 phase(s) to run" in capsys.readouterr().out
