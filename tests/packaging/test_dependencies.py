"""What a bare `pip install spt_hf` brings is enough for every module spt_hf imports; optional packages (the
`extras` and `cluster` extras) are looked up only where they are used and fail in one line naming the extra.

Fast: reads pyproject.toml and the source tree; the slow wheel test (test_wheel.py) installs the bare wheel for real.
"""

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from spt_hf.compare.processes import require_package
from spt_hf.recipes.arguments import require_reporting_packages

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalise(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])


def imported_modules() -> dict[str, str]:
    """Top-level module -> a file importing it, over every absolute import in src/spt_hf (lazy ones included)."""
    found = {}
    for path in sorted((REPO / "src" / "spt_hf").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


def test_every_module_spt_hf_imports_is_stdlib_or_a_core_dependency():
    core = {requirement_name(r) for r in PYPROJECT["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    for module, where in imported_modules().items():
        if module in sys.stdlib_module_names or module == "spt_hf":
            continue
        owners = {normalise(d) for d in distributions.get(module, [])}
        assert owners & core, f"{where} imports {module!r} ({owners or 'not installed'}), not a core dependency"


def test_the_demo_and_report_dependencies_are_core_and_pinned():
    core = {requirement_name(r) for r in PYPROJECT["dependencies"]}
    assert {"scikit-learn", "matplotlib", "scipy"} <= core
    pins = {
        normalise(line.split("==")[0]): line
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    extras = {requirement_name(r) for group in PYPROJECT["optional-dependencies"].values() for r in group}
    assert not (core | extras) - set(pins), "every dependency is pinned in constraints.txt"
    assert "MEGA, SPADE, Linformer, Performer" in PYPROJECT["description"]


def test_tensorboard_reporting_without_tensorboard_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if "ensorboard" in name else real(name, *a))
    with pytest.raises(ImportError, match=r'^`report_to: tensorboard` needs .* pip install "spt_hf\[extras\]"') as info:
        require_reporting_packages(["tensorboard"])
    assert "\n" not in str(info.value)
    require_reporting_packages("none")  # nothing asked, nothing needed
    require_reporting_packages([])


def test_a_cluster_launcher_without_its_package_names_the_extra():
    with pytest.raises(ImportError, match=r'^`--launcher ray` needs the `not_a_module_xyz` .*"spt_hf\[cluster\]"'):
        require_package("not_a_module_xyz", "ray")
