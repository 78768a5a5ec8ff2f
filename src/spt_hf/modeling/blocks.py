"""Building blocks shared by every spt_hf architecture: input embedding, padding-aware norms, the residual block.

The residual block does not know which sequence mixer it wraps (as in Mamba's block): every architecture (S4, DLR, the
Transformer, MEGA, SPADE, Linformer, Performer) injects its mixers, so everything outside the mixer is identical
across architectures.
"""

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

from .configuration_sequence import SequenceModelConfig


def _global_sum(stats: torch.Tensor) -> torch.Tensor:
    """Sum over the processes of torch.distributed (SyncBatchNorm's statistics), with the all-reduce's gradient; a
    functional collective, which torch.compile traces. Unchanged without a process group."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return stats
    from torch.distributed import _functional_collectives as funcol

    return funcol.all_reduce(stats, "sum", torch.distributed.group.WORLD)


class MaskedBatchNorm(nn.Module):
    """BatchNorm over the channels of (B, L, H) whose statistics exclude padded positions.

    Matches `nn.BatchNorm1d` (biased variance to normalise, unbiased variance in the running estimate, momentum
    0.1) when nothing is padded. Under torch.distributed the statistics cover the global batch (SyncBatchNorm).
    Statistics in float32 by two passes over the real positions (the mean, then the mean square deviation from it),
    each summed over the processes: as accurate as float64 sums of x and x² whatever the mean, without float64
    copies of the activation; one float32 copy of the centred activation serves the variance and the output.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.register_buffer("running_mean", torch.zeros(hidden_size))
        self.register_buffer("running_var", torch.ones(hidden_size))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        dtype = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
        if not self.training:
            scale = self.weight * torch.rsqrt(self.running_var + self.eps)  # (H,)
            return ((hidden_states.to(dtype) - self.running_mean) * scale + self.bias).to(hidden_states.dtype)
        flat = hidden_states.reshape(-1, hidden_states.shape[-1]).to(dtype)  # (B*L, H)
        if padding_mask is None:
            real = None
            count = torch.full((1,), flat.shape[0], dtype=dtype, device=flat.device)
            sums = flat.sum(0)  # (H,)
        else:
            real = padding_mask.reshape(-1, 1).to(torch.bool)  # (B*L, 1): masked sums, no data-dependent shape
            count = real.sum(0).to(dtype)  # (1,)
            sums = torch.where(real, flat, 0.0).sum(0)  # (H,)
        totals = _global_sum(torch.cat([sums, count]))  # (H+1,)
        count = totals[-1:].clamp(min=1.0)
        mean = totals[:-1] / count  # (H,)
        centred = flat - mean  # (B*L, H): the one copy, kept for the backward of both uses
        squares = centred.square() if real is None else torch.where(real, centred.square(), 0.0)
        var = _global_sum(squares.sum(0)) / count  # (H,) biased
        with torch.no_grad():
            unbiased = var * count / (count - 1).clamp(min=1.0)
            self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), self.momentum)
            self.running_var.lerp_(unbiased.detach().to(self.running_var.dtype), self.momentum)
            self.num_batches_tracked.add_(1)
        out = centred * (self.weight * torch.rsqrt(var + self.eps)) + self.bias  # (B*L, H)
        return out.view(hidden_states.shape).to(hidden_states.dtype)


class SequenceNorm(nn.Module):
    """LayerNorm or padding-aware BatchNorm over the last (channel) dimension, chosen by `config.norm_type`."""

    def __init__(self, config: SequenceModelConfig):
        super().__init__()
        if config.norm_type == "layernorm":
            self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        else:
            self.norm = MaskedBatchNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(self.norm, MaskedBatchNorm):
            return self.norm(hidden_states, padding_mask)
        return self.norm(hidden_states)


