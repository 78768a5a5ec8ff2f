"""Remote code for checkpoints of a plugin's architecture: the folder alone rebuilds the model, without spt_hf or the
plugin installed (`from_pretrained(folder, trust_remote_code=True)`).

transformers copies the module that defines a model class and the files it imports relatively. The classes of a
plugin are written by `mixer.model_classes_for`, not spelled out in its file, and the plugin imports spt_hf by
absolute name. So after transformers' copy, `write_remote_code`

- saves each plugin file under its own name, `PREFIX` + its name (`blocks.py` -> `spt_plugin_blocks.py`), which no
  spt_hf modeling file has: a plugin module named like one of spt_hf's files (`blocks.py`, `cache.py`) would
  otherwise replace it in the folder. Its relative imports of other plugin files, and the `auto_map` of
  `config.json`, follow the new names;
- rewrites the plugin files' `from spt_hf.modeling.X import ...` into `from .X import ...` (a plugin file that
  imports spt_hf otherwise cannot load without it: docs/own-architecture.md says to import from `spt_hf.modeling`);
- appends to the model's module the one call that writes the model classes around its mixers, as registration did;
- copies the spt_hf modeling files those imports need (they import each other relatively, as the built-ins' remote
  code does), and writes `PLUGIN_FILE` naming the plugin and its version.

A model loaded from such a folder (remote code) saves the way transformers does: its files are already these.
"""

import json
import re
import shutil
import sys
from pathlib import Path

from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

MODELING_DIR = Path(__file__).parent
PLUGIN_FILE = "spt_plugin.json"
PREFIX = "spt_plugin_"  # of a plugin file's name in a checkpoint; no spt_hf modeling file starts with it
ABSOLUTE_IMPORTS = (
    (re.compile(r"^(\s*)from\s+spt_hf\.modeling\.(\w+)\s+import\s", re.M), r"\1from .\2 import "),
    (re.compile(r"^(\s*)from\s+spt_hf\.modeling\s+import\s", re.M), r"\1from . import "),
)
FOOTER = """

# Written by spt_hf when the checkpoint was saved: the model classes around this file's mixers, as
# `spt_hf.register_architecture` wrote them (spt_hf/modeling/mixer.py: model_classes_for).
from .mixer import model_classes_for as _spt_model_classes_for  # noqa: E402
{imports}
globals().update({{c.__name__: c for c in _spt_model_classes_for({config}, ({mixers},), __name__).values()}})
"""


def plugin_files(model) -> list[Path]:
    """The plugin's source files a checkpoint of `model` carries: the modules of the model classes and the config,
    with their relative imports; none for a model loaded from remote code (its files are spt_hf's folder's)."""
    sources = {sys.modules[type(model).__module__].__file__, sys.modules[type(model.config).__module__].__file__}
    files = set()
    for source in sources:
        files |= {Path(source), *map(Path, get_relative_import_files(source))}
    return sorted(file for file in files if file.parent != MODELING_DIR)


def saved_name(module_name: str) -> str:
    """The name (no `.py`) under which a checkpoint carries the plugin module `module_name` (dotted or not)."""
    return PREFIX + module_name.rsplit(".", 1)[-1]


def write_remote_code(model, folder, plugin: dict | None = None) -> None:
    """Make the checkpoint `folder` of a plugin's `model` load with remote code alone (module docstring)."""
    folder = Path(folder)
    files = plugin_files(model)
    if files:
        write_plugin_files(model, folder, files)
        rename_auto_map(model.config, folder, {file.stem for file in files})
    copy_needed_modeling_files(folder)
    record = {**(plugin or {}), "model_type": model.config.model_type, "module": type(model).__module__}
    (folder / PLUGIN_FILE).write_text(json.dumps(record, indent=2) + "\n")


def write_plugin_files(model, folder: Path, files: list[Path]) -> None:
    """Replace transformers' copies of the plugin `files` in `folder` by the saved ones (module docstring)."""
    model_file = Path(sys.modules[type(model).__module__].__file__).name
    stems = "|".join(re.escape(file.stem) for file in files)
    own_imports = re.compile(rf"^(\s*)from\s+\.({stems})\s+import\s", re.M)
    for source in files:
        text = own_imports.sub(rf"\1from .{PREFIX}\2 import ", source.read_text(encoding="utf-8"))
        for pattern, replacement in ABSOLUTE_IMPORTS:
            text = pattern.sub(replacement, text)
        if source.name == model_file:
            text += footer(type(model), type(model.config))
        (folder / source.name).unlink(missing_ok=True)  # transformers' copy, which may bear an spt_hf file's name
        (folder / f"{saved_name(source.stem)}.py").write_text(text, encoding="utf-8")


def rename_auto_map(config, folder: Path, stems: set[str]) -> None:
    """Point the `auto_map` of `config` and of the folder's config.json at the plugin files' saved names."""
    auto_map = {
        auto_name: f"{saved_name(module)}.{name}" if module in stems else reference
        for auto_name, reference in (config.auto_map or {}).items()
        for module, name in [reference.rsplit(".", 1)]
    }
    config.auto_map = auto_map
    path = folder / "config.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**saved, "auto_map": auto_map}, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def footer(model_cls: type, config_cls: type) -> str:
    """The lines appended to the model's module: imports of the mixers and config defined elsewhere, and the call."""
    mixers = model_cls.spt_mixer_classes
    imports = [
        f"from .{saved_name(cls.__module__)} import {cls.__name__}"
        for cls in (config_cls, *mixers)
        if cls.__module__ != model_cls.__module__
    ]
    names = ", ".join(cls.__name__ for cls in mixers)
    return FOOTER.format(imports="\n".join(imports), config=config_cls.__name__, mixers=names)


def copy_needed_modeling_files(folder: Path) -> None:
    """Copy spt_hf's modeling files that the folder's files import relatively and it lacks, until none is missing."""
    pending = list(folder.glob("*.py"))
    while pending:
        for name in get_relative_imports(pending.pop()):
            target = folder / f"{name}.py"
            if not target.is_file() and (MODELING_DIR / target.name).is_file():
                shutil.copyfile(MODELING_DIR / target.name, target)
                pending.append(target)


__all__ = ["PLUGIN_FILE", "PREFIX", "write_remote_code"]
