"""compare's second stage (plan -> state -> launch -> report): the state of every phase of the plan, decided by
the phase's own function (`run_folder.phase_status`, with the number of processes the launcher gives each phase),
the plan table, and the progress lines while the phases run. The states are `PhaseState`'s."""

import json
import time
from typing import TYPE_CHECKING

from ..phases import RESULTS_FILE
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
    left. Called by the launchers as `progress(job, state, detail)`.

    The time left expects each phase still to end to take as long as the finished phases of its task and
    architecture took, of its own phase first (their `budget.wall_time_s`, which counts a resumed phase whole;
    `finished` gives those of earlier runs), less the time it has run, over the phases run at a time. Phases whose
    task and architecture have no finished phase yet are not timed and the line says how many: another task's
    lengths or another architecture's cost per step says little about theirs."""

    def __init__(self, jobs: list, parallel: int, finished: list = ()):
        self.jobs, self.total, self.parallel = {job.id: job for job in jobs}, len(jobs), parallel
        self.counts = {state: 0 for state in (PhaseState.RUNNING, *ENDED)}
        self.started: dict[str, float] = {}
        self.ended: set[str] = set()
        self.took: dict[tuple[str, str, str], list[float]] = {}
        for job in finished:
            self._learn(job)

    def _learn(self, job) -> None:
        try:
            seconds = json.loads((job.phase_dir / RESULTS_FILE).read_text())["budget"]["wall_time_s"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        if isinstance(seconds, int | float):
            self.took.setdefault((job.task, job.architecture, job.phase), []).append(seconds)

    def _expected(self, job) -> float | None:
        same = self.took.get((job.task, job.architecture, job.phase))
        if not same:
            same = [
                s
                for (task, arch, _), took in self.took.items()
                if (task, arch) == (job.task, job.architecture)
                for s in took
            ]
        return sum(same) / len(same) if same else None

    def _time_left(self) -> str:
        now, seconds, untimed = time.monotonic(), 0.0, 0
        for job_id, job in self.jobs.items():
            if job_id in self.ended:
                continue
            expected = self._expected(job)
            if expected is None:
                untimed += 1
                continue
            seconds += max(expected - (now - self.started.get(job_id, now)), 0.0)
        if untimed == len(self.jobs) - len(self.ended):
            return ""
        more = f", {untimed} phase(s) not timed yet" if untimed else ""
        return f", about {seconds / self.parallel / 60:.1f} min left{more}"

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
            if self.started.pop(job.id, None) is not None:
                self.counts[PhaseState.RUNNING] -= 1
            self.counts[state] += 1
            self.ended.add(job.id)
            if state == PhaseState.FINISHED:
                self._learn(job)
        running = self.counts[PhaseState.RUNNING]
        ended = sum(self.counts[s] for s in ENDED)
        queued = self.total - ended - running
        eta = self._time_left() if queued + running else ""
        counts = ", ".join(f"{self.counts[s]} {s}" for s in ENDED)
        line = (
            f"compare: {ended}/{self.total} ended ({counts}), {running} running, {queued} queued{eta} | "
            f"{job.id}: {state}{' (' + detail + ')' if detail else ''}"
        )
        print(line, flush=True)
