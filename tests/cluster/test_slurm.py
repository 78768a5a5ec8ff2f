"""`spt-hf compare --launcher submitit` on a real Slurm cluster (the `slurm` fixture: slurmctld, slurmd and slurmdbd on
this host): a phase that fails fails its job and blocks its finetuning, a cancelled job does not hang compare, the
partition's time limit caps the jobs', a time limit requeues the phase from a checkpoint it saved on Slurm's signal,
a rerun re-attaches to the jobs still queued or running, an interrupted driver says what keeps running, sbatch's
refusals are one line, a job-count limit throttles, missing accounting is one line; the final models of interrupted
comparisons equal an uninterrupted one's bit for bit.

Each driver is `python -m spt_hf compare ...` in its own process, with a deadline: a hang fails the test."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster.slurm_cluster import our_jobs
from helpers import TINY_PHASE
from safetensors.numpy import load_file

from spt_hf.compare import CompareSpec, build_plan

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

TINY = TINY_PHASE
# An SPT phase that outlasts the first 60 s of a 2-minute limit (where Slurm's signal comes) on a quiet machine too,
# and a short finetuning: 4,800 SPT steps took 35 s on the quiet 2-core Intel machine and ended before the signal.
LONG = {
    **TINY,
    "state_size": 64,
    "total_steps": 12000,
    "spt_fraction": 0.96,
    "eval_steps": 1200,
    "save_steps": 1200,
    "logging_steps": 400,
}


def compare_args(out: Path, overrides: dict, *extra: str, architectures=("dlr",), scratch=False) -> list[str]:
    return [
        "compare",
        "--tasks",
        "digits",
        "--architectures",
        *architectures,
        "--seeds",
        "0",
        *([] if scratch else ["--no-scratch"]),
        "--recipes-dir",
        "recipes/cpu",
        "--output-dir",
        str(out),
        "--launcher",
        "submitit",
        *extra,
        *[f"--{k}={v}" for k, v in overrides.items()],
    ]


def driver(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "spt_hf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def finish(process: subprocess.Popen, deadline_s: float) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"compare did not end within {deadline_s:.0f} s (a hang):\n{out[-3000:]}")
    return process.returncode, out


def run(args: list[str], deadline_s: float = 300) -> tuple[int, str]:
    return finish(driver(args), deadline_s)


def recorded_jobs(out: Path) -> dict:
    path = out / ".compare" / "jobs.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def text_of(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def slurm_state(job_id: str) -> str:
    done = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id], capture_output=True, text=True, check=True
    )
    return (done.stdout.split() or ["UNKNOWN"])[0]


def wait_for(what: str, check, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def models(out: Path) -> dict[str, dict]:
    """{phase folder: {tensor name: array}} of every exported model under `out`."""
    found = {}
    for path in sorted(out.rglob("model.safetensors")):
        if path.parent.name in ("spt", "finetune"):
            found[str(path.parent.relative_to(out))] = load_file(str(path))
    return found


def assert_same_models(a: Path, b: Path) -> None:
    left, right = models(a), models(b)
    assert left and sorted(left) == sorted(right)
    for phase in left:
        assert sorted(left[phase]) == sorted(right[phase]), phase
        for name, tensor in left[phase].items():
            assert tensor.tobytes() == right[phase][name].tobytes(), f"{phase}: {name} differs"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted comparison with the LONG phases, run by the local launcher (the same commands)."""
    out = tmp_path_factory.mktemp("reference") / "cmp"
    args = compare_args(out, LONG)
    args[args.index("submitit")] = "local"
    rc, text = run(args, deadline_s=600)
    assert rc == 0, text[-2000:]
    return out


# ----------------------------------------------------------------------------------------------------------------


def phase_dirs(out: Path, overrides: dict, architectures=("dlr",)) -> dict[str, Path]:
    spec = CompareSpec(
        tasks=["digits"],
        architectures=list(architectures),
        seeds=[0],
        with_scratch=False,
        recipes_dir="recipes/cpu",
        output_dir=str(out),
        overrides=overrides,
    )
    return {job.id: job.phase_dir for job in build_plan(spec).jobs}


def test_a_failing_phase_fails_its_job_and_its_finetuning_is_blocked_not_waited_for(slurm, tmp_path):
    out = tmp_path / "cmp"
    folders = phase_dirs(out, TINY)
    spt_id, ft_id = sorted(folders, key=lambda name: not name.endswith("spt"))
    # A lock error inside the SPT job: its folder is held by a live process (this one) on this host.
    folder = folders[spt_id]
    folder.mkdir(parents=True)
    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (folder / ".spt_hf.lock").write_text(
        json.dumps({"pid": os.getpid(), "start": stat, "host": socket.gethostname(), "since": "now"})
    )
    began = time.monotonic()
    rc, text = run(compare_args(out, TINY, "--max-parallel", "2"), deadline_s=240)
    seconds = time.monotonic() - began
    jobs = recorded_jobs(out)
    assert rc == 1 and "Traceback" not in text, text
    assert slurm_state(jobs[spt_id]["job_id"]) == "FAILED", text  # not COMPLETED: afterok never fires
    assert slurm_state(jobs[ft_id]["job_id"]) == "CANCELLED", text  # by Slurm (kill-on-invalid-dep), not pending
    assert f"{ft_id}: blocked" in text, text
    # the line names the file holding the cause and shows its whole last line
    line = next(line for line in text.splitlines() if f"{spt_id}: failed (" in line)
    assert f"{folder.parent / 'logs' / 'spt.log'}: " in line and "is in use by process" in line, line
    assert line.rstrip().endswith("would mix their checkpoints.)"), line
    print(f"failing phase: compare ended in {seconds:.0f} s")


