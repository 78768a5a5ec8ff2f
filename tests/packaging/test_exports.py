"""The package's public names: `__all__` resolves at run time, and the `TYPE_CHECKING` block that shows the
registered classes to static tools (IDEs, type checkers) lists exactly the classes the package defines at run time,
each from the module that defines it."""

import ast
from pathlib import Path

import spt_hf

INIT = Path(spt_hf.__file__)


def type_checking_imports() -> dict[str, str]:
    """{name: module} of the `from .x import name` lines under `if TYPE_CHECKING:` in spt_hf/__init__.py."""
    tree = ast.parse(INIT.read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert len(blocks) == 1, "spt_hf/__init__.py has one `if TYPE_CHECKING:` block"
    return {
        alias.asname or alias.name: "spt_hf." + node.module
        for node in blocks[0].body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_every_public_name_resolves():
    assert len(spt_hf.__all__) == len(set(spt_hf.__all__))
    for name in spt_hf.__all__:
        assert getattr(spt_hf, name) is not None, name


def test_the_type_checking_block_lists_the_classes_defined_at_run_time():
    listed = type_checking_imports()
    assert set(listed) == set(spt_hf._EXPORTS) == set(spt_hf.__all__) - {"AutoModelForRetrieval", "MODEL_TYPES"}
    for name, module in listed.items():
        assert spt_hf._EXPORTS[name].__module__ == module, name  # the static import finds the same class
