"""The one list of spt_hf architectures: each config class with the modeling module that defines its heads.

Everything that needs the set of architectures derives it from `ARCHITECTURES`: the Auto-class registration
(`spt_hf/__init__.py`), the package's exports, the model types a recipe may name (`MODEL_TYPES`), and the tests that
check every architecture has its tiny config, recipes and benchmark settings. Adding an architecture adds one line
here (docs/architectures.md, "Adding an architecture").
"""

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
from .configuration_spade import SpadeConfig
from .modeling_sequence import AUTO_CLASS_SUFFIXES

# (config class, module defining `<Prefix>Model` and `<Prefix>For<Head>`, Prefix = the config's name less "Config").
ARCHITECTURES = (
    (RotaryTransformerConfig, modeling_rotary_transformer),
    (S4Config, modeling_s4),
    (DLRConfig, modeling_dlr),
    (MegaConfig, modeling_mega),
    (SpadeConfig, modeling_spade),
    (LinformerConfig, modeling_linformer),
    (PerformerConfig, modeling_performer),
    (WrapperConfig, modeling_backbone),
)
MODEL_TYPES = tuple(config_cls.model_type for config_cls, _ in ARCHITECTURES)


def model_classes(config_cls, module) -> dict[str, type]:
    """Auto class name -> the head class of one architecture serving it (every entry of AUTO_CLASS_SUFFIXES)."""
    prefix = config_cls.__name__.removesuffix("Config")
    return {auto_name: getattr(module, prefix + suffix) for auto_name, suffix in AUTO_CLASS_SUFFIXES.items()}


def base_model_class(model_type: str) -> type:
    """The base model class (`<Prefix>Model`, served by AutoModel) of the architecture `model_type` (a KeyError for a
    model type not in ARCHITECTURES)."""
    by_type = {config_cls.model_type: (config_cls, module) for config_cls, module in ARCHITECTURES}
    return model_classes(*by_type[model_type])["AutoModel"]
