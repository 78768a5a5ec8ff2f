"""spt_backbone beyond the shared tests (which run every backbone of TINY_CONFIGS): the direction read from
transformers' Auto mappings, clear errors, the two-direction decoder against an independent computation, no unused
parameters, the backbone's own cache, block-sparse BigBird, and a pretrained checkpoint as the backbone (the Pythia
route)."""

import shutil

import pytest
import torch
from helpers import (
    OTHER_BACKBONES,
    TINY_BACKBONE,
    TINY_CONFIGS,
    TINY_PYTHIA,
    make_config,
    make_inputs,
    save_pretrained_backbone,
)
from test_modeling_common import build, head_inputs
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM
from transformers import AutoModelForSequenceClassification as AutoClassifier
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

from spt_hf.modeling.backbone_adapter import (
    PACKED_SEQUENCE_BACKBONES,
    BackboneLayout,
    RemovedFinalNorm,
    RemovedInputEmbedding,
)
from spt_hf.modeling.configuration_backbone import backbone_direction
from spt_hf.modeling.modeling_backbone import gather_positions, reversal_index

BACKBONES = [entry for entry in TINY_CONFIGS if entry[1] == "spt_backbone"]
BY_TYPE = {entry[2]["backbone_config"]["model_type"]: entry for entry in BACKBONES}


def backbone(model_type: str, **overrides):
    """A tiny spt_backbone config around `model_type` (a TINY_CONFIGS backbone, or `overrides` for another)."""
    values = {**TINY_BACKBONE, "model_type": model_type, **overrides}
    if model_type in BY_TYPE:
        values = {**BY_TYPE[model_type][2]["backbone_config"], **overrides}
    return {"vocab_size": 20, "num_labels": 3, "backbone_config": values}


@pytest.mark.parametrize(
    "model_type, expected",
    [
        ("bert", ("encoder", True)),
        ("roberta", ("encoder", True)),
        ("big_bird", ("encoder", True)),
        ("modernbert", ("encoder", False)),
        ("distilbert", ("encoder", False)),
        ("llama", ("decoder", True)),
        ("mamba", ("decoder", True)),
        ("gpt2", ("decoder", True)),
        ("rwkv", ("decoder", True)),
    ],
)
def test_direction_comes_from_transformers_auto_mappings(model_type, expected):
    assert backbone_direction(AutoConfig.for_model(model_type)) == expected


@pytest.mark.parametrize(
    "values, message",
    [
        ({"vocab_size": 20}, "spt_backbone needs `backbone_config`"),
        ({"vocab_size": 20, "backbone_config": {"hidden_size": 32}}, "needs a `model_type`"),
        (backbone("mambo"), r"not a transformers model type; did you mean \['mamba'"),
        (backbone("spt_s4"), "'spt_s4' is not a transformers model type"),
        (backbone("t5"), "is an encoder-decoder model"),
        (backbone("vit"), "neither an encoder .* nor a decoder"),
        ({**backbone("modernbert"), "bidirectional": False}, "modernbert backbone is a bidirectional encoder with no"),
        ({**backbone("mamba"), "hidden_size": 64}, r"`hidden_size`=64 differs from the backbone's hidden_size=32"),
        ({**backbone("mamba"), "backbone_input": "text"}, "`backbone_input`='text' is not supported"),
        ({**backbone("mamba"), "reverse_weights": "tied"}, "`reverse_weights`='tied' is not supported"),
        ({**backbone("mamba"), "hidden_dropout_prob": 0.1}, "spt_backbone does not have; set the backbone's own"),
        ({**backbone("bert"), "prenorm": False}, "spt_backbone does not have"),
        ({**backbone("llama"), "backbone_input": "tokenizer"}, "set `backbone_name_or_path`"),
    ],
)
def test_bad_backbone_configs_raise_clear_errors(values, message):
    with pytest.raises(ValueError, match=message):
        AutoConfig.for_model("spt_backbone", **values)


class _Config:
    model_type, num_hidden_layers = "toy", 1


