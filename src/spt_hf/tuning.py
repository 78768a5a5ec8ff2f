"""The contract of `spt-hf compare --tune` (docs/tuning.md), in one place: what the search is (`TuneSpec`), its arms and
studies, its pruner and sampler, the files it writes (`tuning.json` in the comparison folder, `tune_trial.json` in each
trial's run folder: a `TrialRecord`), the environment variable that carries the study database's URL to the trial
phases, and the chosen values each seeded phase trains with.

Who reads it: compare's search stage (compare/tune.py) asks and tells the trials and writes `tuning.json`; compare's
plan (compare/plan.py) reads the chosen values from it; a trial's phase (training/tune_trial.py) reads its
`TrialRecord` and reports to its study; the report (report/tuning.py, report/rows.py) reads both files. Standard
library and `phases` / `checkpoints` only; Optuna, an optional dependency, is imported where a study is opened.
"""

import importlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .checkpoints import write_json_atomic
from .phases import BASELINE_PHASE, FINETUNE_PHASE, SPT_PHASE

SUMMARY_FILE = "tuning.json"  # in the comparison folder: every study's trials and chosen values
TRIAL_FILE = "tune_trial.json"  # in each trial's run folder: its `TrialRecord`
DB_FILE = "tuning.db"  # the default study database (SQLite) in the comparison folder
LOCK_FILE = "tuning.lock"  # one driver per comparison folder
# The study database URL (it may hold a password): the driver puts it in its environment while its trials run, the
# launchers pass it on, and a trial's phase opens its study there.
TUNE_STORAGE = "SPT_HF_TUNE_STORAGE"

# The arms of a search: the baseline phase; finetuning from the first seed's SPT checkpoint; with `spt` (--tune_spt),
# SPT + finetuning pairs.
SCRATCH_ARM, SPT_ARM, PAIR_ARM = "scratch", "spt", "spt_pair"
ARMS = (SCRATCH_ARM, SPT_ARM, PAIR_ARM)
ARM_PHASES = {SCRATCH_ARM: BASELINE_PHASE, SPT_ARM: FINETUNE_PHASE, PAIR_ARM: FINETUNE_PHASE}  # the trials' phase
SPT_PREFIX = "spt."  # a key of the space searched in the SPT phase of a pair (`spt.learning_rate`)

PRUNERS = ("none", "median")
# The median pruner: the first trials of each study run their whole budget (the median needs them), and a later
# trial stops at an evaluation where its validation metric is below the median of the earlier trials' at that step.
PRUNER_STARTUP_TRIALS = 2
SAMPLER = "TPESampler"  # seeded with the comparison's first seed
TRIAL_METRICS = ("accuracy", "r2")  # the trial's value: the first of these the phase's evaluation reports
ENDED_STATES = ("COMPLETE", "PRUNED", "FAIL")  # a trial in one of these is never run again

# The command-line options and YAML keys of a search (`--tune_trials`, `tune_trials:`) -> the `TuneSpec` field.
TUNE_OPTIONS = {
    "tune_trials": "trials",
    "tune_space": "space",
    "tune_storage": "storage",
    "tune_max_steps": "max_steps",
    "tune_spt": "spt",
    "tune_pruner": "pruner",
}


@dataclass(frozen=True)
class TuneSpec:
    """The search of `spt-hf compare --tune`, the same for every (task, architecture, arm).

    Args:
        trials: trials per study (`--tune_trials`).
        space: the search space YAML (`--tune_space`); None: the shipped `compare/default-space.yaml`.
        storage: the studies' database, any SQLAlchemy URL (`--tune_storage`); None: SQLite `OUTPUT_DIR/tuning.db`.
        max_steps: steps of each trial (`--tune_max_steps`); None: the phase's own budget.
        spt: each SPT-arm trial an SPT + finetuning pair, the SPT phase's optimiser settings searched too
            (`--tune_spt`).
        pruner: `none`, or `median`: stop a trial at an evaluation below its study's median (`--tune_pruner`).
    """

    trials: int = 10
    space: str | None = None
    storage: str | None = None
    max_steps: int | None = None
    spt: bool = False
    pruner: str = "none"

    def __post_init__(self) -> None:
        for name in ("trials", "max_steps"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"`tune_{name}` must be a positive integer, got {value!r}.")
        if self.pruner not in PRUNERS:
            raise ValueError(f"`tune_pruner`={self.pruner!r}; expected one of {list(PRUNERS)}.")
        if not isinstance(self.spt, bool):
            raise ValueError(f"`tune_spt` must be true or false, got {self.spt!r}.")

    @classmethod
    def from_options(cls, values: dict) -> "TuneSpec | None":
        """The search of a comparison's options (`tune` and the `tune_*` keys, taken out of `values`): None without
        `tune`; a `tune_*` option that changes the search without `tune` is refused in one line."""
        tune = values.pop("tune", None)
        given = {TUNE_OPTIONS[k]: values.pop(k) for k in list(values) if k in TUNE_OPTIONS}
        given = {k: v for k, v in given.items() if v is not None}
        if not tune:
            if {k for k, v in given.items() if k != "trials" and v not in (False, "none")}:
                raise ValueError(
                    "--tune_spt, --tune_space, --tune_storage, --tune_max_steps and --tune_pruner go with --tune."
                )
            return None
        return cls(**given)

    @property
    def arms(self) -> tuple[str, str]:
        """The studies' arms: the baseline's, and the SPT side's (`spt`, or `spt_pair` with `spt`)."""
        return SCRATCH_ARM, PAIR_ARM if self.spt else SPT_ARM


