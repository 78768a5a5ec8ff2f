"""The one registry of spt_hf architectures: each config class with the model classes that serve it.

Every architecture, built-in or from a plugin, enters through `add_architecture` (the public
`spt_hf.register_architecture` adds the Auto-class registration on top). Everything that needs the set of
architectures reads it from here: the Auto-class registration (`spt_hf/registry.py`), the package's exports, the model
types a recipe may name (`MODEL_TYPES`), the presets of plugins (`recipes/presets.py`) and the tests that check every
built-in architecture has its tiny config, recipes and benchmark settings. `ARCHITECTURES` and `MODEL_TYPES` are live
lists: a plugin registered later appears in them.

The built-in modeling modules are listed by name and imported on first use (`Architecture.module`): they import
transformers' modeling code, which costs as much as torch itself, and a process that never builds a model (the
`spt-hf` command's parsing, `estimate`, `report`) does not pay for it.
"""

import importlib
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from torch import nn

from .configuration_backbone import WrapperConfig
from .configuration_dlr import DLRConfig
from .configuration_linformer import LinformerConfig
from .configuration_mega import MegaConfig
from .configuration_performer import PerformerConfig
from .configuration_rotary_transformer import RotaryTransformerConfig
from .configuration_s4 import S4Config
from .configuration_sequence import AUTO_CLASS_SUFFIXES, SequenceModelConfig
from .configuration_spade import SpadeConfig


@dataclass
class Architecture:
    """One registered architecture. `name`: what `--architectures` and presets call it; `module_name`: the modeling
    module that defines its classes; `plugin`/`version`: the distribution that provides it (None for spt_hf's own)."""

    name: str
    config_cls: type
    module_name: str
    plugin: str | None = None
    version: str | None = None

    @cached_property
    def module(self) -> types.ModuleType:
        """The modeling module, imported on first read (start-up time: it imports transformers' modeling code)."""
        return importlib.import_module(self.module_name)

    @cached_property
    def classes(self) -> dict[str, type]:
        """Auto class name -> the class serving it (imports the modeling module)."""
        return model_classes(self.config_cls, self.module)

    def class_names(self) -> list[str]:
        """The names its classes have or would have (the config's and `<Prefix><suffix>` for every head kind), known
        without running its module."""
        prefix = self.config_cls.__name__.removesuffix("Config")
        return [self.config_cls.__name__, *(prefix + suffix for suffix in AUTO_CLASS_SUFFIXES.values())]


class ArchitectureModules(Sequence):
    """(config class, module defining `<Prefix>Model` and `<Prefix>For<Head>`), one per registered architecture, in
    the order of registration; an item's module is imported when the item is read."""

    def __len__(self) -> int:
        return len(REGISTRY)

    def __getitem__(self, index: int) -> tuple[type, types.ModuleType]:
        entry = list(REGISTRY.values())[index]
        return entry.config_cls, entry.module

    def __iter__(self) -> Iterator[tuple[type, types.ModuleType]]:
        return ((entry.config_cls, entry.module) for entry in list(REGISTRY.values()))


REGISTRY: dict[str, Architecture] = {}  # by model_type
ARCHITECTURES = ArchitectureModules()
MODEL_TYPES: list[str] = []


def add_architecture(config_cls, source, name: str | None = None, plugin=None, version=None) -> Architecture:
    """Add one architecture: `source` is a modeling module defining `<Prefix>Model` and its heads (or its dotted name:
    imported on first use), or a mixer class
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
    if isinstance(source, str | types.ModuleType):
        module_name = source if isinstance(source, str) else source.__name__
    else:
        mixers = tuple(source) if isinstance(source, tuple | list) else (source,)
        if not mixers or not all(isinstance(m, type) and issubclass(m, nn.Module) for m in mixers):
            raise ValueError(f"{source!r} is neither a modeling module nor a mixer class (an nn.Module subclass).")
        from .mixer import model_classes_for  # here, not at the top: heads import transformers' modeling code

        module_name = mixers[0].__module__
        model_classes_for(config_cls, mixers, module_name)
    entry = Architecture(name or model_type.removeprefix("spt_"), config_cls, module_name, plugin, version)
    if plugin is not None and not isinstance(source, str | types.ModuleType):
        for cls in entry.classes.values():
            cls.spt_plugin = {"plugin": plugin, "version": version}  # saved with checkpoints (plugin_code.py)
    REGISTRY[model_type] = entry
    MODEL_TYPES.append(model_type)
    return entry


def remove_architecture(model_type: str) -> Architecture:
    """Take `model_type` out of the registry (tests that register a throwaway mixer); returns its entry."""
    entry = REGISTRY.pop(model_type)
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
    (RotaryTransformerConfig, "modeling_rotary_transformer"),
    (S4Config, "modeling_s4"),
    (DLRConfig, "modeling_dlr"),
    (MegaConfig, "modeling_mega"),
    (SpadeConfig, "modeling_spade"),
    (LinformerConfig, "modeling_linformer"),
    (PerformerConfig, "modeling_performer"),
    (WrapperConfig, "modeling_backbone"),
):
    add_architecture(_config_cls, f"{__package__}.{_module}")
BUILTIN_MODEL_TYPES = tuple(MODEL_TYPES)
