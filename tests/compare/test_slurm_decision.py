"""compare's Slurm decision (`compare.slurm.decide`) as a table: what happens to a phase given what Slurm says of its
job (state, reason, exit code), where the phase it waits for stands, and whether its phase folder holds the finished
phase. No cluster: the same decisions tests/cluster/ reaches on a real one, and the ones it cannot provoke (a node
that fails, the OOM killer, a job missing from accounting, a job failed after its phase finished)."""

import contextlib
import signal
from pathlib import Path

import pytest

from spt_hf.compare import slurm
from spt_hf.compare.plan import PhaseJob
from spt_hf.compare.processes import PhaseProcesses
from spt_hf.compare.slurm import Decision, Dependency, JobState, Step, decide
from spt_hf.phases import interrupts_latched
from spt_hf.training.run_folder import PhaseState

RUN_DIR = Path("runs/cmp/digits/dlr/full/seed0")
SPT, FINETUNE_ID = "digits/dlr/full/seed0/spt", "digits/dlr/full/seed0/finetune"


def phase_job(phase: str, run_dir: Path = RUN_DIR) -> PhaseJob:
    """The SPT phase, or its finetuning (which waits for it), of one seed of digits/dlr."""
    return PhaseJob(
        SPT if phase == "spt" else FINETUNE_ID,
        phase,
        task="digits",
        architecture="dlr",
        variant="full",
        seed=0,
        recipe=Path(f"digits-dlr-{phase}.yaml"),
        overrides={},
        run_dir=run_dir,
        steps="10 steps",
        depends_on=None if phase == "spt" else SPT,
    )


NONE, UNSUBMITTED, LIVE = Dependency.NONE, Dependency.UNSUBMITTED, Dependency.LIVE
DONE, NOT_DONE = Dependency.FINISHED, Dependency.NOT_FINISHED
END, WAIT = Step.END, Step.WAIT
FINISHED, FAILED, BLOCKED = PhaseState.FINISHED, PhaseState.FAILED, PhaseState.BLOCKED
QUEUED, RUNNING = PhaseState.QUEUED, PhaseState.RUNNING
NO_PHASE = f"Slurm job 7 COMPLETED but {RUN_DIR / 'finetune'} holds no finished phase"


def job(state: str, reason: str = "None", exit_code: str = "") -> JobState:
    return JobState("7", state, reason, exit_code)


