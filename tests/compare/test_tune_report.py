"""The report of a tuned comparison, from a `tuning.json` (fast: no training): the tuning section with the chosen
values, the spread and the plot; each tuned side "tuned, N trials" with the search's cost; unequal arms flagged."""

import json
from pathlib import Path

from spt_hf.report.tuning import (
    FLAG,
    best_so_far,
    find_study,
    read_tuning,
    search_cost,
    tuned_keys,
    tuned_label,
    tuning_section,
)

SPACE = {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}


def study(arm: str, values: list[float | None]) -> dict:
    trials = [
        {
            "number": k,
            "state": "FAIL" if v is None else "COMPLETE",
            "params": {"learning_rate": 1e-3 * (k + 1)},
            "value": v,
            "steps": 5,
            "flops": 1e6,
            "wall_s": 2.0,
        }
        for k, v in enumerate(values)
    ]
    complete = [t for t in trials if t["value"] is not None]
    best = max(complete, key=lambda t: t["value"])
    return dict(
        name=f"digits/s4/{arm}", task="digits", architecture="s4", arm=arm, trials_planned=3, max_steps=5,
        space=SPACE, storage="sqlite:///x/tuning.db", sampler="TPESampler(seed=0)", result_task="digits",
        model="spt_s4", best={k: best[k] for k in ("number", "params", "value")}, trials=trials,
    )  # fmt: skip


def test_the_tuning_section_names_the_chosen_values_spread_and_cost_and_flags_an_unequal_arm(tmp_path: Path):
    studies = [study("scratch", [0.2, 0.5, 0.4]), study("spt", [0.6, None, 0.7])]
    (tmp_path / "tuning.json").write_text(json.dumps({"studies": studies}))
    studies = read_tuning([tmp_path])
    assert tuned_keys(studies) == {"learning_rate"}
    text, plot = tuning_section(studies, tmp_path)
    assert plot == tmp_path / "tuning.png" and plot.stat().st_size > 0
    assert "3 trials (5 steps per trial; sampler TPESampler(seed=0)" in text
    assert "| digits/s4/scratch | 3 / 0 / 3 | learning_rate=0.002 (trial 1) | 0.5 | 0.2 / 0.4 / 0.5 |" in text
    assert f"| digits/s4/spt | 2 / 0 / 3 {FLAG} | learning_rate=0.003 (trial 2) | 0.7 |" in text
    assert best_so_far(studies[0]) == [(0, 0.2), (1, 0.5), (2, 0.5)]
    spt = find_study(studies, "digits", "spt_s4", "spt")
    assert tuned_label(studies, spt) == f" (tuned, 2 trials {FLAG})"
    assert tuned_label(studies, find_study(studies, "digits", "spt_s4", "baseline")) == " (tuned, 3 trials)"
    assert search_cost(spt) == " + search: 15 steps · 3e06 FLOPs · 6.0 s"
    spt["trials"][1].update(steps=None, flops=None, wall_s=None)  # a trial that failed before its results.json
    assert search_cost(spt) == " + search: ≥ 10 steps · 2e06 FLOPs · 4.0 s"
    assert find_study(studies, "digits", "spt_dlr", "spt") is None and tuned_label(studies, None) == ""


def test_an_untuned_comparison_has_no_tuning_section(tmp_path: Path):
    assert read_tuning([tmp_path]) == [] and tuning_section([], tmp_path) == ("", None)


def test_the_tuning_plot_has_whole_trials_and_keeps_equal_curves_apart(tmp_path: Path, monkeypatch):
    """Ticks at whole trials only (no 0.5); two studies with the same best-so-far curve are two visible lines:
    their own markers, a small shift apart, each in the legend."""
    from spt_hf.report import tuning

    figures = []
    monkeypatch.setattr(tuning, "save_figure", lambda fig, path, dpi: figures.append(fig) or path)
    studies = [study("scratch", [0.2, 0.5, 0.4]), {**study("spt", [0.2, 0.5, 0.4]), "name": "digits/s4/spt"}]
    tuning.plot_tuning(studies, tmp_path)
    ax = figures[0].axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    first, second = ax.lines
    assert first.get_marker() != second.get_marker()
    assert list(first.get_ydata()) == list(second.get_ydata()) == [0.2, 0.5, 0.5]
    assert all(0 < b - a < 0.5 for a, b in zip(first.get_xdata(), second.get_xdata(), strict=True))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["digits/s4/scratch", "digits/s4/spt"]
