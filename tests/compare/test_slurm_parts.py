"""The parts of the Slurm launcher that need no cluster: Slurm's time format, the line that names a failure's cause,
the job record, and the progress line following a requeued job (tests/cluster/ runs them on a real cluster)."""

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


def test_the_progress_line_follows_a_requeued_job(capsys):
    class Job:
        id = "a/spt"

    progress = Progress(total=1, parallel=1)
    states = ("queued", "queued", "running", "running", "queued", "running", "finished")
    for state in (PhaseState(state) for state in states):
        progress(Job(), state, "")
    lines = capsys.readouterr().out.splitlines()
    running = [int(line.split(" running")[0].rsplit(" ", 1)[1]) for line in lines]
    assert running == [0, 0, 1, 0, 1, 0] and "1 finished" in lines[-1]  # a repeated "running" prints nothing
