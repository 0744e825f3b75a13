"""JSON round trip of a ModelGraph, versioned by ``schema_version``.

Examples
--------
>>> from nnmeter.ir.graph import ModelGraph
>>> g = ModelGraph("t")
>>> _ = g.add_input("x", (1, 4))
>>> _ = g.add_node("r", "relu", inputs=["x"])
>>> g.set_outputs(["r"])
>>> from_json(to_json(g.infer_shapes())).structurally_equal(g)
True
"""

from __future__ import annotations

import json
import os
from typing import Any

import networkx as nx

from nnmeter.errors import GraphValidationError, ModelLoadError, ShapeInferenceError
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.ir.ops import attrs_from_dict, attrs_to_dict
from nnmeter.ir.validate import lint

__all__ = ["SCHEMA_VERSION", "to_dict", "from_dict", "to_json", "from_json"]

SCHEMA_VERSION = 1


def to_dict(graph: ModelGraph) -> dict[str, Any]:
    """A JSON-able dict of the graph, nodes in topological order."""
    return {
        "schema_version": SCHEMA_VERSION,
        "name": graph.name,
        "dtype": graph.dtype,
        "outputs": [[r.node, r.port] for r in graph.outputs],
        "meta": graph.meta,
        "nodes": [
            {
                "name": n.name,
                "op": n.op,
                "attrs": attrs_to_dict(n.attrs),
                "inputs": [[r.node, r.port] for r in n.inputs],
                "input_shapes": [list(s) for s in n.input_shapes],
                "output_shapes": [list(s) for s in n.output_shapes],
                "source": n.source,
                "meta": n.meta,
            }
            for n in graph.topological_nodes()
        ],
    }


def from_dict(data: dict[str, Any], *, check: bool = True) -> ModelGraph:
    """Rebuild a graph from :func:`to_dict` output.

    Nodes may come in any order; they are added producers first. Every field is
    type-checked. With ``check`` the result is validated as well: shapes are inferred
    when none are stored, and stored shapes must agree with the attributes (so an edited
    ``out_channels`` or a reference to a port the producer lacks is refused).

    Raises
    ------
    ModelLoadError
        If the schema version is missing or newer than this code understands, a field is
        malformed, the nodes form a cycle, or the graph fails validation.
    """
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ModelLoadError(
            f"graph JSON has schema_version {version!r}; this nnmeter reads version "
            f"{SCHEMA_VERSION}. Re-export the graph with this version."
        )
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise ModelLoadError("graph JSON is malformed: it has no 'nodes' list; write it with "
                             "`nnmeter ir MODEL --json` or ModelGraph.to_json()")
    g = ModelGraph(str(data.get("name", "model")), dtype=str(data.get("dtype", "float32")))
    meta = data.get("meta", {})
    g.meta = dict(meta) if isinstance(meta, dict) else {}
    try:
        parsed = [_parse_node(i, nd) for i, nd in enumerate(nodes)]
    except GraphValidationError as err:
        raise ModelLoadError(f"graph JSON is malformed: {err}") from err
    try:
        for nd in _producers_first(parsed):
            g.add_node(nd["name"], nd["op"], nd["attrs"], nd["inputs"],
                       input_shapes=nd["input_shapes"], output_shapes=nd["output_shapes"],
                       source=nd["source"], meta=nd["meta"])
        g.set_outputs([_ref(r, "outputs") for r in _list(data.get("outputs", []), "outputs")])
    except GraphValidationError as err:
        raise ModelLoadError(f"graph JSON is inconsistent: {err}") from err
    except ModelLoadError:
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise ModelLoadError(f"graph JSON is malformed: {err}") from err
    if check and len(g):
        if any(not n.output_shapes for n in g.nodes() if n.op != "input"):
            # shapes left out (all or some): inferred, and the stored ones checked
            stored = {n.name: n.output_shapes for n in g.nodes() if n.output_shapes}
            try:
                g.infer_shapes()
            except ShapeInferenceError as err:
                raise ModelLoadError(f"graph JSON is inconsistent: {err}") from err
            for name, shapes in stored.items():
                if g.node(name).output_shapes != shapes:
                    raise ModelLoadError(
                        f"graph JSON is inconsistent: {g.node(name).op} {name!r}: recorded "
                        f"output shapes {list(shapes)} differ from inferred "
                        f"{list(g.node(name).output_shapes)}; fix the attributes or leave "
                        f"the shapes out")
        problems = lint(g)
        if problems:
            shown = "; ".join(problems[:3])
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise ModelLoadError(f"graph JSON is inconsistent: {shown}{more}")
    return g


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise ModelLoadError(f"graph JSON is malformed: {what} must be a list, got {value!r}")
    return value


