"""Model-size presets and the recipes of a task file: SPT and finetuning recipes for any task, no recipe writing.

A preset names where an architecture's settings come from; its numbers live in the shipped recipes only:
- `small`: the CPU recipes, `cpu/digits-<arch>-{spt,finetune}.yaml` (sizes and optimisation measured on a CPU);
- `tiny`: `small` (or `paper` where no CPU recipe exists) narrowed to `TINY_WIDTH` and `TINY_LAYERS`, for tests;
- `paper`: the paper recipes `<task>/<arch>-{spt,finetune}.yaml` of the paper task whose length is closest to the
  task's (on a log scale; a tie goes to the task of the same input kind, then to the first by name).

`recipes_for_task` fills in what the task decides (task and options, vocabulary or channels, classes, length), keeps
what the preset's recipes decide (architecture, SPT objective, optimisation) and sets the budget from `max_steps` or
`num_train_epochs`. Each recipe is checked by `load_recipe`, as a phase would load it.
"""

import copy
import math
from pathlib import Path

from ..data import get_task_spec
from ..phases import FINETUNE_PHASE, SPT_PHASE
from .arguments import evaluation_cadence
from .loading import RECIPES_DIR, load_recipe, read_recipe_file

PRESETS = ("tiny", "small", "paper")
CPU_FOLDER = RECIPES_DIR / "cpu"
CPU_TASK = "digits"  # the CPU recipes of every architecture (tests/training/test_recipes.py checks they exist)
TINY_WIDTH, TINY_LAYERS = 32, 2
PLUGIN_REFERENCE = "transformer"  # whose preset optimisation a plugin's presets take (`plugin_preset_values`)
# Widths scaled with hidden_size for `tiny` (heads, state sizes and windows are kept).
WIDTH_KEYS = (
    "hidden_size",
    "intermediate_size",
    "nffn_hidden_size",
    "n_ssm",
    "shared_representation_size",
    "num_random_features",
)
# Keys of a shipped recipe that belong to its task or its run, not to the preset: the task file and the budget set them.
TASK_KEYS = {
    "task",
    "task_options",
    "data_dir",
    "generate_data",
    "max_length",
    "validation_from",
    "output_dir",
    "pooling",
    "num_labels",
    "problem_type",
    "id2label",
    "label2id",
    "metric_for_best_model",
    "greater_is_better",
}
BUDGET_KEYS = ("max_steps", "num_train_epochs", "total_steps", "spt_fraction")
BUDGETS = ("tied", "equal")  # compare's budget rules (compare/plan.py); a preset's default is the first, `tied`
DEFAULT_BUDGET = "tied"  # as the demo and the paper's fixed-budget experiment


def preset_architectures() -> dict[str, dict]:
    """Architecture name -> {preset: (SPT recipe, finetuning recipe)} for `small` and `paper` (the shipped pairs;
    recipes that load pretrained weights are a baseline kind, not an architecture, and are left out)."""
    found: dict[str, dict] = {}
    for spt in sorted(RECIPES_DIR.rglob("*-spt.yaml")):
        finetune = spt.with_name(spt.name.replace("-spt.yaml", "-finetune.yaml"))
        stem = spt.name.removesuffix("-spt.yaml")
        if not finetune.is_file() or "backbone_name_or_path" in read_recipe_file(spt):
            continue
        if spt.parent == CPU_FOLDER and stem.startswith(CPU_TASK + "-"):
            found.setdefault(stem.removeprefix(CPU_TASK + "-"), {})["small"] = (spt, finetune)
        elif spt.parent.parent == RECIPES_DIR and spt.parent != CPU_FOLDER:
            found.setdefault(stem, {}).setdefault("paper", []).append((spt, finetune))
    return found


def preset_sources(architecture: str, preset: str, spec) -> tuple[Path, Path]:
    """The shipped recipe pair a preset of `architecture` starts from, for the task `spec`; one line when none."""
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; presets: {', '.join(PRESETS)}.")
    known = preset_architectures()
    if architecture not in known:
        raise ValueError(f"Unknown architecture {architecture!r}; architectures with presets: {', '.join(known)}.")
    sources = known[architecture]
    if preset == "paper":
        if "paper" not in sources:
            raise ValueError(
                f"Architecture {architecture!r} has no paper recipe (the paper did not run it): use --preset small."
            )
        return closest_paper_pair(sources["paper"], spec)
    if "small" in sources:
        return sources["small"]
    if preset == "tiny":
        return closest_paper_pair(sources["paper"], spec)
    raise ValueError(
        f"Architecture {architecture!r} has no CPU recipe (recipes/cpu/{CPU_TASK}-{architecture}-*.yaml): use "
        "--preset tiny or --preset paper."
    )


