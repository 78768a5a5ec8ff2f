"""spt_hf: self-pretraining (SPT) of long-sequence models in the Hugging Face ecosystem.

Importing the package registers every architecture with the transformers Auto classes (this is the one place that
does so), so `AutoModelFor*.from_pretrained` works on spt_hf checkpoints without `trust_remote_code`.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)

from .auto import AutoModelForRetrieval
from .modeling import (
    modeling_backbone,
    modeling_dlr,
    modeling_linformer,
    modeling_mega,
    modeling_performer,
    modeling_rotary_transformer,
    modeling_s4,
    modeling_spade,
)
from .modeling.configuration_backbone import WrapperConfig
from .modeling.configuration_dlr import DLRConfig
from .modeling.configuration_linformer import LinformerConfig
from .modeling.configuration_mega import MegaConfig
from .modeling.configuration_performer import PerformerConfig
from .modeling.configuration_rotary_transformer import RotaryTransformerConfig
from .modeling.configuration_s4 import S4Config
from .modeling.configuration_spade import SpadeConfig
from .modeling.modeling_backbone import (
    WrapperForCausalLM,
    WrapperForMaskedLM,
    WrapperForRetrieval,
    WrapperForSequenceClassification,
    WrapperModel,
)
from .modeling.modeling_dlr import (
    DLRForCausalLM,
    DLRForMaskedLM,
    DLRForRetrieval,
    DLRForSequenceClassification,
    DLRModel,
)
from .modeling.modeling_linformer import (
    LinformerForCausalLM,
    LinformerForMaskedLM,
    LinformerForRetrieval,
    LinformerForSequenceClassification,
    LinformerModel,
)
from .modeling.modeling_mega import (
    MegaForCausalLM,
    MegaForMaskedLM,
    MegaForRetrieval,
    MegaForSequenceClassification,
    MegaModel,
)
from .modeling.modeling_performer import (
    PerformerForCausalLM,
    PerformerForMaskedLM,
    PerformerForRetrieval,
    PerformerForSequenceClassification,
    PerformerModel,
)
from .modeling.modeling_rotary_transformer import (
    RotaryTransformerForCausalLM,
    RotaryTransformerForMaskedLM,
    RotaryTransformerForRetrieval,
    RotaryTransformerForSequenceClassification,
    RotaryTransformerModel,
)
from .modeling.modeling_s4 import (
    S4ForCausalLM,
    S4ForMaskedLM,
    S4ForRetrieval,
    S4ForSequenceClassification,
    S4Model,
)
from .modeling.modeling_spade import (
    SpadeForCausalLM,
    SpadeForMaskedLM,
    SpadeForRetrieval,
    SpadeForSequenceClassification,
    SpadeModel,
)

__version__ = "0.1.0"

_AUTO_CLASSES = {
    "Model": AutoModel,
    "ForMaskedLM": AutoModelForMaskedLM,
    "ForCausalLM": AutoModelForCausalLM,
    "ForSequenceClassification": AutoModelForSequenceClassification,
    "ForRetrieval": AutoModelForRetrieval,
}


def _register(config_cls, modeling_module) -> None:
    """Register one architecture's config and heads with the Auto classes and for remote-code saving."""
    prefix = config_cls.__name__.removesuffix("Config")
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    config_cls.register_for_auto_class()
    for suffix, auto_cls in _AUTO_CLASSES.items():
        model_cls = getattr(modeling_module, prefix + suffix)
        auto_cls.register(config_cls, model_cls, exist_ok=True)
        # What `register_for_auto_class` sets; it refuses Auto classes that transformers does not define.
        model_cls._auto_class = auto_cls.__name__


_register(RotaryTransformerConfig, modeling_rotary_transformer)
_register(S4Config, modeling_s4)
_register(DLRConfig, modeling_dlr)
_register(MegaConfig, modeling_mega)
_register(SpadeConfig, modeling_spade)
_register(LinformerConfig, modeling_linformer)
_register(PerformerConfig, modeling_performer)
_register(WrapperConfig, modeling_backbone)

__all__ = [
    "AutoModelForRetrieval",
    "DLRConfig",
    "DLRModel",
    "DLRForMaskedLM",
    "DLRForCausalLM",
    "DLRForSequenceClassification",
    "DLRForRetrieval",
    "S4Config",
    "S4Model",
    "S4ForMaskedLM",
    "S4ForCausalLM",
    "S4ForSequenceClassification",
    "S4ForRetrieval",
    "RotaryTransformerConfig",
    "RotaryTransformerModel",
    "RotaryTransformerForMaskedLM",
    "RotaryTransformerForCausalLM",
    "RotaryTransformerForSequenceClassification",
    "RotaryTransformerForRetrieval",
    "MegaConfig",
    "MegaModel",
    "MegaForMaskedLM",
    "MegaForCausalLM",
    "MegaForSequenceClassification",
    "MegaForRetrieval",
    "SpadeConfig",
    "SpadeModel",
    "SpadeForMaskedLM",
    "SpadeForCausalLM",
    "SpadeForSequenceClassification",
    "SpadeForRetrieval",
    "LinformerConfig",
    "LinformerModel",
    "LinformerForMaskedLM",
    "LinformerForCausalLM",
    "LinformerForSequenceClassification",
    "LinformerForRetrieval",
    "PerformerConfig",
    "PerformerModel",
    "PerformerForMaskedLM",
    "PerformerForCausalLM",
    "PerformerForSequenceClassification",
    "PerformerForRetrieval",
    "WrapperConfig",
    "WrapperModel",
    "WrapperForMaskedLM",
    "WrapperForCausalLM",
    "WrapperForSequenceClassification",
    "WrapperForRetrieval",
]
