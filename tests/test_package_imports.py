"""The controller package has no import circles: no module imports, at its top or inside a
function, one that imports it back (directly or through others)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "flagperf_ansible"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(("flagperf_ansible", *parts)).removesuffix(".__init__")
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of the package's modules. ``from pkg import submodule`` counts as
    the submodule alone (the package's __init__ running first is no circle of two modules)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flagperf_ansible"):
                submodules = {f"{node.module}.{a.name}" for a in node.names} & set(known)
                deps |= submodules
                if len(submodules) < len(node.names):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in known}
        graph[name] = {d for d in deps if d in known and d not in (name, "flagperf_ansible")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_controller_package_has_no_import_circle():
    graph = import_graph()
    assert "flagperf_ansible.results.summary" in graph["flagperf_ansible.results.report"]
    assert cycles(graph) == []
