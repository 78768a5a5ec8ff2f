"""MEGA, SPADE, Linformer and Performer against independent formulations of their maths.

Oracles: MEGA's EMA as an explicit recurrence in both directions and its gated residual written out; full softmax
attention for Linformer with k = L and identity projections (and the spt_hf Transformer with the same weights), and
fairseq's (E X) Wᵀ + 1 bᵀ written out with random projections and nonzero biases; exact softmax attention and the
masked quadratic form for FAVOR+; for SPADE the released bottom layer written out (its linear S4 branch as an explicit
Toeplitz sum over dense state-matrix powers), spt_hf's S4 layer and block-local attention for the two branches.
Everything is tiny (hidden 32 or less, L <= 150); float64 where the comparison is exact.
"""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import TINY_CONFIGS, make_config, make_inputs
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)

from spt_hf.modeling.blocks import ResidualBlock
from spt_hf.modeling.configuration_rotary_transformer import RotaryTransformerConfig
from spt_hf.modeling.modeling_mega import MegaMixer
from spt_hf.modeling.modeling_performer import (
    causal_favor_attention,
    favor_attention,
    orthogonal_random_features,
    positive_features,
)
from spt_hf.modeling.modeling_rotary_transformer import RotaryTransformerAttention
from spt_hf.modeling.modeling_s4 import S4Mixer

ENTRIES = {
    entry[1]: entry for entry in TINY_CONFIGS if entry[1] in ("spt_mega", "spt_spade", "spt_linformer", "spt_performer")
}
MEGA = {
    "vocab_size": 20,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "ema_projection_size": 4,
    "shared_representation_size": 8,
    "intermediate_size": 24,
    "nffn_hidden_size": 24,
}


def random(*shape, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --------------------------------------------------------------------------------------------------------------
# MEGA
# --------------------------------------------------------------------------------------------------------------


def mega_mixer(seed: int = 0, **overrides) -> MegaMixer:
    torch.manual_seed(seed)
    return MegaMixer(AutoConfig.for_model("spt_mega", **{**MEGA, **overrides}), 0).double().eval()


def ema_recurrence(ema, x: torch.Tensor) -> torch.Tensor:
    """SiLU(Σ_c Σ_n γ s_t / √h + ω x_t) with s_t = p β x_t + (1 - p α) s_{t-1}, run forwards (c = 0) and, for the
    bidirectional EMA, backwards over the sequence (c = 1), one position at a time."""
    p, alpha = torch.sigmoid(ema.delta), torch.sigmoid(ema.alpha)  # (C, D, h)
    total = ema.omega * x  # (B, L, D)
    for channel in range(ema.delta.shape[0]):
        state = torch.zeros(x.shape[0], *p.shape[1:], dtype=x.dtype)  # (B, D, h)
        order = range(x.shape[1]) if channel == 0 else reversed(range(x.shape[1]))
        outputs = {}
        for t in order:
            state = p[channel] * ema.beta[channel] * x[:, t, :, None] + (1 - p[channel] * alpha[channel]) * state
            outputs[t] = (state * ema.gamma[channel]).sum(-1) / math.sqrt(p.shape[-1])
        total = total + torch.stack([outputs[t] for t in range(x.shape[1])], 1)
    return torch.nn.functional.silu(total)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_mega_ema_by_fft_convolution_equals_its_recurrence(bidirectional):
    ema = mega_mixer(bidirectional=bidirectional).ema
    x = random(2, 37, 16)
    with torch.no_grad():
        torch.testing.assert_close(ema(x), ema_recurrence(ema, x), rtol=0, atol=1e-10)
        if not bidirectional:  # the recurrent step used for generation is the same recurrence
            state, steps = torch.zeros(2, 16, 4, dtype=torch.float64), []
            for t in range(x.shape[1]):
                y, state = ema.step(x[:, t], state)
                steps.append(y)
            torch.testing.assert_close(torch.stack(steps, 1), ema(x), rtol=0, atol=1e-10)


def mega_attention_oracle(mixer, q, k, v, mask, chunk: int) -> torch.Tensor:
    """MEGA's attention over all L positions with an explicit (L, L) mask (same chunk, real key, causal: not later)
    and the bias b[j - i] read from the table by offset; laplace with the official constants 0.707107, 0.282095."""
    length = q.shape[1]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    visible = (i // chunk == j // chunk) & mask[:, None, :]  # (B, L, L)
    if not mixer.config.bidirectional:
        visible = visible & (j <= i)
    center = (mixer.rel_pos_bias.shape[0] - 1) // 2  # offsets -center..center (the chunk's, with chunking)
    bias = mixer.rel_pos_bias[(j - i).clamp(-center, center) + center]  # (L, L); clamped ones are invisible
    activation = mixer.config.attention_activation
    if activation == "softmax":
        scores = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1]) + bias
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1)
    else:
        scores = (q @ k.transpose(1, 2)) / visible.sum(-1, keepdim=True) + bias
        if activation == "laplace":
            weights = 0.5 * (1 + torch.erf((scores - 0.707107) / (0.282095 * math.sqrt(2))))
        else:
            weights = torch.relu(scores) ** 2
        weights = weights * visible
    return weights @ v


