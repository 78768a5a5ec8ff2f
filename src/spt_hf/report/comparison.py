"""`spt-hf report`: the comparison that finished runs support, as tables, per-seed files and plots.

Finetuning results are grouped into rows (`rows.py`: one per task, architecture and recipe, the seeds of one recipe
together); each row's two sides, the baseline and SPT + finetune, are compared over seeds (`statistics.py`) and
drawn (`plots.py`). This module writes the tables and files.

Outputs (into the report folder):
- `report.md`: per (task, architecture) the baseline (scratch or text-pretrained) and SPT + finetune test metric
  (mean ± sd, n), the difference paired over seeds with its 95% t-interval, paired t-test and exact sign-flip test
  ("n too small" below 3 pairs), and each side's steps, training FLOPs and wall time (SPT + finetune: both phases);
  the paper-style table (rows architectures, columns tasks and their average, cells "baseline → SPT", the best per
  column in bold); the Transformer–SSM gap, summarised and per pair of rows with the same statistics.
- `runs.csv` and `runs.json`: every run's numbers (one line per seed).
- `learning_curves.png`: one panel per task, one colour per architecture, scratch dashed and SPT solid, the mean
  over seeds with a band (min to max); x in optimiser steps, SPT steps included for compute-tied runs.
- `test_metrics.png`: a dot per seed of each row's test metric, scratch and SPT + finetune side by side.
- With two tasks or more, the "Across tasks" section (`across_tasks.py`): per architecture SPT + finetune against
  its baseline over the tasks (mean difference, wins / ties / losses, Wilcoxon signed-rank p), the mean ranks of
  every (architecture, arm) with Friedman and the Nemenyi critical difference; its numbers in `aggregate.json`, its
  diagram in `critical_difference.png`.
"""

import csv
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..phases import StartKind
from .across_tasks import AGGREGATE_FILE, CD_FIGURE, MIN_TASKS, across_tasks, across_tasks_section, aggregate_json
from .plots import plot_critical_difference, plot_learning_curves, plot_test_metrics
from .rows import KIND_NAMES, Row, Run, comparison_rows, duration_text, find_results, metric_digits, metric_scale
from .statistics import ALPHA, MIN_PAIRS, Paired, by_seed, paired_difference
from .tuning import find_study, read_tuning, search_cost, tuned_keys, tuned_label, tuning_section

SSM_TYPES = ("spt_s4", "spt_dlr")
TRANSFORMER_TYPE = "spt_rotary_transformer"
UNEQUAL_MARK = "†"  # a gap between runs trained on different budgets (steps): architecture and budget confounded
EARLY_EXPORT_MARK = "°"  # SPT steps of runs whose SPT phase exported an earlier checkpoint than its last step's

# ----------------------------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------------------------


def mean_spread(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    if not values:
        return "—"
    values = np.asarray(values) * scale
    spread = f" ± {values.std(ddof=1):.{digits}f}" if len(values) > 1 else ""
    return f"{values.mean():.{digits}f}{spread} (n={len(values)})"


def _budget(runs: list[Run], spt: bool) -> str:
    if not runs:
        return "—"
    steps = sorted({r.steps for r in runs})
    text = "/".join(map(str, steps))
    if spt:
        spt_steps = sorted({r.spt_steps for r in runs})
        mark = EARLY_EXPORT_MARK if any(r.spt_exported is not None for r in runs) else ""
        text = f"{'/'.join(map(str, spt_steps))}{mark} + {text}"
    return text


def _caps(runs: list[Run], spt: bool) -> str:
    """The step budgets one side was given (under early stopping the caps, not the steps used: a pair that stopped
    at different steps had the same budget), as `_budget` writes steps."""
    text = "/".join(map(str, sorted({r.steps if r.cap is None else r.cap for r in runs})))
    if spt:
        spt_caps = sorted({r.spt_steps if r.spt_cap is None else r.spt_cap for r in runs})
        text = f"{'/'.join(map(str, spt_caps))} + {text}"
    return text


def _cost(runs: list[Run], spt: bool) -> str:
    """Steps · FLOPs · wall time of one side (means over its runs; the SPT side sums both phases; "≥" when a phase
    resumed a checkpoint that recorded no time spent, so its time counts from that step)."""
    if not runs:
        return "—"
    flops = [r.flops for r in runs]
    walls = [r.wall_s for r in runs]
    flop_text = "— FLOPs" if None in flops else f"{np.mean(flops):.3g} FLOPs".replace("e+", "e")
    wall_text = duration_text(None if None in walls else np.mean(walls))
    at_least = "≥ " if None not in walls and any(r.wall_partial for r in runs) else ""
    return f"{_budget(runs, spt)} steps · {flop_text} · {at_least}{wall_text}"


# ----------------------------------------------------------------------------------------------------------------
# Is the difference real? Paired differences over seeds (`statistics.py`), as table cells
# ----------------------------------------------------------------------------------------------------------------


def _interval(paired: Paired, digits: int) -> str:
    if paired.low is None:
        return f"n too small (n={paired.n})"
    return f"[{paired.low:+.{digits}f}, {paired.high:+.{digits}f}] (n={paired.n})"


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2g}"  # two significant digits: 0.25, 0.031, 0.00093


