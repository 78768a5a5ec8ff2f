"""End to end: pretrain -> finetune -> report on tiny real-format data, resume after a kill, bad recipes."""

import json
import re
from pathlib import Path

import pytest
import torch
from helpers import KillAfter
from transformers import TrainerCallback

from spt_hf.checkpoints import verify_backbone_transfer
from spt_hf.cli import main as cli_main
from spt_hf.report.comparison import report
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import finetune, pretrain, run

# Tiny architectures for the pipeline; S4 and DLR join by adding a line.
ARCHITECTURES = {
    "transformer": {"model_type": "spt_rotary_transformer", "num_attention_heads": 2, "intermediate_size": 32},
    "s4": {"model_type": "spt_s4", "state_size": 8},
    "dlr": {"model_type": "spt_dlr", "state_size": 16},
}
# The paper's other baselines: the same end-to-end run, in the slow suite (the demo's CPU recipes run them too).
BASELINES = {
    "mega": {
        "model_type": "spt_mega",
        "intermediate_size": 32,
        "nffn_hidden_size": 32,
        "shared_representation_size": 8,
        "ema_projection_size": 4,
    },
    "spade": {
        "model_type": "spt_spade",
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "attention_window": 8,
        "state_size": 8,
        "kernel": "diag",
    },
    "linformer": {
        "model_type": "spt_linformer",
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "projected_length": 8,
    },
    "performer": {
        "model_type": "spt_performer",
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "num_random_features": 16,
    },
}
ARCHITECTURE_PARAMS = [*ARCHITECTURES, *(pytest.param(name, marks=pytest.mark.slow) for name in BASELINES)]
TINY_TRAINING = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 64,
    "learning_rate": 3e-3,
    "max_steps": 6,
    "eval_strategy": "steps",
    "eval_steps": 3,
    "save_strategy": "steps",
    "save_steps": 3,
    "logging_steps": 3,
    "seed": 0,
}
LISTOPS = {
    "task": "listops",
    "generate_data": {
        "num_train": 48,
        "num_val": 16,
        "num_test": 16,
        "min_length": 8,
        "max_length": 40,
        "max_depth": 3,
    },
}
DIGITS = {"task": "digits", "task_options": {"input_kind": "continuous"}}


def write_recipe(path: Path, **values) -> Path:
    path.write_text(json.dumps(values))  # JSON is YAML
    return path


