"""The phase's side of a `spt-hf compare --tune` trial (compare/tune.py asks and tells the trials; spt_hf/tuning.py
holds the contract; a trial is a finetuning or baseline phase in its own run folder, whose `TrialRecord` is
`tune_trial.json`). The phase reports each
evaluation's validation metric (accuracy or R², the metric the trial's value is) to its Optuna study as an
intermediate value at its step, and, when the comparison runs a pruner (`--tune_pruner median`), stops training where
the pruner says so: the phase then evaluates and exports the model it has, as any phase does, and its results.json
records `tune_pruned` (the step and the value). The phase may run on another machine (a Slurm job, a Ray task):
it opens the study database itself, at the URL in `TUNE_STORAGE` (the driver's environment, which the launchers pass
on; it may hold a password), else at the trial file's own (SQLite, or any URL without a password).
"""

import os
from pathlib import Path

from transformers import TrainerCallback

from ..tuning import TRIAL_METRICS, TUNE_STORAGE, TrialRecord
from .trainer import agreed_max


def trial_callbacks(output_dir: str | Path, phase: str) -> list:
    """[ReportToStudy] for a trial's objective phase (its run folder's `TrialRecord` names it), [] for any other."""
    record = TrialRecord.of_phase(output_dir, phase)
    return [] if record is None else [ReportToStudy(record)]


class ReportToStudy(TrainerCallback):
    """Report each evaluation's validation metric to the trial's study and stop training when its pruner prunes
    the trial. The main process reports and decides; in a distributed phase every process stops at the same step."""

    def __init__(self, record: TrialRecord):
        self.record = record
        self.trial = None
        self.pruned: dict | None = None
        self.training = False  # the phase's evaluations after training (final, best model) are not the curve's

    def on_train_begin(self, args, state, control, **kwargs):
        self.training = True

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False

    def open_trial(self):
        """The Optuna trial this phase is (`TrialRecord.open_trial`). A study that cannot be opened is one line (the
        trial then fails, and the driver records it as failed)."""
        record = self.record
        try:
            return record.open_trial(os.environ.get(TUNE_STORAGE) or record.storage)
        except Exception as error:  # an unreachable database, a password only the driver's environment holds
            why = " ".join(str(error).split("(Background on this error")[0].split())[:300]
            raise ValueError(
                f"tune trial {record.number} of {record.study}: cannot open its study at {record.storage} ({why}); "
                f"run the phase from `spt-hf compare --tune`, which passes the database URL in {TUNE_STORAGE}."
            ) from None

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