def closest_paper_pair(pairs: list[tuple[Path, Path]], spec) -> tuple[Path, Path]:
    """The paper pair whose task length is closest to `spec.max_length` (log scale), then of the same input kind,
    then the first by task name."""

    def distance(pair: tuple[Path, Path]) -> tuple[float, bool, str]:
        values = read_recipe_file(pair[0])
        paper = get_task_spec(values["task"], **values.get("task_options", {}))
        kind = paper.input_kind != spec.input_kind
        return abs(math.log(paper.max_length / spec.max_length)), kind, pair[0].parent.name

    return min(pairs, key=distance)


def preset_values(architecture: str, preset: str, spec) -> tuple[dict, dict, list[str]]:
    """The SPT and finetuning recipe values of a preset (task keys left out) and the names of their sources; an
    architecture without shipped recipes (a plugin's) gets `plugin_preset_values`."""
    if preset in PRESETS and architecture not in preset_architectures():
        return plugin_preset_values(architecture, preset, spec)
    pair = preset_sources(architecture, preset, spec)
    values = [{k: v for k, v in read_recipe_file(path).items() if k not in TASK_KEYS} for path in pair]
    if preset == "tiny":
        values = [narrow(v) for v in values]
    if spec.input_kind != "continuous":
        for v in values:
            v.pop("continuous_loss", None)
    names = [str(path.relative_to(RECIPES_DIR)) for path in pair]
    return values[0], values[1], names


def plugin_preset_values(architecture: str, preset: str, spec) -> tuple[dict, dict, list[str]]:
    """A registered architecture without shipped recipes (a plugin, docs/own-architecture.md): the optimisation,
    objective and budget of `PLUGIN_REFERENCE`'s preset with its model keys replaced by the plugin's
    `model_type` and model keys: `config_cls.spt_preset(preset)` when the config defines it, else the config's own
    defaults (`small`) or those at `TINY_WIDTH` and `TINY_LAYERS` (`tiny`). `paper` is refused (one line)."""
    from ..registry import find_architecture

    entry = find_architecture(architecture, builtins=sorted(preset_architectures()))
    if preset == "paper":
        raise ValueError(f"Architecture {architecture!r} (a plugin) has no paper recipe: use --preset small or tiny.")
    spt, finetune, names = preset_values(PLUGIN_REFERENCE, preset, spec)
    reference_fields = model_fields(spt["model_type"])
    model = {"model_type": entry.config_cls.model_type}
    if hasattr(entry.config_cls, "spt_preset"):
        model.update(entry.config_cls.spt_preset(preset))
    elif preset == "tiny":
        model.update(hidden_size=TINY_WIDTH, num_hidden_layers=TINY_LAYERS)
    values = [{**{k: v for k, v in phase.items() if k not in reference_fields}, **model} for phase in (spt, finetune)]
    source = f"{entry.plugin or entry.config_cls.__module__} preset {preset} (optimisation of {names[0]})"
    return values[0], values[1], [source, source.replace(names[0], names[1])]


def model_fields(model_type: str) -> set[str]:
    """The config fields of `model_type` (registered), model_type included."""
    import dataclasses

    from ..modeling.architectures import REGISTRY

    return {f.name for f in dataclasses.fields(REGISTRY[model_type].config_cls)} | {"model_type"}


def narrow(values: dict) -> dict:
    """`values` at the tiny size: `TINY_LAYERS` layers and every width scaled with hidden_size to `TINY_WIDTH`
    (inside `backbone_config` for spt_backbone)."""
    values = copy.deepcopy(values)
    for config in (values, values.get("backbone_config")):
        if not isinstance(config, dict) or "hidden_size" not in config:
            continue
        scale = TINY_WIDTH / config["hidden_size"]
        for key in WIDTH_KEYS:
            if isinstance(config.get(key), int):
                config[key] = max(1, round(config[key] * scale))
        config["num_hidden_layers"] = TINY_LAYERS
    return values


def task_values(spec) -> tuple[dict, dict]:
    """What the task `spec` decides, for both phases and for finetuning only: the vocabulary (tokens) or channels
    (continuous values) and the length; the problem type and the classes (`id2label`)."""
    if spec.input_kind == "tokens":
        common = {"vocab_size": spec.vocab_size}
    else:
        common = {"num_channels": spec.num_channels}
    common["max_position_embeddings"] = spec.max_length
    if spec.is_regression:
        return common, {"problem_type": spec.problem_type}
    names = spec.label_names or [str(i) for i in range(spec.num_labels)]
    return common, {"problem_type": spec.problem_type, "id2label": dict(enumerate(names))}


