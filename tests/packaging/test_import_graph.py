"""The import graph of spt_hf's sources, every import statement at any depth (inside functions too) and every
`import_module(".x", __name__)`: the package and its registration are in no import circle, so no import inside a
function closes one."""

import ast
from pathlib import Path

import spt_hf

SRC = Path(spt_hf.__file__).parent
# The package, registration and the plugin kit: the modules whose circles were closed by imports inside functions.
ACYCLIC = ("spt_hf", "spt_hf.registry", "spt_hf.cli", "spt_hf.testing", "spt_hf.testing.conformance")


def module_names() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    names = {}
    for path in SRC.rglob("*.py"):
        parts = ["spt_hf", *path.relative_to(SRC).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(module: str, path: Path, modules: dict) -> set[str]:
    """The spt_hf modules `module` imports anywhere in its file (a name imported from a package that is a submodule
    counts as that submodule)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            source = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names
            ]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "import_module" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("."):
                targets = [package + first.value]
        found |= {target for target in targets if target in modules and target != module}
    return found


def cycle_through(start: str, graph: dict) -> list[str] | None:
    """A path of imports from `start` back to itself, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for target in graph[node]:
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_the_package_and_registration_are_in_no_import_circle():
    modules = module_names()
    graph = {name: imported(name, path, modules) for name, path in modules.items()}
    assert {"spt_hf.registry", "spt_hf.command"} <= graph["spt_hf"]  # the graph sees the package's own imports
    for module in ACYCLIC:
        cycle = cycle_through(module, graph)
        assert cycle is None, f"import circle: {' -> '.join(cycle)}"
