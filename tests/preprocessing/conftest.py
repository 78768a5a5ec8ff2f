import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Task caches and generated data of these tests live in one temporary folder per session."""
    monkeypatch.setenv("SPT_HF_CACHE", str(tmp_path_factory.getbasetemp() / "spt_cache" / "tasks"))
