"""The rows of `spt-hf report`: finished finetuning results (`finetune/` and `scratch/` phases, read from their
results.json files) grouped into rows, one per task, architecture and recipe; runs whose recipes differ in nothing
but the seed are the seeds of one row, and runs that differ in anything else (a learning rate, a model size, the SPT
recipe they started from, the step budget) are separate rows whose "variant" names the keys that differ. A row holds
the baseline runs and the SPT + finetune runs, each with its budget: with equal budgets both sides have the same
`max_steps`; compute-tied ones share `total_steps` (scratch gets all of it, SPT and finetuning their shares), so the
sides differ in `max_steps` and are still one row.
"""

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..phases import (
    BASELINE_KINDS,
    FINETUNE_PHASE,
    FINETUNING_PHASES,
    RESULTS_FILE,
    SPT_PHASE,
    StartKind,
    recorded_start_kind,
)
from ..tuning import TRIAL_FILE

# Recipe entries that differ between the runs of one row without making them different experiments.
NOT_A_VARIANT = ("training.seed", "model.model_name_or_path", "init.weights_sha256", "world_size")
BUDGET_KEYS = ("training.max_steps", "spt.total_steps", "spt.spt_fraction")  # one entry instead: budget.steps
# How the report names each kind of run (`StartKind`): the baseline's two, and finetuning after SPT.
KIND_NAMES = {
    StartKind.SCRATCH: "scratch",
    StartKind.TEXT_PRETRAINED: "text-pretrained",
    StartKind.SPT: "SPT + finetune",
}


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
    spt_exported: int | None = None  # the step of the SPT checkpoint finetuning started from, when not SPT's last
    wall_s: float | None = None  # the phase's wall time; SPT side: SPT + finetuning
    wall_partial: bool = False  # a phase's wall time counts from a resumed step (`budget.wall_time_counted_from_step`)
    cap: int | None = None  # the phase's step budget when early stopping made it a cap (`max_steps`), else `steps`
    spt_cap: int | None = None  # likewise of the SPT phase (0 without one)


def step_cap(result: dict) -> int:
    """A phase's step budget: its cap under early stopping (results.json `budget.max_steps`), else the steps it ran
    (results written before early stopping record no cap)."""
    budget = result["budget"]
    return budget["max_steps"] if budget.get("early_stopping_patience") else budget["steps"]


@dataclass
class Row:
    """One row of the report: the runs of one task, architecture and recipe (`variant` names what differs from the
    task and architecture's other rows), both sides of the comparison."""

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
    """Every phase results.json under the given folders (run summaries and `--tune` trials skipped). A folder that
    does not exist is an error; an unreadable file is reported and skipped."""
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
            # a trial's phase of `compare --tune` is the search, shown in its own section, not a row
            if "phase" in data and not (path.parent.parent / TRIAL_FILE).is_file():
                data["_path"] = str(path)
                found.append(data)
    return found


def duration_text(seconds: float | None) -> str:
    """A wall time as the report writes it: `42.0 s`, `3.5 min`, `2.25 h` (`— s` when not recorded)."""
    if seconds is None:
        return "— s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


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


def _entries(result: dict, spt: dict | None = None, tuned: frozenset = frozenset()) -> dict:
    """The recipe entries that make a row, with the step budget as one entry, `budget.steps`: the total of a
    compute-tied pair (`total_steps`, from the phase's recipe or from its SPT phase's), otherwise `max_steps`. So a
    scratch run of 1200 steps and SPT 600 + finetuning 600 steps of the same total are one row, while runs with
    other budgets are not. Each side's own steps are columns of the table. The `tuned` recipe keys (those a
    `compare --tune` search chose, each arm its own values) make no row either."""
    entries = _fingerprint_entries(result)
    total = entries.get("spt.total_steps")
    if total is None:
        total = _fingerprint_entries(spt).get("spt.total_steps")
    budget = total if total is not None else entries.get("training.max_steps")
    entries = {k: v for k, v in entries.items() if k not in NOT_A_VARIANT and k not in BUDGET_KEYS}
    entries = {k: v for k, v in entries.items() if k.rsplit(".", 1)[-1] not in tuned}
    return {**entries, "budget.steps": budget}