@pytest.mark.parametrize("arch", ARCHITECTURE_PARAMS)
@pytest.mark.parametrize("data", [LISTOPS, DIGITS], ids=["listops-tokens", "digits-continuous"])
def test_pretrain_finetune_report_end_to_end(arch, data, tmp_path):
    common = {**data, **{**ARCHITECTURES, **BASELINES}[arch], **TINY_TRAINING}
    spt = write_recipe(tmp_path / "x-spt.yaml", **common, objective="masked", output_dir=str(tmp_path / "run"))
    write_recipe(tmp_path / "x-finetune.yaml", **common, output_dir=str(tmp_path / "run"))

    class BackboneAtStart(TrainerCallback):
        checked = 0

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            BackboneAtStart.checked = verify_backbone_transfer(model, tmp_path / "run" / "spt")

    spt_recipe = load_recipe(spt)
    finetune_recipe = load_recipe(tmp_path / "x-finetune.yaml")
    original_finetune = finetune

    def finetune_with_check(recipe, callbacks=None):
        extra = [BackboneAtStart()] if recipe.model.model_name_or_path else []
        return original_finetune(recipe, callbacks=extra)

    import spt_hf.training.pipeline as pipeline

    pipeline.finetune, saved = finetune_with_check, pipeline.finetune
    try:
        summary = run(spt_recipe, finetune_recipe, with_scratch=True)
    finally:
        pipeline.finetune = saved
    assert BackboneAtStart.checked > 0
    for phase in ("spt", "finetune", "scratch"):
        result = json.loads((tmp_path / "run" / phase / "results.json").read_text())
        assert result["budget"]["steps"] == 6
        assert result["metrics"]["test"] and result["metrics"]["validation"]
        assert result["data"]["split_sizes"]["train"] > 0
        compute = result["compute"]  # one real step counted, times the steps; counting is not in the wall time
        assert compute["flops_per_step"] > 0 and compute["flops"] == 6 * compute["flops_per_step"]
        assert compute["counted_batch"]["attention_mask"][0] == 16  # per_device_train_batch_size
        assert compute["count_seconds"] < result["budget"]["wall_time_s"]
    assert summary["phases"]["finetune"]["init"]["kind"] == "spt"
    spt_metrics = summary["phases"]["spt"]["metrics"]  # the SPT checkpoint is chosen by its objective's loss
    assert spt_metrics["metric_for_best_model"] == "loss" and spt_metrics["greater_is_better"] is False
    assert summary["phases"]["finetune"]["metrics"]["metric_for_best_model"] == "accuracy"
    assert summary["phases"]["scratch"]["init"]["kind"] == "scratch"
    pretrain_result = summary["phases"]["spt"]
    assert (
        pretrain_result["data"]["pretraining_fingerprint"]["num_examples"]
        == pretrain_result["data"]["split_sizes"]["train"]
    )
    text = report([tmp_path / "run"])
    assert "| " + data["task"] in text
    assert (tmp_path / "run" / "learning_curves.png").stat().st_size > 0
    assert (tmp_path / "run" / "test_metrics.png").stat().st_size > 0


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    recipe = write_recipe(
        tmp_path / "r.yaml", **DIGITS, **ARCHITECTURES["transformer"], **TINY_TRAINING, output_dir=str(tmp_path / "o")
    )
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(recipe), callbacks=[KillAfter(4)])
    assert (tmp_path / "o" / "spt" / "checkpoint-3").is_dir() and not (tmp_path / "o" / "spt" / "results.json").exists()
    result = pretrain(load_recipe(recipe))
    assert result["budget"]["steps"] == 6
    assert any(entry.get("step") == 3 for entry in result["learning_curve"])  # history continued from checkpoint 3


def test_a_run_killed_under_the_old_spade_form_is_not_resumed_into_the_new_one(tmp_path):
    """A checkpoint written before `s4_pointwise` existed (its config.json lacks it: the S4-layer form) is not resumed
    into the released form the same recipe now builds; the refusal names the field to set."""
    recipe = write_recipe(
        tmp_path / "r.yaml", **DIGITS, **BASELINES["spade"], **TINY_TRAINING, output_dir=str(tmp_path / "o")
    )
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(recipe), callbacks=[KillAfter(4)])
    from spt_hf.checkpoints import sha256_file
    from spt_hf.training.run_folder import MANIFEST_FILE

    checkpoint = tmp_path / "o" / "spt" / "checkpoint-3"
    saved = json.loads((checkpoint / "config.json").read_text())
    assert saved.pop("s4_pointwise") is False
    (checkpoint / "config.json").write_text(json.dumps(saved))  # as the code before the field wrote it ...
    manifest = json.loads((checkpoint / MANIFEST_FILE).read_text())  # ... with its manifest
    size, digest = (checkpoint / "config.json").stat().st_size, sha256_file(checkpoint / "config.json")
    manifest["files"]["config.json"].update(bytes=size, sha256=digest)
    (checkpoint / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"checkpoint-3 was saved with `s4_pointwise: true`.*add `s4_pointwise: true`"):
        pretrain(load_recipe(recipe))