@pytest.mark.parametrize("chunk", [-1, 4])
@pytest.mark.parametrize("activation", ["softmax", "laplace", "relu2"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_mega_attention_equals_its_dense_formula(bidirectional, activation, chunk):
    mixer = mega_mixer(bidirectional=bidirectional, attention_activation=activation, chunk_size=chunk)
    q, k, v = random(2, 11, 8, seed=1), random(2, 11, 8, seed=2), random(2, 11, 24, seed=3)
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, 9:] = False
    with torch.no_grad():
        out = mixer.attention(q, k, v, mask)[0]
        expected = mega_attention_oracle(mixer, q, k, v, mask, chunk if chunk > 0 else 11)
    # the official laplace constants are rounded to 6 digits
    torch.testing.assert_close(out[mask], expected[mask], rtol=0, atol=1e-12 if activation != "laplace" else 1e-5)


@pytest.mark.parametrize("activation", ["softmax", "laplace", "relu2"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_mega_chunked_attention_with_a_chunk_covering_the_input_equals_unchunked(activation, bidirectional):
    common = {"bidirectional": bidirectional, "attention_activation": activation}
    unchunked = mega_mixer(max_position_embeddings=24, **common)  # relative bias over the same 24 offsets
    chunked = mega_mixer(seed=1, chunk_size=24, **common)
    chunked.load_state_dict(unchunked.state_dict())
    small = mega_mixer(seed=1, chunk_size=5, **common)
    small.load_state_dict({k: v for k, v in chunked.state_dict().items() if k != "rel_pos_bias"}, strict=False)
    x, mask = random(3, 19, 16), torch.ones(3, 19, dtype=torch.bool)
    mask[1, 15:] = False
    x = x * mask.unsqueeze(-1)
    with torch.no_grad():
        reference = unchunked(x, attention_mask=mask)
        torch.testing.assert_close(chunked(x, attention_mask=mask)[mask], reference[mask], rtol=0, atol=1e-12)
        assert not torch.allclose(small(x, attention_mask=mask)[mask], reference[mask], atol=1e-4)


def mega_outputs_and_gradients(mixer, x: torch.Tensor, mask: torch.Tensor, seed: int = 5):
    """The mixer's output on x in training mode, the gradient of a fixed projection of it with respect to x, and
    every parameter's gradient."""
    mixer.train()
    inputs = x.clone().requires_grad_()
    torch.manual_seed(seed)  # the same dropout draws on every call
    out = mixer(inputs, attention_mask=mask)
    (out[mask] * random(*out[mask].shape, seed=7)).sum().backward()
    grads = {name: p.grad.clone() for name, p in mixer.named_parameters()}
    mixer.zero_grad(set_to_none=True)
    return out, inputs.grad, grads


def assert_same_outputs_and_gradients(result, expected) -> None:
    for got, want in zip(result[:2], expected[:2]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for name, value in expected[2].items():
        torch.testing.assert_close(result[2][name], value, rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("chunk", [None, 9])
@pytest.mark.parametrize("activation", ["softmax", "laplace"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_mega_attention_by_query_blocks_gives_the_same_outputs_and_gradients(
    bidirectional, activation, chunk, monkeypatch
):
    """Queries taken 4 at a time, each block recomputed in the backward pass: the outputs and every gradient equal
    all queries at once. With attention dropout each block draws its own mask, and its recomputation in the backward
    pass draws it again: the gradients equal those of the same blocks kept whole by autograd."""
    from spt_hf.modeling import modeling_mega

    common = {"bidirectional": bidirectional, "attention_activation": activation, "chunk_size": chunk}
    common["max_position_embeddings"] = 24
    whole, blocked = mega_mixer(**common), mega_mixer(attention_query_block_size=4, **common)
    blocked.load_state_dict(whole.state_dict())
    x, mask = random(3, 19, 16), torch.ones(3, 19, dtype=torch.bool)
    mask[1, 15:] = False
    x = x * mask.unsqueeze(-1)
    expected = mega_outputs_and_gradients(whole, x, mask)
    assert expected[2]["rel_pos_bias"].abs().sum() > 0
    assert_same_outputs_and_gradients(mega_outputs_and_gradients(blocked, x, mask), expected)

    blocked.attention_dropout.p = 0.2
    recomputed = mega_outputs_and_gradients(blocked, x, mask)
    monkeypatch.setattr(modeling_mega, "checkpoint", lambda function, *args, **kwargs: function(*args))
    assert_same_outputs_and_gradients(recomputed, mega_outputs_and_gradients(blocked, x, mask))
    assert not torch.allclose(recomputed[0], expected[0])  # the dropout did drop


def test_mega_attention_by_query_blocks_keeps_no_full_score_matrix():
    """What autograd keeps for the backward pass no longer grows with the square of the length."""
    from spt_hf.cost.measure import SavedActivations

    def saved(mixer, length: int) -> float:
        x = random(1, length, 16)
        with SavedActivations(mixer) as recorder:
            out = mixer(x)  # alive: its graph holds what was saved
            saved_bytes = recorder.snapshot()
        del out
        return saved_bytes

    common = {"max_position_embeddings": 512, "attention_activation": "laplace"}
    whole, blocked = mega_mixer(**common).train(), mega_mixer(attention_query_block_size=32, **common).train()
    assert saved(whole, 512) > 2.5 * saved(whole, 256)  # (L, L) scores, weights, ...
    assert saved(blocked, 512) < 2.2 * saved(blocked, 256)  # linear in L
    assert saved(blocked, 512) < saved(whole, 512) / 4


def test_mega_chunks_attend_only_within_themselves_and_softmax_rows_sum_to_one():
    mixer = mega_mixer(chunk_size=4)
    q, k, v = random(2, 10, 8, seed=1), random(2, 10, 8, seed=2), random(2, 10, 24, seed=3)
    changed_k, changed_v = k.clone(), v.clone()
    changed_k[:, 5], changed_v[:, 6] = 1.0, -1.0  # keys and values of chunk 1 (positions 4-7)
    with torch.no_grad():
        before, after = mixer.attention(q, k, v, None)[0], mixer.attention(q, changed_k, changed_v, None)[0]
        _, weights = mixer(random(2, 10, 16), output_attentions=True)  # (B, 1, L, L)
    assert torch.equal(before[:, :4], after[:, :4]) and torch.equal(before[:, 8:], after[:, 8:])
    assert not torch.allclose(before[:, 4:8], after[:, 4:8])
    chunks = torch.arange(10) // 4
    assert weights.shape == (2, 1, 10, 10)
    assert not weights[..., chunks[:, None] != chunks[None, :]].any()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1, 10, dtype=torch.float64))


@pytest.mark.parametrize("prenorm", [True, False])
def test_mega_block_is_the_papers_gated_residual(prenorm):
    """Block output = x + u ⊙ (H - x) (post-norm: its norm), with x the un-normalised block input, u and H written
    out from the mixer's parts: Mega's `addcmul(residual, u, h - residual)`."""
    torch.manual_seed(0)
    config = AutoConfig.for_model("spt_mega", **MEGA, prenorm=prenorm)
    block = ResidualBlock(config, MegaMixer(config, 0)).double().eval()
    x = 3.0 * random(2, 11, 16) + 1.0  # far from normalised, so X = Norm(x) and x differ
    mixer = block.mixer
    with torch.no_grad():
        inner = block.norm(x) if prenorm else x  # X
        u, z, r, hx = mixer._project(mixer.ema(inner))
        q, k = mixer._queries_keys(z)
        mixed, _ = mixer.attention(q, k, torch.nn.functional.silu(mixer.v_proj(inner)), None)
        h = torch.nn.functional.silu(hx + mixer.h_proj(mixed * r))
        expected = x + u * (h - x)
        expected = expected if prenorm else block.norm(expected)
        torch.testing.assert_close(block(x)[0], expected, rtol=0, atol=1e-12)


def test_mega_refuses_inputs_longer_than_its_relative_positions_without_chunking():
    model = AutoModel.from_config(AutoConfig.for_model("spt_mega", **MEGA, max_position_embeddings=16))
    with pytest.raises(ValueError, match=r"length 17 exceeds `max_position_embeddings`=16.*set `chunk_size`"):
        model(input_ids=torch.randint(4, 20, (1, 17)))
    chunked = AutoModel.from_config(AutoConfig.for_model("spt_mega", **MEGA, max_position_embeddings=16, chunk_size=8))
    assert chunked(input_ids=torch.randint(4, 20, (1, 40))).last_hidden_state.shape == (1, 40, 16)


def test_mega_reads_the_old_chunk_size_minus_one_as_none(tmp_path):
    """ "No chunking" is `chunk_size=None`; configs saved with MEGA's -1 and recipes that say -1 load as None and give
    the same outputs, in full and in recurrent generation."""
    from spt_hf.recipes.loading import RECIPES_DIR
    from spt_hf.training import load_recipe

    assert AutoConfig.for_model("spt_mega", **MEGA).chunk_size is None
    assert AutoConfig.for_model("spt_mega", **MEGA, chunk_size=-1).chunk_size is None
    assert AutoConfig.for_model("spt_mega", **MEGA, chunk_size=8).chunk_size == 8
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("spt_mega", **MEGA, bidirectional=False)).eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["chunk_size"] is None
    (tmp_path / "config.json").write_text(json.dumps({**saved, "chunk_size": -1}))  # as configs saved before
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.chunk_size is None
    ids = torch.randint(4, 20, (2, 12))
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=0)
    greedy = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(loaded.generate(ids[:1, :4], **greedy), model.generate(ids[:1, :4], **greedy))
    recipe = load_recipe(RECIPES_DIR / "cpu" / "digits-mega-spt.yaml")
    assert recipe.to_dict()["model_config"]["chunk_size"] == -1  # the recipe (and so its fingerprint) is unchanged
    # what pipeline.model_config builds from it (with the task's vocabulary)
    assert AutoConfig.for_model("spt_mega", vocab_size=20, **recipe.model_config).chunk_size is None


# --------------------------------------------------------------------------------------------------------------
# Linformer
# --------------------------------------------------------------------------------------------------------------


def linformer(sharing: str, length: int, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = AutoConfig.for_model(
        "spt_linformer",
        vocab_size=20,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        projected_length=length,
        max_position_embeddings=length,
        projection_sharing=sharing,
        **overrides,
    )
    return AutoModel.from_config(config).double().eval()


def set_identity_projections(model) -> None:
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("projection"):  # (k, n) or (nh, k, n) with k = n
                parameter.copy_(torch.eye(parameter.shape[-1], dtype=parameter.dtype).expand_as(parameter))


@pytest.mark.parametrize("sharing", ["none", "headwise", "key-value", "layerwise"])
def test_linformer_with_k_equal_to_length_and_identity_projections_is_full_softmax_attention(sharing):
    model = linformer(sharing, length=12)
    set_identity_projections(model)
    attention = model.layers[0].blocks[0].mixer
    hidden = random(2, 12, 32)
    with torch.no_grad():
        out = attention(hidden, **model._mixer_kwargs(hidden, None))
        cos, sin = model.rotary_emb(hidden, torch.arange(12).unsqueeze(0))

        def heads(linear):
            return linear(hidden).view(2, 12, 4, 8).transpose(1, 2)  # (B, nh, L, d)

        q, k = heads(attention.q_proj), heads(attention.k_proj)
        q, k = q * cos.unsqueeze(1) + rotate(q) * sin.unsqueeze(1), k * cos.unsqueeze(1) + rotate(k) * sin.unsqueeze(1)
        weights = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(8), dim=-1)  # (B, nh, L, L)
        dense = attention.o_proj((weights @ heads(attention.v_proj)).transpose(1, 2).reshape(2, 12, 32))
    torch.testing.assert_close(out, dense, rtol=0, atol=1e-12)


def rotate(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation of pairs (i, i + d/2), written out: (x1, x2) -> (-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def test_linformer_with_identity_projections_equals_the_spt_hf_transformer_with_the_same_weights():
    model = linformer("key-value", length=12, position_embedding_type="absolute")
    set_identity_projections(model)
    with torch.no_grad():  # nonzero biases: with E = I (rows summing to 1) both bias orders are the Transformer's
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.copy_(random(*parameter.shape, seed=len(name)))
    transformer_config = RotaryTransformerConfig(
        **{
            k: v
            for k, v in model.config.to_dict().items()
            if k
            in (
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "position_embedding_type",
            )
        }
    )
    transformer = AutoModel.from_config(transformer_config, attn_implementation="eager").double().eval()
    missing, unexpected = transformer.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(name.endswith("projection") for name in unexpected)
    ids = torch.randint(4, 20, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).last_hidden_state, transformer(input_ids=ids).last_hidden_state)


@pytest.mark.parametrize(
    "sharing, per_layer, shared", [("none", 2 * 4, 0), ("headwise", 2, 0), ("key-value", 1, 0), ("layerwise", 0, 1)]
)
def test_linformer_projection_sharing_follows_the_paper(sharing, per_layer, shared):
    model = linformer(sharing, length=16, seed=0)
    matrices = sum(p.numel() for n, p in model.named_parameters() if n.endswith("projection"))
    assert matrices == (2 * per_layer + shared) * 16 * 16  # (k, n) matrices: 2 layers of `per_layer`, + shared
    if sharing == "layerwise":  # one matrix reaches every layer: changing it changes the first layer's output
        hidden = random(1, 16, 32)
        with torch.no_grad():
            before = model.layers[0].blocks[0].mixer(hidden, **model._mixer_kwargs(hidden, None))
            model.shared_projection.mul_(2.0)
            after = model.layers[0].blocks[0].mixer(hidden, **model._mixer_kwargs(hidden, None))
        assert not torch.allclose(before, after)


def linformer_with_biases(sharing: str, length: int, projected: int, **overrides):
    """A Linformer whose biases are nonzero (they are zero at initialisation) and projections random (k < n)."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "spt_linformer",
        vocab_size=20,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        projected_length=projected,
        max_position_embeddings=length + 4,  # an input of length L uses the first L columns
        projection_sharing=sharing,
        **overrides,
    )
    model = AutoModel.from_config(config).double().eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.copy_(random(*parameter.shape, seed=len(name)))
    return model


def linformer_oracle(model, hidden: torch.Tensor, mask: torch.Tensor, bias_after: bool) -> torch.Tensor:
    """Linformer attention written out on (B, L, H), padded rows of X zeroed. Bias after the projection (fairseq's
    order): K'_i = E_i R(X W_kᵀ)_i + 1 b_kᵀ, V'_i = F_i (X W_vᵀ)_i + 1 b_vᵀ, i.e. (E X) W_kᵀ + 1 b_kᵀ without
    rotary positions R; before it: K'_i = E_i R(X W_kᵀ + 1 b_kᵀ)_i with padded rows zeroed after the bias."""
    attention = model.layers[0].blocks[0].mixer
    batch, length, _ = hidden.shape
    E, F_ = (p[..., :length] for p in attention.projections(getattr(model, "shared_projection", None)))
    real = mask[:, None, :, None].double()  # (B, 1, L, 1)
    x = hidden * mask.unsqueeze(-1)

    def heads(t):  # (B, L, H) -> (B, nh, L, d)
        return t.view(batch, length, 4, 8).transpose(1, 2)

    def biases(linear):  # (nh, 1, d)
        return linear.bias.view(4, 1, 8)

    q = heads(x @ attention.q_proj.weight.T + attention.q_proj.bias)
    k, v = heads(x @ attention.k_proj.weight.T), heads(x @ attention.v_proj.weight.T)
    if not bias_after:
        k, v = k + biases(attention.k_proj), v + biases(attention.v_proj)
    if model.config.position_embedding_type == "rotary":
        cos, sin = (t.unsqueeze(1) for t in model.rotary_emb(hidden, torch.arange(length).unsqueeze(0)))
        q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
    k, v = E @ (k * real), F_ @ (v * real)  # (B, nh, k, d)
    if bias_after:
        k, v = k + biases(attention.k_proj), v + biases(attention.v_proj)
    weights = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(8), dim=-1)  # (B, nh, L, k)
    out = (weights @ v).transpose(1, 2).reshape(batch, length, 32)
    return out @ attention.o_proj.weight.T + attention.o_proj.bias


@pytest.mark.parametrize("sharing", ["none", "headwise", "key-value", "layerwise"])
@pytest.mark.parametrize("positions", ["absolute", "rotary"])
@pytest.mark.parametrize("bias_after", [True, False])
def test_linformer_key_value_biases_follow_fairseq_after_the_projection(sharing, positions, bias_after):
    model = linformer_with_biases(
        sharing, length=12, projected=5, position_embedding_type=positions, bias_after_projection=bias_after
    )
    attention = model.layers[0].blocks[0].mixer
    hidden, mask = random(2, 12, 32, seed=4), torch.ones(2, 12, dtype=torch.bool)
    mask[1, 9:] = False
    with torch.no_grad():
        out = attention(hidden * mask.unsqueeze(-1), attention_mask=mask, **model._mixer_kwargs(hidden, mask))
        expected = linformer_oracle(model, hidden, mask, bias_after)
        other = linformer_oracle(model, hidden, mask, not bias_after)
    torch.testing.assert_close(out[mask], expected[mask], rtol=0, atol=1e-12)
    assert (out[mask] - other[mask]).abs().max() > 1e-3  # the two orders differ by (E 1 - 1) bᵀ: the test can fail


def test_linformer_refuses_a_causal_form_and_inputs_beyond_its_fixed_length():
    entry = ENTRIES["spt_linformer"]
    with pytest.raises(ValueError, match=r"`bidirectional=False` is not possible for spt_linformer.*no causal form"):
        make_config(entry, bidirectional=False)
    with pytest.raises(ValueError, match="spt_linformer has no causal form, so it has no causal LM head"):
        AutoModelForCausalLM.from_config(make_config(entry))
    model = AutoModelForSequenceClassification.from_config(make_config(entry))
    with pytest.raises(ValueError, match=r"fixed maximum length `max_position_embeddings`=32.*length 33"):
        model(input_ids=torch.randint(4, 20, (1, 33)))
    with pytest.raises(ValueError, match="`projected_length`=64 must be at most `max_position_embeddings`=32"):
        make_config(entry, projected_length=64)


# --------------------------------------------------------------------------------------------------------------
# Performer
# --------------------------------------------------------------------------------------------------------------


def exact_attention(q, k, v) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v  # (B, nh, L, d)


def favor(q, k, v, features: int, seed: int) -> torch.Tensor:
    projection = orthogonal_random_features(features, q.shape[-1], seed)
    return favor_attention(positive_features(q, projection, True), positive_features(k, projection, False), v)


def test_favor_estimate_approaches_softmax_attention_as_features_grow():
    # Logits q·k/√d of moderate size (as after a norm): the variance of positive features grows as exp(|q + k|²).
    q, k, v = random(1, 2, 48, 16, seed=1) * 0.4, random(1, 2, 48, 16, seed=2) * 0.4, random(1, 2, 48, 16, seed=3)
    exact = exact_attention(q, k, v)

    def error(features: int) -> float:  # relative error, averaged over feature draws
        return sum((favor(q, k, v, features, seed) - exact).norm() / exact.norm() for seed in range(6)).item() / 6

    small, large = error(64), error(1024)
    print(f"FAVOR+ relative error: {small:.4f} at 64 features, {large:.4f} at 1024 ({small / large:.1f}x)")
    assert large * 3 <= small and large < 0.1


def test_causal_favor_prefix_sums_equal_the_masked_quadratic_form():
    q, k, v = random(2, 3, 150, 8, seed=4), random(2, 3, 150, 8, seed=5), random(2, 3, 150, 8, seed=6)
    projection = orthogonal_random_features(32, 8, seed=0)
    q_features, k_features = positive_features(q, projection, True), positive_features(k, projection, False)
    quadratic = (q_features @ k_features.transpose(-1, -2)).tril()  # (B, nh, L, L) over the same features
    expected = (quadratic @ v) / quadratic.sum(-1, keepdim=True)
    torch.testing.assert_close(causal_favor_attention(q_features, k_features, v), expected, rtol=0, atol=1e-12)


def test_orthogonal_random_features_are_orthogonal_within_blocks_and_reproducible():
    features = orthogonal_random_features(40, 16, seed=7)  # blocks of 16, 16 and 8 rows
    for block in (features[:16], features[16:32], features[32:]):
        gram = block @ block.T
        torch.testing.assert_close(gram - torch.diag(gram.diagonal()), torch.zeros_like(gram), rtol=0, atol=1e-10)
    assert torch.equal(features, orthogonal_random_features(40, 16, seed=7))
    assert not torch.equal(features, orthogonal_random_features(40, 16, seed=8))


def test_performer_is_deterministic_in_eval_redraws_in_training_and_reloads_its_features(tmp_path):
    torch.manual_seed(0)
    config = make_config(ENTRIES["spt_performer"], feature_redraw_interval=3)
    model = AutoModelForSequenceClassification.from_config(config)
    inputs = make_inputs(model.config, pad_last=2)
    first = [attention.projection.clone() for attention in model.model.attention_layers()]
    assert not torch.equal(first[0], first[1])  # every layer has its own seed
    with torch.no_grad():
        model.eval()
        assert torch.equal(model(**inputs).logits, model(**inputs).logits)
        model.train()
        for _ in range(3):  # 3 passes on the first features, the 4th starts with new ones
            model(**inputs)
        assert torch.equal(model.model.layers[0].blocks[0].mixer.projection, first[0])
        model(**inputs)
    drawn = model.model.layers[0].blocks[0].mixer.projection
    assert not torch.equal(drawn, first[0]) and int(model.model.feature_draws) == 1
    model.eval().save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded.model.layers[0].blocks[0].mixer.projection, drawn)
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, model(**inputs).logits)
    torch.manual_seed(0)
    twin = AutoModelForSequenceClassification.from_config(config)
    twin.model.redraw_features()  # draws are a function of the seed and the count: the same features again
    assert torch.equal(twin.model.layers[0].blocks[0].mixer.projection, drawn)


# --------------------------------------------------------------------------------------------------------------
# SPADE
# --------------------------------------------------------------------------------------------------------------


def spade_branches(bidirectional: bool, **overrides):
    torch.manual_seed(0)
    config = make_config(ENTRIES["spt_spade"], bidirectional=bidirectional, **overrides)
    model = AutoModel.from_config(config).double().eval()
    config = model.config
    s4 = S4Mixer(config.s4_config(), 0).double().eval()
    local_config = RotaryTransformerConfig(
        **{
            name: getattr(config, name)
            for name in ("vocab_size", "hidden_size", "num_attention_heads", "attention_window", "bidirectional")
        }
    )
    local_config._attn_implementation = config._attn_implementation  # the same mask format as the model's
    local = RotaryTransformerAttention(local_config, 0).double().eval()
    hidden, mask = random(2, 13, 32), torch.ones(2, 13, dtype=torch.bool)
    mask[1, 10:] = False
    with torch.no_grad():  # nonzero biases and norm affines: none of them may vanish from a comparison
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(random(*parameter.shape, seed=len(name)) * 0.3)
    return model, s4, local, hidden * mask.unsqueeze(-1), mask


def concat(mixer, global_part, local_part) -> torch.Tensor:
    """SPADE's combination written out: W [LN_global(S4 output), LN_local(attention output)] + b."""
    features = torch.cat([mixer.norm_global(global_part), mixer.norm_local(local_part)], dim=-1)  # (B, L, 2H)
    return features @ mixer.aggregate.weight.T + mixer.aggregate.bias


def layer_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """LayerNorm written out: (x - mean) / √(var + eps) ⊙ w + b, biased variance over the features."""
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + norm.eps) * norm.weight + norm.bias


