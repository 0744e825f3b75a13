"""``nnmeter ir MODEL``: load a model and print its ops with shapes and costs.

Examples
--------
Shell::

    nnmeter ir model.onnx --input-shape 1,3,224,224
    nnmeter ir model.tflite --json
"""

from __future__ import annotations

import argparse
from typing import Any

from nnmeter.commands._common import (
    add_input_shape, add_json, emit_json, parse_input_shapes, print_table,
)

__all__ = ["register", "run", "graph_report"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ir", help="show a model's ops, shapes, FLOPs, parameters and memory traffic",
        description="Load a model (.onnx, .tflite, .keras/.h5, SavedModel dir, IR .json) "
                    "into the nnmeter IR and print one row per op and the totals.",
    )
    p.add_argument("model", help="model file or SavedModel directory")
    add_input_shape(p)
    add_json(p)
    p.add_argument("--save", metavar="PATH", help="also write the IR as JSON to PATH")
    p.set_defaults(func=run)


def _shapes(shapes: Any) -> str:
    return " ".join("x".join(str(d) for d in s) or "scalar" for s in shapes)


def graph_report(graph: Any) -> dict[str, Any]:
    """A JSON-able report of ``graph``: one entry per op, and the totals."""
    from nnmeter.ir.cost import node_cost

    ops = []
    for node in graph.topological_nodes():
        c = node_cost(node, graph.dtype)
        entry = {
            "name": node.name, "op": node.op,
            "input_shapes": [list(s) for s in node.input_shapes],
            "output_shapes": [list(s) for s in node.output_shapes],
            "macs": c.macs, "flops": c.flops, "params": c.params,
            "memory_bytes": c.memory_bytes,
        }
        if node.op == "unknown":
            entry["original_type"] = node.attrs.original_type
        ops.append(entry)
    total = graph.cost()
    return {
        "name": graph.name,
        "dtype": graph.dtype,
        "inputs": {n: list(graph.node(n).output_shape) for n in graph.input_names},
        "outputs": [str(r) for r in graph.outputs],
        "op_counts": graph.op_counts(),
        "ops": ops,
        "totals": {**total.as_dict(),
                   "unknown_ops": [{"name": n.name, "original_type": n.attrs.original_type}
                                   for n in graph.unknown_ops()]},
    }


def run(args: argparse.Namespace) -> int:
    from nnmeter.frontends import load_model

    graph = load_model(args.model, input_shapes=parse_input_shapes(args.input_shape))
    if args.save:
        graph.to_json(args.save, indent=1)
    report = graph_report(graph)
    if args.json:
        emit_json(report)
        return 0
    rows = []
    for e in report["ops"]:
        op = e["op"] if e["op"] != "unknown" else f"unknown({e['original_type']})"
        rows.append([e["name"], op, _shapes(e["input_shapes"]), _shapes(e["output_shapes"]),
                     e["flops"], e["params"], e["memory_bytes"]])
    print_table(["name", "op", "inputs", "outputs", "FLOPs", "params", "bytes"], rows)
    t = report["totals"]
    print()
    print(f"model {report['name']}: {len(report['ops'])} nodes, dtype {report['dtype']}")
    print(f"  MACs           {t['macs']:,}")
    print(f"  FLOPs          {t['flops']:,}")
    print(f"  params         {t['params']:,}")
    print(f"  stored weights {t['stored_weights']:,}")
    print(f"  memory bytes   {t['memory_bytes']:,}")
    if t["unknown_ops"]:
        names = ", ".join(f"{u['name']} ({u['original_type']})" for u in t["unknown_ops"])
        print(f"  unknown ops ({len(t['unknown_ops'])}, counted as 0 FLOPs): {names}")
    else:
        print("  unknown ops    none")
    return 0
