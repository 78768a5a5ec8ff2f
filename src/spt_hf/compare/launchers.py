"""Running the phases of a plan on existing engines: local subprocesses (a thread pool), Slurm jobs through
submitit, or Ray tasks. Each phase is the same `spt-hf` command whatever runs it; a phase starts once the phase it
waits for has succeeded, and the phases that wait for a failed one do not start.

`on_event(job, state, detail)` reports the states (`PhaseState`) QUEUED, RUNNING, FINISHED, FAILED and BLOCKED as
they happen.
"""

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

from ..phases import raise_if_interrupted, sigterm_interrupts
from ..training.run_folder import PhaseState
from ..tuning import TUNE_STORAGE
from .processes import PhaseProcesses, execute_phase, require_package, run_in_job
from .state import phase_finished

if TYPE_CHECKING:  # (the later stages read the plan; they do not call back into it)
    from .plan import PhaseJob

Event = Callable[["PhaseJob", str, str], None]


def _ready(job: "PhaseJob", finished: dict[str, str], planned: set[str]) -> str | None:
    """ "run", "blocked" or None (still waiting) for a job whose dependency has or has not finished. A dependency
    outside the plan (a phase that finished in an earlier invocation) counts as finished."""
    if job.depends_on is None or job.depends_on not in planned or finished.get(job.depends_on) == PhaseState.FINISHED:
        return "run"
    if job.depends_on in finished:
        return "blocked"
    return None


def run_graph(
    jobs: list["PhaseJob"], start: Callable[["PhaseJob"], Future], parallel: int, on_event: Event, world_size: int
) -> dict:
    """Start each job once its dependency succeeded (at most `parallel` at once); `start` returns a future of the
    exit status. Returns {job id: FINISHED | FAILED | BLOCKED}: FINISHED when the phase exited 0 and its folder
    holds the finished phase (`outcome`)."""
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
        raise_if_interrupted()  # (a Ctrl-C that Python dropped in a finalizer while this waited)
        for future in done:
            job = running.pop(future)
            try:
                status = future.result()
            except Exception as error:  # a job that could not even run
                status, detail = 1, f"{type(error).__name__}: {error}"
                finished[job.id] = PhaseState.FAILED
            else:
                finished[job.id], detail = outcome(job, status, world_size)
            on_event(job, finished[job.id], detail)
    return finished


def outcome(job: "PhaseJob", status: int, world_size: int) -> tuple[str, str]:
    """FINISHED or FAILED, and the detail to report, for a phase whose process ended with `status`."""
    if status != 0:
        return PhaseState.FAILED, f"exit status {status}; see {job.log}"
    if not phase_finished(job, world_size):
        return PhaseState.FAILED, f"exit status 0, but {job.phase_dir} holds no finished phase; see {job.log}"
    return PhaseState.FINISHED, ""