def _ref(value: Any, what: str) -> Ref:
    if (not isinstance(value, (list, tuple)) or len(value) != 2 or not isinstance(value[0], str)
            or isinstance(value[1], bool) or not isinstance(value[1], int) or value[1] < 0):
        raise ModelLoadError(f"graph JSON is malformed: {what}: {value!r} is not a "
                             f"[node name, output port] pair")
    return Ref(value[0], value[1])


def _shapes(value: Any, what: str) -> list[tuple[int, ...]]:
    ok = isinstance(value, list) and all(
        isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in s)
        for s in value)
    if not ok:
        raise ModelLoadError(f"graph JSON is malformed: {what} must be a list of shapes "
                             f"(lists of whole numbers), got {value!r}")
    return [tuple(s) for s in value]


def _parse_node(i: int, nd: Any) -> dict[str, Any]:
    if not isinstance(nd, dict):
        raise ModelLoadError(f"graph JSON is malformed: node #{i} is a "
                             f"{type(nd).__name__}, not an object")
    for key in ("name", "op"):
        if not isinstance(nd.get(key), str):
            raise ModelLoadError(f"graph JSON is malformed: node #{i} "
                                 f"({nd.get('name', 'unnamed')!r}) has no string {key!r}")
    where = f"node {nd['name']!r}"
    op = nd["op"]
    return {
        "name": nd["name"], "op": op,
        "attrs": attrs_from_dict(op, nd.get("attrs", {}), where=where, strict=True),
        "inputs": [_ref(r, f"{where} inputs") for r in _list(nd.get("inputs", []),
                                                            f"{where} inputs")],
        "input_shapes": _shapes(nd.get("input_shapes", []), f"{where} input_shapes"),
        "output_shapes": _shapes(nd.get("output_shapes", []), f"{where} output_shapes"),
        "source": nd.get("source") if isinstance(nd.get("source"), dict) else None,
        "meta": nd.get("meta") if isinstance(nd.get("meta"), dict) else None,
    }


def _producers_first(parsed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes in an order where every producer comes before its consumers (stable:
    a file written by :func:`to_dict` keeps its order); a cycle is named as such."""
    by_name: dict[str, dict[str, Any]] = {}
    for nd in parsed:
        if nd["name"] in by_name:
            raise GraphValidationError(f"node name {nd['name']!r} appears twice; node names "
                                       f"must be unique")
        by_name[nd["name"]] = nd
    for nd in parsed:
        for ref in nd["inputs"]:
            if ref.node not in by_name:
                raise GraphValidationError(f"node {nd['name']!r} reads {ref.node!r}, which is "
                                           f"not a node of the graph")
    dag = nx.DiGraph()
    dag.add_nodes_from(by_name)
    dag.add_edges_from((ref.node, nd["name"]) for nd in parsed for ref in nd["inputs"])
    if not nx.is_directed_acyclic_graph(dag):
        cycle = [u for u, _ in nx.find_cycle(dag)]
        raise GraphValidationError(
            f"the nodes form a cycle ({' -> '.join(cycle + cycle[:1])}); a model graph must "
            f"be acyclic: fix the inputs of one of them")
    position = {nd["name"]: i for i, nd in enumerate(parsed)}
    order = nx.lexicographical_topological_sort(dag, key=position.__getitem__)
    return [by_name[n] for n in order]


def to_json(graph: ModelGraph, path: str | os.PathLike | None = None, *,
            indent: int | None = None) -> str:
    """Serialise ``graph``; also write it to ``path`` when given."""
    text = json.dumps(to_dict(graph), indent=indent)
    if path is not None:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    return text


def from_json(text_or_path: str | os.PathLike) -> ModelGraph:
    """Read a graph from a JSON string or a path to a JSON file."""
    text = str(text_or_path)
    where = "graph JSON"
    if not text.lstrip().startswith("{"):
        where = str(text_or_path)
        try:
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as err:
            raise ModelLoadError(f"cannot read graph JSON {text_or_path!s}: {err}") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelLoadError(f"{where} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ModelLoadError(
            f"{where} holds a JSON {type(data).__name__}, not a graph object; write it with "
            f"`nnmeter ir MODEL --json` or ModelGraph.to_json()")
    try:
        return from_dict(data)
    except ModelLoadError as err:
        if where == "graph JSON":
            raise
        raise ModelLoadError(f"{where}: {err}") from err
