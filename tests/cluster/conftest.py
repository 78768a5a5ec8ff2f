"""The `slurm` fixture: a real single-node Slurm cluster (slurm_cluster.py) for this session's tests, stopped at the
end. Where it cannot be started (not root, no apt-get, a package that does not install), the tests skip saying why."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from cluster.slurm_cluster import ClusterUnavailable, our_jobs, start, stop


@pytest.fixture(scope="session")
def slurm():
    # not under pytest's temporary folder: that one is private to root, and slurmctld runs as user slurm
    folder = Path(tempfile.mkdtemp(prefix="spt_hf_slurm_"))
    try:
        info = start(folder)
    except ClusterUnavailable as error:
        pytest.skip(f"no Slurm cluster: {error}")
    print(f"\nslurm cluster up in {info['seconds']} s ({folder})")
    before = os.environ.get("SLURM_CONF")
    os.environ.update(info["env"])
    try:
        yield info
    finally:
        stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.getbasetemp() / "spt_cache"
    monkeypatch.setenv("SPT_HF_CACHE", str(root / "tasks"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_jobs_left(slurm):
    """Every test ends with no job of its own queued or running (those left are cancelled, and the test fails)."""
    yield
    left = our_jobs()
    if left:
        subprocess.run(["scancel", *left], check=False)
    assert not left, f"the test left Slurm jobs queued or running: {left}"
