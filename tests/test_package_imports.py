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


# Which of the controller's packages each may import: configuration knows nothing of the run
# or its results, results nothing of the run, the data sets nothing of the controller.
MAY_IMPORT = {
    "config": {"config", "datasets"},
    "results": {"results", "config", "paths"},
    "run": {"run", "config", "results", "datasets", "paths"},
    "datasets": {"datasets"},
}


def test_the_controller_packages_are_layered_as_the_flow_of_a_run():
    graph = import_graph()
    crossing = []
    for name, deps in graph.items():
        group = name.split(".")[1] if name.count(".") >= 2 else None
        for dep in deps:
            target = dep.split(".")[1]
            if group in MAY_IMPORT and target not in MAY_IMPORT[group]:
                crossing.append(f"{name} imports {dep}")
    assert {"config", "run", "results", "datasets"} <= {n.split(".")[1] for n in graph if n.count(".") >= 2}
    assert crossing == []


HOST_PACKAGE = PACKAGE.parent / "flagperf_host"


def test_the_host_package_is_python_3_8_with_the_standard_library_and_itself_only():
    """It runs on hosts from its archive, with whatever Python they have (3.8 or later): its
    syntax is 3.8's, annotations are left unevaluated (``from __future__ import annotations``:
    ``list[str]`` fails at definition time before 3.9), and a third-party import must be inside
    a function that needs it (psutil for the monitor, docker for a container's end) and named
    here."""
    import sys

    allowed_lazy = {"psutil", "docker"}
    found, evaluated = {}, []
    paths = sorted(HOST_PACKAGE.rglob("*.py"))
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 8))
        top = {id(node) for node in tree.body}
        future = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                     and any(a.name == "annotations" for a in node.names) for node in tree.body)
        annotated = [node.name for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and (node.returns or any(a.annotation for a in node.args.args))]
        if annotated and not future:
            evaluated.append(f"{path.name}: {annotated[0]}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.partition(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [(node.module or "").partition(".")[0]]
            else:
                continue
            for root in roots:
                if root in sys.stdlib_module_names or root in ("flagperf_host", "__future__"):
                    continue
                found.setdefault(root, set()).add("top" if id(node) in top else "lazy")
                found[root].add(path.name)
    assert set(found) <= allowed_lazy, found
    assert not [root for root, where in found.items() if "top" in where]
    assert evaluated == []
    assert {"data_check.py", "node_job.py", "hdf5.py", "imagenet.py"} <= {p.name for p in paths}
