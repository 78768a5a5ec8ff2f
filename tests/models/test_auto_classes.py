"""Registration, remote-code loading without spt_hf, and clear errors on bad configs and inputs."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import TINY_CONFIGS, TINY_IDS, make_config, make_inputs
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

from spt_hf import AutoModelForRetrieval

ALL_AUTO_CLASSES = {
    "AutoConfig",
    "AutoModel",
    "AutoModelForMaskedLM",
    "AutoModelForCausalLM",
    "AutoModelForSequenceClassification",
    "AutoModelForRetrieval",
}


def test_issue_example_builds_every_head_through_auto_classes():
    config = AutoConfig.for_model(
        "spt_rotary_transformer", vocab_size=20, hidden_size=32, num_hidden_layers=2, num_attention_heads=4
    )
    names = {type(auto.from_config(config)).__name__ for auto in (AutoModel, AutoModelForSequenceClassification)}
    assert names == {"RotaryTransformerModel", "RotaryTransformerForSequenceClassification"}
    assert type(AutoModelForRetrieval.from_config(config)).__name__ == "RotaryTransformerForRetrieval"
    config.bidirectional = False
    assert type(AutoModelForCausalLM.from_config(config)).__name__ == "RotaryTransformerForCausalLM"


REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["spt_hf"] = None  # spt_hf cannot be imported in this process
    import torch, transformers
    inputs = torch.load(sys.argv[2], weights_only=True)
    auto = getattr(transformers, sys.argv[3])
    model = auto.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    assert not type(model).__module__.startswith("spt_hf"), type(model).__module__
    with torch.no_grad():
        torch.save(model(**inputs).logits, sys.argv[4])
    """
)


@pytest.mark.parametrize("entry", TINY_CONFIGS[:1], ids=TINY_IDS[:1])
def test_remote_code_loads_in_a_fresh_process_without_spt_hf(entry, tmp_path):
    model = AutoModelForSequenceClassification.from_config(make_config(entry)).eval()
    model.save_pretrained(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert set(saved["auto_map"]) == ALL_AUTO_CLASSES
    for module in saved["auto_map"].values():
        assert (tmp_path / "ckpt" / (module.split(".")[0] + ".py")).is_file()
    inputs = make_inputs(model.config, pad_last=2)
    torch.save(inputs, tmp_path / "inputs.pt")
    script = tmp_path / "load.py"
    script.write_text(REMOTE_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    cmd = [sys.executable, str(script), str(tmp_path / "ckpt"), str(tmp_path / "inputs.pt")]
    subprocess.run([*cmd, "AutoModelForSequenceClassification", str(tmp_path / "out.pt")], check=True, env=env)
    with torch.no_grad():
        expected = model(**inputs).logits
    assert torch.equal(torch.load(tmp_path / "out.pt", weights_only=True), expected)


def tiny(**overrides):
    return make_config(TINY_CONFIGS[0], **overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"pooling": "avg"}, "`pooling`='avg' is not supported"),
        ({"classifier_type": "deep"}, "`classifier_type`='deep' is not supported"),
        ({"num_attention_heads": 5}, "must be positive and divide `hidden_size`"),
        ({"num_channels": 3}, "Set exactly one of `vocab_size`"),
        ({"norm_type": "rmsnorm"}, "`norm_type`='rmsnorm'"),
        ({"mask_token_id": 99}, "outside the vocabulary"),
    ],
)
def test_bad_configs_raise_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)


def test_causal_lm_refuses_bidirectional_config():
    with pytest.raises(ValueError, match="needs a causal backbone: set `bidirectional=False`"):
        AutoModelForCausalLM.from_config(tiny(bidirectional=True))


def test_bad_inputs_raise_clear_errors():
    token_model = AutoModel.from_config(tiny())
    continuous_model = AutoModel.from_config(make_config(TINY_CONFIGS[0], "continuous"))
    ids = make_inputs(token_model.config)["input_ids"]
    values = make_inputs(continuous_model.config)["input_values"]
    with pytest.raises(ValueError, match="takes continuous inputs .* but got `input_ids`"):
        continuous_model(input_ids=ids)
    with pytest.raises(ValueError, match="takes token inputs .* but got `input_values`"):
        token_model(input_values=values)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        token_model(input_ids=ids + 100)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        token_model(input_ids=ids - 100)
    with pytest.raises(ValueError, match="`attention_mask` has shape"):
        token_model(input_ids=ids, attention_mask=torch.ones(ids.shape[0], ids.shape[1] + 1))
    with pytest.raises(ValueError, match=r"Expected `input_values` of shape \(B, L, 3\)"):
        continuous_model(input_values=values[..., :2])