def s4_kernel_by_powers(branch, length: int) -> torch.Tensor:
    """K_l = C Ā^l B̄ (C, H, L) of spt_hf's NPLR parameters, by powers of the dense bilinear Ā = (I - Δ/2 A)⁻¹ (I +
    Δ/2 A), A = Λ - P P*, both members of every conjugate pair, C from the stored C̃ = C (I - Ā^{L_max})."""
    kernel = branch.kernel

    def pairs(x):  # (n_ssm, N/2) -> (H, N)
        x = x.repeat(branch.config.hidden_size // x.shape[0], 1)
        return torch.cat([x, x.conj()], -1)

    lam = pairs(torch.complex(-kernel.log_lambda_real.exp(), kernel.lambda_imag))
    P, B = pairs(torch.view_as_complex(kernel.P)), pairs(torch.view_as_complex(kernel.B))
    A = torch.diag_embed(lam) - P[..., :, None] * P.conj()[..., None, :]  # (H, N, N)
    dt, eye = kernel.log_dt.exp()[:, None, None], torch.eye(A.shape[-1], dtype=A.dtype)
    transition = torch.linalg.solve(eye - dt / 2 * A, eye + dt / 2 * A)
    state = torch.linalg.solve(eye - dt / 2 * A, dt * B[..., None])[..., 0]  # B̄ (H, N)
    c_tilde = torch.view_as_complex(kernel.C)
    c_tilde = torch.cat([c_tilde, c_tilde.conj()], -1)  # (C, H, N)
    C = torch.linalg.solve((eye - torch.linalg.matrix_power(transition, kernel.max_length)).mT, c_tilde[..., None])
    taps = []
    for _ in range(length):
        taps.append((C[..., 0] * state).sum(-1).real)
        state = (transition @ state[..., None])[..., 0]
    return torch.stack(taps, -1)  # (C, H, L)


def released_spade_branch(branch, u: torch.Tensor) -> torch.Tensor:
    """Released SPADE's S4 (`use_pointwise` off) on (B, L, H): y_t = Σ_s K[t - s] u_s + D ⊙ u_t as an explicit sum,
    lags t - s >= 0 from the first kernel, and (bidirectional) lag -j from the second kernel's tap j - 1."""
    length = u.shape[1]
    kernel = s4_kernel_by_powers(branch, length)  # (C, H, L)
    t, s = torch.arange(length)[:, None], torch.arange(length)[None, :]
    toeplitz = torch.where(t >= s, kernel[0][:, (t - s).clamp(min=0)], 0.0)  # (H, L, L)
    if kernel.shape[0] == 2:
        toeplitz = toeplitz + torch.where(s > t, kernel[1][:, (s - t - 1).clamp(min=0)], 0.0)
    return torch.einsum("hts,bsh->bth", toeplitz, u) + branch.D * u


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("pointwise", [False, True])
def test_spade_bottom_layer_equals_the_released_layer_written_out(bidirectional, pointwise):
    """The whole bottom layer in float64: x + W [LN_g(S(X)), LN_l(LocalAttention(X))] + b with X = LN(x) zeroed at
    padding, then the GELU feed-forward block; S is released SPADE's linear S4 K * X + D ⊙ X (default) or, with
    `s4_pointwise=True`, the S4 layer GLU(Linear(GELU(K * X + D ⊙ X)))."""
    model, _, local, hidden, mask = spade_branches(bidirectional, s4_pointwise=pointwise)
    layer = model.layers[0]
    attention_block, ffn_block = layer.blocks
    mixer = attention_block.mixer
    assert hasattr(mixer.ssm, "output_linear") == pointwise  # the released branch has no output layer
    kwargs = model._mixer_kwargs(hidden, mask)
    real = mask.unsqueeze(-1).double()
    with torch.no_grad():
        x = layer_norm(hidden, attention_block.norm.norm) * real  # the mixer input, padding zeroed as SPADE does
        global_part = released_spade_branch(mixer.ssm, x)
        if pointwise:
            projected = F.gelu(global_part) @ mixer.ssm.output_linear.weight.T + mixer.ssm.output_linear.bias
            global_part = projected[..., :32] * torch.sigmoid(projected[..., 32:])  # GLU
        local.load_state_dict(mixer.attention.state_dict())
        local_part = local(x, attention_mask=mask, **kwargs)
        combined = torch.cat([layer_norm(global_part, mixer.norm_global), layer_norm(local_part, mixer.norm_local)], -1)
        h = hidden + combined @ mixer.aggregate.weight.T + mixer.aggregate.bias
        ffn = ffn_block.mixer
        y = layer_norm(h, ffn_block.norm.norm) * real
        expected = h + F.gelu(y @ ffn.fc_in.weight.T + ffn.fc_in.bias) @ ffn.fc_out.weight.T + ffn.fc_out.bias
        out, _ = layer(hidden, mask, **kwargs)
    torch.testing.assert_close(out[mask], expected[mask], rtol=0, atol=1e-12)


def test_spade_s4_pointwise_adds_the_s4_layers_output_block():
    counts = {}
    for pointwise in (False, True):
        model = AutoModel.from_config(make_config(ENTRIES["spt_spade"], s4_pointwise=pointwise))
        counts[pointwise] = sum(p.numel() for p in model.parameters())
    assert counts[True] - counts[False] == 2 * 32 * 32 + 2 * 32  # Linear(H, 2H): 2H² + 2H


@pytest.mark.parametrize("bidirectional", [True, False])
def test_spade_bottom_layer_with_the_attention_zeroed_is_spt_hfs_s4_layer(bidirectional):
    model, s4, _, hidden, mask = spade_branches(bidirectional, s4_pointwise=True)
    mixer = model.layers[0].blocks[0].mixer
    assert isinstance(mixer.ssm, S4Mixer)  # the S4 layer itself, imported
    s4.load_state_dict(mixer.ssm.state_dict())
    with torch.no_grad():
        mixer.attention.o_proj.weight.zero_()
        mixer.attention.o_proj.bias.zero_()
        out = mixer(hidden, **model._mixer_kwargs(hidden, mask))
        expected = concat(mixer, s4(hidden), torch.zeros_like(hidden))
    torch.testing.assert_close(out[mask], expected[mask], rtol=0, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_spade_bottom_layer_with_the_s4_zeroed_is_local_attention_and_upper_layers_are_local_attention(bidirectional):
    model, _, local, hidden, mask = spade_branches(bidirectional)
    bottom, upper = model.layers[0].blocks[0].mixer, model.layers[1].blocks[0].mixer
    assert not hasattr(upper, "ssm")
    kwargs = model._mixer_kwargs(hidden, mask)
    with torch.no_grad():
        bottom.ssm.kernel.C.zero_()  # K = 0 and D = 0: the linear S4 branch outputs zeros
        bottom.ssm.D.zero_()
        local.load_state_dict(bottom.attention.state_dict())
        expected = concat(bottom, torch.zeros_like(hidden), local(hidden, attention_mask=mask, **kwargs))
        torch.testing.assert_close(bottom(hidden, **kwargs)[mask], expected[mask], rtol=0, atol=1e-12)
        local.load_state_dict(upper.attention.state_dict())
        torch.testing.assert_close(
            upper(hidden, **kwargs)[mask], local(hidden, attention_mask=mask, **kwargs)[mask], rtol=0, atol=1e-12
        )


# --------------------------------------------------------------------------------------------------------------
# All four
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", list(ENTRIES))
def test_attention_weights_are_returned_and_are_distributions(model_type):
    overrides = {"attention_activation": "softmax"} if model_type == "spt_mega" else {}  # rows are distributions
    model = AutoModel.from_config(make_config(ENTRIES[model_type], **overrides), attn_implementation="eager").eval()
    inputs = make_inputs(model.config, pad_last=3)
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
        plain = model(**inputs)
    real = inputs["attention_mask"].bool()
    keys = model.config.projected_length if model_type == "spt_linformer" else real.shape[1]
    assert len(outputs.attentions) == 2
    for weights in outputs.attentions:
        assert weights.shape[0] == 3 and weights.shape[2:] == (real.shape[1], keys)
        rows = weights.sum(-1).permute(0, 2, 1)[real]  # (real queries, heads)
        torch.testing.assert_close(rows, torch.ones_like(rows), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outputs.last_hidden_state, plain.last_hidden_state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "model_type, field, saved_value",
    [("spt_spade", "s4_pointwise", True), ("spt_linformer", "bias_after_projection", False)],
)
def test_checkpoints_saved_before_a_fidelity_field_existed_load_with_their_old_arithmetic(
    tmp_path, model_type, field, saved_value
):
    """New configs get the released form; a config.json written before the field existed (the field absent) loads
    with the form it was trained with, through every loading path, and gives the same outputs."""
    entry = ENTRIES[model_type]
    assert getattr(make_config(entry), field) == (not saved_value)  # the new default
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(make_config(entry, **{field: saved_value})).eval()
    with torch.no_grad():  # nonzero biases, so that Linformer's two bias orders differ
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.add_(random(*parameter.shape, seed=len(name), dtype=parameter.dtype))
    model.save_pretrained(tmp_path / "old")
    config_file = tmp_path / "old" / "config.json"
    saved = json.loads(config_file.read_text())
    assert saved[field] == saved_value  # saved explicitly, even where it equals a default
    del saved[field]  # as written before the field existed
    config_file.write_text(json.dumps(saved))
    inputs = make_inputs(model.config, pad_last=3)
    with torch.no_grad():
        reference = model(**inputs).logits
    loaded, info = AutoModelForMaskedLM.from_pretrained(tmp_path / "old", output_loading_info=True)
    assert getattr(loaded.config, field) == saved_value
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(**inputs).logits, reference, rtol=0, atol=0)
    config_class = type(model.config)
    assert getattr(AutoConfig.from_pretrained(tmp_path / "old"), field) == saved_value
    assert getattr(config_class.from_pretrained(tmp_path / "old"), field) == saved_value
    assert getattr(config_class.from_json_file(config_file), field) == saved_value
    assert getattr(config_class.from_pretrained(tmp_path / "old", **{field: not saved_value}), field) != saved_value
    # A dict that was not saved by transformers (a recipe, a hand-written dict) gets the new default...
    assert getattr(config_class.from_dict({k: saved[k] for k in ("vocab_size", "hidden_size")}), field) != saved_value
    # ...and a new model saves the new form, which reloads as it is.
    fresh = AutoModelForMaskedLM.from_config(make_config(entry))
    fresh.save_pretrained(tmp_path / "new")
    assert getattr(AutoConfig.from_pretrained(tmp_path / "new"), field) == (not saved_value)
    with torch.no_grad():  # the two forms compute different things on the same weights where both have them
        other = AutoModelForMaskedLM.from_config(make_config(entry)).eval()
        other.load_state_dict(model.state_dict(), strict=False)
        assert (other(**inputs).logits - reference).abs().max() > 1e-3


@pytest.mark.parametrize(
    "model_type, field, saved_value",
    [("spt_spade", "s4_pointwise", True), ("spt_linformer", "bias_after_projection", False)],
)
def test_resuming_a_phase_from_a_checkpoint_of_the_old_form_is_refused_naming_the_field(
    tmp_path, model_type, field, saved_value
):
    from spt_hf.training.pipeline import _check_resumed_form

    entry = ENTRIES[model_type]
    AutoModelForMaskedLM.from_config(make_config(entry, **{field: saved_value})).save_pretrained(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    del saved[field]  # a checkpoint written before the field existed
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(saved))
    new_form = AutoModelForMaskedLM.from_config(make_config(entry))
    value = str(saved_value).lower()
    with pytest.raises(ValueError, match=rf"saved with `{field}: {value}`.*add `{field}: {value}` to the recipe"):
        _check_resumed_form(new_form, str(tmp_path / "ckpt"))
    _check_resumed_form(AutoModelForMaskedLM.from_config(make_config(entry, **{field: saved_value})), tmp_path / "ckpt")


@pytest.mark.parametrize(
    "model_type, overrides, message",
    [
        ("spt_mega", {"chunk_size": 0}, "`chunk_size` must be None .* or a positive integer"),
        ("spt_mega", {"attention_activation": "gelu"}, "`attention_activation`='gelu' is not supported"),
        ("spt_spade", {"attention_window": None}, "`attention_window` must be a positive block size"),
        ("spt_spade", {"kernel": "dplr"}, "`kernel`='dplr' is not supported"),
        ("spt_spade", {"state_size": 7}, "`state_size` must be a positive even integer"),
        ("spt_linformer", {"projection_sharing": "all"}, "`projection_sharing`='all' is not supported"),
        ("spt_linformer", {"attention_window": 8}, "`attention_window`=8 is not used by spt_linformer"),
        ("spt_performer", {"num_random_features": 0}, "`num_random_features` must be a positive integer"),
        ("spt_performer", {"attention_dropout": 0.1}, "FAVOR\\+ never forms the attention matrix"),
        ("spt_performer", {"feature_redraw_interval": -1}, "`feature_redraw_interval` must be None or a positive"),
    ],
)
def test_bad_configs_raise_errors_naming_the_field(model_type, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_config(ENTRIES[model_type], **overrides)


@pytest.mark.parametrize("model_type", list(ENTRIES))
def test_a_bf16_autocast_training_step_is_finite_and_close_to_fp32(model_type):
    """One masked-LM step: parameters stay fp32, gradients are finite, the loss is within 5% of fp32's (the 200-step
    comparison of tests/reliability/test_mixed_precision.py runs these in the slow suite)."""
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(make_config(ENTRIES[model_type]))
    ids = torch.randint(4, 20, (4, 16), generator=torch.Generator().manual_seed(0))
    labels = torch.where(torch.arange(16) % 2 == 0, ids, -100)
    inputs = {"input_ids": ids.masked_fill(labels != -100, 1), "labels": labels}
    reference = model(**inputs).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**inputs).loss
    loss.backward()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert abs(loss.item() - reference.item()) <= 0.05 * reference.item()
