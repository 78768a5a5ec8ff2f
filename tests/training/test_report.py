"""`spt-hf report` on results.json files: grouping into rows (seeds of one recipe, separate rows for anything
else, named), the tables, the per-seed files, the plots, and clear errors."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from spt_hf.cli import main as cli_main
from spt_hf.report.comparison import paper_table, report
from spt_hf.report.rows import comparison_rows, find_results


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
    flops=None,
    wall=None,
    cap=None,
    exported=None,
) -> Path:
    """A results.json as the pipeline writes it (only the fields the report reads); `cap`: early stopping stopped the
    phase at `steps` of a `cap`-step budget; `exported`: the step of the checkpoint it exported (SPT)."""
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
        "budget": {"steps": steps, "wall_time_s": wall}
        | ({} if cap is None else {"max_steps": cap, "early_stopping_patience": 3, "stopped_early_at": steps}),
        "compute": {"flops": flops, "flops_per_step": None if flops is None else flops / steps},
        "metrics": {"test": {"test_accuracy": test}, "validation": {"eval_accuracy": test + 0.01}}
        | ({} if exported is None else {"exported_step": exported}),
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
    assert (
        "| digits | spt_s4 | — | accuracy | scratch | 71.0 ± 1.4 (n=2) | 82.0 ± 2.8 (n=2) | +11.0 | n too small (n=2) "
        "| — | — | 100 steps · — FLOPs · — s | 50 + 100 steps · — FLOPs · — s |" in text
    )
    assert "**71.0 → 82.0**" in text  # the best after SPT in its column
    assert "best SSM − Transformer: from scratch +15.0, after SPT +3.0" in text
    with open(tmp_path / "out" / "runs.csv") as handle:
        records = list(csv.DictReader(handle))
    assert len(records) == 8 and {r["kind"] for r in records} == {"scratch", "spt"}
    assert all((tmp_path / "out" / name).stat().st_size > 0 for name in ("learning_curves.png", "test_metrics.png"))


def test_paper_table_marks_the_best_per_column_and_averages_complete_rows():
    from spt_hf.report.rows import Row, Run

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


def test_r2_is_shown_with_three_decimals_and_accuracy_in_points_with_one():
    """0.081 → 0.226 (the issue's values) is not 0.1 → 0.2: every table, delta and interval of an R² row has three
    decimals; an accuracy row keeps percentage points with one."""
    from spt_hf.report.comparison import gap_table, markdown_table, transformer_ssm_gap
    from spt_hf.report.rows import Row, Run

    def row(arch, metric, scratch, spt):
        runs = [Run("scratch", s, metric, scratch[s], None, 1, 0, "x") for s in range(3)]
        runs += [Run("spt", s, metric, spt[s], None, 1, 1, "y") for s in range(3)]
        return Row("reg", arch, "", metric, runs)

    s4 = row("spt_s4", "r2", [0.081, 0.080, 0.082], [0.226, 0.230, 0.222])
    transformer = row("spt_rotary_transformer", "r2", [0.050, 0.052, 0.048], [0.120, 0.125, 0.115])
    assert "| spt_s4 | **0.081 → 0.226** | 0.081 → 0.226 |" in paper_table([s4, transformer]).splitlines()
    cells = parse_table(markdown_table([s4]), "task")[0]
    assert cells["baseline result"] == "0.081 ± 0.001 (n=3)" and cells["SPT + finetune"] == "0.226 ± 0.004 (n=3)"
    assert cells["SPT − baseline"] == "+0.145 *" and cells["95% CI (paired)"] == "[+0.133, +0.157] (n=3)"
    assert "- reg: best SSM − Transformer: from scratch +0.031, after SPT +0.106" in transformer_ssm_gap(
        [s4, transformer]
    )
    assert "| reg | — | spt_s4 | scratch | +0.031 * | [+0.024, +0.038] (n=3) |" in gap_table([s4, transformer])[0]
    accuracy = row("spt_s4", "accuracy", [0.5, 0.52, 0.54], [0.7, 0.71, 0.72])
    cells = parse_table(markdown_table([accuracy]), "task")[0]
    assert cells["baseline result"] == "52.0 ± 2.0 (n=3)" and cells["SPT − baseline"] == "+19.0 *"


def test_the_learning_curve_legend_sits_below_the_axes_not_over_the_data(tmp_path, monkeypatch):
    from spt_hf.report import plots
    from spt_hf.report.rows import Row, Run

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or path)
    curve = [(1, 0.5), (3, 0.9)]
    runs = [Run(kind, 0, "accuracy", 0.9, None, 3, 0, "x", curve=curve) for kind in ("scratch", "spt")]
    plots.plot_learning_curves([Row("digits", "spt_s4", "", "accuracy", runs)], tmp_path)
    ax = figures[0].axes[0]
    figures[0].canvas.draw()
    legend, axes_box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 < axes_box.y0  # wholly under the axes (and their tick labels' line)
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_a_missing_folder_is_an_error_not_an_empty_report(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "runs" / "typo")]) == 1
    assert "No such run folder" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(FileNotFoundError, match="No such run folder"):
        report([tmp_path / "typo"])


def parse_table(text: str, first_column: str) -> list[dict]:
    """The Markdown table of `text` whose header starts with `first_column`, as dicts keyed by the header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))))
    return rows


