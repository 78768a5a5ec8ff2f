"""Architectures from other packages: `register_architecture` and discovery through the `spt_hf.architectures` entry
point group (docs/own-architecture.md).

A plugin package declares, in its pyproject.toml,

    [project.entry-points."spt_hf.architectures"]
    lru = "spt_hf_lru"            # a module whose import registers, or "spt_hf_lru:register" (called once)

and spt_hf loads it the first time a name it does not know is asked for (`find_architecture`): by `compare
--architectures`, by a recipe's `model_type`, by a preset. Nothing is imported for names spt_hf already knows.
"""

import types
from importlib.metadata import entry_points, packages_distributions, version

from .modeling.architectures import REGISTRY, Architecture, add_architecture, by_name, remove_architecture

ENTRY_POINT_GROUP = "spt_hf.architectures"
_LOADED: set[str] = set()  # entry points already loaded in this process


def register_architecture(config_cls, mixer, name: str | None = None) -> Architecture:
    """Register an architecture from its config class (a `SequenceModelConfig` subclass with its own `model_type`)
    and its mixer class (`spt_hf.SequenceMixer` contract; a tuple of mixer classes gives one residual block each),
    or a modeling module that defines `<Prefix>Model` and the heads itself. spt_hf writes `<Prefix>Model` and every
    head (`ForMaskedLM`, `ForCausalLM` when the config has a causal form, `ForSequenceClassification`,
    `ForRetrieval`) into the mixer's module, registers them with the Auto classes, exports them as `spt_hf.<Class>`
    and adds the architecture to the one registry (recipes, presets, `compare`, `estimate`). `name` (default: the
    model_type less a leading "spt_") is what `--architectures` calls it. Returns the registry entry."""
    first = mixer[0] if isinstance(mixer, tuple | list) and mixer else mixer
    module_name = first.__name__ if isinstance(first, types.ModuleType) else getattr(first, "__module__", "")
    plugin, plugin_version = distribution_of(module_name or config_cls.__module__)
    entry = add_architecture(config_cls, mixer, name=name, plugin=plugin, version=plugin_version)
    from . import export_architecture

    export_architecture(entry)
    return entry


def unregister_architecture(model_type: str) -> None:
    """Undo `register_architecture` (tests registering a throwaway mixer): registry, Auto classes and exports."""
    from . import unexport_architecture

    unexport_architecture(remove_architecture(model_type))


def distribution_of(module_name: str) -> tuple[str | None, str | None]:
    """(distribution name, version) that installs the top-level package of `module_name`; (None, None) for spt_hf's
    own modules and for modules no installed distribution provides (a script, a test file)."""
    top = module_name.split(".", 1)[0]
    if top == "spt_hf":
        return None, None
    names = packages_distributions().get(top) or []
    if not names:
        return None, None
    return names[0], version(names[0])


def installed_plugins() -> dict[str, str]:
    """Entry point name -> its value (`module` or `module:function`) of every installed plugin."""
    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def load_plugins(name: str | None = None) -> None:
    """Load the installed plugins' entry points (the one called `name` first when given), each once a process."""
    points = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: point.name != name)
    for point in points:
        if point.value in _LOADED:
            continue
        _LOADED.add(point.value)
        try:
            loaded = point.load()
        except Exception as error:  # a broken plugin must not hide the others; its name and error are kept
            raise ValueError(f"The spt_hf plugin {point.name!r} ({point.value}) fails to load: {error}") from error
        if callable(loaded) and not isinstance(loaded, type):
            loaded()
        if name is not None and by_name(name) is not None:
            return


def find_architecture(name: str, builtins: list[str] | None = None) -> Architecture:
    """The registered architecture `name` (its name or model_type), loading installed plugins if it is unknown; one
    line naming the built-in architectures (`builtins`, default: the registry's names) and the installed plugins
    when none has it."""
    entry = by_name(name)
    if entry is None:
        load_plugins(name)
        entry = by_name(name)
    if entry is None:
        builtins = builtins or sorted(e.name for e in REGISTRY.values() if e.plugin is None)
        plugins = installed_plugins()
        found = ", ".join(f"{k} ({v})" for k, v in sorted(plugins.items())) or "none"
        raise ValueError(
            f"Unknown architecture {name!r}; architectures with presets: {', '.join(builtins)}; installed plugins "
            f"(entry point group {ENTRY_POINT_GROUP}): {found}. Install the plugin that provides it, or check the name."
        )
    return entry


__all__ = [
    "ENTRY_POINT_GROUP",
    "find_architecture",
    "installed_plugins",
    "load_plugins",
    "register_architecture",
    "unregister_architecture",
]
