"""Normalisation: BatchNormalization (inference mode), LayerNormalization and LRN."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import f32, node_attrs
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import BNAttrs, LayerNormAttrs, LRNAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["bn", "layernorm", "lrn"]


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
