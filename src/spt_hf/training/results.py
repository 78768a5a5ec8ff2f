"""results.json of each phase and run: what a phase records (`phase_results`) and how it is written."""

import subprocess
from importlib import metadata
from pathlib import Path

from ..checkpoints import write_json_atomic
from ..phases import RESULTS_FILE


def code_version() -> dict:
    """spt_hf's version and, when run from a git checkout, the commit (and whether it had local changes)."""
    version = {"spt_hf": metadata.version("spt_hf")}  # the one home of the version: pyproject.toml
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / ".git").exists():
        return version  # an installed package: no checkout of spt_hf's own to ask (nor any other repository)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
        if commit.returncode == 0:
            version.update(git_commit=commit.stdout.strip(), git_dirty=bool(dirty.stdout.strip()))
    except OSError:
        pass
    return version


def write_results(output_dir: str | Path, results: dict) -> Path:
    path = Path(output_dir) / RESULTS_FILE
    write_json_atomic(path, results)
    return path


def phase_results(
    phase, recipe, task, trainer, train_output, evaluations: dict, curve: list, clock, stopped_at=None
) -> dict:
    """Everything a phase records: the resolved recipe, code version, the data actually used, the budget (steps
    used, the cap, early stopping's patience and the step it stopped at, `stopped_at`; the wall time of the
    processes that trained the phase, from `clock`, a `trainer.PhaseClock`), the selected and the final model's
    metrics with the metric that selected it (its direction, the exported step), and the learning curve as trained.

    `evaluations` holds {"selected": "best" | "final", "best": {...}, "final": {...}}, each {"validation", "test"}.
    """
    state, args = trainer.state, trainer.args
    world = args.world_size
    resolved = recipe.to_dict()
    if task.data_dir is not None and not task.generated:
        resolved["data"]["generate_data"] = {}  # data_dir replaced the recipe's generate_data block
    selected = evaluations[evaluations["selected"]]
    exported = state.best_global_step if evaluations["selected"] == "best" else state.global_step
    return {
        "phase": phase,
        "task": recipe.data.task,
        "task_name": task.spec.name,  # a custom task's own name (its `name` option or its source's)
        "model_type": trainer.model.config.model_type,
        "num_parameters": sum(p.numel() for p in trainer.model.parameters()),
        "recipe": resolved,
        "model_config": trainer.model.config.to_diff_dict(),
        "code_version": code_version(),
        "data": {"data_dir": task.data_dir, "generated": task.generated, "split_sizes": task.split_sizes()},
        "budget": {
            "steps": state.global_step,
            "max_steps": state.max_steps,
            "early_stopping_patience": recipe.training.early_stopping_patience,
            "stopped_early_at": stopped_at,
            "epochs": state.epoch,
            "per_device_batch_size": args.per_device_train_batch_size,
            "processes": world,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "global_batch_size": args.per_device_train_batch_size * world * args.gradient_accumulation_steps,
            "train_runtime_s": train_output.metrics.get("train_runtime"),
            "wall_time_s": clock.elapsed(),
            "wall_time_counted_from_step": clock.counted_from_step,
        },
        "metrics": {
            "metric_for_best_model": args.metric_for_best_model,
            "greater_is_better": args.greater_is_better,
            "selected": evaluations["selected"],
            "exported_step": exported,
            "best_metric": state.best_metric,
            "best_checkpoint": state.best_model_checkpoint,
            "best_step": state.best_global_step,
            "validation": selected["validation"],
            "test": selected["test"],
            "best": evaluations.get("best"),
            "final": evaluations["final"],
            "train": train_output.metrics,
        },
        "learning_curve": [entry for entry in curve if "eval_loss" in entry or "loss" in entry],
        "output_dir": args.output_dir,
    }
