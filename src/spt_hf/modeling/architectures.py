"""The one registry of spt_hf architectures: each config class with the model classes that serve it.

Every architecture, built-in or from a plugin, enters through `add_architecture` (the public
`spt_hf.register_architecture` adds the Auto-class registration on top). Everything that needs the set of
architectures reads it from here: the Auto-class registration (`spt_hf/__init__.py`), the package's exports, the model
types a recipe may name (`MODEL_TYPES`), the presets of plugins (`recipes/presets.py`) and the tests that check every
built-in architecture has its tiny config, recipes and benchmark settings. `ARCHITECTURES` and `MODEL_TYPES` are live
lists: a plugin registered later appears in them.
"""

import types
from dataclasses import dataclass, field

from torch import nn

from . import (
    modeling_backbone,
    modeling_dlr,
    modeling_linformer,
    modeling_mega,
    modeling_performer,
    modeling_rotary_transformer,
    modeling_s4,
    modeling_spade,
)
from .configuration_backbone import WrapperConfig
from .configuration_dlr import DLRConfig
from .configuration_linformer import LinformerConfig
from .configuration_mega import MegaConfig
from .configuration_performer import PerformerConfig
from .configuration_rotary_transformer import RotaryTransformerConfig
from .configuration_s4 import S4Config
from .configuration_sequence import SequenceModelConfig
from .configuration_spade import SpadeConfig
from .mixer import model_classes_for
from .modeling_sequence import AUTO_CLASS_SUFFIXES


@dataclass
class Architecture:
    """One registered architecture. `name`: what `--architectures` and presets call it; `classes`: Auto class name ->
    the class serving it; `plugin`/`version`: the distribution that provides it (None for spt_hf's own)."""

    name: str
    config_cls: type
    module: types.ModuleType
    classes: dict[str, type] = field(default_factory=dict)
    plugin: str | None = None
    version: str | None = None


REGISTRY: dict[str, Architecture] = {}  # by model_type
# (config class, module defining `<Prefix>Model` and `<Prefix>For<Head>`), one per registered architecture.
ARCHITECTURES: list[tuple[type, types.ModuleType]] = []
MODEL_TYPES: list[str] = []


def add_architecture(config_cls, source, name: str | None = None, plugin=None, version=None) -> Architecture:
    """Add one architecture: `source` is a modeling module defining `<Prefix>Model` and its heads, or a mixer class
    (or a tuple of them, one residual block each) around which they are written (`mixer.model_classes_for`). Adding
    the same config class again returns its entry; a model_type taken by another class is one ValueError."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, SequenceModelConfig)):
        raise ValueError(f"{config_cls!r} is not a config class: subclass spt_hf's SequenceModelConfig.")
    model_type = getattr(config_cls, "model_type", "")
    if not model_type:
        raise ValueError(f"{config_cls.__name__} has no `model_type`: set a unique one, e.g. 'my_mixer'.")
    known = REGISTRY.get(model_type)
    if known is not None:
        if known.config_cls is config_cls:
            return known
        raise ValueError(f"model_type {model_type!r} is taken by {known.config_cls.__module__}; choose another one.")
    if isinstance(source, types.ModuleType):
        module = source
    else:
        mixers = tuple(source) if isinstance(source, tuple | list) else (source,)
        if not mixers or not all(isinstance(m, type) and issubclass(m, nn.Module) for m in mixers):
            raise ValueError(f"{source!r} is neither a modeling module nor a mixer class (an nn.Module subclass).")
        module = __import__(mixers[0].__module__, fromlist=["_"])
        model_classes_for(config_cls, mixers, module.__name__)
    entry = Architecture(name or model_type.removeprefix("spt_"), config_cls, module, plugin=plugin, version=version)
    entry.classes = model_classes(config_cls, module)
    if plugin is not None and not isinstance(source, types.ModuleType):
        for cls in entry.classes.values():
            cls.spt_plugin = {"plugin": plugin, "version": version}  # saved with checkpoints (plugin_code.py)
    REGISTRY[model_type] = entry
    ARCHITECTURES.append((config_cls, module))
    MODEL_TYPES.append(model_type)
    return entry


def remove_architecture(model_type: str) -> Architecture:
    """Take `model_type` out of the registry (tests that register a throwaway mixer); returns its entry."""
    entry = REGISTRY.pop(model_type)
    ARCHITECTURES.remove((entry.config_cls, entry.module))
    MODEL_TYPES.remove(model_type)
    return entry


def model_classes(config_cls, module) -> dict[str, type]:
    """Auto class name -> the head class of one architecture serving it (the entries of AUTO_CLASS_SUFFIXES that the
    module defines: an architecture without a causal form may have no causal LM head)."""
    prefix = config_cls.__name__.removesuffix("Config")
    found = {auto_name: getattr(module, prefix + suffix, None) for auto_name, suffix in AUTO_CLASS_SUFFIXES.items()}
    return {auto_name: cls for auto_name, cls in found.items() if cls is not None}


def base_model_class(model_type: str) -> type:
    """The base model class (`<Prefix>Model`, served by AutoModel) of the architecture `model_type` (a KeyError for a
    model type not registered)."""
    return REGISTRY[model_type].classes["AutoModel"]


def by_name(name: str) -> Architecture | None:
    """The registered architecture called `name` (its name or its model_type), or None."""
    return REGISTRY.get(name) or next((entry for entry in REGISTRY.values() if entry.name == name), None)


for _config_cls, _module in (
    (RotaryTransformerConfig, modeling_rotary_transformer),
    (S4Config, modeling_s4),
    (DLRConfig, modeling_dlr),
    (MegaConfig, modeling_mega),
    (SpadeConfig, modeling_spade),
    (LinformerConfig, modeling_linformer),
    (PerformerConfig, modeling_performer),
    (WrapperConfig, modeling_backbone),
):
    add_architecture(_config_cls, _module)
BUILTIN_MODEL_TYPES = tuple(MODEL_TYPES)
