"""Recipe loading: find a recipe by path or shipped name, read its YAML, apply `--key value` overrides and check
everything, against the schema of `recipes/arguments.py`. Every check of a recipe happens in `load_recipe`, before any
data is loaded: unknown keys and wrong types, values out of range, the SPT objective against `bidirectional`, and a
recipe given to the wrong phase.

Recipes ship with the package (`spt_hf/recipes/`): `find_recipe("cpu/digits-transformer-spt.yaml")` finds one by
name from any folder; a path to a file of one's own works too.
"""

import dataclasses
import types
import typing
from pathlib import Path

import yaml
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..phases import BASELINE_PHASE, FINETUNING_PHASES, PHASE_COMMANDS, SPT_PHASE
from .arguments import (
    ARGUMENT_CLASSES,
    OBJECTIVES,
    SPT_MODEL_TYPES,
    SPT_ONLY_KEYS,
    DataArguments,
    ModelArguments,
    PhaseArguments,
    PhaseTrainingArguments,
    Recipe,
    SPTArguments,
    refuse_unpackable_recipe,
    spt_bidirectional,
)
from .yaml_text import DuplicateKeyError, load_yaml

RECIPES_DIR = Path(__file__).resolve().parent  # the YAML recipes are this package's data


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
        try:
            overrides[key] = load_yaml(raw)
        except (yaml.YAMLError, DuplicateKeyError) as error:
            raise ValueError(
                f"--{key} on the command line: {raw!r} is not valid YAML ({_yaml_problem(error)}); quote the whole "
                f"value for the shell, e.g. --{key} '{{input_kind: tokens}}' for a mapping."
            ) from None
    return overrides


def _yaml_problem(error: Exception) -> str:
    return str(error) if isinstance(error, DuplicateKeyError) else getattr(error, "problem", None) or str(error)


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


def recipe_name(path: str | Path) -> str:
    """How messages name a recipe file: a shipped recipe by its name (`cpu/digits-s4-spt.yaml`), any other by its
    path as given."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(RECIPES_DIR)) if resolved.is_relative_to(RECIPES_DIR) else str(path)


def read_recipe_file(path: Path) -> dict:
    """The YAML mapping of a recipe file; a syntax error names the file, the line and the column, a key given twice
    both its lines, and a file that is not text says so."""
    name = recipe_name(path)
    try:
        values = load_yaml(path.read_text())
    except UnicodeDecodeError as error:
        raise ValueError(
            f"Recipe {name} is not a text file (byte {error.object[error.start]:#04x} at offset {error.start} is not "
            "UTF-8): a recipe is a YAML file of `key: value` lines; check the path given to --config."
        ) from None
    except DuplicateKeyError as error:
        raise ValueError(
            f"Recipe {name}: {error}; YAML would silently keep the second value: keep one of the two lines."
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        raise ValueError(
            f"Recipe {where}: YAML syntax error ({_yaml_problem(error)}); a recipe is a mapping of `key: value` lines."
        ) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"Recipe {name} must be a mapping of `key: value` lines, not a {type(values).__name__}.")
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
    origin = KeyOrigin(path, dict(overrides or {}))
    values.update(origin.overrides)
    groups, model_config = _sort_keys(values, origin, phase)
    if "task" not in groups[DataArguments]:
        raise ValueError(f"The recipe {origin.where} must name a `task`.")
    check_training_values(groups[PhaseTrainingArguments], origin)
    recipe = Recipe(
        data=DataArguments(**groups[DataArguments]),
        model=ModelArguments(**groups[ModelArguments]),
        spt=SPTArguments(**groups[SPTArguments]),
        phase=PhaseArguments(**groups[PhaseArguments]),
        training=_training_arguments(groups[PhaseTrainingArguments], origin),
        model_config=model_config,
        source=str(path) if path else None,
        chosen_metric="metric_for_best_model" in groups[PhaseTrainingArguments],
    )
    validate_recipe(recipe, phase)
    return recipe


@dataclasses.dataclass
class KeyOrigin:
    """Where the keys of a recipe were given: on the command line (`overrides`) or in the recipe file `path`."""

    path: Path | None
    overrides: dict

    @property
    def where(self) -> str:
        return recipe_name(self.path) if self.path is not None else "the arguments"

    def on_command_line(self, key: str) -> bool:
        return key in self.overrides or self.path is None

    def of(self, key: str) -> str:
        """Where `key` was given, for a message: "--key on the command line" or "`key` in FILE"."""
        if self.on_command_line(key):
            return f"--{key} on the command line"
        return f"`{key}` in {self.where}"


def _sort_keys(values: dict, origin: KeyOrigin, phase: str | None) -> tuple[dict[type, dict], dict]:
    """The recipe's values by argument class (type-checked) and its model-config fields; an unknown key is refused."""
    groups: dict[type, dict] = {cls: {} for cls in ARGUMENT_CLASSES}
    known = {f.name: cls for cls in ARGUMENT_CLASSES for f in dataclasses.fields(cls) if f.init}
    config_fields = model_config_fields(values)
    model_config, unknown = {}, []
    for key, value in values.items():
        if key in known:
            groups[known[key]][key] = coerce(key, value, known[key], origin)
        elif key in config_fields:
            model_config[key] = value
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(_unknown_keys(unknown, sorted(set(known) | set(config_fields)), origin, phase))
    return groups, model_config


