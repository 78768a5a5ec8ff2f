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

What happens to each phase is one pure function, `decide`: from what Slurm says of its job (state, reason, exit
code), where the phase it waits for stands and whether its folder holds the finished phase, to the next step (submit,
hold, wait, end finished / failed / blocked, or submit again); tests/compare/test_slurm_decision.py tables it.
`run_slurm` sets up submitit, and `SlurmDriver` submits and polls, acting on `decide`. The questions put to Slurm
(job states, partitions, accounting, scancel) are `slurm_queries`'.
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
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..checkpoints import write_json_atomic
from ..phases import Terminated, raise_if_interrupted, sigterm_interrupts
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
    """What follows the command line in a phase's log when Slurm job `job_id` runs it (`failure_cause` looks for it)."""
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


def failure_cause(job, job_id: str, folder: str) -> str:
    """`<the file that holds the error>: <its last meaningful line>` for Slurm job `job_id` of `job` that failed:
    the phase's log when the phase ran in this job, else submitit's error file of the job (in `folder`)."""
    err = Path(folder.replace("%j", job_id)) / f"{job_id}_0_log.err"
    log = Path(job.log)
    if log.is_file() and job_note(job_id) in log.read_text(errors="replace"):  # the phase ran in this job
        phase_line = last_meaningful_line(log)
        if phase_line:
            return f"{log}: {phase_line}"
    err_line = last_meaningful_line(err)
    if err_line:
        return f"{err}: {err_line}"
    return f"nothing was logged ({err} is empty or missing)"


# ----------------------------------------------------------------------------------------------------------------
# The decision: what happens to one phase, from what Slurm says of its job
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobState:
    """What Slurm says of one job (`job_states`); a job neither squeue nor sacct knows is UNKNOWN."""

    job_id: str
    state: str = "UNKNOWN"
    reason: str = ""
    exit_code: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED


class Dependency(StrEnum):
    """Where the phase a job waits for (`PhaseJob.depends_on`) stands in this driver."""

    NONE = "none"  # no dependency, or one this driver does not run (it finished before)
    UNSUBMITTED = "unsubmitted"  # one of this driver's phases, not queued yet
    LIVE = "live"  # queued or running on Slurm
    FINISHED = "finished"  # ended, its phase finished
    NOT_FINISHED = "not finished"  # ended failed or blocked


class Step(StrEnum):
    """What the driver does next with one phase."""

    SUBMIT = "submit"  # not submitted: submit it (`afterok` on its dependency if that one is live)
    HOLD = "hold"  # not submitted: its dependency is not queued yet
    WAIT = "wait"  # queued or running: report `state` (QUEUED or RUNNING) when `shown` changes
    END = "end"  # the phase ended: `state` is FINISHED, FAILED or BLOCKED, `detail` says why
    RESUBMIT = "resubmit"  # submit it again: Slurm cancelled it for a dependency that finished as a phase


@dataclass(frozen=True)
class Decision:
    """The outcome of `decide` for one phase."""

    step: Step
    state: PhaseState | None = None
    detail: str = ""
    cancel: bool = False  # END: cancel its job first (Slurm would never run it, or it waits for a failed phase)
    find_cause: bool = False  # END: the detail is followed by the cause its logs hold (`failure_cause`)
    shown: str = ""  # WAIT: what the progress line shows of it; a change is reported