def study_name(task: str, architecture: str, arm: str) -> str:
    """The study of one (task, architecture, arm): `digits/s4/scratch`."""
    if arm not in ARMS:
        raise ValueError(f"Unknown tuning arm {arm!r}; expected one of {list(ARMS)}.")
    return f"{task}/{architecture}/{arm}"


def require_optuna():
    """The optuna module, or the one-line error naming the extra that installs it."""
    try:  # (by name: an optional package, imported only where a study is opened)
        optuna = importlib.import_module("optuna")
    except ImportError:
        raise ValueError("--tune needs Optuna: pip install 'spt_hf[tune]' (or pip install 'optuna>=5,<6').") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def make_pruner(name: str):
    """The Optuna pruner of `--tune_pruner NAME` (`none`: Optuna's NopPruner, which never prunes)."""
    optuna = require_optuna()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"--tune_pruner {name!r}: expected one of {list(PRUNERS)}.")


def make_sampler(seed: int):
    """The studies' sampler: TPE seeded with the comparison's first seed (`sampler_text` names it)."""
    return require_optuna().samplers.TPESampler(seed=seed)


def sampler_text(seed: int) -> str:
    return f"{SAMPLER}(seed={seed})"


@dataclass(frozen=True)
class TrialRecord:
    """What a trial's run folder holds in `tune_trial.json`: its study and trial number, the values it trains with,
    the phase that is its objective (a pair's SPT phase shares the folder), the pruner and the storage URL without
    its password (the phase opens the study at `TUNE_STORAGE` when its environment has it, else here)."""

    study: str
    number: int
    phase: str
    pruner: str = "none"
    storage: str = ""
    params: dict = field(default_factory=dict)

    def write(self, run_dir: str | Path) -> Path:
        """Write the record into the trial's run folder (atomically); returns its path."""
        path = Path(run_dir) / TRIAL_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, asdict(self))
        return path

    @classmethod
    def read(cls, run_dir: str | Path) -> "TrialRecord | None":
        """The record of a trial's run folder; None in any other run folder."""
        path = Path(run_dir) / TRIAL_FILE
        return cls(**json.loads(path.read_text())) if path.is_file() else None

    @classmethod
    def of_phase(cls, phase_dir: str | Path, phase: str) -> "TrialRecord | None":
        """The record of the trial whose objective is the phase writing into `phase_dir`; else None."""
        record = cls.read(Path(phase_dir).parent)
        return record if record is not None and record.phase == phase else None

    def open_trial(self, url: str):
        """The trial as an `optuna.trial.Trial` of its study (loaded with the comparison's pruner), for its phase to
        `report` evaluations to and ask `should_prune`.

        The driver asked this trial (`study.ask()`) in another process; Optuna has no public way to re-open an asked
        trial by number elsewhere (optuna/optuna#2987 asks for one; `FrozenTrial.report` does nothing), so the one
        step off its recommended path is here: the `Trial(study, trial_id)` constructor, with the trial's id from
        the storage. `Trial.report` and `Trial.should_prune` then run Optuna's own checks and its pruner."""
        optuna = require_optuna()
        storage = optuna.storages.get_storage(url)
        study = optuna.load_study(study_name=self.study, storage=storage, pruner=make_pruner(self.pruner))
        study_id = storage.get_study_id_from_name(self.study)
        return optuna.trial.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, self.number))


@dataclass(frozen=True)
class StudyProgress:
    """One study as `tuning.json` last recorded it: its trials ended (COMPLETE, PRUNED, FAIL) and asked, and the
    best trial's values (None before a trial completed)."""

    name: str
    ended: int
    asked: int
    best: dict | None

    def done(self, trials: int) -> bool:
        """Whether the study has run its `trials` (then its chosen values are final)."""
        return self.ended >= trials


def read_progress(output_dir: str | Path) -> dict[str, StudyProgress]:
    """{study name: its progress} from the comparison's `tuning.json` ({} before a search wrote it)."""
    path = Path(output_dir) / SUMMARY_FILE
    if not path.is_file():
        return {}
    found = {}
    for study in json.loads(path.read_text())["studies"]:
        ended = sum(t["state"] in ENDED_STATES for t in study["trials"])
        best = study["best"]["params"] if study.get("best") else None
        found[study["name"]] = StudyProgress(study["name"], ended, len(study["trials"]), best)
    return found


def chosen_overrides(values: dict, phase: str, arm: str) -> dict:
    """The recipe overrides a seeded `phase` takes from its arm's chosen `values`: the finetuning keys for the arm's
    finetuning (or baseline) phase; the `spt.` keys, unprefixed, for the SPT phase of a pair arm."""
    if phase == SPT_PHASE:
        if arm != PAIR_ARM:
            return {}
        return {k.removeprefix(SPT_PREFIX): v for k, v in values.items() if k.startswith(SPT_PREFIX)}
    return {k: v for k, v in values.items() if not k.startswith(SPT_PREFIX)}


def seeded_arm(spec: TuneSpec, phase: str) -> str:
    """The arm whose study chooses a seeded phase's values: the baseline's for the baseline, the SPT side's for
    finetuning and (with `spt`, whose pairs train it) for SPT."""
    return SCRATCH_ARM if phase == BASELINE_PHASE else spec.arms[1]


__all__ = [
    "TUNE_STORAGE",
    "StudyProgress",
    "TrialRecord",
    "TuneSpec",
    "chosen_overrides",
    "read_progress",
    "study_name",
]
