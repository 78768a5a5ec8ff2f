"""Performer (Choromanski et al., ICLR 2021) as an spt_hf architecture: the spt_hf Transformer with FAVOR+ attention.

FAVOR+ estimates softmax attention with positive random features: for the head size d (hd in shapes), q' = q d^-1/4,
k' = k d^-1/4 and rows w_i of an orthogonal Gaussian matrix W (m, hd),

    exp(q·k / √d) = E_w[φ(q) φ(k)],   φ(x)_i = exp(w_i·x' - |x'|²/2) / √m,
    Attention(Q, K, V) ≈ D⁻¹ φ(Q) (φ(K)ᵀ V),   D = diag(φ(Q) (φ(K)ᵀ 1)),

O(L m d) time and memory. The causal form replaces φ(K)ᵀ V by prefix sums over positions (block by block: exact
quadratic products inside blocks of `CAUSAL_BLOCK` positions, running sums across them).

Stabilisation: the exponents are shifted by ±|w_i|²/4 (keys: -, queries: +), which cancels in φ(q)·φ(k) and bounds
every key exponent by |w_i|²/4, and each query by the maximum over its own features (cancels in D⁻¹). The reference
codes instead subtract the key exponents' maximum over each sequence and head (features and positions), which with
their eps couples every output to every key of its sequence; here nothing couples positions: causal outputs never
depend on later keys, padded keys (zeroed) change nothing, and the recurrent `step` equals `forward`. Features run in
float32, autocast disabled.

The features W of each layer are a saved buffer drawn from a saved per-layer seed; in training the base model redraws
them every `feature_redraw_interval` forward passes (draw k of each seed), so runs and reloads are deterministic.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin
from transformers import initialization as init

from .cache import MixerState
from .configuration_performer import PerformerConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_rotary_transformer import RotaryTransformerFeedForward, RotaryTransformerModel, apply_rotary_pos_emb
from .modeling_sequence import SequencePreTrainedModel
from .ssm import compute_dtype, state_dtype

CAUSAL_BLOCK = 64  # positions per block of the causal prefix sums: (L/64) m d running sums, 64 x 64 products


def orthogonal_random_features(num_features: int, dim: int, seed: int) -> Tensor:
    """W (m, hd), float64: stacked blocks of d orthonormal rows (Q of Gaussian matrices, Haar by the sign of diag(R)),
    each row rescaled to the length of an independent Gaussian vector, so every row is marginally N(0, I_d)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    blocks = []
    for _ in range(-(-num_features // dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))
        blocks.append((q * torch.sign(torch.diagonal(r))).T)  # rows orthonormal
    rows = torch.cat(blocks)[:num_features]  # (m, hd)
    lengths = torch.randn(num_features, dim, generator=generator, dtype=torch.float64).norm(dim=1)  # chi(d)
    return rows * lengths.unsqueeze(1)


def draw_seed(seed: int, draw: int) -> int:
    """The generator seed of draw `draw` of a layer whose saved seed is `seed`."""
    return (seed + 0x9E3779B97F4A7C15 * (draw + 1)) % (2**63)


def positive_features(x: Tensor, projection: Tensor, is_query: bool, real: Tensor | None = None) -> Tensor:
    """φ(x) (B, nh, L, m) for x (B, nh, L, hd) and W (m, hd), stabilised as the module docstring says; padded positions
    of keys (`real` (B, 1, L, 1) False) get φ = 0."""
    x = x * x.shape[-1] ** -0.25
    exponent = x @ projection.T - x.square().sum(-1, keepdim=True) / 2  # (B, nh, L, m)
    shift = projection.square().sum(-1) / 4  # (m,)
    if is_query:
        exponent = exponent + shift
        exponent = exponent - exponent.amax(-1, keepdim=True).detach()  # per query: cancels in D⁻¹
    else:
        exponent = exponent - shift  # <= |w|²/4 for every key
    # 1/√m and the padding inside the exponential: autograd then keeps one (B, nh, L, m) tensor per side, not three
    exponent = exponent - 0.5 * math.log(projection.shape[0])
    if real is not None:
        exponent = exponent.masked_fill(real == 0, float("-inf"))  # φ = 0 at padded keys
    return torch.exp(exponent)


def positive(normaliser: Tensor) -> Tensor:
    """D clamped at the smallest normal float: it only guards against every feature underflowing to 0 (D itself is
    about e^(-|w|²/4) per key, far above it for head sizes up to a few hundred)."""
    return normaliser.clamp(min=torch.finfo(normaliser.dtype).tiny)


def favor_attention(q_features: Tensor, k_features: Tensor, value: Tensor) -> Tensor:
    """Bidirectional D⁻¹ φ(Q) (φ(K)ᵀ V): (B, nh, L, m), (B, nh, L, m), (B, nh, L, hd) -> (B, nh, L, hd)."""
    context = k_features.transpose(-1, -2) @ value  # (B, nh, m, hd)
    normaliser = q_features @ k_features.sum(-2).unsqueeze(-1)  # (B, nh, L, 1)
    return (q_features @ context) / positive(normaliser)


def causal_favor_attention(q_features: Tensor, k_features: Tensor, value: Tensor) -> Tensor:
    """Causal FAVOR+ by prefix sums: output t uses Σ_{s<=t} φ(k_s) v_sᵀ and Σ_{s<=t} φ(k_s); blocks of c positions
    take exact products inside the block and the running sums of the blocks before."""
    batch, heads, length, _ = q_features.shape
    block = min(CAUSAL_BLOCK, length)
    num = -(-length // block)
    pad = num * block - length

    def blocks(x: Tensor) -> Tensor:  # (B, nh, L, .) -> (B, nh, n, c, .), zero padded at the end
        return F.pad(x, (0, 0, 0, pad)).view(batch, heads, num, block, -1)

    q, k, v = blocks(q_features), blocks(k_features), blocks(value)
    local = (q @ k.transpose(-1, -2)).tril()  # (B, nh, n, c, c): s <= t inside the block
    sums = F.pad((k.transpose(-1, -2) @ v).cumsum(2), (0, 0, 0, 0, 1, 0))[:, :, :num]  # (B, nh, n, m, hd) before
    totals = F.pad(k.sum(-2).cumsum(2), (0, 0, 1, 0))[:, :, :num].unsqueeze(-1)  # (B, nh, n, m, 1) before
    numerator = local @ v + q @ sums  # (B, nh, n, c, hd)
    normaliser = local.sum(-1, keepdim=True) + q @ totals  # (B, nh, n, c, 1)
    out = numerator / positive(normaliser)
    return out.reshape(batch, heads, num * block, -1)[:, :, :length]


def implied_attention(q_features: Tensor, k_features: Tensor, causal: bool) -> Tensor:
    """The attention matrix FAVOR+ applies, D⁻¹ φ(Q) φ(K)ᵀ (B, nh, L, L) (causal: lower triangle); for
    `output_attentions` only, as it is quadratic in the length."""
    scores = q_features @ k_features.transpose(-1, -2)  # (B, nh, L, L)
    if causal:
        scores = scores.tril()
    return scores / positive(scores.sum(-1, keepdim=True))


class PerformerState(MixerState):
    """Running sums Σ φ(k) vᵀ (B, nh, m, hd) and Σ φ(k) (B, nh, m) of a causal Performer layer. They hold no history,
    so positions cannot be removed again."""


class PerformerAttention(nn.Module):
    """Multi-head FAVOR+ attention with Q/K/V/O biases (rotary positions on q, k when configured).

    Buffers (saved with the checkpoint): `projection` W (m, hd), and `feature_seed`, this layer's seed for redraws.
    """

    def __init__(self, config: PerformerConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.is_causal = not config.bidirectional
        hidden = config.hidden_size
        self.q_proj, self.k_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.v_proj, self.o_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.register_buffer("projection", torch.empty(config.num_random_features, self.head_dim))
        self.register_buffer("feature_seed", torch.zeros((), dtype=torch.long))
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        """A fresh seed from torch's generator (so `torch.manual_seed` decides the features) and its first draw."""
        if self.projection.is_meta or getattr(self.projection, "_is_hf_initialized", False):
            return
        init.copy_(self.feature_seed, torch.randint(0, 2**62, (), device="cpu"))
        init.copy_(self.projection, self.draw(0))

    def draw(self, index: int) -> Tensor:
        """Draw number `index` of this layer's W (m, hd): a pure function of the saved seed and `index`."""
        seed = draw_seed(int(self.feature_seed), index)
        features = orthogonal_random_features(self.projection.shape[0], self.head_dim, seed)
        return features.to(device=self.projection.device, dtype=self.projection.dtype)

    def redraw_features(self, index: int) -> None:
        """Replace W by draw `index`: a new tensor, not an in-place copy, so graphs of earlier passes keep theirs."""
        self.projection = self.draw(index)

    def _qkv(self, hidden_states: Tensor, position_embeddings) -> tuple[Tensor, Tensor, Tensor]:
        batch, length, _ = hidden_states.shape
        shape = (batch, length, self.num_heads, self.head_dim)
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        key = self.k_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        value = self.v_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        if position_embeddings is not None:
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        return query, key, value

    def _features(self, query: Tensor, key: Tensor, real: Tensor | None) -> tuple[Tensor, Tensor]:
        dtype = compute_dtype(query)
        projection = self.projection.to(dtype)
        return (
            positive_features(query.to(dtype), projection, is_query=True),
            positive_features(key.to(dtype), projection, is_query=False, real=real),
        )

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        position_embeddings: tuple[Tensor, Tensor] | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> Tensor | tuple[Tensor, Tensor]:
        batch, length, _ = hidden_states.shape
        query, key, value = self._qkv(hidden_states, position_embeddings)
        real = None if attention_mask is None else attention_mask[:, None, :, None]  # (B, 1, L, 1)
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            q_features, k_features = self._features(query, key, None if real is None else real.to(query.dtype))
            attend = causal_favor_attention if self.is_causal else favor_attention
            out = attend(q_features, k_features, value.to(q_features.dtype))  # (B, nh, L, hd)
        out = out.to(hidden_states.dtype).transpose(1, 2).reshape(batch, length, -1)
        out = self.o_proj(out)  # (B, L, H)
        if not output_attentions:
            return out
        return out, implied_attention(q_features, k_features, self.is_causal).to(hidden_states.dtype)

    def init_state(self, batch_size: int, device, dtype) -> PerformerState:
        """Zero running sums, float32 (float64 for a float64 model)."""
        features, dtype = self.projection.shape[0], state_dtype(dtype)
        sums = torch.zeros(batch_size, self.num_heads, features, self.head_dim, device=device, dtype=dtype)
        return PerformerState(sums, torch.zeros(batch_size, self.num_heads, features, device=device, dtype=dtype))

    def step(
        self,
        hidden_state: Tensor,
        state: PerformerState,
        attention_mask: Tensor | None = None,
        position_embeddings=None,
        **kwargs,
    ) -> tuple[Tensor, PerformerState]:
        """One position (B, H): add φ(k) vᵀ and φ(k) to the sums, then read them with φ(q); equals `forward`."""
        sums, totals = state.tensors
        query, key, value = self._qkv(hidden_state.unsqueeze(1), position_embeddings)  # (B, nh, 1, hd)
        real = None if attention_mask is None else attention_mask.view(-1, 1, 1, 1).to(sums.dtype)
        q_features, k_features = self._features(query.to(sums.dtype), key.to(sums.dtype), real)  # (B, nh, 1, m)
        sums = sums + k_features.transpose(-1, -2) @ value.to(sums.dtype)  # (B, nh, m, hd)
        totals = totals + k_features.squeeze(2)  # (B, nh, m)
        out = (q_features @ sums) / positive(q_features @ totals.unsqueeze(-1))  # (B, nh, 1, hd)
        out = self.o_proj(out.to(hidden_state.dtype).reshape(hidden_state.shape[0], -1))  # (B, H)
        return out, PerformerState(sums, totals)


# ----------------------------------------------------------------------------------------------------------------
# Models: the Transformer's base model with this attention, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class PerformerPreTrainedModel(SequencePreTrainedModel):
    config: PerformerConfig
    _is_stateful = True  # causal running sums cannot be rolled back: transformers refuses assisted decoding


class PerformerModel(RotaryTransformerModel, PerformerPreTrainedModel):
    """Performer base model: the Transformer's (positions, GELU feed-forward blocks) with FAVOR+ attention. It counts
    its training forward passes (`forward_calls`) and redraws every layer's features each `feature_redraw_interval`
    of them (`feature_draws` so far); both counters are saved with the checkpoint."""

    config: PerformerConfig
    mixer_classes = (PerformerAttention, RotaryTransformerFeedForward)
    supports_packed_sequences = False  # its mixers do not honour transformers' packed-sequence masks

    def _build_extra_modules(self, config: PerformerConfig) -> None:
        super()._build_extra_modules(config)
        self.register_buffer("forward_calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("feature_draws", torch.zeros((), dtype=torch.long))

    def _init_spt_weights(self) -> None:
        init.zeros_(self.forward_calls)
        init.zeros_(self.feature_draws)
        if not self.forward_calls.is_meta:
            self._set_count(self.forward_calls, int(self.forward_calls))  # the host copies (on the CPU: no sync)
            self._set_count(self.feature_draws, int(self.feature_draws))

    def attention_layers(self) -> list[PerformerAttention]:
        return [
            block.mixer
            for layer in self.layers
            for block in layer.blocks
            if isinstance(block.mixer, PerformerAttention)
        ]

    def redraw_features(self) -> None:
        """Draw the next random features of every layer now (deterministic: each layer's seed and the draw count)."""
        draws = self._host_count(self.feature_draws) + 1
        for attention in self.attention_layers():
            attention.redraw_features(draws)
        self._set_count(self.feature_draws, draws)
        self._set_count(self.forward_calls, 0)

    def _host_count(self, counter: Tensor) -> int:
        """The value of a counter buffer from its host copy; read from the tensor (a device sync) only when the
        tensor was written by something else (built, loaded), as its `_version` tells."""
        copies = self.__dict__.setdefault("_host_counts", {})
        key = id(counter)
        if key not in copies or copies[key][0] is not counter or copies[key][1] != counter._version:
            copies[key] = (counter, counter._version, int(counter))
        return copies[key][2]

    def _set_count(self, counter: Tensor, value: int) -> None:
        with torch.no_grad():
            counter.fill_(value)  # a write from the host: no sync
        self.__dict__.setdefault("_host_counts", {})[id(counter)] = (counter, counter._version, value)

    def count_training_call(self) -> None:
        """Before a training forward: redraw when `feature_redraw_interval` passes used the current features. Called
        once per base model call, not in the layers (gradient checkpointing runs those twice); counted on the host
        (no device sync). Skipped while torch.compile traces the model: a compiled model's Trainer calls it before
        each training step instead (training/trainer.py), so compiled training redraws too."""
        interval = self.config.feature_redraw_interval
        if not self.training or interval is None or torch.compiler.is_compiling():
            return
        if self._host_count(self.forward_calls) >= interval:
            self.redraw_features()
        self._set_count(self.forward_calls, self._host_count(self.forward_calls) + 1)

    def forward(self, *args, **kwargs):
        self.count_training_call()
        return super().forward(*args, **kwargs)

    def _mixer_kwargs(self, hidden_states: Tensor, padding_mask: Tensor | None, position_ids=None) -> dict:
        """Rotary angles only; no (L, L) mask: padding and causality are handled inside the attention."""
        if self.config.position_embedding_type != "rotary":
            return {}
        position_ids = self._positions(hidden_states) if position_ids is None else position_ids
        return {"position_embeddings": self.rotary_emb(hidden_states, position_ids)}


class PerformerForMaskedLM(SequenceForMaskedLM, PerformerPreTrainedModel):
    base_model_class = PerformerModel


class PerformerForCausalLM(SequenceForCausalLM, PerformerPreTrainedModel, GenerationMixin):
    base_model_class = PerformerModel


class PerformerForSequenceClassification(SequenceForSequenceClassification, PerformerPreTrainedModel):
    base_model_class = PerformerModel


class PerformerForRetrieval(SequenceForRetrieval, PerformerPreTrainedModel):
    base_model_class = PerformerModel


__all__ = [
    "PerformerPreTrainedModel",
    "PerformerModel",
    "PerformerForMaskedLM",
    "PerformerForCausalLM",
    "PerformerForSequenceClassification",
    "PerformerForRetrieval",
]
