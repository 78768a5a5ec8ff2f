import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Task caches and generated data of the pipeline tests live in one temporary folder per session."""
    root = tmp_path_factory.getbasetemp() / "spt_cache"
    monkeypatch.setenv("SPT_HF_CACHE", str(root / "tasks"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