def decide(job, slurm: JobState | None, dependency: Dependency, folder_finished: bool = False) -> Decision:
    """The one decision of compare's Slurm driver: what happens to phase `job` given what Slurm says of its job
    (`slurm`; None before it is submitted), where its dependency stands, and whether its phase folder holds the
    finished phase (`phase_finished`, asked of ended jobs only). The phase folder decides over the job's state: a job
    that COMPLETED without a finished phase failed, one that failed after its phase finished (a late signal) did
    not. Pure: it asks and changes nothing."""
    after = job.depends_on
    if slurm is None:
        if dependency == Dependency.NOT_FINISHED:
            return Decision(Step.END, PhaseState.BLOCKED, f"{after} did not finish")
        return Decision(Step.HOLD if dependency == Dependency.UNSUBMITTED else Step.SUBMIT)
    job_id, state, reason = slurm.job_id, slurm.state, slurm.reason
    said = reason and reason != "None"
    if state == "COMPLETED":
        if folder_finished:
            return Decision(Step.END, PhaseState.FINISHED)
        why = f"Slurm job {job_id} COMPLETED but {job.phase_dir} holds no finished phase"
        return Decision(Step.END, PhaseState.FAILED, why)
    if slurm.ended and folder_finished:
        return Decision(Step.END, PhaseState.FINISHED, f"Slurm job {job_id} ended {state} after the phase finished")
    if state == "CANCELLED" and dependency == Dependency.FINISHED:  # (its dependency's job failed after finishing)
        return Decision(Step.RESUBMIT)
    if state == "CANCELLED" and dependency == Dependency.NOT_FINISHED:
        return Decision(Step.END, PhaseState.BLOCKED, f"{after} did not finish; Slurm cancelled job {job_id}")
    if slurm.ended:
        why = f"Slurm job {job_id} {state}" + (f" ({reason})" if said else "")
        why += f", exit {slurm.exit_code}" if slurm.exit_code else ""
        return Decision(Step.END, PhaseState.FAILED, why, find_cause=True)
    if state == "PENDING" and reason in NEVER_RUNS:
        if reason == "DependencyNeverSatisfied" and dependency != Dependency.NONE:
            why = f"{after} did not finish; cancelled Slurm job {job_id}"
            return Decision(Step.END, PhaseState.BLOCKED, why, cancel=True)
        why = f"Slurm will not run job {job_id} ({reason}); cancelled it"
        return Decision(Step.END, PhaseState.FAILED, why, cancel=True)
    if dependency == Dependency.NOT_FINISHED:  # Slurm cancels it (kill-on-invalid-dep): not waited for
        return Decision(Step.END, PhaseState.BLOCKED, f"{after} did not finish; cancelled Slurm job", cancel=True)
    label = PhaseState.RUNNING if state in ("RUNNING", "COMPLETING") else PhaseState.QUEUED
    shown = f"{label}:{reason}" if label == PhaseState.QUEUED else label
    return Decision(Step.WAIT, label, f"Slurm job {job_id} {state}" + (f", {reason}" if said else ""), shown=shown)


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
    (`PhaseState`); a phase is FINISHED when its job COMPLETED and `phase_status` finds it finished (`decide`)."""
    submitit = require_package("submitit", "submitit")
    layout = layout or PhaseProcesses()
    check_accounting()
    parameters, requeues = slurm_parameters(options)
    if layout.machines > 1:
        parameters["nodes"] = layout.machines
    folder = str(options.get("folder") or Path(output_dir).resolve() / "submitit" / "%j")
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=requeues)
    executor.update_parameters(**parameters)
    driver = SlurmDriver(jobs, on_event, executor, folder, JobRecord(output_dir), parallel, layout)
    driver.attach()
    return driver.run()


class SlurmDriver:
    """The phases of one `run_slurm` call on their way through Slurm: each submitted when `decide` says so (at most
    `parallel` queued or running), its job polled every `POLL_S` seconds, and moved on by `decide` until it ends."""

    def __init__(self, jobs, on_event: Event, executor, folder: str, record: JobRecord, parallel: int, layout):
        self.on_event, self.executor, self.folder, self.record = on_event, executor, folder, record
        self.parallel, self.layout = parallel, layout
        self.by_id = {job.id: job for job in jobs}
        self.pending = list(jobs)  # not submitted yet
        self.live: dict[str, str] = {}  # phase id -> Slurm job id
        self.finished: dict[str, str] = {}  # phase id -> FINISHED | FAILED | BLOCKED
        self.seen: dict[str, str] = {}  # phase id -> what the progress line last showed of it
        self.waiting_for_limit = False

    def attach(self) -> None:
        """Take over this driver's phases whose jobs (recorded by an earlier call) are still queued or running."""
        for phase, job_id in self.record.alive().items():
            if phase in self.by_id:
                self.live[phase] = job_id
                self.on_event(self.by_id[phase], PhaseState.QUEUED, f"re-attached to Slurm job {job_id}")
        self.pending = [job for job in self.pending if job.id not in self.live]

    def run(self) -> dict:
        """Submit and poll until every phase has ended. Ctrl-C or SIGTERM leaves the jobs running and says so."""
        try:
            with sigterm_interrupts():
                while self.pending or self.live:
                    self.submit_ready()
                    self.poll()
                    if self.pending or self.live:
                        time.sleep(POLL_S)
                    raise_if_interrupted()  # (a Ctrl-C that Python dropped in a finalizer while this polled)
        except KeyboardInterrupt as interrupt:
            stopped_by = "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"
            ids = list(self.live.values())
            if ids:
                print(
                    f"compare: stopped by {stopped_by}; {len(ids)} Slurm job(s) keep running ({', '.join(ids)}): "
                    "the same command again re-attaches to them; add --cancel to cancel them (or: scancel "
                    f"{' '.join(ids)}).",
                    flush=True,
                )
            else:
                print(f"compare: stopped by {stopped_by}; no Slurm job of it is queued or running.", flush=True)
            raise SystemExit(143 if isinstance(interrupt, Terminated) else 130) from None
        return self.finished

    def dependency(self, job) -> Dependency:
        after = job.depends_on
        if after in self.finished:
            return Dependency.FINISHED if self.finished[after] == PhaseState.FINISHED else Dependency.NOT_FINISHED
        if after in self.live:
            return Dependency.LIVE
        return Dependency.UNSUBMITTED if after in self.by_id else Dependency.NONE

    def submit_ready(self) -> None:
        """Submit the phases `decide` lets go, in order, while fewer than `parallel` are queued or running."""
        for job in list(self.pending):
            decision = decide(job, None, self.dependency(job))
            if decision.step == Step.END:
                self.pending.remove(job)
                self.end(job, decision.state, decision.detail)
                continue
            if decision.step == Step.HOLD:
                continue
            if len(self.live) >= self.parallel:
                break
            job_id = self.submit(job)
            if job_id is None:
                break
            self.pending.remove(job)
            self.live[job.id] = job_id
            self.on_event(job, PhaseState.QUEUED, f"Slurm job {job_id}")

    def poll(self) -> None:
        """Ask Slurm for the state of every live job and act on `decide`'s outcome for each."""
        states = job_states(list(self.live.values()))
        for phase, job_id in list(self.live.items()):
            job = self.by_id[phase]
            slurm = JobState(job_id, *states.get(job_id, ("UNKNOWN", "", "")))
            folder_finished = slurm.ended and phase_finished(job, self.layout.processes)
            decision = decide(job, slurm, self.dependency(job), folder_finished)
            if decision.step == Step.RESUBMIT:
                self.live.pop(phase)
                self.seen.pop(phase, None)
                self.pending.insert(0, job)
            elif decision.step == Step.WAIT:
                if self.seen.get(phase) != decision.shown:
                    self.seen[phase] = decision.shown
                    self.on_event(job, decision.state, decision.detail)
            else:
                if decision.cancel:
                    cancel([job_id])
                cause = f"; {failure_cause(job, job_id, self.folder)}" if decision.find_cause else ""
                self.end(job, decision.state, decision.detail + cause)

    def end(self, job, state: PhaseState, detail: str) -> None:
        self.finished[job.id] = state
        self.live.pop(job.id, None)
        self.on_event(job, state, detail)

    def submit(self, job) -> str | None:
        """The Slurm job of `job`: one another driver on the same output folder submitted and Slurm still runs, or a
        new one (None: Slurm's job-count limit holds it back until one of ours ends)."""
        with self.record.locked():  # a second driver on the same output folder attaches instead of submitting twice
            other = self.record.reload().jobs.get(job.id, {}).get("job_id")
            if other and other not in self.live.values() and job_alive(other):
                self.on_event(
                    job, PhaseState.QUEUED, f"re-attached to Slurm job {other} (submitted by another compare)"
                )
                return other
            return self._sbatch(job)

    def _sbatch(self, job) -> str | None:
        extra = {"kill_on_invalid_dep": "yes"}
        if self.dependency(job) == Dependency.LIVE:
            extra["dependency"] = f"afterok:{self.live[job.depends_on]}"
        self.executor.update_parameters(slurm_additional_parameters=extra)
        noise = io.StringIO()
        try:
            with contextlib.redirect_stderr(noise):
                handle = self.executor.submit(SlurmPhase(job.words, self.layout, str(job.log)))
        except Exception as error:  # sbatch refused
            why = first_error(str(error) or noise.getvalue())
            if SUBMIT_LIMIT.search(why) and self.live:
                if not self.waiting_for_limit:
                    print(f"compare: Slurm's job limit ({why}); waiting for one of {len(self.live)} job(s) to end")
                self.waiting_for_limit = True
                return None
            raise SlurmError(f"Slurm refused to queue {job.id}: {why}") from None
        self.waiting_for_limit = False
        self.record.add(job.id, str(handle.job_id), self.folder)
        return str(handle.job_id)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("spt_hf.compare.slurm is used by `spt-hf compare --launcher submitit`")
