"""Activations: Relu, Tanh, LeakyRelu, Gelu, HardSwish, Clip (relu6 when it clips to
[0, 6]), Sigmoid and HardSigmoid (swish and hswish when a Mul by the input follows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import f32, node_attrs
from nnmeter.frontends.onnx.ops.base import Fallback, Handler, act_input, register, scalar
from nnmeter.ir.ops import ClipAttrs, NoAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["sigmoid", "hardsigmoid", "clip"]


def _simple(op: str) -> Handler:
    def handler(imp: Importer, node: Any, idx: int) -> None:
        meta = None
        if node.op_type in ("LeakyRelu",):
            meta = {"alpha": f32(node_attrs(node).get("alpha", 0.01))}
        imp.emit(node, idx, op, NoAttrs(), [act_input(imp, node)], [node.output[0]],
                 meta=meta)
    return handler


def _mul_with(imp: Importer, tensor: str, x: str) -> int | None:
    """Index of the sole Mul reading ``tensor`` and ``x`` (in either order)."""
    nxt = imp.sole_consumer(tensor)
    if nxt is None:
        return None
    mul = imp.nodes[nxt]
    if mul.op_type == "Mul" and sorted(mul.input) == sorted([tensor, x]) and tensor != x:
        return nxt
    return None


def _gate(imp: Importer, node: Any, idx: int, x: str, op: str, gated: str) -> None:
    """Emit ``op`` on ``x``, or ``gated`` (x · op(x)) over the Mul by ``x`` that is the sole
    reader of its output."""
    m = _mul_with(imp, node.output[0], x)
    if m is not None:
        imp.done.add(m)
        imp.emit(node, idx, gated, NoAttrs(), [x], [imp.nodes[m].output[0]])
        return
    imp.emit(node, idx, op, NoAttrs(), [x], [node.output[0]])


@register("Sigmoid")
def sigmoid(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    _gate(imp, node, idx, x, "sigmoid", "swish")


@register("HardSigmoid")
def hardsigmoid(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    if not (abs(a.get("alpha", 0.2) - 1 / 6) < 1e-4 and abs(a.get("beta", 0.5) - 0.5) < 1e-6):
        raise Fallback("HardSigmoid with alpha != 1/6 or beta != 0.5 is not hsigmoid")
    _gate(imp, node, idx, x, "hsigmoid", "hswish")


@register("Clip")
def clip(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    if imp.opset < 11 or "min" in a or "max" in a:
        lo, hi = a.get("min", float("-inf")), a.get("max", float("inf"))
    else:
        lo = scalar(imp, node.input[1]) if len(node.input) > 1 else None
        hi = scalar(imp, node.input[2]) if len(node.input) > 2 else None
        lo = float("-inf") if lo is None else lo
        hi = float("inf") if hi is None else hi
    if lo == 0.0 and hi == 6.0:
        imp.emit(node, idx, "relu6", NoAttrs(), [x], [node.output[0]])
    else:
        imp.emit(node, idx, "clip", ClipAttrs(f32(lo), f32(hi)), [x], [node.output[0]])


for _op_type, _op in (("Relu", "relu"), ("Tanh", "tanh"), ("LeakyRelu", "leakyrelu"),
                      ("Gelu", "gelu"), ("HardSwish", "hswish")):
    register(_op_type)(_simple(_op))
del _op_type, _op