def test_significance_and_cost_columns_recomputed_from_the_results(tmp_path):
    """A fake comparison with known numbers: 5 seeds of S4 and of the Transformer (S4's scratch seed 5 has no SPT
    partner, and is left out of the pairs), known FLOPs and wall times. The report's intervals and p-values equal
    scipy's paired t-test and an exact permutation test computed here from the same results.json files; the costs
    equal the recorded ones, the SPT side summing both phases."""
    from scipy import stats

    scratch = {"spt_s4": [0.70, 0.72, 0.69, 0.75, 0.71], "spt_rotary_transformer": [0.55, 0.60, 0.52, 0.58, 0.57]}
    spt = {"spt_s4": [0.80, 0.84, 0.78, 0.83, 0.86], "spt_rotary_transformer": [0.78, 0.76, 0.80, 0.74, 0.79]}
    for arch in scratch:
        for seed in range(5):
            run = tmp_path / arch / f"seed{seed}"
            spt_dir = fake_phase(run, "spt", model_type=arch, seed=seed, steps=50, flops=5e11, wall=20.0 + seed)
            fake_phase(
                run,
                "finetune",
                model_type=arch,
                seed=seed,
                test=spt[arch][seed],
                spt_dir=spt_dir,
                flops=1e12,
                wall=30.0,
            )
            fake_phase(run, "scratch", model_type=arch, seed=seed, test=scratch[arch][seed], flops=1e12, wall=40.0)
    fake_phase(tmp_path / "spt_s4" / "seed5", "scratch", seed=5, test=0.10, flops=1e12, wall=40.0)
    text = report([tmp_path], tmp_path / "out")
    main = {row["architecture"]: row for row in parse_table(text, "task")}

    def check(row: dict, a: list[float], b: list[float]) -> None:
        a, b = 100 * np.array(a), 100 * np.array(b)
        test = stats.ttest_rel(a, b)
        low, high = test.confidence_interval(0.95)
        assert row["95% CI (paired)"] == f"[{low:+.1f}, {high:+.1f}] (n=5)"
        assert row["p (paired t)"] == _p(test.pvalue)
        exact = stats.permutation_test(
            (a, b), lambda x, y: np.mean(x - y), permutation_type="samples", n_resamples=np.inf
        )
        assert row["p (sign-flip)"] == _p(exact.pvalue)
        gap = f"{np.mean(a - b):+.1f}" + (" *" if test.pvalue < 0.05 else "")  # the centre of the interval
        assert row[next(k for k in row if "−" in k)] == gap

    s4, transformer = main["spt_s4"], main["spt_rotary_transformer"]
    check(s4, spt["spt_s4"], scratch["spt_s4"])
    assert s4["SPT − baseline"].endswith(" *") and s4["p (sign-flip)"] == "0.062"  # every seed gains: 2/2^5
    check(transformer, spt["spt_rotary_transformer"], scratch["spt_rotary_transformer"])
    assert "- digits / spt_s4: paired on 5 seed(s); left out: baseline seeds [5]" in text
    assert s4["baseline cost"] == "100 steps · 1e12 FLOPs · 40.0 s"
    assert s4["SPT + finetune cost"] == "50 + 100 steps · 1.5e12 FLOPs · 52.0 s"  # 20..24 s + 30 s, mean 52
    gaps = {(row["SSM"], row["kind"]): row for row in parse_table(text.split("## Transformer–SSM gap")[1], "task")}
    assert set(gaps) == {("spt_s4", "scratch"), ("spt_s4", "SPT + finetune")}
    for kind, runs in (("scratch", scratch), ("SPT + finetune", spt)):
        check(gaps[("spt_s4", kind)], runs["spt_s4"], runs["spt_rotary_transformer"])