def budget_values(values: dict, max_steps: int | None, num_train_epochs: float | None) -> dict:
    """`values` with the budget given: `max_steps` optimiser steps per phase (with the derived evaluation cadence,
    `evaluation_cadence`), or `num_train_epochs` epochs (evaluated and saved every epoch); neither keeps the
    preset's."""
    if max_steps is not None and num_train_epochs is not None:
        raise ValueError("Give --max_steps or --num_train_epochs, not both: each sets the whole budget of a phase.")
    if max_steps is None and num_train_epochs is None:
        return values
    values = {k: v for k, v in values.items() if k not in BUDGET_KEYS}
    if num_train_epochs is not None:
        for key in ("eval_steps", "save_steps"):
            values.pop(key, None)
        return {**values, "num_train_epochs": num_train_epochs, "eval_strategy": "epoch", "save_strategy": "epoch"}
    return {**values, "max_steps": max_steps, **evaluation_cadence(max_steps)}


def budget_rule(spt: dict, finetune: dict, budget: str) -> tuple[dict, dict]:
    """The SPT and finetuning values of one architecture under the comparison's budget rule, the same for every
    architecture of a preset (spt_hf's and plugins'). `tied`: SPT and finetuning share `total_steps` (a preset that
    sets none gets the sum of its phases' `max_steps`, split as they are) and the baseline gets all of it; `equal`:
    each phase its own `max_steps`, `total_steps` removed."""
    if budget not in BUDGETS:
        raise ValueError(f"Unknown budget {budget!r}; budgets: {', '.join(BUDGETS)}.")
    spt = {k: v for k, v in spt.items() if budget == "tied" or k not in ("total_steps", "spt_fraction")}
    if budget == "equal" or spt.get("total_steps"):
        return spt, finetune
    steps = spt.get("max_steps"), finetune.get("max_steps")
    if not all(isinstance(value, int) for value in steps):
        raise ValueError(
            "`--budget tied` shares optimiser steps between SPT and finetuning, but this preset counts epochs: pass "
            "--max_steps N (steps per phase; the baseline gets both phases' sum), or --budget equal."
        )
    total = sum(steps)
    return {**spt, "total_steps": total, "spt_fraction": steps[0] / total}, finetune


def recipes_for_task(task: str, options: dict, architectures: list[str], preset: str, **budget) -> dict[str, dict]:
    """`{filename: recipe values}` of `sourced_recipes` (`budget`: max_steps, num_train_epochs, name, budget)."""
    return {
        filename: values
        for filename, (values, _) in sourced_recipes(task, options, architectures, preset, **budget).items()
    }


def sourced_recipes(
    task: str,
    options: dict,
    architectures: list[str],
    preset: str,
    max_steps: int | None = None,
    num_train_epochs: float | None = None,
    name: str | None = None,
    budget: str | None = None,
) -> dict[str, tuple[dict, str]]:
    """`{filename: (recipe values, the shipped recipe they come from)}`: `<name>-<arch>-spt.yaml` and
    `<name>-<arch>-finetune.yaml` for each architecture (the finetuning recipe serves the scratch baseline and the
    finetuning from SPT alike), checked by `load_recipe` for their phase, every architecture under the one budget
    rule `budget` (`budget_rule`; default `DEFAULT_BUDGET`). `name` (default: the task) names the files, as
    `spt-hf compare --tasks` does."""
    if not architectures:
        raise ValueError("Name at least one architecture (--architectures s4 transformer ...).")
    if task == "custom" and name and "name" not in options:  # reports name the task as its files and folders do
        options = {**options, "name": name}
    spec = get_task_spec(task, **options)
    inputs, head = task_values(spec)
    data = {"task": task, **({"task_options": dict(options)} if options else {})}
    recipes = {}
    for architecture in dict.fromkeys(architectures):
        spt, finetune, sources = preset_values(architecture, preset, spec)
        spt, finetune = (budget_values(values, max_steps, num_train_epochs) for values in (spt, finetune))
        spt, finetune = budget_rule(spt, finetune, budget or DEFAULT_BUDGET)
        pair = {SPT_PHASE: {**data, **spt, **inputs}, FINETUNE_PHASE: {**data, **finetune, **inputs, **head}}
        for (phase, values), source in zip(pair.items(), sources, strict=True):
            filename = f"{name or task}-{architecture}-{phase}.yaml"
            try:
                load_recipe(None, values, phase=phase)
            except ValueError as error:
                raise ValueError(f"{filename} (preset {preset}, from {source}): {error}") from None
            recipes[filename] = values, source
    return recipes


