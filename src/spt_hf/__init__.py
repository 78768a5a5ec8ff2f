"""spt_hf: self-pretraining (SPT) of long-sequence models in the Hugging Face ecosystem.

Importing the package registers every architecture with the transformers Auto classes (this is the one place that
does so), so `AutoModelFor*.from_pretrained` works on spt_hf checkpoints without `trust_remote_code`.
"""

import transformers
from transformers import AutoConfig

from .auto import AutoModelForRetrieval
from .modeling.architectures import ARCHITECTURES, MODEL_TYPES, model_classes

__version__ = "0.1.0"

_AUTO_CLASSES = {"AutoModelForRetrieval": AutoModelForRetrieval}  # the Auto classes transformers does not define


def _register(config_cls, modeling_module) -> dict[str, type]:
    """Register one architecture's config and heads with the Auto classes and for remote-code saving; returns its
    public classes by name."""
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    config_cls.register_for_auto_class()
    classes = {config_cls.__name__: config_cls}
    for auto_name, model_cls in model_classes(config_cls, modeling_module).items():
        auto_cls = _AUTO_CLASSES.get(auto_name) or getattr(transformers, auto_name)
        auto_cls.register(config_cls, model_cls, exist_ok=True)
        # What `register_for_auto_class` sets; it refuses Auto classes that transformers does not define.
        model_cls._auto_class = auto_name
        classes[model_cls.__name__] = model_cls
    return classes


# Every architecture of modeling/architectures.py (the one list), registered and exported as `spt_hf.<Class>`.
_EXPORTS = {}
for _config_cls, _module in ARCHITECTURES:
    _EXPORTS.update(_register(_config_cls, _module))
globals().update(_EXPORTS)

__all__ = ["AutoModelForRetrieval", "MODEL_TYPES", *_EXPORTS]
