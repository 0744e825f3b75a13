"""Cost metrics per node and per graph: FLOPs, multiply-adds, parameters, memory traffic.

Conventions (defined here once, used everywhere)
-------------------------------------------------
- **MACs** are multiply-accumulates of conv, dwconv, convtranspose, fc and matmul
  only (bias additions not counted). This is the convention of torchvision's
  published figures.
- **FLOPs** = 2 × MACs for those ops (a multiply-add counts as 2), plus for every
  other op one FLOP per output element per arithmetic step: bn 2 (scale, shift),
  relu/relu6/clip 1, sigmoid/tanh 4, swish 5, hsigmoid 3, hswish 4, gelu 8,
  add/sub/mul/div 1, avgpool and gap one per input element read plus one per output,
  maxpool one per window element, softmax 5 per element, layernorm 8 per element,
  lrn 2·size + 3 per element (sum of squares over the window, then scale and power).
  Data movement ops (reshape, flatten, transpose, concat, split, channelshuffle, pad,
  identity, input) cost 0 FLOPs. ``unknown`` ops are counted as 0 and flagged, except
  for what a frontend knows of them: ``fields["macs"]`` (multiply-adds, e.g. a TFLite
  ``BATCH_MATMUL`` the IR cannot express) and ``fields["weights"]`` (constant operand
  elements), which count as for a matmul.
- **params** are trainable parameters: conv/fc weights and biases, bn scale and
  shift (2·C, as torchvision counts), layernorm 2·D, and constant operands of
  elementwise ops.
- **stored_weights** counts every constant element a deployed file stores: params
  plus bn running mean and variance (4·C in all).
- **Memory traffic** (bytes), the "MAC" (memory access cost) of the FLOPs+MAC
  baseline: activations read + stored weights read + outputs written, each
  element at ``bytes_per_element`` of the graph's dtype.

Examples
--------
>>> from nnmeter.ir.graph import ModelGraph
>>> from nnmeter.ir.ops import ConvAttrs
>>> g = ModelGraph()
>>> x = g.add_input("x", (1, 3, 8, 8))
>>> _ = g.add_node("c", "conv", ConvAttrs(out_channels=4, bias=False), [x])
>>> g.set_outputs(["c"])
>>> c = node_cost(g.infer_shapes()["c"])
>>> c.macs, c.flops, c.params
(6912, 13824, 108)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnmeter.ir.graph import ModelGraph, Node

__all__ = ["NodeCost", "GraphCost", "node_cost", "graph_cost", "bytes_per_element",
           "flops_per_element"]

_FLOPS_PER_ELEMENT = {
    "bn": 2, "relu": 1, "relu6": 1, "clip": 1, "leakyrelu": 2, "sigmoid": 4, "tanh": 4,
    "swish": 5, "hsigmoid": 3, "hswish": 4, "gelu": 8, "add": 1, "sub": 1, "mul": 1,
    "div": 1, "softmax": 5, "layernorm": 8, "resize": 4,
}


def flops_per_element(op: str) -> int | None:
    """FLOPs per output element of an elementwise op or activation, as :func:`node_cost`
    counts them (bn 2, relu 1, add 1...); None for an op counted another way."""
    return _FLOPS_PER_ELEMENT.get(op)


def bytes_per_element(dtype: str) -> int:
    """Size in bytes of one element of numpy dtype name ``dtype``."""
    return int(np.dtype(dtype).itemsize)


@dataclass(frozen=True)
class NodeCost:
    """Cost of one node. Units are in the field names; bytes at the graph's dtype."""

    macs: int
    flops: int
    params: int
    stored_weights: int
    input_elements: int
    output_elements: int
    bytes_read: int
    bytes_weights: int
    bytes_written: int

    @property
    def memory_bytes(self) -> int:
        """Total memory traffic: inputs read + weights read + outputs written."""
        return self.bytes_read + self.bytes_weights + self.bytes_written


@dataclass(frozen=True)
class GraphCost:
    """Totals over a graph; ``unknown_nodes`` lists nodes whose FLOPs count as 0."""

    macs: int
    flops: int
    params: int
    stored_weights: int
    memory_bytes: int
    unknown_nodes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {
            "macs": self.macs, "flops": self.flops, "params": self.params,
            "stored_weights": self.stored_weights, "memory_bytes": self.memory_bytes,
            "unknown_nodes": list(self.unknown_nodes),
        }


