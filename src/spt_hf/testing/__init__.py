"""`spt_hf.testing`: the conformance kit a mixer's author runs in their own test suite (docs/own-architecture.md).

    from spt_hf.testing import MixerConformance

    class TestMyMixer(MixerConformance):
        config_class = MyConfig
        mixer_class = MyMixer          # or None when the architecture is already registered (an entry point)
        tiny_config = {"state_size": 8}

Each check is a test method whose failure message starts with the property it checks.
"""

from contextlib import contextmanager

from ..registry import register_architecture, unregister_architecture
from .conformance import MixerConformance
from .remote import load_in_a_bare_process


@contextmanager
def registered(config_cls, mixer, name: str | None = None):
    """Register an architecture for the duration of a `with` block (tests of a throwaway mixer); yields its
    registry entry and unregisters it afterwards, unless it was registered before."""
    from ..modeling.architectures import REGISTRY

    before = REGISTRY.get(config_cls.model_type)
    entry = register_architecture(config_cls, mixer, name=name)
    try:
        yield entry
    finally:
        if before is None:
            unregister_architecture(config_cls.model_type)


__all__ = ["MixerConformance", "load_in_a_bare_process", "registered"]
