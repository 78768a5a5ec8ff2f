"""spt_hf: self-pretraining (SPT) of long-sequence models in the Hugging Face ecosystem.

Importing the package registers every architecture with the transformers Auto classes (this is the one place that
does so), so `AutoModelFor*.from_pretrained` works on spt_hf checkpoints without `trust_remote_code`. The one
exception is the `spt-hf` command's own process, whose `--help` and argument errors must answer at once: there the
registration (which imports torch and transformers' models) waits until the command runs (`cli.main` calls
`register_auto_classes`) or a public name of the package is first read.
"""

import sys
from pathlib import Path
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# How the `spt-hf` command starts: `python -m spt_hf` (also `spt_hf.cli`, `spt_hf.__main__`), or the console script.
COMMAND_MODULES = ("spt_hf", "spt_hf.cli", "spt_hf.__main__")
COMMAND_SCRIPTS = ("spt-hf", "spt-hf.exe")


def started_as_the_command() -> bool:
    """Whether this process is the `spt-hf` command importing its package: the console script (`sys.argv[0]` names
    it), or `python -m spt_hf`, whose package runpy imports while `sys.argv[0]` is still "-m" (`sys.orig_argv` then
    names the module)."""
    if sys.argv[:1] == ["-m"]:
        argv = sys.orig_argv
        return "-m" in argv[:-1] and argv[argv.index("-m") + 1] in COMMAND_MODULES
    return bool(sys.argv) and Path(sys.argv[0]).name in COMMAND_SCRIPTS


def _register(config_cls, modeling_module, auto_classes: dict) -> dict[str, type]:
    """Register one architecture's config and heads with the Auto classes and for remote-code saving; returns its
    public classes by name."""
    import transformers
    from transformers import AutoConfig

    from .modeling.architectures import model_classes

    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    config_cls.register_for_auto_class()
    classes = {config_cls.__name__: config_cls}
    for auto_name, model_cls in model_classes(config_cls, modeling_module).items():
        auto_cls = auto_classes.get(auto_name) or getattr(transformers, auto_name)
        auto_cls.register(config_cls, model_cls, exist_ok=True)
        # What `register_for_auto_class` sets; it refuses Auto classes that transformers does not define.
        model_cls._auto_class = auto_name
        classes[model_cls.__name__] = model_cls
    # Raw inputs (docs/pipelines.md): the classifier serves pipeline("audio-classification") on one-channel series,
    # and the feature extractor a checkpoint of continuous inputs carries loads without trust_remote_code.
    from transformers import AutoFeatureExtractor, AutoModelForAudioClassification

    from .modeling.feature_extraction_series import SeriesFeatureExtractor

    classifier = classes[config_cls.__name__.removesuffix("Config") + "ForSequenceClassification"]
    AutoModelForAudioClassification.register(config_cls, classifier, exist_ok=True)
    AutoFeatureExtractor.register(config_cls, SeriesFeatureExtractor, exist_ok=True)
    return classes


def _auto_classes() -> dict:
    from .auto import AutoModelForRetrieval

    return {"AutoModelForRetrieval": AutoModelForRetrieval}  # the Auto classes transformers does not define


def register_auto_classes() -> None:
    """Register every architecture of the registry (modeling/architectures.py, the one list) with the Auto classes
    and export its classes as `spt_hf.<Class>`; once a process (later calls return at once; architectures registered
    later are exported by `export_architecture`)."""
    if "_EXPORTS" in globals():
        return
    from .auto import AutoModelForRetrieval
    from .modeling.architectures import ARCHITECTURES, MODEL_TYPES
    from .modeling.mixer import SequenceMixer
    from .registry import register_architecture, unregister_architecture

    exports = {}
    for config_cls, module in ARCHITECTURES:
        exports.update(_register(config_cls, module, _auto_classes()))
    # The plugin API (docs/own-architecture.md): public names outside `__all__`, which lists the model classes.
    api = dict(SequenceMixer=SequenceMixer, register_architecture=register_architecture)
    globals().update(api, unregister_architecture=unregister_architecture)
    globals().update(exports, AutoModelForRetrieval=AutoModelForRetrieval, MODEL_TYPES=MODEL_TYPES)
    globals()["__all__"] = ["AutoModelForRetrieval", "MODEL_TYPES", *exports]
    globals()["_EXPORTS"] = exports


def export_architecture(entry) -> None:
    """Register one architecture added after `register_auto_classes` (a plugin) and export its classes."""
    register_auto_classes()
    classes = _register(entry.config_cls, entry.module, _auto_classes())
    globals().update(classes)
    globals()["__all__"] += [name for name in classes if name not in globals()["__all__"]]
    globals()["_EXPORTS"].update(classes)