def test_accounting_that_does_not_answer_is_one_line(slurm, tmp_path):
    conf = Path(os.environ["SLURM_CONF"]).read_text()
    broken = tmp_path / "slurm.conf"
    broken.write_text(conf.replace("accounting_storage/slurmdbd", "accounting_storage/none"))
    process = subprocess.run(
        [sys.executable, "-m", "spt_hf", *compare_args(tmp_path / "cmp", TINY)],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": str(broken)},
        timeout=120,
    )
    errors = process.stderr.strip().splitlines()
    assert process.returncode == 1 and "Traceback" not in process.stderr, process.stderr
    assert "Slurm accounting does not answer" in errors[0] and "docs/compare.md" in errors[0], errors
    assert not recorded_jobs(tmp_path / "cmp")


def test_sbatch_refusals_are_one_line_with_slurms_reason(slurm, tmp_path):
    rc, text = run(compare_args(tmp_path / "a", TINY, "--submitit-partition", "nope"), deadline_s=120)
    assert rc == 1 and "Traceback" not in text and "Slurm has no partition 'nope'" in text, text
    rc, text = run(compare_args(tmp_path / "b", TINY, "--submitit-qos", "nope"), deadline_s=120)
    lines = [line for line in text.splitlines() if "error:" in line]
    assert rc == 1 and "Traceback" not in text and len(lines) == 1, text
    assert "Slurm refused to queue" in lines[0] and "Invalid qos" in lines[0], text
    assert not our_jobs()


def test_a_job_count_limit_throttles_instead_of_crashing(slurm, tmp_path):
    out = tmp_path / "cmp"
    # QOS twojobs: at most 2 submitted jobs per user; 4 phases and --max-parallel 4
    args = compare_args(
        out, TINY, "--submitit-qos", "twojobs", "--max-parallel", "4", architectures=("dlr", "transformer")
    )
    rc, text = run(args, deadline_s=400)
    assert rc == 0 and "Traceback" not in text, text
    assert "Slurm's job limit" in text and len(recorded_jobs(out)) == 4, text


def test_a_cancelled_job_blocks_its_finetuning_and_compare_ends(slurm, tmp_path):
    out = tmp_path / "cmp"
    spt_id, ft_id = sorted(phase_dirs(out, LONG), key=lambda name: not name.endswith("spt"))
    process = driver(compare_args(out, LONG, "--max-parallel", "2"))
    job = wait_for("the SPT job", lambda: recorded_jobs(out).get(spt_id, {}).get("job_id"))
    wait_for("the SPT job to run", lambda: slurm_state(job) == "RUNNING")
    subprocess.run(["scancel", job], check=True)
    rc, text = finish(process, 120)
    assert rc == 1 and "Traceback" not in text, text
    assert f"{ft_id}: blocked" in text and "CANCELLED" in text, text
    assert slurm_state(recorded_jobs(out)[ft_id]["job_id"]) == "CANCELLED"


def test_the_partitions_time_limit_caps_the_jobs_and_a_limit_too_short_is_refused(slurm, tmp_path):
    rc, text = run(compare_args(tmp_path / "a", TINY, "--submitit-partition", "short"), deadline_s=300)
    assert rc == 0 and "partition short allows 3 min per job (MaxTime)" in text, text
    counts = [int(m) for m in re.findall(r"(\d+) running", text)]
    assert counts and max(counts) == 1, text  # --max-parallel (default 1) holds under Slurm too
    rc, text = run(compare_args(tmp_path / "b", TINY, "--submitit-timeout-min", "1"), deadline_s=60)
    assert rc == 1 and "timeout_min=1 is too short" in text and "Traceback" not in text, text


