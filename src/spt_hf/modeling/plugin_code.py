"""Remote code for checkpoints of a plugin's architecture: the folder alone rebuilds the model, without spt_hf or the
plugin installed (`from_pretrained(folder, trust_remote_code=True)`).

transformers copies the module that defines a model class and the files it imports relatively. The classes of a
plugin are written by `mixer.model_classes_for`, not spelled out in its file, and the plugin imports spt_hf by
absolute name. So after transformers' copy, `write_remote_code`

- rewrites the copied plugin files' `from spt_hf.modeling.X import ...` into `from .X import ...` (a plugin file that
  imports spt_hf otherwise cannot load without it: docs/own-architecture.md says to import from `spt_hf.modeling`);
- appends to the model's module the one call that writes the model classes around its mixers, as registration did;
- copies the spt_hf modeling files those imports need (they import each other relatively, as the built-ins' remote
  code does), and writes `PLUGIN_FILE` naming the plugin and its version.
"""

import json
import re
import shutil
import sys
from pathlib import Path

from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

MODELING_DIR = Path(__file__).parent
PLUGIN_FILE = "spt_plugin.json"
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
    with their relative imports."""
    sources = {sys.modules[type(model).__module__].__file__, sys.modules[type(model.config).__module__].__file__}
    files = set()
    for source in sources:
        files |= {Path(source), *map(Path, get_relative_import_files(source))}
    return sorted(files)


def write_remote_code(model, folder, plugin: dict | None = None) -> None:
    """Make the checkpoint `folder` of a plugin's `model` load with remote code alone (module docstring)."""
    folder = Path(folder)
    model_file = Path(sys.modules[type(model).__module__].__file__).name
    for source in plugin_files(model):
        text = source.read_text(encoding="utf-8")
        for pattern, replacement in ABSOLUTE_IMPORTS:
            text = pattern.sub(replacement, text)
        if source.name == model_file:
            text += footer(type(model), type(model.config))
        (folder / source.name).write_text(text, encoding="utf-8")
    copy_needed_modeling_files(folder)
    record = {**(plugin or {}), "model_type": model.config.model_type, "module": type(model).__module__}
    (folder / PLUGIN_FILE).write_text(json.dumps(record, indent=2) + "\n")


def footer(model_cls: type, config_cls: type) -> str:
    """The lines appended to the model's module: imports of the mixers and config defined elsewhere, and the call."""
    mixers = model_cls.spt_mixer_classes
    imports = [
        f"from .{cls.__module__.rsplit('.', 1)[-1]} import {cls.__name__}"
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


__all__ = ["PLUGIN_FILE", "write_remote_code"]
