"""spt_backbone switches on the faster exact paths of the transformers backbones it wraps (configuration_backbone's
`fast_path_defaults`): Mamba-like backbones run the parallel scan of `mambapy` instead of transformers' Python loop over
positions. The fast path must give the loop's outputs and gradients (float64), and the switch must be a saved config
value that the user can turn off."""

import functools
import importlib.util
import json
import logging

import pytest
import torch
from helpers import OTHER_BACKBONES, TINY_BACKBONE, make_inputs
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, MambaConfig

import spt_hf  # noqa: F401

MAMBA_LIKE = {
    "mamba": {**TINY_BACKBONE, "model_type": "mamba", "state_size": 8},
    **{name: {**OTHER_BACKBONES[name], "model_type": name} for name in ("falcon_mamba", "jamba")},
}


def spt_config(backbone: dict, **kwargs):
    return AutoConfig.for_model("spt_backbone", vocab_size=20, num_labels=3, backbone_config=backbone, **kwargs)


@pytest.mark.parametrize("model_type", list(MAMBA_LIKE))
def test_mamba_like_backbones_default_to_the_parallel_scan_saved_in_the_config(model_type, tmp_path):
    config = spt_config(MAMBA_LIKE[model_type])
    assert config.backbone_config.use_mambapy is True
    config.save_pretrained(tmp_path / "on")
    assert AutoConfig.from_pretrained(tmp_path / "on").backbone_config.use_mambapy is True
    off = spt_config({**MAMBA_LIKE[model_type], "use_mambapy": False})  # the user's choice stays, also on reload
    assert off.backbone_config.use_mambapy is False
    off.save_pretrained(tmp_path / "off")
    assert AutoConfig.from_pretrained(tmp_path / "off").backbone_config.use_mambapy is False


def test_backbones_without_the_switch_are_unchanged_and_a_config_object_is_taken_as_given():
    llama = spt_config({**TINY_BACKBONE, "model_type": "llama", "num_attention_heads": 4, "intermediate_size": 64})
    assert not hasattr(llama.backbone_config, "use_mambapy")
    given = spt_config(MambaConfig(hidden_size=32, num_hidden_layers=2, state_size=8))
    assert given.backbone_config.use_mambapy is False


def test_a_checkpoint_config_without_the_switch_gets_the_parallel_scan_and_one_with_it_keeps_it(tmp_path):
    AutoModel.from_config(AutoConfig.for_model(**MAMBA_LIKE["mamba"])).save_pretrained(tmp_path)
    assert spt_config(None, backbone_name_or_path=str(tmp_path)).backbone_config.use_mambapy is False  # as saved
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["use_mambapy"]  # as in checkpoints converted before transformers had the switch
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert spt_config(None, backbone_name_or_path=str(tmp_path)).backbone_config.use_mambapy is True


def counted_pscan(monkeypatch) -> list:
    """Count the calls of mambapy's parallel scan (transformers imports it at every selective scan)."""
    pscan_module = pytest.importorskip("mambapy.pscan")
    calls, original = [], pscan_module.pscan

    def pscan(*args):
        calls.append(args[0].shape)
        return original(*args)

    monkeypatch.setattr(pscan_module, "pscan", pscan)
    return calls


# Jamba's mixture of experts runs torch's grouped matrix product, which takes no float64: float32 and its tolerance.
PRECISION = {"jamba": (torch.float32, 1e-5)}


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba", "jamba"])
def test_the_parallel_scan_gives_the_loops_outputs_and_gradients(model_type, monkeypatch):
    calls = counted_pscan(monkeypatch)
    dtype, atol = PRECISION.get(model_type, (torch.float64, 1e-12))
    results = {}
    for fast in (False, True):
        backbone = {**MAMBA_LIKE[model_type], **({} if fast else {"use_mambapy": False})}
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_config(spt_config(backbone)).to(dtype)  # both directions: two scans
        with torch.no_grad():  # larger time steps than the initialisation's, so that states carry far along L
            for name, param in model.named_parameters():
                if name.endswith("dt_proj.bias"):
                    param.add_(2.0)
        inputs = make_inputs(model.config, batch=3, length=37, pad_last=5)  # not a power of two: pscan pads
        before = len(calls)
        logits = model(**inputs).logits  # (B, L, V)
        assert (len(calls) > before) == fast  # the default runs mambapy's scan, use_mambapy=False the loop
        logits.pow(2).mean().backward()
        results[fast] = (logits.detach(), {name: p.grad for name, p in model.named_parameters()})
    (slow_logits, slow_grads), (fast_logits, fast_grads) = results[False], results[True]
    torch.testing.assert_close(fast_logits, slow_logits, rtol=0, atol=atol)
    assert slow_grads.keys() == fast_grads.keys()
    for name, grad in slow_grads.items():
        assert grad is not None and grad.abs().max() > 0, name
        torch.testing.assert_close(fast_grads[name], grad, rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("use_mambapy", [True, False])
def test_the_cuda_kernel_notices_are_silent_exactly_while_the_parallel_scan_runs(use_mambapy, monkeypatch, request):
    """With mambapy's scan in use, transformers' "install mamba_ssm / causal_conv1d" notices (CUDA-only packages)
    are dropped; the loop path (use_mambapy=False) still shows them."""
    pytest.importorskip("mambapy")
    if importlib.util.find_spec("mamba_ssm"):
        pytest.skip("mamba_ssm is installed: transformers uses its kernels and prints no notice")
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as hf_logging

    from spt_hf.modeling.backbone_adapter import CUDA_KERNEL_NOTICES

    monkeypatch.setattr(hf_logging, "warning_once", functools.lru_cache(None)(hf_logging.warning_once.__wrapped__))
    monkeypatch.setattr(logging.Logger, "warning_once", hf_logging.warning_once)  # shown once per test, not process
    model = AutoModelForMaskedLM.from_config(spt_config({**MAMBA_LIKE["mamba"], "use_mambapy": use_mambapy}))
    inputs = make_inputs(model.config, batch=2, length=16)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # tests/helpers.py keeps transformers to errors
    request.addfinalizer(lambda: hf_logging.set_verbosity(verbosity))
    with CaptureLogger(hf_logging.get_logger("transformers.integrations.hub_kernels")) as captured:
        model.train()(**inputs)
    shown = [notice for notice in CUDA_KERNEL_NOTICES if notice in captured.out]
    assert shown == ([] if use_mambapy else list(CUDA_KERNEL_NOTICES))
