"""Recipe arguments: flat YAML files whose keys are fields of the dataclasses below, of transformers'
`TrainingArguments`, or of the model's config class. `--key value` on the command line overrides the YAML; unknown
keys and wrong types raise before anything is trained.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import HfArgumentParser, TrainingArguments
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

OBJECTIVES = ("masked", "causal")
SPT_MODEL_TYPES = ("spt_s4", "spt_dlr", "spt_rotary_transformer")


@dataclass
class DataArguments:
    """Which task and which examples."""

    task: str = field(metadata={"help": "Task name (spt_hf.data): listops, text, retrieval, image, digits, ..."})
    data_dir: str | None = field(
        default=None, metadata={"help": "Local data: an unpacked lra_release, a task folder, or generator output."}
    )
    task_options: dict = field(default_factory=dict, metadata={"help": "Extra options of the task's loader."})
    max_length: int | None = field(default=None, metadata={"help": "Truncate sequences to this many steps."})
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

    model_type: str | None = field(
        default=None, metadata={"help": "spt_s4, spt_dlr or spt_rotary_transformer (a new model from its config)."}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A checkpoint folder or Hub id to start from (finetuning from SPT)."}
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow Hub models that ship their own code."})


@dataclass
class SPTArguments:
    """The self-pretraining objective (pretrain phase) and phase bookkeeping."""

    objective: str = field(default="masked", metadata={"help": f"SPT objective, one of {list(OBJECTIVES)}."})
    mask_rate: float = field(default=0.5, metadata={"help": "Masked SPT: probability that a position is masked."})
    span_length: int = field(default=1, metadata={"help": "Masked SPT: length of masked spans (1 = independent)."})
    total_steps: int | None = field(
        default=None, metadata={"help": "Compute-tied runs: total optimiser steps shared by SPT and finetuning."}
    )
    spt_fraction: float = field(default=0.5, metadata={"help": "Compute-tied runs: fraction of total_steps for SPT."})
    allow_eval_overlap: bool = field(
        default=False, metadata={"help": "Finetune even if evaluation examples were seen during SPT."}
    )


@dataclass
class SPTTrainingArguments(TrainingArguments):
    """transformers' TrainingArguments with spt_hf defaults (no external reporting, no dropped examples)."""

    output_dir: str = field(default="runs/default", metadata={"help": "Where checkpoints and results go."})
    report_to: str | list[str] = field(default="none", metadata={"help": "'none', 'tensorboard', 'all', ..."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep every column for our collators."})
    eval_strategy: str = field(default="epoch", metadata={"help": "When to evaluate: 'no', 'steps', 'epoch'."})
    save_strategy: str = field(default="epoch", metadata={"help": "When to checkpoint: 'no', 'steps', 'epoch'."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Checkpoints kept (the best is always kept)."})
    load_best_model_at_end: bool = field(default=True, metadata={"help": "Reload the best checkpoint by the metric."})
    logging_steps: float = field(default=10, metadata={"help": "Log every this many steps."})
    seed: int = field(default=2222, metadata={"help": "Seed of the official configs."})
    use_cpu: bool = field(default=False, metadata={"help": "Train on CPU even if a GPU is present."})

    def __post_init__(self):
        import torch

        if not _has_accelerator(torch):
            # CPU-only machine: nothing to pin to, and accelerate treats a multi-process launch as CPU data
            # parallelism (gloo) only when asked to use the CPU.
            self.dataloader_pin_memory = False
            self.use_cpu = True
        super().__post_init__()


def _has_accelerator(torch) -> bool:
    xpu = getattr(torch, "xpu", None)
    return torch.cuda.is_available() or torch.backends.mps.is_available() or bool(xpu and xpu.is_available())


ARGUMENT_CLASSES = (DataArguments, ModelArguments, SPTArguments, SPTTrainingArguments)


@dataclass
class Recipe:
    """A resolved recipe: the argument groups and the model-config overrides."""

    data: DataArguments
    model: ModelArguments
    spt: SPTArguments
    training: SPTTrainingArguments
    model_config: dict
    source: str | None = None
    chosen_metric: bool = False  # the recipe set metric_for_best_model itself (else each phase picks its own)

    def to_dict(self) -> dict:
        """Everything that was resolved, for results.json (credentials excluded)."""
        training = {k: v for k, v in self.training.to_dict().items() if "token" not in k}
        return {
            "source": self.source,
            "data": dataclasses.asdict(self.data),
            "model": dataclasses.asdict(self.model),
            "model_config": dict(self.model_config),
            "spt": dataclasses.asdict(self.spt),
            "training": training,
        }


def parse_overrides(argv: list[str]) -> dict:
    """`--key value` pairs (values read as YAML scalars: 3, 0.5, true, null, text) into a dict."""
    overrides, index = {}, 0
    while index < len(argv):
        token = argv[index]
        if not token.startswith("--"):
            raise ValueError(f"Expected `--key value`, got {token!r}.")
        key = token[2:].replace("-", "_")
        if "=" in key:
            key, raw = key.split("=", 1)
            index += 1
        elif index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            raw, index = argv[index + 1], index + 2
        else:
            raw, index = "true", index + 1  # a bare flag
        overrides[key] = yaml.safe_load(raw)
    return overrides


def load_recipe(config_path: str | Path | None, overrides: dict | None = None) -> Recipe:
    """Read a YAML recipe, apply overrides, check every key and type, and build the argument groups."""
    values: dict = {}
    if config_path is not None:
        path = Path(config_path)
        if not path.is_file():
            raise FileNotFoundError(f"Recipe {path} does not exist.")
        values = yaml.safe_load(path.read_text()) or {}
        if not isinstance(values, dict):
            raise ValueError(f"Recipe {path} must be a mapping of `key: value` lines.")
    values.update(overrides or {})
    groups: dict[type, dict] = {cls: {} for cls in ARGUMENT_CLASSES}
    known = {f.name: cls for cls in ARGUMENT_CLASSES for f in dataclasses.fields(cls) if f.init}
    config_fields = model_config_fields(values)
    model_config, unknown = {}, []
    for key, value in values.items():
        if key in known:
            groups[known[key]][key] = coerce(key, value, known[key])
        elif key in config_fields:
            model_config[key] = value
        else:
            unknown.append(key)
    if unknown:
        allowed = sorted(set(known) | set(config_fields))
        ours = sorted(set(known) - {f.name for f in dataclasses.fields(TrainingArguments)})
        raise ValueError(
            f"Unknown recipe key(s) {unknown} in {config_path or 'the arguments'}. Allowed: recipe keys {ours}, any "
            f"transformers TrainingArguments field, and the model config fields {sorted(config_fields)}."
            + _close_matches(unknown, allowed)
        )
    if "task" not in groups[DataArguments]:
        raise ValueError(f"The recipe {config_path or ''} must name a `task`.")
    recipe = Recipe(
        data=DataArguments(**groups[DataArguments]),
        model=ModelArguments(**groups[ModelArguments]),
        spt=SPTArguments(**groups[SPTArguments]),
        training=SPTTrainingArguments(**groups[SPTTrainingArguments]),
        model_config=model_config,
        source=str(config_path) if config_path else None,
        chosen_metric="metric_for_best_model" in groups[SPTTrainingArguments],
    )
    validate_recipe(recipe)
    return recipe


def model_config_fields(values: dict) -> set[str]:
    """Names accepted as model-config keys: the fields of the config class of `model_type`."""
    model_type = values.get("model_type")
    if model_type is None:
        return set()
    import spt_hf  # noqa: F401  (registers the spt_hf model types)

    if model_type not in CONFIG_MAPPING:
        raise ValueError(f"Unknown `model_type` {model_type!r}; spt_hf provides {sorted(SPT_MODEL_TYPES)}.")
    config_cls = CONFIG_MAPPING[model_type]
    return {f.name for f in dataclasses.fields(config_cls)} - {"model_type"}


def validate_recipe(recipe: Recipe) -> None:
    if recipe.spt.objective not in OBJECTIVES:
        raise ValueError(f"`objective`={recipe.spt.objective!r} is not supported; expected one of {list(OBJECTIVES)}.")
    if not 0.0 < recipe.spt.mask_rate < 1.0:
        raise ValueError(f"`mask_rate` must be in (0, 1), got {recipe.spt.mask_rate}.")
    if not 0.0 < recipe.spt.spt_fraction < 1.0:
        raise ValueError(f"`spt_fraction` must be in (0, 1), got {recipe.spt.spt_fraction}.")
    if recipe.data.validation_from not in ("train", "test"):
        raise ValueError(f"`validation_from` must be 'train' or 'test', got {recipe.data.validation_from!r}.")


def coerce(key: str, value, cls: type):
    """Check `value` against the dataclass field's type; convert YAML's string floats ('1e-3')."""
    hint = typing.get_type_hints(cls)[key]
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return None
    for option in options:
        base = typing.get_origin(option) or option
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if base is float and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        if base in (str, list, dict) and isinstance(value, base):
            return value
        if base is list and isinstance(value, str):
            return value
    if not any((typing.get_origin(o) or o) in (bool, int, float, str, list, dict, type(None)) for o in options):
        return value  # an enum or other type transformers itself validates
    expected = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ValueError(f"Recipe key `{key}` expects {expected}, got {value!r} ({type(value).__name__}).")


def _close_matches(unknown: list[str], allowed: list[str]) -> str:
    import difflib

    hints = [f"{key} -> {match[0]}" for key in unknown if (match := difflib.get_close_matches(key, allowed, 1))]
    return f" Did you mean: {', '.join(hints)}?" if hints else ""


def argument_parser() -> HfArgumentParser:
    """The parser whose `--help` documents every recipe key (model-config keys are listed by the config class)."""
    return HfArgumentParser(ARGUMENT_CLASSES)