# (what Slurm says of the job (None: not submitted yet), the dependency, the phase folder finished?) -> decision
CASES = {
    # not submitted yet
    "its dependency failed: blocked, never submitted": (
        None,
        NOT_DONE,
        False,
        Decision(END, BLOCKED, f"{SPT} did not finish"),
    ),
    "its dependency is not queued yet: held back": (None, UNSUBMITTED, False, Decision(Step.HOLD)),
    "no dependency: submitted": (None, NONE, False, Decision(Step.SUBMIT)),
    "a live dependency: submitted (afterok)": (None, LIVE, False, Decision(Step.SUBMIT)),
    "a finished dependency: submitted": (None, DONE, False, Decision(Step.SUBMIT)),
    # ended
    "completed, its phase finished": (job("COMPLETED", exit_code="0:0"), NONE, True, Decision(END, FINISHED)),
    "completed without a finished phase: failed": (job("COMPLETED"), NONE, False, Decision(END, FAILED, NO_PHASE)),
    "completed, the folder decides over a failed dependency": (
        job("COMPLETED"),
        NOT_DONE,
        True,
        Decision(END, FINISHED),
    ),
    "failed after its phase finished (a late signal): finished": (
        job("FAILED", "NonZeroExitCode", "1:0"),
        NONE,
        True,
        Decision(END, FINISHED, "Slurm job 7 ended FAILED after the phase finished"),
    ),
    "cancelled for a dependency that finished as a phase: submitted again": (
        job("CANCELLED"),
        DONE,
        False,
        Decision(Step.RESUBMIT),
    ),
    "cancelled by Slurm for a failed dependency: blocked": (
        job("CANCELLED"),
        NOT_DONE,
        False,
        Decision(END, BLOCKED, f"{SPT} did not finish; Slurm cancelled job 7"),
    ),
    "cancelled by a user: failed, with the cause from its logs": (
        job("CANCELLED", exit_code="0:15"),
        NONE,
        False,
        Decision(END, FAILED, "Slurm job 7 CANCELLED, exit 0:15", find_cause=True),
    ),
    "the phase failed: failed, with the cause from its logs": (
        job("FAILED", "NonZeroExitCode", "1:0"),
        DONE,
        False,
        Decision(END, FAILED, "Slurm job 7 FAILED (NonZeroExitCode), exit 1:0", find_cause=True),
    ),
    "out of requeues at the time limit: failed": (
        job("TIMEOUT", exit_code="0:0"),
        NONE,
        False,
        Decision(END, FAILED, "Slurm job 7 TIMEOUT, exit 0:0", find_cause=True),
    ),
    "its node failed: failed": (
        job("NODE_FAIL", "NodeDown", "0:0"),
        LIVE,
        False,
        Decision(END, FAILED, "Slurm job 7 NODE_FAIL (NodeDown), exit 0:0", find_cause=True),
    ),
    "out of memory: failed": (
        job("OUT_OF_MEMORY", exit_code="0:125"),
        NONE,
        False,
        Decision(END, FAILED, "Slurm job 7 OUT_OF_MEMORY, exit 0:125", find_cause=True),
    ),
    # pending for good
    "its dependency can never be satisfied: cancelled, blocked": (
        job("PENDING", "DependencyNeverSatisfied"),
        NOT_DONE,
        False,
        Decision(END, BLOCKED, f"{SPT} did not finish; cancelled Slurm job 7", cancel=True),
    ),
    "a dependency outside the plan never satisfied: cancelled, failed": (
        job("PENDING", "DependencyNeverSatisfied"),
        NONE,
        False,
        Decision(END, FAILED, "Slurm will not run job 7 (DependencyNeverSatisfied); cancelled it", cancel=True),
    ),
    "over the partition's time limit: cancelled, failed": (
        job("PENDING", "PartitionTimeLimit"),
        LIVE,
        False,
        Decision(END, FAILED, "Slurm will not run job 7 (PartitionTimeLimit); cancelled it", cancel=True),
    ),
    # waiting or running
    "waiting for a dependency that failed: cancelled, blocked": (
        job("PENDING", "Dependency"),
        NOT_DONE,
        False,
        Decision(END, BLOCKED, f"{SPT} did not finish; cancelled Slurm job", cancel=True),
    ),
    "waiting for a live dependency: queued": (
        job("PENDING", "Dependency"),
        LIVE,
        False,
        Decision(WAIT, QUEUED, "Slurm job 7 PENDING, Dependency", shown="queued:Dependency"),
    ),
    "requeued after saving a checkpoint on the signal: queued again": (
        job("REQUEUED", "BeginTime"),
        NONE,
        False,
        Decision(WAIT, QUEUED, "Slurm job 7 REQUEUED, BeginTime", shown="queued:BeginTime"),
    ),
    "running": (job("RUNNING"), DONE, False, Decision(WAIT, RUNNING, "Slurm job 7 RUNNING", shown="running")),
    "completing: still running": (
        job("COMPLETING"),
        NONE,
        False,
        Decision(WAIT, RUNNING, "Slurm job 7 COMPLETING", shown="running"),
    ),
    "missing from squeue and sacct: waited for": (
        JobState("7"),
        NONE,
        False,
        Decision(WAIT, QUEUED, "Slurm job 7 UNKNOWN", shown="queued:"),
    ),
}


@pytest.mark.parametrize("slurm, dependency, folder_finished, expected", CASES.values(), ids=CASES.keys())
def test_the_decision_for_one_phase(slurm, dependency, folder_finished, expected):
    assert decide(phase_job("finetune"), slurm, dependency, folder_finished) == expected


def test_every_step_and_every_ended_state_of_the_driver_is_in_the_table():
    assert {case[-1].step for case in CASES.values()} == set(Step)
    outcomes = {(case[-1].step, case[-1].state) for case in CASES.values()}
    assert outcomes >= {(END, FINISHED), (END, FAILED), (END, BLOCKED), (WAIT, QUEUED), (WAIT, RUNNING)}


# ----------------------------------------------------------------------------------------------------------------
# The driver acting on the decision, against a scripted Slurm


class ScriptedSlurm:
    """sbatch (an executor), squeue/sacct and scancel of a cluster whose n-th submitted job goes through the states
    `scripts[n]`, one per poll (the last one stays)."""

    def __init__(self, scripts: list[list[tuple[str, str, str]]]):
        self.scripts, self.submitted, self.cancelled, self.extra = scripts, [], [], {}

    def update_parameters(self, **parameters):
        self.extra = parameters.get("slurm_additional_parameters", self.extra)

    def submit(self, phase):
        self.submitted.append((phase.words[0], dict(self.extra)))
        return type("Handle", (), {"job_id": str(len(self.submitted))})()

    def job_states(self, ids: list[str]) -> dict:
        script = {i: self.scripts[int(i) - 1] for i in ids}
        return {i: states.pop(0) if len(states) > 1 else states[0] for i, states in script.items()}