def _unknown_keys(unknown: list[str], allowed: list[str], origin: KeyOrigin, phase: str | None) -> str:
    """One sentence per unknown key, its closest allowed keys first, then where every key is listed."""
    import difflib

    parts = []
    for key in unknown:
        spelling = "--{}" if origin.on_command_line(key) else "`{}`"
        close = [spelling.format(match) for match in difflib.get_close_matches(key, allowed, 3)]
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        parts.append(f"Unknown recipe key {origin.of(key)}{hint}")
    command = PHASE_COMMANDS.get(phase or SPT_PHASE, SPT_PHASE)
    return (
        f"{' '.join(parts)} `spt-hf {command} --help` lists every key (a field of the model type's config is one too)."
    )


def check_phase_of_file(path: Path, values: dict, phase: str | None) -> None:
    """Refuse a finetuning recipe given to the SPT phase and an SPT recipe given to finetuning."""
    if phase is None:
        return
    is_finetune_file = path.stem.endswith("-finetune")
    is_spt_file = path.stem.endswith("-spt") or any(key in values for key in SPT_ONLY_KEYS)
    if phase == SPT_PHASE and is_finetune_file:
        sibling = path.with_name(path.name.replace("-finetune", "-spt"))
        raise ValueError(
            f"{recipe_name(path)} is a finetuning recipe (its name ends in -finetune.yaml): run it with "
            f"`spt-hf finetune`, or self-pretrain with its sibling {sibling.name}."
        )
    if phase != SPT_PHASE and is_spt_file:
        keys = [key for key in SPT_ONLY_KEYS if key in values]
        reason = "its name ends in -spt.yaml" if path.stem.endswith("-spt") else f"it sets SPT-only keys {keys}"
        sibling = path.with_name(path.name.replace("-spt", "-finetune"))
        raise ValueError(
            f"{recipe_name(path)} is a self-pretraining recipe ({reason}): run it with `spt-hf spt`, or finetune with "
            f"its sibling {sibling.name}."
        )


SEED_RANGE = (0, 2**32 - 1)  # numpy's legacy seeding, which transformers' set_seed calls, takes no other seed


def check_training_values(training: dict, origin: KeyOrigin) -> None:
    """TrainingArguments values that transformers would accept but that silently mean something else, or that fail
    only deep inside training (after the phase folder exists): each refused in one line naming where it was given."""
    max_steps = training.get("max_steps")
    if max_steps is not None and max_steps <= 0:
        raise ValueError(
            f"`max_steps` must be a positive number of optimiser steps, got {max_steps} ({origin.of('max_steps')}); "
            "leave it out to train for `num_train_epochs` instead."
        )
    epochs = training.get("num_train_epochs")
    if epochs is not None and not epochs > 0:
        raise ValueError(f"`num_train_epochs` must be positive, got {epochs} ({origin.of('num_train_epochs')}).")
    seed = training.get("seed")
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ValueError(f"`seed` must be an integer from 0 to {SEED_RANGE[1]}, got {seed} ({origin.of('seed')}).")
    rate = training.get("learning_rate")
    if rate is not None and not rate >= 0:
        raise ValueError(f"`learning_rate` must be 0 or more, got {rate} ({origin.of('learning_rate')}).")
    for key in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        if training.get(key) is not None and training[key] < 1:
            raise ValueError(f"`{key}` must be at least 1, got {training[key]} ({origin.of(key)}).")
    _check_save_steps(training, origin)


def _check_save_steps(training: dict, origin: KeyOrigin) -> None:
    """With `load_best_model_at_end`, every checkpoint must follow an evaluation (the best one is chosen among
    evaluated checkpoints): transformers refuses it only when the Trainer's arguments are built."""
    value = {f.name: f.default for f in dataclasses.fields(PhaseTrainingArguments) if f.init} | training
    steps = all(str(getattr(value[k], "value", value[k])) == "steps" for k in ("eval_strategy", "save_strategy"))
    save, evaluate = value["save_steps"], value["eval_steps"] or value["logging_steps"]
    if not (value["load_best_model_at_end"] and steps and save >= 1 and evaluate >= 1) or save % evaluate == 0:
        return  # (fractions of the run, below 1, are transformers' to check)

    def given(key: str) -> str:
        return origin.of(key) if key in training else "the default"

    multiple = evaluate * max(1, round(save / evaluate))
    raise ValueError(
        f"save_steps {save:g} ({given('save_steps')}) is not a multiple of eval_steps {evaluate:g} "
        f"({given('eval_steps')}): with load_best_model_at_end the best checkpoint is chosen among evaluated ones, so "
        f"set save_steps to a multiple of {evaluate:g} (e.g. --save_steps {multiple:g})"
        ", or --load_best_model_at_end false."
    )