def test_finetune_refuses_evaluation_data_seen_in_pretraining(tmp_path):
    import numpy as np

    from spt_hf.checkpoints import file_digests
    from spt_hf.data import DataLeakageError, fingerprint_info
    from spt_hf.training.task_data import load_task_data

    common = {**DIGITS, **ARCHITECTURES["transformer"], **TINY_TRAINING, "max_steps": 2}
    spt = write_recipe(tmp_path / "s.yaml", **common, output_dir=str(tmp_path / "spt"))
    pretrain(load_recipe(spt))
    # Simulate a pretraining run that saw the validation split.
    validation = load_task_data(load_recipe(spt)).splits["validation"]
    np.save(tmp_path / "spt" / "spt" / "spt_fingerprint.npy", fingerprint_info(validation).hashes)
    results_path = tmp_path / "spt" / "spt" / "results.json"  # ... and recorded it as written
    results = json.loads(results_path.read_text())
    results["checkpoint_files"] = file_digests(tmp_path / "spt" / "spt")
    results_path.write_text(json.dumps(results))
    leaky = write_recipe(tmp_path / "f.yaml", **common, output_dir=str(tmp_path / "ft"))
    overrides = {"model_name_or_path": str(tmp_path / "spt" / "spt")}
    with pytest.raises(DataLeakageError, match="validation split were used for pretraining"):
        finetune(load_recipe(leaky, overrides))
    with pytest.warns(UserWarning, match="were used for pretraining"):
        finetune(load_recipe(leaky, {**overrides, "allow_eval_overlap": True}))


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"hiden_size": 8}, ValueError, r"Unknown recipe key `hiden_size` in .*bad.yaml; did you mean `hidden_size`"),
        ({"max_steps": "many"}, ValueError, "`max_steps` expects int"),
        ({"objective": "causal", "bidirectional": True}, ValueError, "objective 'causal' needs `bidirectional: false`"),
        ({"objective": "diffusion"}, ValueError, "`objective`='diffusion' is not supported"),
        ({"data_dir": "/nonexistent/lra_release"}, FileNotFoundError, "does not exist"),
        ({"model_type": "spt_mamba"}, ValueError, "Unknown `model_type`"),
    ],
)
def test_bad_recipes_fail_before_training(overrides, error, message, tmp_path):
    values = {**DIGITS, **ARCHITECTURES["transformer"], **TINY_TRAINING, "output_dir": str(tmp_path / "o"), **overrides}
    recipe = write_recipe(tmp_path / "bad.yaml", **values)
    with pytest.raises(error, match=message):
        pretrain(load_recipe(recipe))
    assert not (tmp_path / "o" / "spt" / "checkpoint-3").exists()


def test_cli_pretrain_overrides_and_help(tmp_path, capsys):
    recipe = write_recipe(
        tmp_path / "r.yaml", **DIGITS, **ARCHITECTURES["transformer"], **TINY_TRAINING, output_dir=str(tmp_path / "o")
    )
    assert (
        cli_main(["pretrain", "--config", str(recipe), "--max_steps", "2", "--save_steps", "2", "--eval_steps", "2"])
        == 0
    )
    result = json.loads((tmp_path / "o" / "spt" / "results.json").read_text())
    assert result["budget"]["steps"] == 2 and result["metrics"]["metric_for_best_model"] == "loss"  # masked L1
    assert cli_main(["pretrain", "--help"]) == 0
    assert "--mask_rate" in capsys.readouterr().out


def test_param_groups_follow_the_config():
    from transformers import AutoConfig, AutoModelForMaskedLM

    from spt_hf.training import param_groups

    model = AutoModelForMaskedLM.from_config(
        AutoConfig.for_model("spt_rotary_transformer", vocab_size=10, hidden_size=8, num_attention_heads=2)
    )
    groups = {g["name"]: g for g in param_groups(model, lr=1e-3, weight_decay=0.1)}
    assert set(groups) == {"default(lr=0.001, wd=0.1)", "no_decay(lr=0.001, wd=0)"}
    no_decay = groups["no_decay(lr=0.001, wd=0)"]["param_names"]
    assert all(n.endswith("bias") or ".norm" in n for n in no_decay)
    assert sum(len(g["params"]) for g in groups.values()) == len(list(model.parameters()))
    torch.optim.AdamW(list(groups.values()))  # accepted by torch


