"""Helpers of the Hub tests (test infrastructure): the test token, the tiny run's recipe, and the handles on the local
Hub server and on client subprocesses that `conftest.py` provides as fixtures.

huggingface_hub reads HF_ENDPOINT, HF_TOKEN, HF_HUB_DISABLE_XET and HF_HUB_CACHE when it is imported, and the pytest
process has imported it long before (offline), so every call to the local Hub runs in a fresh subprocess
(`HubClient.run`) whose environment points at the server. Every output is kept, for the token-hygiene test.
"""

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

SERVER = Path(__file__).with_name("hub_server.py")
TOKEN = "hf_spttest_" + secrets.token_hex(12)  # random: finding it anywhere means it leaked
BLOCK_SPT_HF = '''
import importlib.abc, sys
class _WithoutSptHf(importlib.abc.MetaPathFinder):
    """This process runs as if spt_hf were not installed."""
    def find_spec(self, name, path=None, target=None):
        if name == "spt_hf" or name.startswith("spt_hf."):
            raise ModuleNotFoundError(f"No module named {name!r} (spt_hf is blocked in this process)")
        return None
sys.meta_path.insert(0, _WithoutSptHf())
'''
TINY_RUN = {
    "task": "digits",
    "task_options": {"input_kind": "tokens"},
    "model_type": "spt_rotary_transformer",
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 128,
    "learning_rate": 3e-3,
    "max_steps": 4,
    "eval_strategy": "steps",
    "eval_steps": 2,
    "save_strategy": "steps",
    "save_steps": 2,
    "logging_steps": 2,
    "report_to": "tensorboard",
    "seed": 0,
}


@dataclass
class HubServer:
    url: str
    root: Path  # objects/ and state.json under root / "store", the request log in root / "server.log"
    pid: int

    def state(self) -> dict:
        return json.loads((self.root / "store" / "state.json").read_text())


@dataclass
class HubClient:
    server: HubServer
    home: Path
    task_cache: Path
    outputs: list[str] = field(default_factory=list)

    def env(self, token: str | None = TOKEN) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
        env.update(
            HF_ENDPOINT=self.server.url,
            HF_HUB_DISABLE_XET="1",
            HF_HOME=str(self.home),
            HF_HUB_CACHE=str(self.home / "hub"),
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_DATASETS_OFFLINE="1",
            TRANSFORMERS_VERBOSITY="error",
            SPT_HF_CACHE=str(self.task_cache),
            TOKENIZERS_PARALLELISM="false",
        )
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    def run(self, code: str, args: dict | None = None, *, token: str | None = TOKEN, without_spt_hf: bool = False):
        """Run `code` in a fresh interpreter talking to the server, with `ARGS` = `args`; it must exit with 0.
        Returns the completed process (text output)."""
        arguments = f"import json\nARGS = json.loads({json.dumps(args or {})!r})\n"
        prelude = (BLOCK_SPT_HF if without_spt_hf else "") + arguments
        process = subprocess.run(
            [sys.executable, "-c", prelude + code],
            env=self.env(token),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=600,
        )
        self.outputs += [process.stdout, process.stderr]
        if process.returncode != 0:
            raise AssertionError(f"client process failed ({process.returncode}):\n{process.stdout}\n{process.stderr}")
        return process
