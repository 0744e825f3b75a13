"""Softmax (its default axis depends on the opset)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs
from nnmeter.frontends.onnx.ops.base import act_input, register
from nnmeter.ir.ops import SoftmaxAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["softmax"]


@register("Softmax")
def softmax(imp: Importer, node: Any, idx: int) -> None:
    default = -1 if imp.opset >= 13 else 1
    axis = int(node_attrs(node).get("axis", default))
    imp.emit(node, idx, "softmax", SoftmaxAttrs(axis=axis), [act_input(imp, node)],
             [node.output[0]])