def _spt_results(result: dict) -> dict | None:
    """The results of the SPT phase a finetuning phase started from: the sibling `spt/` phase of its run folder when
    that phase is the one it recorded (so a comparison folder that was moved, or fetched from the Hub, still pairs
    them), else the folder its `init` names."""
    source = (result.get("init") or {}).get("model_name_or_path")
    if not source:
        return None
    sibling = Path(result["_path"]).parent.parent / SPT_PHASE / RESULTS_FILE
    if sibling.is_file():
        spt = json.loads(sibling.read_text())
        if spt.get("output_dir") == source:
            return spt
    path = Path(source, RESULTS_FILE)
    return json.loads(path.read_text()) if path.is_file() else None


def exported_step(result: dict) -> int:
    """The step of the model a phase exported: its `exported_step`, or for results from before that entry the best
    step when it selected the best checkpoint, else its last."""
    metrics, steps = result.get("metrics") or {}, result["budget"]["steps"]
    if metrics.get("exported_step") is not None:
        return metrics["exported_step"]
    return (metrics.get("best_step") or steps) if metrics.get("selected") == "best" else steps


def exported_before_last(result: dict | None) -> int | None:
    """The exported step of a phase whose exported model is not its last step's (None otherwise, or no phase)."""
    if result is None:
        return None
    step = exported_step(result)
    return step if step != result["budget"]["steps"] else None


def _summed(result: dict, spt: dict | None, value) -> float | None:
    """A cost of the phase, plus its SPT phase's when it started from one; None when a phase did not record it."""
    values = [value(r) for r in (result, spt) if r is not None]
    return None if any(v is None for v in values) else float(sum(values))


def comparison_rows(results: list[dict], tuned: set[str] | frozenset = frozenset()) -> list[Row]:
    """Group finetuning results into rows (see the module docstring); `tuned`: the recipe keys a `compare --tune`
    search chose (not a variant: each arm trains with its own chosen values)."""
    groups: dict[tuple, dict] = {}
    for result in results:
        if result.get("phase") not in FINETUNING_PHASES:
            continue
        name, test, validation = test_metric(result)
        spt = _spt_results(result) if result["phase"] == FINETUNE_PHASE else None
        entries = _entries(result, spt, frozenset(tuned))
        key = (
            result.get("task_name") or result["task"],
            architecture_name(result),
            json.dumps(entries, sort_keys=True, default=str),
        )
        spt_key = json.dumps(_entries(spt, tuned=frozenset(tuned)), sort_keys=True, default=str) if spt else None
        group = groups.setdefault(key, {"metric": name, "entries": entries, "spt": defaultdict(list)})
        run = Run(
            kind=recorded_start_kind(result),
            seed=(result.get("recipe") or {}).get("training", {}).get("seed"),
            metric=name,
            test=test,
            validation=validation,
            steps=result["budget"]["steps"],
            spt_steps=spt["budget"]["steps"] if spt else 0,
            spt_exported=exported_before_last(spt),
            cap=step_cap(result),
            spt_cap=step_cap(spt) if spt else 0,
            path=str(Path(result["_path"]).parent),
            curve=learning_curve(result, f"eval_{name}"),
            flops=_summed(result, spt, lambda r: (r.get("compute") or {}).get("flops")),
            wall_s=_summed(result, spt, lambda r: (r.get("budget") or {}).get("wall_time_s")),
            wall_partial=any((r.get("budget") or {}).get("wall_time_counted_from_step") for r in (result, spt) if r),
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


def metric_scale(metric: str) -> float:
    """The factor a metric is shown with: accuracy in %, R² as it is."""
    return 100.0 if metric == "accuracy" else 1.0


def metric_digits(metric: str) -> int:
    """The decimals a metric is shown with: accuracy (in percentage points, `metric_scale`) one, R² three (0.081 →
    0.226, not 0.1 → 0.2)."""
    return 1 if metric_scale(metric) == 100.0 else 3
