"""The built wheel, installed bare (no extras) into a fresh virtual environment through constraints.txt, works outside
the checkout: recipes are found by name from any folder, `spt-hf run` and `spt-hf demo` train and write their report
with its plots, so the core dependencies cover the main job.

Slow (a fresh environment takes a minute or two to install): `make test-wheel` runs it, and CI does.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = ["--total_steps", "8", "--eval_steps", "4", "--save_steps", "4", "--logging_steps", "4"]

pytestmark = pytest.mark.slow


def run(cmd: list[str], cwd: Path, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{output}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv holding the wheel built from this checkout with its core dependencies only (pinned), and a clean
    environment."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", SPT_HF_CACHE=str(root / "cache"), MPLBACKEND="Agg")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(root / "dist")], root, env)
    (wheel,) = (root / "dist").glob("spt_hf-*.whl")
    run([sys.executable, "-m", "venv", str(root / "venv")], root, env)
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q"]
    run([*pip, "-c", str(REPO / "constraints.txt"), str(wheel)], root, env)  # bare: no extras
    work = root / "elsewhere"
    work.mkdir()
    return root / "venv" / "bin", work, env


def test_the_package_comes_from_the_wheel_with_its_recipes(installed):
    bin_dir, work, env = installed
    where = run([str(bin_dir / "python"), "-c", "import spt_hf; print(spt_hf.__file__)"], work, env).stdout
    assert "site-packages" in where and str(REPO) not in where
    probe = "import importlib.util as u; print([m for m in ('tensorboard', 'submitit', 'ray') if u.find_spec(m)])"
    assert run([str(bin_dir / "python"), "-c", probe], work, env).stdout.strip() == "[]"  # no extra came along
    names = run([str(bin_dir / "spt-hf"), "recipes", "cpu"], work, env).stdout.split()
    assert "cpu/digits-transformer-spt.yaml" in names and "cpu/listops-s4-finetune.yaml" in names
    path = run([str(bin_dir / "spt-hf"), "recipes", "path", "accelerate/multi_gpu.yaml"], work, env).stdout.strip()
    assert Path(path).is_file() and "site-packages" in path


def test_a_recipe_runs_by_name_from_another_folder(installed):
    bin_dir, work, env = installed
    cmd = [str(bin_dir / "spt-hf"), "run", "--config", "cpu/digits-transformer-spt.yaml", "--with-scratch", *TINY]
    run([*cmd, "--output_dir", "runs/by-name"], work, env)
    for phase in ("spt", "finetune", "scratch"):
        results = json.loads((work / "runs" / "by-name" / phase / "results.json").read_text())
        assert results["phase"] == phase and results["budget"]["steps"] > 0
    assert (work / "runs" / "by-name" / "report.md").is_file()


def test_the_demo_runs_outside_the_checkout(installed):
    bin_dir, work, env = installed
    out = run([str(bin_dir / "spt-hf"), "demo", "--seeds", "0", "--output-dir", "runs/demo", *TINY], work, env).stdout
    assert "Test accuracy on digits" in out
    assert (work / "runs" / "demo" / "report.md").is_file()
    assert (work / "runs" / "demo" / "learning_curves.png").is_file()  # matplotlib is a core dependency
    assert (work / "runs" / "demo" / "digits" / "transformer" / "full" / "seed0" / "scratch" / "results.json").is_file()
