"""Every shipped recipe (spt_hf/recipes, accelerate/ excepted): it loads, its model config builds for its task, its
SPT and finetuning files agree on the architecture, its SPT objective is valid, the paper recipes cover
docs/method.md §7, and the `# Run:` commands of every header are accepted.

Recipes of a model type that is not registered with transformers yet are skipped with the reason.
"""

import dataclasses
from pathlib import Path

import pytest
import yaml
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

import spt_hf  # noqa: F401  (registers the spt_hf model types)
from spt_hf.auto import AutoModelForRetrieval
from spt_hf.data import TASKS, get_task_spec
from spt_hf.recipes.arguments import ARGUMENT_CLASSES, OBJECTIVES, PHASE_FIELDS
from spt_hf.recipes.loading import RECIPES_DIR as RECIPES
from spt_hf.recipes.loading import find_recipe, read_recipe_file, recipe_name
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import model_config
from spt_hf.training.task_data import TaskData

ALL = sorted(p for p in RECIPES.rglob("*.yaml") if p.relative_to(RECIPES).parts[0] != "accelerate")
SPT = [p for p in ALL if p.stem.endswith("-spt")]
FINETUNE = [p for p in ALL if p.stem.endswith("-finetune")]
PAPER = [p for p in ALL if p.parent.name != "cpu"]
CPU = [p for p in ALL if p.parent.name == "cpu"]
MODEL_TYPES = {
    "transformer": "spt_rotary_transformer",
    "s4": "spt_s4",
    "dlr": "spt_dlr",
    "mega": "spt_mega",
    "spade": "spt_spade",
    "linformer": "spt_linformer",
    "performer": "spt_performer",
    "pythia70m": "spt_backbone",
    "pythia70m-pretrained": "spt_backbone",
}
LRA = ["listops", "text", "retrieval", "image", "pathfinder", "pathx"]
# docs/method.md §7: the (task, architecture) pairs the paper ran; its LRA baselines on every LRA task
# (docs/architectures.md, "MEGA, SPADE, Linformer and Performer").
PAPER_RUNS = {
    "transformer": [
        "listops",
        "text",
        "retrieval",
        "image",
        "pathfinder",
        "pathx",
        "pathx256",
        "scifar",
        "speech_commands",
        "bidmc",
    ],
    "s4": ["listops", "text", "retrieval", "image", "pathfinder", "pathx", "speech_commands", "bidmc"],
    "dlr": ["listops", "text", "image", "pathx"],
    **{baseline: LRA for baseline in ("mega", "spade", "linformer", "performer")},
    # §3.5: Pythia-70M on the LRA tasks of the official configs/experiment/lra/llm/pyth-lra-*.yaml, from scratch
    # (its architecture with SPT) and text-pretrained (EleutherAI/pythia-70m-deduped)
    "pythia70m": LRA,
    "pythia70m-pretrained": LRA,
}
# Recipe keys that are arguments (data, SPT, training), not model-config fields.
ARGUMENT_KEYS = {f.name for cls in ARGUMENT_CLASSES for f in dataclasses.fields(cls)} - {"model_type"}
DATA_KEYS = ("task", "task_options", "max_length", "generate_data", "data_dir", "validation_from")
SPT_ONLY_KEYS = ("objective", "mask_rate", "span_length", "continuous_loss")


def ids(paths):
    return [str(p.relative_to(RECIPES)) for p in paths]


def raw(path: Path) -> dict:
    values = yaml.safe_load(path.read_text())
    assert isinstance(values, dict), f"{path} is not a mapping of `key: value` lines"
    return values


def sibling(path: Path) -> Path:
    stem = path.stem
    other = stem.replace("-spt", "-finetune") if stem.endswith("-spt") else stem.replace("-finetune", "-spt")
    return path.with_name(other + path.suffix)


def architecture(values: dict) -> dict:
    """The model_type and every model-config key that is not a phase field (heads, SPT loss, dropout)."""
    return {k: v for k, v in values.items() if k not in ARGUMENT_KEYS and k not in PHASE_FIELDS}


def skip_unregistered(values: dict) -> None:
    model_type = values.get("model_type")
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"model_type {model_type!r} is not registered with transformers' Auto classes yet (spt_hf).")


def test_every_registered_architecture_has_recipes():
    from spt_hf.modeling.architectures import MODEL_TYPES as REGISTERED

    assert set(MODEL_TYPES.values()) == set(REGISTERED)  # MODEL_TYPES above names each architecture's recipe stem
    in_cpu = {yaml.safe_load(p.read_text()).get("model_type") for p in CPU if p.stem.endswith("-spt")}
    missing = set(REGISTERED) - in_cpu
    assert not missing, f"registered architectures without a recipes/cpu/ SPT recipe: {sorted(missing)}"


