"""The package's public names: `__all__` resolves at run time, `__init__.pyi` (what static tools read) lists exactly
the classes the package exports at run time, each from the module that defines it, and `import spt_hf` registers
the Auto classes without importing any modeling module or transformers' modeling code (they load on first use)."""

import ast
import subprocess
import sys
from pathlib import Path

import spt_hf
from spt_hf.registry import exports

STUB = Path(spt_hf.__file__).with_suffix(".pyi")
PLUGIN_API = {"SequenceMixer", "register_architecture", "unregister_architecture"}


def stub_imports() -> dict[str, str]:
    """{name: module} of the `from .x import name as name` lines of spt_hf/__init__.pyi."""
    tree = ast.parse(STUB.read_text())
    return {
        alias.asname or alias.name: "spt_hf." + node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_every_public_name_resolves():
    assert len(spt_hf.__all__) == len(set(spt_hf.__all__))
    for name in [*spt_hf.__all__, *PLUGIN_API]:
        assert getattr(spt_hf, name) is not None, name


def test_the_stub_lists_the_names_defined_at_run_time():
    listed = stub_imports()
    assert set(listed) == set(spt_hf.__all__) | PLUGIN_API
    assert set(exports()) == set(spt_hf.__all__) - {"AutoModelForRetrieval", "MODEL_TYPES"}
    for name, module in listed.items():
        value = getattr(spt_hf, name)
        assert getattr(value, "__module__", module) == module, name  # the static import finds the same object


def test_import_registers_without_importing_modeling_code():
    script = (
        "import sys, spt_hf\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "assert 'spt_s4' in CONFIG_MAPPING, 'not registered'\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('spt_hf.modeling.modeling_'))\n"
        "assert not loaded and 'transformers.modeling_utils' not in sys.modules, loaded\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_unknown_names_raise_attribute_error():
    for name in ("NoSuchModel", "S4ForNothing", "__wrapped__"):
        assert not hasattr(spt_hf, name), name
