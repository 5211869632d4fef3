"""The package's layering: arc_kit modules import each other without cycles and without private names.

Every ``arc_kit/**/*.py`` is parsed with ``ast`` (nothing is imported), imports inside functions included.
A module is named by its dotted path under arc_kit ("data.grids"); a package by its folder ("run"), the
top package "__init__". The floors between subpackages are import-linter's contracts (pyproject.toml),
checked here by running ``lint-imports``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "arc_kit"

# Known edges that break a rule, each with the reason it stays; (importer, imported) or (importer, imported, name).
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()
ALLOWED_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


@functools.cache  # parsed once for the tests below, which only read the trees
def _modules() -> dict[str, ast.Module]:
    return {_module_name(path): ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def _target(dotted: str, modules) -> str:
    """The module or package that ``arc_kit.<dotted>`` names: the longest prefix that is one."""
    parts = dotted.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or "__init__"


def _imports(tree: ast.Module, modules) -> list[tuple[str, str | None]]:
    """(arc_kit module imported, name taken from it or None) for every import anywhere in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((_target(alias.name.partition(".")[2], modules), None)
                         for alias in node.names if alias.name.split(".")[0] == "arc_kit")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "arc_kit" and not node.level:
            package = node.module.partition(".")[2]
            for alias in node.names:  # a submodule of the package, or a name the module (package) holds
                submodule = f"{package}.{alias.name}" if package else alias.name
                found.append((submodule, None) if submodule in modules else (_target(package, modules), alias.name))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {imported for imported, _ in _imports(tree, modules) if imported != name}
            for name, tree in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_import_graph_is_found():
    graph = _graph()
    assert "run.runs" in graph["cli.solve"]
    assert "data.tasks" in graph["run.planner"]  # planner imports Task, TaskSet at the top
    assert "lazy" in graph["run"]  # a package's __init__ is a module of the graph too
    assert len(graph) == len(list(PACKAGE.rglob("*.py")))


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_imports_are_found_inside_functions_and_private_names_kept():
    source = ("import os\nfrom arc_kit.data.grids import grid_key\n\n"
              "def f():\n    from arc_kit.model.loading import _private as p\n    import arc_kit.data.tasks\n"
              "    from arc_kit import run, __version__\n")
    modules = {"__init__": None, "data": None, "data.grids": None, "data.tasks": None, "model": None,
               "model.loading": None, "run": None}
    assert sorted(_imports(ast.parse(source), modules), key=str) == sorted(
        [("data.grids", "grid_key"), ("model.loading", "_private"), ("data.tasks", None), ("run", None),
         ("__init__", "__version__")], key=str)


def test_arc_kit_modules_import_each_other_without_cycles():
    graph = {name: {target for target in targets if (name, target) not in ALLOWED_CYCLE_EDGES}
             for name, targets in _graph().items()}
    # "__init__" stands for the package itself (``from arc_kit import name``): it re-exports its modules'
    # names, so a module it imports must not import from the package
    assert _cycles(graph) == []


def test_no_arc_kit_module_imports_a_private_name_from_another():
    modules = _modules()
    private = sorted({(name, imported, taken) for name, tree in modules.items()
                      for imported, taken in _imports(tree, modules)
                      if taken and taken.startswith("_") and not taken.startswith("__") and imported != name
                      and (name, imported, taken) not in ALLOWED_PRIVATE_IMPORTS})
    assert private == []


def test_the_floors_hold_as_import_linter_reads_them():
    """pyproject.toml's contracts: each subpackage imports only from the floors below; data and text need no torch."""
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert command, "import-linter is not installed (requirements-test.txt)"
    result = subprocess.run([command, "--no-cache"], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 kept, 0 broken" in result.stdout


def test_every_name_a_subpackage_hands_on_is_there_and_a_wrong_one_is_an_attribute_error():
    for name in ("data", "text", "model", "method", "run", "experiments", "kaggle", "sudoku", "settings"):
        package = importlib.import_module(f"arc_kit.{name}")
        assert package.__all__, name
        for public in package.__all__:
            assert getattr(package, public) is not None, f"arc_kit.{name}.{public}"
    method = importlib.import_module("arc_kit.method")
    assert method.Solver is importlib.import_module("arc_kit.method.solver").Solver
    assert "Solver" in dir(method)
    with pytest.raises(AttributeError, match="arc_kit.method.*no_such_name"):
        method.no_such_name  # noqa: B018
