"""Checks every architecture must pass, driven by the TINY_CONFIGS table (tests/helpers.py).

Heads are built through the Auto classes only, as a user would.
"""

import json

import pytest
import torch
from helpers import TINY_CONFIGS, TINY_IDS, append_padding, make_config, make_inputs, no_causal_mode
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)
from transformers.modeling_layers import GradientCheckpointingLayer

from spt_hf import AutoModelForRetrieval
from spt_hf.checkpoints import verify_backbone_transfer

INPUT_KINDS = ["tokens", "continuous"]
HEADS = {
    "model": AutoModel,
    "masked_lm": AutoModelForMaskedLM,
    "causal_lm": AutoModelForCausalLM,
    "classification": AutoModelForSequenceClassification,
    "retrieval": AutoModelForRetrieval,
}


def build(entry, head: str, input_kind: str = "tokens", seed: int = 0, **overrides):
    """The head through its Auto class; skips the test for a causal model of an architecture without a causal form."""
    if head == "causal_lm":
        overrides.setdefault("bidirectional", False)
    if overrides.get("bidirectional") is False and (reason := no_causal_mode(entry)):
        pytest.skip(f"no causal model to test: {reason}")
    torch.manual_seed(seed)
    return HEADS[head].from_config(make_config(entry, input_kind, **overrides))


