"""The example plugin (examples/plugin, `spt-hf-lru`) installed as a user would: into a fresh virtual environment
(seeing this one's packages, with this checkout's spt_hf), its own tests (spt_hf's kit), then a recipe-free
`spt-hf compare` of the LRU beside S4 and the Transformer on digits. `make test-plugin` runs it."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "plugin"


def run(command: list, cwd: Path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, (
        f"{' '.join(map(str, command))} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    )
    return result.stdout


def plugin_venv(folder: Path) -> Path:
    """A virtual environment whose site-packages lead to this checkout's spt_hf, then to this environment's packages;
    the plugin installed into it in editable mode (its entry point registered there only)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(folder)], folder.parent)
    python = folder / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], folder).strip())
    (site / "spt_hf_parent.pth").write_text(f"{ROOT / 'src'}\n{sysconfig.get_paths()['purelib']}\n")
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(PLUGIN)], folder)
    return python


@pytest.mark.slow
def test_the_example_plugin_installs_passes_the_kit_and_compares(tmp_path):
    python = plugin_venv(tmp_path / "venv")
    run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], PLUGIN)
    (tmp_path / "digits.yaml").write_text("task: digits\ntask_options: {input_kind: tokens}\n")
    compare = ["-m", "spt_hf", "compare", "--task_config", "digits.yaml", "--architectures", "lru", "s4"]
    compare += ["transformer", "--preset", "tiny", "--max_steps", "5", "--seeds", "0", "--output_dir", "out"]
    run([str(python), *compare], tmp_path)
    report = next((tmp_path / "out").rglob("report.md")).read_text()
    assert "| lru |" in report and "| spt_s4 |" in report and "| spt_rotary_transformer |" in report
    finetuned = tmp_path / "out" / "digits" / "lru" / "full" / "seed0" / "finetune"
    assert '"plugin": "spt-hf-lru"' in (finetuned / "spt_plugin.json").read_text()
    assert (finetuned / "spt_plugin_modeling_lru.py").is_file()  # the remote code of the plugin's checkpoint
    card = run(
        [str(python), "-c", f"from spt_hf.hub.push import write_model_card; write_model_card({str(finetuned)!r})"],
        tmp_path,
    )
    assert card == "" and "plugin `spt-hf-lru` 0.1.0" in (finetuned / "README.md").read_text()
