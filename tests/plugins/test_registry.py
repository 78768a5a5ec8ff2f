"""`spt_hf.register_architecture`: one call gives a mixer every head, the Auto classes, presets and the registry."""

import subprocess
import sys

import pytest
import torch
from toy_mixers import ToyConfig, ToyMixer
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

import spt_hf
from spt_hf.modeling.architectures import BUILTIN_MODEL_TYPES, MODEL_TYPES, REGISTRY
from spt_hf.registry import find_architecture
from spt_hf.testing import registered


@pytest.fixture
def toy():
    with registered(ToyConfig, ToyMixer, name="toy") as entry:
        yield entry


def test_registration_builds_every_head_through_the_auto_classes(toy):
    config = ToyConfig(vocab_size=11, hidden_size=8, num_hidden_layers=1, num_labels=3)
    for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, spt_hf.AutoModelForRetrieval):
        model = auto.from_config(config)
        assert type(model).__name__.startswith("Toy") and type(model) is toy.classes[auto.__name__]
    causal = AutoModelForCausalLM.from_config(ToyConfig(vocab_size=11, hidden_size=8, bidirectional=False))
    out = causal.generate(torch.tensor([[3, 4]]), max_new_tokens=2, min_new_tokens=2, do_sample=False)
    assert out.shape == (1, 4)
    assert toy.config_cls.model_type in MODEL_TYPES and spt_hf.ToyModel is toy.classes["AutoModel"]
    assert find_architecture("toy") is toy is REGISTRY["toy_running_sum"]


def test_unregistering_leaves_the_builtins():
    with registered(ToyConfig, ToyMixer, name="toy"):
        assert len(MODEL_TYPES) == len(BUILTIN_MODEL_TYPES) + 1
    assert tuple(MODEL_TYPES) == BUILTIN_MODEL_TYPES and not hasattr(spt_hf, "ToyModel")


def test_a_taken_model_type_is_one_line():
    class Clash(ToyConfig):
        model_type = "spt_s4"

    with pytest.raises(ValueError, match="model_type 'spt_s4' is taken"):
        spt_hf.register_architecture(Clash, ToyMixer)


def test_unknown_architecture_names_builtins_and_plugins(tmp_path):
    from spt_hf.recipes.presets import recipes_for_task

    with pytest.raises(
        ValueError, match=r"Unknown architecture .nope.; architectures with presets: .*s4.*installed plugins"
    ) as error:
        recipes_for_task("digits", {"input_kind": "tokens"}, ["nope"], "tiny", max_steps=2)
    assert "\n" not in str(error.value)


def test_a_plugin_gets_tiny_and_small_presets_from_its_config(toy):
    from spt_hf.recipes.presets import TINY_WIDTH, recipes_for_task

    tiny = recipes_for_task("digits", {"input_kind": "tokens"}, ["toy", "s4"], "tiny", max_steps=3)
    spt = tiny["digits-toy-spt.yaml"]
    assert spt["model_type"] == "toy_running_sum" and spt["hidden_size"] == TINY_WIDTH and spt["max_steps"] == 3
    assert spt["objective"] == "masked" and "num_attention_heads" not in spt
    small = recipes_for_task("digits", {"input_kind": "tokens"}, ["toy"], "small")
    assert "hidden_size" not in small["digits-toy-finetune.yaml"]  # the config's own default
    with pytest.raises(ValueError, match="no paper recipe"):
        recipes_for_task("digits", {"input_kind": "tokens"}, ["toy"], "paper")


def test_a_model_built_from_its_class_saves_its_code(tmp_path):
    """Registration loads model classes lazily: a class no Auto class has served yet still saves its modeling code
    (remote code), as a registered one does (a fresh process, where nothing has looked S4 up)."""
    script = (
        "import sys\n"
        "from spt_hf.modeling.configuration_s4 import S4Config\n"
        "from spt_hf.modeling.modeling_s4 import S4ForSequenceClassification\n"
        "config = S4Config(vocab_size=11, hidden_size=8, num_hidden_layers=1)\n"
        "S4ForSequenceClassification(config).save_pretrained(sys.argv[1])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, capture_output=True)
    assert (tmp_path / "modeling_s4.py").is_file() and (tmp_path / "configuration_s4.py").is_file()
