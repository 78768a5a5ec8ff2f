"""`spt-hf report`: the comparison that finished runs support, as tables, per-seed files and plots.

Finetuning results (`finetune/` and `scratch/` phases) are grouped into rows: one row per task, architecture and
recipe; runs whose recipes differ in nothing but the seed are the seeds of one row, and runs that differ in anything
else (a learning rate, a model size, the SPT recipe they started from, the step budget) are separate rows whose
"variant" names the keys that differ. A row holds the baseline runs and the SPT + finetune runs, each with its budget:
with equal budgets both sides have the same `max_steps`; compute-tied ones share `total_steps` (scratch gets all of
it, SPT and finetuning their shares), so the sides differ in `max_steps` and are still one row.

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
"""

import csv
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..phases import BASELINE_KINDS, FINETUNE_PHASE, FINETUNING_PHASES, StartKind, recorded_start_kind
from .results import RESULTS_FILE

# Recipe entries that differ between the runs of one row without making them different experiments.
NOT_A_VARIANT = ("training.seed", "model.model_name_or_path", "init.weights_sha256", "world_size")
BUDGET_KEYS = ("training.max_steps", "spt.total_steps", "spt.spt_fraction")  # one entry instead: budget.steps
SSM_TYPES = ("spt_s4", "spt_dlr")


@dataclass
class Run:
    """One finetuning run: its seed, test (and validation) metric, budget, learning curve and folder."""

    kind: str  # what it started from (`StartKind`): scratch or text-pretrained (the baseline), or SPT
    seed: int | None
    metric: str
    test: float | None
    validation: float | None
    steps: int
    spt_steps: int
    path: str
    curve: list[tuple[int, float]] = field(default_factory=list)
    flops: float | None = None  # the phase's training FLOPs (results.json `compute`); SPT side: SPT + finetuning
    wall_s: float | None = None  # the phase's wall time; SPT side: SPT + finetuning


@dataclass
class Row:
    task: str
    architecture: str
    variant: str
    metric: str
    runs: list[Run] = field(default_factory=list)

    def side(self, kind: str) -> list[Run]:
        """The runs of one kind with a test metric; "baseline": those without SPT (scratch or text-pretrained)."""
        wanted = BASELINE_KINDS if kind == "baseline" else (kind,)
        return [run for run in self.runs if run.kind in wanted and run.test is not None]

    @property
    def baseline_kind(self) -> str:
        return "+".join(k for k in BASELINE_KINDS if any(r.kind == k for r in self.runs)) or "—"


def find_results(paths: list[str | Path]) -> list[dict]:
    """Every phase results.json under the given folders (run summaries skipped). A folder that does not exist is an
    error; an unreadable file is reported and skipped."""
    missing = [str(p) for p in paths if not Path(p).is_dir()]
    if missing:
        raise FileNotFoundError(f"No such run folder(s): {missing}; `spt-hf report` reads folders written by runs.")
    found = []
    for root in paths:
        for path in sorted(Path(root).rglob(RESULTS_FILE)):
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as error:
                print(f"spt_hf: skipping {path}: {error}")
                continue
            if "phase" in data:
                data["_path"] = str(path)
                found.append(data)
    return found


def architecture_name(result: dict) -> str:
    """The model type, and the backbone's for `spt_backbone`: `spt_s4`, `spt_backbone (mamba)`."""
    config = result.get("model_config", {})
    name = result.get("model_type", "?")
    backbone = (config.get("backbone_config") or {}).get("model_type") if isinstance(config, dict) else None
    return f"{name} ({backbone})" if backbone else name


def test_metric(result: dict) -> tuple[str, float | None, float | None]:
    """(name, test value, validation value) of the model a finetuning phase selected (accuracy or R²)."""
    metrics = result.get("metrics", {})
    for name in ("accuracy", "r2"):
        test = metrics.get("test", {}).get(f"test_{name}")
        if test is not None:
            return name, test, metrics.get("validation", {}).get(f"eval_{name}")
    return "metric", None, None


def _fingerprint_entries(result: dict | None) -> dict:
    return dict(((result or {}).get("recipe_fingerprint") or {}).get("entries") or {})


