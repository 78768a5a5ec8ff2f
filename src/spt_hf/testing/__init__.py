"""`spt_hf.testing`: the conformance kit a mixer's author runs in their own test suite (docs/own-architecture.md).

    from spt_hf.testing import MixerConformance

    class TestMyMixer(MixerConformance):
        config_class = MyConfig
        mixer_class = MyMixer          # or None when the architecture is already registered (an entry point)
        tiny_config = {"state_size": 8}

Each check is a test method whose failure message starts with the property it checks.
"""

from ..registry import registered
from .conformance import MixerConformance
from .remote import load_in_a_bare_process

__all__ = ["MixerConformance", "load_in_a_bare_process", "registered"]
