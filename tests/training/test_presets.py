"""Presets and the recipes of a task file (recipes/presets.py): every architecture has them, every recipe loads for its
phase with the task's own inputs and classes, the SPT objective and sizes come from the shipped recipes, budgets from
max_steps / num_train_epochs, and each bad request is one line."""

import types

import pytest
import yaml

from spt_hf.data import get_task_spec
from spt_hf.modeling.architectures import MODEL_TYPES
from spt_hf.recipes.loading import RECIPES_DIR, read_recipe_file
from spt_hf.recipes.presets import (
    TINY_LAYERS,
    TINY_WIDTH,
    closest_paper_pair,
    preset_architectures,
    recipes_for_task,
    sourced_recipes,
    write_recipes,
)
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import phase_budgets

DIGITS = {"input_kind": "tokens"}
ARCHITECTURES = preset_architectures()


def pair(recipes: dict, architecture: str, task: str = "digits") -> tuple[dict, dict]:
    return recipes[f"{task}-{architecture}-spt.yaml"], recipes[f"{task}-{architecture}-finetune.yaml"]


def width(values: dict) -> tuple[int, int]:
    """(hidden size, layers) of a recipe's model, inside `backbone_config` for spt_backbone."""
    config = values.get("backbone_config", values)
    return config["hidden_size"], config["num_hidden_layers"]


def test_every_registered_architecture_has_tiny_and_small_presets_that_load():
    recipes = recipes_for_task("digits", DIGITS, list(ARCHITECTURES), "tiny", max_steps=4)
    assert {values["model_type"] for values in recipes.values()} == set(MODEL_TYPES)
    for architecture in ARCHITECTURES:
        spt, finetune = pair(recipes, architecture)
        assert width(spt) == width(finetune) == (TINY_WIDTH, TINY_LAYERS), architecture
    small = [name for name, sources in ARCHITECTURES.items() if "small" in sources]
    assert {read_recipe_file(ARCHITECTURES[name]["small"][0])["model_type"] for name in small} == set(MODEL_TYPES)
    recipes = recipes_for_task("digits", DIGITS, small, "small")
    for architecture in small:
        shipped = read_recipe_file(RECIPES_DIR / f"cpu/digits-{architecture}-spt.yaml")
        spt, _ = pair(recipes, architecture)
        assert width(spt) == width(shipped) and spt["learning_rate"] == shipped["learning_rate"]
        own = (
            shipped.get("total_steps")
            or shipped["max_steps"] + read_recipe_file(ARCHITECTURES[architecture]["small"][1])["max_steps"]
        )
        assert spt["total_steps"] == own  # no budget given: the preset's own steps, tied (the default rule)


def test_the_task_decides_inputs_length_and_classes_and_the_recipe_loads_for_its_phase():
    spec = get_task_spec("digits", input_kind="continuous")
    recipes = recipes_for_task("digits", {"input_kind": "continuous"}, ["s4"], "tiny", name="scans")
    spt, finetune = pair(recipes, "s4", "scans")
    assert spt["num_channels"] == spec.num_channels and "vocab_size" not in spt
    assert spt["max_position_embeddings"] == finetune["max_position_embeddings"] == spec.max_length
    assert finetune["id2label"] == {i: str(i) for i in range(spec.num_labels)} and "id2label" not in spt
    assert spt["task_options"] == {"input_kind": "continuous"}
    assert load_recipe(None, finetune, phase="finetune").model_config["problem_type"] == spec.problem_type
    tokens, _ = pair(recipes_for_task("digits", DIGITS, ["s4"], "tiny"), "s4")
    assert tokens["vocab_size"] == get_task_spec("digits", **DIGITS).vocab_size and "num_channels" not in tokens


def test_the_spt_objective_is_the_shipped_recipes_causal_for_a_causal_only_decoder():
    recipes = recipes_for_task("digits", DIGITS, ["pythia70m", "mamba", "transformer"], "tiny", max_steps=4)
    pythia, _ = pair(recipes, "pythia70m")
    assert pythia["objective"] == "causal" and pythia["bidirectional"] is False
    for architecture in ("mamba", "transformer"):
        spt, finetune = pair(recipes, architecture)
        assert spt["objective"] == "masked" and "objective" not in finetune
    assert load_recipe(None, pythia, phase="spt").spt.objective == "causal"


def test_paper_presets_come_from_the_paper_task_of_the_closest_length():
    pairs = ARCHITECTURES["s4"]["paper"]
    for task in ("listops", "text", "speech_commands"):
        spec = get_task_spec(task)
        like = types.SimpleNamespace(max_length=spec.max_length, input_kind=spec.input_kind)
        chosen = closest_paper_pair(pairs, like)
        assert chosen[0].parent.name == task
    near_image = types.SimpleNamespace(max_length=900, input_kind="continuous")
    assert closest_paper_pair(pairs, near_image)[0].parent.name == "image"  # image before pathfinder: by name
    recipes = sourced_recipes("digits", DIGITS, ["s4"], "paper", max_steps=10)
    (spt, source), _ = recipes.values()
    shipped = read_recipe_file(RECIPES_DIR / source)
    assert source.startswith("image/") and width(spt) == width(shipped) and spt["kernel"] == shipped["kernel"]


