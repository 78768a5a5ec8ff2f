"""`evaluate` metric modules shipped with spt_hf and loaded by path (the Hub's metric scripts are not needed)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import evaluate

METRICS_DIR = Path(__file__).parent


@functools.cache
def load_metric(name: str) -> evaluate.EvaluationModule:
    """Load one of the shipped metrics (`accuracy`, `mae`, `r2`) by its folder, without network access; once per
    process. `evaluate` is imported here, at a phase's first evaluation: importing it costs about as much as torch and
    transformers together, which a phase would otherwise pay before its first training step."""
    import evaluate

    folder = METRICS_DIR / name
    if not (folder / f"{name}.py").is_file():
        available = sorted(p.name for p in METRICS_DIR.iterdir() if (p / f"{p.name}.py").is_file())
        raise ValueError(f"No shipped metric {name!r}; available: {available}.")
    return evaluate.load(str(folder))