class SequenceEmbeddings(nn.Module):
    """Token embedding (`input_ids`) or linear projection of continuous inputs (`input_values`, (B, L, C)).

    For continuous inputs a learned mask vector replaces the projected value at `mask_positions` (masked SPT). This
    equals the official code's "zero the value and add a mask channel" up to a reparameterisation, and keeps the
    input shape identical between pretraining and finetuning (as wav2vec2's masked embedding).
    """

    def __init__(self, config: SequenceModelConfig):
        super().__init__()
        self.config = config
        if config.is_token_input:
            self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        else:
            self.input_projection = nn.Linear(config.num_channels, config.hidden_size)
            self.mask_embedding = nn.Parameter(torch.zeros(config.hidden_size))

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        input_values: torch.Tensor | None = None,
        mask_positions: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, L, H) from tokens, continuous values, or `inputs_embeds` given instead of the embedding lookup or
        projection (the mask vector still replaces `mask_positions`)."""
        if inputs_embeds is not None:
            hidden_states = inputs_embeds  # (B, L, H)
        elif self.config.is_token_input:
            return self.word_embeddings(input_ids)  # (B, L, H)
        else:
            hidden_states = self.input_projection(input_values)  # (B, L, H)
        if mask_positions is not None and not self.config.is_token_input:
            mask = mask_positions.unsqueeze(-1).to(torch.bool)  # (B, L, 1)
            hidden_states = torch.where(mask, self.mask_embedding.to(hidden_states.dtype), hidden_states)
        return hidden_states

    def _init_spt_weights(self) -> None:
        if hasattr(self, "mask_embedding"):
            from transformers import initialization as init

            init.normal_(self.mask_embedding, std=self.config.initializer_range)


class ResidualBlock(nn.Module):
    """Pre-norm `x + Dropout(Mixer(Norm(x)))` or post-norm `Norm(x + Dropout(Mixer(x)))` around any mixer.

    Padded positions are zeroed before the mixer, so no mixer (convolution or attention) reads padding. A mixer whose
    update depends on the residual stream itself (MEGA's gate `u ⊙ (H - x)`) sets `reads_residual = True` and is
    also given `residual=x`, the block input before the norm.
    """

    def __init__(self, config: SequenceModelConfig, mixer: nn.Module):
        super().__init__()
        self.prenorm = config.prenorm
        self.norm = SequenceNorm(config)
        self.mixer = mixer
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None, **mixer_kwargs):
        residual = hidden_states  # (B, L, H)
        if self.prenorm:
            hidden_states = self.norm(hidden_states, padding_mask)
        if padding_mask is not None:
            hidden_states = hidden_states * padding_mask.unsqueeze(-1).to(hidden_states.dtype)
        if getattr(self.mixer, "reads_residual", False):
            mixer_kwargs = {**mixer_kwargs, "residual": residual}
        mixed = self.mixer(hidden_states, attention_mask=padding_mask, **mixer_kwargs)
        weights = None
        if isinstance(mixed, tuple):  # attention mixers asked for `output_attentions` also return their weights
            mixed, weights = mixed
        hidden_states = residual + self.dropout(mixed)
        if not self.prenorm:
            hidden_states = self.norm(hidden_states, padding_mask)
        return hidden_states, weights

    def init_state(self, batch_size: int, device, dtype):
        """The mixer's `MixerState` for generation; None for position-wise mixers (feed-forward)."""
        if hasattr(self.mixer, "step"):
            return self.mixer.init_state(batch_size, device, dtype)
        return None

    def step(self, hidden_state: torch.Tensor, state, padding_mask: torch.Tensor | None = None, **mixer_kwargs):
        """One position (B, H) through the block, in eval mode; returns the output and the mixer's new state."""
        residual = hidden_state  # (B, H)
        if self.prenorm:
            hidden_state = self.norm(hidden_state)
        if padding_mask is not None:
            hidden_state = hidden_state * padding_mask.unsqueeze(-1).to(hidden_state.dtype)
        if getattr(self.mixer, "reads_residual", False):
            mixer_kwargs = {**mixer_kwargs, "residual": residual}
        if state is None:
            mixed = self.mixer(hidden_state.unsqueeze(1)).squeeze(1)  # position-wise: (B, 1, H) -> (B, H)
        else:
            mixed, state = self.mixer.step(hidden_state, state, attention_mask=padding_mask, **mixer_kwargs)
        hidden_state = residual + self.dropout(mixed)
        if not self.prenorm:
            hidden_state = self.norm(hidden_state)
        return hidden_state, state


class SequenceLayer(GradientCheckpointingLayer):
    """One layer: a residual block per mixer (S4/DLR: the SSM layer; Transformer: attention, then feed-forward)."""

    def __init__(self, config: SequenceModelConfig, layer_idx: int, mixer_classes: tuple[type[nn.Module], ...]):
        super().__init__()
        self.layer_idx = layer_idx
        self.blocks = nn.ModuleList(ResidualBlock(config, cls(config, layer_idx)) for cls in mixer_classes)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None, **mixer_kwargs):
        """(B, L, H) -> (B, L, H), and the attention weights of its attention block (None for other mixers)."""
        attentions = None
        for block in self.blocks:
            hidden_states, weights = block(hidden_states, padding_mask, **mixer_kwargs)
            attentions = weights if weights is not None else attentions
        return hidden_states, attentions

    def init_state(self, batch_size: int, device, dtype) -> list:
        return [block.init_state(batch_size, device, dtype) for block in self.blocks]

    def step(self, hidden_state: torch.Tensor, states: list, padding_mask=None, **mixer_kwargs):
        """One position (B, H) through every block; `states` holds one entry per block and is updated in place."""
        for index, block in enumerate(self.blocks):
            hidden_state, states[index] = block.step(hidden_state, states[index], padding_mask, **mixer_kwargs)
        return hidden_state
