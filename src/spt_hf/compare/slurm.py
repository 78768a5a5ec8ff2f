"""Phases as Slurm jobs (through submitit), watched by their Slurm states until each ends one way or another.

- Each phase is one batch job running `SlurmPhase`: the phase's `spt-hf` command as a subprocess. A phase that fails
  makes its job fail (so `afterok` never fires on it). A finetuning job waits on its SPT job with `afterok` and
  `--kill-on-invalid-dep=yes`: Slurm cancels it when the SPT job fails, and compare reports it blocked.
- Time limits: `SlurmPhase` is checkpointable. submitit's signal (SIGUSR2, `signal_delay_s` before the limit) is
  forwarded to the phase, whose Trainer saves a checkpoint at the next step boundary and exits
  (`trainer.SaveOnSignal`); the job requeues itself with the same command and the phase resumes from that
  checkpoint. The partition's MaxTime caps `timeout_min` (one line says so); a limit too short for the signal to
  arrive after submitit's handler is installed is refused.
- The submitted job ids are recorded in `<output_dir>/.compare/jobs.json`; a second `spt-hf compare` re-attaches to
  the jobs still queued or running instead of submitting them again, and `--cancel` cancels them.
- At most `max_parallel` jobs are queued or running at once; a job-count limit of Slurm's makes compare wait for
  one of its jobs to end; any other refusal of sbatch is one line with Slurm's reason.
- Slurm accounting (sacct, through slurmdbd) is required: it is how a job that ended is told from one that never
  ran, and how submitit sees a job end that left no result.
"""

import contextlib
import importlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..checkpoints import write_json_atomic
from ..slurm_queries import (
    ENDED,
    NEVER_RUNS,
    SlurmError,
    cancel,
    check_accounting,
    first_error,
    job_alive,
    job_states,
    partition_limit,
)
from ..training.run_folder import PhaseState
from .processes import PhaseProcesses, job_command, machine_log, require_package, start_phase
from .state import phase_finished

JOBS_FILE = Path(".compare") / "jobs.json"
SUBMIT_LIMIT = re.compile(r"MaxSubmitJob|job submit limit|QOSMaxSubmitJob|AssocMaxSubmitJob", re.IGNORECASE)
MIN_RUN_BEFORE_SIGNAL_S = 60  # the job must run this long before submitit's signal (its handler is installed by then)
INTERRUPTED_EXIT = 75  # the phase saved a checkpoint on the signal and stopped (trainer.SaveOnSignal)
POLL_S = 2.0

Event = Callable[..., None]


class PhaseFailedError(RuntimeError):
    """Raised inside the Slurm job when the phase failed: the job fails, so `afterok` does not fire."""


# ----------------------------------------------------------------------------------------------------------------
# Inside the job
# ----------------------------------------------------------------------------------------------------------------

_running: dict = {}  # the phase subprocess of this job (not part of the pickled callable)


def _checkpointable_base():
    try:
        return importlib.import_module("submitit.helpers").Checkpointable
    except ImportError:  # the module is importable without submitit (tests, --cancel)
        return object


def job_note(job_id: str) -> str:
    """What follows the command line in a phase's log when Slurm job `job_id` runs it (`failure_detail` reads it)."""
    return f"# Slurm job {job_id}"


def _block_save_signal() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})


