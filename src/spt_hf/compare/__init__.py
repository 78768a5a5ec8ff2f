"""`spt-hf compare`: the paper's comparison table as one resumable command.

    from spt_hf.compare import CompareSpec, run_compare
    run_compare(CompareSpec(tasks=["digits"], architectures=["transformer", "s4"], seeds=[0, 1, 2],
                            recipes_dir="cpu"))

The plan (`plan.py`) expands tasks × architectures × training set sizes × seeds into SPT, finetuning and scratch
phases; a launcher (`launchers.py`) runs them, each as its own `spt-hf` command; the report (`training/report.py`)
tables and plots what they wrote. A phase that finished with the same recipe is never run again, a killed one
resumes from its checkpoint, and a phase whose recipe changed since it finished is reported, not mixed in.
"""

import time
from dataclasses import dataclass, field

from ..training.arguments import load_recipe
from ..training.pipeline import in_phase_dir, phase_extra
from ..training.run_folder import PhaseLockedError, RecipeChangedError, phase_fingerprint, phase_status
from .launchers import run_local, run_ray, run_submitit
from .plan import CompareSpec, PhaseJob, build_plan, describe_plan


@dataclass
class CompareResult:
    plan: list[PhaseJob]
    states: dict[str, str] = field(default_factory=dict)  # job id -> done | skipped | changed | failed | blocked
    problems: dict[str, str] = field(default_factory=dict)
    report: str | None = None

    @property
    def ok(self) -> bool:
        return all(state in ("done", "skipped") for state in self.states.values())


def phase_state(job: PhaseJob) -> tuple[str, str]:
    """("finished", "") if the phase's folder holds a finished phase of this exact recipe; ("changed", why) if it
    holds one of another recipe (or a corrupted one); ("to run", "") otherwise (new, partial, or waiting)."""
    phase = "spt" if job.kind == "spt" else "finetune"
    source = job.overrides.get("model_name_or_path")
    if source is not None and not (job.run_dir / "spt" / "results.json").is_file():
        return "to run", ""  # its SPT checkpoint does not exist yet
    recipe = in_phase_dir(load_recipe(job.recipe, job.overrides, phase=phase), job.kind)
    extra = phase_extra(job.run_dir / "spt") if source is not None else {}
    sha, entries = phase_fingerprint(recipe, extra)
    try:
        status = phase_status(job.phase_dir, sha, entries, overwrite=False)
    except (RecipeChangedError, RuntimeError) as error:  # a changed recipe, a corrupted finished phase
        return "changed", str(error)
    return ("finished", "") if status.state == "finished" else ("to run", "")


class Progress:
    """One line per change: how many phases are done, running and queued, and the time left at this rate."""

    def __init__(self, total: int, parallel: int):
        self.total, self.parallel, self.start = total, parallel, time.monotonic()
        self.counts = {"done": 0, "running": 0, "failed": 0, "blocked": 0}
        self.durations: list[float] = []
        self.started: dict[str, float] = {}

    def __call__(self, job: PhaseJob, state: str, detail: str) -> None:
        if state == "running":
            if job.id in self.started:  # a Slurm job reported again (it never stopped)
                return
            self.started[job.id] = time.monotonic()
            self.counts["running"] += 1
        elif state in ("pending", "queued"):
            if job.id in self.started:  # requeued by Slurm: it waits again
                self.started.pop(job.id)
                self.counts["running"] -= 1
        elif state in ("done", "failed"):
            if job.id in self.started:
                self.durations.append(time.monotonic() - self.started.pop(job.id))
                self.counts["running"] -= 1
            self.counts[state] += 1
        elif state == "blocked":
            self.counts["blocked"] += 1
        ended = self.counts["done"] + self.counts["failed"] + self.counts["blocked"]
        queued = self.total - ended - self.counts["running"]
        eta = ""
        if self.durations and queued + self.counts["running"]:
            per_phase = sum(self.durations) / len(self.durations)
            eta = f", about {per_phase * (queued + self.counts['running']) / self.parallel / 60:.1f} min left"
        line = (
            f"compare: {ended}/{self.total} ended ({self.counts['done']} done, {self.counts['failed']} failed, "
            f"{self.counts['blocked']} blocked), {self.counts['running']} running, {queued} queued{eta} | "
            f"{job.id}: {state}{' (' + detail + ')' if detail else ''}"
        )
        print(line, flush=True)


def run_compare(spec: CompareSpec, dry_run: bool = False) -> CompareResult:
    """Plan, run what is missing, and write the report into `spec.output_dir`."""
    plan = build_plan(spec)
    result = CompareResult(plan)
    statuses = {}
    for job in plan:
        status, why = phase_state(job) if spec.accelerate_config is None else ("to run", "")
        statuses[job.id] = status
        if status == "changed":
            result.problems[job.id] = why
    print(describe_plan(plan, statuses), flush=True)
    if dry_run:
        return result
    result.states.update({job.id: "skipped" for job in plan if statuses[job.id] == "finished"})
    result.states.update({job_id: "changed" for job_id in result.problems})
    to_run = [job for job in plan if statuses[job.id] == "to run"]
    blocked_by_change = {job.id for job in to_run if job.depends_on in result.problems}
    result.states.update({job_id: "blocked" for job_id in blocked_by_change})
    to_run = [job for job in to_run if job.id not in blocked_by_change]
    print(f"compare: {len(to_run)} phase(s) to run, {len(plan) - len(to_run)} finished or left alone", flush=True)
    slurm = spec.launcher == "submitit" and spec.submitit.get("cluster", "slurm") == "slurm"
    parallel = spec.max_parallel if spec.launcher == "local" or slurm else max(1, len(to_run))
    progress = Progress(len(to_run), parallel)
    if to_run:
        result.states.update(_launch(spec, to_run, progress))
    for job in to_run:
        if result.states.get(job.id) == "failed":
            result.problems[job.id] = f"failed; its log: {job.log}"
    from ..training.report import report

    result.report = report([spec.output_dir])
    for job_id, why in result.problems.items():
        print(f"compare: {job_id}: {why}", flush=True)
    return result


def _launch(spec: CompareSpec, jobs: list[PhaseJob], progress: Progress) -> dict:
    from pathlib import Path

    if spec.launcher == "local":
        return run_local(jobs, progress, spec.max_parallel, spec.accelerate_config)
    if spec.launcher == "submitit":
        return run_submitit(jobs, progress, spec.submitit, Path(spec.output_dir), spec.max_parallel)
    return run_ray(jobs, progress, spec.ray)


__all__ = ["CompareResult", "CompareSpec", "PhaseJob", "PhaseLockedError", "build_plan", "run_compare"]
