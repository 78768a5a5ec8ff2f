"""Fixtures of the Hub tests.

- `hub_server`: the local Hub HTTP API (tests/hub/hub_server.py, test infrastructure), started once per session on a
  free port of 127.0.0.1 and stopped by its PID.
- `hub_client`: runs client code (huggingface_hub, transformers, spt_hf) in fresh processes talking to that server.
- `tiny_run`: one tiny `spt-hf run` (SPT, finetuning, scratch baseline) on the bundled digits data, ~20 s.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hub_testing import SERVER, TINY_RUN, TOKEN, HubClient, HubServer


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub_server")
    with open(root / "server.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "--root", str(root / "store"), "--port", "0"],
            env={**os.environ, "LOCAL_HUB_TOKENS": TOKEN},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        ready = process.stdout.readline().split()
        if ready[:1] != ["LOCAL_HUB_READY"]:
            raise RuntimeError(f"the local Hub server did not start: {(root / 'server.log').read_text()}")
        yield HubServer(url=ready[1], root=root, pid=process.pid)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def hub_client(hub_server, tmp_path_factory):
    home = tmp_path_factory.mktemp("hf_home")
    return HubClient(hub_server, home, tmp_path_factory.getbasetemp() / "hub_tasks")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A tiny `spt-hf run --with-scratch`: run/{spt,finetune,scratch}/ with models, results and TensorBoard logs."""
    from spt_hf.training import load_recipe
    from spt_hf.training.pipeline import run

    root = tmp_path_factory.mktemp("tiny_run")
    previous = os.environ.get("SPT_HF_CACHE")
    os.environ["SPT_HF_CACHE"] = str(tmp_path_factory.getbasetemp() / "hub_tasks")
    try:
        spt = load_recipe(None, {**TINY_RUN, "objective": "masked", "output_dir": str(root / "run")})
        finetune = load_recipe(None, {**TINY_RUN, "output_dir": str(root / "run")})
        run(spt, finetune, with_scratch=True)
    finally:
        if previous is None:
            os.environ.pop("SPT_HF_CACHE")
        else:
            os.environ["SPT_HF_CACHE"] = previous
    return root / "run"
