"""Ops the IR drops: Identity, inference-mode Dropout, and the QuantizeLinear /
DequantizeLinear pairs of QDQ models on activations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.ops.base import Fallback, register

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["identity", "quantize"]


@register("Identity", "Dropout")
def identity(imp: Importer, node: Any, idx: int) -> None:
    src = node.input[0]
    if node.op_type == "Dropout":
        extra = [t for t in node.output[1:] if t and (imp.consumers.get(t)
                                                     or t in imp.graph_outputs)]
        if extra:
            raise Fallback("Dropout mask is used")
    if src not in imp.refs:
        raise Fallback("input is not an activation")
    imp.refs[node.output[0]] = imp.refs[src]


@register("QuantizeLinear", "DequantizeLinear")
def quantize(imp: Importer, node: Any, idx: int) -> None:
    """QuantizeLinear / DequantizeLinear on an activation (QDQ models): the IR keeps the
    float computation, so the pair is removed and counted in ``graph.meta``."""
    src = node.input[0]
    if src not in imp.refs:
        raise Fallback("input is not an activation")
    imp.refs[node.output[0]] = imp.refs[src]
    imp.graph.meta["qdq_nodes_removed"] = imp.graph.meta.get("qdq_nodes_removed", 0) + 1