def _p(value: float) -> str:
    return f"{value:.2g}"


def test_text_pretrained_scratch_and_spt_runs_are_three_kinds(tmp_path):
    """The baseline phase of a recipe that loads pretrained backbone weights (`backbone_name_or_path`, Pythia-70M's
    pretrained pair) is text-pretrained, not scratch: its own kind in the table, the gap table and runs.csv."""
    for seed in range(3):
        fake_run(tmp_path / "s4" / f"seed{seed}", seed, 0.6 + 0.01 * seed, 0.7)
        run = tmp_path / "pythia" / f"seed{seed}"
        spt_dir = fake_phase(run, "spt", model_type="spt_backbone", seed=seed, steps=50)
        fake_phase(run, "finetune", model_type="spt_backbone", seed=seed, test=0.75, spt_dir=spt_dir)
        baseline = fake_phase(run, "scratch", model_type="spt_backbone", seed=seed, test=0.8 - 0.01 * seed)
        result = json.loads((baseline / "results.json").read_text())
        result["recipe"]["model_config"] = {"backbone_name_or_path": "EleutherAI/pythia-70m"}
        (baseline / "results.json").write_text(json.dumps(result))
    text = report([tmp_path], tmp_path / "out")
    rows = {row["architecture"]: row for row in parse_table(text, "task")}
    assert rows["spt_backbone"]["baseline"] == "text-pretrained" and rows["spt_s4"]["baseline"] == "scratch"
    assert rows["spt_backbone"]["SPT − baseline"].startswith("-4.0")  # 75 against 80, 79, 78
    with open(tmp_path / "out" / "runs.csv") as handle:
        kinds = {(r["architecture"], r["kind"]) for r in csv.DictReader(handle)}
    assert {kind for _, kind in kinds} == {"scratch", "text-pretrained", "spt"}
    assert ("spt_backbone", "text-pretrained") in kinds and ("spt_backbone", "scratch") not in kinds
    assert "## Architectures × tasks (baseline → SPT + finetune)" in text
    cells = {row["architecture"]: row for row in parse_table(text, "architecture")}
    assert cells["spt_backbone"]["digits"] == "**79.0 → 75.0** (text-pretrained baseline)"
    assert cells["spt_s4"]["digits"] == "61.0 → 70.0"  # a scratch baseline names no kind


