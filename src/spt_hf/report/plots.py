"""The figures of `spt-hf report`: `learning_curves.png` (one panel per task, one colour per architecture, scratch
dashed and SPT solid, the mean over seeds with a band from min to max; x in optimiser steps, SPT steps included for
compute-tied runs) and `test_metrics.png` (a dot per seed of each row's test metric, the baseline and SPT + finetune
side by side). matplotlib is imported when a figure is drawn.
"""

from pathlib import Path

import numpy as np

from ..phases import StartKind
from .rows import KIND_NAMES, Row, Run, metric_scale


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (matplotlib is imported when a figure is drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> Path:
    """Lay out `fig`, write it to `path` and free it; returns `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
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
        if ax.lines:
            ax.legend(fontsize=8, loc="best")
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
