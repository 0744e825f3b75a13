"""Normalisation: BatchNormalization (inference mode), LayerNormalization (also as the
ReduceMean → Sub → Pow → ReduceMean → Add → Sqrt → Div → Mul → Add chain of exports
before opset 17), InstanceNormalization (GroupNorm with one group) and LRN."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import f32, node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register, scalar
from nnmeter.ir.ops import BNAttrs, LayerNormAttrs, LRNAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["bn", "layernorm", "instancenorm", "lrn", "decomposed_layernorm"]


@register("BatchNormalization")
def bn(imp: Importer, node: Any, idx: int) -> None:
    a = node_attrs(node)
    x = act_input(imp, node)
    if a.get("training_mode", 0) or any(t and imp.consumers.get(t) or t in imp.graph_outputs
                                        for t in node.output[1:]):
        raise Fallback("training-mode BatchNormalization")
    if a.get("spatial", 1) != 1:
        raise Fallback("BatchNormalization with spatial=0")
    if not all(imp.is_const(t) for t in node.input[1:5]):
        raise Fallback("BatchNormalization statistics are not constant")
    imp.emit(node, idx, "bn", BNAttrs(epsilon=f32(a.get("epsilon", 1e-5))), [x],
             [node.output[0]])


@register("LayerNormalization")
def layernorm(imp: Importer, node: Any, idx: int) -> None:
    a = node_attrs(node)
    if any(t and (imp.consumers.get(t) or t in imp.graph_outputs) for t in node.output[1:]):
        raise Fallback("LayerNormalization statistics outputs are used")
    if not all(imp.is_const(t) for t in node.input[1:] if t):
        raise Fallback("scale or bias is not constant")
    imp.emit(node, idx, "layernorm",
             LayerNormAttrs(axis=int(a.get("axis", -1)), epsilon=f32(a.get("epsilon", 1e-5))),
             [act_input(imp, node)], [node.output[0]])


@register("LRN")
def lrn(imp: Importer, node: Any, idx: int) -> None:
    a = node_attrs(node)
    attrs = LRNAttrs(size=int(a["size"]), alpha=f32(a.get("alpha", 1e-4)),
                     beta=f32(a.get("beta", 0.75)), bias=f32(a.get("bias", 1.0)))
    imp.emit(node, idx, "lrn", attrs, [act_input(imp, node)], [node.output[0]])


@register("InstanceNormalization")
def instancenorm(imp: Importer, node: Any, idx: int) -> None:
    """InstanceNormalization normalises every (n, c) over the axes after the channel
    one: a layernorm over axis 2 onward, whose affine is per channel. PyTorch writes
    GroupNorm as Reshape → InstanceNormalization → Reshape → Mul → Add (PoolFormer's
    GroupNorm(1, C) normalises over C, H and W at once)."""
    x = act_input(imp, node)
    if len(imp.shape(x)) < 3:
        raise Fallback("InstanceNormalization of a rank < 3 input")
    if not all(imp.is_const(t) for t in node.input[1:] if t):
        raise Fallback("scale or bias is not constant")
    eps = f32(node_attrs(node).get("epsilon", 1e-5))
    imp.emit(node, idx, "layernorm", LayerNormAttrs(axis=2, epsilon=eps), [x],
             [node.output[0]], meta={"onnx_op": "InstanceNormalization"})


def _const_operand(imp: Importer, node: Any, tensor: str) -> float | None:
    """The scalar constant ``node`` combines ``tensor`` with, None if there is none."""
    others = [t for t in node.input if t != tensor]
    if len(others) != 1 or not imp.is_const(others[0]):
        return None
    try:
        return scalar(imp, others[0])
    except Fallback:
        return None


def decomposed_layernorm(imp: Importer, node: Any, idx: int, x: str,
                         axes: tuple[int, ...]) -> bool:
    """Match the layer norm that exporters write before opset 17, starting at its first
    ReduceMean (``node``, over ``axes`` of ``x``)::

        d = x - mean(x);  y = d / sqrt(mean(d ** 2) + eps)  [* gamma]  [+ beta]

    and emit one ``layernorm`` over the last ``len(axes)`` axes; True if it matched."""
    rank = len(imp.shape(x))
    norm = sorted(norm_axis(int(a), rank) for a in axes)
    if norm != list(range(rank - len(norm), rank)):
        return False

    def only(tensor: str, op: str) -> Any | None:
        j = imp.sole_consumer(tensor)
        if j is None or imp.nodes[j].op_type != op:
            return None
        return j

    sub = only(node.output[0], "Sub")
    if sub is None or imp.nodes[sub].input[0] != x or imp.nodes[sub].input[1] != node.output[0]:
        return False
    d = imp.nodes[sub].output[0]
    users = imp.consumers.get(d, [])
    if len(users) != 2 or d in imp.graph_outputs:
        return False
    kinds = {imp.nodes[j].op_type: j for j in users}
    if set(kinds) == {"Pow", "Div"}:
        pow_ = kinds["Pow"]
        if _const_operand(imp, imp.nodes[pow_], d) != 2.0:
            return False
        sq = imp.nodes[pow_].output[0]
    elif set(kinds) == {"Mul", "Div"}:  # d * d
        pow_ = kinds["Mul"]
        if list(imp.nodes[pow_].input) != [d, d]:
            return False
        sq = imp.nodes[pow_].output[0]
    else:
        return False
    div = kinds["Div"]
    chain = [sub, pow_]
    var = only(sq, "ReduceMean")
    if var is None or sorted(norm_axis(int(a), rank) for a in _axes(imp, imp.nodes[var])) != norm:
        return False
    add = only(imp.nodes[var].output[0], "Add")
    if add is None:
        return False
    eps = _const_operand(imp, imp.nodes[add], imp.nodes[var].output[0])
    sqrt = only(imp.nodes[add].output[0], "Sqrt")
    if eps is None or sqrt is None:
        return False
    if div in imp.done or list(imp.nodes[div].input) != [d, imp.nodes[sqrt].output[0]] \
            or imp.sole_consumer(imp.nodes[sqrt].output[0]) != div:
        return False
    chain += [var, add, sqrt, div]
    out = imp.nodes[div].output[0]
    d_size = imp.shape(x)[-1]
    for op in ("Mul", "Add"):  # the affine, when it is there
        j = imp.sole_consumer(out)
        if j is None or imp.nodes[j].op_type != op:
            break
        others = [t for t in imp.nodes[j].input if t != out]
        if len(others) != 1 or not imp.is_const(others[0]) \
                or math.prod(imp.const_shapes[others[0]]) not in (1, d_size):
            break
        chain.append(j)
        out = imp.nodes[j].output[0]
    imp.done.update(chain)
    imp.emit(node, idx, "layernorm",
             LayerNormAttrs(axis=-len(norm), epsilon=f32(eps)), [x], [out])
    return True


def _axes(imp: Importer, node: Any) -> tuple[int, ...]:
    a = node_attrs(node)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.value(node.input[1])]
    return tuple(int(v) for v in (axes or ()))