def test_killed_and_resumed_pretraining_equals_an_uninterrupted_run(tmp_path):
    """Same weights and metrics, bit for bit: data order, dropout and the SPT mask stream resume exactly."""
    from safetensors.torch import load_file

    values = {**LISTOPS, **ARCHITECTURES["transformer"], **TINY_TRAINING, "hidden_dropout_prob": 0.1}
    straight = write_recipe(tmp_path / "a.yaml", **values, output_dir=str(tmp_path / "a"))
    resumed = write_recipe(tmp_path / "b.yaml", **values, output_dir=str(tmp_path / "b"))
    reference = pretrain(load_recipe(straight))
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(resumed), callbacks=[KillAfter(5)])
    result = pretrain(load_recipe(resumed))
    a = load_file(tmp_path / "a" / "spt" / "model.safetensors")
    b = load_file(tmp_path / "b" / "spt" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert result["metrics"]["validation"]["eval_loss"] == reference["metrics"]["validation"]["eval_loss"]
    losses = [(e["step"], e["loss"]) for e in result["learning_curve"] if "loss" in e]
    assert losses == [(e["step"], e["loss"]) for e in reference["learning_curve"] if "loss" in e]


def test_finetune_refuses_a_checkpoint_with_a_flipped_byte(tmp_path, capsys):
    from spt_hf.checkpoints import CheckpointIntegrityError

    common = {**DIGITS, **ARCHITECTURES["transformer"], **TINY_TRAINING, "max_steps": 2, "output_dir": str(tmp_path)}
    pretrain(load_recipe(write_recipe(tmp_path / "s.yaml", **common)))
    weights = tmp_path / "spt" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # one bit of one weight: still a valid safetensors file
    weights.write_bytes(bytes(data))
    recipe = write_recipe(tmp_path / "f.yaml", **common, model_name_or_path=str(tmp_path / "spt"))
    assert cli_main(["finetune", "--config", str(recipe)]) == 1  # a user error: one message, no traceback
    assert re.search(r"(?s)error: Checksum error.*spt/model.safetensors: sha256", capsys.readouterr().err)
    with pytest.raises(CheckpointIntegrityError, match=r"(?s)Checksum error.*spt/model.safetensors: sha256"):
        cli_main(["finetune", "--config", str(recipe), "--debug"])
    assert not (tmp_path / "finetune").exists()


TINY_BACKBONES = {  # spt_backbone: hidden 16 and one layer inside backbone_config (the shared fields follow it)
    "mamba": {"model_type": "mamba", "state_size": 4},
    "bert": {"model_type": "bert", "num_attention_heads": 2, "intermediate_size": 32, "hidden_dropout_prob": 0.0},
}


@pytest.mark.parametrize("backbone, data", [("mamba", DIGITS), ("bert", LISTOPS)], ids=["mamba-digits", "bert-listops"])
def test_spt_hf_run_with_scratch_trains_a_transformers_backbone(backbone, data, tmp_path, capsys):
    training = {k: v for k, v in TINY_TRAINING.items() if k not in ("hidden_size", "num_hidden_layers")}
    backbone_config = {**TINY_BACKBONES[backbone], "hidden_size": 16, "num_hidden_layers": 1}
    common = {**data, **training, "model_type": "spt_backbone", "backbone_config": backbone_config}
    spt = write_recipe(tmp_path / "x-spt.yaml", **common, objective="masked", output_dir=str(tmp_path / "run"))
    write_recipe(tmp_path / "x-finetune.yaml", **common, output_dir=str(tmp_path / "run"))
    assert cli_main(["run", "--config", str(spt), "--with-scratch"]) == 0
    results = {
        phase: json.loads((tmp_path / "run" / phase / "results.json").read_text())
        for phase in ("spt", "finetune", "scratch")
    }
    assert [results[phase]["budget"]["steps"] for phase in results] == [6, 6, 6]
    assert results["finetune"]["init"]["kind"] == "spt"
    assert results["spt"]["model_config"]["backbone_config"]["model_type"] == backbone
    assert f"backbone ({backbone})" in report([tmp_path / "run"])


def test_the_pretrained_backbone_route_runs_on_the_backbones_own_tokens(tmp_path):
    """backbone_name_or_path + backbone_input: tokenizer (the Pythia-70M baseline, with a tiny GPT-NeoX): causal SPT,
    finetuning from it, and the scratch phase, which is the pretrained backbone finetuned alone."""
    from helpers import save_pretrained_backbone

    source = save_pretrained_backbone(tmp_path / "tiny-pythia")
    training = {k: v for k, v in TINY_TRAINING.items() if k not in ("hidden_size", "num_hidden_layers")}
    common = {
        **LISTOPS,
        **training,
        "model_type": "spt_backbone",
        "backbone_name_or_path": str(source),
        "backbone_input": "tokenizer",
        "bidirectional": False,
        "output_dir": str(tmp_path / "run"),
    }
    spt = load_recipe(write_recipe(tmp_path / "p-spt.yaml", **common, objective="causal"))
    summary = run(spt, load_recipe(write_recipe(tmp_path / "p-finetune.yaml", **common)), with_scratch=True)
    for phase in ("spt", "finetune", "scratch"):
        config = summary["phases"][phase]["model_config"]
        assert config["vocab_size"] == 320 and config["backbone_name_or_path"] == str(source)  # Pythia's ids
    assert summary["phases"]["spt"]["metrics"]["metric_for_best_model"] == "loss"
    with pytest.raises(ValueError, match="Masked SPT replaces masked tokens by spt_hf's mask id"):
        masked = {**common, "bidirectional": True, "output_dir": str(tmp_path / "masked")}
        pretrain(load_recipe(write_recipe(tmp_path / "m-spt.yaml", **masked, objective="masked")))


def test_finetuning_refuses_a_changed_architecture_and_reads_each_spelling_as_the_config_does(tmp_path):
    """A finetuning recipe may restate the checkpoint's architecture, in any spelling the config class normalises
    (MEGA's `chunk_size: -1` is None, as the paper recipes write it), but not change it."""
    from transformers import AutoConfig

    from spt_hf.training.pipeline import _check_architecture

    AutoConfig.for_model("spt_mega", vocab_size=20, hidden_size=16, chunk_size=None).save_pretrained(tmp_path / "spt")

    def recipe(**values):
        path = tmp_path / "finetune.yaml"
        path.write_text(json.dumps({"task": "listops", "model_type": "spt_mega", "hidden_size": 16, **values}))
        return load_recipe(path, phase="finetune")

    _check_architecture(recipe(chunk_size=-1), str(tmp_path / "spt"))
    _check_architecture(recipe(chunk_size=None), str(tmp_path / "spt"))
    with pytest.raises(ValueError, match=r"differs from the checkpoint .*'chunk_size': \(None, 16\)"):
        _check_architecture(recipe(chunk_size=16), str(tmp_path / "spt"))
    with pytest.raises(ValueError, match=r"'hidden_size': \(16, 32\)"):
        _check_architecture(recipe(hidden_size=32), str(tmp_path / "spt"))


def test_the_torch_compile_switch_trains_as_eager_and_exports_a_plain_model(tmp_path):
    """`torch_compile: true` (a transformers TrainingArguments field, so a recipe key of either phase) compiles the
    phase's model: 20 SPT steps give the eager run's losses, and the exported model is the plain one (no `_orig_mod.`
    names), which finetuning loads and compiles again. The aot_eager backend (torch.compile's graph capture and
    autograd, without inductor's C++ code generation, which a CI machine may lack) keeps the test to seconds;
    benchmarks/bench_compile.py measures inductor."""
    from safetensors import safe_open

    base = {**LISTOPS, **ARCHITECTURES["transformer"], **TINY_TRAINING, "max_steps": 20, "logging_steps": 1}
    base.update(eval_steps=10, save_steps=10)
    compiled = {"torch_compile": True, "torch_compile_backend": "aot_eager"}
    losses = {}
    for name, extra in (("eager", {}), ("compiled", compiled)):
        spt = write_recipe(tmp_path / f"{name}-spt.yaml", **base, **extra, objective="masked", output_dir=str(tmp_path))
        pretrain(load_recipe(spt))
        state = json.loads((tmp_path / "spt" / "checkpoint-20" / "trainer_state.json").read_text())
        losses[name] = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
        if name == "eager":
            (tmp_path / "spt").rename(tmp_path / "spt-eager")
    assert len(losses["eager"]) == 20
    assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-4)
    with safe_open(str(tmp_path / "spt" / "model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    assert names and not [name for name in names if "_orig_mod" in name]
    finetuning = write_recipe(tmp_path / "compiled-finetune.yaml", **base, **compiled, output_dir=str(tmp_path))
    result = finetune(load_recipe(finetuning))
    assert result["metrics"]["test"]
