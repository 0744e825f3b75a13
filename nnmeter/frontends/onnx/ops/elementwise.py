"""Binary elementwise arithmetic: Add, Sub, Mul, Div and Sum, with one constant operand
or two activations, and the erf-GELU chain that starts with a Div or Mul."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, register, scalar
from nnmeter.frontends.onnx.ops.passthrough import identity
from nnmeter.ir.ops import EltwiseAttrs, NoAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["eltwise"]


def _gelu_chain(imp: Importer, node: Any) -> tuple[list[int], str] | None:
    """Match x/√2 → Erf → +1 → ·x → ·0.5 (or x·(1/√2) first); returns (indices, output)."""
    x = node.input[0] if node.input[0] in imp.refs else None
    if x is None or len(node.input) != 2 or not imp.is_const(node.input[1]):
        return None
    try:
        c = scalar(imp, node.input[1])
    except Fallback:
        return None
    if not ((node.op_type == "Div" and abs(c - math.sqrt(2)) < 1e-3)
            or (node.op_type == "Mul" and abs(c - 1 / math.sqrt(2)) < 1e-3)):
        return None
    chain: list[int] = []
    t = node.output[0]
    steps = [("Erf", None), ("Add", 1.0), ("Mul", "x"), ("Mul", 0.5)]
    for op, arg in steps:
        nxt = imp.sole_consumer(t)
        if nxt is None or imp.nodes[nxt].op_type != op:
            return None
        n = imp.nodes[nxt]
        others = [u for u in n.input if u != t]
        if arg == "x":
            if others != [x]:
                return None
        elif arg is not None:
            if len(others) != 1 or not imp.is_const(others[0]):
                return None
            try:
                if abs(scalar(imp, others[0]) - arg) > 1e-6:
                    return None
            except Fallback:
                return None
        chain.append(nxt)
        t = n.output[0]
    return chain, t


def _eltwise_op(op_type: str) -> str:
    return {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Sum": "add"}[op_type]


@register("Add", "Sub", "Mul", "Div", "Sum")
def eltwise(imp: Importer, node: Any, idx: int) -> None:
    if node.op_type in ("Div", "Mul"):
        gelu = _gelu_chain(imp, node)
        if gelu is not None:
            chain, out = gelu
            imp.done.update(chain)
            imp.emit(node, idx, "gelu", NoAttrs(), [node.input[0]], [out])
            return
    op = _eltwise_op(node.op_type)
    ins = [t for t in node.input if t]
    if node.op_type == "Sum":
        if len(ins) == 1:
            identity(imp, node, idx)
            return
        if any(t not in imp.refs for t in ins):
            raise Fallback("Sum of constants and activations")
        if len(ins) > 2:
            cur = ins[0]
            base = imp.node_name(node, idx)
            for k, t in enumerate(ins[1:]):
                last = k == len(ins) - 2
                out = node.output[0] if last else f"{base}/sum{k}"
                imp.emit(node, idx, "add", EltwiseAttrs(), [cur, t], [out],
                         name=base if k == 0 else f"{base}/{k}")
                cur = out
            return
    if len(ins) != 2:
        raise Fallback(f"{len(ins)} operands")
    acts = [t for t in ins if t in imp.refs]
    if len(acts) == 2:
        imp.emit(node, idx, op, EltwiseAttrs(), ins, [node.output[0]])
        return
    if len(acts) != 1:
        raise Fallback("no activation operand")
    const = ins[1] if ins[0] in imp.refs else ins[0]
    cshape = imp.const_shapes[const]
    a = node_attrs(node)
    if a.get("broadcast", 0) and "axis" in a:
        rank = len(imp.shape(acts[0]))
        axis = norm_axis(int(a["axis"]), rank)
        cshape = tuple(cshape) + (1,) * (rank - axis - len(cshape))
    meta = {"const_first": True} if const == ins[0] and op in ("sub", "div") else None
    imp.emit(node, idx, op, EltwiseAttrs(const_shape=tuple(cshape)), [acts[0]],
             [node.output[0]], meta=meta)
