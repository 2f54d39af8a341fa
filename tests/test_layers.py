"""The package's layers point down only, and its import graph has no cycle.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``) and are checked by
import-linter, the same as ``lint-imports`` on the command line; grimp's graph (function-local
imports included, TYPE_CHECKING imports left out: they never run) is checked for cycles here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_layer_contracts_are_kept():
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_import_graph_has_no_cycle():
    graph = grimp.build_graph("turnrl", exclude_type_checking_imports=True)
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.b", imported="p.c")
    assert cycles(graph) == [["p.a", "p.b"]]


def test_function_local_imports_count():
    # grimp reads imports anywhere in a module, not only at its top
    source = (ROOT / "src" / "turnrl" / "cli.py").read_text()
    local = [
        n.module
        for f in ast.walk(ast.parse(source))
        if isinstance(f, ast.FunctionDef)
        for n in ast.walk(f)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("turnrl.")
    ]
    graph = grimp.build_graph("turnrl", exclude_type_checking_imports=True)
    imported = graph.find_modules_directly_imported_by("turnrl.cli")
    assert local and set(local) <= imported | {"turnrl.run"}