def run_local(jobs, on_event: Event, parallel: int = 1, layout: PhaseProcesses | None = None) -> dict:
    """Subprocesses, `parallel` at once, sharing the CPU cores (OMP_NUM_THREADS and OMP_WAIT_POLICY=PASSIVE, unless
    set); on a machine with GPUs each running phase gets its own GPUs (CUDA_VISIBLE_DEVICES): one, or one per process
    of `layout` (`accelerate launch` with one process per GPU)."""
    layout = layout or PhaseProcesses()
    gpus = _gpu_ids()
    if gpus and len(gpus) < layout.processes:
        raise ValueError(
            f"Each phase runs {layout.processes} processes, one per GPU, but this machine has {len(gpus)} GPUs; "
            "set num_processes in the accelerate config to at most that."
        )
    if gpus:
        parallel = min(parallel, len(gpus) // layout.processes)
    free, lock = list(gpus), threading.Lock()
    cores = max(1, (os.cpu_count() or 1) // (parallel * layout.processes))
    threads = {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": str(cores)}
    # Idle OpenMP threads sleep instead of spinning: when other work shares the cores, spinning threads wait for a
    # descheduled sibling at every parallel region (benchmarks/bench_threads.py: ~14x slower steps on 2 busy cores).
    threads |= {} if "OMP_WAIT_POLICY" in os.environ else {"OMP_WAIT_POLICY": "PASSIVE"}

    running = RunningPhases()

    def run(job: "PhaseJob") -> int:
        with lock:
            mine = [free.pop(0) for _ in range(layout.processes)] if free else []
        try:
            env = {**threads, **({"CUDA_VISIBLE_DEVICES": ",".join(map(str, mine))} if mine else {})}
            return execute_phase(layout.command(job.words), str(job.log), env, on_start=running.started(job.id))
        finally:
            running.ended(job.id)
            with lock:
                free.extend(mine)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        try:
            with sigterm_interrupts():
                return run_graph(jobs, lambda job: pool.submit(run, job), parallel, on_event, layout.processes)
        except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGINT or SIGTERM to compare alone: no phase may go on unseen
            stopped = running.interrupt()
            what = f": {', '.join(stopped)}" if stopped else ""
            raise type(interrupt)(f"stopped {len(stopped)} running phase(s){what}") from None


class RunningPhases:
    """The processes of the phases the local launcher runs, so that an interrupt of compare reaches each of them
    (a terminal's Ctrl-C reaches them already; `kill -INT` of compare alone would not): SIGINT, which a phase answers
    by stopping with the line that the same command resumes it (`cli.main`), then SIGKILL if it has not stopped
    within `STOP_S`. A phase started while they stop is interrupted at once."""

    STOP_S = 60.0

    def __init__(self):
        self.processes: dict[str, subprocess.Popen] = {}
        self.lock, self.stopping = threading.Lock(), False

    def started(self, job_id: str) -> Callable[[subprocess.Popen], None]:
        def record(process: subprocess.Popen) -> None:
            with self.lock:
                self.processes[job_id] = process
                if self.stopping:
                    process.send_signal(signal.SIGINT)

        return record

    def ended(self, job_id: str) -> None:
        with self.lock:
            self.processes.pop(job_id, None)

    def interrupt(self) -> list[str]:
        """Interrupt every running phase and wait until each has stopped; the ids of those that were running."""
        with self.lock:
            self.stopping, processes = True, dict(self.processes)
        for process in processes.values():
            with contextlib.suppress(ProcessLookupError):  # (one that ended meanwhile)
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + self.STOP_S
        for process in processes.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return sorted(processes)


def _gpu_ids() -> list[int]:
    try:
        import torch
    except ImportError:
        return []
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def run_submitit(
    jobs, on_event: Event, options: dict, output_dir: Path, parallel: int = 1, layout: PhaseProcesses | None = None
) -> dict:
    """One submitit job per phase, with one task per machine of `layout` running its processes. On Slurm
    (`slurm.run_slurm`) at most `parallel` jobs are queued or running, each finetuning job with an `afterok`
    dependency on its SPT job, watched by their Slurm states; the `local` and `debug` clusters have no dependencies,
    so a finetuning job is submitted when its SPT job has succeeded."""
    submitit = require_package("submitit", "submitit")
    layout = layout or PhaseProcesses()
    options = {k: v for k, v in options.items() if k not in ("nodes", "processes_per_node")}
    cluster = options.pop("cluster", "slurm")
    if cluster == "slurm":
        from .slurm import run_slurm

        return run_slurm(jobs, on_event, options, output_dir, parallel, layout)
    folder = options.pop("folder", str(output_dir / "submitit" / "%j"))
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    parameters = {"timeout_min": options.pop("timeout_min", 24 * 60), "name": "spt-hf", "tasks_per_node": 1}
    executor.update_parameters(**parameters, **options)
    pool = ThreadPoolExecutor(max_workers=max(1, len(jobs)))

    def start(job: "PhaseJob") -> Future:
        submitted = executor.submit(run_in_job, job.words, layout, str(job.log))
        return pool.submit(submitted.result)

    try:
        return run_graph(jobs, start, len(jobs), on_event, layout.processes)
    finally:
        pool.shutdown()


class PhaseKilled(RuntimeError):
    """A phase's process was killed by a signal (the OOM killer, a user, its machine going down): Ray runs the
    task again (`max_retries`), and the phase resumes from its newest complete checkpoint."""


def run_ray(jobs, on_event: Event, options: dict, layout: PhaseProcesses | None = None) -> dict:
    """One Ray task per phase with its resource request; a finetuning task takes its SPT task's result as an
    argument, so Ray runs it after that one (and it is skipped if that one failed). A task whose worker died or whose
    phase was killed is run again, up to `max_retries` times (default 2), then reported failed. A task finding its
    phase run by a live process (another compare of the same folder) waits for it, then finds the phase finished."""
    ray = require_package("ray", "ray")
    layout = layout or PhaseProcesses()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=options.get("address"), include_dashboard=False, log_to_driver=False)
    resources = {"num_cpus": options.get("num_cpus", 1), "num_gpus": options.get("num_gpus", 0)}
    retries = int(options.get("max_retries", 2))
    if TUNE_STORAGE in os.environ:  # a tuning trial's phase reports to its study (a worker may run anywhere)
        resources["runtime_env"] = {"env_vars": {TUNE_STORAGE: os.environ[TUNE_STORAGE]}}
    remote = ray.remote(**resources, max_retries=retries, retry_exceptions=[PhaseKilled])(_ray_phase)
    refs, by_ref, cwd = {}, {}, os.getcwd()
    for job in jobs:
        dependency = refs.get(job.depends_on) if job.depends_on else None
        log, folder = str(Path(job.log).absolute()), str(Path(job.phase_dir).absolute())
        refs[job.id] = remote.remote(job.words, layout, log, folder, cwd, dependency)
        by_ref[refs[job.id]] = job
        on_event(job, PhaseState.QUEUED, "Ray task")
    finished, waiting = {}, list(refs.values())
    try:
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            job = by_ref[ready[0]]
            status, detail = _ray_outcome(ray, ready[0], job, refs, retries)
            if status == -1:
                finished[job.id] = PhaseState.BLOCKED
            elif detail:
                finished[job.id] = PhaseState.FAILED
            else:
                finished[job.id], detail = outcome(job, status, layout.processes)
            on_event(job, finished[job.id], detail)
    finally:
        if started_here:
            ray.shutdown()
    return finished


def _ray_outcome(ray, ref, job: "PhaseJob", refs: dict, retries: int) -> tuple[int, str]:
    """The exit status of a finished Ray task (-1: blocked) and the detail to report with it."""
    try:
        status = ray.get(ref)
    except Exception as error:  # the task failed after its retries, or the task it depends on did
        if job.depends_on in refs and _ray_failed(ray, refs[job.depends_on]):
            return -1, f"{job.depends_on} did not finish"
        line = next((text for text in str(error).splitlines() if text.strip()), type(error).__name__)
        return 1, f"{type(error).__name__} after {retries} retries: {line[:200]}; see {job.log}"
    if status == -1:
        return -1, f"{job.depends_on} did not finish"
    return status, "" if status == 0 else f"exit status {status}; see {job.log}"


def _ray_failed(ray, ref) -> bool:
    try:
        return ray.get(ref) != 0
    except Exception:
        return True


def _ray_phase(words: list[str], layout: PhaseProcesses, log: str, folder: str, cwd: str, dependency) -> int:
    """A Ray task: -1 (blocked) if the phase it waited for did not succeed, else the phase's exit status; a phase
    killed by a signal raises PhaseKilled (Ray retries it)."""
    if dependency not in (None, 0):
        return -1
    with _phase_turn(Path(folder), log):
        status = execute_phase(layout.command(words), log, cwd=cwd)
    if status < 0:
        raise PhaseKilled(f"the phase was killed by signal {-status}; see {log}")
    return status


@contextlib.contextmanager
def _phase_turn(folder: Path, log: str):
    """This task's turn to run the phase in `folder`: after any other task running it on this machine (another
    compare of the same folder; an flock on `.<phase>.launch` beside it, released by the kernel when a worker dies),
    and after a phase process of an earlier task that is still running or being stopped (the phase folder's lock).
    The phase then finds itself finished, or resumes."""
    import fcntl

    from ..training.run_folder import live_lock_owner

    folder.parent.mkdir(parents=True, exist_ok=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.launch", "a") as turn:
        try:
            fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _note(log, f"compare: waiting for another task running {folder} (a second compare of this folder?)")
            fcntl.flock(turn, fcntl.LOCK_EX)
        owner = live_lock_owner(folder)
        if owner is not None:
            _note(log, f"compare: waiting for process {owner['pid']}, which runs {folder} (since {owner['since']})")
        while live_lock_owner(folder) is not None:
            time.sleep(1)
        yield


def _note(log: str, line: str) -> None:
    with open(log, "a") as handle:
        handle.write(line + "\n")
