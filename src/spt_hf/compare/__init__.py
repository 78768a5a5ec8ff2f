"""`spt-hf compare`: the paper's comparison table as one resumable command.

    from spt_hf.compare import CompareSpec, run_compare
    run_compare(CompareSpec(tasks=["digits"], architectures=["transformer", "s4"], seeds=[0, 1, 2],
                            recipes_dir="cpu"))

It reads in one direction, (search ->) plan -> state -> launch -> report: with `--tune`, the search (`tune.py`) runs
first and records the values it chose in `tuning.json`; the plan (`plan.py`) expands tasks × architectures ×
training set sizes × seeds into SPT, finetuning and baseline phases (a tuned comparison's with the chosen values);
their state (`state.py`) is what each phase
itself will decide when it starts (`training/run_folder.py: phase_status`); a launcher (`launchers.py`) runs the
phases still to run, each as its own `spt-hf` command; the report (`report/comparison.py`) tables and plots what they
wrote. A phase that finished with the same recipe is never run again, a killed one resumes from its checkpoint, a
rerun whose phases' recipe keys differ from those their folders hold is refused before anything is written (naming
the keys), and a finished phase whose files changed is reported, not mixed in.
"""

import dataclasses
from dataclasses import dataclass, field

from ..training.run_folder import TO_RUN, PhaseLockedError, PhaseState, RecipeChangedError
from .launchers import run_local, run_ray, run_submitit
from .plan import CompareSpec, Launch, PhaseJob, Plan, build_plan
from .published import extend_published, record_settings
from .state import Progress, changed_recipes, describe_plan, plan_states
from .tune import describe_search, run_tuning, searches


@dataclass
class CompareResult:
    """The outcome of `run_compare`: the plan, each phase's state (`PhaseState`: FINISHED, CHANGED, FAILED or
    BLOCKED after a run; after a dry run, what each phase would find), the phases this call ran, why a phase is not
    finished, and the report."""

    plan: list[PhaseJob]
    states: dict[str, PhaseState] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    report: str | None = None

    @property
    def ok(self) -> bool:
        return all(state == PhaseState.FINISHED for state in self.states.values())


def run_compare(spec: CompareSpec, dry_run: bool = False) -> CompareResult:
    """(Search,) plan, run what is missing, and write the report into `spec.output_dir`."""
    if spec.extends is not None:  # (before anything runs: an unfair extension is refused)
        extend_published(spec)
    if spec.tune is not None:
        _search(spec, dry_run)
    plan = build_plan(spec)
    waiting = next((job for job in plan.jobs if job.awaits), None)
    if waiting is not None and not dry_run:  # (never train the recipe's values in place of the search's)
        raise RuntimeError(
            f"compare: {waiting.id} still waits for the {waiting.awaits} after the search stage; rerun the same "
            "command to resume the search."
        )
    statuses = plan_states(plan)
    refusal = None if dry_run else changed_recipes(plan, statuses)
    if refusal is not None:  # before the plan table, a launch or the report: a rerun with other keys writes nothing
        raise RecipeChangedError(refusal)
    result = CompareResult(plan.jobs, {job_id: status.state for job_id, status in statuses.items()})
    result.problems.update({i: s.why for i, s in statuses.items() if s.state == PhaseState.CHANGED})
    print(describe_plan(plan, statuses), flush=True)
    if dry_run:
        return result
    record_settings(spec)
    to_run = [job for job in plan.jobs if result.states[job.id] in TO_RUN]
    for job in to_run:
        if job.depends_on in result.problems:  # it would start from a phase of another recipe
            result.states[job.id] = PhaseState.BLOCKED
            result.problems[job.id] = f"blocked: {job.depends_on} changed"
    to_run = [job for job in to_run if result.states[job.id] != PhaseState.BLOCKED]
    print(f"compare: {len(to_run)} phase(s) to run, {len(plan.jobs) - len(to_run)} finished or left alone", flush=True)
    if to_run:
        launch = plan.launch
        slurm = launch.launcher == "submitit" and launch.submitit.get("cluster", "slurm") == "slurm"
        throttled = launch.launcher == "local" or slurm  # (at most max_parallel jobs queued or running on Slurm)
        finished = [job for job in plan.jobs if result.states[job.id] == PhaseState.FINISHED]
        progress = Progress(to_run, launch.max_parallel if throttled else len(to_run), finished)
        result.states.update(_launch(plan, to_run, progress))
        result.ran = [job.id for job in to_run]
    for job in to_run:
        if result.states[job.id] == PhaseState.FAILED:
            result.problems[job.id] = f"failed; its log: {job.log}"
    from ..report.comparison import report

    result.report = report([plan.output_dir], missing_pairs=plan.missing_pairs)
    for job_id, why in result.problems.items():
        print(f"compare: {job_id}: {why}", flush=True)
    return result


def _search(spec: CompareSpec, dry_run: bool) -> None:
    """The search stage of `--tune` (compare/tune.py), before the plan: its trials copy the seeded phases of the
    comparison planned without its values, and it records the values it chose in `tuning.json`, which the plan then
    reads. A dry run says how far the search is and runs nothing."""
    plan = build_plan(dataclasses.replace(spec, tune=None))
    if dry_run:
        print(describe_search(spec, searches(spec, plan.jobs)), flush=True)
        return

    def launch(jobs: list[PhaseJob]) -> dict:
        return _launch(plan, jobs, Progress(jobs, min(len(jobs), plan.launch.max_parallel)))

    run_tuning(spec, plan, launch)


def _launch(plan: Plan, jobs: list[PhaseJob], progress: Progress) -> dict:
    launch = plan.launch
    if launch.launcher == "local":
        return run_local(jobs, progress, launch.max_parallel, launch.processes)
    if launch.launcher == "submitit":
        return run_submitit(jobs, progress, launch.submitit, plan.output_dir, launch.max_parallel, launch.processes)
    return run_ray(jobs, progress, launch.ray, launch.processes)


__all__ = [
    "CompareResult",
    "CompareSpec",
    "Launch",
    "PhaseJob",
    "PhaseLockedError",
    "PhaseState",
    "Plan",
    "build_plan",
    "run_compare",
]