def drive(monkeypatch, tmp_path, scripts, folder_finished):
    """Run the driver over an SPT phase and its finetuning in `tmp_path`; (its result, the events reported as
    (phase, state, detail), the scripted Slurm). `folder_finished(phase, cluster)` stands for `phase_finished`."""
    cluster = ScriptedSlurm(scripts)
    monkeypatch.setattr(slurm, "job_states", cluster.job_states)
    monkeypatch.setattr(slurm, "cancel", cluster.cancelled.extend)
    monkeypatch.setattr(slurm, "job_alive", lambda job_id: False)
    monkeypatch.setattr(slurm, "phase_finished", lambda job, world_size: folder_finished(job.phase, cluster))
    monkeypatch.setattr(slurm, "POLL_S", 0)
    events = []
    driver = slurm.SlurmDriver(
        [phase_job("spt", tmp_path), phase_job("finetune", tmp_path)],
        lambda job, state, detail: events.append((job.phase, state, detail)),
        cluster,
        str(tmp_path / "submitit" / "%j"),
        slurm.JobRecord(tmp_path),
        parallel=2,
        layout=PhaseProcesses(),
    )
    driver.attach()
    return driver.run(), events, cluster


def test_a_finetuning_cancelled_for_an_spt_job_that_failed_after_finishing_is_submitted_again(monkeypatch, tmp_path):
    scripts = [
        [("RUNNING", "None", ""), ("FAILED", "NonZeroExitCode", "1:0")],  # SPT: a late signal after it finished
        [("PENDING", "Dependency", ""), ("CANCELLED", "None", "0:0")],  # its finetuning: cancelled by Slurm
        [("COMPLETED", "None", "0:0")],  # the finetuning submitted again
    ]

    def folder_finished(phase, cluster):  # the finetuning finishes in its second job
        return phase == "spt" or len(cluster.submitted) == 3

    result, events, cluster = drive(monkeypatch, tmp_path, scripts, folder_finished)
    assert result == {SPT: FINISHED, FINETUNE_ID: FINISHED}
    assert cluster.submitted == [
        ("spt", {"kill_on_invalid_dep": "yes"}),
        ("finetune", {"kill_on_invalid_dep": "yes", "dependency": "afterok:1"}),
        ("finetune", {"kill_on_invalid_dep": "yes"}),  # its SPT phase finished: no dependency
    ]
    assert ("spt", FINISHED, "Slurm job 1 ended FAILED after the phase finished") in events
    assert events[-1] == ("finetune", FINISHED, "") and not cluster.cancelled
    assert slurm.JobRecord(tmp_path).jobs[FINETUNE_ID]["job_id"] == "3"


def test_a_failed_spt_job_is_reported_with_its_cause_and_its_waiting_finetuning_cancelled(monkeypatch, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "spt.log").write_text("$ python -m spt_hf spt  # Slurm job 1\nValueError: no data. Fix it.\n")
    scripts = [[("FAILED", "NonZeroExitCode", "1:0")], [("PENDING", "Dependency", "")]]
    result, events, cluster = drive(monkeypatch, tmp_path, scripts, lambda phase, cluster: False)
    assert result == {SPT: FAILED, FINETUNE_ID: BLOCKED} and cluster.cancelled == ["2"]
    log = tmp_path / "logs" / "spt.log"
    assert events[-2:] == [
        ("spt", FAILED, f"Slurm job 1 FAILED (NonZeroExitCode), exit 1:0; {log}: ValueError: no data. Fix it."),
        ("finetune", BLOCKED, f"{SPT} did not finish; cancelled Slurm job"),
    ]


def test_a_ctrl_c_that_python_dropped_stops_the_driver_at_its_next_poll(monkeypatch, tmp_path, capsys):
    """A KeyboardInterrupt raised in a finalizer is dropped (tests/reliability/test_dropped_interrupt.py): the driver
    still stops at its next poll, leaving the jobs running as Ctrl-C does, instead of polling until they end."""
    scripts = [[("RUNNING", "None", ""), ("COMPLETED", "None", "0:0")] for _ in range(2)]  # (unstopped: both end)
    with pytest.raises(SystemExit) as stopped, interrupts_latched():
        with contextlib.suppress(KeyboardInterrupt):  # (dropped, as a finalizer drops it)
            signal.raise_signal(signal.SIGINT)
        drive(monkeypatch, tmp_path, scripts, lambda phase, cluster: True)
        pytest.fail("the driver polled on until its jobs ended")  # (before the block's end raises the interrupt)
    assert stopped.value.code == 130
    out = capsys.readouterr().out
    assert "compare: stopped by Ctrl-C; 2 Slurm job(s) keep running (1, 2)" in out, out