def _entries(result: dict, spt: dict | None = None) -> dict:
    """The recipe entries that make a row, with the step budget as one entry, `budget.steps`: the total of a
    compute-tied pair (`total_steps`, from the phase's recipe or from its SPT phase's), otherwise `max_steps`. So a
    scratch run of 1200 steps and SPT 600 + finetuning 600 steps of the same total are one row, while runs with
    other budgets are not. Each side's own steps are columns of the table."""
    entries = _fingerprint_entries(result)
    total = entries.get("spt.total_steps")
    if total is None:
        total = _fingerprint_entries(spt).get("spt.total_steps")
    budget = total if total is not None else entries.get("training.max_steps")
    entries = {k: v for k, v in entries.items() if k not in NOT_A_VARIANT and k not in BUDGET_KEYS}
    return {**entries, "budget.steps": budget}


def _spt_results(result: dict) -> dict | None:
    source = (result.get("init") or {}).get("model_name_or_path")
    path = Path(source or "", RESULTS_FILE)
    return json.loads(path.read_text()) if source and path.is_file() else None


def _summed(result: dict, spt: dict | None, value) -> float | None:
    """A cost of the phase, plus its SPT phase's when it started from one; None when a phase did not record it."""
    values = [value(r) for r in (result, spt) if r is not None]
    return None if any(v is None for v in values) else float(sum(values))


def comparison_rows(results: list[dict]) -> list[Row]:
    """Group finetuning results into rows (see the module docstring)."""
    groups: dict[tuple, dict] = {}
    for result in results:
        if result.get("phase") not in FINETUNING_PHASES:
            continue
        name, test, validation = test_metric(result)
        spt = _spt_results(result) if result["phase"] == FINETUNE_PHASE else None
        entries = _entries(result, spt)
        key = (result["task"], architecture_name(result), json.dumps(entries, sort_keys=True, default=str))
        spt_key = json.dumps(_entries(spt), sort_keys=True, default=str) if spt else None
        group = groups.setdefault(key, {"metric": name, "entries": entries, "spt": defaultdict(list)})
        run = Run(
            kind=recorded_start_kind(result),
            seed=(result.get("recipe") or {}).get("training", {}).get("seed"),
            metric=name,
            test=test,
            validation=validation,
            steps=result["budget"]["steps"],
            spt_steps=spt["budget"]["steps"] if spt else 0,
            path=str(Path(result["_path"]).parent),
            curve=learning_curve(result, f"eval_{name}"),
            flops=_summed(result, spt, lambda r: (r.get("compute") or {}).get("flops")),
            wall_s=_summed(result, spt, lambda r: (r.get("budget") or {}).get("wall_time_s")),
        )
        group["spt"][spt_key].append(run)
    return _split_variants(groups)


def _split_variants(groups: dict) -> list[Row]:
    """One row per group and SPT recipe; `variant` names what differs from the other rows of its task and
    architecture."""
    rows: list[tuple[Row, dict]] = []
    for (task, arch, _), group in groups.items():
        scratch = group["spt"].pop(None, [])
        spt_variants = group["spt"] or {None: []}
        for spt_key, spt_runs in spt_variants.items():
            entries = dict(group["entries"])
            if spt_key is not None:  # the SPT recipe's own settings, where they are not the finetuning recipe's
                spt_entries = json.loads(spt_key).items()
                entries.update({f"SPT {k}": v for k, v in spt_entries if entries.get(k, object()) != v})
            rows.append((Row(task, arch, "", group["metric"], scratch + spt_runs), entries))
    by_arch = defaultdict(list)
    for row, entries in rows:
        by_arch[(row.task, row.architecture)].append((row, entries))
    for siblings in by_arch.values():
        if len(siblings) > 1:
            keys = sorted(set().union(*(e.keys() for _, e in siblings)), key=lambda k: (k.startswith("SPT "), k))
            varying = [k for k in keys if len({json.dumps(e.get(k), default=str) for _, e in siblings}) > 1]
            for row, entries in siblings:
                row.variant = ", ".join(f"{_short(k)}={entries.get(k)}" for k in varying[:4])
    return sorted((row for row, _ in rows), key=lambda r: (r.task, r.architecture, r.variant))


def _short(key: str) -> str:
    """`training.learning_rate` -> `learning_rate`; `SPT spt.mask_rate` -> `SPT mask_rate`."""
    prefix, _, name = key.rpartition(" ")
    return f"{prefix} {name.rsplit('.', 1)[-1]}".strip()


def learning_curve(result: dict, key: str) -> list[tuple[int, float]]:
    """(step, validation metric) as trained: the evaluations during training, not the selected checkpoint's."""
    return [(e["step"], e[key]) for e in result.get("learning_curve", []) if key in e]


