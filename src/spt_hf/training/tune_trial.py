"""The phase's side of a `spt-hf compare --tune` trial (compare/tune.py asks and tells the trials; a trial is a
finetuning or baseline phase in its own run folder, which holds `tune_trial.json`). The phase reports each
evaluation's validation metric (accuracy or R², the metric the trial's value is) to its Optuna study as an
intermediate value at its step, and, when the comparison runs a pruner (`--tune_pruner median`), stops training where
the pruner says so: the phase then evaluates and exports the model it has, as any phase does, and its results.json
records `tune_pruned` (the step and the value). The phase may run on another machine (a Slurm job, a Ray task):
it opens the study database itself, at the URL in `TUNE_STORAGE` (the driver's environment, which the launchers pass
on; it may hold a password), else at the trial file's own (SQLite, or any URL without a password).
"""

import importlib
import json
import os
from pathlib import Path

from transformers import TrainerCallback

from ..phases import TUNE_STORAGE
from ..report.rows import TRIAL_FILE
from .trainer import agreed_max

PRUNERS = ("none", "median")
# The median pruner: the first trials of each study run their whole budget (the median needs them), and a later
# trial stops at an evaluation where its validation metric is below the median of the earlier trials' at that step.
PRUNER_STARTUP_TRIALS = 2
TRIAL_METRICS = ("accuracy", "r2")  # the trial's value: the first of these the phase's evaluation reports


def make_pruner(name: str):
    """The Optuna pruner of `--tune_pruner NAME` (`none`: Optuna's NopPruner, which never prunes)."""
    optuna = importlib.import_module("optuna")
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"--tune_pruner {name!r}: expected one of {list(PRUNERS)}.")


def read_trial(output_dir: str | Path, phase: str) -> dict | None:
    """The trial record of the phase in `output_dir`, when that phase is a trial's objective (its run folder holds
    `tune_trial.json` naming this phase); else None."""
    path = Path(output_dir).parent / TRIAL_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return record if record.get("phase") == phase else None


def trial_callbacks(output_dir: str | Path, phase: str) -> list:
    """[ReportToStudy] for a trial's objective phase, [] for any other phase."""
    record = read_trial(output_dir, phase)
    return [] if record is None else [ReportToStudy(record)]


class ReportToStudy(TrainerCallback):
    """Report each evaluation's validation metric to the trial's study and stop training when its pruner prunes
    the trial. The main process reports and decides; in a distributed phase every process stops at the same step."""

    def __init__(self, record: dict):
        self.record = record
        self.trial = None
        self.pruned: dict | None = None
        self.training = False  # the phase's evaluations after training (final, best model) are not the curve's

    def on_train_begin(self, args, state, control, **kwargs):
        self.training = True

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False

    def open_trial(self):
        """The Optuna trial this phase is: its study loaded with the comparison's pruner. A study that cannot be
        opened is one line (the trial then fails, and the driver records it as failed)."""
        optuna = importlib.import_module("optuna")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        url = os.environ.get(TUNE_STORAGE) or self.record["storage"]
        name, number = self.record["study"], self.record["number"]
        try:
            storage = optuna.storages.get_storage(url)
            pruner = make_pruner(self.record.get("pruner", "none"))
            study = optuna.load_study(study_name=name, storage=storage, pruner=pruner)
            study_id = storage.get_study_id_from_name(name)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        except Exception as error:  # an unreachable database, a password only the driver's environment holds
            why = " ".join(str(error).split("(Background on this error")[0].split())[:300]
            raise ValueError(
                f"tune trial {number} of {name}: cannot open its study at {self.record['storage']} ({why}); run the "
                f"phase from `spt-hf compare --tune`, which passes the database URL in {TUNE_STORAGE}."
            ) from None
        return optuna.trial.Trial(study, trial_id)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        value = next((metrics[f"eval_{m}"] for m in TRIAL_METRICS if f"eval_{m}" in (metrics or {})), None)
        prune = False
        if not self.training:
            return control
        if state.is_world_process_zero and value is not None:
            self.trial = self.trial or self.open_trial()
            self.trial.report(float(value), state.global_step)  # (a step already reported, after a resume: kept)
            # at the budget's last step the trial has run its course: it is complete, whatever the pruner says
            prune = state.global_step < state.max_steps and self.trial.should_prune()
        if args.world_size > 1:
            prune = bool(agreed_max(int(prune), args.device))
        if prune:
            control.should_training_stop = True
            self.pruned = {"step": state.global_step, "value": None if value is None else float(value)}
        return control


def pruned_at(callbacks: list) -> dict | None:
    """{step, value} where the trial's pruner stopped the phase, None when it trained its whole budget."""
    return next((c.pruned for c in callbacks if isinstance(c, ReportToStudy) and c.pruned), None)
