"""Throwaway mixers for the plugin tests: one that keeps the contract, and ones that break one property each."""

import torch
from torch import nn

from spt_hf.modeling.cache import MixerState
from spt_hf.modeling.configuration_sequence import SequenceModelConfig
from spt_hf.modeling.mixer import SequenceMixer


class ToyConfig(SequenceModelConfig):
    """A running-sum mixer's config (the plugin tests' own architecture)."""

    model_type = "toy_running_sum"
    max_position_embeddings: int = 1024
    decay: float = 0.5


class ToyMixer(SequenceMixer):
    """y_t = W Σ_{s<=t} decay^(t-s) x_s (causal), plus the same sum from the right when bidirectional."""

    def __init__(self, config: ToyConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def scan(self, x: torch.Tensor) -> torch.Tensor:
        """The decayed running sum over positions of (B, L, H)."""
        length = x.shape[1]
        exponents = torch.arange(length, device=x.device)
        decays = self.config.decay ** (exponents[:, None] - exponents[None, :]).clamp(min=0).to(x.dtype)
        weights = torch.tril(decays)  # (L, L): weights[t, s] for s <= t
        return torch.einsum("ts,bsh->bth", weights, x)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        out = self.scan(hidden_states)
        if not self.is_causal:
            out = out + self.scan(hidden_states.flip(1)).flip(1)
        return self.proj(out)

    def init_state(self, batch_size, device=None, dtype=None):
        return torch.zeros(batch_size, self.hidden_size, device=device, dtype=dtype or torch.float32)

    def step(self, hidden_state, state, attention_mask=None, **kwargs):
        state = self.config.decay * state + hidden_state
        return self.proj(state), state


class PeekingMixer(ToyMixer):
    """Broken: in causal mode it also reads the next position."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states) + torch.roll(hidden_states, -1, dims=1)


class PaddingPoolingMixer(ToyMixer):
    """Broken: adds the mean over every position, padding included (so more padding changes real outputs)."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states) + hidden_states.mean(1, keepdim=True)


@torch.library.custom_op("toy_plugin::opaque_scan", mutates_args=())
def opaque_scan(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A running sum times `weight`, as one operator torch's FLOP counter has no formula for."""
    return x.cumsum(1) @ weight


@torch.library.custom_op("toy_plugin::opaque_scan_backward", mutates_args=())
def opaque_scan_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    """The gradients of `opaque_scan` (input, weight), as one operator the counter has no formula for either."""
    grad_x = (grad @ weight.T).flip(1).cumsum(1).flip(1)
    return [grad_x, x.cumsum(1).flatten(0, 1).T @ grad.flatten(0, 1)]


def _opaque_scan_backward(ctx, grad):
    return tuple(opaque_scan_backward(grad, *ctx.saved_tensors))


def _opaque_scan_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


opaque_scan.register_autograd(_opaque_scan_backward, setup_context=_opaque_scan_context)


class OpaqueMixer(ToyMixer):
    """Broken: its work (a causal running sum and a projection) runs in a custom operator that escapes the counter."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return opaque_scan(hidden_states, self.proj.weight.T)


class PairStateMixer(ToyMixer):
    """Keeps the contract with a tuple state: the running sum and the step count (a plugin's own state shape)."""

    def init_state(self, batch_size, device=None, dtype=None):
        return super().init_state(batch_size, device, dtype), torch.zeros(batch_size, dtype=torch.long, device=device)

    def step(self, hidden_state, state, attention_mask=None, **kwargs):
        output, running = super().step(hidden_state, state[0])
        return output, (running, state[1] + 1)


class RunningSum:
    """A state container that is neither a tensor nor a MixerState."""

    def __init__(self, total: torch.Tensor):
        self.total = total


class OpaqueStateMixer(ToyMixer):
    """Broken for beam search: its state is an object spt_hf cannot reorder (no `map_batch`)."""

    def init_state(self, batch_size, device=None, dtype=None):
        return RunningSum(super().init_state(batch_size, device, dtype))

    def step(self, hidden_state, state, attention_mask=None, **kwargs):
        output, total = super().step(hidden_state, state.total)
        return output, RunningSum(total)


class UnorderedState(MixerState):
    """Broken: ignores the batch operations (beam search continues each beam from another beam's state)."""

    def map_batch(self, function):
        pass


class UnorderedStateMixer(ToyMixer):
    """Broken for beam search: its state does not follow the beams' reordering."""

    def init_state(self, batch_size, device=None, dtype=None):
        return UnorderedState(super().init_state(batch_size, device, dtype))

    def step(self, hidden_state, state, attention_mask=None, **kwargs):
        output, total = super().step(hidden_state, state.tensors[0])
        return output, UnorderedState(total)