# ----------------------------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------------------------


def mean_spread(values: list[float], scale: float = 100.0) -> str:
    if not values:
        return "—"
    values = np.asarray(values) * scale
    spread = f" ± {values.std(ddof=1):.1f}" if len(values) > 1 else ""
    return f"{values.mean():.1f}{spread} (n={len(values)})"


def _scale(metric: str) -> float:
    return 100.0 if metric == "accuracy" else 1.0


def _budget(runs: list[Run], spt: bool) -> str:
    if not runs:
        return "—"
    steps = sorted({r.steps for r in runs})
    text = "/".join(map(str, steps))
    if spt:
        spt_steps = sorted({r.spt_steps for r in runs})
        text = f"{'/'.join(map(str, spt_steps))} + {text}"
    return text


def _cost(runs: list[Run], spt: bool) -> str:
    """Steps · FLOPs · wall time of one side (means over its runs; the SPT side sums both phases)."""
    if not runs:
        return "—"
    flops = [r.flops for r in runs]
    walls = [r.wall_s for r in runs]
    flop_text = "— FLOPs" if None in flops else f"{np.mean(flops):.3g} FLOPs".replace("e+", "e")
    return f"{_budget(runs, spt)} steps · {flop_text} · {_duration(None if None in walls else np.mean(walls))}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "— s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


# ----------------------------------------------------------------------------------------------------------------
# Is the difference real? Paired differences over seeds
# ----------------------------------------------------------------------------------------------------------------

MIN_PAIRS = 3  # below this, no interval and no test: "n too small"
ALPHA = 0.05


@dataclass
class Paired:
    """a − b over the seeds both sides have: the mean difference, its 95% t-interval, the paired t-test's and the
    exact sign-flip test's two-sided p-values; `unpaired` lists the seeds only one side has (left out)."""

    n: int
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    p_t: float | None = None
    p_sign: float | None = None
    unpaired: dict = field(default_factory=dict)

    @property
    def significant(self) -> bool:
        return self.p_t is not None and self.p_t < ALPHA


def by_seed(runs: list[Run], scale: float) -> dict[int, float]:
    """Test metric per seed (runs of one seed on one side, e.g. the same scratch run in two folders, averaged)."""
    values = defaultdict(list)
    for run in runs:
        if run.seed is not None and run.test is not None:
            values[run.seed].append(run.test * scale)
    return {seed: float(np.mean(v)) for seed, v in values.items()}


def paired_difference(a: dict[int, float], b: dict[int, float]) -> Paired:
    """Paired comparison of two sides given per seed (see `Paired`); same seed, same training subset, data order and
    SPT masks (docs/compare.md)."""
    seeds = sorted(set(a) & set(b))
    unpaired = {side: sorted(set(x) - set(seeds)) for side, x in (("a", a), ("b", b)) if set(x) - set(seeds)}
    result = Paired(n=len(seeds), unpaired=unpaired)
    d = np.array([a[s] - b[s] for s in seeds])  # (n,)
    result.mean = float(d.mean()) if seeds else None
    if result.n < MIN_PAIRS:
        return result
    from scipy import stats

    se = float(d.std(ddof=1)) / np.sqrt(len(d))
    if se == 0:  # every seed differs by the same amount: no spread to test against
        result.low = result.high = result.mean
        result.p_t = 0.0 if result.mean != 0 else 1.0
    else:
        half = float(stats.t.ppf(1 - ALPHA / 2, len(d) - 1)) * se
        result.low, result.high = result.mean - half, result.mean + half
        result.p_t = float(2 * stats.t.sf(abs(result.mean) / se, len(d) - 1))
    result.p_sign = sign_flip_p(d)
    return result


def sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided sign-flip (paired permutation) test of mean(d) = 0: the share of the 2^n sign assignments
    whose |mean| is at least the observed one. Its smallest value is 2/2^n (0.25 for 3 seeds, 0.0625 for 5)."""
    n = len(d)
    signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # (2^n, n) of ±1
    means = np.abs(signs @ d) / n  # (2^n,)
    observed = abs(d.mean())
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def _interval(paired: Paired) -> str:
    if paired.low is None:
        return f"n too small (n={paired.n})"
    return f"[{paired.low:+.1f}, {paired.high:+.1f}] (n={paired.n})"


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2g}"  # two significant digits: 0.25, 0.031, 0.00093


def _difference(paired: Paired, unpaired_mean: float, scale: float) -> str:
    """The mean paired difference (the centre of its interval), or, without a common seed, the difference of the
    sides' means; `*` when significant."""
    value = paired.mean if paired.mean is not None else unpaired_mean * scale
    return f"{value:+.1f}" + (" *" if paired.significant else "")


