"""Run Python code in a fresh process where `import spt_hf` fails, as on a machine without spt_hf installed."""

import json
import os
import subprocess
import sys
from pathlib import Path

BLOCK = """
import sys


class _NoSptHf:
    def find_spec(self, name, path=None, target=None):
        if name == "spt_hf" or name.startswith("spt_hf."):
            raise ImportError("spt_hf is not installed here")


sys.meta_path.insert(0, _NoSptHf())
"""
GUARD = """
try:
    import spt_hf
except ImportError:
    pass
else:
    raise SystemExit("spt_hf was imported: the block failed")
"""


def run_without_spt_hf(code: str, tmp_path: Path) -> object:
    """Run `code` (which prints one JSON value on its last line) with spt_hf unimportable; returns that value."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp_path / "hf_modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    env.update(OMP_NUM_THREADS="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    script = BLOCK + GUARD + code
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1][:1] in "[{", f"no JSON line; stdout: {done.stdout[-2000:]} stderr: {done.stderr[-2000:]}"
    return json.loads(lines[-1])
