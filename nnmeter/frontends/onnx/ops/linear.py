"""Matrix products: Gemm and MatMul, as ``fc`` (constant weights, MatMul + bias Add
fused) or ``matmul`` (two activations)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import EltwiseAttrs, FCAttrs, MatMulAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["gemm", "matmul"]


@register("Gemm")
def gemm(imp: Importer, node: Any, idx: int) -> None:
    a = node_attrs(node)
    x = act_input(imp, node)
    w = node.input[1]
    if a.get("transA", 0):
        raise Fallback("transA=1")
    # With beta == 0 the C operand does not contribute.
    bias = len(node.input) > 2 and bool(node.input[2]) and float(a.get("beta", 1.0)) != 0.0
    if not imp.is_const(w):
        if a.get("transB", 0):
            raise Fallback("Gemm of two activations with transB=1")
        if not bias:
            imp.emit(node, idx, "matmul", MatMulAttrs(), [x, w], [node.output[0]])
            return
        base = imp.node_name(node, idx)
        imp.emit(node, idx, "matmul", MatMulAttrs(), [x, w], [f"{node.output[0]}#mm"],
                 name=base)
        _emit_add(imp, node, idx, f"{node.output[0]}#mm", node.input[2], node.output[0],
                  f"{base}/bias")
        return
    ws = imp.const_shapes[w]
    if len(ws) != 2 or len(imp.shape(x)) != 2:
        raise Fallback("Gemm needs 2-D operands")
    n_out = ws[0] if a.get("transB", 0) else ws[1]
    if bias and not imp.is_const(node.input[2]):
        raise Fallback("bias is not constant")
    imp.emit(node, idx, "fc", FCAttrs(out_features=int(n_out), bias=bias), [x],
             [node.output[0]])


def _emit_add(imp: Importer, node: Any, idx: int, a: str, b: str, out: str,
              name: str) -> None:
    """Add tensor ``a`` (an activation) and ``b`` (activation or constant)."""
    if b in imp.refs:
        imp.emit(node, idx, "add", EltwiseAttrs(), [a, b], [out], name=name)
    else:
        imp.emit(node, idx, "add", EltwiseAttrs(const_shape=imp.const_shapes[b]), [a], [out],
                 name=name)


@register("MatMul")
def matmul(imp: Importer, node: Any, idx: int) -> None:
    a_in, b_in = node.input[0], node.input[1]
    if a_in in imp.refs and b_in in imp.refs:
        imp.emit(node, idx, "matmul", MatMulAttrs(), [a_in, b_in], [node.output[0]])
        return
    if b_in in imp.refs and imp.is_const(a_in) and len(imp.const_shapes[a_in]) >= 2:
        # a constant times an activation (DeBERTa's relative positions, folded)
        imp.emit(node, idx, "matmul",
                 MatMulAttrs(const_a=tuple(int(d) for d in imp.const_shapes[a_in])), [b_in],
                 [node.output[0]])
        return
    if a_in not in imp.refs or not imp.is_const(b_in):
        raise Fallback("MatMul of two constants or of a vector constant")
    ws = imp.const_shapes[b_in]
    if len(ws) != 2 or len(imp.shape(a_in)) < 2:
        raise Fallback(f"MatMul weight of shape {ws} is not 2-D")
    n_out = int(ws[1])
    out = node.output[0]
    bias = False
    nxt = imp.sole_consumer(out)
    if nxt is not None:
        add = imp.nodes[nxt]
        other = [t for t in add.input if t != out]
        if (add.op_type == "Add" and len(add.input) == 2 and len(other) == 1
                and imp.is_const(other[0])
                and math.prod(imp.const_shapes[other[0]]) == n_out
                and imp.const_shapes[other[0]][-1:] == (n_out,)):
            bias = True
            imp.done.add(nxt)
            out = add.output[0]
    imp.emit(node, idx, "fc", FCAttrs(out_features=n_out, bias=bias), [a_in], [out])