def _difference(paired: Paired, unpaired_mean: float, scale: float, digits: int) -> str:
    """The mean paired difference (the centre of its interval), or, without a common seed, the difference of the
    sides' means; `*` when significant."""
    value = paired.mean if paired.mean is not None else unpaired_mean * scale
    return f"{value:+.{digits}f}" + (" *" if paired.significant else "")


def markdown_table(rows: list[Row], studies: list[dict] | None = None) -> str:
    """Per task and architecture: scratch, SPT + finetune, the gain with its paired 95% interval and tests over
    seeds, and what each side cost; with the `studies` of `compare --tune`, each tuned side says "tuned, N trials"
    and its cost adds the search's (`tune_report.py`)."""
    lines = [
        "| task | architecture | variant | metric | baseline | baseline result | SPT + finetune | SPT − baseline "
        "| 95% CI (paired) | p (paired t) | p (sign-flip) | baseline cost | SPT + finetune cost |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        scale, digits = metric_scale(row.metric), metric_digits(row.metric)
        scratch, spt = [r.test for r in row.side("baseline")], [r.test for r in row.side("spt")]
        paired = paired_difference(by_seed(row.side("spt"), scale), by_seed(row.side("baseline"), scale))
        gain = _difference(paired, np.mean(spt) - np.mean(scratch), scale, digits) if scratch and spt else "—"
        study = {side: find_study(studies or [], row.task, row.architecture, side) for side in ("baseline", "spt")}
        label = {side: tuned_label(studies or [], found) for side, found in study.items()}
        search = {side: search_cost(found) for side, found in study.items()}
        lines.append(
            f"| {row.task} | {row.architecture} | {row.variant or '—'} | {row.metric} | {row.baseline_kind}"
            f" | {mean_spread(scratch, scale, digits)}{label['baseline']}"
            f" | {mean_spread(spt, scale, digits)}{label['spt']} | {gain} | {_interval(paired, digits)}"
            f" | {_p(paired.p_t)}"
            f" | {_p(paired.p_sign)} | {_cost(row.side('baseline'), False)}{search['baseline']}"
            f" | {_cost(row.side('spt'), True)}{search['spt']} |"
        )
    return "\n".join(lines)


def unpaired_notes(rows: list[Row]) -> str:
    """The seeds each paired comparison of the main table left out (one side has them, the other not)."""
    notes = []
    for row in rows:
        scale = metric_scale(row.metric)
        paired = paired_difference(by_seed(row.side("spt"), scale), by_seed(row.side("baseline"), scale))
        named = {"a": "SPT + finetune", "b": "baseline"}
        left = "; ".join(f"{named[side]} seeds {seeds}" for side, seeds in paired.unpaired.items())
        if left:
            where = f"{row.task} / {row.architecture}" + (f" [{row.variant}]" if row.variant else "")
            notes.append(f"- {where}: paired on {paired.n} seed(s); left out: {left}")
    return "\n".join(notes)


def _cell_means(rows: list[Row]) -> dict[tuple[str, str], dict[str, float]]:
    means: dict = {}
    for row in rows:
        label = row.architecture + (f" [{row.variant}]" if row.variant else "")
        scale = metric_scale(row.metric)
        means[(label, row.task)] = {
            kind: float(np.mean([r.test for r in row.side(kind)]) * scale)
            for kind in ("baseline", "spt")
            if row.side(kind)
        }
        means[(label, row.task)]["_n"] = {kind: len(row.side(kind)) for kind in ("baseline", "spt")}
        means[(label, row.task)]["_baseline_kind"] = row.baseline_kind
        means[(label, row.task)]["_digits"] = metric_digits(row.metric)
    return means


def paper_table(rows: list[Row]) -> str:
    """Rows architectures, columns tasks and the average: "baseline → SPT + finetune" means, the best per column
    (after SPT) in bold. The baseline is scratch (random initialisation); one that is not says its kind in the cell
    ("text-pretrained")."""
    means = _cell_means(rows)
    archs = sorted({a for a, _ in means})
    tasks = sorted({t for _, t in means})
    best = {t: max((means[(a, t)].get("spt", -np.inf) for a in archs if (a, t) in means), default=None) for t in tasks}
    lines = ["| architecture | " + " | ".join(tasks) + " | average |", "|---" * (len(tasks) + 2) + "|"]
    for arch in archs:
        cells, averages = [], {"baseline": [], "spt": []}
        for task in tasks:
            cell = means.get((arch, task), {})
            for kind in ("baseline", "spt"):
                if kind in cell:
                    averages[kind].append(cell[kind])
            digits = cell.get("_digits", 1)
            text = " → ".join(f"{cell[k]:.{digits}f}" if k in cell else "—" for k in ("baseline", "spt"))
            if "spt" in cell and best[task] is not None and cell["spt"] == best[task]:
                text = f"**{text}**"
            if cell.get("_baseline_kind", StartKind.SCRATCH) not in (StartKind.SCRATCH, "—"):
                text = f"{text} ({cell['_baseline_kind']} baseline)"
            cells.append(text)
        complete = {k: v for k, v in averages.items() if len(v) == len(tasks)}
        digits = max((means[(arch, t)]["_digits"] for t in tasks if (arch, t) in means), default=1)
        average = " → ".join(
            f"{np.mean(complete[k]):.{digits}f}" if k in complete else "—" for k in ("baseline", "spt")
        )
        lines.append(f"| {arch} | " + " | ".join(cells) + f" | {average} |")
    return "\n".join(lines)


def transformer_ssm_gap(rows: list[Row]) -> str:
    """Per task, the best SSM minus the Transformer, before and after SPT (in metric points); then every SSM row
    against every Transformer row of the same task and variant, paired over seeds (`gap_table`), pairs trained on
    different budgets marked and named under it."""
    means = _cell_means(rows)
    table, unequal = gap_table(rows)
    lines = []
    for task in sorted({t for _, t in means}):
        transformer = means.get((TRANSFORMER_TYPE, task))
        ssms = [means[(a, task)] for a, t in means if t == task and a in SSM_TYPES]
        if not transformer or not ssms:
            continue
        parts = []
        for kind, label in (("baseline", "from scratch"), ("spt", "after SPT")):
            values = [s[kind] for s in ssms if kind in s]
            if kind in transformer and values:
                parts.append(f"{label} {max(values) - transformer[kind]:+.{transformer['_digits']}f}")
        if parts:
            flag = f" ({UNEQUAL_MARK} unequal budgets below)" if any(t == task for t, _ in unequal) else ""
            lines.append(f"- {task}: best SSM − Transformer: " + ", ".join(parts) + flag)
    if not lines and not table:
        return "- (needs a Transformer and an SSM row on the same task)"
    notes = "\n\n" + "\n".join(line for _, line in unequal) if unequal else ""
    return "\n".join(lines) + ("\n\n" + table if table else "") + notes


def gap_table(rows: list[Row]) -> tuple[str, list[tuple[str, str]]]:
    """SSM − Transformer per pair of rows: every SSM row (`SSM_TYPES`) against every Transformer row of the same task
    and variant, for each kind of run, paired over seeds; and a note line per pair whose sides trained on different
    budgets (its gap marked `UNEQUAL_MARK`), naming both, as (task, line)."""
    lines, unequal = [], []
    for ssm in (r for r in rows if r.architecture in SSM_TYPES):
        for transformer in (r for r in rows if r.architecture == TRANSFORMER_TYPE):
            if (transformer.task, transformer.variant) != (ssm.task, ssm.variant) or ssm.metric != transformer.metric:
                continue
            scale, digits = metric_scale(ssm.metric), metric_digits(ssm.metric)
            for kind, name in KIND_NAMES.items():
                a, b = by_seed(ssm.side(kind), scale), by_seed(transformer.side(kind), scale)
                if not a or not b:
                    continue
                paired = paired_difference(a, b)
                gap = _difference(paired, np.mean(list(a.values())) - np.mean(list(b.values())), 1.0, digits)
                budgets = [_caps(row.side(kind), kind == StartKind.SPT) for row in (ssm, transformer)]
                if budgets[0] != budgets[1]:
                    gap += f" {UNEQUAL_MARK}"
                    unequal.append((ssm.task, _unequal_note(ssm.task, ssm.architecture, name, budgets)))
                lines.append(
                    f"| {ssm.task} | {ssm.variant or '—'} | {ssm.architecture} | {name} | {gap}"
                    f" | {_interval(paired, digits)} | {_p(paired.p_t)} | {_p(paired.p_sign)} |"
                )
    if not lines:
        return "", []
    header = [
        "| task | variant | SSM | kind | SSM − Transformer | 95% CI (paired) | p (paired t) | p (sign-flip) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(header + lines), unequal


def _unequal_note(task: str, architecture: str, kind_name: str, budgets: list[str]) -> str:
    """The note under the gap table for a pair of rows whose runs of one kind trained on different budgets."""
    return (
        f"- {task} {UNEQUAL_MARK}: {architecture} and the Transformer, {kind_name}, trained on different budgets "
        f"({budgets[0]} steps against {budgets[1]}): the gap mixes architecture and budget; give both the same steps "
        "(compare's --budget tied or equal)."
    )


# ----------------------------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------------------------


def write_per_seed(rows: list[Row], out: Path) -> list[Path]:
    records = [
        {"task": row.task, "architecture": row.architecture, "variant": row.variant, **asdict(run)}
        for row in rows
        for run in row.runs
    ]
    (out / "runs.json").write_text(json.dumps(records, indent=2))
    with open(out / "runs.csv", "w", newline="") as handle:
        columns = [
            "task",
            "architecture",
            "variant",
            "kind",
            "seed",
            "metric",
            "test",
            "validation",
            "steps",
            "spt_steps",
            "spt_exported",
            "flops",
            "wall_s",
            "path",
        ]
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    return [out / "runs.csv", out / "runs.json"]


SIGNIFICANCE_NOTE = (
    "Differences are paired by seed (the same seed draws the same training subset, data order and SPT masks; the "
    "validation and test splits are the same for every seed), over the seeds both sides have. 95% CI: the t-interval "
    "of the mean paired difference; p (paired t): the two-sided paired t-test; p (sign-flip): the exact two-sided "
    f"sign-flip permutation test (it cannot go below 2/2^n). `*`: p (paired t) < {ALPHA}. Below {MIN_PAIRS} pairs: "
    "n too small. Cost: optimiser steps used (fewer than the budget when early stopping stopped a phase) · training "
    "FLOPs (one real step counted, times the steps) · wall time of each side, mean over its runs; SPT + finetune sums "
    f"both phases. `{EARLY_EXPORT_MARK}` after the SPT steps: an SPT phase exported the checkpoint of an earlier step "
    "(its lowest validation loss), not its last (runs.csv: spt_exported). `≥` before a wall time: a phase resumed a "
    "checkpoint that recorded no time spent (written by an older spt_hf), so its time counts from that checkpoint."
)


def write_across_tasks(rows: list[Row], out: Path) -> tuple[str, list[Path]]:
    """With two tasks or more: the "Across tasks" section, `aggregate.json` and `critical_difference.png` (with two
    tasks or more that have every (architecture, arm)); otherwise nothing."""
    result = across_tasks(rows)
    if result is None:
        return "", []
    (out / AGGREGATE_FILE).write_text(json.dumps(aggregate_json(result), indent=2) + "\n")
    files = [out / AGGREGATE_FILE]
    ranks = result.ranking
    if len(ranks.tasks) >= MIN_TASKS:
        figure = plot_critical_difference(
            ranks.mean_ranks, ranks.critical_difference, len(ranks.tasks), out / CD_FIGURE
        )
        files.append(figure)
    return across_tasks_section(result), files


def report(
    paths: list[str | Path], out_dir: str | Path | None = None, missing_pairs: list[tuple[str, str]] | None = None
) -> str:
    """Write report.md, the per-seed files and the plots for the runs under `paths`; return the Markdown text."""
    results = find_results(paths)
    studies = read_tuning(paths)  # a `compare --tune` search (tune_report.py), or none
    rows = comparison_rows(results, tuned_keys(studies))
    out = Path(out_dir or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    text = (
        f"# spt_hf report\n\n{len(results)} phase result(s) from {', '.join(map(str, paths))}; test metric of the "
        "model each run selected on validation (accuracy in %, or R²); steps are optimiser steps, SPT steps + "
        "finetuning steps on the SPT side.\n\n"
        f"{markdown_table(rows, studies)}\n\n{SIGNIFICANCE_NOTE}\n{unpaired_notes(rows)}\n\n"
        f"## Architectures × tasks (baseline → SPT + finetune)\n\n{paper_table(rows)}\n\n"
        f"## Transformer–SSM gap\n\n{transformer_ssm_gap(rows)}\n"
    )
    if missing_pairs:
        listed = ", ".join(f"{task}/{arch}" for task, arch in missing_pairs)
        text += f"\n## Not in this comparison\n\nNo recipe pair, so not planned: {listed}.\n"
    tuning, tuning_plot = tuning_section(studies, out)
    text += f"\n{tuning}" if tuning else ""
    files = write_per_seed(rows, out)
    across, across_files = write_across_tasks(rows, out)
    text += f"\n{across}\n" if across else ""
    files += across_files
    if rows:
        files += [plot_learning_curves(rows, out), plot_test_metrics(rows, out)]
    files += [tuning_plot] if tuning_plot else []
    text += "".join(f"\n![{p.stem}]({p.name})" for p in files if p.suffix == ".png")
    (out / "report.md").write_text(text + "\n")
    print(f"spt_hf: report written to {out / 'report.md'} (with {', '.join(p.name for p in files)})", flush=True)
    return text