def _weights(node: Node) -> tuple[int, int, int]:
    """(macs, params, stored_weights) of a node."""
    op, a = node.op, node.attrs
    if op in ("conv", "dwconv"):
        cin = node.input_shapes[0][1]
        out = node.output_shapes[0]
        w = a.out_channels * (cin // a.groups) * a.kernel[0] * a.kernel[1]
        p = w + (a.out_channels if a.bias else 0)
        macs = w * out[2] * out[3] * out[0]
        return macs, p, p
    if op == "convtranspose":
        n, cin, h, wd = node.input_shapes[0]
        w = cin * (a.out_channels // a.groups) * a.kernel[0] * a.kernel[1]
        p = w + (a.out_channels if a.bias else 0)
        return w * h * wd * n, p, p
    if op == "fc":
        x = node.input_shapes[0]
        w = x[-1] * a.out_features
        p = w + (a.out_features if a.bias else 0)
        return w * math.prod(x[:-1]), p, p
    if op == "matmul":
        out = node.output_shapes[0]
        if a.const_a is not None:  # a stored constant first operand
            w = math.prod(a.const_a)
            return math.prod(out) * a.const_a[-1], w, w
        return math.prod(out) * node.input_shapes[0][-1], 0, 0
    if op == "gather":  # its constant indices are stored
        n = math.prod(a.indices_shape)
        return 0, n, n
    if op == "bn":
        c = node.input_shapes[0][1]
        return 0, 2 * c, 4 * c
    if op == "layernorm":
        d = node.input_shapes[0][-1]
        return 0, 2 * d, 2 * d
    if op in ("add", "sub", "mul", "div") and a.const_shape is not None:
        n = math.prod(a.const_shape)
        return 0, n, n
    if op == "unknown" and a.fields:
        w = int(a.fields.get("weights", 0) or 0)
        return int(a.fields.get("macs", 0) or 0), w, w
    return 0, 0, 0


def node_cost(node: Node, dtype: str = "float32") -> NodeCost:
    """Cost of one node whose shapes are known. See the module docstring for units."""
    bpe = bytes_per_element(dtype)
    in_el = sum(math.prod(s) for s in node.input_shapes)
    out_el = sum(math.prod(s) for s in node.output_shapes)
    macs, params, stored = _weights(node)
    op = node.op
    if op in ("conv", "dwconv", "convtranspose", "fc", "matmul", "unknown"):
        flops = 2 * macs
    elif op in _FLOPS_PER_ELEMENT:
        flops = _FLOPS_PER_ELEMENT[op] * out_el
    elif op == "lrn":
        flops = (2 * node.attrs.size + 3) * out_el
    elif op == "maxpool":
        flops = out_el * node.attrs.kernel[0] * node.attrs.kernel[1]
    elif op == "avgpool":
        flops = out_el * node.attrs.kernel[0] * node.attrs.kernel[1] + out_el
    elif op in ("gap", "reducemean"):
        flops = in_el + out_el
    else:
        flops = 0
    if op == "input":
        in_el, read = 0, 0
    else:
        read = in_el * bpe
    written = 0 if op == "input" else out_el * bpe
    return NodeCost(
        macs=macs, flops=flops, params=params, stored_weights=stored,
        input_elements=in_el, output_elements=out_el,
        bytes_read=read, bytes_weights=stored * bpe, bytes_written=written,
    )


#: node cost by (op, attrs, input shapes, output shapes, dtype) (see graph_cost)
_COSTS: dict[tuple[Any, ...], NodeCost] = {}


def graph_cost(graph: ModelGraph) -> GraphCost:
    """Totals of :func:`node_cost` over every node of a shape-inferred graph."""
    macs = flops = params = stored = mem = 0
    unknown: list[str] = []
    memo = _COSTS
    dtype = graph.dtype
    # a sum: any order will do, and sorting a new graph topologically costs more than
    # summing it
    for node in graph.nodes_unordered():
        if not node.output_shapes:
            raise ValueError(f"node {node.name!r} has no shapes; run infer_shapes first")
        # a node's cost depends on its op, attributes, shapes and dtype only: NAS
        # spaces repeat the same nodes across cells and candidates
        key = (node.op, node.attrs, node.input_shapes, node.output_shapes, dtype)
        try:
            c = memo.get(key)
        except TypeError:  # attributes that do not hash
            key, c = None, None
        if c is None:
            c = node_cost(node, dtype)
            if key is not None:
                if len(memo) > 100_000:
                    memo.clear()
                memo[key] = c
        macs += c.macs
        flops += c.flops
        params += c.params
        stored += c.stored_weights
        mem += c.memory_bytes
        if node.op == "unknown":
            unknown.append(node.name)
    return GraphCost(macs, flops, params, stored, mem, tuple(unknown))
