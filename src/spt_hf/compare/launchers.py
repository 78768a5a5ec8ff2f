"""Running the phases of a plan on existing engines: local subprocesses (a thread pool), Slurm jobs through
submitit, or Ray tasks. Each phase is the same `spt-hf` command whatever runs it; a phase starts once the phase it
waits for has succeeded, and the phases that wait for a failed one do not start.

`on_event(job, state, detail)` reports the states (`PhaseState`) QUEUED, RUNNING, FINISHED, FAILED and BLOCKED as
they happen.
"""

import os
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

from ..training.run_folder import PhaseState

if TYPE_CHECKING:  # (the later stages read the plan; they do not call back into it)
    from .plan import PhaseJob

Event = Callable[["PhaseJob", str, str], None]


def execute_phase(command: list[str], log: str, environment: dict | None = None) -> int:
    """Run one phase's command, its output into `log`; the exit status. (Also what submitit and Ray run.)"""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TQDM_DISABLE": "1", **(environment or {})}
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env).returncode


def _ready(job: "PhaseJob", finished: dict[str, str], planned: set[str]) -> str | None:
    """ "run", "blocked" or None (still waiting) for a job whose dependency has or has not finished. A dependency
    outside the plan (a phase that finished in an earlier invocation) counts as finished."""
    if job.depends_on is None or job.depends_on not in planned or finished.get(job.depends_on) == PhaseState.FINISHED:
        return "run"
    if job.depends_on in finished:
        return "blocked"
    return None


def run_graph(jobs: list["PhaseJob"], start: Callable[["PhaseJob"], Future], parallel: int, on_event: Event) -> dict:
    """Start each job once its dependency succeeded (at most `parallel` at once); `start` returns a future of the
    exit status. Returns {job id: FINISHED | FAILED | BLOCKED}."""
    pending, running, finished = list(jobs), {}, {}
    planned = {job.id for job in jobs}
    while pending or running:
        for job in list(pending):
            decision = _ready(job, finished, planned)
            if decision == "blocked":
                pending.remove(job)
                finished[job.id] = PhaseState.BLOCKED
                on_event(job, PhaseState.BLOCKED, f"{job.depends_on} did not finish")
            elif decision == "run" and len(running) < parallel:
                pending.remove(job)
                running[start(job)] = job
                on_event(job, PhaseState.RUNNING, "")
        if not running:
            if pending:  # nothing runs and nothing can start: a dependency cycle, which build_plan never makes
                raise RuntimeError(f"compare: no phase can start; waiting: {', '.join(job.id for job in pending)}")
            break
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for future in done:
            job = running.pop(future)
            try:
                status = future.result()
            except Exception as error:  # a job that could not even run
                status, detail = 1, f"{type(error).__name__}: {error}"
            else:
                detail = "" if status == 0 else f"exit status {status}; see {job.log}"
            finished[job.id] = PhaseState.FINISHED if status == 0 else PhaseState.FAILED
            on_event(job, finished[job.id], detail)
    return finished