def markdown_table(rows: list[Row]) -> str:
    """Per task and architecture: scratch, SPT + finetune, the gain with its paired 95% interval and tests over
    seeds, and what each side cost."""
    lines = [
        "| task | architecture | variant | metric | baseline | baseline result | SPT + finetune | SPT − baseline "
        "| 95% CI (paired) | p (paired t) | p (sign-flip) | baseline cost | SPT + finetune cost |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        scale = _scale(row.metric)
        scratch, spt = [r.test for r in row.side("baseline")], [r.test for r in row.side("spt")]
        paired = paired_difference(by_seed(row.side("spt"), scale), by_seed(row.side("baseline"), scale))
        gain = _difference(paired, np.mean(spt) - np.mean(scratch), scale) if scratch and spt else "—"
        lines.append(
            f"| {row.task} | {row.architecture} | {row.variant or '—'} | {row.metric} | {row.baseline_kind}"
            f" | {mean_spread(scratch, scale)}"
            f" | {mean_spread(spt, scale)} | {gain} | {_interval(paired)} | {_p(paired.p_t)} | {_p(paired.p_sign)}"
            f" | {_cost(row.side('baseline'), False)} | {_cost(row.side('spt'), True)} |"
        )
    return "\n".join(lines)


def unpaired_notes(rows: list[Row]) -> str:
    """The seeds each paired comparison of the main table left out (one side has them, the other not)."""
    notes = []
    for row in rows:
        scale = _scale(row.metric)
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
        scale = _scale(row.metric)
        means[(label, row.task)] = {
            kind: float(np.mean([r.test for r in row.side(kind)]) * scale)
            for kind in ("baseline", "spt")
            if row.side(kind)
        }
        means[(label, row.task)]["_n"] = {kind: len(row.side(kind)) for kind in ("baseline", "spt")}
        means[(label, row.task)]["_baseline_kind"] = row.baseline_kind
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
            text = " → ".join(f"{cell[k]:.1f}" if k in cell else "—" for k in ("baseline", "spt"))
            if "spt" in cell and best[task] is not None and cell["spt"] == best[task]:
                text = f"**{text}**"
            if cell.get("_baseline_kind", StartKind.SCRATCH) not in (StartKind.SCRATCH, "—"):
                text = f"{text} ({cell['_baseline_kind']} baseline)"
            cells.append(text)
        complete = {k: v for k, v in averages.items() if len(v) == len(tasks)}
        average = " → ".join(f"{np.mean(complete[k]):.1f}" if k in complete else "—" for k in ("baseline", "spt"))
        lines.append(f"| {arch} | " + " | ".join(cells) + f" | {average} |")
    return "\n".join(lines)


TRANSFORMER_TYPE = "spt_rotary_transformer"
KIND_NAMES = {
    StartKind.SCRATCH: "scratch",
    StartKind.TEXT_PRETRAINED: "text-pretrained",
    StartKind.SPT: "SPT + finetune",
}


def transformer_ssm_gap(rows: list[Row]) -> str:
    """Per task, the best SSM minus the Transformer, before and after SPT (in metric points); then every SSM row
    against every Transformer row of the same task and variant, paired over seeds (`gap_table`)."""
    means = _cell_means(rows)
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
                parts.append(f"{label} {max(values) - transformer[kind]:+.1f}")
        if parts:
            lines.append(f"- {task}: best SSM − Transformer: " + ", ".join(parts))
    table = gap_table(rows)
    if not lines and not table:
        return "- (needs a Transformer and an SSM row on the same task)"
    return "\n".join(lines) + ("\n\n" + table if table else "")


def gap_table(rows: list[Row]) -> str:
    """SSM − Transformer per pair of rows: every SSM row (`SSM_TYPES`) against every Transformer row of the same task
    and variant, for each kind of run, paired over seeds."""
    lines = []
    for ssm in (r for r in rows if r.architecture in SSM_TYPES):
        for transformer in (r for r in rows if r.architecture == TRANSFORMER_TYPE):
            if (transformer.task, transformer.variant) != (ssm.task, ssm.variant) or ssm.metric != transformer.metric:
                continue
            scale = _scale(ssm.metric)
            for kind, name in KIND_NAMES.items():
                a, b = by_seed(ssm.side(kind), scale), by_seed(transformer.side(kind), scale)
                if not a or not b:
                    continue
                paired = paired_difference(a, b)
                gap = _difference(paired, np.mean(list(a.values())) - np.mean(list(b.values())), 1.0)
                lines.append(
                    f"| {ssm.task} | {ssm.variant or '—'} | {ssm.architecture} | {name} | {gap}"
                    f" | {_interval(paired)} | {_p(paired.p_t)} | {_p(paired.p_sign)} |"
                )
    if not lines:
        return ""
    header = [
        "| task | variant | SSM | kind | SSM − Transformer | 95% CI (paired) | p (paired t) | p (sign-flip) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(header + lines)


# ----------------------------------------------------------------------------------------------------------------
# Files and plots
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
            "flops",
            "wall_s",
            "path",
        ]
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    return [out / "runs.csv", out / "runs.json"]


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
                    mean * _scale(row.metric),
                    style,
                    color=colour,
                    marker=marker,
                    markersize=3,
                    label=f"{label}, {text}",
                )
                ax.fill_between(steps, low * _scale(row.metric), high * _scale(row.metric), color=colour, alpha=0.15)
        metric = next(r.metric for r in rows if r.task == task)
        ax.set_title(f"{task}: validation {metric} (mean over seeds, band min-max)", fontsize=10)
        ax.set_xlabel("optimiser steps (SPT steps included on the SPT side)")
        ax.set_ylabel(f"validation {metric}" + (" (%)" if metric == "accuracy" else ""))
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = out / "learning_curves.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_test_metrics(rows: list[Row], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 2), 4.2))
    for index, row in enumerate(rows):
        for offset, kind, colour, text in (
            (-0.15, "baseline", "tab:grey", "baseline (scratch or text-pretrained)"),
            (0.15, "spt", "tab:blue", "SPT + finetune"),
        ):
            values = [r.test * _scale(row.metric) for r in row.side(kind)]
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
    fig.tight_layout()
    path = out / "test_metrics.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