def unexport_architecture(entry) -> None:
    """Undo `export_architecture` (tests): the Auto classes' entries and the exported names."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING

    CONFIG_MAPPING._extra_content.pop(entry.config_cls.model_type, None)
    FEATURE_EXTRACTOR_MAPPING._extra_content.pop(entry.config_cls, None)
    for auto_cls in _BaseAutoModelClass.__subclasses__():
        if auto_cls._model_mapping is not None:
            auto_cls._model_mapping._extra_content.pop(entry.config_cls, None)
    names = [entry.config_cls.__name__, *(cls.__name__ for cls in entry.classes.values())]
    for name in names:
        globals().pop(name, None)
        globals()["_EXPORTS"].pop(name, None)
    globals()["__all__"] = [name for name in globals()["__all__"] if name not in names]


def __getattr__(name: str):
    """The public names (and `__all__`) of a package whose registration is still to come: registered on first read."""
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register_auto_classes()
    if name not in globals():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[name]


if not started_as_the_command():
    register_auto_classes()

if TYPE_CHECKING:
    # The classes `_EXPORTS` defines at run time, spelled out for static tools and IDEs as transformers does (never
    # imported at run time; tests/packaging/test_exports.py checks that the two lists agree).
    from .modeling.configuration_backbone import WrapperConfig  # noqa: F401
    from .modeling.configuration_dlr import DLRConfig  # noqa: F401
    from .modeling.configuration_linformer import LinformerConfig  # noqa: F401
    from .modeling.configuration_mega import MegaConfig  # noqa: F401
    from .modeling.configuration_performer import PerformerConfig  # noqa: F401
    from .modeling.configuration_rotary_transformer import RotaryTransformerConfig  # noqa: F401
    from .modeling.configuration_s4 import S4Config  # noqa: F401
    from .modeling.configuration_spade import SpadeConfig  # noqa: F401
    from .modeling.modeling_backbone import (
        WrapperForCausalLM,  # noqa: F401
        WrapperForMaskedLM,  # noqa: F401
        WrapperForRetrieval,  # noqa: F401
        WrapperForSequenceClassification,  # noqa: F401
        WrapperModel,  # noqa: F401
    )
    from .modeling.modeling_dlr import (
        DLRForCausalLM,  # noqa: F401
        DLRForMaskedLM,  # noqa: F401
        DLRForRetrieval,  # noqa: F401
        DLRForSequenceClassification,  # noqa: F401
        DLRModel,  # noqa: F401
    )
    from .modeling.modeling_linformer import (
        LinformerForCausalLM,  # noqa: F401
        LinformerForMaskedLM,  # noqa: F401
        LinformerForRetrieval,  # noqa: F401
        LinformerForSequenceClassification,  # noqa: F401
        LinformerModel,  # noqa: F401
    )
    from .modeling.modeling_mega import (
        MegaForCausalLM,  # noqa: F401
        MegaForMaskedLM,  # noqa: F401
        MegaForRetrieval,  # noqa: F401
        MegaForSequenceClassification,  # noqa: F401
        MegaModel,  # noqa: F401
    )
    from .modeling.modeling_performer import (
        PerformerForCausalLM,  # noqa: F401
        PerformerForMaskedLM,  # noqa: F401
        PerformerForRetrieval,  # noqa: F401
        PerformerForSequenceClassification,  # noqa: F401
        PerformerModel,  # noqa: F401
    )
    from .modeling.modeling_rotary_transformer import (
        RotaryTransformerForCausalLM,  # noqa: F401
        RotaryTransformerForMaskedLM,  # noqa: F401
        RotaryTransformerForRetrieval,  # noqa: F401
        RotaryTransformerForSequenceClassification,  # noqa: F401
        RotaryTransformerModel,  # noqa: F401
    )
    from .modeling.modeling_s4 import (
        S4ForCausalLM,  # noqa: F401
        S4ForMaskedLM,  # noqa: F401
        S4ForRetrieval,  # noqa: F401
        S4ForSequenceClassification,  # noqa: F401
        S4Model,  # noqa: F401
    )
    from .modeling.modeling_spade import (
        SpadeForCausalLM,  # noqa: F401
        SpadeForMaskedLM,  # noqa: F401
        SpadeForRetrieval,  # noqa: F401
        SpadeForSequenceClassification,  # noqa: F401
        SpadeModel,  # noqa: F401
    )
