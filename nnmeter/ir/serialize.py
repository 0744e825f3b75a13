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

from nnmeter.errors import GraphValidationError, ModelLoadError
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.ir.ops import attrs_from_dict, attrs_to_dict

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


def from_dict(data: dict[str, Any]) -> ModelGraph:
    """Rebuild a graph from :func:`to_dict` output.

    Raises
    ------
    ModelLoadError
        If the schema version is missing or newer than this code understands, or a
        field is malformed.
    """
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ModelLoadError(
            f"graph JSON has schema_version {version!r}; this nnmeter reads version "
            f"{SCHEMA_VERSION}. Re-export the graph with this version."
        )
    g = ModelGraph(data.get("name", "model"), dtype=data.get("dtype", "float32"))
    g.meta = dict(data.get("meta", {}))
    try:
        for nd in data["nodes"]:
            g.add_node(
                nd["name"], nd["op"], attrs_from_dict(nd["op"], nd.get("attrs", {})),
                [Ref(str(a), int(b)) for a, b in nd.get("inputs", [])],
                input_shapes=nd.get("input_shapes", []),
                output_shapes=nd.get("output_shapes", []),
                source=nd.get("source"), meta=nd.get("meta"),
            )
        g.set_outputs([Ref(str(a), int(b)) for a, b in data.get("outputs", [])])
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, GraphValidationError):
            raise ModelLoadError(f"graph JSON is inconsistent: {err}") from err
        raise ModelLoadError(f"graph JSON is malformed: {err!r}") from err
    return g


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
    return from_dict(data)