def test_results_written_before_the_start_kind_vocabulary_report_the_same(tmp_path):
    """results.json files of spt_hf before `StartKind` recorded a text-pretrained baseline as `init.kind: "scratch"`
    and finetuning from a checkpoint without the SPT fingerprint as "pretrained"; they report as the files written in
    `StartKind`'s words do."""
    texts = {}
    for era, baseline_kind, hub_kind in (
        ("old", "scratch", "pretrained"),
        ("new", "text-pretrained", "text-pretrained"),
    ):
        root = tmp_path / era
        for seed in range(3):
            fake_run(root / "s4" / f"seed{seed}", seed, 0.6 + 0.01 * seed, 0.7)
            run = root / "pythia" / f"seed{seed}"
            fake_phase(run, "finetune", model_type="spt_backbone", seed=seed, test=0.75, spt_dir=run / "spt")
            baseline = fake_phase(run, "scratch", model_type="spt_backbone", seed=seed, test=0.8 - 0.01 * seed)
            hub = fake_phase(root / "hub" / f"seed{seed}", "finetune", model_type="spt_dlr", seed=seed, test=0.7)
            for folder, kind in ((baseline, baseline_kind), (hub, hub_kind)):
                result = json.loads((folder / "results.json").read_text())
                result["recipe"]["model_config"] = {"backbone_name_or_path": "EleutherAI/pythia-70m"}
                result["init"] = {"kind": kind, "model_name_or_path": "someone/text-model" if folder == hub else None}
                (folder / "results.json").write_text(json.dumps(result))
        texts[era] = report([root], tmp_path / f"out-{era}").replace(str(root), "ROOT")
        with open(tmp_path / f"out-{era}" / "runs.csv") as handle:
            texts[era] += "".join(f"{r['architecture']} {r['kind']}\n" for r in csv.DictReader(handle))
    assert texts["old"] == texts["new"]
    assert "spt_dlr text-pretrained" in texts["new"] and "spt_backbone text-pretrained" in texts["new"]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # (n, mean, interval, p_t, p_sign, unpaired): below MIN_PAIRS pairs a mean but no interval and no test
        ({0: 2.0, 1: 4.0}, {0: 1.0, 1: 1.0}, (2, 2.0, None, None, None, {})),
        ({}, {0: 1.0}, (0, None, None, None, None, {"b": [0]})),
        # every seed differs by the same amount: no spread, the interval is the point and p (paired t) 0 (or 1 at 0)
        ({0: 3.0, 1: 4.0, 2: 5.0}, {0: 1.0, 1: 2.0, 2: 3.0}, (3, 2.0, (2.0, 2.0), 0.0, 0.25, {})),
        ({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.0, 1: 2.0, 2: 3.0}, (3, 0.0, (0.0, 0.0), 1.0, 1.0, {})),
        # seeds one side lacks are left out and named
        (
            {0: 3.0, 1: 4.0, 2: 5.0, 7: 9.0},
            {0: 1.0, 1: 2.0, 2: 3.0, 8: 0.0},
            (3, 2.0, (2.0, 2.0), 0.0, 0.25, {"a": [7], "b": [8]}),
        ),
    ],
)
def test_paired_difference(a, b, expected):
    from spt_hf.report.statistics import paired_difference

    paired = paired_difference(a, b)
    interval = None if paired.low is None else (paired.low, paired.high)
    assert (paired.n, paired.mean, interval, paired.p_t, paired.p_sign, paired.unpaired) == expected
    assert paired.significant == (expected[3] is not None and expected[3] < 0.05)


@pytest.mark.parametrize(
    ("differences", "expected"),
    [
        ([1.0, 2.0, 3.0], 0.25),  # the smallest p of 3 pairs: 2 / 2^3
        ([1.0, 1.0, 1.0, 1.0, 1.0], 0.0625),  # 2 / 2^5
        ([1.0, -1.0, 1.0, -1.0], 1.0),  # mean 0: every sign assignment is as extreme
        ([3.0, 1.0, -1.0], 0.75),  # |3 ± 1 ± 1| >= 3 for three of the four signs of 1 and 1, either sign of 3
    ],
)
def test_sign_flip_p(differences, expected):
    from spt_hf.report.statistics import sign_flip_p

    assert sign_flip_p(np.array(differences)) == pytest.approx(expected)


def test_a_gap_between_runs_of_different_budgets_is_marked_and_both_budgets_named(tmp_path):
    """The docs' digits comparison before its fix: the Transformer's recipe ties compute (its scratch baseline trains
    1200 steps), S4's does not (600): the scratch gap is marked, a note names both budgets, and the summary line
    points to it; the SPT + finetune pair (600 + 600 on both sides) is not marked."""
    total_steps = {"spt_s4": None, "spt_rotary_transformer": 1200}  # tied: the scratch baseline gets all of it
    for arch, total in total_steps.items():
        for seed in range(3):
            run, keys = tmp_path / arch / f"seed{seed}", dict(model_type=arch, seed=seed, total_steps=total)
            spt_dir = fake_phase(run, "spt", steps=600, **keys)
            fake_phase(run, "finetune", test=0.8 + seed / 100, spt_dir=spt_dir, steps=600, **keys)
            fake_phase(run, "scratch", test=0.6 + seed / 50, steps=total or 600, **keys)
    gap = report([tmp_path], tmp_path / "out").split("## Transformer–SSM gap")[1]
    rows = {row["kind"]: row["SSM − Transformer"] for row in parse_table(gap, "task")}
    assert rows["scratch"].endswith(" †") and not rows["SPT + finetune"].endswith("†")
    assert "- digits: best SSM − Transformer: from scratch +0.0, after SPT +0.0 († unequal budgets below)" in gap
    note = [line for line in gap.splitlines() if line.startswith("- digits †:")]
    assert note == [
        "- digits †: spt_s4 and the Transformer, scratch, trained on different budgets (600 steps against 1200): the "
        "gap mixes architecture and budget; give both the same steps (compare's --budget tied or equal)."
    ]


