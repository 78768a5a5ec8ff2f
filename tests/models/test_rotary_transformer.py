"""Transformer-specific checks: eager == SDPA, block-local == full attention where the window covers everything."""

import pytest
import torch
from helpers import TINY_CONFIGS, make_config, make_inputs
from transformers import AutoModel

from spt_hf.modeling.modeling_rotary_transformer import apply_rotary_pos_emb

TRANSFORMER = TINY_CONFIGS[0]


def build(attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = make_config(TRANSFORMER, **overrides)
    return AutoModel.from_config(config, attn_implementation=attn_implementation).eval()


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_eager_equals_sdpa(bidirectional, window):
    sdpa = build("sdpa", bidirectional=bidirectional, attention_window=window)
    eager = build("eager", bidirectional=bidirectional, attention_window=window)
    assert sdpa.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    inputs = make_inputs(sdpa.config, length=16, pad_last=5)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        a, b = sdpa(**inputs).last_hidden_state, eager(**inputs).last_hidden_state
    torch.testing.assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("length", [8, 7])
def test_local_attention_equals_full_when_window_covers_sequence(bidirectional, length):
    # Each query sees its own block and one on each side: with at most 2 blocks that is the whole sequence.
    full = build(bidirectional=bidirectional)
    local = build(bidirectional=bidirectional, attention_window=4)
    inputs = make_inputs(full.config, length=length, pad_last=2)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        a, b = full(**inputs).last_hidden_state, local(**inputs).last_hidden_state
    torch.testing.assert_close(b[real], a[real], rtol=1e-5, atol=1e-5)


def test_local_attention_window_limits_what_a_layer_sees():
    model = build(attention_window=4, num_hidden_layers=1)
    inputs = make_inputs(model.config, length=24)
    changed = {k: v.clone() for k, v in inputs.items()}
    changed["input_ids"][:, 20] = 5  # block 5: visible to blocks 4-5 only, in one layer
    with torch.no_grad():
        before, after = model(**inputs).last_hidden_state, model(**changed).last_hidden_state
    assert torch.allclose(before[:, :16], after[:, :16], atol=1e-6)
    assert not torch.allclose(before[:, 16:20], after[:, 16:20])


def test_local_attention_handles_long_inputs_with_memory_linear_in_length():
    model = build(attention_window=64, num_hidden_layers=1)
    inputs = make_inputs(model.config, batch=1, length=2048 + 17, pad_last=30)
    with torch.no_grad():
        out = model(**inputs).last_hidden_state
    assert out.shape == (1, 2065, 32) and torch.isfinite(out).all()


def test_rotary_scores_depend_only_on_relative_position():
    model = build(num_hidden_layers=1)
    rotary = model.rotary_emb
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=generator), torch.randn(1, 1, 1, 8, generator=generator)
    x = torch.zeros(1, 1, 8)

    def score(i: int, j: int) -> torch.Tensor:
        cos_i, sin_i = rotary(x, torch.tensor([[i]]))
        cos_j, sin_j = rotary(x, torch.tensor([[j]]))
        q_rot, _ = apply_rotary_pos_emb(q, q, cos_i, sin_i)
        k_rot, _ = apply_rotary_pos_emb(k, k, cos_j, sin_j)
        return (q_rot * k_rot).sum()

    torch.testing.assert_close(score(5, 2), score(105, 102), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(score(5, 2), score(5, 3))


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_local_attention_equals_dense_band_mask(bidirectional, attn_implementation):
    # Independent formulation: softmax over all L keys with an explicit (L, L) mask "key block within one block of
    # the query's block, key not padding, and (causal) key not after the query". Padding sits at the start, in the
    # middle and at the end, and L is not a multiple of the window.
    window, length = 4, 23
    model = build(attn_implementation, bidirectional=bidirectional, attention_window=window, num_hidden_layers=1)
    attention = model.layers[0].blocks[0].mixer
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(3, length, model.config.hidden_size, generator=generator)
    padding = torch.ones(3, length, dtype=torch.long)
    padding[0, :3], padding[1, 9:14], padding[2, 18:] = 0, 0, 0
    with torch.no_grad():
        kwargs = model._mixer_kwargs(hidden, padding)
        local = attention(hidden, **kwargs)
        cos, sin = kwargs["position_embeddings"]
        heads, dim = model.config.num_attention_heads, model.config.head_dim

        def project(linear):
            return linear(hidden).view(3, length, heads, dim).transpose(1, 2)

        q, k = apply_rotary_pos_emb(project(attention.q_proj), project(attention.k_proj), cos, sin)
        position = torch.arange(length)
        allowed = ((position[:, None] // window) - (position[None, :] // window)).abs() <= 1
        if not bidirectional:
            allowed = allowed & (position[None, :] <= position[:, None])
        allowed = allowed & padding.bool()[:, None, None, :]  # (B, 1, L, L)
        scores = (q @ k.transpose(2, 3)) * dim**-0.5
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        dense = (weights @ project(attention.v_proj)).transpose(1, 2).reshape(3, length, -1)
        dense = attention.o_proj(dense)
    real = padding.bool()
    torch.testing.assert_close(local[real], dense[real], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(local).all()


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("position_embedding_type", ["rotary", "absolute"])
def test_packed_sequences_equal_the_sequences_run_alone(bidirectional, attn_implementation, position_embedding_type):
    """position_ids that restart inside a row without an attention_mask (transformers' DataCollatorWithFlattening)
    restart the positions and keep each sequence to itself: the packed row equals each sequence run alone."""
    model = build(
        attn_implementation, bidirectional=bidirectional, position_embedding_type=position_embedding_type
    ).eval()
    first, second = torch.randint(3, 20, (1, 5)), torch.randint(3, 20, (1, 7))
    packed = torch.cat([first, second], dim=1)
    position_ids = torch.cat([torch.arange(5), torch.arange(7)]).unsqueeze(0)
    with torch.no_grad():
        out = model(input_ids=packed, position_ids=position_ids).last_hidden_state
        alone = torch.cat([model(input_ids=first).last_hidden_state, model(input_ids=second).last_hidden_state], 1)
        unpacked = model(input_ids=packed).last_hidden_state  # one sequence of 12 positions
    torch.testing.assert_close(out, alone)
    assert (unpacked[:, 5:] - alone[:, 5:]).abs().max() > 1e-3  # the packing is what makes them equal


def test_packed_sequences_are_refused_where_they_would_mix():
    position_ids = torch.cat([torch.arange(6), torch.arange(6)]).unsqueeze(0)
    inputs = torch.randint(3, 20, (1, 12))
    local = build(attention_window=4).eval()
    with pytest.raises(ValueError, match=r"restart inside a row .* block-local attention"):
        local(input_ids=inputs, position_ids=position_ids)
    local(input_ids=inputs, position_ids=torch.arange(12).unsqueeze(0))  # positions that do not restart are fine
    for entry in (e for e in TINY_CONFIGS if e[1] in ("spt_s4", "spt_linformer")):
        model = AutoModel.from_config(make_config(entry, "tokens")).eval()
        with pytest.raises(ValueError, match="restart inside a row"):
            model(input_ids=inputs, position_ids=position_ids)
