"""The LRU under spt_hf's conformance kit, plus what this plugin adds: its entry point and its recurrence."""

import pytest
import torch
from spt_hf_lru.modeling_lru import LRUConfig, LRUMixer

from spt_hf.testing import MixerConformance


class TestLRU(MixerConformance):
    config_class = LRUConfig
    mixer_class = LRUMixer
    tiny_config = {"state_size": 8}


def test_the_entry_point_finds_the_lru():
    from spt_hf.registry import find_architecture, installed_plugins

    assert installed_plugins()["lru"] == "spt_hf_lru:register"
    entry = find_architecture("lru")
    assert entry.config_cls is LRUConfig and entry.plugin == "spt-hf-lru"


def test_the_initial_eigenvalues_lie_on_the_configured_ring():
    mixer = LRUMixer(LRUConfig(vocab_size=8, hidden_size=8, state_size=256, r_min=0.5, r_max=0.8))
    modulus = torch.exp(-mixer.nu_log.exp())
    assert modulus.min() >= 0.5 - 1e-6 and modulus.max() <= 0.8 + 1e-6
    assert torch.allclose(mixer.gamma_log.exp() ** 2, 1 - modulus**2, atol=1e-6)


def test_a_bad_ring_is_one_line():
    with pytest.raises(ValueError, match="0 <= r_min < r_max <= 1"):
        LRUConfig(vocab_size=8, r_min=0.9, r_max=0.5)
