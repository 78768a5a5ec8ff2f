"""Linformer (Wang et al., 2020) as an spt_hf architecture: the spt_hf Transformer with low-rank attention

    head_i = softmax(Q_i (E_i K_i)ᵀ / √d) (F_i V_i),   E_i, F_i of shape (k, n),

keys and values projected along the sequence from n = `max_position_embeddings` positions to k = `projected_length`,
so time and memory are O(L k) instead of O(L²). An input of length L <= n uses the first L columns of E and F (as the
authors' code does); padded keys and values are zeroed before the projection, so padding changes nothing. The key and
value biases are added after the projection, as in fairseq's `(E X) Wᵀ + 1 bᵀ`: K' = E R(X W_kᵀ) + 1 b_kᵀ and
V' = F (X W_vᵀ) + 1 b_vᵀ, with R the rotary positions, which must be applied before the projection mixes positions
(`bias_after_projection=False`, the order of checkpoints saved before that field: E (X Wᵀ + 1 bᵀ)). Positions, the
feed-forward block and the base model are the Transformer's (modeling_rotary_transformer.py).
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_linformer import LinformerConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_rotary_transformer import (
    RotaryTransformerFeedForward,
    RotaryTransformerModel,
    apply_rotary_pos_emb,
    eager_attention_forward,
)
from .modeling_sequence import SequencePreTrainedModel


def init_sequence_projection(projection: Tensor) -> None:
    """Xavier-uniform with gain 1/√2 over (k, n), the Linformer authors' init (fairseq `MultiheadLinearAttention`),
    for one matrix (k, n) or one per head (nh, k, n)."""
    rows, columns = projection.shape[-2:]
    bound = math.sqrt(6.0 / (rows + columns)) / math.sqrt(2.0)
    init.uniform_(projection, -bound, bound)


class LinformerAttention(nn.Module):
    """Multi-head attention over keys and values projected along the sequence to `projected_length` positions.

    The projections live here (`projection_sharing` "none": one (k, n) pair per head, "headwise": one pair, "key-value":
    one matrix), or in the base model ("layerwise", passed as `shared_projection`). With `output_attentions`, the
    weights over the k projected positions, (B, nh, L, k), are returned too.
    """

    def __init__(self, config: LinformerConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        hidden = config.hidden_size
        self.q_proj, self.k_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.v_proj, self.o_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        shape = (config.projected_length, config.max_position_embeddings)  # (k, n)
        sharing = config.projection_sharing
        if sharing == "none":
            shape = (self.num_heads, *shape)  # (nh, k, n)
        if sharing != "layerwise":
            self.key_projection = nn.Parameter(torch.empty(shape))  # E
        if sharing in ("none", "headwise"):
            self.value_projection = nn.Parameter(torch.empty(shape))  # F
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        for name in ("key_projection", "value_projection"):
            if hasattr(self, name):
                init_sequence_projection(getattr(self, name))

    def projections(self, shared_projection: Tensor | None) -> tuple[Tensor, Tensor]:
        """(E, F), each (k, n) or (nh, k, n)."""
        if self.config.projection_sharing == "layerwise":
            if shared_projection is None:
                raise ValueError("`projection_sharing='layerwise'` needs the base model's `shared_projection`.")
            return shared_projection, shared_projection
        keys = self.key_projection
        return keys, getattr(self, "value_projection", keys)

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        position_embeddings: tuple[Tensor, Tensor] | None = None,
        shared_projection: Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> Tensor | tuple[Tensor, Tensor]:
        batch, length, _ = hidden_states.shape
        limit = self.config.max_position_embeddings
        if length > limit:
            raise ValueError(
                f"spt_linformer projects keys and values from a fixed maximum length `max_position_embeddings`={limit}"
                f" (its matrices E, F have that many columns); got an input of length {length}. Truncate the inputs "
                "or build the model with a larger `max_position_embeddings`."
            )
        shape = (batch, length, self.num_heads, self.head_dim)
        after = self.config.bias_after_projection  # the key and value biases are added to the projected sequence
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (B, nh, L, hd)
        key = F.linear(hidden_states, self.k_proj.weight, None if after else self.k_proj.bias)
        value = F.linear(hidden_states, self.v_proj.weight, None if after else self.v_proj.bias)
        key, value = key.view(shape).transpose(1, 2), value.view(shape).transpose(1, 2)  # (B, nh, L, hd)
        if position_embeddings is not None:
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        if attention_mask is not None:  # padded keys and values (biases, rotations) must not enter the projection
            real = attention_mask[:, None, :, None].to(key.dtype)  # (B, 1, L, 1)
            key, value = key * real, value * real
        key_proj, value_proj = (p[..., :length].to(key.dtype) for p in self.projections(shared_projection))
        key, value = key_proj @ key, value_proj @ value  # (k, L) or (nh, k, L) @ (B, nh, L, hd) -> (B, nh, k, hd)
        if after:  # + 1 bᵀ on each of the k projected positions
            heads = (self.num_heads, 1, self.head_dim)
            key = key + self.k_proj.bias.view(heads).to(key.dtype)
            value = value + self.v_proj.bias.view(heads).to(value.dtype)
        interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if output_attentions:
            interface = eager_attention_forward
        dropout = self.config.attention_dropout if self.training else 0.0
        out, weights = interface(self, query, key, value, None, dropout=dropout, scaling=self.scaling, is_causal=False)
        out = self.o_proj(out.reshape(batch, length, self.num_heads * self.head_dim))  # (B, L, H)
        return (out, weights) if output_attentions else out


# ----------------------------------------------------------------------------------------------------------------
# Models: the Transformer's base model with this attention, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class LinformerPreTrainedModel(SequencePreTrainedModel):
    config: LinformerConfig
    _supports_sdpa = True
    _supports_attention_backend = True


class LinformerModel(RotaryTransformerModel, LinformerPreTrainedModel):
    """Linformer base model: the Transformer's (positions, GELU feed-forward blocks) with low-rank attention."""

    config: LinformerConfig
    mixer_classes = (LinformerAttention, RotaryTransformerFeedForward)
    supports_packed_sequences = False  # its mixers do not honour transformers' packed-sequence masks

    def _build_extra_modules(self, config: LinformerConfig) -> None:
        super()._build_extra_modules(config)
        if config.projection_sharing == "layerwise":  # one E = F for every layer
            self.shared_projection = nn.Parameter(torch.empty(config.projected_length, config.max_position_embeddings))

    def _init_spt_weights(self) -> None:
        if hasattr(self, "shared_projection"):
            init_sequence_projection(self.shared_projection)

    def _mixer_kwargs(self, hidden_states: Tensor, padding_mask: Tensor | None, position_ids=None) -> dict:
        """Rotary angles and the layerwise projection; no (L, L) mask: padding is handled inside the attention."""
        kwargs = {}
        if self.config.position_embedding_type == "rotary":
            position_ids = self._positions(hidden_states) if position_ids is None else position_ids
            kwargs["position_embeddings"] = self.rotary_emb(hidden_states, position_ids)
        if hasattr(self, "shared_projection"):
            kwargs["shared_projection"] = self.shared_projection
        return kwargs


class LinformerForMaskedLM(SequenceForMaskedLM, LinformerPreTrainedModel):
    base_model_class = LinformerModel


class LinformerForCausalLM(SequenceForCausalLM, LinformerPreTrainedModel, GenerationMixin):
    """Declared for the Auto classes; building it raises: Linformer has no causal form."""

    base_model_class = LinformerModel


class LinformerForSequenceClassification(SequenceForSequenceClassification, LinformerPreTrainedModel):
    base_model_class = LinformerModel


class LinformerForRetrieval(SequenceForRetrieval, LinformerPreTrainedModel):
    base_model_class = LinformerModel


__all__ = [
    "LinformerPreTrainedModel",
    "LinformerModel",
    "LinformerForMaskedLM",
    "LinformerForCausalLM",
    "LinformerForSequenceClassification",
    "LinformerForRetrieval",
]
