"""The conformance kit (`spt_hf.testing.MixerConformance`) on spt_hf's own architectures and a toy plugin mixer; a
mixer that breaks a property fails the kit's test that names it."""

import pytest
from toy_mixers import (
    OpaqueMixer,
    OpaqueStateMixer,
    PaddingPoolingMixer,
    PairStateMixer,
    PeekingMixer,
    ToyConfig,
    ToyMixer,
    UnorderedStateMixer,
)

from spt_hf.modeling.configuration_dlr import DLRConfig
from spt_hf.modeling.configuration_rotary_transformer import RotaryTransformerConfig
from spt_hf.modeling.configuration_s4 import S4Config
from spt_hf.testing import MixerConformance


class BuiltinConformance(MixerConformance):
    """The kit on spt_hf's own architectures; their remote-code load is also checked, in one process for all
    families, by tests/models/test_auto_classes.py, so the kit's (a process each) runs with the slow tests."""

    @pytest.mark.slow
    def test_remote_code_loads_without_spt_hf(self, architecture, tmp_path):
        super().test_remote_code_loads_without_spt_hf(architecture, tmp_path)


class TestS4(BuiltinConformance):
    config_class = S4Config
    tiny_config = {"state_size": 8, "max_position_embeddings": 16}


class TestDLR(BuiltinConformance):
    config_class = DLRConfig
    tiny_config = {"state_size": 8}


class TestTransformer(BuiltinConformance):
    config_class = RotaryTransformerConfig
    tiny_config = {"num_attention_heads": 2, "intermediate_size": 32}
    preset_name = "transformer"


class TestToyPlugin(MixerConformance):
    config_class = ToyConfig
    mixer_class = ToyMixer


class PeekingConfig(ToyConfig):
    model_type = "toy_peeking"


class PaddingConfig(ToyConfig):
    model_type = "toy_padding_pooling"


class OpaqueConfig(ToyConfig):
    model_type = "toy_opaque"


class PairStateConfig(ToyConfig):
    model_type = "toy_pair_state"


class OpaqueStateConfig(ToyConfig):
    model_type = "toy_opaque_state"


class UnorderedStateConfig(ToyConfig):
    model_type = "toy_unordered_state"


def test_beam_search_reorders_a_tuple_state():
    """The toy plugin's state is a plain tensor (TestToyPlugin); this one's is a tuple of tensors."""
    from spt_hf.testing import registered

    kit = type("Pair", (MixerConformance,), {"config_class": PairStateConfig, "mixer_class": PairStateMixer})()
    with registered(PairStateConfig, PairStateMixer) as entry:
        kit.test_beam_search_reorders_states(entry)


def test_a_mixer_whose_work_escapes_the_flop_counter_fails_the_estimate_check(tmp_path):
    from spt_hf.testing import registered

    kit = type("Opaque", (MixerConformance,), {"config_class": OpaqueConfig, "mixer_class": OpaqueMixer})()
    with (
        registered(OpaqueConfig, OpaqueMixer) as entry,
        pytest.raises(AssertionError, match="counts the mixer's FLOPs"),
    ):
        kit.test_estimate_counts_flops(entry, tmp_path)


@pytest.mark.parametrize(
    "config_cls, mixer, check, message",
    [
        (PeekingConfig, PeekingMixer, "test_causal_mode_never_sees_the_future", "causal mode sees the future"),
        (PaddingConfig, PaddingPoolingMixer, "test_padding_does_not_change_pooled_outputs", "padding does not change"),
    ],
)
@pytest.mark.parametrize("input_kind", ["tokens", "continuous"])
def test_a_broken_mixer_fails_the_check_naming_its_property(config_cls, mixer, check, message, input_kind):
    from spt_hf.testing import registered

    kit = type("Broken", (MixerConformance,), {"config_class": config_cls, "mixer_class": mixer})()
    arguments = {"pooling": "mean", "input_kind": input_kind} if "padding" in check else {"input_kind": input_kind}
    with registered(config_cls, mixer) as entry, pytest.raises(AssertionError, match=message):
        getattr(kit, check)(entry, **arguments)


@pytest.mark.parametrize(
    "config_cls, mixer, message",
    [
        (UnorderedStateConfig, UnorderedStateMixer, "differs from it without .use_cache=False.: other sequences"),
        (OpaqueStateConfig, OpaqueStateMixer, "fails: A mixer's generation state of type RunningSum cannot be reord"),
    ],
)
def test_a_state_beam_search_cannot_reorder_fails_the_beam_check(config_cls, mixer, message):
    from spt_hf.testing import registered

    kit = type("Broken", (MixerConformance,), {"config_class": config_cls, "mixer_class": mixer})()
    with registered(config_cls, mixer) as entry, pytest.raises(AssertionError, match=message) as error:
        kit.test_beam_search_reorders_states(entry)
    assert "\n" not in str(error.value)
