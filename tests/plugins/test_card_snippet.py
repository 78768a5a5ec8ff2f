"""The model card's loading snippet, run as written, on the checkpoint of an installed plugin's architecture: after
`import spt_hf` the Auto class finds the plugin (entry point); where the plugin is missing, the card's alternative
(`trust_remote_code=True`) loads the checkpoint's own code."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from plugin_packages import install_distribution
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from spt_hf import registry
from spt_hf.hub import render_model_card
from spt_hf.modeling.architectures import REGISTRY
from spt_hf.registry import auto_class, find_architecture, unregister_architecture

SRC = Path(__file__).resolve().parents[2] / "src"
REGISTER = '''
"""spt_hf calls `register` through the entry point."""


def register():
    import spt_hf

    from .modeling_snip import SnipConfig, SnipMixer

    return spt_hf.register_architecture(SnipConfig, SnipMixer, name="snip")
'''
MODELING = '''
"""The plugin's config and mixer, importing spt_hf only from spt_hf.modeling."""
import torch
from spt_hf.modeling.configuration_sequence import SequenceModelConfig
from spt_hf.modeling.mixer import SequenceMixer


class SnipConfig(SequenceModelConfig):
    model_type = "snip_mixer"
    max_position_embeddings: int = 64


class SnipMixer(SequenceMixer):
    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return self.proj(hidden_states.cumsum(1))
'''
PROBE = """
import torch
print(type(model).__module__, model.eval()(input_ids=torch.tensor([[3, 4, 5]])).logits.tolist())
"""


@pytest.fixture
def snip_site(tmp_path, monkeypatch):
    """The plugin `snip-plugin` installed into `tmp_path/site`, that folder on sys.path."""
    site = tmp_path / "site"
    files = {"__init__.py": REGISTER, "modeling_snip.py": MODELING}
    install_distribution(site, "snip-plugin", "snip_plugin", files, "snip = snip_plugin:register")
    monkeypatch.syspath_prepend(str(site))
    yield site
    if "snip_mixer" in REGISTRY:
        unregister_architecture("snip_mixer")
    for name in ("snip_plugin", "snip_plugin.modeling_snip"):
        sys.modules.pop(name, None)
    registry._LOADED.discard("snip_plugin:register")
    CONFIG_MAPPING._extra_content.searched.discard("snip_mixer")


def card_snippet(folder: Path, results: dict) -> str:
    """The Python block of the card's "How to use" section, rendered for the checkpoint `folder`."""
    text = str(render_model_card(results, repo_id=str(folder)))
    return re.search(r"## How to use.*?```python\n(.*?)```", text, re.S).group(1)


def run_snippet(code: str, path: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), "HF_MODULES_CACHE": str(cwd / "modules")}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=cwd)


def test_the_card_snippet_loads_a_plugin_checkpoint_with_and_without_the_plugin(snip_site, tmp_path):
    find_architecture("snip")
    config = CONFIG_MAPPING["snip_mixer"](vocab_size=11, hidden_size=8, num_hidden_layers=1, num_labels=3)
    torch.manual_seed(0)
    model = auto_class("AutoModelForSequenceClassification").from_config(config).eval()
    model.save_pretrained(tmp_path / "ckpt")
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([[3, 4, 5]])).logits
    results = {"phase": "finetune", "task": "digits", "model_type": "snip_mixer", "model_config": config.to_dict()}
    snippet = card_snippet(tmp_path / "ckpt", results)
    assert snippet.startswith("import spt_hf") and "trust_remote_code=True" in snippet

    installed = run_snippet(snippet + PROBE, [snip_site, SRC], tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    module, logits = installed.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module == "snip_plugin.modeling_snip" and torch.allclose(torch.tensor(json.loads(logits)), expected)

    missing = run_snippet(snippet, [SRC], tmp_path)
    assert missing.returncode != 0 and "trust_remote_code=True" in missing.stderr
    remote = re.sub(r'(from_pretrained\("[^"]+")', r"\1, trust_remote_code=True", snippet)
    loaded = run_snippet(remote + PROBE, [SRC], tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    module, logits = loaded.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module.startswith("transformers_modules.") and torch.allclose(torch.tensor(json.loads(logits)), expected)
