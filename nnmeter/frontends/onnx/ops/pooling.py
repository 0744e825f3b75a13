"""Pooling: MaxPool and AveragePool (1-D and 2-D), GlobalAveragePool, and ReduceMean
(``gap`` when it averages over H and W)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.frontends.onnx.ops.normalization import decomposed_layernorm
from nnmeter.frontends.onnx.ops.spatial import as_2d, auto_pads, emit_spatial
from nnmeter.ir.ops import GapAttrs, PoolAttrs, ReduceAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["pool", "gap", "reducemean"]


@register("MaxPool", "AveragePool")
def pool(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    xs = imp.shape(x)
    if len(xs) not in (3, 4):
        raise Fallback("only 1-D and 2-D pooling map onto the IR")
    a = as_2d(node_attrs(node), len(xs))
    if len(xs) == 3:
        xs = (xs[0], xs[1], 1, xs[2])
    if any(d != 1 for d in a.get("dilations", (1, 1))):
        raise Fallback("dilated pooling")
    if len(node.output) > 1 and node.output[1] and (
            imp.consumers.get(node.output[1]) or node.output[1] in imp.graph_outputs):
        raise Fallback("MaxPool indices are used")
    kernel = tuple(a["kernel_shape"])
    stride = tuple(a.get("strides", (1, 1)))
    pads = auto_pads(a.get("auto_pad", "NOTSET"), xs[2:], kernel, stride, (1, 1),
                     a.get("pads"))
    attrs = PoolAttrs(kernel=kernel, stride=stride, pads=pads,
                      ceil_mode=bool(a.get("ceil_mode", 0)),
                      count_include_pad=bool(a.get("count_include_pad", 0)))
    op = "maxpool" if node.op_type == "MaxPool" else "avgpool"
    emit_spatial(imp, node, idx, op, attrs, x)


@register("GlobalAveragePool")
def gap(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    if len(imp.shape(x)) not in (3, 4):
        raise Fallback("GlobalAveragePool of other than a 1-D or 2-D input")
    emit_spatial(imp, node, idx, "gap", GapAttrs(keepdims=True), x)


@register("ReduceMean")
def reducemean(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    rank = len(imp.shape(x))
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.value(node.input[1])]
    axes = tuple(int(v) for v in (axes or ()))
    keep = bool(a.get("keepdims", 1))
    if keep and axes and decomposed_layernorm(imp, node, idx, x, axes):
        return
    if rank == 4 and sorted(norm_axis(v, rank) for v in axes) == [2, 3]:
        imp.emit(node, idx, "gap", GapAttrs(keepdims=keep), [x], [node.output[0]])
        return
    imp.emit(node, idx, "reducemean", ReduceAttrs(axes=axes, keepdims=keep), [x],
             [node.output[0]])
