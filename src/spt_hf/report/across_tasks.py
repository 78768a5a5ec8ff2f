"""Across tasks: does SPT + finetuning beat its baseline over the tasks of a comparison, and how do the
(architecture, arm) pairs rank? The unit is the task, as Demšar (JMLR 2006) recommends for comparing methods over
several datasets; the per-task statistics over seeds stay in `statistics.py`.

From the report's rows (the runs of `runs.csv`), for each task and architecture (with its variant, as the paper table
names it) the mean test metric over the seeds of each arm: the baseline (scratch or text-pretrained) and SPT +
finetune. Then, per architecture:
- the per-task difference SPT + finetune − baseline, their mean (`mean_delta`, in the units of runs.csv: accuracy
  as a fraction, R² as it is), and wins / ties / losses, a tie being two exactly equal means (a difference of 0.0,
  the zero that `scipy.stats.wilcoxon` leaves out by default);
- the two-sided Wilcoxon signed-rank p over the per-task differences, `scipy.stats.wilcoxon(d)` with its defaults;
  None below 2 tasks or when every difference is zero. With N tasks its exact p cannot go below 2/2^N (0.25 for 3
  tasks, 0.0625 for 5, 0.031 for 6).
And over every (architecture, arm): the mean rank across the tasks that have them all (rank 1 = the highest metric;
accuracy and R² are both higher-is-better; tied values share their mean rank), the Friedman test
(`scipy.stats.friedmanchisquare`, from 3 groups and 2 tasks) and the Nemenyi critical difference
CD = q_α / √2 · sqrt(k (k + 1) / (6 N)), q_α the studentized range's 1 − α quantile for k groups and infinite
degrees of freedom: two mean ranks further apart than CD differ at level α (read it after Friedman rejects).

The numbers go to `aggregate.json` (`aggregate_json`), the section to report.md (`across_tasks_section`).
"""

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from .rows import Row, metric_digits, metric_scale
from .statistics import ALPHA

ARMS = {"baseline": "baseline", "spt": "SPT + finetune"}  # `Row.side` name -> how the report names the arm
AGGREGATE_FILE = "aggregate.json"
CD_FIGURE = "critical_difference.png"
MIN_TASKS = 2  # below this, no test across tasks (and no section)
MIXED_UNITS = "tasks of both metrics: in the units of runs.csv, accuracy as a fraction and R² as it is"


@dataclass
class ArchitectureAcrossTasks:
    """SPT + finetune against the baseline of one architecture over the tasks that have both arms (`per_task`:
    {task: {"baseline", "spt", "delta"}}); `excluded`: {task: why it is left out}."""

    architecture: str
    per_task: dict[str, dict[str, float]]
    excluded: dict[str, str]
    mean_delta: float | None = None
    wins: int = 0
    ties: int = 0
    losses: int = 0
    wilcoxon_p: float | None = None
    wilcoxon_note: str = ""


@dataclass
class Ranking:
    """Mean ranks of every (architecture, arm) (`groups`, "architecture · arm") over the tasks that have them all,
    with the Friedman test and the Nemenyi critical difference at `ALPHA` (None with a note when not defined)."""

    groups: list[str]
    tasks: list[str]
    mean_ranks: dict[str, float]
    excluded: dict[str, str]
    friedman_statistic: float | None = None
    friedman_p: float | None = None
    friedman_note: str = ""
    q_alpha: float | None = None
    critical_difference: float | None = None


@dataclass
class AcrossTasks:
    """The across-task statistics of a comparison of at least `MIN_TASKS` tasks."""

    tasks: list[str]
    metrics: dict[str, str]  # task -> accuracy or r2
    architectures: list[ArchitectureAcrossTasks] = field(default_factory=list)
    ranking: Ranking | None = None


def arm_means(rows: list[Row]) -> dict[tuple[str, str], dict[str, float]]:
    """{(architecture label, task): {arm: mean test metric over its runs}} for the arms that have runs with a test
    metric; the label adds the row's variant, as the paper table does."""
    means = {}
    for row in rows:
        label = row.architecture + (f" [{row.variant}]" if row.variant else "")
        means[(label, row.task)] = {
            arm: float(np.mean([run.test for run in row.side(arm)])) for arm in ARMS if row.side(arm)
        }
    return means


def wilcoxon_p(deltas: list[float]) -> tuple[float | None, str]:
    """The two-sided p of `scipy.stats.wilcoxon(deltas)` (its defaults), or None and why."""
    from scipy import stats

    if len(deltas) < MIN_TASKS:
        return None, f"fewer than {MIN_TASKS} tasks"
    if all(d == 0.0 for d in deltas):
        return None, "every difference is zero"
    with warnings.catch_warnings():  # (scipy's note that a normal approximation is used with zeros or ties)
        warnings.simplefilter("ignore")
        return float(stats.wilcoxon(deltas).pvalue), ""


