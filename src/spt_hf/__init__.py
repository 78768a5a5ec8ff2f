"""spt_hf: self-pretraining (SPT) of long-sequence models in the Hugging Face ecosystem.

Importing the package registers every architecture with the transformers Auto classes (spt_hf/registry.py), so
`AutoModelFor*.from_pretrained` works on spt_hf checkpoints without `trust_remote_code`; each architecture's modeling
code runs on its first use. In the `spt-hf` command's own process (spt_hf/command.py) registration waits until a
command runs, so that `--help` answers at once. The public names below are imported on first read; the architectures'
classes (`spt_hf.S4Config`, `spt_hf.S4ForMaskedLM`, ...) come from the registry, `__all__` lists them all, and
`__init__.pyi` spells them out for static tools.
"""

from importlib import import_module, metadata

from .command import started_as_the_command

__version__ = metadata.version("spt_hf")  # pyproject.toml holds it

# Public name -> the module defining it, imported when the name is first read.
PUBLIC = {
    "AutoModelForRetrieval": ".auto",
    "MODEL_TYPES": ".modeling.architectures",
    "SequenceMixer": ".modeling.mixer",  # the plugin API (docs/own-architecture.md), outside `__all__`
    "register_architecture": ".registry",
    "unregister_architecture": ".registry",
}


def __getattr__(name: str):
    """A public name: from `PUBLIC`'s module, or an architecture's class from the registry (`registry.exported`)."""
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    registry = import_module(".registry", __name__)  # here, not at the top: the command's `--help` skips torch
    registry.register_auto_classes()  # done already, except in the command's process before its first public name
    if name in PUBLIC:
        return getattr(import_module(PUBLIC[name], __name__), name)
    if name == "__all__":
        return ["AutoModelForRetrieval", "MODEL_TYPES", *registry.exports()]
    return registry.exported(name)


if not started_as_the_command():
    from .registry import register_auto_classes

    register_auto_classes()
