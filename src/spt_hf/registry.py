"""Registration: spt_hf's architectures and plugins' with the transformers Auto classes, and the package's exports.

`register_auto_classes` (run by `import spt_hf`) registers every architecture of the one list
(modeling/architectures.py): its config with `AutoConfig` at once, and its model classes as *pending* entries of the
Auto classes' mappings, which import the architecture's modeling module on the first lookup (`LazyEntries`). So
`AutoModelFor*.from_pretrained` works on spt_hf checkpoints after `import spt_hf`, while a process that never builds
a model does not import transformers' modeling code (as costly as torch itself). The package's exports
(`spt_hf.S4Model`, ...) are the registry's classes, read the same way (`exported`).

Architectures from other packages come through `register_architecture`, or through the `spt_hf.architectures` entry
point group (docs/own-architecture.md). A plugin package declares, in its pyproject.toml,

    [project.entry-points."spt_hf.architectures"]
    lru = "spt_hf_lru"            # a module whose import registers, or "spt_hf_lru:register" (called once)

and spt_hf loads it the first time a name it does not know is asked for (`find_architecture`): by `compare
--architectures`, by a recipe's `model_type`, by a preset, or by an Auto class reading a checkpoint's `model_type`
that neither transformers nor spt_hf knows (`PluginConfigs`: `AutoModelFor*.from_pretrained` of a plugin's
checkpoint needs `import spt_hf` alone). Nothing is imported for names spt_hf already knows.
"""

import types
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points, packages_distributions, version

import transformers
from transformers import AutoConfig, AutoFeatureExtractor, AutoModelForAudioClassification
from transformers.models.auto.auto_factory import _BaseAutoModelClass
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING

from .auto import AutoModelForRetrieval
from .modeling.architectures import (
    AUTO_CLASS_SUFFIXES,
    REGISTRY,
    Architecture,
    add_architecture,
    by_name,
    remove_architecture,
)
from .modeling.feature_extraction_series import SeriesFeatureExtractor

ENTRY_POINT_GROUP = "spt_hf.architectures"
_LOADED: set[str] = set()  # entry points already loaded in this process


def auto_class(auto_name: str) -> type:
    """The Auto class `auto_name`: transformers', or spt_hf's AutoModelForRetrieval (which transformers lacks)."""
    return AutoModelForRetrieval if auto_name == "AutoModelForRetrieval" else getattr(transformers, auto_name)


def registered_auto_classes() -> list[type]:
    """The Auto classes an architecture's model classes are registered with."""
    return [auto_class(name) for name in AUTO_CLASS_SUFFIXES] + [AutoModelForAudioClassification]


class Pending:
    """An Auto mapping's entry for an architecture whose modeling module has not run yet."""

    def __init__(self, entry: Architecture) -> None:
        self.entry = entry