SIGNIFICANCE_NOTE = (
    "Differences are paired by seed (the same seed draws the same training subset, data order and SPT masks; the "
    "validation and test splits are the same for every seed), over the seeds both sides have. 95% CI: the t-interval "
    "of the mean paired difference; p (paired t): the two-sided paired t-test; p (sign-flip): the exact two-sided "
    f"sign-flip permutation test (it cannot go below 2/2^n). `*`: p (paired t) < {ALPHA}. Below {MIN_PAIRS} pairs: "
    "n too small. Cost: optimiser steps · training FLOPs (one real step counted, times the steps) · wall time of "
    "each side, mean over its runs; SPT + finetune sums both phases."
)


def report(
    paths: list[str | Path], out_dir: str | Path | None = None, missing_pairs: list[tuple[str, str]] | None = None
) -> str:
    """Write report.md, the per-seed files and the plots for the runs under `paths`; return the Markdown text."""
    results = find_results(paths)
    rows = comparison_rows(results)
    out = Path(out_dir or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    text = (
        f"# spt_hf report\n\n{len(results)} phase result(s) from {', '.join(map(str, paths))}; test metric of the "
        "model each run selected on validation (accuracy in %, or R²); steps are optimiser steps, SPT steps + "
        "finetuning steps on the SPT side.\n\n"
        f"{markdown_table(rows)}\n\n{SIGNIFICANCE_NOTE}\n{unpaired_notes(rows)}\n\n"
        f"## Architectures × tasks (baseline → SPT + finetune)\n\n{paper_table(rows)}\n\n"
        f"## Transformer–SSM gap\n\n{transformer_ssm_gap(rows)}\n"
    )
    if missing_pairs:
        listed = ", ".join(f"{task}/{arch}" for task, arch in missing_pairs)
        text += f"\n## Not in this comparison\n\nNo recipe pair, so not planned: {listed}.\n"
    files = write_per_seed(rows, out)
    if rows:
        files += [plot_learning_curves(rows, out), plot_test_metrics(rows, out)]
        text += "".join(f"\n![{p.stem}]({p.name})" for p in files if p.suffix == ".png")
    (out / "report.md").write_text(text + "\n")
    print(f"spt_hf: report written to {out / 'report.md'} (with {', '.join(p.name for p in files)})", flush=True)
    return text
