"""Joining and cutting tensors along an axis: Concat and Split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import ConcatAttrs, SplitAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["concat", "split"]


@register("Concat")
def concat(imp: Importer, node: Any, idx: int) -> None:
    ins = [t for t in node.input if t]
    if any(t not in imp.refs for t in ins):
        raise Fallback("Concat with a constant operand")
    axis = int(node_attrs(node).get("axis", 1))
    imp.emit(node, idx, "concat", ConcatAttrs(axis=axis), ins, [node.output[0]])


@register("Split")
def split(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    xs = imp.shape(x)
    axis = int(a.get("axis", 0))
    ax = norm_axis(axis, len(xs))
    outs = list(node.output)
    if "split" in a:
        sizes = [int(v) for v in a["split"]]
    elif len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in imp.value(node.input[1])]
    else:
        n = len(outs)
        chunk = -(-xs[ax] // n)
        sizes = [chunk] * (n - 1) + [xs[ax] - chunk * (n - 1)]
    if any(not t for t in outs):
        raise Fallback("Split with unnamed outputs")
    imp.emit(node, idx, "split", SplitAttrs(axis=axis, sizes=tuple(sizes)), [x], outs)