def test_pairs_that_early_stopping_stopped_at_different_steps_had_the_same_budget(tmp_path):
    """Under early stopping the budget is a cap: an SSM and a Transformer given the same caps (SPT 100 + finetuning
    100, scratch 200) are not marked unequal for stopping at different steps, nor for an SPT phase that exported an
    earlier checkpoint; the cost columns still show the steps used."""
    stops = {"spt_s4": (100, 70, 120), "spt_rotary_transformer": (60, 100, 200)}  # SPT, finetune, scratch
    for arch, (spt, finetune, scratch) in stops.items():
        for seed in range(2):
            run, keys = tmp_path / arch / f"seed{seed}", dict(model_type=arch, seed=seed, total_steps=200)
            spt_dir = fake_phase(run, "spt", steps=spt, cap=100, exported=spt - 10, **keys)
            fake_phase(run, "finetune", test=0.8 + seed / 100, spt_dir=spt_dir, steps=finetune, cap=100, **keys)
            fake_phase(run, "scratch", test=0.6 + seed / 50, steps=scratch, cap=200, **keys)
    text = report([tmp_path], tmp_path / "out")
    gap = text.split("## Transformer–SSM gap")[1]
    assert "†" not in gap.split("\n## ")[0], gap
    assert "120 steps" in text and "60° + 100 steps" in text  # the steps used, the early export marked


# ----------------------------------------------------------------------------------------------------------------
# Across tasks (report/across_tasks.py): recomputed here from runs.csv with scipy, as an outside reader would
# ----------------------------------------------------------------------------------------------------------------

# task -> architecture -> per seed (scratch, SPT + finetune); transformer on "c" ties (equal means, not equal seeds).
SUITE = {
    "a": {"spt_s4": [(0.60, 0.70), (0.62, 0.71), (0.61, 0.69)], "spt_rotary_transformer": [(0.50, 0.52)] * 3},
    "b": {"spt_s4": [(0.80, 0.78), (0.81, 0.80), (0.79, 0.83)], "spt_rotary_transformer": [(0.40, 0.55)] * 3},
    "c": {"spt_s4": [(0.30, 0.45), (0.35, 0.40), (0.33, 0.50)], "spt_rotary_transformer": [(0.20, 0.25), (0.30, 0.25)]},
}


def write_suite(root: Path, suite: dict) -> None:
    for task, architectures in suite.items():
        for model_type, pairs in architectures.items():
            for seed, (scratch, spt) in enumerate(pairs):
                fake_run(root / task / model_type / str(seed), seed, scratch, spt, task=task, model_type=model_type)


