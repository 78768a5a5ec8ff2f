"""The package's structure, read from the source as text (nothing is imported): imports run downwards through the
layers below, no module imports itself back through any chain of imports (at any depth, imports inside functions
included), functions stay short, `__init__.py` declares exports, and phase names are compared through the constants
of `spt_hf.phases`."""

import ast
from functools import cache
from pathlib import Path

import pytest

import spt_hf.phases

PACKAGE = Path(spt_hf.phases.__file__).parent
SRC = PACKAGE.parent

# Top-level modules and packages of spt_hf, lowest first: a name may import its own layer and those before it.
LAYERS = (
    ("phases", "slurm_queries", "tuning"),  # vocabularies and contracts: the standard library only
    ("modeling",),  # shipped as remote code: torch, transformers and its siblings
    ("checkpoints", "metrics", "auto", "registry"),
    ("data", "cost"),
    ("hub", "preprocessing"),
    ("recipes",),
    ("training",),
    ("report",),
    ("compare", "testing"),
    ("demo", "commands"),
    ("cli", "__main__", ""),  # "" is the package's own __init__.py
)
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}
MAX_FUNCTION_LINES = 80
MAX_INIT_LINES = 80


@cache
def modules() -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package's __init__)} of every module of spt_hf."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported(module: str, is_package: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The spt_hf modules an import statement names (a package when the names are not modules of it)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "spt_hf"]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        origin = ".".join([*base, node.module] if node.module else base)
    else:
        origin = node.module or ""
    if origin.split(".")[0] != "spt_hf":
        return []
    return [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules() else origin for alias in node.names]


@cache
def import_graph() -> dict[str, set[str]]:
    """{module: the spt_hf modules it imports anywhere in its file}, except under `if TYPE_CHECKING:`."""
    graph = {}
    for module, (path, is_package) in modules().items():
        tree = ast.parse(path.read_text())
        static_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in static_only:
                for target in _imported(module, is_package, node):
                    while target not in modules() and "." in target:
                        target = target.rsplit(".", 1)[0]
                    targets.add(target)
        graph[module] = targets - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def top_level(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_circle_finder_finds_a_circle_through_a_function_level_import():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_at_any_depth():
    found = circles(import_graph())
    assert not found, f"import circles (move the name that closes each one): {found}"


def test_every_top_level_module_has_a_layer():
    missing = sorted({top_level(module) for module in modules()} - set(LAYER_OF))
    assert not missing, f"add {missing} to LAYERS"


def test_imports_never_point_upwards():
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if LAYER_OF[top_level(target)] > LAYER_OF[top_level(module)]
    )
    assert not upward, f"imports from a higher layer: {upward}"


def test_modeling_imports_only_its_siblings():
    # a saved checkpoint carries modeling/ as remote code: it must load where spt_hf is not installed
    outside = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if top_level(module) == "modeling"
        for target in targets
        if top_level(target) != "modeling"
    )
    assert not outside, outside


def test_functions_stay_short():
    long = []
    for module, (path, _) in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {length} lines")
    assert not long, long


def test_the_package_init_declares_exports_only():
    path, _ = modules()["spt_hf"]
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_INIT_LINES, f"spt_hf/__init__.py has {lines} lines; registration lives in registry.py"


@pytest.mark.parametrize("literal", spt_hf.phases.PHASES)
def test_phase_names_are_compared_through_the_constants(literal):
    """`phase == "spt"` spells a name that `spt_hf.phases` owns; compare with SPT_PHASE, FINETUNE_PHASE,
    BASELINE_PHASE or FINETUNING_PHASES instead."""
    spelled = []
    for module, (path, _) in modules().items():
        if module == "spt_hf.phases":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            names_a_phase = any(
                isinstance(operand, ast.Name | ast.Attribute) and "phase" in ast.unparse(operand).lower()
                for operand in operands
            )
            spelled_out = [o for o in operands if isinstance(o, ast.Constant | ast.Tuple | ast.List | ast.Set)]
            constants = {c.value for operand in spelled_out for c in ast.walk(operand) if isinstance(c, ast.Constant)}
            if names_a_phase and literal in constants:
                spelled.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert not spelled, spelled
