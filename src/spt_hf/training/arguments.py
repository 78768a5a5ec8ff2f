"""Recipes: flat YAML files whose keys are fields of the dataclasses below, of transformers' `TrainingArguments`, or
of the model's config class. `--key value` on the command line overrides the YAML. Every check of a recipe happens in
`load_recipe`, before any data is loaded: unknown keys and wrong types, values out of range, the SPT objective against
`bidirectional`, and a recipe given to the wrong phase.

Recipes ship with the package (`spt_hf/recipes/`): `find_recipe("cpu/digits-transformer-spt.yaml")` finds one by
name from any folder; a path to a file of one's own works too.

The phases have one name each, used by the CLI, the recipe file, the run sub-folder and results.json: see
`spt_hf/phases.py`.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import HfArgumentParser, TrainingArguments
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..modeling.architectures import MODEL_TYPES as SPT_MODEL_TYPES  # the registered architectures
from ..modeling.architectures import base_model_class
from ..modeling.backbone_adapter import PACKED_SEQUENCE_BACKBONES

OBJECTIVES = ("masked", "causal")
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
# Config fields that belong to a phase (heads, objectives), not to the architecture shared by both phases.
PHASE_FIELDS = {"pooling", "classifier_type", "num_labels", "problem_type", "continuous_loss", "hidden_dropout_prob"}
# Recipe keys that only the SPT phase reads.
SPT_ONLY_KEYS = ("objective", "mask_rate", "span_length")
# SPT switches that a finetuning phase refuses (with the reason) instead of ignoring: `spt-hf run` and `spt-hf compare`
# give a command-line override of them to the SPT phase alone.
SPT_PHASE_SWITCHES = ("packed_sequences",)


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
        """Everything that was resolved, for results.json (credentials excluded)."""
        training = {k: v for k, v in self.training.to_dict().items() if "token" not in k}
        return {
            "source": self.source,
            "data": dataclasses.asdict(self.data),
            "model": dataclasses.asdict(self.model),
            "model_config": dict(self.model_config),
            # One "spt" entry, as before the SPT objective and the phase bookkeeping were split (fingerprints hash it).
            "spt": dataclasses.asdict(self.spt) | dataclasses.asdict(self.phase),
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


def find_recipe(config: str | Path) -> Path:
    """The recipe file `config`: a path to an existing file, or the name of a packaged recipe such as
    `cpu/digits-transformer-spt.yaml` (a leading `recipes/` is accepted). FileNotFoundError lists close names."""
    path = Path(config).expanduser()
    if path.is_file():
        return path
    name = Path(*path.parts[1:]) if path.parts[:1] == ("recipes",) else path
    packaged = RECIPES_DIR / name
    if not path.is_absolute() and packaged.is_file():
        return packaged
    names = list_recipes()
    hint = _close_matches([str(name)], names)
    folders = sorted({n.split("/")[0] for n in names} - {"accelerate"})
    raise FileNotFoundError(
        f"Recipe {config} not found: it is not a file, nor the name of a recipe shipped with spt_hf."
        + (
            hint
            or f" Shipped recipes are named FOLDER/NAME.yaml with FOLDER one of {folders}; `spt-hf recipes` lists them."
        )
    )


def list_recipes(folder: str | None = None) -> list[str]:
    """Names of the packaged recipes (relative to spt_hf/recipes), optionally only those under `folder`."""
    root = RECIPES_DIR / folder if folder else RECIPES_DIR
    return sorted(str(p.relative_to(RECIPES_DIR)) for p in root.rglob("*.yaml"))


def read_recipe_file(path: Path) -> dict:
    """The YAML mapping of a recipe file; a syntax error names the file, the line and the column."""
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error)
        raise ValueError(
            f"Recipe {where}: YAML syntax error ({problem}); a recipe is a mapping of `key: value` lines."
        ) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"Recipe {path} must be a mapping of `key: value` lines, not a {type(values).__name__}.")
    return values


def load_recipe(config_path: str | Path | None, overrides: dict | None = None, phase: str | None = None) -> Recipe:
    """Read a YAML recipe (a path or a packaged recipe's name), apply overrides, and check everything.

    `phase` ("spt", "finetune" or "scratch") adds the checks of that phase: a finetuning recipe given to the SPT
    phase (or the reverse) is refused, as are the keys the phase cannot use.
    """
    values: dict = {}
    path = None
    if config_path is not None:
        path = find_recipe(config_path)
        values = read_recipe_file(path)
        check_phase_of_file(path, values, phase)
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
    where = path or "the arguments"
    if unknown:
        allowed = sorted(set(known) | set(config_fields))
        ours = sorted(set(known) - {f.name for f in dataclasses.fields(TrainingArguments)})
        raise ValueError(
            f"Unknown recipe key(s) {unknown} in {where}. Allowed: recipe keys {ours}, any "
            f"transformers TrainingArguments field, and the model config fields {sorted(config_fields)}."
            + _close_matches(unknown, allowed)
        )
    if "task" not in groups[DataArguments]:
        raise ValueError(f"The recipe {where} must name a `task`.")
    check_training_values(groups[PhaseTrainingArguments], where)
    recipe = Recipe(
        data=DataArguments(**groups[DataArguments]),
        model=ModelArguments(**groups[ModelArguments]),
        spt=SPTArguments(**groups[SPTArguments]),
        phase=PhaseArguments(**groups[PhaseArguments]),
        training=PhaseTrainingArguments(**groups[PhaseTrainingArguments]),
        model_config=model_config,
        source=str(path) if path else None,
        chosen_metric="metric_for_best_model" in groups[PhaseTrainingArguments],
    )
    validate_recipe(recipe, phase)
    return recipe


def check_phase_of_file(path: Path, values: dict, phase: str | None) -> None:
    """Refuse a finetuning recipe given to the SPT phase and an SPT recipe given to finetuning."""
    if phase is None:
        return
    is_finetune_file = path.stem.endswith("-finetune")
    is_spt_file = path.stem.endswith("-spt") or any(key in values for key in SPT_ONLY_KEYS)
    if phase == "spt" and is_finetune_file:
        sibling = path.with_name(path.name.replace("-finetune", "-spt"))
        raise ValueError(
            f"{path} is a finetuning recipe (its name ends in -finetune.yaml): run it with `spt-hf finetune`, or "
            f"self-pretrain with its sibling {sibling.name}."
        )
    if phase != "spt" and is_spt_file:
        keys = [key for key in SPT_ONLY_KEYS if key in values]
        reason = "its name ends in -spt.yaml" if path.stem.endswith("-spt") else f"it sets SPT-only keys {keys}"
        sibling = path.with_name(path.name.replace("-spt", "-finetune"))
        raise ValueError(
            f"{path} is a self-pretraining recipe ({reason}): run it with `spt-hf spt`, or finetune with its sibling "
            f"{sibling.name}."
        )


def check_training_values(training: dict, where) -> None:
    """TrainingArguments values that transformers would accept but that silently mean something else."""
    max_steps = training.get("max_steps")
    if max_steps is not None and max_steps <= 0:
        raise ValueError(
            f"`max_steps` must be a positive number of optimiser steps, got {max_steps} in {where}; leave it out "
            "to train for `num_train_epochs` instead."
        )
    epochs = training.get("num_train_epochs")
    if epochs is not None and not epochs > 0:
        raise ValueError(f"`num_train_epochs` must be positive, got {epochs} in {where}.")


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


def validate_recipe(recipe: Recipe, phase: str | None = None) -> None:
    """Every check of a recipe that needs no data: values in range, the objective against `bidirectional`, and what
    the phase needs (a `model_type` for a new model)."""
    spt = recipe.spt
    if spt.objective not in OBJECTIVES:
        raise ValueError(f"`objective`={spt.objective!r} is not supported; expected one of {list(OBJECTIVES)}.")
    if not 0.0 < spt.mask_rate < 1.0:
        raise ValueError(f"`mask_rate` must be in (0, 1), got {spt.mask_rate}.")
    if spt.span_length < 1:
        raise ValueError(f"`span_length` must be at least 1, got {spt.span_length}.")
    budget = recipe.phase
    if not 0.0 < budget.spt_fraction < 1.0:
        raise ValueError(f"`spt_fraction` must be in (0, 1), got {budget.spt_fraction}.")
    if budget.total_steps is not None and budget.total_steps < 2:
        raise ValueError(f"`total_steps` must be at least 2 (one step per phase), got {budget.total_steps}.")
    if recipe.data.validation_from not in ("train", "test"):
        raise ValueError(f"`validation_from` must be 'train' or 'test', got {recipe.data.validation_from!r}.")
    if recipe.data.generate_data and recipe.data.data_dir is None:
        from ..data.generators import GENERATED_TASKS

        if recipe.data.task not in GENERATED_TASKS:
            raise ValueError(
                f"`generate_data` works for {list(GENERATED_TASKS)}, not {recipe.data.task!r}; set `data_dir`."
            )
    if phase == "spt":
        bidirectional = spt_bidirectional(recipe)
        if recipe.model_config.get("bidirectional", bidirectional) != bidirectional:
            raise ValueError(
                f"objective '{spt.objective}' needs `bidirectional: {str(bidirectional).lower()}` (masked SPT sees "
                f"the whole sequence, causal SPT only the past); the recipe sets "
                f"`bidirectional: {str(recipe.model_config['bidirectional']).lower()}`."
            )
        if recipe.model.model_name_or_path is not None:
            raise ValueError(
                "The SPT phase trains a new model from `model_type` and its config fields; `model_name_or_path` is "
                "for finetuning (`spt-hf finetune`). Remove it from the SPT recipe."
            )
    if recipe.spt.packed_sequences and phase in ("finetune", "scratch"):
        raise ValueError(
            "`packed_sequences: true` is for the SPT phase: a classifier pools each row into one prediction "
            "(`pooling`), so the sequences of a packed row would be pooled together; set packed_sequences: false for "
            "finetuning."
        )
    if recipe.spt.packed_sequences and phase == "spt":
        refuse_unpackable_recipe(recipe)
    if phase in ("spt", "scratch") and recipe.model.model_type is None:
        raise ValueError(
            f"A new model needs `model_type` in the recipe (one of {sorted(SPT_MODEL_TYPES)}); to finetune a "
            "checkpoint, pass `--model_name_or_path`."
        )


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


def argument_parser(command: str = "spt") -> HfArgumentParser:
    """The parser whose `--help` documents every recipe key, in groups (data, model, SPT, training)."""
    parser = HfArgumentParser(
        ARGUMENT_CLASSES,
        prog=f"spt-hf {command}",
        usage=f"spt-hf {command} --config RECIPE.yaml [--key value ...]",
        description="Every key below can be set in the recipe (YAML) or overridden on the command line. Any field of "
        "the model type's config (hidden_size, num_hidden_layers, state_size, ...) is a key too. On the command line "
        "--debug shows the traceback of errors (SPT_HF_DEBUG=1 too); TrainingArguments' own `debug` is set in YAML.",
    )
    parser._optionals.title = "recipe"  # argparse's default group, listed first
    parser.add_argument(
        "--config",
        metavar="RECIPE.yaml",
        help="a recipe file, or a shipped recipe's name such as "
        "cpu/digits-transformer-spt.yaml (`spt-hf recipes` lists them)",
    )
    if command == "run":
        from ..cli import spellings  # the CLI's option names: underscored, then the hyphenated alias

        parser.add_argument(
            *spellings("--finetune_config"), metavar="RECIPE.yaml", help="default: <name>-finetune.yaml"
        )
        parser.add_argument(*spellings("--with_scratch"), action="store_true", help="also train the scratch baseline")
    return parser
