"""The parts of the Slurm launcher that need no cluster: Slurm's time format, the line that names a failure's cause,
the job record, and the progress line (a requeued job, the time left; tests/cluster/ runs them on a real
cluster)."""

import dataclasses
import json
from pathlib import Path

import pytest

from spt_hf.compare.slurm import JobRecord, last_meaningful_line
from spt_hf.compare.state import Progress
from spt_hf.slurm_queries import parse_minutes
from spt_hf.training.run_folder import PhaseState


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("UNLIMITED", None),
        ("infinite", None),
        ("30", 30),
        ("5:30", 5.5),
        ("2:00:00", 120),
        ("1-00:00:00", 1440),
        ("2-03:04:30", 2 * 1440 + 184.5),
    ],
)
def test_slurm_time_limits_in_minutes(text, minutes):
    assert parse_minutes(text) == minutes


def test_the_last_meaningful_line_skips_tracebacks_echoes_and_progress_bars(tmp_path):
    log = tmp_path / "spt.log"
    log.write_text(
        "$ python -m spt_hf spt --config x.yaml  # Slurm job 7\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "    main()\n"
        "    ^^^^^^\n"
        "ValueError: the recipe names task 'nope'; expected one of ['digits', 'listops']. Fix it.\n"
        " 40%|████      | 2/5 [00:01<00:02]\n"
        "(--debug or SPT_HF_DEBUG=1 shows the traceback)\n\n"
    )
    assert last_meaningful_line(log) == (
        "ValueError: the recipe names task 'nope'; expected one of ['digits', 'listops']. Fix it."
    )
    assert last_meaningful_line(tmp_path / "missing.log") is None


def test_the_job_record_is_written_whole_and_read_back(tmp_path):
    record = JobRecord(tmp_path)
    record.add("digits/dlr/seed0/spt", "12", str(tmp_path / "submitit" / "%j"))
    record.add("digits/dlr/seed0/ft", "13", str(tmp_path / "submitit" / "%j"))
    again = JobRecord(tmp_path)
    assert {phase: entry["job_id"] for phase, entry in again.jobs.items()} == {
        "digits/dlr/seed0/spt": "12",
        "digits/dlr/seed0/ft": "13",
    }
    assert not list(Path(tmp_path, ".compare").glob("*.tmp*"))


def test_the_progress_line_follows_a_requeued_job(capsys, tmp_path):
    class Job:
        id, task, architecture, phase, phase_dir = "a/spt", "a", "s4", "spt", tmp_path / "a" / "spt"

    progress = Progress([Job()], parallel=1)
    states = ("queued", "queued", "running", "running", "queued", "running", "finished")
    for state in (PhaseState(state) for state in states):
        progress(Job(), state, "")
    lines = capsys.readouterr().out.splitlines()
    running = [int(line.split(" running")[0].rsplit(" ", 1)[1]) for line in lines]
    assert running == [0, 0, 1, 0, 1, 0] and "1 finished" in lines[-1]  # a repeated "running" prints nothing


def test_the_time_left_comes_from_the_finished_phases_of_the_same_task_and_architecture(tmp_path, capsys):
    """A resumed comparison: the time left is what the finished phases of each phase's task and architecture took
    (their results.json, a resumed phase counted whole), not the few seconds the resumed phases took in this
    process, nor another task's or architecture's; phases with nothing to go by are counted as not timed."""

    @dataclasses.dataclass
    class Job:
        id: str
        task: str
        architecture: str
        phase: str

        @property
        def phase_dir(self) -> Path:
            return tmp_path / self.id

    def finished(job: Job, seconds: float) -> Job:
        job.phase_dir.mkdir(parents=True)
        (job.phase_dir / "results.json").write_text(json.dumps({"budget": {"wall_time_s": seconds}}))
        return job

    spt = finished(Job("long/transformer/spt", "long", "transformer", "spt"), 600.0)
    short = finished(Job("short/transformer/spt", "short", "transformer", "spt"), 6.0)
    finetune = Job("long/transformer/finetune", "long", "transformer", "finetune")
    scratch = Job("long/transformer/scratch", "long", "transformer", "scratch")
    other = Job("long/s4/spt", "long", "s4", "spt")
    progress = Progress([finetune, scratch, other], parallel=2, finished=[spt, short])
    progress(finetune, PhaseState.RUNNING, "")
    finished(finetune, 1200.0)  # resumed near its end: it ends at once in this process, and took 20 min in all
    progress(finetune, PhaseState.FINISHED, "")
    lines = capsys.readouterr().out.splitlines()
    assert "about 10.0 min left, 1 phase(s) not timed yet" in lines[0]  # 600 s each for finetune and scratch, 2 at once
    assert "about 7.5 min left, 1 phase(s) not timed yet" in lines[1]  # scratch: the mean of 600 and 1200 s