class _Toy(torch.nn.Module):
    config = _Config()
    _is_stateful = supports_gradient_checkpointing = False


class ToyWithoutMask(_Toy):
    def forward(self, input_ids=None, inputs_embeds=None):
        pass


class ToyWithoutEmbeds(_Toy):
    def forward(self, input_ids=None, attention_mask=None):
        pass


@pytest.mark.parametrize(
    "toy, kind, missing",
    [(ToyWithoutMask, "encoder", "attention_mask"), (ToyWithoutEmbeds, "decoder", "inputs_embeds")],
)
def test_a_backbone_lacking_inputs_embeds_or_an_attention_mask_is_refused_naming_it(toy, kind, missing):
    with pytest.raises(ValueError, match=f"The toy backbone .* takes no {missing}, which spt_backbone needs"):
        BackboneLayout(toy(), kind)
    if kind == "encoder":
        BackboneLayout(toy(), "decoder")  # a decoder needs no mask: right padding never reaches a real position


def reversed_by_hand(mask: torch.Tensor) -> torch.Tensor:
    index = torch.arange(mask.shape[1]).repeat(mask.shape[0], 1)
    for row in range(mask.shape[0]):
        real = torch.nonzero(mask[row]).flatten()
        index[row, real] = real.flip(0)
    return index


def test_reversal_index_reverses_each_sequence_within_its_real_positions():
    generator = torch.Generator().manual_seed(0)
    masks = torch.rand(6, 9, generator=generator) < 0.7  # padding anywhere, including first and last
    masks[0], masks[1] = True, False
    masks[2] = torch.arange(9) < 5  # right padding: position t < 5 reads 4 - t
    index = reversal_index(masks, 6, 9, "cpu")
    assert torch.equal(index, reversed_by_hand(masks))
    assert index[2].tolist() == [4, 3, 2, 1, 0, 5, 6, 7, 8]
    values = torch.randn(6, 9, 3, generator=generator)
    assert torch.equal(gather_positions(gather_positions(values, index), index), values)  # its own inverse
    assert torch.equal(reversal_index(None, 2, 4, "cpu"), torch.tensor([[3, 2, 1, 0]] * 2))


@pytest.mark.parametrize("reverse_weights", ["separate", "shared"])
def test_a_bidirectional_decoder_sums_a_forward_and_a_reversed_pass(reverse_weights):
    """Independent computation: the bare backbone on the sequence plus the (other) bare backbone on each sequence
    reversed within its length, reversed back; padding never enters the reversed pass before a real position."""
    torch.manual_seed(0)
    config = AutoConfig.for_model("spt_backbone", **backbone("llama"), reverse_weights=reverse_weights)
    model = AutoModel.from_config(config).eval()
    inputs = make_inputs(config, pad_last=4)
    mask = inputs["attention_mask"]
    with torch.no_grad():
        embedded = model.embeddings(inputs["input_ids"])  # (B, L, H)
        forward = model.backbone_model(inputs_embeds=embedded, attention_mask=mask).last_hidden_state
        reverse_model = model.reverse_model if reverse_weights == "separate" else model.backbone_model
        index = reversed_by_hand(mask.bool())
        flipped = torch.stack([embedded[b, index[b]] for b in range(len(index))])  # real positions first
        reverse = reverse_model(inputs_embeds=flipped, attention_mask=mask).last_hidden_state
        reverse = torch.stack([reverse[b, index[b]] for b in range(len(index))])
        expected = model.norm_f(forward + reverse)
        torch.testing.assert_close(model(**inputs).last_hidden_state, expected, rtol=1e-5, atol=1e-5)
    assert (model.reverse_model is None) == (reverse_weights == "shared")
    causal = AutoModel.from_config(AutoConfig.for_model("spt_backbone", **backbone("llama"), bidirectional=False))
    count = sum(p.numel() for p in model.backbone_model.parameters())
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in causal.parameters())
    assert extra == (count if reverse_weights == "separate" else 0)


