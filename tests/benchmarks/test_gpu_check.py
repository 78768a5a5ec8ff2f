"""benchmarks/gpu_check.sh cannot rot: it parses, its budgets fit one 8-minute device call, its carried wheels are the
pinned versions, and every step runs in its CPU dry-run mode (the whole script: slow; one step in the default suite)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEPS = ["setup", "parity", "estimate", "compile", "crossover", "fsdp"]


def test_the_script_parses_and_its_budgets_fit_one_call():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    budgets = [int(m) for m in re.findall(r"^run_step \w+ (\d+) ", SCRIPT.read_text(), flags=re.M)]
    assert len(budgets) == len(STEPS) - 1 and 60 + sum(budgets) <= 450  # setup's minute, then the steps


def test_the_carried_wheels_are_the_pinned_versions():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split() if "==" in line)
    wheels = [line for line in (ROOT / "benchmarks" / "gpu_wheels.txt").read_text().splitlines() if "==" in line]
    assert wheels and all(pins.get(name) == version for name, version in (w.split("==") for w in wheels)), wheels


def run_dry(*command: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def test_one_step_runs_its_dry_run():
    done = run_dry(sys.executable, "benchmarks/gpu_steps.py", "fsdp", "--dry_run")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].startswith("fsdp ok")


@pytest.mark.slow  # about 1.5 min on 2 CPU cores
def test_the_whole_check_runs_its_dry_run(tmp_path):
    out = tmp_path / "out"
    done = run_dry("env", f"OUT={out}", "bash", str(SCRIPT), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary] == STEPS and all(" rc=0 " in line for line in summary)
    assert len(list(out.iterdir())) <= 8
