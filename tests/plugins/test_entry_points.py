"""Discovery: an installed plugin (entry point group `spt_hf.architectures`) is loaded when its name is first asked."""

import sys

import pytest
from plugin_packages import install_distribution
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from spt_hf import registry
from spt_hf.modeling.architectures import REGISTRY
from spt_hf.registry import find_architecture, installed_plugins, unregister_architecture

PLUGIN = '''
"""A plugin installed as a distribution (its dist-info on sys.path), registering at import."""
import torch
import spt_hf
from spt_hf.modeling.configuration_sequence import SequenceModelConfig


class EchoConfig(SequenceModelConfig):
    model_type = "echo_mixer"
    max_position_embeddings: int = 512


class EchoMixer(spt_hf.SequenceMixer):
    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return self.proj(hidden_states)


spt_hf.register_architecture(EchoConfig, EchoMixer, name="echo")
'''


@pytest.fixture
def installed_echo(tmp_path, monkeypatch):
    """The package `echo_plugin` 0.3 with its entry point, installed on sys.path as pip would (a dist-info)."""
    install_distribution(tmp_path, "echo-plugin", "echo_plugin", {"__init__.py": PLUGIN}, "echo = echo_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    if "echo_mixer" in REGISTRY:
        unregister_architecture("echo_mixer")
    sys.modules.pop("echo_plugin", None)
    registry._LOADED.discard("echo_plugin")
    CONFIG_MAPPING._extra_content.searched.discard("echo_mixer")


def test_an_unknown_name_loads_the_installed_plugin(installed_echo):
    assert "echo_plugin" not in sys.modules and installed_plugins()["echo"] == "echo_plugin"
    entry = find_architecture("echo")
    assert entry.config_cls.model_type == "echo_mixer" and (entry.plugin, entry.version) == ("echo-plugin", "0.3")


def test_a_recipe_model_type_loads_the_plugin(installed_echo):
    from spt_hf.recipes.loading import model_config_fields

    assert "max_position_embeddings" in model_config_fields({"model_type": "echo_mixer"})


def test_an_unknown_name_lists_the_installed_plugins(installed_echo):
    with pytest.raises(ValueError, match=r"installed plugins \(entry point group spt_hf.architectures\): echo ") as e:
        find_architecture("nope")
    assert "\n" not in str(e.value)


def test_an_auto_class_loads_the_plugin_of_an_unknown_model_type(installed_echo):
    """What `AutoModelFor*.from_pretrained` of a plugin's checkpoint asks first: a transformers model type loads no
    plugin, the plugin's model type loads it."""
    assert "bert" in CONFIG_MAPPING and "echo_plugin" not in sys.modules
    assert CONFIG_MAPPING["echo_mixer"].__name__ == "EchoConfig" and REGISTRY["echo_mixer"].plugin == "echo-plugin"
