"""The public mixer contract, and the model classes spt_hf writes around a mixer (docs/own-architecture.md).

A sequence mixer is the one part in which architectures differ: everything around it (embedding, residual blocks,
norms, the heads and their losses, the SPT objectives) is shared. A mixer

- is built as `Mixer(config, layer_idx)` from the architecture's config (a `SequenceModelConfig` subclass);
- maps `hidden_states` (B, L, H) and `attention_mask` (B, L) bool (True = real position, or None) to (B, L, H);
  padded positions arrive zeroed, and what a mixer writes there is never read by a head;
- is causal when `config.bidirectional` is False: output position t depends on positions <= t only; bidirectional
  otherwise (every position sees the whole sequence);
- may define `init_state(batch_size, device, dtype)` and `step(hidden_state (B, H), state, attention_mask=None)
  -> (output (B, H), state)` for O(1) generation; `step` must equal `forward` position by position; the state is a
  tensor (batch first), a tuple, list or dict of tensors, or a `cache.MixerState` (beam search reorders its batch);
- may define `optimizer_overrides() -> {parameter name: {"lr": ..., "weight_decay": ...}}` for parameters that
  train with other settings (as the SSM kernels do), and `_init_spt_weights()` to (re)initialise its own
  parameters (called at construction and by `from_pretrained`, which builds on the meta device).

`model_classes_for` writes `<Prefix>Model` and its heads around mixer classes, as the built-in modeling modules
declare them by hand.
"""

import sys

from torch import Tensor, nn
from transformers import GenerationMixin

from .configuration_sequence import SequenceModelConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequenceBaseModel, SequencePreTrainedModel
from .plugin_code import write_remote_code

HEAD_BASES = {
    "ForMaskedLM": (SequenceForMaskedLM,),
    "ForCausalLM": (SequenceForCausalLM,),
    "ForSequenceClassification": (SequenceForSequenceClassification,),
    "ForRetrieval": (SequenceForRetrieval,),
}


class SequenceMixer(nn.Module):
    """Base class of a sequence mixer: (B, L, H) with a padding mask -> (B, L, H) (the contract above).

    Subclasses implement `forward`; `init_state`/`step`, `optimizer_overrides` and `_init_spt_weights` are optional
    (define them only when the mixer has them: the residual block asks `hasattr(mixer, "step")`).
    """

    def __init__(self, config: SequenceModelConfig, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size

    @property
    def is_causal(self) -> bool:
        """Whether output position t may read positions <= t only (`config.bidirectional` False)."""
        return not self.config.bidirectional

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None, **kwargs) -> Tensor:
        """(B, L, H) -> (B, L, H); `attention_mask` (B, L) bool, True at real positions (None: no padding)."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward(hidden_states, attention_mask)")


def _save_with_code(self, save_directory, *args, **kwargs):
    """`save_pretrained`, then the plugin's code for remote-code loading (plugin_code.py)."""
    result = SequencePreTrainedModel.save_pretrained(self, save_directory, *args, **kwargs)
    write_remote_code(self, save_directory, getattr(self, "spt_plugin", None))
    return result


def model_classes_for(
    config_cls: type[SequenceModelConfig], mixer_classes: tuple[type[nn.Module], ...], module_name: str
) -> dict[str, type]:
    """`<Prefix>PreTrainedModel`, `<Prefix>Model` and each head (`<Prefix>ForMaskedLM`, `...ForCausalLM` when the
    config has a causal form, `...ForSequenceClassification`, `...ForRetrieval`) around `mixer_classes`, Prefix =
    the config's name less "Config"; defined in (and set on) the module `module_name`, so that pickling, the saved
    `auto_map` and remote code find them there. Returns them by suffix ("PreTrainedModel", "Model", "ForMaskedLM")."""
    prefix = config_cls.__name__.removesuffix("Config")
    stateful = any(hasattr(mixer, "step") for mixer in mixer_classes)
    namespace = {"__module__": module_name, "config_class": config_cls, "__annotations__": {"config": config_cls}}
    namespace.update(_is_stateful=stateful, spt_mixer_classes=tuple(mixer_classes), save_pretrained=_save_with_code)
    pretrained = type(f"{prefix}PreTrainedModel", (SequencePreTrainedModel,), namespace)
    base = type(
        f"{prefix}Model",
        (SequenceBaseModel, pretrained),
        {"__module__": module_name, "mixer_classes": tuple(mixer_classes), "__doc__": f"{prefix} base model."},
    )
    classes = {"PreTrainedModel": pretrained, "Model": base}
    for suffix, bases in HEAD_BASES.items():
        if suffix == "ForCausalLM" and not config_cls.has_causal_form:
            continue
        extra = (GenerationMixin,) if suffix == "ForCausalLM" else ()
        attrs = {"__module__": module_name, "base_model_class": base, "__doc__": f"{prefix} {suffix[3:]} head."}
        classes[suffix] = type(prefix + suffix, (*bases, pretrained, *extra), attrs)
    module = sys.modules.get(module_name)
    if module is not None:
        for cls in classes.values():
            if not hasattr(module, cls.__name__):
                setattr(module, cls.__name__, cls)
    return classes


__all__ = ["SequenceMixer", "model_classes_for"]
