"""MEGA (Ma et al., ICLR 2023): moving-average equipped gated attention, as an spt_hf architecture.

Each layer is two residual blocks of the shared model: the MEGA sub-layer, then MEGA's normalised feed-forward network.
The MEGA sub-layer on the block input x (B, L, H) (X = Norm(x) with pre-norm, X = x with post-norm; in the formulas
H is MEGA's candidate output, as in the paper):

    X' = SiLU(EMA(X))                         multi-dimensional damped EMA, by FFT convolution (ssm.fft_conv)
    V = SiLU(X W_v),  [u, z, r, h_x] from X': u = σ(.), z, r = SiLU(.)
    Q = z ⊙ κ_q + μ_q,  K = z ⊙ κ_k + μ_k    single head, shared representation z
    H = SiLU(h_x + (r ⊙ Attention(Q, K, V)) W_h)
    out = x + u ⊙ (H - x)                     MEGA's gated residual

The shared block computes `x + mixer(...)`, so the mixer returns the update u ⊙ (H - x): it reads the residual stream
x itself (`reads_residual`), which makes the block exactly MEGA's `addcmul(x, u, H - x)` in both pre- and post-norm
(post-norm: Norm(x + u ⊙ (H - x))). The EMA runs in float32 with autocast disabled, like the SSM kernels.

Reads top to bottom: EMA -> relative position bias and chunked attention -> the MEGA mixer -> feed-forward -> models.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from transformers import GenerationMixin
from transformers import initialization as init

from .cache import MixerState
from .configuration_mega import MegaConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequenceBaseModel, SequencePreTrainedModel
from .precision import Float32Parameters
from .ssm import block_size, coarse_count, compute_dtype, exact_float32_matmuls, fft_conv, state_dtype

# MEGA's EMA initialisation (the official MultiHeadEMA): δ, α ~ N(0, 0.2), β ~ ±1 + N(0, 0.02), γ, ω ~ N(0, 1).
EMA_DELTA_ALPHA_STD, EMA_BETA_STD = 0.2, 0.02


class MegaEMA(Float32Parameters):
    """Multi-dimensional damped EMA on (B, L, H): each of the H features is expanded to h components n,

        s_t = p ⊙ β x_t + (1 - p ⊙ α) ⊙ s_{t-1},   y_t = Σ_n γ_n s_t,n / √h + ω x_t,

    with p = σ(δ), α = σ(α̃) in (0, 1) (damping). As a convolution, y = K * x + ω ⊙ x with
    K_l = Σ_n p β γ q^l / √h, q = 1 - p α. Bidirectional: a second set of (δ, α, β, γ) runs backwards; as in MEGA,
    both directions include lag 0. Parameters are (nd, H, h), nd = 2 directions when bidirectional (else 1); they stay
    float32 under mixed precision (precision.py).
    """

    def __init__(self, config: MegaConfig):
        super().__init__()
        self.config = config
        self.channels = 2 if config.bidirectional else 1
        shape = (self.channels, config.hidden_size, config.ema_projection_size)
        self.delta = nn.Parameter(torch.empty(shape))
        self.alpha = nn.Parameter(torch.empty(shape))
        self.beta = nn.Parameter(torch.empty(shape))
        self.gamma = nn.Parameter(torch.empty(shape))
        self.omega = nn.Parameter(torch.empty(config.hidden_size))
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        """MEGA's init; β alternates +1, -1 over the h components ("more stable" per the official code)."""
        init.normal_(self.delta, std=EMA_DELTA_ALPHA_STD)
        init.normal_(self.alpha, std=EMA_DELTA_ALPHA_STD)
        signs = 1.0 - 2.0 * (torch.arange(self.beta.shape[-1], device="cpu") % 2)  # (h,) 1, -1, 1, ...
        init.copy_(self.beta, signs + EMA_BETA_STD * torch.randn(self.beta.shape, device="cpu"))
        init.normal_(self.gamma)
        init.normal_(self.omega)

    def coefficients(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """Input weights p β, log decay log q and output weights γ / √h, each (nd, H, h)."""
        p = torch.sigmoid(self.delta.to(dtype))
        log_q = torch.log1p(-p * torch.sigmoid(self.alpha.to(dtype)))  # log(1 - p α), q in (0, 1)
        return p * self.beta.to(dtype), log_q, self.gamma.to(dtype) / math.sqrt(self.beta.shape[-1])

    def kernel(self, length: int) -> Tensor:
        """K (nd, H, length) with powers q^l = (q^c)^i q^j, l = i c + j: a batched (I, h) x (h, c) product per
        (nd, H) instead of a (nd, H, h, L) table."""
        inputs, log_q, outputs = self.coefficients(self.kernel_dtype(self.delta))
        block = block_size(self.config.max_position_embeddings)  # fixed: no guard on the exact length under compile
        steps = torch.arange(coarse_count(length, block), device=log_q.device, dtype=log_q.dtype) * block  # (I,)
        coarse = torch.exp(log_q.unsqueeze(-1) * steps)  # (nd, H, h, I)
        fine = torch.exp(log_q.unsqueeze(-1) * torch.arange(block, device=log_q.device, dtype=log_q.dtype))
        weighted = (inputs * outputs).unsqueeze(-1) * coarse  # (nd, H, h, I)
        kernel = torch.einsum("cdni,cdnj->cdij", weighted, fine)  # (nd, H, I, c)
        return kernel.flatten(-2)[..., :length]  # (nd, H, L)

    def forward(self, hidden_states: Tensor) -> Tensor:
        """(B, L, H) -> SiLU(K * x + ω ⊙ x), (B, L, H); padded positions must be zero."""
        length = hidden_states.shape[1]
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            with exact_float32_matmuls():
                kernel = self.kernel(length + self.channels - 1)  # (nd, H, L[+1]): backward lags are 1..L
            if self.channels == 2:
                # fft_conv's backward kernel covers lags -1..-L; MEGA's backward lag 0 joins the forward one.
                forward = kernel[0, :, :length] + F.pad(kernel[1, :, :1], (0, length - 1))  # (H, L)
                kernel = torch.stack([forward, kernel[1, :, 1:]])  # (2, H, L)
            y = fft_conv(hidden_states, kernel, self.omega)  # (B, L, H)
        return F.silu(y)

    def step(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One position x (B, H) and the state s (B, H, h) -> (SiLU(y) (B, H), new state); causal only."""
        inputs, log_q, outputs = self.coefficients(state.dtype)  # (1, H, h)
        u = x.to(state.dtype)  # (B, H)
        state = inputs[0] * u.unsqueeze(-1) + log_q[0].exp() * state  # (B, H, h)
        y = (state * outputs[0]).sum(-1) + self.omega.to(state.dtype) * u  # (B, H)
        return F.silu(y).to(x.dtype), state


def relative_bias(table: Tensor, queries: Tensor, keys: Tensor) -> Tensor:
    """b[key - query] (Lq, Lk) from MEGA's learned table (2P - 1,) of offsets -(P-1)..P-1, at positions (Lq,), (Lk,)."""
    center = (table.shape[0] - 1) // 2
    return table[keys.unsqueeze(0) - queries.unsqueeze(1) + center]


def element_attention_weights(scores: Tensor, visible: Tensor, activation: str) -> Tensor:
    """MEGA's element-wise attention: laplace(s) = (1 + erf((s - μ) / (σ√2))) / 2 with the exact μ = √(1/2) and
    σ = √(1/(4π)) (MEGA's code rounds them to 0.707107 and 0.282095, about 2e-7 away), or relu(s)²; invisible keys
    get 0."""
    if activation == "laplace":
        mu, sigma = math.sqrt(0.5), math.sqrt(0.25 / math.pi)
        weights = 0.5 * (1.0 + torch.erf((scores - mu) / (sigma * math.sqrt(2.0))))
    else:
        weights = F.relu(scores).square()
    return weights * visible


class MegaState(MixerState):
    """The EMA state (B, H, h) and the keys (B, T, z), values (B, T, E) and realness (B, T) of the positions of the
    current chunk (of every position without chunking). The EMA state has no history: it cannot be rolled back."""


class MegaMixer(nn.Module):
    """The MEGA sub-layer; returns the gated update u ⊙ (H - x) of the residual stream (see the module docstring).

    `forward(hidden_states, attention_mask, residual)`: X (B, L, H) the mixer input (padding zeroed), `residual` the
    block input x (called on its own, X is taken as x). With `output_attentions`, also the attention weights placed
    in the (B, 1, L, L) matrix of all positions (chunks on the diagonal).
    """

    reads_residual = True

    def __init__(self, config: MegaConfig, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        dim, z, e = config.hidden_size, config.shared_representation_size, config.intermediate_size
        self.ema = MegaEMA(config)
        self.v_proj = nn.Linear(dim, e)
        self.mx_proj = nn.Linear(dim, z + e + 2 * dim)  # -> u (H), z (z), r (E), h_x (H)
        self.h_proj = nn.Linear(e, dim)
        self.qk_weight = nn.Parameter(torch.empty(2, z))  # κ_q, κ_k
        self.qk_bias = nn.Parameter(torch.empty(2, z))  # μ_q, μ_k
        self.rel_pos_bias = nn.Parameter(torch.empty(2 * config.relative_positions - 1))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.attention_dropout = nn.Dropout(config.attention_dropout)
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        """MEGA's init: κ ~ N(0, 0.02), μ = 0, relative bias ~ N(0, 0.02) (0.02 = `initializer_range`); the linear
        layers get the shared N(0, initializer_range) with zero bias, which is MEGA's too."""
        std = self.config.initializer_range
        init.normal_(self.qk_weight, std=std)
        init.zeros_(self.qk_bias)
        init.normal_(self.rel_pos_bias, std=std)

    def _project(self, x: Tensor) -> tuple[Tensor, ...]:
        """u (gate), z (shared), r (reset), h_x from the EMA output x' (..., H)."""
        cfg = self.config
        u, zr, hx = self.mx_proj(x).split(
            [cfg.hidden_size, cfg.shared_representation_size + cfg.intermediate_size, cfg.hidden_size], dim=-1
        )
        z, r = F.silu(zr).split([cfg.shared_representation_size, cfg.intermediate_size], dim=-1)
        return torch.sigmoid(u), z, r, hx

    def _queries_keys(self, z: Tensor) -> tuple[Tensor, Tensor]:
        qk = z.unsqueeze(-2) * self.qk_weight + self.qk_bias  # (..., 2, z)
        return qk[..., 0, :], qk[..., 1, :]

    def _weights(self, scores: Tensor, visible: Tensor) -> Tensor:
        """Attention weights from raw q·k scores (+ bias already added for softmax), softmax or element-wise."""
        if self.config.attention_activation == "softmax":
            scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
            return F.softmax(scores.to(compute_dtype(scores)), dim=-1).to(scores.dtype)  # float32 (or 64) sums
        return element_attention_weights(scores, visible, self.config.attention_activation)

    def _chunk_length(self, length: int) -> int:
        chunk = length if self.config.chunk_size is None else min(self.config.chunk_size, length)
        if chunk > self.config.relative_positions:
            raise ValueError(
                f"MEGA without chunking attends over the whole input: length {length} exceeds "
                f"`max_position_embeddings`={self.config.max_position_embeddings}, the offsets its relative position "
                "bias covers. Use a model with a larger `max_position_embeddings`, or set `chunk_size`."
            )
        return chunk

    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, padding_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Single-head attention within chunks: q, k (B, L, z), v (B, L, E) -> (B, L, E) and, with `need_weights`,
        the weights (B, n, c, c). The sequence is padded to n chunks of c positions; padded and (causal) future keys
        are invisible. With `attention_query_block_size` b < c (and no weights asked for), the queries of each chunk
        are taken b at a time, each block recomputed in the backward pass: only (B, n, b, c) scores are alive."""
        batch, length, _ = q.shape
        chunk = self._chunk_length(length)
        num = -(-length // chunk)
        if torch.compiler.is_compiling() and not need_weights:
            # at least one padded position: whether the length is a multiple of the chunk is no guard (a graph each)
            num = length // chunk + 1
        pad = num * chunk - length
        real = torch.ones(batch, length, dtype=torch.bool, device=q.device) if padding_mask is None else padding_mask
        q, k, v = (F.pad(t, (0, 0, 0, pad)).view(batch, num, chunk, -1) for t in (q, k, v))  # (B, n, c, .)
        keys_real = F.pad(real.to(torch.bool), (0, pad)).view(batch, num, 1, chunk)  # (B, n, 1, c) keys
        block = self.config.attention_query_block_size
        if need_weights or block is None or block >= chunk:
            out, weights = self._query_block(q, k, v, keys_real, 0)  # (B, n, c, E), (B, n, c, c)
            return out.reshape(batch, num * chunk, -1)[:, :length], weights if need_weights else None
        blocks = [
            checkpoint(
                self._query_block_output, q[:, :, start : start + block], k, v, keys_real, start, use_reentrant=False
            )
            for start in range(0, chunk, block)
        ]  # each (B, n, b, E)
        return torch.cat(blocks, dim=2).reshape(batch, num * chunk, -1)[:, :length], None

    def _query_block(self, q: Tensor, k: Tensor, v: Tensor, keys_real: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """The attention of the queries q (B, n, b, z) at chunk positions start..start+b-1 over the chunk's keys
        k (B, n, c, z) and values v (B, n, c, E): output (B, n, b, E) and weights (B, n, b, c)."""
        queries = torch.arange(start, start + q.shape[2], device=q.device)  # (b,) positions in the chunk
        keys = torch.arange(k.shape[2], device=q.device)  # (c,)
        visible = keys_real  # (B, n, 1, c)
        if not self.config.bidirectional:
            visible = visible & (keys.unsqueeze(0) <= queries.unsqueeze(1))  # (B, n, b, c)
        bias = relative_bias(self.rel_pos_bias, queries, keys).to(q.dtype)  # (b, c)
        scores = q @ k.transpose(-1, -2)  # (B, n, b, c)
        if self.config.attention_activation == "softmax":
            scores = scores * self.config.shared_representation_size**-0.5 + bias
        else:  # scores divided by the number of visible keys, as MEGA's element attention
            scores = scores / visible.sum(-1, keepdim=True).clamp(min=1).to(scores.dtype) + bias
        weights = self._weights(scores, visible.expand_as(scores))  # (B, n, b, c)
        return self.attention_dropout(weights) @ v, weights  # (B, n, b, E)

    def _query_block_output(self, q: Tensor, k: Tensor, v: Tensor, keys_real: Tensor, start: int) -> Tensor:
        return self._query_block(q, k, v, keys_real, start)[0]

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        residual: Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> Tensor | tuple[Tensor, Tensor]:
        residual = hidden_states if residual is None else residual  # (B, L, H)
        values = F.silu(self.v_proj(hidden_states))  # (B, L, E)
        u, z, r, hx = self._project(self.dropout(self.ema(hidden_states)))
        q, k = self._queries_keys(z)  # (B, L, z) each
        mixed, weights = self.attention(q, k, values, attention_mask, need_weights=output_attentions)  # (B, L, E)
        h = F.silu(hx + self.h_proj(mixed * r))  # (B, L, H)
        out = u * (h - residual)  # the block adds x: x + u ⊙ (H - x)
        if not output_attentions:
            return out
        return out, chunk_weights_to_dense(weights, hidden_states.shape[1])

    def _require_causal(self) -> None:
        if self.config.bidirectional:
            raise ValueError(
                "MegaMixer.step/init_state need a causal model (bidirectional=False): the bidirectional EMA and "
                "attention see future positions and have no recurrent form."
            )

    def init_state(self, batch_size: int, device=None, dtype=None) -> MegaState:
        """Zero EMA state (B, H, h) (float32) and no keys or values yet."""
        self._require_causal()
        cfg = self.config
        ema = torch.zeros(batch_size, cfg.hidden_size, cfg.ema_projection_size, device=device, dtype=state_dtype(dtype))
        keys = torch.zeros(batch_size, 0, cfg.shared_representation_size, device=device, dtype=dtype)
        values = torch.zeros(batch_size, 0, cfg.intermediate_size, device=device, dtype=dtype)
        return MegaState(ema, keys, values, torch.zeros(batch_size, 0, dtype=torch.bool, device=device))

    def step(
        self, hidden_state: Tensor, state: MegaState, attention_mask=None, residual=None, position: int = 0, **kwargs
    ) -> tuple[Tensor, MegaState]:
        """One position (B, H) -> (update (B, H), new state); equals `forward` position by position (eval mode)."""
        self._require_causal()
        residual = hidden_state if residual is None else residual
        ema, keys, values, real = state.tensors
        chunk = self.config.chunk_size
        if chunk is not None and position % chunk == 0:  # a new chunk: earlier keys are no longer visible
            keys, values, real = keys[:, :0], values[:, :0], real[:, :0]
        mx, ema = self.ema.step(hidden_state, ema)  # (B, H), (B, H, h)
        u, z, r, hx = self._project(mx)
        q, k = self._queries_keys(z)  # (B, z)
        is_real = torch.ones(real.shape[0], 1, dtype=torch.bool, device=real.device)
        if attention_mask is not None:
            is_real = attention_mask.view(-1, 1).to(torch.bool)
        keys, real = torch.cat([keys, k.unsqueeze(1)], 1), torch.cat([real, is_real], 1)  # (B, T, z), (B, T)
        values = torch.cat([values, F.silu(self.v_proj(hidden_state)).unsqueeze(1)], 1)  # (B, T, E)
        positions = torch.arange(keys.shape[1], device=keys.device)
        self._chunk_length(keys.shape[1])  # the same length limit as `forward`
        bias = relative_bias(self.rel_pos_bias, positions[-1:], positions)[0].to(q.dtype)  # (T,)
        scores = (keys @ q.unsqueeze(-1)).squeeze(-1)  # (B, T)
        if self.config.attention_activation == "softmax":
            scores = scores * self.config.shared_representation_size**-0.5 + bias
        else:
            scores = scores / real.sum(-1, keepdim=True).clamp(min=1).to(scores.dtype) + bias
        weights = self._weights(scores, real)  # (B, T)
        mixed = (weights.unsqueeze(1) @ values).squeeze(1)  # (B, E)
        h = F.silu(hx + self.h_proj(mixed * r))  # (B, H)
        return u * (h - residual), MegaState(ema, keys, values, real)


def chunk_weights_to_dense(weights: Tensor, length: int) -> Tensor:
    """Chunk attention weights (B, n, c, c) placed on the block diagonal of the (B, 1, L, L) matrix of positions."""
    batch, num, chunk, _ = weights.shape
    eye = torch.eye(num, dtype=weights.dtype, device=weights.device)  # (n, n): chunk i attends to chunk i only
    dense = torch.einsum("bicj,ik->bickj", weights, eye).reshape(batch, num * chunk, num * chunk)
    return dense[:, :length, :length].unsqueeze(1)


class MegaFeedForward(nn.Module):
    """MEGA's normalised feed-forward network (its norm and residual are the shared block's): Linear -> SiLU ->
    Linear."""

    def __init__(self, config: MegaConfig, layer_idx: int | None = None):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.nffn_hidden_size)
        self.fc2 = nn.Linear(config.nffn_hidden_size, config.hidden_size)

    def forward(self, hidden_states: Tensor, **kwargs) -> Tensor:
        return self.fc2(F.silu(self.fc1(hidden_states)))


# ----------------------------------------------------------------------------------------------------------------
# Models: the shared base model with these mixers, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class MegaPreTrainedModel(SequencePreTrainedModel):
    config: MegaConfig
    _is_stateful = True  # the EMA state cannot be rolled back: transformers refuses assisted decoding


class MegaModel(SequenceBaseModel, MegaPreTrainedModel):
    """MEGA base model: embedding -> layers of (MEGA sub-layer, normalised FFN), each in a residual block -> norm."""

    mixer_classes = (MegaMixer, MegaFeedForward)

    def _step_kwargs(self, hidden_state: Tensor, position: int) -> dict:
        return {"position": position}  # where the chunks start


class MegaForMaskedLM(SequenceForMaskedLM, MegaPreTrainedModel):
    base_model_class = MegaModel


class MegaForCausalLM(SequenceForCausalLM, MegaPreTrainedModel, GenerationMixin):
    base_model_class = MegaModel


class MegaForSequenceClassification(SequenceForSequenceClassification, MegaPreTrainedModel):
    base_model_class = MegaModel


class MegaForRetrieval(SequenceForRetrieval, MegaPreTrainedModel):
    base_model_class = MegaModel


__all__ = [
    "MegaPreTrainedModel",
    "MegaModel",
    "MegaForMaskedLM",
    "MegaForCausalLM",
    "MegaForSequenceClassification",
    "MegaForRetrieval",
]
