"""The generation cache holds whatever state a plugin's mixer returns: beam search's batch operations reach every
tensor of it, and a state it cannot reach is one line naming what to return."""

import pytest
import torch

from spt_hf.modeling.cache import MixerState, SequenceCache, map_state_batch

BEAMS = torch.tensor([1, 1, 0])


def batch(width: int = 2) -> torch.Tensor:
    return torch.arange(3 * width, dtype=torch.float32).view(3, width)  # (B=3, width): row b holds b's values


@pytest.mark.parametrize(
    "state, tensors_of",
    [
        (batch(), lambda state: [state]),
        ((batch(), batch(4)), list),
        ([batch(), batch(4)], list),
        ({"sum": batch(), "count": batch(1)}, lambda state: list(state.values())),
        (MixerState(batch(), torch.tensor(5.0)), lambda state: list(state.tensors[:1])),
    ],
    ids=["tensor", "tuple", "list", "dict", "MixerState"],
)
def test_beam_search_reorders_every_tensor_of_a_state(state, tensors_of):
    expected = [tensor.index_select(0, BEAMS) for tensor in tensors_of(state)]
    cache = SequenceCache([[state, None]])
    assert cache.layers[0].batch_size == 3
    cache.reorder_cache(BEAMS)
    reordered = cache.layers[0].states
    assert reordered[1] is None and type(reordered[0]) is type(state)
    assert all(torch.equal(a, b) for a, b in zip(tensors_of(reordered[0]), expected, strict=True))
    cache.layers[0].batch_repeat_interleave(2)
    assert cache.layers[0].batch_size == 6


def test_a_zero_dimensional_tensor_is_kept():
    step = torch.tensor(7)
    assert map_state_batch(step, lambda t: t[:0]) is step


def test_a_state_of_another_kind_is_one_line_naming_what_to_return():
    class Opaque:
        pass

    with pytest.raises(TypeError, match="type Opaque cannot be reordered for beam search: return a tensor") as error:
        SequenceCache([[Opaque()]]).reorder_cache(BEAMS)
    assert "\n" not in str(error.value)


def test_a_plain_recurrent_state_refuses_to_give_back_positions():
    with pytest.raises(ValueError, match="Tensor: a recurrent state holds no history"):
        SequenceCache([[batch()]]).crop(-1)
