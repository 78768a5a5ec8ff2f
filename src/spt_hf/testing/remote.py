"""Loading a checkpoint with remote code in a process where neither spt_hf nor the plugin can be imported."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

BARE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    for name in json.loads(sys.argv[3]):
        sys.modules[name] = None  # not importable in this process, even where installed
    import torch, transformers
    folder, work = sys.argv[1], sys.argv[2]
    auto = getattr(transformers, sys.argv[4])
    model = auto.from_pretrained(folder, trust_remote_code=True).eval()
    inputs = torch.load(work + "/inputs.pt", weights_only=True)
    with torch.no_grad():
        out = model(**inputs)
    torch.save(out[0], work + "/out.pt")
    print(type(model).__module__)
    """
)


def load_in_a_bare_process(
    folder, inputs: dict, work_dir, auto_class: str = "AutoModelForSequenceClassification", blocked=()
) -> tuple[torch.Tensor, str]:
    """Load the checkpoint `folder` with `trust_remote_code=True` in `python -I` (no PYTHONPATH, no working folder)
    with spt_hf and the packages `blocked` (the plugin's) unimportable; returns the first output for `inputs` and
    the loaded class's module. A failure raises AssertionError with the process's last error line."""
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    torch.save(inputs, work / "inputs.pt")
    blocked = ["spt_hf", *blocked]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(work / "modules")}
    command = [sys.executable, "-I", "-c", BARE_SCRIPT, str(folder), str(work), json.dumps(blocked), auto_class]
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=work)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise AssertionError(f"remote-code load without spt_hf: {folder} does not load: {last}")
    return torch.load(work / "out.pt", weights_only=True), result.stdout.strip().splitlines()[-1]