@pytest.mark.parametrize("head", ["masked_lm", "classification", "causal_lm"])
@pytest.mark.parametrize("entry", BACKBONES, ids=[entry[0] for entry in BACKBONES])
def test_spt_hf_replaces_the_backbones_embedding_and_final_norm_and_every_parameter_trains(entry, head):
    """No unused parameter (DDP runs with find_unused_parameters=False): the backbone's token embedding, pooler and
    final norm are gone, spt_hf's embedding and final norm are the only ones."""
    model = build(entry, head, seed=1)
    inner = model.model.backbone_model
    assert isinstance(inner.get_input_embeddings(), RemovedInputEmbedding)
    assert getattr(inner, "pooler", None) is None
    assert not any(
        name.endswith(("norm_f", "final_layer_norm", "final_norm"))
        for name, _ in inner.named_modules()
        if not isinstance(inner.get_submodule(name), RemovedFinalNorm)
    )
    model(**head_inputs(model, head)).loss.backward()
    unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not unused


def test_generation_uses_the_backbones_own_cache():
    mamba = AutoModelForCausalLM.from_config(make_config(BY_TYPE["mamba"], bidirectional=False))
    llama = AutoModelForCausalLM.from_config(make_config(BY_TYPE["llama"], bidirectional=False))
    assert all(isinstance(layer, LinearAttentionLayer) for layer in mamba.model.generation_cache().layers)
    assert all(isinstance(layer, DynamicLayer) for layer in llama.model.generation_cache().layers)
    assert AutoModel.from_config(make_config(BY_TYPE["modernbert"])).generation_cache() is None
    prompt = make_inputs(mamba.config, batch=2, length=4)["input_ids"]
    out = mamba.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    assert all(isinstance(layer, LinearAttentionLayer) for layer in out.cache.layers) and out.cache.has_previous_state()


