"""The generation cache of spt_hf's causal models: what every mixer carries from one position to the next.

A transformers `Cache` whose layers hold, for each residual block of a `SequenceLayer`, the state its mixer's `step`
returns (None for position-wise blocks such as the feed-forward): the recurrent state of an SSM (O(1) memory per
token), or the keys and values of attention (bounded by the window for block-local attention). A state is a
`MixerState`, a tensor (batch first), or a tuple, list or dict of them (`map_state_batch`); a plugin's mixer may
return any of these. transformers' generation uses it like its own caches: beam search reorders it,
`num_return_sequences` repeats it, assisted decoding crops it where that is possible (attention without a window) and
refuses otherwise (recurrent states cannot be rolled back: `_is_stateful`).
"""

from collections.abc import Callable

import torch
from torch import Tensor
from transformers.cache_utils import Cache


class MixerState:
    """Tensors a mixer carries between positions, batch first. Recurrent states cannot give back positions."""

    croppable = False

    def __init__(self, *tensors: Tensor):
        self.tensors = tuple(tensors)

    def map_batch(self, function: Callable[[Tensor], Tensor]) -> None:
        """Apply a batch operation (selection, repetition) to every tensor."""
        self.tensors = tuple(function(t) if torch.is_tensor(t) and t.dim() else t for t in self.tensors)

    def crop(self, tokens: int) -> None:
        """Forget the last `tokens` positions."""
        raise ValueError(
            f"{type(self).__name__}: a recurrent state holds no history, so positions cannot be removed from it."
        )


def map_state_batch(state, function: Callable[[Tensor], Tensor]):
    """`state` with a batch operation (selection, repetition) applied to each of its tensors: a `MixerState` (or any
    object with `map_batch`) in place, a tensor (batch first; a 0-d tensor is kept), or a tuple, list or dict of
    these. Any other state is one TypeError naming what to return instead."""
    if hasattr(state, "map_batch"):
        state.map_batch(function)
        return state
    if torch.is_tensor(state):
        return function(state) if state.dim() else state
    if isinstance(state, tuple | list):
        return type(state)(map_state_batch(item, function) for item in state)
    if isinstance(state, dict):
        return {key: map_state_batch(item, function) for key, item in state.items()}
    raise TypeError(
        f"A mixer's generation state of type {type(state).__name__} cannot be reordered for beam search: return a "
        "tensor (batch first), a tuple of tensors, or a spt_hf.modeling.cache.MixerState (or implement "
        "`map_batch(function)`) from init_state/step."
    )


def state_tensors(state) -> list[Tensor]:
    """The tensors of at least one dimension (batch first) that `state` holds (`map_state_batch`'s kinds)."""
    if torch.is_tensor(state):
        return [state] if state.dim() else []
    if isinstance(state, tuple | list | dict):
        items = state.values() if isinstance(state, dict) else state
        return [tensor for item in items for tensor in state_tensors(item)]
    return state_tensors(tuple(getattr(state, "tensors", ())))


class SequenceCacheLayer:
    """The states of one SequenceLayer's blocks (None for position-wise blocks)."""

    is_compileable = False
    supports_early_init = False
    is_sliding = False

    def __init__(self, states: list):
        self.states = states

    def _states(self) -> list:
        return [state for state in self.states if state is not None]

    def _map_batch(self, function: Callable[[Tensor], Tensor]) -> None:
        self.states = [None if state is None else map_state_batch(state, function) for state in self.states]

    def _attention_state(self) -> MixerState:
        held = [state for state in self._states() if hasattr(state, "keys")]
        if len(held) != 1:
            raise AttributeError(
                f"{type(self).__name__}: this layer holds no attention keys and values (a recurrent state)"
            )
        return held[0]

    @property
    def keys(self) -> Tensor:
        """The keys (B, nh, T, hd) of the layer's attention, as transformers' attention cache layers hold them; an
        AttributeError for a layer whose mixer keeps a recurrent state instead."""
        return self._attention_state().keys

    @property
    def values(self) -> Tensor:
        return self._attention_state().values

    @property
    def is_croppable(self) -> bool:
        return all(getattr(state, "croppable", False) for state in self._states())

    @property
    def is_initialized(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        tensors = state_tensors(self._states())
        return tensors[0].shape[0] if tensors else -1

    def get_max_length(self) -> int:
        return -1

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices.to(t.device)])

    def crop(self, tokens_to_remove: int) -> None:
        for state in self._states():
            if not hasattr(state, "crop"):
                raise ValueError(
                    f"{type(state).__name__}: a recurrent state holds no history, so positions cannot be removed."
                )
            state.crop(tokens_to_remove)

    def offload(self) -> None:
        pass

    def prefetch(self) -> None:
        pass


class SequenceCache(Cache):
    """The state of every mixer after the positions seen so far (`seen_tokens`). It starts empty and is filled by
    the first forward pass that uses it, with the batch size of its inputs."""

    def __init__(self, layer_states: list[list] | None = None):
        super().__init__(layers=[SequenceCacheLayer(states) for states in layer_states or []])
        self.seen_tokens = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    @property
    def is_initialized(self) -> bool:
        return bool(self.layers)

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last `-tokens_to_remove` positions (transformers' convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError(f"`crop` takes a negative number of positions to remove, got {tokens_to_remove}.")
        if tokens_to_remove == 0:
            return
        super().crop(tokens_to_remove)
        self.seen_tokens += tokens_to_remove

    def reset(self) -> None:
        self.layers, self.seen_tokens = [], 0