class LazyEntries(dict):
    """The classes registered with one Auto class (transformers keeps them in its mapping's `_extra_content`), where
    a `Pending` entry loads its architecture (`load_architecture`) when it is first looked up or listed."""

    def resolve(self, key) -> None:
        value = dict.get(self, key)
        if isinstance(value, Pending):
            load_architecture(value.entry)

    def __contains__(self, key) -> bool:
        self.resolve(key)
        return dict.__contains__(self, key)

    def __getitem__(self, key):
        self.resolve(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self.resolve(key)
        return dict.get(self, key, default)

    def values(self):
        for key in list(dict.keys(self)):
            self.resolve(key)
        return dict.values(self)

    def items(self):
        self.values()
        return dict.items(self)


class PluginConfigs(dict):
    """The configs registered with AutoConfig (transformers keeps them in CONFIG_MAPPING's `_extra_content`), where
    the first lookup of a model type that neither transformers nor spt_hf knows loads the installed plugins
    (`load_plugins`) until one registers it; each model type is looked for once a process."""

    def __init__(self, content: dict) -> None:
        super().__init__(content)
        self.searched: set[str] = set()

    def __contains__(self, key) -> bool:
        unknown = isinstance(key, str) and key not in CONFIG_MAPPING._mapping and key not in self.searched
        if unknown and not dict.__contains__(self, key):
            self.searched.add(key)
            load_plugins(key)
        return dict.__contains__(self, key)


def register_with_auto_classes(entry: Architecture) -> None:
    """Register one architecture: its config with AutoConfig (and for remote-code saving) and with the series
    feature extractor (a checkpoint of continuous inputs loads it without trust_remote_code), its model classes as
    `Pending` entries of every Auto class of `registered_auto_classes`."""
    config_cls = entry.config_cls
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    config_cls.register_for_auto_class()
    AutoFeatureExtractor.register(config_cls, SeriesFeatureExtractor, exist_ok=True)
    pending = Pending(entry)
    for auto_cls in registered_auto_classes():
        mapping = auto_cls._model_mapping
        if not isinstance(mapping._extra_content, LazyEntries):
            mapping._extra_content = LazyEntries(mapping._extra_content)
        dict.__setitem__(mapping._extra_content, config_cls, pending)


def load_architecture(entry: Architecture) -> dict[str, type]:
    """Run an architecture's modeling module and put its classes in place of its `Pending` entries (an Auto class it
    has no head for loses its entry); returns its classes by Auto class name."""
    classes = entry.classes
    for auto_cls in registered_auto_classes():
        dict.pop(auto_cls._model_mapping._extra_content, entry.config_cls, None)
    for auto_name, model_cls in classes.items():
        auto_class(auto_name).register(entry.config_cls, model_cls, exist_ok=True)
        # What `register_for_auto_class` sets; it refuses Auto classes that transformers does not define.
        model_cls._auto_class = auto_name
    # Raw inputs (docs/pipelines.md): the classifier serves pipeline("audio-classification") on one-channel series.
    classifier = classes["AutoModelForSequenceClassification"]
    AutoModelForAudioClassification.register(entry.config_cls, classifier, exist_ok=True)
    return classes


def register_auto_classes() -> None:
    """Register every architecture of the registry with the Auto classes (`register_with_auto_classes`), and let
    AutoConfig look unknown model types up in the installed plugins (`PluginConfigs`); again in the same process, it
    registers only what is not registered yet."""
    for model_type, entry in REGISTRY.items():
        if not dict.__contains__(CONFIG_MAPPING._extra_content, model_type):
            register_with_auto_classes(entry)
    if not isinstance(CONFIG_MAPPING._extra_content, PluginConfigs):
        CONFIG_MAPPING._extra_content = PluginConfigs(CONFIG_MAPPING._extra_content)


def exported(name: str) -> type:
    """`spt_hf.<name>`: the config or model class `name` of a registered architecture (its modeling module runs on
    the first read of a model class); an AttributeError for any other name."""
    for entry in REGISTRY.values():
        if name == entry.config_cls.__name__:
            return entry.config_cls
        if name in entry.class_names():
            found = {cls.__name__: cls for cls in load_architecture(entry).values()}
            if name in found:
                return found[name]
    raise AttributeError(f"module 'spt_hf' has no attribute {name!r}")


def exports() -> dict[str, type]:
    """Every class `exported` gives, by name (runs every architecture's modeling module)."""
    names = {}
    for entry in REGISTRY.values():
        names[entry.config_cls.__name__] = entry.config_cls
        names.update((cls.__name__, cls) for cls in load_architecture(entry).values())
    return names


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
    register_with_auto_classes(entry)
    load_architecture(entry)
    return entry


def unregister_architecture(model_type: str) -> None:
    """Undo `register_architecture` (tests registering a throwaway mixer): registry, Auto classes and exports."""
    entry = remove_architecture(model_type)
    CONFIG_MAPPING._extra_content.pop(model_type, None)
    FEATURE_EXTRACTOR_MAPPING._extra_content.pop(entry.config_cls, None)
    for auto_cls in _BaseAutoModelClass.__subclasses__():
        if auto_cls._model_mapping is not None:
            dict.pop(auto_cls._model_mapping._extra_content, entry.config_cls, None)


@contextmanager
def registered(config_cls, mixer, name: str | None = None) -> Iterator[Architecture]:
    """Register an architecture for the duration of a `with` block (tests of a throwaway mixer); yields its
    registry entry and unregisters it afterwards, unless it was registered before."""
    before = REGISTRY.get(config_cls.model_type)
    entry = register_architecture(config_cls, mixer, name=name)
    try:
        yield entry
    finally:
        if before is None:
            unregister_architecture(config_cls.model_type)


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
    "exported",
    "exports",
    "register_auto_classes",
    "registered",
    "find_architecture",
    "installed_plugins",
    "load_plugins",
    "register_architecture",
    "unregister_architecture",
]