def test_recipes_are_found():
    assert SPT and FINETUNE and CPU and PAPER
    assert len(SPT) + len(FINETUNE) == len(ALL), "every recipe is named <name>-spt.yaml or <name>-finetune.yaml"


@pytest.mark.parametrize("path", ALL, ids=ids(ALL))
def test_recipe_loads_and_its_model_config_builds(path):
    values = raw(path)
    skip_unregistered(values)
    recipe = load_recipe(path, {"data_dir": "/path/to/data"})  # every recipe takes --data_dir
    assert recipe.data.data_dir == "/path/to/data"
    options = dict(recipe.data.task_options)
    if recipe.data.max_length is not None:
        options["max_length"] = recipe.data.max_length
    task = TaskData(get_task_spec(recipe.data.task, **options), splits=None, data_dir=None)
    if path.stem.endswith("-spt"):
        loss = "cross_entropy" if task.spec.spt_target == "levels" else recipe.model_config.get("continuous_loss", "l1")
        config = model_config(recipe, task, bidirectional=recipe.spt.objective == "masked", continuous_loss=loss)
        auto = AutoModelForMaskedLM
    else:
        phase = {k: v for k, v in recipe.model_config.items() if k in PHASE_FIELDS}
        config = model_config(recipe, task, **{**task.head_kwargs(), **phase})
        auto = AutoModelForRetrieval if task.spec.paired else AutoModelForSequenceClassification
    assert config.model_type == recipe.model.model_type
    retokenised = recipe.model_config.get("backbone_input") == "tokenizer"  # the backbone tokenizer's ids
    assert (config.vocab_size is not None) == (task.spec.input_kind == "tokens" or retokenised)
    if path.parent.name == "cpu":  # small enough to build here
        if type(config) not in auto._model_mapping:
            pytest.skip(f"{config.model_type} has no {auto.__name__} registered yet (spt_hf/__init__.py).")
        model = auto.from_config(config)
        assert sum(p.numel() for p in model.parameters()) < 2_000_000


@pytest.mark.parametrize("path", ALL, ids=ids(ALL))
def test_spt_and_finetune_recipes_come_in_pairs_with_one_architecture(path):
    other = sibling(path)
    assert other.is_file(), f"{path.name} has no sibling {other.name} (`spt-hf run` pairs them by name)"
    values, other_values = raw(path), raw(other)
    assert architecture(values) == architecture(other_values), "SPT and finetuning must share the architecture"
    for key in (*DATA_KEYS, "output_dir"):
        assert values.get(key) == other_values.get(key), f"`{key}` differs between {path.name} and {other.name}"


@pytest.mark.parametrize("path", SPT, ids=ids(SPT))
def test_spt_recipes_name_a_valid_objective(path):
    values = raw(path)
    assert values.get("objective") in OBJECTIVES, f"{path.name} must set `objective` to one of {list(OBJECTIVES)}"
    if values["objective"] == "masked":
        assert 0.0 < values.get("mask_rate", 0.5) < 1.0
    assert values.get("bidirectional", values["objective"] == "masked") == (values["objective"] == "masked")


@pytest.mark.parametrize("path", FINETUNE, ids=ids(FINETUNE))
def test_finetune_recipes_hold_no_spt_keys(path):
    stray = [key for key in SPT_ONLY_KEYS if key in raw(path)]
    assert not stray, f"{path.name} sets SPT-only keys {stray}, which finetuning ignores"


@pytest.mark.parametrize("path", PAPER, ids=ids(PAPER))
def test_paper_recipes_follow_the_layout(path):
    values = raw(path)
    task, arch = path.parent.name, path.stem.rsplit("-", 1)[0]
    assert task in TASKS and values["task"] == task
    assert values["model_type"] == MODEL_TYPES[arch]
    assert values["output_dir"] == f"runs/{task}-{arch}"
    assert values["eval_strategy"] == values["save_strategy"] == "epoch"
    assert values.get("num_train_epochs", 0) > 0 and "max_steps" not in values
    assert "data_dir" not in values, "paper recipes take the data location on the command line"


def test_paper_recipes_cover_method_section_7():
    found = {(p.parent.name, p.stem.rsplit("-", 1)[0]) for p in PAPER}
    expected = {(task, arch) for arch, tasks in PAPER_RUNS.items() for task in tasks}
    assert found == expected


@pytest.mark.parametrize("path", CPU, ids=ids(CPU))
def test_cpu_recipes_are_bounded_and_need_no_data_dir(path):
    values = raw(path)
    assert isinstance(values.get("max_steps"), int) and 0 < values["max_steps"] <= 2000
    assert "data_dir" not in values
    assert values["task"] == "digits" or values.get("generate_data"), "CPU data must install offline or be generated"


