"""compare's second stage (plan -> state -> launch -> report): the state of every phase of the plan, decided by
the phase's own function (`run_folder.phase_status`, with the number of processes the launcher gives each phase),
the plan table, and the progress lines while the phases run. The states are `PhaseState`'s."""

import time
from typing import TYPE_CHECKING

from ..recipes.loading import RECIPES_DIR
from ..training.run_folder import CHECKPOINT_KEY, PhaseState, PhaseStatus, RecipeChangedError, phase_status

if TYPE_CHECKING:  # (the later stages read the plan; they do not call back into it)
    from .plan import Plan

# How each outcome of a launch counts in the progress line.
ENDED = (PhaseState.FINISHED, PhaseState.FAILED, PhaseState.BLOCKED)
KEYS_SHOWN = 6  # differing keys named per group of changed phases in `changed_recipes`


def plan_states(plan: "Plan") -> dict[str, PhaseStatus]:
    """{job id: what its phase will find when it starts}: NEW, PARTIAL, WAITING (for its SPT phase, or for the search
    of a tuned comparison that still has to choose its values), FINISHED or CHANGED (the status says why). Reads
    only."""
    statuses = {}
    for job in plan.jobs:
        if job.awaits:  # its recipe is not known before the search: nothing to compare its folder with
            why = ValueError(f"its values come from the {job.awaits}")
            statuses[job.id] = PhaseStatus(PhaseState.WAITING, error=why)
        else:
            statuses[job.id] = phase_status(job.load_recipe(), job.phase, world_size=plan.launch.world_size)
    return statuses


def phase_finished(job, world_size: int) -> bool:
    """Whether a phase whose process ended well left its folder finished (`phase_status`, as the phase decides it
    when it starts): a launcher's FINISHED; an exit status of 0 alone is not enough."""
    return phase_status(job.load_recipe(), job.phase, world_size=world_size).state == PhaseState.FINISHED


def changed_recipes(plan: "Plan", statuses: dict[str, PhaseStatus]) -> str | None:
    """Why a run must not start, or None: the phases whose folder holds a phase of other recipe keys (other options,
    or an edited recipe file), in one short block naming per group of phases the keys that differ, old -> new, and
    the fix. A phase CHANGED only for its files (a finished phase's checksums, the SPT checkpoint it started from)
    is not counted: it is reported and left alone while the others run."""
    groups: dict[tuple, list] = {}  # ((key, old, new), ...) -> the phases (jobs) with those differences
    for job in plan.jobs:
        error = statuses[job.id].error
        if statuses[job.id].state != PhaseState.CHANGED or not isinstance(error, RecipeChangedError):
            continue
        changes = tuple((k, str(old), str(new)) for k, (old, new) in error.changes.items() if k != CHECKPOINT_KEY)
        if changes:
            groups.setdefault(changes, []).append(job)
    if not groups:
        return None
    lines = [f"{plan.output_dir} holds phases trained with other recipe keys; nothing was run or written:"]
    for changes, jobs in groups.items():
        pairs = ", ".join(dict.fromkeys(f"{job.task}/{job.architecture}" for job in jobs))
        names = f"{pairs} {', '.join(dict.fromkeys(job.phase for job in jobs))}"
        shown = "; ".join(f"{key} {old} → {new}" for key, old, new in changes[:KEYS_SHOWN])
        more = f"; and {len(changes) - KEYS_SHOWN} more" if len(changes) > KEYS_SHOWN else ""
        lines.append(f"  {names} ({len(jobs)} phase{'s' * (len(jobs) > 1)}): {shown}{more}")
    lines.append(
        "Use another --output_dir for these settings, or restore the options (or recipe files) it was run with; "
        "--dry_run shows every phase's state."
    )
    return "\n".join(lines)


def describe_plan(plan: "Plan", states: dict[str, PhaseStatus]) -> str:
    """The plan as a table (phase, kind, state, steps, recipe, folder, what it waits for: its SPT phase, the search
    of a tuned comparison) under the line saying where its recipes come from."""
    lines = [
        f"Recipes: {plan.recipes_source}.",
        "",
        "| phase | kind | state | budget | recipe | folder | after |",
        "|---|---|---|---|---|---|---|",
    ]
    for job in plan.jobs:
        state = states[job.id].state if job.id in states else PhaseState.NEW
        after = ", ".join(filter(None, (job.depends_on, job.awaits))) or "—"
        lines.append(
            f"| {job.id} | {job.kind} | {state} | {job.steps} | {_shown(job.recipe)} | {job.phase_dir} | {after} |"
        )
    if plan.missing_pairs:
        lines.append(f"\n{missing_pairs_line(plan.missing_pairs)}")
    return "\n".join(lines)


def missing_pairs_line(pairs: list[tuple[str, str]]) -> str:
    """The (task, architecture) pairs a `skip_missing_pairs` comparison left out, in one line."""
    return f"Not planned (no recipe pair): {', '.join(f'{task}/{arch}' for task, arch in pairs)}."


def _shown(recipe) -> str:
    try:
        return str(recipe.relative_to(RECIPES_DIR))
    except ValueError:
        return str(recipe)


class Progress:
    """One line per change: how many phases ended (finished, failed, blocked), run and are queued, and the time
    left at this rate. Called by the launchers as `progress(job, state, detail)`."""

    def __init__(self, total: int, parallel: int):
        self.total, self.parallel, self.start = total, parallel, time.monotonic()
        self.counts = {state: 0 for state in (PhaseState.RUNNING, *ENDED)}
        self.durations: list[float] = []
        self.started: dict[str, float] = {}

    def __call__(self, job, state: PhaseState, detail: str) -> None:
        if state == PhaseState.RUNNING:
            if job.id in self.started:  # a Slurm job reported again (it never stopped)
                return
            self.started[job.id] = time.monotonic()
            self.counts[PhaseState.RUNNING] += 1
        elif state == PhaseState.QUEUED and job.id in self.started:  # requeued by Slurm: it waits again
            self.started.pop(job.id)
            self.counts[PhaseState.RUNNING] -= 1
        elif state in ENDED:
            if job.id in self.started:
                self.durations.append(time.monotonic() - self.started.pop(job.id))
                self.counts[PhaseState.RUNNING] -= 1
            self.counts[state] += 1
        running = self.counts[PhaseState.RUNNING]
        ended = sum(self.counts[s] for s in ENDED)
        queued = self.total - ended - running
        eta = ""
        if self.durations and queued + running:
            per_phase = sum(self.durations) / len(self.durations)
            eta = f", about {per_phase * (queued + running) / self.parallel / 60:.1f} min left"
        counts = ", ".join(f"{self.counts[s]} {s}" for s in ENDED)
        line = (
            f"compare: {ended}/{self.total} ended ({counts}), {running} running, {queued} queued{eta} | "
            f"{job.id}: {state}{' (' + detail + ')' if detail else ''}"
        )
        print(line, flush=True)