def test_a_lock_held_by_a_slurm_job_elsewhere_is_judged_by_that_job(slurm, tmp_path):
    from spt_hf.training.run_folder import PhaseLock, PhaseLockedError

    def job(command: str) -> str:
        done = subprocess.run(["sbatch", "--parsable", "--wrap", command], capture_output=True, text=True, check=True)
        return done.stdout.strip().split(";")[0]

    ended, alive = job("true"), job("sleep 120")
    wait_for("the short job to end", lambda: slurm_state(ended) == "COMPLETED")
    wait_for("the long job to run", lambda: slurm_state(alive) == "RUNNING")
    for job_id, folder in ((ended, tmp_path / "a"), (alive, tmp_path / "b")):
        folder.mkdir()
        owner = {"pid": 1, "start": "1", "host": "another-node", "since": "earlier", "slurm_job": job_id}
        (folder / ".spt_hf.lock").write_text(json.dumps(owner))
    with PhaseLock(tmp_path / "a"):  # its Slurm job has ended: taken over
        pass
    with pytest.raises(PhaseLockedError, match=f"in use by Slurm job {alive} .*scancel {alive}"):
        PhaseLock(tmp_path / "b").acquire()
    subprocess.run(["scancel", alive], check=True)


def test_an_interrupted_driver_says_what_keeps_running_and_a_rerun_reattaches(slurm, tmp_path, reference):
    out = tmp_path / "cmp"
    spt_id, ft_id = sorted(phase_dirs(out, LONG), key=lambda name: not name.endswith("spt"))
    args = compare_args(out, LONG, "--max-parallel", "2")
    process = driver(args)
    job = wait_for("the SPT job", lambda: recorded_jobs(out).get(spt_id, {}).get("job_id"))
    wait_for("the SPT job to run", lambda: slurm_state(job) == "RUNNING")
    process.send_signal(signal.SIGTERM)
    rc, text = finish(process, 60)
    assert rc == 143 and "Traceback" not in text, text
    line = text.strip().splitlines()[-1]
    assert "keep running" in line and "--cancel" in line and job in line, text
    assert slurm_state(job) == "RUNNING"
    # a second driver re-attaches (no new job) and the comparison ends as the uninterrupted one
    rc, text = run(args, deadline_s=400)
    assert rc == 0 and f"re-attached to Slurm job {job}" in text, text
    assert recorded_jobs(out)[spt_id]["job_id"] == job
    counts = [int(m) for m in re.findall(r"(\d+) running", text)]
    assert 1 in counts and "min left" in text, text  # the states and the ETA come from Slurm
    assert_same_models(out, reference)


def test_a_cancelled_comparison_resumes_exactly_when_run_again(slurm, tmp_path, reference):
    out = tmp_path / "cmp"
    spt_id, _ = sorted(phase_dirs(out, LONG), key=lambda name: not name.endswith("spt"))
    spt_dir = phase_dirs(out, LONG)[spt_id]
    args = compare_args(out, LONG, "--max-parallel", "2")
    process = driver(args)
    wait_for("a checkpoint of the SPT phase", lambda: list(spt_dir.glob("checkpoint-*")), timeout=240)
    process.send_signal(signal.SIGINT)
    rc, text = finish(process, 60)
    assert rc == 130 and "Traceback" not in text and "keep running" in text, text
    rc, text = run([*args, "--cancel"], deadline_s=60)
    assert rc == 0 and "cancelled 2 Slurm job(s)" in text, text
    wait_for("the jobs to end", lambda: not our_jobs(), timeout=60)
    rc, text = run(args, deadline_s=400)
    assert rc == 0, text
    assert "resuming spt from" in (spt_dir.parent / "logs" / "spt.log").read_text()
    assert_same_models(out, reference)


def test_a_time_limit_requeues_the_phase_from_a_checkpoint_saved_on_the_signal(slurm, tmp_path, reference):
    out = tmp_path / "cmp"
    spt_id, _ = sorted(phase_dirs(out, LONG), key=lambda name: not name.endswith("spt"))
    log = phase_dirs(out, LONG)[spt_id].parent / "logs" / "spt.log"
    config = tmp_path / "compare.yaml"
    config.write_text(json.dumps({"submitit": {"signal_delay_s": 60}}))
    args = compare_args(out, LONG, "--config", str(config), "--submitit-timeout-min", "2", "--max-parallel", "2")
    process = driver(args)
    job = wait_for("the SPT job", lambda: recorded_jobs(out).get(spt_id, {}).get("job_id"))
    # Slurm signals the first attempt 60 s before its 2-minute limit: it saves a checkpoint, stops, requeues itself.
    saved_on_signal = re.compile(r"SIGUSR2 received: saved (checkpoint-\d+)")
    wait_for("the checkpoint saved on Slurm's signal", lambda: saved_on_signal.search(text_of(log)), timeout=300)
    # How many more 60-s attempts the rest needs depends on the machine (a busy one spends most of each starting up),
    # so the requeued job is given the time to finish, as a user would: `scontrol update JobId=N TimeLimit=...`.
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=30"], check=True)
    rc, text = finish(process, 600)
    assert rc == 0 and "Traceback" not in text, text
    saved = saved_on_signal.findall(log.read_text())
    assert saved and "resuming spt from" in log.read_text(), log.read_text()[-3000:]
    assert recorded_jobs(out)[spt_id]["job_id"] == job  # the same job, requeued: not a second submission
    print(f"time limit: requeued {len(saved)} time(s), saved {saved}")
    assert_same_models(out, reference)