def run_local(jobs, on_event: Event, parallel: int = 1, accelerate_config: str | None = None) -> dict:
    """Subprocesses, `parallel` at once, sharing the CPU cores (OMP_NUM_THREADS, unless set); on a machine with GPUs
    each running phase gets its own GPU (CUDA_VISIBLE_DEVICES), unless every phase runs under `accelerate launch` on
    all of them."""
    gpus = _gpu_ids() if accelerate_config is None else []
    if gpus:
        parallel = min(parallel, len(gpus))
    free, lock = list(gpus), threading.Lock()

    threads = (
        {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // parallel))}
    )

    def run(job: "PhaseJob") -> int:
        with lock:
            gpu = free.pop(0) if free else None
        try:
            env = {**threads, **({} if gpu is None else {"CUDA_VISIBLE_DEVICES": str(gpu)})}
            return execute_phase(job.command(accelerate_config), str(job.log), env)
        finally:
            if gpu is not None:
                with lock:
                    free.append(gpu)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return run_graph(jobs, lambda job: pool.submit(run, job), parallel, on_event)


def _gpu_ids() -> list[int]:
    try:
        import torch
    except ImportError:
        return []
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _require(module: str, launcher: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f'`--launcher {launcher}` needs the `{module}` package: pip install "spt_hf[cluster]" (pinned versions: '
            'pip install -c constraints.txt "spt_hf[cluster]").'
        ) from None


def run_submitit(jobs, on_event: Event, options: dict, output_dir: Path) -> dict:
    """One submitit job per phase. On Slurm every job is submitted at once, each finetuning job with an
    `afterok` dependency on its SPT job; the `local` and `debug` clusters have no dependencies, so a finetuning job
    is submitted when its SPT job has succeeded."""
    submitit = _require("submitit", "submitit")
    options = dict(options)
    cluster = options.pop("cluster", "slurm")
    folder = options.pop("folder", str(output_dir / "submitit" / "%j"))
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    parameters = {"timeout_min": options.pop("timeout_min", 24 * 60), "name": "spt-hf"}
    if cluster == "slurm":
        for key in ("partition", "gpus_per_node", "cpus_per_task", "mem_gb", "account", "qos"):
            if key in options:
                parameters[f"slurm_{key}"] = options.pop(key)
    executor.update_parameters(**parameters, **options)
    if cluster == "slurm":
        return _submit_slurm(executor, jobs, on_event)
    pool = ThreadPoolExecutor(max_workers=max(1, len(jobs)))

    def start(job: "PhaseJob") -> Future:
        submitted = executor.submit(execute_phase, job.command(), str(job.log))
        return pool.submit(submitted.result)

    try:
        return run_graph(jobs, start, parallel=len(jobs), on_event=on_event)
    finally:
        pool.shutdown()


def _submit_slurm(executor, jobs: list["PhaseJob"], on_event: Event) -> dict:
    handles = {}
    for job in jobs:  # the plan lists each SPT phase before its finetuning
        if job.depends_on in handles:  # a dependency outside the plan finished earlier
            executor.update_parameters(
                slurm_additional_parameters={"dependency": f"afterok:{handles[job.depends_on].job_id}"}
            )
        else:
            executor.update_parameters(slurm_additional_parameters={})
        handles[job.id] = executor.submit(execute_phase, job.command(), str(job.log))
        on_event(job, PhaseState.QUEUED, f"Slurm job {handles[job.id].job_id}")
    finished = {}
    while len(finished) < len(jobs):
        for job in jobs:
            handle = handles[job.id]
            if job.id in finished or not handle.done():
                continue
            try:
                status = handle.result()
            except Exception as error:
                status, detail = 1, str(error).splitlines()[0] if str(error) else type(error).__name__
            else:
                detail = "" if status == 0 else f"exit status {status}; see {job.log}"
            finished[job.id] = PhaseState.FINISHED if status == 0 else PhaseState.FAILED
            on_event(job, finished[job.id], detail)
        time.sleep(5)
    return finished


def run_ray(jobs, on_event: Event, options: dict) -> dict:
    """One Ray task per phase with its resource request; a finetuning task takes its SPT task's result as an
    argument, so Ray runs it after that one (and it is skipped if that one failed)."""
    ray = _require("ray", "ray")
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=options.get("address"), include_dashboard=False, log_to_driver=False)
    resources = {"num_cpus": options.get("num_cpus", 1), "num_gpus": options.get("num_gpus", 0)}
    remote = ray.remote(**resources)(_ray_phase)
    refs, by_ref = {}, {}
    for job in jobs:
        dependency = refs.get(job.depends_on) if job.depends_on else None
        refs[job.id] = remote.remote(job.command(), str(job.log), dependency)
        by_ref[refs[job.id]] = job
        on_event(job, PhaseState.QUEUED, "Ray task")
    finished, waiting = {}, list(refs.values())
    try:
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            job = by_ref[ready[0]]
            status = ray.get(ready[0])
            finished[job.id] = {0: PhaseState.FINISHED, -1: PhaseState.BLOCKED}.get(status, PhaseState.FAILED)
            detail = {PhaseState.FINISHED: "", PhaseState.BLOCKED: f"{job.depends_on} did not finish"}.get(
                finished[job.id], f"see {job.log}"
            )
            on_event(job, finished[job.id], detail)
    finally:
        if started_here:
            ray.shutdown()
    return finished


def _ray_phase(command: list[str], log: str, dependency: int | None) -> int:
    """A Ray task: -1 (blocked) if the phase it waited for did not succeed, else the phase's exit status."""
    if dependency not in (None, 0):
        return -1
    return execute_phase(command, log)
