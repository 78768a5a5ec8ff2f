"""SPADE (Zuo et al., 2022), the state space augmented Transformer, as an spt_hf architecture.

Every layer is the spt_hf Transformer's pair of residual blocks (attention, then GELU feed-forward) with block-local
attention. In the bottom layer the attention block's mixer also runs an S4 branch on the same input, and combines the
two as SPADE's released run does (`--s4-local-combine concat`):

    Y = W [LN(S(X)), LN(LocalAttention(X))] + b,   W (H, 2H)

so the global information of the SSM enters once, at the bottom, and the local attention of the layers above refines
it. The branch S is released SPADE's: its S4 is built without the pointwise block, S(X) = K * X + D ⊙ X (the S4
convolution and skip, no activation or output layer). With `s4_pointwise=True` (and in checkpoints saved before that
field existed) S is spt_hf's whole S4 layer, GLU(Linear(GELU(K * X + D ⊙ X))). Either way the kernel K is spt_hf's S4
(modeling_s4.S4Mixer, imported, not copied). Positions, masks and the feed-forward blocks are the Transformer's
(modeling_rotary_transformer.py).
"""

import torch
from torch import Tensor, nn
from transformers import GenerationMixin

from .cache import MixerState
from .configuration_spade import SpadeConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_rotary_transformer import (
    AttentionState,
    RotaryTransformerAttention,
    RotaryTransformerFeedForward,
    RotaryTransformerModel,
)
from .modeling_s4 import S4Mixer
from .modeling_sequence import SequencePreTrainedModel


class SpadeState(MixerState):
    """The bottom layer's state: the local attention's keys and values and the S4 branch's recurrent state. The S4
    state holds no history, so positions cannot be removed again."""

    def __init__(self, attention: AttentionState, ssm: MixerState):
        super().__init__(*attention.tensors, *ssm.tensors)
        self.attention, self.ssm = attention, ssm

    def map_batch(self, function) -> None:
        self.attention.map_batch(function)
        self.ssm.map_batch(function)
        self.tensors = (*self.attention.tensors, *self.ssm.tensors)


class SpadeGlobalBranch(S4Mixer):
    """The bottom layer's S4 branch: K * u + D ⊙ u (released SPADE), or spt_hf's whole S4 layer with
    `s4_pointwise=True` (GELU, dropout, Linear(H, 2H), GLU). Same parameter names as the S4 layer, so checkpoints of
    either form load into it."""

    def __init__(self, config: SpadeConfig, layer_idx: int):
        super().__init__(config.s4_config(), layer_idx)
        self.pointwise = config.s4_pointwise
        if not self.pointwise:  # the linear branch: no activation, dropout or output layer
            del self.dropout, self.output_linear

    def _output(self, y: Tensor) -> Tensor:
        return super()._output(y) if self.pointwise else y


class SpadeMixer(nn.Module):
    """Block-local attention; in the bottom layer (`layer_idx == 0`) also the S4 branch (`SpadeGlobalBranch`) and the
    concat combination.
    With `output_attentions`, also the local attention's weights (B, nh, L, L)."""

    def __init__(self, config: SpadeConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.attention = RotaryTransformerAttention(config, layer_idx)
        self.has_ssm = layer_idx == 0
        if self.has_ssm:
            hidden = config.hidden_size
            self.ssm = SpadeGlobalBranch(config, layer_idx)
            self.norm_global = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
            self.norm_local = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
            self.aggregate = nn.Linear(2 * hidden, hidden)

    def combine(self, global_part: Tensor, local_part: Tensor) -> Tensor:
        """W [LN(global), LN(local)] + b: (..., H), (..., H) -> (..., H)."""
        return self.aggregate(torch.cat([self.norm_global(global_part), self.norm_local(local_part)], dim=-1))

    def forward(
        self, hidden_states: Tensor, attention_mask: Tensor | None = None, output_attentions: bool = False, **kwargs
    ) -> Tensor | tuple[Tensor, Tensor]:
        local = self.attention(
            hidden_states, attention_mask=attention_mask, output_attentions=output_attentions, **kwargs
        )
        local, weights = local if output_attentions else (local, None)
        out = self.combine(self.ssm(hidden_states), local) if self.has_ssm else local  # (B, L, H)
        return (out, weights) if output_attentions else out

    def init_state(self, batch_size: int, device, dtype) -> MixerState:
        attention = self.attention.init_state(batch_size, device, dtype)
        if not self.has_ssm:
            return attention
        return SpadeState(attention, self.ssm.init_state(batch_size, device, dtype))

    def step(self, hidden_state: Tensor, state: MixerState, attention_mask=None, **kwargs):
        """One position (B, H) -> (output (B, H), new state); equals `forward` position by position (eval mode)."""
        if not self.has_ssm:
            return self.attention.step(hidden_state, state, attention_mask, **kwargs)
        local, attention = self.attention.step(hidden_state, state.attention, attention_mask, **kwargs)
        global_part, ssm = self.ssm.step(hidden_state, state.ssm, attention_mask)
        return self.combine(global_part, local), SpadeState(attention, ssm)


# ----------------------------------------------------------------------------------------------------------------
# Models: the Transformer's base model with this mixer, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class SpadePreTrainedModel(SequencePreTrainedModel):
    config: SpadeConfig
    _supports_sdpa = True
    _supports_attention_backend = True
    _is_stateful = True  # the S4 state cannot be rolled back: transformers refuses assisted decoding


class SpadeModel(RotaryTransformerModel, SpadePreTrainedModel):
    """SPADE base model: the Transformer's (positions, local-attention masks, GELU feed-forward blocks) with the S4
    branch in the bottom layer's attention block."""

    config: SpadeConfig
    mixer_classes = (SpadeMixer, RotaryTransformerFeedForward)
    supports_packed_sequences = False  # its mixers do not honour transformers' packed-sequence masks


class SpadeForMaskedLM(SequenceForMaskedLM, SpadePreTrainedModel):
    base_model_class = SpadeModel


class SpadeForCausalLM(SequenceForCausalLM, SpadePreTrainedModel, GenerationMixin):
    base_model_class = SpadeModel


class SpadeForSequenceClassification(SequenceForSequenceClassification, SpadePreTrainedModel):
    base_model_class = SpadeModel


class SpadeForRetrieval(SequenceForRetrieval, SpadePreTrainedModel):
    base_model_class = SpadeModel


__all__ = [
    "SpadePreTrainedModel",
    "SpadeModel",
    "SpadeForMaskedLM",
    "SpadeForCausalLM",
    "SpadeForSequenceClassification",
    "SpadeForRetrieval",
]
