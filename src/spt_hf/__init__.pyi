"""The public names of spt_hf, for static tools (IDEs, type checkers): at run time `__init__.py` imports them on
first read, and the architectures' classes come from the registry (tests/packaging/test_exports.py checks that the
two agree)."""

from .auto import AutoModelForRetrieval as AutoModelForRetrieval
from .modeling.architectures import MODEL_TYPES as MODEL_TYPES
from .modeling.mixer import SequenceMixer as SequenceMixer
from .registry import register_architecture as register_architecture
from .registry import unregister_architecture as unregister_architecture

__version__: str
__all__: list[str]

from .modeling.configuration_backbone import (
    WrapperConfig as WrapperConfig,
)
from .modeling.configuration_dlr import (
    DLRConfig as DLRConfig,
)
from .modeling.configuration_linformer import (
    LinformerConfig as LinformerConfig,
)
from .modeling.configuration_mega import (
    MegaConfig as MegaConfig,
)
from .modeling.configuration_performer import (
    PerformerConfig as PerformerConfig,
)
from .modeling.configuration_rotary_transformer import (
    RotaryTransformerConfig as RotaryTransformerConfig,
)
from .modeling.configuration_s4 import (
    S4Config as S4Config,
)
from .modeling.configuration_spade import (
    SpadeConfig as SpadeConfig,
)
from .modeling.modeling_backbone import (
    WrapperForCausalLM as WrapperForCausalLM,
)
from .modeling.modeling_backbone import (
    WrapperForMaskedLM as WrapperForMaskedLM,
)
from .modeling.modeling_backbone import (
    WrapperForRetrieval as WrapperForRetrieval,
)
from .modeling.modeling_backbone import (
    WrapperForSequenceClassification as WrapperForSequenceClassification,
)
from .modeling.modeling_backbone import (
    WrapperModel as WrapperModel,
)
from .modeling.modeling_dlr import (
    DLRForCausalLM as DLRForCausalLM,
)
from .modeling.modeling_dlr import (
    DLRForMaskedLM as DLRForMaskedLM,
)
from .modeling.modeling_dlr import (
    DLRForRetrieval as DLRForRetrieval,
)
from .modeling.modeling_dlr import (
    DLRForSequenceClassification as DLRForSequenceClassification,
)
from .modeling.modeling_dlr import (
    DLRModel as DLRModel,
)
from .modeling.modeling_linformer import (
    LinformerForCausalLM as LinformerForCausalLM,
)
from .modeling.modeling_linformer import (
    LinformerForMaskedLM as LinformerForMaskedLM,
)
from .modeling.modeling_linformer import (
    LinformerForRetrieval as LinformerForRetrieval,
)
from .modeling.modeling_linformer import (
    LinformerForSequenceClassification as LinformerForSequenceClassification,
)
from .modeling.modeling_linformer import (
    LinformerModel as LinformerModel,
)
from .modeling.modeling_mega import (
    MegaForCausalLM as MegaForCausalLM,
)
from .modeling.modeling_mega import (
    MegaForMaskedLM as MegaForMaskedLM,
)
from .modeling.modeling_mega import (
    MegaForRetrieval as MegaForRetrieval,
)
from .modeling.modeling_mega import (
    MegaForSequenceClassification as MegaForSequenceClassification,
)
from .modeling.modeling_mega import (
    MegaModel as MegaModel,
)
from .modeling.modeling_performer import (
    PerformerForCausalLM as PerformerForCausalLM,
)
from .modeling.modeling_performer import (
    PerformerForMaskedLM as PerformerForMaskedLM,
)
from .modeling.modeling_performer import (
    PerformerForRetrieval as PerformerForRetrieval,
)
from .modeling.modeling_performer import (
    PerformerForSequenceClassification as PerformerForSequenceClassification,
)
from .modeling.modeling_performer import (
    PerformerModel as PerformerModel,
)
from .modeling.modeling_rotary_transformer import (
    RotaryTransformerForCausalLM as RotaryTransformerForCausalLM,
)
from .modeling.modeling_rotary_transformer import (
    RotaryTransformerForMaskedLM as RotaryTransformerForMaskedLM,
)
from .modeling.modeling_rotary_transformer import (
    RotaryTransformerForRetrieval as RotaryTransformerForRetrieval,
)
from .modeling.modeling_rotary_transformer import (
    RotaryTransformerForSequenceClassification as RotaryTransformerForSequenceClassification,
)
from .modeling.modeling_rotary_transformer import (
    RotaryTransformerModel as RotaryTransformerModel,
)
from .modeling.modeling_s4 import (
    S4ForCausalLM as S4ForCausalLM,
)
from .modeling.modeling_s4 import (
    S4ForMaskedLM as S4ForMaskedLM,
)
from .modeling.modeling_s4 import (
    S4ForRetrieval as S4ForRetrieval,
)
from .modeling.modeling_s4 import (
    S4ForSequenceClassification as S4ForSequenceClassification,
)
from .modeling.modeling_s4 import (
    S4Model as S4Model,
)
from .modeling.modeling_spade import (
    SpadeForCausalLM as SpadeForCausalLM,
)
from .modeling.modeling_spade import (
    SpadeForMaskedLM as SpadeForMaskedLM,
)
from .modeling.modeling_spade import (
    SpadeForRetrieval as SpadeForRetrieval,
)
from .modeling.modeling_spade import (
    SpadeForSequenceClassification as SpadeForSequenceClassification,
)
from .modeling.modeling_spade import (
    SpadeModel as SpadeModel,
)
