"""Turning a model's value checks off for a stretch of code (the Trainer's training steps).

`config.check_values` (configuration_sequence.py) decides whether a forward reads tensor values on the host to give a
clear error: token ids within the vocabulary (modeling_sequence.py) and finite SSM kernels (ssm.check_finite). A read
makes a GPU wait for the host, so the Trainer runs its training steps without them. Some layers hold a config of
their own (SPADE's S4 branch): every config reachable from the model is switched.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


def _configs(model: nn.Module) -> list:
    found: dict[int, object] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "check_values"):
            found.setdefault(id(config), config)
    return list(found.values())


@contextmanager
def value_checks(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Set `check_values` of every config of `model` to `enabled` inside the block; restore the saved values after."""
    configs = _configs(model)
    saved = [config.check_values for config in configs]
    for config in configs:
        config.check_values = enabled
    try:
        yield
    finally:
        for config, value in zip(configs, saved, strict=True):
            config.check_values = value