def write_recipes(
    recipes: dict[str, tuple[dict, str]], folder: Path, origin: str, overwrite: bool = False, fix: str | None = None
) -> list[Path]:
    """Write `sourced_recipes` into `folder` as editable YAML, each with a header naming where it comes from. An
    existing file that differs is refused (one line, ending in `fix`) unless `overwrite`; an identical one is left as
    it is. Nothing is written when one file is refused."""
    return write_texts(recipe_texts(recipes, Path(folder), origin), overwrite, fix)


def recipe_texts(recipes: dict[str, tuple[dict, str]], folder: Path, origin: str) -> dict[Path, str]:
    """{path in `folder`: YAML text with a header naming where it comes from} of `write_recipes`."""
    import yaml

    texts = {}
    for filename, (values, source) in recipes.items():
        header = f"# {origin};\n# values of the shipped recipe {source}, the task's own filled in. Edit freely.\n"
        texts[folder / filename] = header + yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
    return texts


def write_texts(texts: dict[Path, str], overwrite: bool = False, fix: str | None = None) -> list[Path]:
    """Write every text, each file atomically, after checking them all: an existing file that differs is refused
    (one line, ending in `fix`) unless `overwrite`, and then nothing is written."""
    clashes = [p for p, text in texts.items() if p.is_file() and p.read_text() != text]
    if clashes and not overwrite:
        folder = clashes[0].parent
        raise FileExistsError(
            f"{clashes[0]} exists and differs from the recipe it would be ({len(clashes)} such file(s) in {folder}): "
            + (fix or "pass --overwrite to replace them, or write into another --output_dir.")
        )
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            staging = path.with_name(path.name + ".tmp")
            staging.write_text(text)
            staging.replace(path)
    return list(texts)


DEFAULT_PRESET = "small"


def task_file_recipes(
    task_config: str | Path,
    architectures: list[str],
    preset: str | None = None,
    max_steps: int | None = None,
    num_train_epochs: float | None = None,
    budget: str | None = None,
) -> tuple[dict[str, tuple[dict, str]], str]:
    """The `sourced_recipes` of a task file (`recipes/task_file.py`), named after the file (`name`), under the
    budget rule `budget`, and the line their headers start with."""
    from .task_file import read_task_file

    path = Path(task_config).expanduser().resolve()  # so that the recipes' data paths hold from any folder
    task, options = read_task_file(path)
    preset = preset or DEFAULT_PRESET
    name = task_file_name(path)
    recipes = sourced_recipes(task, options, architectures, preset, max_steps, num_train_epochs, name, budget)
    return recipes, f"Written by spt-hf from the task file {path} (preset {preset})"


def task_file_name(path: Path) -> str:
    """The task name a task file's recipes and run folders go by: its file name without the extension, with the
    characters other than letters, digits and `_` replaced by `_` (recipe file names split at `-`)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in Path(path).stem) or "task"


def compare_task_recipes(
    task_configs: list[str | Path],
    architectures: list[str],
    preset: str | None,
    output_dir: str | Path,
    overrides: dict,
    budget: str | None = None,
) -> tuple[Path, dict]:
    """`spt-hf compare --task_config A.yaml B.yaml ...`: every task file's recipes written into
    `<output_dir>/recipes` (the same command writes the same files, so a comparison resumes), under compare's budget
    rule `budget` (default `tied`), with the budget keys of `overrides` (`max_steps`, `num_train_epochs`) written into
    them. Every task file is read and every recipe checked against the folder before any is written: a mistake in the
    last file leaves nothing behind. Returns the recipes folder and the other overrides."""
    steps = {key: overrides[key] for key in ("max_steps", "num_train_epochs") if key in overrides}
    rest = {key: value for key, value in overrides.items() if key not in steps}
    folder = Path(output_dir) / "recipes"
    texts, names = {}, []
    for task_config in task_configs:
        recipes, origin = task_file_recipes(str(task_config), architectures, preset, **steps, budget=budget)
        texts.update(recipe_texts(recipes, folder, origin))
        names.append(task_file_name(Path(task_config)))
    fix = (
        f"another --output_dir for other settings, or run your edited recipes with --recipes_dir {folder} "
        f"--tasks {' '.join(names)} (without --task_config)."
    )
    write_texts(texts, fix=fix)
    return folder, rest
