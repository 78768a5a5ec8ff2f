"""A plugin's checkpoint carries its code: it loads with remote code where neither spt_hf nor the plugin exists."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from toy_mixers import ToyConfig, ToyMixer
from transformers import AutoModelForSequenceClassification

from spt_hf.hub.push import plugin_section
from spt_hf.modeling.plugin_code import MODELING_DIR, PREFIX
from spt_hf.testing import MixerConformance, load_in_a_bare_process, registered

CLASHING_CONFIG = '''
"""A plugin's config in a module named like spt_hf's cache.py."""
from spt_hf.modeling.configuration_sequence import SequenceModelConfig


class ClashConfig(SequenceModelConfig):
    model_type = "toy_clash"
    max_position_embeddings: int = 64
'''
CLASHING_MIXER = '''
"""A plugin's mixer in a module named like spt_hf's blocks.py, importing its sibling cache.py."""
import torch
from spt_hf.modeling.mixer import SequenceMixer

from .cache import ClashConfig


class ClashMixer(SequenceMixer):
    def __init__(self, config: ClashConfig, layer_idx=None):
        super().__init__(config, layer_idx)
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return self.proj(hidden_states.cumsum(1))
'''


def test_a_plugin_checkpoint_loads_without_spt_hf_or_the_plugin(tmp_path):
    with registered(ToyConfig, ToyMixer):
        config = ToyConfig(vocab_size=11, hidden_size=8, num_hidden_layers=2, num_labels=3)
        model = AutoModelForSequenceClassification.from_config(config).eval()
        inputs = {"input_ids": torch.randint(3, 11, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.long)}
        with torch.no_grad():
            expected = model(**inputs).logits
        model.save_pretrained(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    classifier = saved["auto_map"]["AutoModelForSequenceClassification"]
    assert classifier == "spt_plugin_toy_mixers.ToyForSequenceClassification"
    assert all(reference.startswith("spt_plugin_toy_mixers.") for reference in saved["auto_map"].values())
    assert model.config.auto_map == saved["auto_map"] and not (tmp_path / "ckpt" / "toy_mixers.py").exists()
    code = (tmp_path / "ckpt" / "spt_plugin_toy_mixers.py").read_text()
    assert not re.search(r"^\s*(from|import)\s+spt_hf", code, re.M), "an absolute spt_hf import is left"
    logits, module = load_in_a_bare_process(tmp_path / "ckpt", inputs, tmp_path)
    assert module.startswith("transformers_modules.") and torch.equal(logits, expected)
    assert "`toy_running_sum` architecture comes from the spt_hf plugin `toy_mixers`" in plugin_section(
        tmp_path / "ckpt"
    )


@pytest.fixture
def clashing_plugin(tmp_path, monkeypatch):
    """The package `clash_plugin` whose modules are named like spt_hf's `cache.py` and `blocks.py`, on sys.path."""
    package = tmp_path / "site" / "clash_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cache.py").write_text(textwrap.dedent(CLASHING_CONFIG))
    (package / "blocks.py").write_text(textwrap.dedent(CLASHING_MIXER))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from clash_plugin.blocks import ClashMixer
    from clash_plugin.cache import ClashConfig

    yield ClashConfig, ClashMixer
    for name in ("clash_plugin", "clash_plugin.cache", "clash_plugin.blocks"):
        sys.modules.pop(name, None)


def test_a_plugin_module_named_like_an_spt_hf_file_is_saved_under_its_own_name(clashing_plugin, tmp_path):
    """The kit's remote-code check (spt_hf's files stay spt_hf's, the load without spt_hf and the plugin gives the
    same outputs) on a plugin whose blocks.py and cache.py would otherwise replace spt_hf's."""
    config_cls, mixer_cls = clashing_plugin
    kit = type("Clash", (MixerConformance,), {"config_class": config_cls, "mixer_class": mixer_cls})()
    with registered(config_cls, mixer_cls) as entry:
        kit.test_remote_code_loads_without_spt_hf(entry, tmp_path)
    folder = tmp_path / "ckpt"
    for name in ("blocks.py", "cache.py"):
        assert (folder / name).read_text() == (MODELING_DIR / name).read_text()
    mixer_file = (folder / "spt_plugin_blocks.py").read_text()
    assert "from .spt_plugin_cache import ClashConfig" in mixer_file
    assert "from .mixer import SequenceMixer" in mixer_file
    assert (folder / "spt_plugin_cache.py").is_file()


def test_no_spt_hf_modeling_file_bears_the_plugin_prefix():
    assert not [file.name for file in MODELING_DIR.glob(f"{PREFIX}*")]


RESAVE = """
import sys
sys.modules["spt_hf"] = sys.modules["toy_mixers"] = None  # not importable in this process
from transformers import AutoModelForSequenceClassification
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True)
model.save_pretrained(sys.argv[2])
"""


def test_a_plugin_checkpoint_loaded_as_remote_code_saves_a_checkpoint_that_loads(tmp_path):
    """Finetuning a plugin's checkpoint where the plugin is not installed: the remote-code model saves its files as
    they are (already under their own names, the model classes written once)."""
    with registered(ToyConfig, ToyMixer):
        config = ToyConfig(vocab_size=11, hidden_size=8, num_hidden_layers=1, num_labels=3)
        model = AutoModelForSequenceClassification.from_config(config).eval()
        model.save_pretrained(tmp_path / "ckpt")
    inputs = {"input_ids": torch.randint(3, 11, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.long)}
    with torch.no_grad():
        expected = model(**inputs).logits
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    command = [sys.executable, "-I", "-c", RESAVE, str(tmp_path / "ckpt"), str(tmp_path / "again")]
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=tmp_path)
    code = (tmp_path / "again" / "spt_plugin_toy_mixers.py").read_text()
    assert code.count("# Written by spt_hf") == 1 and not list((tmp_path / "again").glob("spt_plugin_spt_plugin_*"))
    logits, _ = load_in_a_bare_process(tmp_path / "again", inputs, tmp_path / "work")
    assert torch.equal(logits, expected)
