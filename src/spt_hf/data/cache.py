"""Where spt_hf caches task data: one root that the Arrow caches and the custom tasks' inferences share."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$SPT_HF_CACHE`` if set, else ``~/.cache/spt_hf/tasks``."""
    env = os.environ.get("SPT_HF_CACHE")
    return Path(env).expanduser() if env else Path("~/.cache/spt_hf/tasks").expanduser()