def run_lines(path: Path) -> list[tuple[str, str]]:
    """The `# Run:` commands of a recipe's header (backslash continuations joined) with the comment line above each."""
    lines = path.read_text().splitlines()
    commands = []
    for index, line in enumerate(lines):
        if not line.startswith("# Run:"):
            continue
        text, follow = line.removeprefix("# Run:").strip(), index
        while text.endswith("\\"):
            follow += 1
            text = text[:-1] + " " + lines[follow].lstrip("#").strip()
        commands.append((text, lines[index - 1]))
    return commands


@pytest.mark.parametrize("path", ALL, ids=ids(ALL))
def test_run_lines_are_accepted_commands_that_follow_the_phase_folders(path):
    """Each `# Run:` line parses as an `spt-hf` command of this recipe (or, for `run`, its SPT sibling), loads for
    its phase, and the folders it names follow the rules: a phase writes `<output_dir>/<phase>`, finetuning reads
    the SPT checkpoint from `<output_dir>/spt`."""
    import shlex

    from spt_hf.cli import build_parser
    from spt_hf.recipes.loading import find_recipe, parse_overrides

    commands = run_lines(path)
    assert commands, f"{path.name} has no `# Run:` line"
    output_dir = raw(path)["output_dir"]
    for command, comment in commands:
        words = shlex.split(command)
        assert words[0] == "spt-hf", command
        args, rest = build_parser().parse_known_args(words[1:])
        assert args.command in ("spt", "finetune", "run"), command
        overrides = parse_overrides(rest)
        assert "output_dir" not in overrides, f"{command}: output_dir is the run folder, set by the recipe"
        spt_file = path if path.stem.endswith("-spt") else sibling(path)
        expected = spt_file if args.command == "run" else path
        assert find_recipe(args.config).resolve() == expected.resolve(), command
        if args.command == "run":
            assert f"into {output_dir}/{{spt,finetune,scratch}}" in comment, comment
            continue
        phase = "spt" if args.command == "spt" else ("finetune" if "model_name_or_path" in overrides else "scratch")
        load_recipe(args.config, overrides, phase="spt" if phase == "spt" else "finetune")
        assert f"into {output_dir}/{phase}:" in comment, (command, comment)
        if phase == "finetune":
            assert overrides["model_name_or_path"] == f"{output_dir}/spt", command


@pytest.mark.parametrize("path", SPT, ids=ids(SPT))
def test_sibling_recipes_state_and_agree_on_gradient_clipping(path):
    """The method clips nothing; whatever a recipe does, it says so, and both phases of a pair do the same."""
    values, other = raw(path), raw(sibling(path))
    assert "max_grad_norm" in values and "max_grad_norm" in other, "state max_grad_norm explicitly (with the reason)"
    assert values["max_grad_norm"] == other["max_grad_norm"]
    assert "max_grad_norm" in [line.split(":")[0] for line in path.read_text().splitlines() if "#" in line]


@pytest.mark.parametrize("path", [SPT[0], FINETUNE[0]], ids=["spt", "finetune"])
def test_a_recipe_given_to_the_other_phase_is_refused(path):
    phase = "finetune" if path.stem.endswith("-spt") else "spt"
    with pytest.raises(ValueError, match=r"is a (finetuning|self-pretraining) recipe .* run it with `spt-hf"):
        load_recipe(path, {"data_dir": "/path/to/data"}, phase=phase)


TWICE = {  # a recipe naming a key twice, and the lines the refusal names
    "top level": (
        "task: digits\nlearning_rate: 0.1\nseed: 3\nlearning_rate: 0.2\n",
        "`learning_rate` .* lines 2 and 4",
    ),
    "nested": (
        "task: digits\ntask_options:\n  input_kind: tokens\n  input_kind: values\n",
        "`input_kind` .* lines 3 and 4",
    ),
    "flow mapping": (
        "task: digits\ntask_options: {input_kind: tokens, input_kind: values}\n",
        "`input_kind` .* 2 and 2",
    ),
}


@pytest.mark.parametrize("case", list(TWICE))
def test_a_key_given_twice_is_refused_naming_both_lines(case, tmp_path):
    text, message = TWICE[case]
    path = tmp_path / "twice-spt.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"Recipe {path}: key {message}; YAML would silently keep the second value"):
        read_recipe_file(path)


def test_a_shipped_recipe_is_named_by_its_name_and_a_file_by_its_path(tmp_path):
    assert recipe_name(find_recipe("cpu/digits-s4-spt.yaml")) == "cpu/digits-s4-spt.yaml"
    assert recipe_name(tmp_path / "mine.yaml") == str(tmp_path / "mine.yaml")