def architecture_summary(label: str, means: dict, tasks: list[str]) -> ArchitectureAcrossTasks:
    """SPT + finetune − baseline of one architecture label over `tasks` (see `ArchitectureAcrossTasks`)."""
    per_task, excluded = {}, {}
    for task in tasks:
        cell = means.get((label, task))
        if cell is None:
            excluded[task] = "not run"
        elif len(cell) < len(ARMS):
            missing = [ARMS[arm] for arm in ARMS if arm not in cell]
            excluded[task] = f"no {' or '.join(missing)} result"
        else:
            per_task[task] = {**cell, "delta": cell["spt"] - cell["baseline"]}
    deltas = [values["delta"] for values in per_task.values()]
    summary = ArchitectureAcrossTasks(label, per_task, excluded)
    summary.mean_delta = float(np.mean(deltas)) if deltas else None
    summary.wins = sum(d > 0 for d in deltas)
    summary.ties = sum(d == 0 for d in deltas)
    summary.losses = sum(d < 0 for d in deltas)
    summary.wilcoxon_p, summary.wilcoxon_note = wilcoxon_p(deltas)
    return summary


def nemenyi_critical_difference(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """(q_α, CD) of the Nemenyi test for `k` groups over `n` tasks (Demšar 2006, section 3.2.2): q_α is the
    studentized range's 1 − α quantile for k groups and infinite degrees of freedom over √2; CD = q_α sqrt(k (k + 1)
    / (6 n)). Demšar's example, k = 4 and n = 14 at α = 0.05: q_α = 2.569, CD = 1.25."""
    from scipy import stats

    q_alpha = float(stats.studentized_range.ppf(1 - alpha, k, np.inf)) / math.sqrt(2)
    return q_alpha, q_alpha * math.sqrt(k * (k + 1) / (6 * n))


def rank_groups(means: dict, labels: list[str], tasks: list[str]) -> Ranking:
    """Mean ranks, Friedman and Nemenyi over the tasks where every (architecture, arm) has a result (`Ranking`)."""
    from scipy import stats

    groups = [(label, arm) for label in labels for arm in ARMS]
    names = [f"{label} · {ARMS[arm]}" for label, arm in groups]
    complete, excluded = [], {}
    for task in tasks:
        absent = [name for name, (label, arm) in zip(names, groups) if arm not in means.get((label, task), {})]
        if absent:
            excluded[task] = f"no result for {', '.join(absent)}"
        else:
            complete.append(task)
    values = np.array([[means[(label, task)][arm] for label, arm in groups] for task in complete])  # (N, k)
    ranks = np.array([stats.rankdata(-row) for row in values]).reshape(len(complete), len(groups))  # 1 = best
    result = Ranking(names, complete, dict(zip(names, map(float, ranks.mean(0)))) if complete else {}, excluded)
    k, n = len(groups), len(complete)
    if k < 3 or n < MIN_TASKS:
        result.friedman_note = f"needs 3 groups and {MIN_TASKS} tasks; here {k} groups, {n} tasks"
    else:
        friedman = stats.friedmanchisquare(*values.T)
        if np.isnan(friedman.pvalue):
            result.friedman_note = "every task ranks every group equally"
        else:
            result.friedman_statistic, result.friedman_p = float(friedman.statistic), float(friedman.pvalue)
    if n >= MIN_TASKS:
        result.q_alpha, result.critical_difference = nemenyi_critical_difference(k, n)
    return result


def across_tasks(rows: list[Row]) -> AcrossTasks | None:
    """The across-task statistics of the rows, or None when they hold fewer than `MIN_TASKS` tasks."""
    tasks = sorted({row.task for row in rows})
    if len(tasks) < MIN_TASKS:
        return None
    means = arm_means(rows)
    labels = sorted({label for label, _ in means})
    metrics = {row.task: row.metric for row in rows}
    summaries = [architecture_summary(label, means, tasks) for label in labels]
    return AcrossTasks(tasks, metrics, summaries, rank_groups(means, labels, tasks))


def aggregate_json(result: AcrossTasks) -> dict:
    """The contents of `aggregate.json`: per architecture `tasks` (how many), `mean_delta`, `wins`, `ties`,
    `losses`, `wilcoxon_p` and the per-task means; the mean ranks with Friedman and the critical difference."""
    ranking = result.ranking
    return {
        "tasks": result.tasks,
        "metrics": result.metrics,
        "delta": "SPT + finetune - baseline: the difference of the arms' mean test metric over seeds, per task, in the "
        "units of runs.csv (accuracy as a fraction, R2 as it is); a tie is a difference of exactly 0",
        "alpha": ALPHA,
        "architectures": {
            s.architecture: {
                "tasks": len(s.per_task),
                "mean_delta": s.mean_delta,
                "wins": s.wins,
                "ties": s.ties,
                "losses": s.losses,
                "wilcoxon_p": s.wilcoxon_p,
                "wilcoxon_note": s.wilcoxon_note or None,
                "per_task": s.per_task,
                "excluded": s.excluded,
            }
            for s in result.architectures
        },
        "ranks": {
            "tasks": ranking.tasks,
            "mean_ranks": ranking.mean_ranks,
            "excluded": ranking.excluded,
            "friedman_statistic": ranking.friedman_statistic,
            "friedman_p": ranking.friedman_p,
            "friedman_note": ranking.friedman_note or None,
            "q_alpha": ranking.q_alpha,
            "critical_difference": ranking.critical_difference,
        },
    }


def _p(value: float | None, note: str) -> str:
    return f"{value:.2g}" if value is not None else f"— ({note})"


def across_tasks_section(result: AcrossTasks) -> str:
    """The "Across tasks" section of report.md: per architecture the per-task differences and their summary, then
    the mean ranks with Friedman and the critical difference."""
    metrics = set(result.metrics.values())
    scale = metric_scale(next(iter(metrics))) if len(metrics) == 1 else 1.0
    digits = metric_digits(next(iter(metrics))) if len(metrics) == 1 else 3  # (mixed: fractions and R², as they are)
    unit = {100.0: "accuracy in percentage points", 1.0: "R²"}[scale] if len(metrics) == 1 else MIXED_UNITS
    header = "| architecture | " + " | ".join(result.tasks) + " | mean Δ | wins / ties / losses | p (Wilcoxon) |"
    lines = [header, "|---" * (len(result.tasks) + 4) + "|"]
    notes = []
    for s in result.architectures:
        cells = [f"{s.per_task[t]['delta'] * scale:+.{digits}f}" if t in s.per_task else "—" for t in result.tasks]
        mean = f"{s.mean_delta * scale:+.{digits}f}" if s.mean_delta is not None else "—"
        p = _p(s.wilcoxon_p, s.wilcoxon_note)
        lines.append(f"| {s.architecture} | {' | '.join(cells)} | {mean} | {s.wins} / {s.ties} / {s.losses} | {p} |")
        notes += [f"- {s.architecture}: {task} left out ({why})." for task, why in s.excluded.items()]
    n = len(result.tasks)
    text = (
        f"## Across tasks\n\nΔ = SPT + finetune − baseline, the difference of each arm's mean test metric over seeds "
        f"per task ({unit}); a tie is a Δ of exactly 0. p (Wilcoxon): the two-sided Wilcoxon signed-rank test over "
        f"the per-task Δ (scipy's defaults; zeros left out). With {n} tasks its exact p cannot go below "
        f"{2 / 2**n:.2g}; 6 tasks are needed to reach 0.05. Numbers: {AGGREGATE_FILE}.\n\n" + "\n".join(lines)
    )
    return text + ("\n\n" + "\n".join(notes) if notes else "") + "\n\n" + ranks_text(result.ranking)


def ranks_text(ranking: Ranking) -> str:
    """The mean ranks table with the Friedman test and the critical difference, in Markdown."""
    lines = ["| architecture · arm | mean rank (1 = best) |", "|---|---|"]
    lines += [f"| {name} | {rank:.2f} |" for name, rank in sorted(ranking.mean_ranks.items(), key=lambda x: x[1])]
    friedman = (
        f"χ² = {ranking.friedman_statistic:.3g}, p = {ranking.friedman_p:.2g}"
        if ranking.friedman_p is not None
        else f"— ({ranking.friedman_note})"
    )
    cd = f"{ranking.critical_difference:.2f}" if ranking.critical_difference is not None else "—"
    text = (
        f"### Mean ranks over {len(ranking.tasks)} task(s)\n\n" + "\n".join(lines) + f"\n\nFriedman: {friedman}. "
        f"Nemenyi critical difference at α = {ALPHA}: {cd} (mean ranks further apart than it differ; read it when "
        "Friedman rejects; with few tasks neither test can say much)."
    )
    excluded = [f"- {task} left out of the ranks ({why})." for task, why in ranking.excluded.items()]
    return text + ("\n\n" + "\n".join(excluded) if excluded else "")