def recomputed_from_runs_csv(path: Path) -> tuple[dict, dict]:
    """Per architecture (mean_delta, wins, ties, losses, wilcoxon p) and the mean ranks, from runs.csv alone."""
    from scipy import stats

    with open(path) as handle:
        records = [r for r in csv.DictReader(handle) if r["test"]]
    values: dict = {}
    for r in records:
        arm = "spt" if r["kind"] == "spt" else "baseline"
        values.setdefault((r["architecture"], r["task"]), {}).setdefault(arm, []).append(float(r["test"]))
    means = {key: {arm: float(np.mean(v)) for arm, v in arms.items()} for key, arms in values.items()}
    expected = {}
    for arch in sorted({a for a, _ in means}):
        d = [m["spt"] - m["baseline"] for (a, _), m in sorted(means.items()) if a == arch and len(m) == 2]
        p = float(stats.wilcoxon(d).pvalue) if any(d) else None
        expected[arch] = (np.mean(d), sum(x > 0 for x in d), sum(x == 0 for x in d), sum(x < 0 for x in d), p)
    groups = sorted({(a, arm) for (a, _), m in means.items() for arm in m})
    tasks = sorted({t for _, t in means if all(arm in means.get((a, t), {}) for a, arm in groups)})
    table = np.array([[means[(a, t)][arm] for a, arm in groups] for t in tasks])  # (N, k)
    ranks = np.array([stats.rankdata(-row) for row in table]).mean(0)
    labels = {(a, arm): f"{a} · {'SPT + finetune' if arm == 'spt' else 'baseline'}" for a, arm in groups}
    friedman = stats.friedmanchisquare(*table.T)
    return expected, {"ranks": {labels[g]: r for g, r in zip(groups, ranks)}, "friedman_p": friedman.pvalue}


def test_the_across_task_numbers_are_those_of_runs_csv_recomputed_with_scipy(tmp_path):
    write_suite(tmp_path / "runs", SUITE)
    text = report([tmp_path / "runs"], tmp_path / "out")
    aggregate = json.loads((tmp_path / "out" / "aggregate.json").read_text())
    expected, ranks = recomputed_from_runs_csv(tmp_path / "out" / "runs.csv")
    assert set(aggregate["architectures"]) == set(expected) == {"spt_s4", "spt_rotary_transformer"}
    for arch, (mean_delta, wins, ties, losses, p) in expected.items():
        got = aggregate["architectures"][arch]
        assert got["tasks"] == 3 and (got["wins"], got["ties"], got["losses"]) == (wins, ties, losses)
        assert got["mean_delta"] == pytest.approx(mean_delta) and got["wilcoxon_p"] == pytest.approx(p)
    transformer = aggregate["architectures"]["spt_rotary_transformer"]
    assert (transformer["wins"], transformer["ties"], transformer["losses"]) == (2, 1, 0)  # c: equal means
    assert aggregate["architectures"]["spt_s4"]["wilcoxon_p"] == pytest.approx(0.25)  # 3 wins: 2/2^3, the floor
    assert aggregate["ranks"]["mean_ranks"] == pytest.approx(ranks["ranks"])
    assert aggregate["ranks"]["friedman_p"] == pytest.approx(ranks["friedman_p"])
    assert aggregate["ranks"]["critical_difference"] == pytest.approx(2.569 * np.sqrt(4 * 5 / (6 * 3)), abs=1e-3)
    assert "## Across tasks" in text and "| spt_s4 | +9.0 | +0.3 | +12.3 | +7.2 | 3 / 0 / 0 | 0.25 |" in text
    assert "cannot go below 0.25" in text and "![critical_difference](critical_difference.png)" in text
    assert (tmp_path / "out" / "critical_difference.png").stat().st_size > 0


def test_one_task_has_no_across_task_section_and_a_task_missing_an_arm_is_left_out_with_a_note(tmp_path):
    write_suite(tmp_path / "one", {"a": SUITE["a"]})
    assert "Across tasks" not in report([tmp_path / "one"], tmp_path / "one")
    assert not (tmp_path / "one" / "aggregate.json").exists()
    write_suite(tmp_path / "runs", SUITE)
    for scratch in (tmp_path / "runs" / "b" / "spt_s4").glob("*/scratch"):  # b has no baseline for s4
        (scratch / "results.json").unlink()
    text = report([tmp_path / "runs"], tmp_path / "out")
    aggregate = json.loads((tmp_path / "out" / "aggregate.json").read_text())
    s4 = aggregate["architectures"]["spt_s4"]
    assert s4["tasks"] == 2 and sorted(s4["per_task"]) == ["a", "c"] and s4["excluded"] == {"b": "no baseline result"}
    assert aggregate["ranks"]["tasks"] == ["a", "c"] and list(aggregate["ranks"]["excluded"]) == ["b"]
    assert "- spt_s4: b left out (no baseline result)." in text
    assert "- b left out of the ranks (no result for spt_s4 · baseline)." in text
    expected, _ = recomputed_from_runs_csv(tmp_path / "out" / "runs.csv")
    assert s4["mean_delta"] == pytest.approx(expected["spt_s4"][0])


