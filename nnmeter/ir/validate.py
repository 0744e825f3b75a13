"""The ModelGraph validator, in the spirit of a lint: every finding says how to fix it.

Checks: acyclicity, a connected graph, graph inputs and outputs present, every input
reference pointing at an existing output port, op vocabulary and attribute types,
shapes present and consistent with shape inference, and canonical rank-4 layout for
spatial ops.

Examples
--------
>>> from nnmeter.ir.graph import ModelGraph
>>> g = ModelGraph("empty")
>>> lint(g)[0]
"graph 'empty' has no nodes; add an input with add_input(...)"
"""

from __future__ import annotations

import dataclasses

import networkx as nx

from nnmeter.errors import GraphValidationError, ShapeInferenceError
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import OPS, attrs_class

__all__ = ["lint", "validate"]

_SPATIAL = {"conv", "dwconv", "convtranspose", "maxpool", "avgpool", "gap", "resize"}


def lint(graph: ModelGraph) -> list[str]:
    """Return every problem found in ``graph``; an empty list means it is valid."""
    problems: list[str] = []
    if len(graph) == 0:
        return [f"graph {graph.name!r} has no nodes; add an input with add_input(...)"]
    if not nx.is_directed_acyclic_graph(graph.nx):
        cycle = nx.find_cycle(graph.nx)
        problems.append(
            f"cycle through {' -> '.join(u for u, _ in cycle)}; a model graph must be a "
            f"DAG: break the loop or unroll it"
        )
        return problems
    if not nx.is_weakly_connected(graph.nx):
        parts = sorted(nx.weakly_connected_components(graph.nx), key=len)
        problems.append(
            f"graph is disconnected ({len(parts)} parts; smallest: {sorted(parts[0])[:5]}); "
            f"remove unused nodes or connect them"
        )
    if not graph.input_names:
        problems.append("graph has no input node; add one with add_input(name, shape)")
    if not graph.outputs:
        problems.append("graph declares no outputs; call set_outputs([...])")
    for ref in graph.outputs:
        if ref.node not in graph:
            problems.append(f"output {ref} names a missing node")
    for node in graph.topological_nodes():
        where = f"{node.op} {node.name!r}"
        if node.op not in OPS:
            problems.append(f"{where}: op outside the vocabulary; use 'unknown'")
            continue
        if not isinstance(node.attrs, attrs_class(node.op)):
            problems.append(
                f"{where}: attrs are {type(node.attrs).__name__}, expected "
                f"{attrs_class(node.op).__name__}"
            )
        problems.extend(f"{where}: {p}" for p in attr_problems(node.op, node.attrs))
        if node.op == "input" and node.inputs:
            problems.append(f"{where}: an input node cannot read other nodes")
        if node.op not in ("input",) and not node.inputs:
            problems.append(f"{where}: reads no tensor; connect it or remove it")
        for ref in node.inputs:
            if ref.node not in graph:
                problems.append(f"{where}: reads missing node {ref.node!r}")
                continue
            producer = graph.node(ref.node)
            if producer.output_shapes and ref.port >= len(producer.output_shapes):
                problems.append(
                    f"{where}: reads port {ref.port} of {ref.node!r}, which has "
                    f"{len(producer.output_shapes)} outputs"
                )
        if not node.output_shapes:
            problems.append(f"{where}: no output shape; run graph.infer_shapes()")
            continue
        if any(d == 0 for s in node.output_shapes for d in s):
            problems.append(f"{where}: zero-size dimension in {list(node.output_shapes)} "
                            f"(a static 0, not a dynamic one): the tensor is empty; give "
                            f"the real size")
        elif any(d < 0 for s in node.output_shapes for d in s):
            problems.append(f"{where}: negative dimension in {list(node.output_shapes)}; "
                            f"give the real size (pass --input-shape for a dynamic one)")
        if node.op in _SPATIAL and node.input_shapes and len(node.input_shapes[0]) != 4:
            problems.append(
                f"{where}: input shape {node.input_shapes[0]} is not rank-4 NCHW; "
                f"convert the layout in the frontend"
            )
    if problems:
        return problems
    # Shapes must agree with what inference derives from the inputs.
    check = graph.copy()
    try:
        check.infer_shapes()
    except ShapeInferenceError as err:
        return [f"shape inference fails: {err}"]
    for node in graph.topological_nodes():
        inferred = check.node(node.name)
        if inferred.output_shapes != node.output_shapes:
            problems.append(
                f"{node.op} {node.name!r}: recorded output shapes {node.output_shapes} "
                f"differ from inferred {inferred.output_shapes}; fix the attributes or "
                f"re-run infer_shapes()"
            )
        elif inferred.input_shapes != node.input_shapes:
            problems.append(
                f"{node.op} {node.name!r}: recorded input shapes {node.input_shapes} differ "
                f"from the producers' outputs {inferred.input_shapes}; re-run infer_shapes()"
            )
    return problems


#: attribute fields that count something and must be at least 1, per attribute class
_POSITIVE = {"out_channels", "out_features", "kernel", "stride", "dilation", "groups", "size",
             "sizes"}
_NON_NEGATIVE = {"pads", "output_padding"}


def attr_problems(op: str, attrs: object) -> list[str]:
    """Range problems of an attribute record: counts below 1, negative pads (a pad op's
    negative pads crop, as in ONNX, and are allowed)."""
    out = []
    for f in dataclasses.fields(attrs) if dataclasses.is_dataclass(attrs) else ():
        value = getattr(attrs, f.name)
        values = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            continue
        if f.name in _POSITIVE and any(v < 1 for v in values):
            out.append(f"{f.name}={_show(value)} must be at least 1")
        elif f.name in _NON_NEGATIVE and op != "pad" and any(v < 0 for v in values):
            out.append(f"{f.name}={_show(value)} must not be negative")
    return out


def _show(value: object) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def validate(graph: ModelGraph) -> None:
    """Raise :class:`GraphValidationError` with every finding when ``graph`` is invalid.

    The error's ``problems`` attribute lists each finding with its fix.
    """
    problems = lint(graph)
    if problems:
        shown = "\n  - ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise GraphValidationError(
            f"graph {graph.name!r} is invalid ({len(problems)} problems):\n  - {shown}{more}",
            problems,
        )
