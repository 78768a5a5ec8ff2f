"""Registration, remote-code loading without spt_hf, and clear errors on bad configs and inputs."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import TINY_CONFIGS, make_config, make_inputs
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
    for folder in sys.argv[1:]:  # each holds ckpt/ and inputs.pt; the logits go to out.pt
        inputs = torch.load(f"{folder}/inputs.pt", weights_only=True)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            f"{folder}/ckpt", trust_remote_code=True
        ).eval()
        assert not type(model).__module__.startswith("spt_hf"), (folder, type(model).__module__)
        with torch.no_grad():
            torch.save(model(**inputs).logits, f"{folder}/out.pt")
    """
)


REMOTE = [
    entry
    for entry in TINY_CONFIGS
    if entry[0] in ("transformer-rotary", "s4-nplr", "dlr", "spade", "backbone-mamba", "backbone-bert")
]


def test_remote_code_loads_in_a_fresh_process_without_spt_hf(tmp_path):
    """One process without spt_hf loads a checkpoint of each family (one process: its start-up dominates)."""
    expected = {}
    for entry in REMOTE:
        folder = tmp_path / entry[0]
        model = AutoModelForSequenceClassification.from_config(make_config(entry)).eval()
        model.save_pretrained(folder / "ckpt")
        saved = json.loads((folder / "ckpt" / "config.json").read_text())
        assert set(saved["auto_map"]) == ALL_AUTO_CLASSES, entry[0]
        for module in saved["auto_map"].values():
            assert (folder / "ckpt" / (module.split(".")[0] + ".py")).is_file(), (entry[0], module)
        inputs = make_inputs(model.config, pad_last=2)
        torch.save(inputs, folder / "inputs.pt")
        with torch.no_grad():
            expected[entry[0]] = model(**inputs).logits
    script = tmp_path / "load.py"
    script.write_text(REMOTE_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    subprocess.run([sys.executable, str(script), *(str(tmp_path / name) for name in expected)], check=True, env=env)
    for name, logits in expected.items():
        assert torch.equal(torch.load(tmp_path / name / "out.pt", weights_only=True), logits), name


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
    with pytest.raises(ValueError, match="needs a causal model: set `bidirectional=False`"):
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


def corrupt(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "header":
        data[12:24] = b"#" * 12  # inside the JSON header
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "header"])
def test_damaged_weights_fail_with_the_file_named(how, tmp_path):
    AutoModelForSequenceClassification.from_config(tiny()).save_pretrained(tmp_path)
    corrupt(tmp_path / "model.safetensors", how)
    with pytest.raises(ValueError, match=r"model\.safetensors is not a valid safetensors file"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path)


def test_config_that_disagrees_with_the_weights_names_both_files(tmp_path):
    AutoModelForSequenceClassification.from_config(tiny()).save_pretrained(tmp_path / "a")
    AutoModelForSequenceClassification.from_config(tiny(hidden_size=64)).save_pretrained(tmp_path / "b")
    (tmp_path / "a" / "config.json").write_text((tmp_path / "b" / "config.json").read_text())
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor .* has shape .* but .*config\.json describes"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "a")


def test_checkpoint_of_another_architecture_is_refused_by_a_specific_class(tmp_path):
    from spt_hf import RotaryTransformerForSequenceClassification

    AutoModelForSequenceClassification.from_config(tiny()).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["model_type"] = "spt_s4"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"config\.json holds a 'spt_s4' model"):
        RotaryTransformerForSequenceClassification.from_pretrained(tmp_path)


def test_remote_folder_missing_its_modeling_file_names_it(tmp_path):
    AutoModelForSequenceClassification.from_config(tiny()).save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "heads.py").unlink()
    script = "import sys; sys.modules['spt_hf'] = None\nimport transformers\n"
    script += f"transformers.AutoModelForSequenceClassification.from_pretrained({str(tmp_path / 'ckpt')!r}, "
    script += "trust_remote_code=True)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode != 0 and "heads.py" in result.stderr.splitlines()[-1]


def test_float_ids_and_empty_inputs_are_refused_clearly():
    token_model = AutoModel.from_config(tiny())
    continuous_model = AutoModel.from_config(make_config(TINY_CONFIGS[0], "continuous"))
    ids = make_inputs(token_model.config)["input_ids"]
    with pytest.raises(ValueError, match=r"`input_ids` must hold integer token ids .* got dtype torch.float32"):
        token_model(input_ids=ids.float())
    with pytest.raises(ValueError, match=r"The inputs are empty: \(B, L\) = \(3, 0\)"):
        token_model(input_ids=ids[:, :0])
    with pytest.raises(ValueError, match=r"`input_values` must be floating point"):
        continuous_model(input_values=torch.ones(2, 4, 3, dtype=torch.long))


def test_full_attention_over_a_long_cpu_sequence_warns_with_the_estimate(caplog):
    from spt_hf.modeling.modeling_rotary_transformer import warn_if_full_attention_is_slow

    config = tiny(hidden_size=128, num_hidden_layers=4)
    from transformers.utils import logging as hf_logging

    hf_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            warn_if_full_attention_is_slow(config, torch.empty(1, 65536, 128))
    finally:
        hf_logging.disable_propagation()
    assert "min per step" in caplog.text and "attention_window" in caplog.text


# Class names before the renames (issue 22): checkpoints saved then carry them in `auto_map` and `architectures`.
OLD_CLASS_NAMES = {
    "WrapperConfig": "SPTBackboneConfig",
    "WrapperModel": "SPTBackboneModel",
    "WrapperForMaskedLM": "SPTBackboneForMaskedLM",
    "WrapperForCausalLM": "SPTBackboneForCausalLM",
    "WrapperForSequenceClassification": "SPTBackboneForSequenceClassification",
    "WrapperForRetrieval": "SPTBackboneForRetrieval",
}


