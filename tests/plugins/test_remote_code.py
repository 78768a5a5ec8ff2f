"""A plugin's checkpoint carries its code: it loads with remote code where neither spt_hf nor the plugin exists."""

import json

import torch
from toy_mixers import ToyConfig, ToyMixer
from transformers import AutoModelForSequenceClassification

from spt_hf.hub.push import plugin_section
from spt_hf.testing import load_in_a_bare_process, registered


def test_a_plugin_checkpoint_loads_without_spt_hf_or_the_plugin(tmp_path):
    with registered(ToyConfig, ToyMixer):
        config = ToyConfig(vocab_size=11, hidden_size=8, num_hidden_layers=2, num_labels=3)
        model = AutoModelForSequenceClassification.from_config(config).eval()
        inputs = {"input_ids": torch.randint(3, 11, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.long)}
        with torch.no_grad():
            expected = model(**inputs).logits
        model.save_pretrained(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert saved["auto_map"]["AutoModelForSequenceClassification"] == "toy_mixers.ToyForSequenceClassification"
    assert "spt_hf" not in (tmp_path / "ckpt" / "toy_mixers.py").read_text().split("# Written by spt_hf")[0]
    logits, module = load_in_a_bare_process(tmp_path / "ckpt", inputs, tmp_path)
    assert module.startswith("transformers_modules.") and torch.equal(logits, expected)
    assert "`toy_running_sum` architecture comes from the spt_hf plugin `toy_mixers`" in plugin_section(
        tmp_path / "ckpt"
    )
