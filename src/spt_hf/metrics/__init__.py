"""`evaluate` metric modules shipped with spt_hf and loaded by path (the Hub's metric scripts are not needed)."""

from pathlib import Path

import evaluate

METRICS_DIR = Path(__file__).parent


def load_metric(name: str) -> evaluate.EvaluationModule:
    """Load one of the shipped metrics (`accuracy`, `mae`, `r2`) by its folder, without network access."""
    folder = METRICS_DIR / name
    if not (folder / f"{name}.py").is_file():
        available = sorted(p.name for p in METRICS_DIR.iterdir() if (p / f"{p.name}.py").is_file())
        raise ValueError(f"No shipped metric {name!r}; available: {available}.")
    return evaluate.load(str(folder))
