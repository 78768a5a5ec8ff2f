"""The schema of a recipe: the argument dataclasses (data, model, SPT objective, phase bookkeeping, training), the
resolved `Recipe` and the key sets the checks use. A recipe is a flat YAML file whose keys are fields of the dataclasses
below, of transformers' `TrainingArguments`, or of the model's config class; `recipes/loading.py` finds, reads and
checks one (`load_recipe`).

The phases have one name each, used by the CLI, the recipe file, the run sub-folder and results.json: see
`spt_hf/phases.py`.
"""

import dataclasses
import logging
import math
from dataclasses import dataclass, field

from transformers import HfArgumentParser, TrainingArguments

from ..data.collators import PAD_MULTIPLE
from ..modeling.architectures import MODEL_TYPES as SPT_MODEL_TYPES  # the registered architectures
from ..modeling.architectures import base_model_class
from ..modeling.backbone_adapter import PACKED_SEQUENCE_BACKBONES
from ..phases import SPT_PHASE

OBJECTIVES = ("masked", "causal")
EVALUATIONS_PER_PHASE = 10  # evaluations of a phase whose steps were derived (`evaluation_cadence`)
EVALUATION_RANGE = (8, 12)  # evaluations a recipe's own eval_steps may give derived steps and be kept
# Config fields that belong to a phase (heads and their label names, objectives), not to the architecture shared by
# both phases.
PHASE_FIELDS = {
    "pooling",
    "classifier_type",
    "num_labels",
    "id2label",
    "label2id",
    "problem_type",
    "continuous_loss",
    "hidden_dropout_prob",
}
# Recipe keys that only the SPT phase reads.
SPT_ONLY_KEYS = ("objective", "mask_rate", "span_length")
# SPT switches that a finetuning phase refuses (with the reason) instead of ignoring: `spt-hf run` and `spt-hf compare`
# give a command-line override of them to the SPT phase alone.
SPT_PHASE_SWITCHES = ("packed_sequences",)
# What transformers' TrainingArguments warns at each construction with `torch_compile` and no Ampere GPU; a phase
# builds its arguments several times (recipe, output folder, model-selection metric), so it is shown once a process.
COMPILE_NOTICE = "The speedups for torchdynamo mostly come with GPU Ampere or higher"


