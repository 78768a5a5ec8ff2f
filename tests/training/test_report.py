"""`spt-hf report` on results.json files: grouping into rows (seeds of one recipe, separate rows for anything
else, named), the tables, the per-seed files, the plots, and clear errors."""

import csv
import json
from pathlib import Path

import pytest

from spt_hf.cli import main as cli_main
from spt_hf.training.report import comparison_rows, find_results, paper_table, report


def fake_phase(
    root: Path,
    phase: str,
    task="digits",
    model_type="spt_s4",
    seed=0,
    test=0.8,
    lr=1e-3,
    hidden=64,
    spt_dir: Path | None = None,
    steps=100,
    mask_rate=0.5,
    total_steps=None,
) -> Path:
    """A results.json as the pipeline writes it (only the fields the report reads)."""
    folder = root / phase
    folder.mkdir(parents=True)
    entries = {
        "training.seed": seed,
        "training.learning_rate": lr,
        "model_config.hidden_size": hidden,
        "data.task": task,
        "model.model_type": model_type,
        "training.max_steps": steps,
        "spt.total_steps": total_steps,
    }
    if phase == "spt":
        entries["spt.mask_rate"] = mask_rate
    curve = [{"step": s, "eval_accuracy": test * s / steps, "eval_loss": 1.0} for s in (steps // 2, steps)]
    result = {
        "phase": phase,
        "task": task,
        "model_type": model_type,
        "model_config": {"hidden_size": hidden},
        "recipe": {"training": {"seed": seed}},
        "recipe_fingerprint": {"sha256": "x", "entries": entries},
        "budget": {"steps": steps},
        "metrics": {"test": {"test_accuracy": test}, "validation": {"eval_accuracy": test + 0.01}},
        "learning_curve": curve,
        "init": {"kind": "spt" if spt_dir else "scratch", "model_name_or_path": str(spt_dir) if spt_dir else None},
    }
    (folder / "results.json").write_text(json.dumps(result))
    return folder


def fake_run(root: Path, seed: int, scratch: float, spt: float, **kwargs) -> None:
    spt_dir = fake_phase(root, "spt", seed=seed, steps=50, mask_rate=kwargs.pop("mask_rate", 0.5), **kwargs)
    fake_phase(root, "finetune", seed=seed, test=spt, spt_dir=spt_dir, **kwargs)
    fake_phase(root, "scratch", seed=seed, test=scratch, **kwargs)


def test_seeds_of_one_recipe_form_one_row_and_other_differences_separate_rows(tmp_path):
    fake_run(tmp_path / "a", 0, 0.70, 0.80)
    fake_run(tmp_path / "b", 1, 0.72, 0.84)
    fake_run(tmp_path / "c", 0, 0.50, 0.60, hidden=128)  # a different model size: not a seed of the others
    fake_run(tmp_path / "d", 0, 0.70, 0.90, mask_rate=0.25)  # a different SPT recipe
    rows = comparison_rows(find_results([tmp_path]))
    by_variant = {row.variant: row for row in rows}
    assert len(rows) == 3, [r.variant for r in rows]
    assert set(by_variant) == {
        "hidden_size=128, SPT mask_rate=0.5",
        "hidden_size=64, SPT mask_rate=0.25",
        "hidden_size=64, SPT mask_rate=0.5",
    }
    two_seeds = by_variant["hidden_size=64, SPT mask_rate=0.5"]
    assert sorted(r.test for r in two_seeds.side("spt")) == [0.80, 0.84]
    assert len(two_seeds.side("scratch")) == 3  # the scratch runs of a, b and d: the same finetuning recipe
    assert [r.test for r in by_variant["hidden_size=64, SPT mask_rate=0.25"].side("spt")] == [0.90]


def test_budgets_pair_scratch_with_spt_when_equal_or_tied_and_separate_other_budgets(tmp_path):
    """As `spt-hf compare` records them: equal budgets give finetuning and scratch the same max_steps; tied ones give
    scratch the whole total and SPT (which records total_steps) and finetuning their shares. Each is one row; a
    scratch run with another budget is a row of its own."""
    for seed in (0, 1):  # tied: SPT 60 + finetuning 40 against scratch 100
        run = tmp_path / "tied" / f"seed{seed}"
        spt_dir = fake_phase(run, "spt", seed=seed, steps=60, total_steps=100)
        fake_phase(run, "finetune", seed=seed, steps=40, spt_dir=spt_dir, test=0.9)
        fake_phase(run, "scratch", seed=seed, steps=100, test=0.7)
        fake_run(tmp_path / "equal" / f"seed{seed}", seed, 0.6, 0.8, lr=2e-3)  # finetuning and scratch 100 steps
    fake_phase(tmp_path / "longer", "scratch", steps=300, test=0.75, lr=2e-3)
    (tied,) = comparison_rows(find_results([tmp_path / "tied"]))
    assert [r.steps for r in tied.side("scratch")] == [100, 100]
    assert [(r.spt_steps, r.steps) for r in tied.side("spt")] == [(60, 40), (60, 40)]
    rows = comparison_rows(find_results([tmp_path]))
    sides = sorted((len(row.side("scratch")), len(row.side("spt")), row.side("scratch")[0].steps) for row in rows)
    assert sides == [(1, 0, 300), (2, 2, 100), (2, 2, 100)], [row.variant for row in rows]
    assert all("steps=" in row.variant for row in rows)  # the budget is named where rows differ in it


def test_report_writes_tables_per_seed_files_and_plots_and_says_where(tmp_path, capsys):
    fake_run(tmp_path / "runs" / "s4-0", 0, 0.70, 0.80)
    fake_run(tmp_path / "runs" / "s4-1", 1, 0.72, 0.84)
    fake_run(tmp_path / "runs" / "tf-0", 0, 0.55, 0.78, model_type="spt_rotary_transformer")
    fake_run(tmp_path / "runs" / "tf-1", 1, 0.57, 0.80, model_type="spt_rotary_transformer")
    text = report([tmp_path / "runs"], tmp_path / "out")
    assert f"report written to {tmp_path / 'out' / 'report.md'}" in capsys.readouterr().out
    assert "| digits | spt_s4 | — | accuracy | 71.0 ± 1.4 (n=2) | 100 | 82.0 ± 2.8 (n=2) | 50 + 100 | +11.0 |" in text
    assert "**71.0 → 82.0**" in text  # the best after SPT in its column
    assert "best SSM − Transformer: from scratch +15.0, after SPT +3.0" in text
    with open(tmp_path / "out" / "runs.csv") as handle:
        records = list(csv.DictReader(handle))
    assert len(records) == 8 and {r["kind"] for r in records} == {"scratch", "spt"}
    assert all((tmp_path / "out" / name).stat().st_size > 0 for name in ("learning_curves.png", "test_metrics.png"))


def test_paper_table_marks_the_best_per_column_and_averages_complete_rows():
    from spt_hf.training.report import Row, Run

    def row(task, arch, scratch, spt):
        runs = [
            Run("scratch", 0, "accuracy", scratch, None, 1, 0, "x"),
            Run("spt", 0, "accuracy", spt, None, 1, 1, "y"),
        ]
        return Row(task, arch, "", "accuracy", runs)

    table = paper_table([row("a", "s4", 0.5, 0.7), row("b", "s4", 0.6, 0.8), row("a", "dlr", 0.4, 0.9)])
    lines = table.splitlines()
    assert lines[0] == "| architecture | a | b | average |"
    assert "| dlr | **40.0 → 90.0** | — → — | — → — |" in lines
    assert "| s4 | 50.0 → 70.0 | **60.0 → 80.0** | 55.0 → 75.0 |" in lines


def test_a_missing_folder_is_an_error_not_an_empty_report(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "runs" / "typo")]) == 1
    assert "No such run folder" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(FileNotFoundError, match="No such run folder"):
        report([tmp_path / "typo"])