def test_a_decoder_without_a_cache_or_attention_mask_generates_by_rerunning_and_needs_right_padding():
    """xLSTM's forward takes no attention mask: right padding never reaches a real position (both directions),
    other padding is refused. RWKV takes no `cache`: generate() reruns the sequence and still equals a greedy loop."""
    xlstm = AutoConfig.for_model("spt_backbone", **backbone("xlstm", num_heads=2, embedding_dim=32))
    model = AutoClassifier.from_config(xlstm).eval()
    inputs = make_inputs(xlstm, pad_last=3)
    model(**inputs)
    inputs["attention_mask"][0, 0] = 0
    with pytest.raises(ValueError, match="takes no attention mask, so padding must be on the right"):
        model(**inputs)
    rwkv = AutoConfig.for_model(
        "spt_backbone", **backbone("rwkv", attention_hidden_size=32, intermediate_size=64), bidirectional=False
    )
    model = AutoModelForCausalLM.from_config(rwkv).eval()
    assert model.generation_config.use_cache is False
    prompt = make_inputs(rwkv, batch=2, length=4)["input_ids"]
    generated = model.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        for _ in range(3):
            prompt = torch.cat([prompt, model(input_ids=prompt).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(generated, prompt)


def test_block_sparse_bigbird_gets_whole_blocks_without_its_token_embedding():
    """BigBird pads to a multiple of its block size by looking up its own (removed) token embedding; spt_backbone
    pads the embedded inputs itself and crops the outputs."""
    config = AutoConfig.for_model(
        "spt_backbone", **backbone("big_bird", attention_type="block_sparse", block_size=2, num_random_blocks=1)
    )
    model = AutoModelForMaskedLM.from_config(config)
    inputs = make_inputs(config, length=17, pad_last=3)  # more than (5 + 2) x 2 positions: block-sparse, odd length
    outputs = model(**inputs, labels=inputs["input_ids"], output_hidden_states=True)
    assert model.model.backbone_model.attention_type == "block_sparse"
    assert outputs.logits.shape[1] == 17 and all(h.shape[1] == 17 for h in outputs.hidden_states)
    outputs.loss.backward()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return save_pretrained_backbone(tmp_path_factory.mktemp("tiny-pythia"))


def pretrained_config(source, **overrides):
    return AutoConfig.for_model(
        "spt_backbone", vocab_size=20, num_labels=3, backbone_name_or_path=str(source), **overrides
    )


def test_the_tokenizer_route_reproduces_the_pretrained_model(pretrained):
    """With the backbone's tokenizer, its token embedding and final LayerNorm are the checkpoint's: the causal model
    computes exactly what the checkpoint's own GPTNeoXModel computes."""
    config = pretrained_config(pretrained, backbone_input="tokenizer", bidirectional=False)
    assert config.backbone_config.model_type == "gpt_neox" and config.hidden_size == 32
    assert (config.vocab_size, config.num_channels, config.eos_token_id) == (320, None, 0)  # the backbone's
    model = AutoModel.from_config(config).eval()
    reference = AutoModel.from_pretrained(pretrained).eval()
    ids = torch.randint(3, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(input_ids=ids).last_hidden_state
        torch.testing.assert_close(ours, reference(input_ids=ids).last_hidden_state, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Masked SPT replaces masked tokens by spt_hf's mask id"):
        AutoModelForMaskedLM.from_config(pretrained_config(pretrained, backbone_input="tokenizer"))


def test_the_embedding_route_keeps_the_pretrained_layers_and_replaces_the_embedding(pretrained, tmp_path):
    source = shutil.copytree(pretrained, tmp_path / "source")
    config = pretrained_config(source)  # bidirectional: both directions start from the checkpoint
    model = AutoClassifier.from_config(config).eval()
    reference = AutoModel.from_pretrained(source).state_dict()
    for inner in (model.model.backbone_model, model.model.reverse_model):
        for name, tensor in inner.state_dict().items():
            torch.testing.assert_close(tensor, reference[name], rtol=0, atol=0, msg=name)
    torch.testing.assert_close(model.model.norm_f.norm.weight, reference["final_layer_norm.weight"], rtol=0, atol=0)
    assert model.model.embeddings.word_embeddings.weight.shape == (20, 32)  # spt_hf's, for the task's tokens
    model.save_pretrained(tmp_path / "saved")
    shutil.rmtree(source)  # a saved model holds its weights: the source checkpoint is not read again
    reloaded = AutoClassifier.from_pretrained(tmp_path / "saved").eval()
    inputs = make_inputs(config, pad_last=2)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)


def test_a_checkpoint_that_does_not_fit_the_backbone_config_or_is_not_safetensors_is_refused(pretrained, tmp_path):
    wider = {**TINY_PYTHIA, "hidden_size": 64, "intermediate_size": 128}
    with pytest.raises(ValueError, match=r"does not fit `backbone_config` \(checkpoint vs config shapes\)"):
        AutoModel.from_config(pretrained_config(pretrained, backbone_config=wider))
    pickled = tmp_path / "pickled"
    AutoModel.from_pretrained(pretrained).save_pretrained(pickled, safe_serialization=False)
    (pickled / "model.safetensors").unlink(missing_ok=True)
    with pytest.raises(OSError, match="model.safetensors"):
        AutoModel.from_config(pretrained_config(pickled))


def test_the_task_length_reaches_backbones_with_positions_unless_backbone_config_sets_it():
    bert = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = AutoConfig.for_model("spt_backbone", vocab_size=20, backbone_config=bert, max_position_embeddings=3000)
    assert config.backbone_config.max_position_embeddings == 3000  # BERT's 512 learned positions would not fit
    bert["max_position_embeddings"] = 64
    config = AutoConfig.for_model("spt_backbone", vocab_size=20, backbone_config=bert, max_position_embeddings=3000)
    assert config.backbone_config.max_position_embeddings == 64
    mamba = AutoConfig.for_model(
        "spt_backbone",
        vocab_size=20,
        max_position_embeddings=3000,
        backbone_config={"model_type": "mamba", "hidden_size": 32, "num_hidden_layers": 2},
    )
    assert not hasattr(mamba.backbone_config, "max_position_embeddings")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(OTHER_BACKBONES))
def test_other_backbones_respect_direction_and_padding_reload_and_generate(model_type, tmp_path):
    from helpers import append_padding

    values = {
        "vocab_size": 20,
        "num_labels": 3,
        "backbone_config": {"model_type": model_type, **OTHER_BACKBONES[model_type]},
    }
    _, has_causal_mode = backbone_direction(AutoConfig.for_model("spt_backbone", **values).backbone_config)
    for bidirectional in (True, False) if has_causal_mode else (True,):
        config = AutoConfig.for_model("spt_backbone", **values, bidirectional=bidirectional)
        torch.manual_seed(0)
        model = AutoClassifier.from_config(config).eval()
        inputs = make_inputs(config, pad_last=3)
        changed = {**inputs, "input_ids": inputs["input_ids"].clone()}
        changed["input_ids"][:, 7] = 5
        with torch.no_grad():
            torch.testing.assert_close(model(**append_padding(inputs, 5)).logits, model(**inputs).logits)
            before, after = (model.model(**x).last_hidden_state for x in (inputs, changed))
        assert torch.allclose(before[:, :7], after[:, :7], atol=1e-6) == (not bidirectional)
        model.save_pretrained(tmp_path / str(bidirectional))
        reloaded = AutoClassifier.from_pretrained(tmp_path / str(bidirectional)).eval()
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)
    if has_causal_mode:
        lm = AutoModelForCausalLM.from_config(AutoConfig.for_model("spt_backbone", **values, bidirectional=False))
        prompt = make_inputs(lm.config, batch=2, length=4)["input_ids"]
        generated = lm.eval().generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, eos_token_id=None)
        with torch.no_grad():
            for _ in range(3):  # with the 0-based positions generate() passes (RoBERTa's default starts at 2)
                positions = torch.arange(prompt.shape[1]).expand_as(prompt)
                next_token = lm(input_ids=prompt, position_ids=positions).logits[:, -1:].argmax(-1)
                prompt = torch.cat([prompt, next_token], dim=1)
        assert torch.equal(generated, prompt)


