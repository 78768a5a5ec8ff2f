"""The spt_hf Transformer: pre-LN, Q/K/V/O with bias, GELU feed-forward, rotary or absolute positions, padded
keys masked, full attention (SDPA or eager) or block-local attention for long sequences.

Reads top to bottom: positions -> attention (full, block-local) -> feed-forward -> base model -> heads.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    find_packed_sequence_indices,
    packed_sequence_mask_function,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .cache import MixerState
from .configuration_rotary_transformer import RotaryTransformerConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequenceBaseModel, SequencePreTrainedModel, refuse_packed_sequences

logger = logging.get_logger(__name__)


class RotaryTransformerRotaryEmbedding(nn.Module):
    """RoPE cos/sin tables, computed once per forward in the base model and shared by all layers (as in Llama), for
    every RoPE type of transformers (`rope_parameters`: default, linear, dynamic, yarn, longrope, llama3, ...)."""

    def __init__(self, config: RotaryTransformerConfig):
        super().__init__()
        self.config = config
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        rope_init_fn = self.compute_default_rope_parameters
        if self.rope_type != "default":
            rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = rope_init_fn(config)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        # transformers' `_init_weights` refills both buffers after a meta-device load.
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: RotaryTransformerConfig, *args, **kwargs) -> tuple[torch.Tensor, float]:
        base = config.rope_parameters["rope_theta"]
        dim = config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))  # (hd/2,)
        return inv_freq, 1.0

    @dynamic_rope_update  # rescales the frequencies of the dynamic RoPE types past max_position_embeddings
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(x.device)  # (B, L, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, L, hd)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """q, k: (B, nh, L, hd); cos, sin: (B, L, hd). Rotates pairs (i, i + hd/2) by position-dependent angles."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, L, hd)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def sinusoidal_positions(position_ids: torch.Tensor, dim: int, dtype) -> torch.Tensor:
    """The absolute sinusoidal embedding of "Attention Is All You Need" at `position_ids` (any shape) -> (..., H)."""
    position = position_ids.to(torch.float32).unsqueeze(-1)  # (..., 1)
    div = torch.exp(
        torch.arange(0, dim, 2, device=position_ids.device, dtype=torch.float32) * (-math.log(10000.0) / dim)
    )  # (H/2,)
    angles = position * div  # (..., H/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., H): sin, cos interleaved
    return table[..., :dim].to(dtype)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """softmax(QKᵀ·scale + mask)·V with an additive float mask; the oracle for SDPA and the fallback."""
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, nh, Lq, Lk)
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights  # (B, Lq, nh, hd)


def local_key_blocks(causal: bool) -> int:
    """How many blocks of keys a query block attends to: (i-1, i, i+1), or (i-1, i) in causal mode."""
    return 2 if causal else 3


