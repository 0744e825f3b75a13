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


#: The constants of tanh-GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
_TANH_GELU_CONSTS = (0.5, 1.0, 0.044715, math.sqrt(2 / math.pi))


def _tanh_gelu(imp: Importer, node: Any, idx: int, x: str) -> tuple[list[int], str] | None:
    """Match tanh-GELU starting at ``node`` (the x·0.5, x·x or x³ that comes first in
    the file), in whatever order the exporter wrote its products: follow the sole
    readers from ``node`` to a Mul whose inputs, traced back, reach only ``x`` and the
    constants of tanh-GELU through one Tanh and no reader from outside. Returns (the
    indices of the other nodes, the output)."""
    t = node.output[0]
    for _ in range(10):
        j = imp.sole_consumer(t)
        if j is None:
            return None
        n = imp.nodes[j]
        if n.op_type not in ("Mul", "Add", "Pow", "Tanh", "Div"):
            return None
        if n.op_type == "Mul":
            cone = _gelu_cone(imp, j, x, idx)
            if cone is not None and idx in cone:
                return cone, n.output[0]
        t = n.output[0]
    return None


def _gelu_cone(imp: Importer, final: int, x: str, start: int) -> list[int] | None:
    """The nodes between ``x`` and the output of node ``final`` when they compute
    tanh-GELU of ``x`` (constants checked, no other input, nothing read from outside,
    none already converted but ``start``), else None."""
    cone: set[int] = {final}
    consts: list[float] = []
    stack = [t for t in imp.nodes[final].input]
    while stack:
        t = stack.pop()
        if t == x:
            continue
        if imp.is_const(t):
            try:
                consts.append(scalar(imp, t))
            except Fallback:
                return None
            continue
        p = imp.producer(t)
        if p is None or len(cone) > 12:
            return None
        if p in cone:
            continue
        n = imp.nodes[p]
        if n.op_type not in ("Mul", "Add", "Pow", "Tanh", "Div") or (
                p in imp.done and p != start):
            return None
        cone.add(p)
        stack.extend(n.input)
    types = [imp.nodes[j].op_type for j in cone]
    if types.count("Tanh") != 1:
        return None
    for j in cone:
        if j == final:
            continue
        for t in imp.nodes[j].output:
            if t in imp.graph_outputs or any(u not in cone for u in imp.consumers.get(t, [])):
                return None
    pows = [v for v in consts if abs(v - 3.0) < 1e-6]
    if len(pows) != types.count("Pow"):
        return None
    rest = [v for v in consts if abs(v - 3.0) >= 1e-6]
    if len(rest) != len(_TANH_GELU_CONSTS) or any(
            not any(abs(v - c) <= 1e-4 * c for v in rest) for c in _TANH_GELU_CONSTS):
        return None
    return sorted(cone)


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
    if node.op_type == "Mul" and _try_tanh_gelu(imp, node, idx):
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


def _try_tanh_gelu(imp: Importer, node: Any, idx: int) -> bool:
    """Emit ``gelu`` when ``node`` starts a tanh-GELU of its activation input."""
    acts = [t for t in node.input if t in imp.refs]
    if not acts:
        return False
    found = _tanh_gelu(imp, node, idx, acts[0])
    if found is None:
        return False
    cone, out = found
    imp.done.update(cone)
    imp.emit(node, idx, "gelu", NoAttrs(), [acts[0]], [out],
             meta={"approximation": "tanh"})
    return True


@register("Pow")
def pow_(imp: Importer, node: Any, idx: int) -> None:
    """Pow: the x³ of tanh-GELU; ``x ** 2`` as x · x; any other stays unknown."""
    x = node.input[0]
    if x not in imp.refs or len(node.input) != 2 or not imp.is_const(node.input[1]):
        raise Fallback("Pow of other than an activation by a constant")
    if _try_tanh_gelu(imp, node, idx):
        return
    if scalar(imp, node.input[1]) == 2.0:
        imp.emit(node, idx, "mul", EltwiseAttrs(), [x, x], [node.output[0]])
        return
    raise Fallback("Pow by other than 2")