def save_with_old_names(entry, folder):
    """A checkpoint as saved before the renames: its config.json names the old classes; (folder, logits, inputs)."""
    model = AutoModelForSequenceClassification.from_config(make_config(entry)).eval()
    model.save_pretrained(folder / "ckpt")
    path = folder / "ckpt" / "config.json"
    saved = json.loads(path.read_text())
    renamed = 0
    for auto, target in saved["auto_map"].items():
        module, name = target.split(".")
        if name in OLD_CLASS_NAMES:
            saved["auto_map"][auto] = f"{module}.{OLD_CLASS_NAMES[name]}"
            renamed += 1
    saved["architectures"] = [OLD_CLASS_NAMES.get(name, name) for name in saved["architectures"]]
    path.write_text(json.dumps(saved))
    inputs = make_inputs(model.config, pad_last=2)
    with torch.no_grad():
        logits = model(**inputs).logits
    return renamed, logits, inputs


def test_checkpoints_saved_with_the_old_class_names_still_load(tmp_path):
    """With spt_hf (registered classes, with or without trust_remote_code) and in a process without spt_hf."""
    entry = next(entry for entry in TINY_CONFIGS if entry[0] == "backbone-bert")
    folder = tmp_path / entry[0]
    renamed, logits, inputs = save_with_old_names(entry, folder)
    assert renamed == len(ALL_AUTO_CLASSES)
    assert "SPTBackboneConfig" in (folder / "ckpt" / "config.json").read_text()
    for trust in (False, True):
        model = AutoModelForSequenceClassification.from_pretrained(folder / "ckpt", trust_remote_code=trust).eval()
        with torch.no_grad():
            assert torch.equal(model(**inputs).logits, logits), trust
    torch.save(inputs, folder / "inputs.pt")
    script = tmp_path / "load.py"
    script.write_text(REMOTE_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    subprocess.run([sys.executable, str(script), str(folder)], check=True, env=env)
    assert torch.equal(torch.load(folder / "out.pt", weights_only=True), logits)


def test_old_class_names_are_aliases_of_the_new():
    from spt_hf.modeling import configuration_backbone, modeling_backbone, modeling_sequence
    from spt_hf.recipes import arguments
    from spt_hf.training import trainer

    for new, old in OLD_CLASS_NAMES.items():
        module = configuration_backbone if new.endswith("Config") else modeling_backbone
        assert getattr(module, old) is getattr(module, new)
    assert modeling_sequence.SPTPreTrainedModel is modeling_sequence.SequencePreTrainedModel
    assert trainer.SPTTrainer is trainer.PhaseTrainer
    assert arguments.SPTTrainingArguments is arguments.PhaseTrainingArguments


@pytest.mark.parametrize(
    "name, field, value, message",
    [
        ("transformer-rotary", "pooling", "avg", "`pooling`='avg' is not supported"),
        ("transformer-rotary", "num_attention_heads", 5, "`num_attention_heads`=5 must be positive and divide"),
        ("s4-nplr", "state_size", 3, "`state_size` must be a positive even integer"),
        ("backbone-bert", "hidden_dropout_prob", 0.1, "`hidden_dropout_prob` and `prenorm`"),
    ],
)
def test_a_field_changed_after_construction_is_checked_on_save_and_build(tmp_path, name, field, value, message):
    config = make_config(next(entry for entry in TINY_CONFIGS if entry[0] == name))
    setattr(config, field, value)  # after __init__: its checks have already run
    with pytest.raises(ValueError, match=message):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    with pytest.raises(ValueError, match=message):
        AutoModel.from_config(config)


def test_the_architecture_list_is_what_is_registered_exported_and_accepted():
    """modeling/architectures.py is the one list: every entry is registered with each Auto class, exported, accepted as
    a recipe's `model_type`, and has a tiny config in tests/helpers.py (which every shared test runs)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    import spt_hf
    from spt_hf.modeling.architectures import ARCHITECTURES, MODEL_TYPES
    from spt_hf.modeling.modeling_sequence import AUTO_CLASS_SUFFIXES
    from spt_hf.recipes.arguments import SPT_MODEL_TYPES

    assert set(AUTO_CLASS_SUFFIXES) | {"AutoConfig"} == ALL_AUTO_CLASSES
    assert len(set(MODEL_TYPES)) == len(MODEL_TYPES) == len(ARCHITECTURES)
    assert SPT_MODEL_TYPES == MODEL_TYPES
    for config_cls, module in ARCHITECTURES:
        assert CONFIG_MAPPING[config_cls.model_type] is config_cls
        assert getattr(spt_hf, config_cls.__name__) is config_cls
        prefix = config_cls.__name__.removesuffix("Config")
        for auto_name, suffix in AUTO_CLASS_SUFFIXES.items():
            auto_cls = getattr(spt_hf, auto_name, None) or getattr(transformers, auto_name)
            model_cls = getattr(module, prefix + suffix)
            assert auto_cls._model_mapping[config_cls] is model_cls
            assert getattr(spt_hf, model_cls.__name__) is model_cls
            assert model_cls.__name__ in spt_hf.__all__
    missing = set(MODEL_TYPES) - {entry[1] for entry in TINY_CONFIGS}
    assert not missing, f"registered architectures without a TINY_CONFIGS entry in tests/helpers.py: {sorted(missing)}"
