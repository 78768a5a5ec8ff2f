"""The search space and the study of `spt-hf compare --tune` (docs/compare.md, "Fair tuning"): the space YAML (recipe
key -> {type, low, high, log, choices}) as Optuna distributions, the studies' storage, and the lock that
keeps one driver per comparison. The names they share with the trial phases and the report are spt_hf/tuning.py's.
"""

import contextlib
import fcntl
import importlib
import math
import os
from pathlib import Path

from ..recipes.yaml_text import load_yaml
from ..tuning import DB_FILE, LOCK_FILE, SPT_PREFIX, TUNE_STORAGE, require_optuna
from .plan import OWNED_KEYS

DEFAULT_SPACE = Path(__file__).with_name("default-space.yaml")
TYPES = ("float", "int", "categorical")
# Recipe keys a trial may not search: compare sets them per phase, or they are the budget (--tune_max_steps).
BUDGET_KEYS = ("max_steps", "total_steps", "spt_fraction", "num_train_epochs")
SPT_OPTIMISER_KEYS = ("learning_rate", "weight_decay", "warmup_steps")  # searched for SPT too with --tune_spt


def load_space(path: str | Path | None) -> dict[str, dict]:
    """The search space of `path` (default: the shipped `compare/default-space.yaml`), each entry checked; a
    bad entry is one line naming the key and the fix. Whether each key is a recipe key is checked by the plan."""
    path = Path(path) if path is not None else DEFAULT_SPACE
    if not path.is_file():
        raise FileNotFoundError(f"--tune_space {path}: no such file; give a YAML of recipe key -> {{type, low, high}}.")
    try:
        space = load_yaml(path.read_text())
    except Exception as error:  # a YAML syntax error or a key given twice, in one line
        raise ValueError(
            f"--tune_space {path}: not a readable YAML mapping ({' '.join(str(error).split())})."
        ) from None
    if not isinstance(space, dict) or not space:
        raise ValueError(f"--tune_space {path}: expected a mapping of recipe key -> {{type, low, high, log, choices}}.")
    for key, entry in space.items():
        check_entry(key, entry, path)
    return space


def check_entry(key: str, entry, path: Path) -> None:
    """One entry of the space: an allowed key, a known type, bounds or choices that make sense."""
    where = f"--tune_space {path.name}: `{key}`"
    if key in OWNED_KEYS or key in BUDGET_KEYS or key == "seed":
        fix = "the trial budget is --tune_max_steps" if key in BUDGET_KEYS else "compare sets it per phase"
        raise ValueError(f"{where} is compare's own key and cannot be searched ({fix}); remove it from the space.")
    if not isinstance(entry, dict) or entry.get("type") not in TYPES:
        raise ValueError(f"{where} needs `type:` one of {list(TYPES)} (got {entry!r}).")
    unknown = sorted(set(entry) - {"type", "low", "high", "log", "choices"})
    if unknown:
        raise ValueError(f"{where} has unknown field(s) {unknown}; allowed: type, low, high, log, choices.")
    if entry["type"] == "categorical":
        if not isinstance(entry.get("choices"), list) or not entry["choices"]:
            raise ValueError(f"{where}: a categorical entry needs a non-empty list `choices:`.")
        return
    low, high = entry.get("low"), entry.get("high")
    number = int if entry["type"] == "int" else (int, float)
    if not all(isinstance(v, number) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high)):
        raise ValueError(f"{where}: `low` and `high` must be {entry['type']} numbers (got {low!r}, {high!r}).")
    if not low < high or (entry.get("log") and low <= 0):
        raise ValueError(f"{where}: needs low < high (and low > 0 with log: true); got low={low}, high={high}.")


def split_space(space: dict[str, dict], pairs: bool) -> tuple[dict, dict]:
    """(the finetuning phase's space, the SPT phase's space keyed `spt.<key>`): with `pairs` (--tune_spt), the
    optimiser keys of the space are searched for the SPT phase too, with any `spt.<key>` the space gives itself."""
    spt = {k: e for k, e in space.items() if k.startswith(SPT_PREFIX)}
    if spt and not pairs:
        raise ValueError(f"--tune_space: {sorted(spt)} search the SPT phase, which only --tune_spt trains per trial.")
    if pairs:
        spt = {**{SPT_PREFIX + k: space[k] for k in SPT_OPTIMISER_KEYS if k in space}, **spt}
    return {k: e for k, e in space.items() if not k.startswith(SPT_PREFIX)}, spt


def distributions(space: dict[str, dict]) -> dict:
    """{key: optuna distribution} of a checked space."""
    optuna = require_optuna()
    made = {}
    for key, entry in space.items():
        if entry["type"] == "categorical":
            made[key] = optuna.distributions.CategoricalDistribution(entry["choices"])
        elif entry["type"] == "int":
            made[key] = optuna.distributions.IntDistribution(entry["low"], entry["high"], log=bool(entry.get("log")))
        else:
            low, high = float(entry["low"]), float(entry["high"])
            made[key] = optuna.distributions.FloatDistribution(low, high, log=bool(entry.get("log")))
    return made


def sample_values(space: dict[str, dict]) -> dict:
    """One value per key (low, or the first choice): what the plan loads each recipe with to check the keys."""
    return {k: e["choices"][0] if e["type"] == "categorical" else e["low"] for k, e in space.items()}


def storage_url(output_dir: str | Path, storage: str | None) -> str:
    """The study database: `storage` (any SQLAlchemy URL), or SQLite `OUTPUT_DIR/tuning.db`."""
    if storage:
        return storage
    return f"sqlite:///{(Path(output_dir) / DB_FILE).resolve()}"


def shown_url(url: str) -> str:
    """The storage URL without its password, for the report."""
    try:
        return importlib.import_module("sqlalchemy.engine").make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: Optuna will say so
        return url.split("@")[-1]


@contextlib.contextmanager
def trial_environment(url: str):
    """The study database's URL in this process's environment while the trials run, for their phases to report
    to (the launchers pass the environment on: local processes and Slurm jobs inherit it, Ray tasks are given it)."""
    before = os.environ.get(TUNE_STORAGE)
    os.environ[TUNE_STORAGE] = url
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TUNE_STORAGE, None)
        else:
            os.environ[TUNE_STORAGE] = before


class DriverLock:
    """One `--tune` driver per output folder: a second one is refused in one line while the first holds the lock
    (an advisory lock on `OUTPUT_DIR/tuning.lock`, released when the driver's process ends, however it ends)."""

    def __init__(self, output_dir: str | Path):
        self.path = Path(output_dir) / LOCK_FILE
        self.handle = None

    def __enter__(self) -> "DriverLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.close()
            raise ValueError(
                f"Another `spt-hf compare --tune` is driving {self.path.parent} (it holds {self.path}); wait for it, "
                "or give this one another --output_dir."
            ) from None
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