PACKING_CASES = [
    *((model_type, bidirectional) for model_type in BY_TYPE for bidirectional in (True, False)),
    ("qwen2", False),
]


@pytest.mark.parametrize("model_type, bidirectional", PACKING_CASES)
def test_packed_sequences_stay_apart_or_are_refused(model_type, bidirectional):
    """Restarting position_ids without an attention_mask (several sequences in one row): a one-direction decoder whose
    masks read them (PACKED_SEQUENCE_BACKBONES) gives each sequence what it gives alone; every other backbone and
    direction refuses in one line, instead of letting the sequences see each other (Mamba's scan mixed them by up to
    2.8, BERT's causal mask by 0.03)."""
    values = backbone(model_type, **({} if model_type in BY_TYPE else OTHER_BACKBONES[model_type]))
    if not bidirectional and not backbone_direction(AutoConfig.for_model(model_type))[1]:
        pytest.skip(f"{model_type} has no causal mode")
    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model("spt_backbone", **values, bidirectional=bidirectional)).eval()
    first, second = torch.randint(3, 20, (1, 6)), torch.randint(3, 20, (1, 8))
    position_ids = torch.cat([torch.arange(6), torch.arange(8)]).unsqueeze(0)
    packed = torch.cat([first, second], dim=1)
    if bidirectional or model_type not in PACKED_SEQUENCE_BACKBONES:
        with pytest.raises(ValueError, match=rf"restart inside a row .*spt_backbone \({model_type}"):
            model(input_ids=packed, position_ids=position_ids)
        model(input_ids=packed, position_ids=torch.arange(14).unsqueeze(0))  # positions that do not restart
        return
    with torch.no_grad():
        out = model(input_ids=packed, position_ids=position_ids).last_hidden_state
        alone = torch.cat([model(input_ids=x).last_hidden_state for x in (first, second)], dim=1)
    torch.testing.assert_close(out, alone, rtol=1e-5, atol=1e-5)
