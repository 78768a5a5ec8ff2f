"""The figures of `spt-hf report`: `learning_curves.png` (one panel per task, one colour per architecture, scratch
dashed and SPT solid, the mean over seeds with a band from min to max; x in optimiser steps, SPT steps included for
compute-tied runs) and `test_metrics.png` (a dot per seed of each row's test metric, the baseline and SPT + finetune
side by side); over several tasks, `critical_difference.png` (`plot_critical_difference`: the mean ranks of every
(architecture, arm) with the Nemenyi critical difference). matplotlib is imported when a figure is drawn.
"""

from pathlib import Path

import numpy as np

from ..phases import StartKind
from .rows import KIND_NAMES, Row, Run, metric_scale
from .statistics import ALPHA


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (matplotlib is imported when a figure is drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> Path:
    """Lay out `fig`, write it to `path` and free it; returns `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")  # (with a legend below the axes)
    pyplot().close(fig)
    return path


def _mean_curve(runs: list[Run]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps (SPT steps added) and the mean, min and max over seeds at the steps every seed evaluated."""
    curves = [dict(run.curve) for run in runs if run.curve]
    if not curves:
        return None
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    if not steps:
        return None
    values = np.array([[c[s] for s in steps] for c in curves])  # (seeds, steps)
    offset = runs[0].spt_steps if runs[0].kind == StartKind.SPT else 0
    return np.array(steps) + offset, values.mean(0), values.min(0), values.max(0)


def plot_learning_curves(rows: list[Row], out: Path) -> Path:
    """`learning_curves.png` in `out`: each row's validation metric over optimiser steps, each kind of run its line."""
    plt = pyplot()

    tasks = sorted({row.task for row in rows})
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(5.5 * max(1, len(tasks)), 4.2), squeeze=False)
    colours = plt.get_cmap("tab10")
    labels = sorted({row.architecture + (f" [{row.variant}]" if row.variant else "") for row in rows})
    for ax, task in zip(axes[0], tasks):
        for row in (r for r in rows if r.task == task):
            label = row.architecture + (f" [{row.variant}]" if row.variant else "")
            colour = colours(labels.index(label) % 10)
            for kind, style, text in (
                (StartKind.SCRATCH, "--", KIND_NAMES[StartKind.SCRATCH]),
                (StartKind.TEXT_PRETRAINED, ":", KIND_NAMES[StartKind.TEXT_PRETRAINED]),
                (StartKind.SPT, "-", KIND_NAMES[StartKind.SPT]),
            ):
                curve = _mean_curve(row.side(kind))
                if curve is None:
                    continue
                steps, mean, low, high = curve
                marker = "o" if len(steps) <= 20 else None  # a curve of one evaluation is still seen
                ax.plot(
                    steps,
                    mean * metric_scale(row.metric),
                    style,
                    color=colour,
                    marker=marker,
                    markersize=3,
                    label=f"{label}, {text}",
                )
                ax.fill_between(
                    steps, low * metric_scale(row.metric), high * metric_scale(row.metric), color=colour, alpha=0.15
                )
        metric = next(r.metric for r in rows if r.task == task)
        ax.set_title(f"{task}: validation {metric} (mean over seeds, band min-max)", fontsize=10)
        ax.set_xlabel("optimiser steps (SPT steps included on the SPT side)")
        ax.set_ylabel(f"validation {metric}" + (" (%)" if metric == "accuracy" else ""))
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))  # optimiser steps are whole
        if ax.lines:  # below the axes: a legend inside covers curves that end where it sits
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    return save_figure(fig, out / "learning_curves.png")


def plot_test_metrics(rows: list[Row], out: Path) -> Path:
    """`test_metrics.png` in `out`: each row's test metric per seed (dots) and mean (bar), the baseline beside SPT."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 2), 4.2))
    for index, row in enumerate(rows):
        for offset, kind, colour, text in (
            (-0.15, "baseline", "tab:grey", "baseline (scratch or text-pretrained)"),
            (0.15, "spt", "tab:blue", "SPT + finetune"),
        ):
            values = [r.test * metric_scale(row.metric) for r in row.side(kind)]
            if not values:
                continue
            jitter = np.linspace(-0.05, 0.05, len(values)) if len(values) > 1 else [0.0]
            ax.scatter(
                index + offset + np.asarray(jitter),
                values,
                color=colour,
                s=28,
                zorder=3,
                label=text if index == 0 else None,
            )
            ax.hlines(np.mean(values), index + offset - 0.1, index + offset + 0.1, color=colour, lw=2)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.task}\n{r.architecture}\n{r.variant}".strip() for r in rows], fontsize=8)
    metrics = sorted({r.metric for r in rows})
    ax.set_ylabel("test " + "/".join(metrics) + (" (%)" if metrics == ["accuracy"] else ""))
    ax.set_title("Test metric per seed (dots) and mean (bar)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if rows:
        ax.legend(fontsize=8)
    return save_figure(fig, out / "test_metrics.png")


def _not_different(ranks: list[float], cd: float) -> list[tuple[int, int]]:
    """The maximal runs (first, last index) of `ranks` (sorted) whose spread is at most `cd`: groups the Nemenyi test
    cannot tell apart, joined by a bar in the diagram."""
    runs: list[tuple[int, int]] = []
    for first in range(len(ranks)):
        last = max(j for j in range(first, len(ranks)) if ranks[j] - ranks[first] <= cd)
        if last > first and (not runs or last > runs[-1][1]):
            runs.append((first, last))
    return runs


def plot_critical_difference(mean_ranks: dict[str, float], cd: float | None, n_tasks: int, path: Path) -> Path:
    """A critical-difference diagram (Demšar 2006) at `path`: the mean ranks on an axis from 1 (best, left) to k, each
    group's name on an elbow line, the half with the better ranks on the left; a bar of length `cd` above the axis,
    and a thick line under each run of groups no further apart than `cd` (not told apart by Nemenyi)."""
    plt = pyplot()
    names = sorted(mean_ranks, key=mean_ranks.get)
    ranks = [mean_ranks[name] for name in names]
    k, half = len(names), (len(names) + 1) // 2
    fig, ax = plt.subplots(figsize=(8.0, 1.6 + 0.32 * half))
    ax.hlines(0, 1, k, color="black", lw=1)
    for tick in range(1, k + 1):
        ax.vlines(tick, 0, 0.08, color="black", lw=1)
        ax.text(tick, 0.14, str(tick), ha="center", va="bottom", fontsize=9)
    for index, (name, rank) in enumerate(zip(names, ranks)):
        left = index < half
        row = index if left else k - 1 - index
        y, end = -0.45 - 0.3 * row, 0.6 if left else k + 0.4
        ax.plot([rank, rank, end], [0, y, y], color="black", lw=0.8)
        ax.text(end, y, f"{name} ({rank:.2f})", ha="right" if left else "left", va="center", fontsize=8)
    if cd is not None:
        ax.plot([1, 1 + cd], [0.55, 0.55], color="black", lw=1.5)
        ax.text(1 + cd / 2, 0.6, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8)
        for bar, (first, last) in enumerate(_not_different(ranks, cd)):
            ax.plot([ranks[first] - 0.03, ranks[last] + 0.03], [-0.15 - 0.08 * bar] * 2, color="tab:red", lw=3)
    ax.set_xlim(-1.8, k + 2.8)
    ax.set_ylim(-0.6 - 0.3 * half, 0.95)
    ax.axis("off")
    ax.set_title(f"Mean rank over {n_tasks} tasks (1 = best); Nemenyi CD at α = {ALPHA}", fontsize=10)
    return save_figure(fig, path)