class SlurmPhase(_checkpointable_base()):
    """What a Slurm job runs: the phase's command, its output appended to its log. A non-zero exit raises (the job
    fails with it); on submitit's checkpoint signal the phase is told to save and stop, and the job is requeued with
    this same callable, so the phase resumes from the checkpoint it just saved."""

    def __init__(self, words: list[str], layout: PhaseProcesses, log: str, environment: dict | None = None):
        self.words, self.layout, self.environment = list(words), layout, dict(environment or {})
        self.log = str(log)

    def __call__(self) -> int:
        command, rank = job_command(self.words, self.layout)  # this machine's processes of the phase
        # The checkpoint signal is blocked in the phase until its handler is installed (it unblocks it): one that
        # arrives while the phase still imports waits for it instead of killing it unsaved. The phase is its own
        # process group, so that the signal reaches every process `accelerate launch` starts.
        process = start_phase(
            command,
            machine_log(self.log, rank),
            self.environment,
            f"  {job_note(os.environ.get('SLURM_JOB_ID', '?'))}",
            preexec_fn=_block_save_signal,
            process_group=0,
        )
        _running["process"] = process
        try:
            status = process.wait()
        finally:
            _running.pop("process", None)
        if status < 0:  # killed by a signal (the OOM killer, a kill): the phase could not say so itself
            with open(self.log, "a") as handle:
                handle.write(f"spt_hf: the phase was killed by {signal.Signals(-status).name} (exit status {status})\n")
        if status == 0:  # finished: a late checkpoint signal must not kill this process as it writes the result
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        if status == INTERRUPTED_EXIT:  # it saved and stopped on submitit's signal: the handler requeues this job
            time.sleep(60)  # (and exits from within this sleep)
        if status != 0:
            raise PhaseFailedError(f"the phase exited with status {status}; its log: {self.log}")
        return 0

    def checkpoint(self, *args, **kwargs):
        """Called by submitit on its signal: forward it to the phase, wait for the phase to save and stop, and
        requeue the same command (it resumes from the newest complete checkpoint)."""
        process = _running.get("process")
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGUSR2)  # (a launcher keeps it blocked; its phase processes save)
            # (if it does not stop in time, the requeued job resumes from the newest complete checkpoint anyway)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(10, int(os.environ.get("SPT_HF_SAVE_WAIT_S", "60"))))
        return super().checkpoint(*args, **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# The record of submitted jobs
# ----------------------------------------------------------------------------------------------------------------


class JobRecord:
    """`<output_dir>/.compare/jobs.json`: {phase id: {"job_id", "submitted", "folder"}}, written atomically."""

    def __init__(self, output_dir: str | Path):
        self.path = Path(output_dir) / JOBS_FILE
        self.jobs: dict = {}
        self.reload()

    def reload(self) -> "JobRecord":
        with contextlib.suppress(ValueError):
            self.jobs = json.loads(self.path.read_text()) if self.path.is_file() else {}
        return self

    @contextlib.contextmanager
    def locked(self):
        """Held while a driver checks the record and submits (one driver at a time per output folder)."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / "jobs.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def add(self, phase: str, job_id: str, folder: str) -> None:
        self.jobs[phase] = {"job_id": job_id, "submitted": time.strftime("%Y-%m-%d %H:%M:%S"), "folder": folder}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self.jobs)

    def alive(self) -> dict[str, str]:
        """{phase id: job id} of the recorded jobs Slurm still has queued or running."""
        ids = [entry["job_id"] for entry in self.jobs.values()]
        states = job_states(ids) if ids else {}
        return {
            phase: entry["job_id"]
            for phase, entry in self.jobs.items()
            if entry["job_id"] in states and states[entry["job_id"]][0] not in ENDED
        }


def cancel_recorded(output_dir: str | Path) -> list[str]:
    """Cancel the jobs of the comparison in `output_dir` that are still queued or running; their ids."""
    alive = JobRecord(output_dir).alive()
    cancel(list(alive.values()))
    return list(alive.values())


# ----------------------------------------------------------------------------------------------------------------
# Where a failed job's cause is
# ----------------------------------------------------------------------------------------------------------------

_NOISE = re.compile(
    r"^(\s|Traceback \(most recent call last\)|\$ |During handling|The above exception|\(--debug|\^|~|srun: |"
    r"submitit (INFO|WARNING|ERROR)|.*\d+%\|)"
)


def last_meaningful_line(path: Path) -> str | None:
    """The last line of `path` that says something (not a traceback frame, a command echo or a progress bar)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip() and not _NOISE.match(line):
            return line.strip()
    return None


def failure_detail(job, job_id: str, folder: str, state: str, reason: str, exit_code: str) -> str:
    """`<Slurm state>; <the file that holds the error>: <its last meaningful line>`."""
    what = f"Slurm job {job_id} {state}" + (f" ({reason})" if reason and reason != "None" else "")
    what += f", exit {exit_code}" if exit_code else ""
    err = Path(folder.replace("%j", job_id)) / f"{job_id}_0_log.err"
    phase_line = None
    log = Path(job.log)
    if log.is_file():
        text = log.read_text(errors="replace")
        if job_note(job_id) in text:  # the phase ran in this job: its own log holds the cause
            phase_line = last_meaningful_line(log)
    if phase_line:
        return f"{what}; {log}: {phase_line}"
    err_line = last_meaningful_line(err)
    if err_line:
        return f"{what}; {err}: {err_line}"
    return f"{what}; nothing was logged ({err} is empty or missing)"


# ----------------------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------------------


def slurm_parameters(options: dict) -> tuple[dict, int]:
    """submitit's parameters for these `submitit` options, after checking the partition and the time limit; and
    how many times a job may requeue itself (`max_num_timeout`, default 10)."""
    options = dict(options)
    options.pop("cluster", None)
    options.pop("folder", None)
    partition, max_minutes = partition_limit(options.get("partition"))
    timeout = options.pop("timeout_min", None)
    chosen = timeout is not None
    timeout = 24 * 60 if timeout is None else timeout
    if max_minutes is not None and timeout > max_minutes:
        print(
            f"compare: partition {partition} allows {max_minutes:g} min per job (MaxTime); each phase gets "
            f"timeout_min={int(max_minutes)}{'' if chosen else ' (instead of the default 24 h)'} and requeues "
            "itself from a checkpoint when it needs longer.",
            flush=True,
        )
        timeout = int(max_minutes)
    delay = int(options.pop("signal_delay_s", 90))
    if timeout * 60 < delay + MIN_RUN_BEFORE_SIGNAL_S:
        raise SlurmError(
            f"timeout_min={timeout} is too short: submitit signals a job {delay} s before its limit to save and "
            f"requeue it, and the job needs at least {MIN_RUN_BEFORE_SIGNAL_S} s before that; give at least "
            f"{-(-(delay + MIN_RUN_BEFORE_SIGNAL_S) // 60)} min (or a smaller signal_delay_s)."
        )
    parameters = {
        "timeout_min": timeout,
        "name": options.pop("name", "spt-hf"),
        "slurm_signal_delay_s": delay,
        "tasks_per_node": 1,  # one task per machine runs that machine's processes of the phase (`job_command`)
    }

    requeues = int(options.pop("max_num_timeout", 10))
    if options.get("partition") is None:
        options.pop("partition", None)
    for key in ("partition", "gpus_per_node", "cpus_per_task", "mem_gb", "account", "qos"):
        if key in options:
            parameters[f"slurm_{key}"] = options.pop(key)
    for key, value in options.items():
        parameters[key if key.startswith("slurm_") else f"slurm_{key}"] = value
    return parameters, requeues


def run_slurm(
    jobs, on_event: Event, options: dict, output_dir: Path, parallel: int, layout: PhaseProcesses | None = None
) -> dict:
    """Submit the phases (at most `parallel` queued or running at once), re-attaching to the jobs of an earlier call
    that are still queued or running; watch them until each ends. Returns {phase id: FINISHED | FAILED | BLOCKED}
    (`PhaseState`); a phase is FINISHED when its job COMPLETED and `phase_status` finds it finished."""
    submitit = require_package("submitit", "submitit")
    layout = layout or PhaseProcesses()
    world_size = layout.processes
    check_accounting()
    parameters, requeues = slurm_parameters(options)
    if layout.machines > 1:
        parameters["nodes"] = layout.machines
    folder = str(options.get("folder") or Path(output_dir).resolve() / "submitit" / "%j")
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=requeues)
    executor.update_parameters(**parameters)
    record = JobRecord(output_dir)
    by_id = {job.id: job for job in jobs}
    live: dict[str, str] = {}  # phase id -> Slurm job id
    seen: dict[str, str] = {}  # phase id -> the last state reported
    finished: dict[str, str] = {}
    attached = record.alive()
    for phase, job_id in attached.items():
        if phase in by_id:
            live[phase] = job_id
            on_event(by_id[phase], PhaseState.QUEUED, f"re-attached to Slurm job {job_id}")
    pending = [job for job in jobs if job.id not in live]
    waiting_for_limit = False

    def submit(job) -> str | None:
        with record.locked():  # a second driver on the same output folder attaches instead of submitting twice
            other = record.reload().jobs.get(job.id, {}).get("job_id")
            if other and other not in live.values() and job_alive(other):
                on_event(job, PhaseState.QUEUED, f"re-attached to Slurm job {other} (submitted by another compare)")
                return other
            return submit_unlocked(job)

    def submit_unlocked(job) -> str | None:
        nonlocal waiting_for_limit
        extra = {"kill_on_invalid_dep": "yes"}
        if job.depends_on in live:
            extra["dependency"] = f"afterok:{live[job.depends_on]}"
        executor.update_parameters(slurm_additional_parameters=extra)
        noise = io.StringIO()
        try:
            with contextlib.redirect_stderr(noise):
                handle = executor.submit(SlurmPhase(job.words, layout, str(job.log)))
        except Exception as error:  # sbatch refused
            why = first_error(str(error) or noise.getvalue())
            if SUBMIT_LIMIT.search(why) and live:
                if not waiting_for_limit:
                    print(f"compare: Slurm's job limit ({why}); waiting for one of {len(live)} job(s) to end")
                waiting_for_limit = True
                return None
            raise SlurmError(f"Slurm refused to queue {job.id}: {why}") from None
        waiting_for_limit = False
        record.add(job.id, str(handle.job_id), folder)
        return str(handle.job_id)

    def end(phase: str, state: str, detail: str) -> None:
        finished[phase] = state
        live.pop(phase, None)
        on_event(by_id[phase], state, detail)

    interrupted = []

    def on_term(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    try:
        while pending or live:
            for job in list(pending):
                dependency = job.depends_on
                if dependency in finished and finished[dependency] != PhaseState.FINISHED:
                    pending.remove(job)
                    end(job.id, PhaseState.BLOCKED, f"{dependency} did not finish")
                    continue
                if dependency in by_id and dependency not in finished and dependency not in live:
                    continue  # its dependency is not queued yet
                if len(live) >= parallel:
                    break
                job_id = submit(job)
                if job_id is None:
                    break
                pending.remove(job)
                live[job.id] = job_id
                on_event(job, PhaseState.QUEUED, f"Slurm job {job_id}")
            states = job_states(list(live.values()))
            for phase, job_id in list(live.items()):
                state, reason, exit_code = states.get(job_id, ("UNKNOWN", "", ""))
                job = by_id[phase]
                if state == "COMPLETED":
                    if phase_finished(job, world_size):
                        end(phase, PhaseState.FINISHED, "")
                    else:
                        why = f"Slurm job {job_id} COMPLETED but {job.phase_dir} holds no finished phase"
                        end(phase, PhaseState.FAILED, why)
                elif state in ENDED:
                    dependency = job.depends_on
                    if phase_finished(
                        job, world_size
                    ):  # the phase folder decides: it finished (a late signal failed the job)
                        end(phase, PhaseState.FINISHED, f"Slurm job {job_id} ended {state} after the phase finished")
                    elif state == "CANCELLED" and finished.get(dependency) == PhaseState.FINISHED:
                        # Slurm cancelled it for a dependency that failed as a job but finished as a phase
                        live.pop(phase)
                        seen.pop(phase, None)
                        pending.insert(0, job)
                    elif state == "CANCELLED" and dependency in finished:
                        end(phase, PhaseState.BLOCKED, f"{dependency} did not finish; Slurm cancelled job {job_id}")
                    else:
                        end(phase, PhaseState.FAILED, failure_detail(job, job_id, folder, state, reason, exit_code))
                elif state == "PENDING" and reason in NEVER_RUNS:
                    dependency = job.depends_on
                    cancel([job_id])
                    if reason == "DependencyNeverSatisfied" and dependency in by_id:
                        end(phase, PhaseState.BLOCKED, f"{dependency} did not finish; cancelled Slurm job {job_id}")
                    else:
                        end(phase, PhaseState.FAILED, f"Slurm will not run job {job_id} ({reason}); cancelled it")
                else:
                    label = PhaseState.RUNNING if state in ("RUNNING", "COMPLETING") else PhaseState.QUEUED
                    shown = f"{label}:{reason}" if label == PhaseState.QUEUED else label
                    if seen.get(phase) != shown:
                        seen[phase] = shown
                        why = f"Slurm job {job_id} {state}" + (f", {reason}" if reason and reason != "None" else "")
                        on_event(job, label, why)
            # a phase whose dependency failed: Slurm cancels it (kill-on-invalid-dep); do not wait for that
            for phase in [p for p in live if by_id[p].depends_on in finished]:
                if finished[by_id[phase].depends_on] != PhaseState.FINISHED:
                    cancel([live[phase]])
                    end(phase, PhaseState.BLOCKED, f"{by_id[phase].depends_on} did not finish; cancelled Slurm job")
            if pending or live:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        ids = list(live.values())
        how = "SIGTERM" if interrupted else "Ctrl-C"
        if ids:
            print(
                f"compare: stopped by {how}; {len(ids)} Slurm job(s) keep running ({', '.join(ids)}): the same "
                f"command again re-attaches to them; add --cancel to cancel them (or: scancel {' '.join(ids)}).",
                flush=True,
            )
        else:
            print(f"compare: stopped by {how}; no Slurm job of it is queued or running.", flush=True)
        raise SystemExit(143 if interrupted else 130) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return finished


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("spt_hf.compare.slurm is used by `spt-hf compare --launcher submitit`")
