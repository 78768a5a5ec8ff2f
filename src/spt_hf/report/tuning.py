"""The tuning part of `spt-hf report`, for a comparison run with `spt-hf compare --tune` (its `tuning.json`, written
by compare/tune.py; the names are spt_hf/tuning.py's): per (task, architecture, arm) the trials run, the space, the
chosen values, the spread of the validation metric across trials and `tuning.png` (best-so-far validation against
trial number); in the main table each tuned side says "tuned, N trials" and its cost adds the search's (steps, FLOPs,
wall time of every trial). A study with fewer completed trials than planned, or than another study of the comparison,
is flagged.
"""

import json
from pathlib import Path

import numpy as np

from ..tuning import PAIR_ARM, SCRATCH_ARM, SPT_ARM, SUMMARY_FILE
from .plots import pyplot, save_figure
from .rows import duration_text

SIDES = {"baseline": (SCRATCH_ARM,), "spt": (SPT_ARM, PAIR_ARM)}  # the report's side -> the study's arms
FLAG = "⚠"


def read_tuning(paths: list[str | Path]) -> list[dict]:
    """The studies of every `tuning.json` directly in the given folders (none: an untuned comparison)."""
    studies = []
    for root in paths:
        path = Path(root) / SUMMARY_FILE
        if path.is_file():
            studies += json.loads(path.read_text())["studies"]
    return studies


def tuned_keys(studies: list[dict]) -> set[str]:
    """The recipe keys the searches chose: the report's rows do not split on them (each arm has its own values)."""
    return {key.rsplit(".", 1)[-1] for study in studies for key in study["space"]}  # (`spt.learning_rate` too)


def completed(study: dict) -> list[dict]:
    return [t for t in study["trials"] if t["state"] == "COMPLETE" and t["value"] is not None]


def pruned(study: dict) -> list[dict]:
    """The trials the study's pruner stopped early (`--tune_pruner`)."""
    return [t for t in study["trials"] if t["state"] == "PRUNED"]


def find_study(studies: list[dict], task: str, architecture: str, side: str) -> dict | None:
    """The study of a report row's side (matched on the trials' own task and model type)."""
    for study in studies:
        if (study.get("result_task"), study.get("model")) == (task, architecture) and study["arm"] in SIDES[side]:
            return study
    return None


def unequal(studies: list[dict], study: dict) -> bool:
    """Whether a study completed fewer trials than planned or than another study of the comparison."""
    counts = {len(completed(s)) for s in studies}
    return len(counted := completed(study)) < study["trials_planned"] or len(counts) > 1 and len(counted) < max(counts)


def tuned_label(studies: list[dict], study: dict | None) -> str:
    """ " (tuned, N trials)" for a table cell, flagged when the counts are unequal; "" for an untuned side."""
    if study is None:
        return ""
    return f" (tuned, {len(completed(study))} trials{' ' + FLAG if unequal(studies, study) else ''})"


def search_cost(study: dict | None) -> str:
    """The " + search: steps · FLOPs · wall time" of every trial of a study (summed), for a cost cell; "≥" when a
    trial recorded none (it failed before writing its results: what it spent is not known)."""
    if study is None:
        return ""
    trials = study["trials"]
    known = [t for t in trials if None not in (t["steps"], t["flops"], t["wall_s"])]
    at_least = "≥ " if len(known) < len(trials) else ""
    flops = f"{sum(t['flops'] for t in known):.3g} FLOPs".replace("e+", "e")
    steps = sum(t["steps"] for t in known)
    return f" + search: {at_least}{steps} steps · {flops} · {duration_text(sum(t['wall_s'] for t in known))}"


def best_so_far(study: dict) -> list[tuple[int, float]]:
    """(trial number, best validation metric up to it) over the completed trials."""
    points, best = [], -np.inf
    for trial in sorted(completed(study), key=lambda t: t["number"]):
        best = max(best, trial["value"])
        points.append((trial["number"], best))
    return points


def tuning_section(studies: list[dict], out: Path) -> tuple[str, Path | None]:
    """The report's "Tuning" section and its plot (`tuning.png`), or ("", None) for an untuned comparison."""
    if not studies:
        return "", None
    first = max(studies, key=lambda s: len(s["space"]))  # (an SPT + finetune pair's space has the `spt.` keys too)
    budget = f"{first['max_steps']} steps per trial" if first["max_steps"] else "each trial the phase's full budget"
    if first.get("pruner", "none") != "none":
        budget += f", pruner {first['pruner']}: a trial below its study's median at an evaluation stopped there"
    lines = [
        "## Tuning",
        "",
        f"Every (task, architecture, arm) searched the same space with {first['trials_planned']} trials "
        f"({budget}; sampler {first['sampler']}; study in {first['storage']}), chosen on the validation metric; the "
        "chosen values were then trained for every seed and evaluated on test once. Space: "
        + ", ".join(f"`{k}` {_distribution(e)}" for k, e in first["space"].items())
        + (
            " (`spt.` keys: the SPT phase of each SPT + finetune pair, --tune_spt)."
            if PAIR_ARM in first["arm"]
            else "."
        ),
        "",
        "| study | trials (completed / pruned / run) | chosen (best trial) | best validation | validation across "
        "trials (min / median / max) | search cost |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_study_line(studies, study) for study in studies]
    if any(unequal(studies, s) for s in studies):
        lines += [
            "",
            f"{FLAG} fewer completed trials than planned or than another study: these arms were not tuned "
            "equally (a trial crashed, failed or was pruned); compare them with care.",
        ]
    return "\n".join(lines) + "\n", plot_tuning(studies, out)


def _study_line(studies: list[dict], study: dict) -> str:
    """One study's row of the tuning table."""
    values = [t["value"] for t in completed(study)]
    best = study["best"]
    chosen, best_value = "— (none completed)", "—"
    if best:
        chosen = ", ".join(f"{k}={_number(v)}" for k, v in best["params"].items()) + f" (trial {best['number']})"
        best_value = f"{best['value']:.4g}"
    flag = f" {FLAG}" if unequal(studies, study) else ""
    spread = " / ".join(f"{v:.4g}" for v in np.percentile(values, [0, 50, 100])) if values else "—"
    cost = search_cost(study).removeprefix(" + search: ")
    counts = f"{len(values)} / {len(pruned(study))} / {len(study['trials'])}{flag}"
    return f"| {study['name']} | {counts} | {chosen} | {best_value} | {spread} | {cost} |"


def _distribution(entry: dict) -> str:
    if entry["type"] == "categorical":
        return f"in {entry['choices']}"
    return f"{entry['type']} [{entry['low']}, {entry['high']}]{' log' if entry.get('log') else ''}"


def _number(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


MARKERS = "osD^vP*X"  # one per study, so that a line lying on another's still shows


def plot_tuning(studies: list[dict], out: Path) -> Path:
    """`tuning.png`: best-so-far validation metric against trial number (whole trials on the axis), one line per
    study with its own marker, each shifted by a small fraction of a trial so that equal curves stay apart, and the
    legend below the axes."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.6))
    shift = 0.25 / max(1, len(studies))  # (a quarter of a trial shared between the studies)
    for index, study in enumerate(studies):
        points = best_so_far(study)
        if points:
            trials, values = zip(*points)
            ax.plot(
                [t + (index - (len(studies) - 1) / 2) * shift for t in trials],
                values,
                marker=MARKERS[index % len(MARKERS)],
                markersize=5,
                alpha=0.85,
                linestyle="--" if study["arm"] == SCRATCH_ARM else "-",
                label=study["name"],
            )
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel("best validation metric so far")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return save_figure(fig, out / "tuning.png", dpi=110)
