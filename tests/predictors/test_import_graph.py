"""No import circle inside ``nnmeter.predictors``: every import, at module level or inside
a function, of one predictors module by another is an edge, and the graph is acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import nnmeter.predictors

PKG = "nnmeter.predictors"
ROOT = Path(nnmeter.predictors.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PKG, *parts])


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Predictors modules that ``path`` imports (``from nnmeter.predictors import X``
    names the package itself, or its submodule X when there is one)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in modules:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out.add(sub if sub in modules else node.module)
    return out


def import_graph() -> nx.DiGraph:
    files = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for f in files:
        me = _module_name(f)
        g.add_edges_from((me, other) for other in _imports(f, modules) if other != me)
    return g


def test_the_graph_sees_the_modules():
    g = import_graph()
    assert f"{PKG}.composition" in g and f"{PKG}.terms.chain" in g
    assert g.has_edge(f"{PKG}.train", f"{PKG}.composition")


def test_no_import_circle_inside_predictors():
    g = import_graph()
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])