def head_inputs(model, head: str, seed: int = 0, pad_last: int = 2) -> dict:
    """Inputs with labels for the head's loss."""
    config = model.config
    inputs = make_inputs(config, seed=seed, pad_last=pad_last)
    batch, length = inputs["attention_mask"].shape
    generator = torch.Generator().manual_seed(seed + 1)
    if head == "masked_lm":
        selected = (torch.rand(batch, length, generator=generator) < 0.5) & inputs["attention_mask"].bool()
        selected[:, 0] = True
        if config.is_token_input:
            inputs["labels"] = torch.where(selected, inputs["input_ids"], -100)
            inputs["input_ids"] = inputs["input_ids"].masked_fill(selected, config.mask_token_id)
        else:
            inputs["mask_positions"] = selected
    elif head == "causal_lm" and config.is_token_input:
        inputs["labels"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    elif head == "causal_lm":
        inputs["labels"] = inputs["input_values"]
    elif head == "classification":
        inputs["labels"] = torch.randint(0, config.num_labels, (batch,), generator=generator)
    elif head == "retrieval":
        other = make_inputs(config, seed=seed + 2, pad_last=1)
        inputs.update({f"{key}_2": value for key, value in other.items()})
        inputs["labels"] = torch.randint(0, config.num_labels, (batch,), generator=generator)
    return inputs


def main_output(outputs) -> torch.Tensor:
    return outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs.logits


@pytest.mark.parametrize("input_kind", INPUT_KINDS)
@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_forward_backward_finite(entry, head, input_kind):
    model = build(entry, head, input_kind)
    inputs = head_inputs(model, head)
    outputs = model(**inputs)
    assert torch.isfinite(main_output(outputs)).all()
    if head == "model":
        assert outputs.last_hidden_state.shape == (*inputs["attention_mask"].shape, 32)
        outputs.last_hidden_state.sum().backward()
    else:
        assert outputs.loss is not None and torch.isfinite(outputs.loss)
        outputs.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("input_kind", INPUT_KINDS)
@pytest.mark.parametrize("pooling", ["mean", "last", "max", "first"])
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_padding_does_not_change_pooled_outputs(entry, pooling, input_kind):
    model = build(entry, "classification", input_kind, pooling=pooling, classifier_type="mlp").eval()
    inputs = make_inputs(model.config, pad_last=3)
    with torch.no_grad():
        reference = model(**inputs).logits
        padded = model(**append_padding(inputs, extra=5)).logits
    torch.testing.assert_close(padded, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("input_kind", INPUT_KINDS)
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_causal_mode_never_sees_the_future(entry, input_kind):
    t = 6
    for bidirectional in (False, True):
        if not bidirectional and no_causal_mode(entry):
            with pytest.raises(ValueError, match="`bidirectional=False` is not possible"):
                make_config(entry, input_kind, bidirectional=False)  # refused clearly: the encoder has no causal mode
            continue
        model = build(entry, "model", input_kind, bidirectional=bidirectional).eval()
        inputs = make_inputs(model.config)
        changed = {key: value.clone() for key, value in inputs.items()}
        key = "input_ids" if model.config.is_token_input else "input_values"
        changed[key][:, t + 1] = 5 if key == "input_ids" else changed[key][:, t + 1] + 3.0
        with torch.no_grad():
            before = model(**inputs).last_hidden_state
            after = model(**changed).last_hidden_state
        past_equal = torch.allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-6)
        assert past_equal == (not bidirectional), f"bidirectional={bidirectional}"
        assert not torch.allclose(before[:, t + 1], after[:, t + 1])


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_save_load_identical_outputs(entry, head, tmp_path):
    model = build(entry, head).eval()
    inputs = head_inputs(model, head)
    model.save_pretrained(tmp_path)
    reloaded = HEADS[head].from_pretrained(tmp_path).eval()
    assert type(reloaded) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(main_output(reloaded(**inputs)), main_output(model(**inputs)), rtol=0, atol=0)
    buffers = dict(model.named_buffers())
    for name, buffer in reloaded.named_buffers():  # non-persistent buffers are rebuilt by _init_weights
        torch.testing.assert_close(buffer, buffers[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("input_kind", INPUT_KINDS)
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_masked_lm_checkpoint_transfers_to_classification(entry, input_kind, tmp_path):
    mlm = build(entry, "masked_lm", input_kind)
    mlm(**head_inputs(mlm, "masked_lm")).loss.backward()  # running statistics and weights move off their init
    mlm.save_pretrained(tmp_path)
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    assert classifier.config.num_labels == 5
    assert verify_backbone_transfer(classifier, tmp_path) == len(mlm.model.state_dict())
    inside = [param for name, param in classifier.model.named_parameters() if ".0." in name]  # in the first layer
    with torch.no_grad():
        inside[-1].add_(1.0)
    with pytest.raises(RuntimeError, match="differs from the checkpoint"):
        verify_backbone_transfer(classifier, tmp_path)


@pytest.mark.parametrize("head", ["masked_lm", "classification", "causal_lm"])
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_gradient_checkpointing_gives_same_gradients(entry, head):
    grads = []
    for checkpointing in (False, True):
        model = build(entry, head, seed=3)
        model.train()
        if checkpointing:
            model.activation_checkpointing_enable()
            layers = [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]
            assert len(layers) >= 2 and all(layer.gradient_checkpointing for layer in layers)
        model(**head_inputs(model, head)).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_generate_equals_manual_greedy_loop(entry):
    model = build(entry, "causal_lm").eval()
    prompt = make_inputs(model.config, batch=2, length=4)["input_ids"]
    # eos_token_id=None: the manual loop below does not stop at the end token, so neither may generate().
    generated = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    manual = prompt
    with torch.no_grad():
        for _ in range(6):
            next_token = model(input_ids=manual, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            manual = torch.cat([manual, next_token], dim=1)
    assert torch.equal(generated, manual)


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_continuous_masked_loss_only_on_masked_positions(entry):
    model = build(entry, "masked_lm", "continuous").eval()
    inputs = head_inputs(model, "masked_lm")
    labels = inputs["input_values"].clone()
    with torch.no_grad():
        loss = model(**inputs, labels=labels).loss
        labels[~inputs["mask_positions"]] += 100.0
        assert torch.allclose(model(**inputs, labels=labels).loss, loss)
        labels[inputs["mask_positions"]] += 1.0
        assert not torch.allclose(model(**inputs, labels=labels).loss, loss)


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_continuous_loss_variants(loss):
    model = build(TINY_CONFIGS[0], "masked_lm", "continuous", continuous_loss=loss, num_quantized_levels=16)
    inputs = head_inputs(model, "masked_lm")
    if loss == "cross_entropy":
        inputs["labels"] = torch.randint(0, 16, inputs["input_values"].shape)
        assert model(**inputs).logits.shape[-1] == 3 * 16
    assert torch.isfinite(model(**inputs).loss)


@pytest.mark.parametrize("input_kind", INPUT_KINDS)
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_recurrent_steps_equal_parallel_forward(entry, input_kind):
    """`use_cache=True` runs position by position through the mixers' recurrent `step` (the generation path)."""
    model = build(entry, "causal_lm", input_kind).eval()
    inputs = make_inputs(model.config, length=14, pad_last=3)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        parallel = model(**inputs, use_cache=False).logits  # (eval mode, no labels: `config.use_cache` otherwise)
        stepped = model(**inputs, use_cache=True)
        assert stepped.cache is not None and cached_positions(stepped.cache) in (14, None)
        torch.testing.assert_close(stepped.logits[real], parallel[real], rtol=1e-4, atol=1e-5)
        if entry[1] == "spt_backbone" and entry[2]["backbone_config"]["model_type"] == "mamba":
            pytest.skip(
                "transformers' MambaModel continues a cache exactly one token at a time only (as generate() does): a "
                "chunk of several new tokens restarts its selective scan from a zero state (modeling_mamba's "
                "mamba_selective_scan takes no initial state), which the bare MambaModel shows too"
            )
        # Continuing a cache equals running everything at once.
        first = {key: value[:, :9] for key, value in inputs.items()}
        rest = {key: value[:, 9:] for key, value in inputs.items()}
        cache = model(**first, use_cache=True).cache
        continued = model(**rest, cache=cache).logits
        torch.testing.assert_close(continued[real[:, 9:]], parallel[:, 9:][real[:, 9:]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_generate_uses_the_recurrent_cache(entry):
    model = build(entry, "causal_lm").eval()
    prompt = make_inputs(model.config, batch=2, length=5)["input_ids"]
    out = model.generate(prompt, max_new_tokens=4, do_sample=False, return_dict_in_generate=True, pad_token_id=0)
    assert out.cache is not None and cached_positions(out.cache) in (5 + 4 - 1, None)


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_config_use_cache_is_saved_reloaded_and_honoured_by_forward_and_generate(entry, tmp_path):
    """`config.use_cache` (default True, as in transformers' decoder configs) is saved and reloaded; a config.json
    saved before the field existed loads with the default. generate() takes it as its default; a forward builds the
    cache only when asked (spt_hf fills it position by position, far slower than the parallel pass)."""
    model = build(entry, "causal_lm").eval()
    assert model.config.use_cache is True and model.generation_config.use_cache is True
    inputs = make_inputs(model.config, batch=2, length=5)
    prompt, labels = inputs["input_ids"], inputs["input_ids"]
    greedy = {"max_new_tokens": 3, "do_sample": False, "pad_token_id": 0, "return_dict_in_generate": True}
    with torch.no_grad():
        assert model(**inputs, use_cache=True).cache is not None
        for no_cache in ({}, {"labels": labels}, {"use_cache": False}, {"position_ids": torch.arange(5).expand(2, 5)}):
            assert model(**inputs, **no_cache).cache is None, no_cache
        if entry[1] != "spt_backbone":  # the recurrent path numbers positions itself: packed sequences are refused
            packed = torch.tensor([[0, 1, 2, 0, 1]])
            with pytest.raises(ValueError, match="which the recurrent path"):
                model(input_ids=prompt[:1], position_ids=packed, use_cache=True)
    cached = model.generate(prompt, **greedy)
    assert cached.cache is not None

    build(entry, "causal_lm", use_cache=False).save_pretrained(tmp_path / "off")
    assert json.loads((tmp_path / "off" / "config.json").read_text())["use_cache"] is False
    off = AutoModelForCausalLM.from_pretrained(tmp_path / "off").eval()
    assert off.config.use_cache is False and off.generation_config.use_cache is False
    with torch.no_grad():
        assert off(**inputs).cache is None and off(**inputs, use_cache=True).cache is not None
    uncached = off.generate(prompt, **greedy)
    assert uncached.cache is None and torch.equal(uncached.sequences, cached.sequences)  # the same seed's weights

    model.save_pretrained(tmp_path / "old")
    saved = json.loads((tmp_path / "old" / "config.json").read_text())
    del saved["use_cache"]  # a checkpoint saved before the field existed
    (tmp_path / "old" / "config.json").write_text(json.dumps(saved))
    old = AutoModelForCausalLM.from_pretrained(tmp_path / "old").eval()
    assert old.config.use_cache is True
    assert old.generate(prompt, **greedy).cache is not None
    assert model.train()(**inputs).cache is None  # last: a training step updates batch-norm statistics


def cached_positions(cache) -> int | None:
    """How many positions a cache holds; None for a transformers cache of recurrent states only (Mamba's layers hold
    a fixed-size state and no position count), after checking that it holds one."""
    if cache.layers and all(cache.is_linear):
        assert cache.has_previous_state()
        return None
    return cache.get_seq_length()