def local_attention_mask(
    padding_mask: torch.Tensor | None, batch: int, length: int, window: int, causal: bool, device
) -> torch.Tensor:
    """Boolean block-local attention mask, True where a query may attend a key: (B*nb, 1, 1, 3w) in bidirectional
    mode (it depends on the key only, so nothing of size w x w per block is built), (B*nb, 1, w, 2w) in causal mode.

    Keys of block i are blocks (i-1, i, i+1) (causal: (i-1, i)); a key is visible if it lies inside the sequence, is
    not padding and (causal) is not in the future. No row is empty: a causal query always sees itself, and a
    bidirectional block whose keys are all padding (only padded queries) sees all of them; outputs at padded
    positions are never used.
    """
    num_blocks, span = -(-length // window), local_key_blocks(causal)
    k_pos = torch.arange(num_blocks * window, device=device).view(num_blocks, 1, window)  # (nb, 1, w) block i
    k_pos = torch.cat([k_pos + (j - 1) * window for j in range(span)], dim=-1)  # (nb, 1, span*w)
    real = (k_pos >= 0) & (k_pos < length)  # (nb, 1, span*w)
    if padding_mask is not None:
        padded = F.pad(padding_mask.to(torch.bool), (window, (num_blocks + span - 2) * window - length))
        real = real & padded.unfold(1, span * window, window).unsqueeze(2)  # (B, nb, 1, span*w)
    real = real.expand(batch, num_blocks, 1, span * window)  # (B, nb, 1, span*w)
    if causal:
        q_pos = torch.arange(num_blocks * window, device=device).view(num_blocks, window, 1)  # (nb, w, 1)
        visible = (real & (k_pos <= q_pos)) | (k_pos == q_pos)  # (B, nb, w, 2w)
    else:
        visible = real | ~real.any(dim=-1, keepdim=True)  # (B, nb, 1, 3w)
    return visible.reshape(batch * num_blocks, 1, visible.shape[-2], span * window)


def to_blocks(x: torch.Tensor, window: int, key_blocks: int) -> torch.Tensor:
    """(B, nh, L, hd) -> (B*nb, nh, w, hd) for queries (`key_blocks=1`), or (B*nb, nh, k*w, hd) holding blocks
    (i-1, i, i+1) (`key_blocks=3`) or (i-1, i) (`key_blocks=2`) for keys and values; missing blocks are zeros."""
    batch, heads, length, dim = x.shape
    num_blocks = -(-length // window)
    pad_left = window if key_blocks > 1 else 0
    pad_right = num_blocks * window - length + (window if key_blocks == 3 else 0)
    x = F.pad(x, (0, 0, pad_left, pad_right))  # (B, nh, L', hd)
    size = key_blocks * window
    blocks = x.unfold(2, size, window)  # (B, nh, nb, hd, size)
    return blocks.permute(0, 2, 1, 4, 3).reshape(batch * num_blocks, heads, size, dim)


CPU_ATTENTION_FLOPS_PER_S = 1e11  # what SDPA reaches on a 2-core CPU (about half the matmul peak): an optimistic rate


def warn_if_full_attention_is_slow(config: RotaryTransformerConfig, hidden_states: torch.Tensor) -> None:
    """On CPU, full attention over a long sequence can take many minutes per step: say so once, with the estimate,
    and point at block-local attention (`attention_window`)."""
    batch, length, hidden = hidden_states.shape
    if hidden_states.device.type != "cpu" or length < 8192 or torch.compiler.is_compiling():
        return
    passes = 3 if torch.is_grad_enabled() else 1  # forward + backward costs about three forwards
    flops = passes * 4 * batch * length**2 * hidden * config.num_hidden_layers  # QKᵀ and PV, every layer
    seconds = flops / CPU_ATTENTION_FLOPS_PER_S
    scores_gib = batch * config.num_attention_heads * length**2 * hidden_states.element_size() / 2**30
    eager = config._attn_implementation == "eager"
    if seconds < 60 and not (eager and scores_gib > 4):
        return
    memory = (
        f"; eager attention builds {scores_gib:.0f} GiB of scores per layer"
        if eager
        else f"; SDPA keeps memory linear in the length (eager attention would need {scores_gib:.0f} GiB per layer)"
    )
    logger.warning_once(
        f"Full attention over {length} positions on CPU: about {seconds / 60:.0f} min per step at best "
        f"({flops / 1e12:.0f} TFLOP){memory}. Block-local attention (`attention_window`, e.g. 512 or 1024) is linear "
        "in the length."
    )


def additive_mask(bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean "may attend" mask as the additive float mask eager attention takes (float masks pass through)."""
    if bias is None or bias.dtype != torch.bool:
        return bias
    return torch.zeros_like(bias, dtype=dtype).masked_fill(~bias, torch.finfo(dtype).min)


def dense_local_weights(weights: torch.Tensor, batch: int, length: int, window: int, causal: bool) -> torch.Tensor:
    """Block-local attention weights (B*nb, nh, w, k*w) placed into the (B, nh, L, L) matrix of all positions."""
    span, heads = local_key_blocks(causal), weights.shape[1]
    num_blocks = weights.shape[0] // batch
    blocks = weights.view(batch, num_blocks, heads, window, span * window)
    first_key = (torch.arange(num_blocks, device=weights.device) - 1) * window + window  # block i-1, padded by w
    columns = first_key.view(num_blocks, 1, 1, 1) + torch.arange(span * window, device=weights.device)  # (nb,1,1,kw)
    dense = weights.new_zeros(batch, num_blocks, heads, window, (num_blocks + 2) * window)
    dense.scatter_(-1, columns.expand_as(blocks).expand(batch, -1, heads, window, -1), blocks)
    dense = dense.permute(0, 2, 1, 3, 4).reshape(batch, heads, num_blocks * window, -1)  # (B, nh, nb*w, (nb+2)w)
    return dense[:, :, :length, window : window + length]


class AttentionState(MixerState):
    """The keys and values (B, nh, T, hd) of the positions an attention layer may still attend to, which of them are
    real (B, T), and the position of the first one. Without a window, positions can be removed again (assisted
    decoding); a window drops old keys, and its cache cannot be rolled back."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, real: torch.Tensor, window: int | None):
        super().__init__(keys, values, real)
        self.window = window
        self.croppable = window is None
        self.weights: torch.Tensor | None = None  # (B, nh, 1, T): the last step's probabilities, when asked

    @property
    def keys(self) -> torch.Tensor:
        return self.tensors[0]  # (B, nh, T, hd), as a transformers cache layer's `keys`

    @property
    def values(self) -> torch.Tensor:
        return self.tensors[1]  # (B, nh, T, hd)

    def crop(self, tokens: int) -> None:
        if not self.croppable:
            super().crop(tokens)
        keys, values, real = self.tensors
        keep = keys.shape[2] - abs(tokens)
        self.tensors = (keys[:, :, :keep], values[:, :, :keep], real[:, :keep])


class RotaryTransformerAttention(nn.Module):
    """Multi-head self-attention with Q/K/V/O biases; full (SDPA/eager via transformers) or block-local. Asked for
    `output_attentions`, it computes the weights with eager attention and returns them too, as (B, nh, L, L)."""

    def __init__(self, config: RotaryTransformerConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.scaling = self.head_dim**-0.5
        self.is_causal = not config.bidirectional
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_bias: torch.Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = hidden_states.shape
        shape = (batch, length, self.num_heads, self.head_dim)
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        key = self.k_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        value = self.v_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        if position_embeddings is not None:
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if output_attentions:
            interface, attention_bias = eager_attention_forward, additive_mask(attention_bias, query.dtype)
        window = self.config.attention_window
        local = window is not None and window < length
        if local:
            span = local_key_blocks(self.is_causal)
            query = to_blocks(query, window, 1)
            key, value = to_blocks(key, window, span), to_blocks(value, window, span)
        dropout = self.config.attention_dropout if self.training else 0.0
        # `is_causal` only tells SDPA how to read a missing mask; local attention always passes its own.
        out, weights = interface(
            self, query, key, value, attention_bias, dropout=dropout, scaling=self.scaling, is_causal=self.is_causal
        )  # (B[*nb], Lq, nh, hd)
        out = self.o_proj(out.reshape(batch, -1, self.num_heads * self.head_dim)[:, :length])  # (B, L, H)
        if not output_attentions:
            return out
        if local:
            weights = dense_local_weights(weights, batch, length, window, self.is_causal)
        return out, weights  # (B, nh, L, L)

    def init_state(self, batch_size: int, device, dtype) -> AttentionState:
        """No keys or values yet: (B, nh, 0, hd), and which cached positions are real (B, 0)."""
        empty = torch.zeros(batch_size, self.num_heads, 0, self.head_dim, device=device, dtype=dtype)
        real = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)
        return AttentionState(empty, empty.clone(), real, self.config.attention_window)

    def step(
        self,
        hidden_state: torch.Tensor,
        state: AttentionState,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        position: int = 0,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, AttentionState]:
        """Attention of one new position (B, H) to the cached ones; for block-local attention only the keys a query
        of this block may see are kept (its block and the previous one), so memory stays bounded by 2w. Asked for
        `output_attentions`, the new state holds the probabilities over its keys (`weights`, (B, nh, 1, T))."""
        batch = hidden_state.shape[0]
        shape = (batch, self.num_heads, 1, self.head_dim)
        query = self.q_proj(hidden_state).view(batch, self.num_heads, self.head_dim).unsqueeze(2)  # (B, nh, 1, hd)
        key = self.k_proj(hidden_state).view(shape)  # (B, nh, 1, hd)
        value = self.v_proj(hidden_state).view(shape)  # (B, nh, 1, hd)
        if position_embeddings is not None:
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        keys, values, real = state.tensors
        is_real = torch.ones(batch, 1, dtype=torch.bool, device=hidden_state.device)
        if attention_mask is not None:
            is_real = attention_mask.view(batch, 1).to(torch.bool)
        keys, values = torch.cat([keys, key], dim=2), torch.cat([values, value], dim=2)  # (B, nh, T, hd)
        real = torch.cat([real, is_real], dim=1)  # (B, T)
        window = self.config.attention_window
        if window is not None:
            first_visible = max(0, (position // window - 1) * window)  # start of the previous block
            drop = keys.shape[2] - (position + 1 - first_visible)
            keys, values, real = keys[:, :, drop:], values[:, :, drop:], real[:, drop:]
        visible = real.clone()
        visible[:, -1] = True  # a query always sees itself (as in the full forward)
        weights = torch.matmul(query, keys.transpose(2, 3)) * self.scaling  # (B, nh, 1, T)
        weights = weights.masked_fill(~visible[:, None, None, :], torch.finfo(weights.dtype).min)
        probs = F.softmax(weights.float(), dim=-1).to(values.dtype)  # (B, nh, 1, T)
        out = torch.matmul(probs, values)  # (B, nh, 1, hd)
        new_state = AttentionState(keys, values, real, window)
        if output_attentions:
            new_state.weights = probs
        return self.o_proj(out.reshape(batch, -1)), new_state


class RotaryTransformerFeedForward(nn.Module):
    """Linear(H, I) -> GELU -> Linear(I, H)."""

    def __init__(self, config: RotaryTransformerConfig, layer_idx: int):
        super().__init__()
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(hidden_states)))


class RotaryTransformerPreTrainedModel(SequencePreTrainedModel):
    config: RotaryTransformerConfig
    _supports_sdpa = True
    _supports_attention_backend = True


class RotaryTransformerModel(SequenceBaseModel, RotaryTransformerPreTrainedModel):
    """Transformer base model: each layer is an attention block then a feed-forward block, each with its residual.

    Packed sequences (position_ids that restart inside a row, no attention_mask: transformers'
    `DataCollatorWithFlattening`) restart the positions and keep each sequence to itself, through transformers' own
    packed-sequence masks (full attention only)."""

    mixer_classes = (RotaryTransformerAttention, RotaryTransformerFeedForward)
    supports_packed_sequences = True

    def _build_extra_modules(self, config: RotaryTransformerConfig) -> None:
        if config.position_embedding_type == "rotary":
            self.rotary_emb = RotaryTransformerRotaryEmbedding(config)

    def _embed(
        self, input_ids, input_values, mask_positions, position_offset: int = 0, position_ids=None, inputs_embeds=None
    ) -> torch.Tensor:
        hidden_states = super()._embed(input_ids, input_values, mask_positions, inputs_embeds=inputs_embeds)
        if self.config.position_embedding_type == "absolute":
            if position_ids is None:
                position_ids = self._positions(hidden_states, position_offset)
            hidden_states = hidden_states + sinusoidal_positions(
                position_ids, hidden_states.shape[-1], hidden_states.dtype
            )
        return hidden_states

    @staticmethod
    def _positions(hidden_states: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return torch.arange(offset, offset + hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)  # (1, L)

    def _step_kwargs(self, hidden_state: torch.Tensor, position: int) -> dict:
        kwargs = {"position": position}
        if self.config.position_embedding_type == "rotary":
            position_ids = torch.tensor([[position]], device=hidden_state.device)  # (1, 1)
            kwargs["position_embeddings"] = self.rotary_emb(hidden_state, position_ids)
        return kwargs

    def _mixer_kwargs(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None, position_ids=None) -> dict:
        batch, length, _ = hidden_states.shape
        kwargs = {}
        if self.config.position_embedding_type == "rotary":
            if position_ids is None:
                position_ids = self._positions(hidden_states)
            kwargs["position_embeddings"] = self.rotary_emb(hidden_states, position_ids)
        window = self.config.attention_window
        if window is not None and window < length:
            if position_ids is not None and padding_mask is None:
                refuse_packed_sequences(position_ids, batch, "block-local attention (`attention_window`)")
            visible = local_attention_mask(
                padding_mask, batch, length, window, self.config.is_causal, hidden_states.device
            )
            if self.config._attn_implementation != "sdpa":
                visible = additive_mask(visible, hidden_states.dtype)
            kwargs["attention_bias"] = visible
        else:
            warn_if_full_attention_is_slow(self.config, hidden_states)
            if self.config.is_causal:  # restarting position_ids without a mask: transformers' packed causal mask
                kwargs["attention_bias"] = create_causal_mask(
                    config=self.config,
                    inputs_embeds=hidden_states,
                    attention_mask=padding_mask,
                    cache=None,
                    position_ids=position_ids,
                    allow_is_causal_skip=not self.training,  # (see below)
                )
            else:
                packed = None
                if position_ids is not None and padding_mask is None:
                    packed = find_packed_sequence_indices(position_ids.expand(batch, -1))  # (B, L) or None
                kwargs["attention_bias"] = create_bidirectional_mask(
                    config=self.config,
                    inputs_embeds=hidden_states,
                    attention_mask=padding_mask,
                    and_mask_function=None if packed is None else packed_sequence_mask_function(packed),
                    # transformers skips an all-real mask after reading it on the host (a GPU sync): not in training
                    allow_is_bidirectional_skip=not self.training,
                )
        return kwargs


class RotaryTransformerForMaskedLM(SequenceForMaskedLM, RotaryTransformerPreTrainedModel):
    base_model_class = RotaryTransformerModel


class RotaryTransformerForCausalLM(SequenceForCausalLM, RotaryTransformerPreTrainedModel, GenerationMixin):
    base_model_class = RotaryTransformerModel


class RotaryTransformerForSequenceClassification(SequenceForSequenceClassification, RotaryTransformerPreTrainedModel):
    base_model_class = RotaryTransformerModel


class RotaryTransformerForRetrieval(SequenceForRetrieval, RotaryTransformerPreTrainedModel):
    base_model_class = RotaryTransformerModel


__all__ = [
    "RotaryTransformerPreTrainedModel",
    "RotaryTransformerModel",
    "RotaryTransformerForMaskedLM",
    "RotaryTransformerForCausalLM",
    "RotaryTransformerForSequenceClassification",
    "RotaryTransformerForRetrieval",
]