def _training_arguments(training: dict, origin: KeyOrigin) -> PhaseTrainingArguments:
    """The recipe's TrainingArguments; a combination transformers refuses is one line naming the recipe."""
    try:
        return PhaseTrainingArguments(**training)
    except ValueError as error:
        raise ValueError(f"transformers' TrainingArguments refuse the recipe {origin.where}: {error}") from None


def model_config_fields(values: dict) -> set[str]:
    """Names accepted as model-config keys: the fields of the config class of `model_type`."""
    model_type = values.get("model_type")
    if model_type is None:
        return set()
    from ..registry import ENTRY_POINT_GROUP, find_architecture, installed_plugins, register_auto_classes

    register_auto_classes()  # spt_hf's model types (here, not at the top: `spt-hf --help` imports no torch)
    if model_type not in CONFIG_MAPPING:
        try:
            find_architecture(model_type)  # an installed plugin's, loaded here
        except ValueError:
            plugins = ", ".join(sorted(installed_plugins())) or "none"
            raise ValueError(
                f"Unknown `model_type` {model_type!r}; spt_hf provides {sorted(SPT_MODEL_TYPES)}, installed plugins: "
                f"{plugins} (a plugin's package declares the entry point group {ENTRY_POINT_GROUP})."
            ) from None
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
    check_early_stopping(recipe.training)
    if recipe.data.validation_from not in ("train", "test"):
        raise ValueError(f"`validation_from` must be 'train' or 'test', got {recipe.data.validation_from!r}.")
    if recipe.data.generate_data and recipe.data.data_dir is None:
        from ..data.generators import GENERATED_TASKS

        if recipe.data.task not in GENERATED_TASKS:
            raise ValueError(
                f"`generate_data` works for {list(GENERATED_TASKS)}, not {recipe.data.task!r}; set `data_dir`."
            )
    if phase == SPT_PHASE:
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
    if recipe.spt.packed_sequences and phase in FINETUNING_PHASES:
        raise ValueError(
            "`packed_sequences: true` is for the SPT phase: a classifier pools each row into one prediction "
            "(`pooling`), so the sequences of a packed row would be pooled together; set packed_sequences: false for "
            "finetuning."
        )
    if recipe.spt.packed_sequences and phase == SPT_PHASE:
        refuse_unpackable_recipe(recipe)
    check_label_names(recipe, phase)
    if phase in (SPT_PHASE, BASELINE_PHASE) and recipe.model.model_type is None:
        raise ValueError(
            f"A new model needs `model_type` in the recipe (one of {sorted(SPT_MODEL_TYPES)}); to finetune a "
            "checkpoint, pass `--model_name_or_path`."
        )


def check_early_stopping(training: PhaseTrainingArguments) -> None:
    """`early_stopping_patience` counts evaluations: a positive number, with evaluations during training."""
    patience = training.early_stopping_patience
    if patience is None:
        return
    if patience < 1:
        raise ValueError(
            f"`early_stopping_patience` must be at least 1 evaluation, got {patience}; leave it out (null) to train "
            "the whole budget."
        )
    if str(getattr(training.eval_strategy, "value", training.eval_strategy)) == "no":
        raise ValueError(
            "`early_stopping_patience` stops on validation evaluations, but `eval_strategy: no` makes none: set "
            "eval_strategy: steps (with eval_steps) or epoch."
        )


def check_label_names(recipe: Recipe, phase: str | None) -> None:
    """`id2label` names the classes of a finetuning phase's head: one name for each class of the task (ids 0 to
    n - 1, n the task's classes or the recipe's `num_labels`), or transformers would replace it by LABEL_0...LABEL_n."""
    names = recipe.model_config.get("id2label")
    if names is None or phase not in FINETUNING_PHASES:
        return
    from ..data import get_task_spec

    spec = get_task_spec(recipe.data.task, **recipe.data.task_options)
    if spec.problem_type == "regression":
        raise ValueError(f"Task {recipe.data.task!r} is a regression: `id2label` has no classes to name; leave it out.")
    count = recipe.model_config.get("num_labels", spec.num_labels)
    ids = sorted(str(key) for key in names) if isinstance(names, dict) else None
    if ids != sorted(str(i) for i in range(count)):
        raise ValueError(
            f"`id2label` must name each of the {count} classes of {recipe.data.task!r} once, ids 0 to {count - 1} "
            f"(e.g. --id2label '{{0: first, 1: second, ...}}'), got {names!r}; or leave it out."
        )


def coerce(key: str, value, cls: type, origin: KeyOrigin | None = None):
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
    where = f" ({origin.of(key)})" if origin is not None else ""
    raise ValueError(f"Recipe key `{key}` expects {expected}, got {value!r} ({type(value).__name__}){where}.")


def _close_matches(unknown: list[str], allowed: list[str]) -> str:
    import difflib

    hints = [f"{key} -> {match[0]}" for key in unknown if (match := difflib.get_close_matches(key, allowed, 1))]
    return f" Did you mean: {', '.join(hints)}?" if hints else ""