def test_budgets_come_from_max_steps_or_num_train_epochs():
    spt, finetune = pair(recipes_for_task("digits", DIGITS, ["transformer"], "small", max_steps=80), "transformer")
    for values in (spt, finetune):  # about ten evaluations (and checkpoints) of the steps given
        assert values["max_steps"] == 80 and "num_train_epochs" not in values
        assert values["eval_steps"] == values["save_steps"] == values["logging_steps"] == 8
    assert spt["total_steps"] == 160 and spt["spt_fraction"] == 0.5  # tied: the baseline gets both phases' steps
    equal = recipes_for_task("digits", DIGITS, ["transformer"], "small", max_steps=80, budget="equal")
    assert "total_steps" not in pair(equal, "transformer")[0]
    spt, _ = pair(recipes_for_task("digits", DIGITS, ["s4"], "small", num_train_epochs=3, budget="equal"), "s4")
    assert spt["num_train_epochs"] == 3 and "max_steps" not in spt and "eval_steps" not in spt
    assert spt["eval_strategy"] == spt["save_strategy"] == "epoch"
    with pytest.raises(ValueError, match="--max_steps or --num_train_epochs, not both"):
        recipes_for_task("digits", DIGITS, ["s4"], "small", max_steps=8, num_train_epochs=3)
    with pytest.raises(ValueError, match="`max_steps` must be a positive number"):
        recipes_for_task("digits", DIGITS, ["s4"], "small", max_steps=-1)
    with pytest.raises(ValueError, match="preset counts epochs: pass --max_steps N .*, or --budget equal") as error:
        recipes_for_task("digits", DIGITS, ["s4"], "small", num_train_epochs=3)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("budget", ["tied", "equal"])
def test_every_architecture_of_a_preset_gets_one_budget_rule(budget):
    """An SSM's SPT arm must not get twice its baseline's compute while the Transformer's is tied (or the reverse):
    the plans of s4, dlr, transformer and mega under one preset have the same rule and the same steps per phase."""
    architectures = ["s4", "dlr", "transformer", "mega"]
    recipes = recipes_for_task("digits", DIGITS, architectures, "small", budget=budget)
    budgets = {}
    for architecture in architectures:
        spt, finetune = pair(recipes, architecture)
        phases = phase_budgets(load_recipe(None, spt, phase="spt"), load_recipe(None, finetune, phase="finetune"))
        budgets[architecture] = phases
        spt_arm, baseline = phases["spt"] + phases["finetune"], phases["scratch"]
        assert (spt_arm == baseline) if budget == "tied" else (baseline == phases["finetune"]), (architecture, phases)
    assert len({tuple(b.items()) for b in budgets.values()}) == 1, budgets


@pytest.mark.parametrize(
    "architecture, preset, message",
    [
        ("mamba", "paper", "'mamba' has no paper recipe .*: use --preset small"),
        ("pythia70m", "small", "'pythia70m' has no CPU recipe .*: use --preset tiny or --preset paper"),
        ("gru", "small", "Unknown architecture 'gru'; architectures with presets: .*s4"),
        ("s4", "huge", "Unknown preset 'huge'; presets: tiny, small, paper"),
    ],
)
def test_a_preset_that_does_not_exist_is_one_line(architecture, preset, message):
    with pytest.raises(ValueError, match=message) as error:
        recipes_for_task("digits", DIGITS, [architecture], preset)
    assert "\n" not in str(error.value)


def test_written_recipes_are_not_overwritten_unless_asked(tmp_path):
    recipes = sourced_recipes("digits", DIGITS, ["dlr"], "tiny", max_steps=4)
    paths = write_recipes(recipes, tmp_path, "test")
    assert [p.name for p in paths] == ["digits-dlr-spt.yaml", "digits-dlr-finetune.yaml"]
    text = paths[0].read_text()
    assert text.startswith("# test;\n# values of the shipped recipe cpu/digits-dlr-spt.yaml")
    assert yaml.safe_load(text) == recipes["digits-dlr-spt.yaml"][0]
    assert write_recipes(recipes, tmp_path, "test") == paths  # the same recipes again: nothing to refuse
    paths[1].write_text(paths[1].read_text().replace("learning_rate", "learning_rate: 0.5\n# was"))
    other = sourced_recipes("digits", DIGITS, ["dlr"], "small")
    with pytest.raises(FileExistsError, match="digits-dlr-spt.yaml exists and differs .*2 such file"):
        write_recipes(other, tmp_path, "test")
    assert paths[0].read_text() == text  # nothing written
    write_recipes(other, tmp_path, "test", overwrite=True)
    assert yaml.safe_load(paths[0].read_text()) == other["digits-dlr-spt.yaml"][0]


@pytest.mark.parametrize("input_kind", ["tokens", "continuous"])
def test_every_tiny_preset_builds_both_phases_models_for_the_task(input_kind):
    """The recipes build their models as the phases do (pipeline.phase_model), and the classifier runs."""
    import datasets
    import torch

    from spt_hf.training.pipeline import phase_model
    from spt_hf.training.task_data import TaskData

    spec = get_task_spec("digits", input_kind=input_kind)
    task = TaskData(spec, datasets.DatasetDict(), None)
    recipes = recipes_for_task("digits", {"input_kind": input_kind}, list(ARCHITECTURES), "tiny", max_steps=4)
    for architecture in ARCHITECTURES:
        spt, finetune = pair(recipes, architecture)
        pretrainer, _ = phase_model(load_recipe(None, spt, phase="spt"), "spt", task)
        assert pretrainer.config.bidirectional == (spt["objective"] == "masked"), architecture
        classifier, _ = phase_model(load_recipe(None, finetune, phase="finetune"), "finetune", task)
        if input_kind == "tokens":
            inputs = {"input_ids": torch.randint(4, spec.vocab_size, (2, spec.max_length))}
        else:
            inputs = {"input_values": torch.randn(2, spec.max_length, spec.num_channels)}
        logits = classifier(**inputs, attention_mask=torch.ones(2, spec.max_length, dtype=torch.long)).logits
        assert logits.shape == (2, spec.num_labels), architecture
        assert classifier.config.id2label == finetune["id2label"], architecture
