"""Faults of `spt-hf compare --launcher ray` on a Ray cluster this module starts (`ray start --head` on 127.0.0.1,
2 CPUs): a phase's Ray worker killed, then a phase's own process killed; the driver killed; a second compare of
the same folder while the first one's phases run. Each ends with every phase finished once and the final models
equal, bit for bit, to those of an uninterrupted run."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from spt_hf.compare import CompareSpec, run_compare
from spt_hf.training.run_folder import LOCK_FILE, live_lock_owner

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

PHASES = ("spt", "finetune")
OVERRIDES = {  # long enough (200 steps a phase) to be caught between its checkpoints
    "total_steps": 400,
    "save_steps": 25,
    "eval_steps": 200,
    "logging_steps": 50,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "per_device_eval_batch_size": 64,
    "load_best_model_at_end": False,
}


def arguments(out: Path) -> list[str]:
    words = ["compare", "--tasks", "digits", "--architectures", "transformer", "--seeds", "0", "--no_scratch"]
    words += ["--recipes_dir", "recipes/cpu", "--output_dir", str(out)]
    return words + [f"--{key}={value}" for key, value in OVERRIDES.items()]


def spec(out: Path, **changes) -> CompareSpec:
    values = dict(
        tasks=["digits"], architectures=["transformer"], seeds=[0], recipes_dir="recipes/cpu", output_dir=str(out)
    )
    return CompareSpec(**{**values, "with_scratch": False, "overrides": dict(OVERRIDES), **changes})


def phase_dir(out: Path, phase: str) -> Path:
    return out / "digits/transformer/full/seed0" / phase


@pytest.fixture(scope="module")
def cluster():
    """A 2-CPU Ray head on 127.0.0.1 in its own session, stopped by its process group at the end."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="spt-ray-", dir="/tmp")  # Ray's socket paths must stay short
    ray = Path(sys.executable).with_name("ray")
    command = [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    command += ["--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", temp]
    # Token authentication off for this test cluster and every driver of it: an `auth_token` that an earlier local
    # `ray.init()` left in ~/.ray would otherwise make the head demand a token that the probe and drivers do not send.
    previous_auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # a loaded 2-core machine has needed more than 90 s
        while time.monotonic() < deadline:
            probe = subprocess.run([str(ray), "status", "--address", address], capture_output=True, env=env)
            if probe.returncode == 0:
                break
            assert head.poll() is None, head.stderr.read().decode()[-2000:]
            time.sleep(1)
        else:
            pytest.fail(f"the Ray head did not come up at {address}")
        yield address
    finally:  # stopped by its process group, also when it did not come up
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        if previous_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous_auth
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same phases uninterrupted (local launcher), on one OpenMP thread as Ray runs a task of one CPU: the same
    arithmetic, so that the final models can be compared bit for bit (with the local launcher's 2 threads they
    differed)."""
    out = tmp_path_factory.mktemp("reference") / "cmp"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        assert run_compare(spec(out)).ok
    return out


def assert_same_models(out: Path, reference: Path) -> None:
    for phase in PHASES:
        mine, theirs = (load_file(phase_dir(root, phase) / "model.safetensors") for root in (out, reference))
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), f"{phase}: the final models differ"


DRIVERS: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _stop_drivers():
    """A failed test leaves no driver running (its phases then end with their workers)."""
    yield
    while DRIVERS:
        process = DRIVERS.pop()
        if process.poll() is None:
            process.kill()
            process.wait()


def driver(out: Path, address: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "spt_hf", *arguments(out), "--launcher", "ray", "--ray_address", address]
    DRIVERS.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return DRIVERS[-1]


def mid_run(out: Path, phase: str, process: subprocess.Popen, timeout: float = 300) -> int:
    """Wait until `phase` has committed a checkpoint before its last and is still training; the pid of its process.
    (The timeout allows for a loaded 2-core machine, where starting Ray's workers and a phase takes minutes.)"""
    folder, deadline = phase_dir(out, phase), time.monotonic() + timeout
    while time.monotonic() < deadline:
        owner = live_lock_owner(folder)
        early = [p for p in folder.glob("checkpoint-*") if p.name not in ("checkpoint-175", "checkpoint-200")]
        if owner and early and not (folder / "results.json").exists():
            return owner["pid"]
        assert process.poll() is None, process.stdout.read()[-3000:]
        time.sleep(0.05)
    pytest.fail(f"{phase} did not reach its first checkpoint within {timeout} s")


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


def trainings(out: Path, phase: str) -> int:
    """How many processes trained `phase` (each announces itself once, a finished phase does not)."""
    return (out / "digits/transformer/full/seed0/logs" / f"{phase}.log").read_text().count(f"spt_hf: {phase} on ")


def test_a_killed_worker_and_a_killed_phase_are_run_again_and_resume_exactly(cluster, reference, tmp_path):
    start, out = time.monotonic(), tmp_path / "cmp"
    process = driver(out, cluster)
    os.kill(parent(mid_run(out, "spt", process)), signal.SIGKILL)  # the Ray worker running the SPT task
    os.kill(mid_run(out, "finetune", process), signal.SIGKILL)  # the finetuning process itself
    output = finish(process)
    assert "2/2 ended (2 finished, 0 failed, 0 blocked)" in output
    assert trainings(out, "spt") == 2 and trainings(out, "finetune") == 2  # each resumed once
    assert "resuming spt from" in (out / "digits/transformer/full/seed0/logs/spt.log").read_text()
    assert_same_models(out, reference)
    print(f"killed worker and killed phase: {time.monotonic() - start:.0f} s")


def test_a_killed_driver_stops_its_phases_and_the_rerun_resumes_them(cluster, reference, tmp_path):
    start, out = time.monotonic(), tmp_path / "cmp"
    process = driver(out, cluster)
    pid = mid_run(out, "spt", process)
    process.kill()  # the driver only: its phase runs in a Ray worker
    process.wait()
    deadline = time.monotonic() + 60
    while live_lock_owner(phase_dir(out, "spt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not live_lock_owner(phase_dir(out, "spt")), f"phase process {pid} outlived its driver"
    assert (phase_dir(out, "spt") / LOCK_FILE).exists() and not (phase_dir(out, "spt") / "results.json").exists()
    output = finish(driver(out, cluster))
    assert (
        "2/2 ended (2 finished, 0 failed, 0 blocked)" in output
        and "taking over the lock" in (out / "digits/transformer/full/seed0/logs/spt.log").read_text()
    )
    assert trainings(out, "spt") == 2 and trainings(out, "finetune") == 1
    assert_same_models(out, reference)
    print(f"killed driver, rerun: {time.monotonic() - start:.0f} s")


def test_a_second_compare_while_the_first_runs_waits_for_its_phases(cluster, reference, tmp_path):
    start, out = time.monotonic(), tmp_path / "cmp"
    first = driver(out, cluster)
    pid = mid_run(out, "spt", first)
    os.kill(pid, signal.SIGSTOP)  # hold the first compare's SPT phase until the second one has found it running
    second = driver(out, cluster)
    log, deadline = out / "digits/transformer/full/seed0/logs/spt.log", time.monotonic() + 90
    while "compare: waiting for" not in log.read_text() and time.monotonic() < deadline:
        assert second.poll() is None, second.stdout.read()[-3000:]
        time.sleep(0.2)
    os.kill(pid, signal.SIGCONT)
    assert "compare: waiting for another task running" in log.read_text()
    for process in (first, second):
        assert "2/2 ended (2 finished, 0 failed, 0 blocked)" in finish(process)
    assert "is finished" in log.read_text()  # the second compare's SPT task found it finished
    assert trainings(out, "spt") == 1 and trainings(out, "finetune") == 1  # no phase trained twice
    assert_same_models(out, reference)
    print(f"second compare while the first runs: {time.monotonic() - start:.0f} s")


def test_tuning_trials_run_as_ray_tasks_that_report_to_their_study_and_are_pruned_by_it(cluster, tmp_path):
    """`--tune --tune_pruner median` on the Ray cluster: each trial's phase, a Ray task on a worker that the head
    started before the driver (so it is given the study's URL, not inheriting it), reports its evaluations to the
    study; the first trials run their budget, a pruned trial stopped at its last reported step."""
    optuna = pytest.importorskip("optuna")
    out = tmp_path / "cmp"
    words = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", "0", "--recipes_dir", "recipes/cpu"]
    words += ["--output_dir", str(out), "--launcher", "ray", "--ray_address", cluster, "--tune", "--tune_trials", "3"]
    words += ["--tune_max_steps", "6", "--tune_pruner", "median", "--eval_steps", "2", "--save_steps", "2"]
    words += ["--hidden_size", "16", "--num_hidden_layers", "1", "--per_device_eval_batch_size", "64"]
    done = subprocess.run([sys.executable, "-m", "spt_hf", *words, "--total_steps", "8"], capture_output=True,
                          text=True, timeout=1500)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    url = f"sqlite:///{out / 'tuning.db'}"
    for arm, phase in (("scratch", "scratch"), ("spt", "finetune")):
        trials = optuna.load_study(study_name=f"digits/dlr/{arm}", storage=url).trials
        assert [t.state.name for t in trials[:2]] == ["COMPLETE", "COMPLETE"]  # the pruner's startup trials
        for trial in trials:
            result = (out / "digits/dlr/tune" / arm / f"trial{trial.number}" / phase / "results.json").read_text()
            steps = json.loads(result)["budget"]["steps"]
            assert sorted(trial.intermediate_values) == list(range(2, steps + 1, 2))  # reported by the Ray task
            assert (trial.state.name == "PRUNED") == ("tune_pruned" in json.loads(result))
            assert steps == 6 or trial.state.name == "PRUNED"