def test_wilcoxon_is_none_with_its_reason_below_two_tasks_or_without_a_difference():
    from scipy import stats

    from spt_hf.report.across_tasks import wilcoxon_p

    assert wilcoxon_p([0.1]) == (None, "fewer than 2 tasks")
    assert wilcoxon_p([0.0, 0.0, 0.0]) == (None, "every difference is zero")
    differences = [0.1, -0.02, 0.3, 0.0, 0.05, 0.2]
    assert wilcoxon_p(differences) == (stats.wilcoxon(differences).pvalue, "")


def test_the_nemenyi_critical_difference_is_demsars_example():
    from spt_hf.report.across_tasks import nemenyi_critical_difference

    # Demšar (JMLR 2006), section 3.2.2: four classifiers over 14 data sets, q_0.05 = 2.569, CD = 1.25.
    q_alpha, cd = nemenyi_critical_difference(4, 14)
    assert round(q_alpha, 3) == 2.569 and round(cd, 2) == 1.25
    assert round(nemenyi_critical_difference(2, 10)[0], 3) == 1.960  # k = 2: the normal quantile (Demšar's table)
    assert round(nemenyi_critical_difference(10, 10)[0], 3) == 3.164


def test_the_diagram_joins_the_groups_no_further_apart_than_the_critical_difference():
    from spt_hf.report.plots import _not_different

    assert _not_different([1.0, 1.5, 2.4, 3.9], 1.0) == [(0, 1), (1, 2)]
    assert _not_different([1.0, 2.5, 4.0], 1.0) == []
    assert _not_different([1.0, 1.2, 1.4], 1.0) == [(0, 2)]


def test_an_spt_phase_that_exported_an_earlier_step_is_marked_in_the_cost_column(tmp_path):
    """The SPT side's steps say when its SPT phase handed finetuning an earlier checkpoint than its last step's."""
    for seed, exported in ((0, 60), (1, 100)):
        run = tmp_path / f"seed{seed}"
        spt = fake_phase(run, "spt", seed=seed)
        data = json.loads((spt / "results.json").read_text())
        data["metrics"] |= {"selected": "best", "exported_step": exported}
        (spt / "results.json").write_text(json.dumps(data))
        fake_phase(run, "finetune", seed=seed, spt_dir=spt)
        fake_phase(run, "scratch", seed=seed)
    (row,) = comparison_rows(find_results([tmp_path]))
    assert sorted((r.seed, r.spt_exported) for r in row.side("spt")) == [(0, 60), (1, None)]
    text = report([tmp_path], tmp_path / "out")
    assert "100° + 100 steps" in text and "`°` after the SPT steps" in text
    with open(tmp_path / "out" / "runs.csv") as handle:
        assert {row["spt_exported"] for row in csv.DictReader(handle)} >= {"60"}


def test_a_wall_time_counted_from_a_resumed_step_reads_as_at_least_in_the_cost_column(tmp_path):
    """A phase that resumed a checkpoint holding no record of the time spent before it (an older spt_hf) knows only
    part of its wall time: its side's cost says "≥" rather than pass the part for the whole; the other side, whose
    time is whole, does not."""
    for seed in (0, 1):
        run = tmp_path / f"seed{seed}"
        spt = fake_phase(run, "spt", seed=seed, wall=60.0)
        fake_phase(run, "finetune", seed=seed, spt_dir=spt, wall=60.0)
        fake_phase(run, "scratch", seed=seed, wall=120.0)
    data = json.loads((tmp_path / "seed1" / "spt" / "results.json").read_text())
    data["budget"]["wall_time_counted_from_step"] = 40
    (tmp_path / "seed1" / "spt" / "results.json").write_text(json.dumps(data))
    (row,) = comparison_rows(find_results([tmp_path]))
    assert [r.wall_partial for r in row.side("spt")] == [False, True]
    assert not any(r.wall_partial for r in row.side("scratch"))
    text = report([tmp_path], tmp_path / "out")
    assert "· ≥ 2.0 min |" in text and text.count("≥ ") == 1, text
    assert "`≥` before a wall time" in text