class OncePerProcess(logging.Filter):
    """Lets a record that starts with `prefix` through the first time only; other records pass."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix, self.shown = prefix, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(self.prefix):
            return True
        shown, self.shown = self.shown, True
        return not shown


logging.getLogger("transformers.training_args").addFilter(OncePerProcess(COMPILE_NOTICE))


@dataclass
class DataArguments:
    """Which task and which examples."""

    _argument_group_name = "data"

    task: str = field(metadata={"help": "Task name (spt_hf.data): listops, text, retrieval, image, digits, ..."})
    data_dir: str | None = field(
        default=None, metadata={"help": "Local data: an unpacked lra_release, a task folder, or generator output."}
    )
    task_options: dict = field(default_factory=dict, metadata={"help": "Extra options of the task's loader."})
    max_length: int | None = field(default=None, metadata={"help": "Truncate sequences to this many steps."})
    pad_to_multiple_of: int | None = field(
        default=PAD_MULTIPLE,
        metadata={
            "help": "Round each batch's padded length up to a multiple of this (None: the longest sequence): a "
            "compiled model then sees a handful of shapes where lengths vary (ListOps, Text, Retrieval), and a GPU "
            "reuses its FFT plans; the results are those of the unpadded batch."
        },
    )
    num_train_examples: int | None = field(
        default=None, metadata={"help": "Sample complexity: use this many training examples (both phases)."}
    )
    train_fraction: float | None = field(
        default=None, metadata={"help": "Sample complexity: use this fraction of the training split (both phases)."}
    )
    validation_from: str = field(
        default="train", metadata={"help": "'train': carve validation from train; 'test': LRA's test-as-validation."}
    )
    generate_data: dict = field(
        default_factory=dict,
        metadata={
            "help": "Without data_dir: `spt-hf generate-data` options (num_train, num_val, num_test, seed, ...) to "
            "generate ListOps/Pathfinder once into the cache (CPU recipes)."
        },
    )


@dataclass
class ModelArguments:
    """Which model. Any field of the model type's config (hidden_size, state_size, ...) may also be given."""

    _argument_group_name = "model"

    model_type: str | None = field(
        default=None, metadata={"help": f"one of {', '.join(SPT_MODEL_TYPES)} (a new model from its config)."}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A checkpoint folder or Hub id to start from (finetuning from SPT)."}
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow Hub models that ship their own code."})


@dataclass
class SPTArguments:
    """The self-pretraining objective (the SPT phase's loss)."""

    _argument_group_name = "SPT objective"

    objective: str = field(default="masked", metadata={"help": f"SPT objective, one of {list(OBJECTIVES)}."})
    mask_rate: float = field(default=0.5, metadata={"help": "Masked SPT: probability that a position is masked."})
    span_length: int = field(default=1, metadata={"help": "Masked SPT: length of masked spans (1 = independent)."})
    packed_sequences: bool = field(
        default=False,
        metadata={
            "help": "SPT only: padding-free batches, several sequences per row with restarting position_ids (as "
            "transformers' DataCollatorWithFlattening), for models that keep packed sequences apart: the rotary "
            "Transformer with full attention, spt_backbone's causal llama / gpt_neox / qwen2. Same examples, masks "
            "and losses per step as padding; other models, finetuning and causal SPT of continuous inputs refuse it."
        },
    )


@dataclass
class PhaseArguments:
    """Phase bookkeeping: the compute-tied budget, the overlap guard and whether a phase restarts afresh."""

    _argument_group_name = "phase bookkeeping"

    total_steps: int | None = field(
        default=None, metadata={"help": "Compute-tied runs: total optimiser steps shared by SPT and finetuning."}
    )
    spt_fraction: float = field(default=0.5, metadata={"help": "Compute-tied runs: fraction of total_steps for SPT."})
    allow_eval_overlap: bool = field(
        default=False, metadata={"help": "Finetune even if evaluation examples were seen during SPT."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train the phase afresh, deleting what its folder holds (a finished phase or checkpoints)."},
    )


@dataclass
class PhaseTrainingArguments(TrainingArguments):
    """transformers' TrainingArguments with spt_hf defaults (no external reporting, no dropped examples)."""

    _argument_group_name = "training (any field of transformers TrainingArguments)"

    output_dir: str = field(default="runs/default", metadata={"help": "Where checkpoints and results go."})
    report_to: str | list[str] = field(default="none", metadata={"help": "'none', 'tensorboard', 'all', ..."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep every column for our collators."})
    eval_strategy: str = field(default="epoch", metadata={"help": "When to evaluate: 'no', 'steps', 'epoch'."})
    save_strategy: str = field(default="epoch", metadata={"help": "When to checkpoint: 'no', 'steps', 'epoch'."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Checkpoints kept (the best is always kept)."})
    load_best_model_at_end: bool = field(default=True, metadata={"help": "Reload the best checkpoint by the metric."})
    logging_steps: float = field(default=10, metadata={"help": "Log every this many steps."})
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Stop the phase after this many evaluations without improvement of its model-selection metric "
            "(SPT: its validation loss; finetuning: the task metric); max_steps / num_train_epochs become a cap. "
            "None: train the whole budget."
        },
    )
    seed: int = field(default=2222, metadata={"help": "Seed of the official configs."})
    use_cpu: bool = field(default=False, metadata={"help": "Train on CPU even if a GPU is present."})

    def __post_init__(self):
        import sys

        import torch

        if self.disable_tqdm is None:  # progress bars where a person watches a terminal, not in logs
            self.disable_tqdm = not sys.stderr.isatty()
        require_reporting_packages(self.report_to)
        if not _has_accelerator(torch):
            # CPU-only machine: nothing to pin to, and accelerate treats a multi-process launch as CPU data
            # parallelism (gloo) only when asked to use the CPU.
            self.dataloader_pin_memory = False
            self.use_cpu = True
        super().__post_init__()


SPTTrainingArguments = PhaseTrainingArguments  # the name before the rename, for code that imports it


def require_reporting_packages(report_to) -> None:
    """`report_to: tensorboard` needs the optional tensorboard package (spt_hf's `extras`); say so in one line before
    transformers' Trainer fails on it."""
    import importlib.util

    requested = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "tensorboard" in requested and not any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")):
        raise ImportError(
            '`report_to: tensorboard` needs the `tensorboard` package: pip install "spt_hf[extras]" (pinned '
            'versions: pip install -c constraints.txt "spt_hf[extras]").'
        )


def _has_accelerator(torch) -> bool:
    xpu = getattr(torch, "xpu", None)
    return torch.cuda.is_available() or torch.backends.mps.is_available() or bool(xpu and xpu.is_available())


ARGUMENT_CLASSES = (DataArguments, ModelArguments, SPTArguments, PhaseArguments, PhaseTrainingArguments)


@dataclass
class Recipe:
    """A resolved recipe: the argument groups and the model-config overrides."""

    data: DataArguments
    model: ModelArguments
    spt: SPTArguments
    phase: PhaseArguments
    training: PhaseTrainingArguments
    model_config: dict
    source: str | None = None
    chosen_metric: bool = False  # the recipe set metric_for_best_model itself (else each phase picks its own)

    def to_dict(self) -> dict:
        """Everything that was resolved, for results.json (credentials excluded). `early_stopping_patience` is left
        out while it is off, so that phases from before the key keep their fingerprint and resume."""
        training = {k: v for k, v in self.training.to_dict().items() if "token" not in k}
        if training.get("early_stopping_patience") is None:
            training.pop("early_stopping_patience", None)
        return {
            "source": self.source,
            "data": dataclasses.asdict(self.data),
            "model": dataclasses.asdict(self.model),
            "model_config": dict(self.model_config),
            # One "spt" entry, as before the SPT objective and the phase bookkeeping were split (fingerprints hash it).
            "spt": dataclasses.asdict(self.spt) | dataclasses.asdict(self.phase),
            "training": training,
        }


def selection_metric(recipe: Recipe, phase: str, problem_type: str = "single_label_classification") -> tuple[str, bool]:
    """(metric, greater_is_better) that picks a phase's exported checkpoint and that early stopping watches: the
    recipe's own `metric_for_best_model` if it names one; else the SPT phase's validation loss (the objective it
    minimises: a token accuracy can stay flat while the loss falls, and ties would keep the earliest checkpoint),
    and for finetuning the task metric, accuracy or R²."""
    training = recipe.training
    if recipe.chosen_metric:
        return training.metric_for_best_model, bool(training.greater_is_better)
    if phase == SPT_PHASE:
        return "loss", False
    return ("r2" if problem_type == "regression" else "accuracy"), True


def evaluation_cadence(max_steps: int, training: TrainingArguments | None = None) -> dict:
    """The evaluation, checkpoint and logging interval of a phase whose steps were derived (`--max_steps`,
    `--total_steps`, presets, tuning budgets): about `EVALUATIONS_PER_PHASE` evaluations, a checkpoint after each.
    Empty (the recipe's `training` arguments keep theirs) when the steps are the recipe's own `max_steps`, or when
    its `eval_steps` already give `max_steps` 8 to 12 evaluations (such phases keep their fingerprints)."""
    if training is not None:
        by_steps = str(getattr(training.eval_strategy, "value", training.eval_strategy)) == "steps"
        count = max_steps / training.eval_steps if by_steps and (training.eval_steps or 0) >= 1 else 0
        if training.max_steps == max_steps or EVALUATION_RANGE[0] <= count <= EVALUATION_RANGE[1]:
            return {}
    every = max(1, math.ceil(max_steps / EVALUATIONS_PER_PHASE))
    return {
        "eval_strategy": "steps",
        "save_strategy": "steps",
        "eval_steps": every,
        "save_steps": every,
        "logging_steps": every,
    }


def refuse_packing(reason: str | None) -> None:
    """The one line that refuses `packed_sequences: true` for `reason` (a model's `packing_refusal`), if any."""
    if reason is None:
        return
    *backbones, last = PACKED_SEQUENCE_BACKBONES
    raise ValueError(
        f"`packed_sequences: true`, but {reason}: set packed_sequences: false (packing is exact for the rotary "
        f"Transformer with full attention and for spt_backbone's causal {', '.join(backbones)} and {last})."
    )


def refuse_unpackable_recipe(recipe: Recipe) -> None:
    """`packed_sequences: true` refused from the recipe alone, before any data or model exists: the model class of
    `model_type` judges the SPT phase's config (built from the recipe, with the task spec's input fields). The
    pipeline asks the built model again (`pipeline.refuse_unpackable_model`), which also knows its attention."""
    model_type = recipe.model.model_type
    if model_type is None:
        return  # a model from a checkpoint: asked when it is built
    from ..data import get_task_spec

    spec = get_task_spec(recipe.data.task, **recipe.data.task_options)
    inputs = {key: value for key, value in spec.model_config_kwargs().items() if value is not None}
    model_cls = base_model_class(model_type)
    config = model_cls.config_class(**{**inputs, **recipe.model_config, "bidirectional": spt_bidirectional(recipe)})
    refuse_packing(model_cls.packing_refusal(config))


def spt_bidirectional(recipe: Recipe) -> bool:
    """Masked SPT trains a bidirectional model, causal SPT a causal one."""
    return recipe.spt.objective == "masked"


def argument_parser(command: str = "spt") -> HfArgumentParser:
    """The parser whose `--help` documents every recipe key, in groups (data, model, SPT, training). The command
    `spt-hf COMMAND` adds its own options (`--config`, ...) to the first group, "recipe"."""
    parser = HfArgumentParser(
        ARGUMENT_CLASSES,
        prog=f"spt-hf {command}",
        usage=f"spt-hf {command} --config RECIPE.yaml [--key value ...]",
        description="Every key below can be set in the recipe (YAML) or overridden on the command line. Any field of "
        "the model type's config (hidden_size, num_hidden_layers, state_size, ...) is a key too. On the command line "
        "--debug shows the traceback of errors (SPT_HF_DEBUG=1 too); TrainingArguments' own `debug` is set in YAML.",
    )
    parser._optionals.title = "recipe"  # argparse's default group, listed first
    return parser
