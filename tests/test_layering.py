"""The package's layering: arc_kit modules import each other without cycles and without private names.

Every ``arc_kit/*.py`` is parsed with ``ast`` (nothing is imported), imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "arc_kit"

# Known edges that break a rule, each with the reason it stays; (importer, imported) or (importer, imported, name).
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()
ALLOWED_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in sorted(PACKAGE.glob("*.py"))}


def _imports(tree: ast.Module, modules) -> list[tuple[str, str | None]]:
    """(arc_kit module imported, name taken from it or None) for every import anywhere in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "arc_kit" and len(parts) > 1 and parts[1] in modules:
                    found.append((parts[1], None))
                elif parts[0] == "arc_kit":
                    found.append(("__init__", None))
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level:  # relative: from . import x / from .x import y
                parts = ["arc_kit", *[part for part in parts if part]]
            if parts[0] != "arc_kit":
                continue
            if len(parts) > 1:
                found.extend((parts[1], alias.name) for alias in node.names)
            else:  # from arc_kit import x: a submodule, or a name of the package
                for alias in node.names:
                    found.append((alias.name, None) if alias.name in modules else ("__init__", alias.name))
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
    assert "run" in graph["cli"] or any("run" in targets for targets in graph.values())
    assert "tasks" in graph["planner"]  # planner imports Task, TaskSet at the top
    assert len(graph) == len(list(PACKAGE.glob("*.py")))


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_imports_are_found_inside_functions_and_private_names_kept():
    source = ("import os\nfrom arc_kit.grids import grid_key\n\n"
              "def f():\n    from arc_kit.models import _private as p\n    import arc_kit.tasks\n"
              "    from arc_kit import run, __version__\n")
    modules = {"grids": None, "models": None, "tasks": None, "run": None}
    assert sorted(_imports(ast.parse(source), modules), key=str) == sorted(
        [("grids", "grid_key"), ("models", "_private"), ("tasks", None), ("run", None), ("__init__", "__version__")],
        key=str)


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
