"""Pad: pads and fill value given as attributes (opset < 11) or as inputs, optionally on
some axes only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import f32, node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register, scalar
from nnmeter.ir.ops import PadAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["pad"]


@register("Pad")
def pad(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    rank = len(imp.shape(x))
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if "pads" in a or "paddings" in a:
        pads = [int(v) for v in a.get("pads", a.get("paddings"))]
        value = float(a.get("value", 0.0))
    else:
        pads = [int(v) for v in imp.value(node.input[1])]
        value = scalar(imp, node.input[2]) if len(node.input) > 2 and node.input[2] else 0.0
        if len(node.input) > 3 and node.input[3]:
            axes = [norm_axis(int(v), rank) for v in imp.value(node.input[3])]
            full = [0] * (2 * rank)
            for k, ax in enumerate(axes):
                full[ax] = pads[k]
                full[ax + rank] = pads[k + len(axes)]
            pads = full
    if any(p < 0 for p in pads):
        raise Fallback("negative pads (cropping)")
    imp.emit(node, idx, "pad", PadAttrs(pads=tuple(pads), mode=mode, value=f32(value)),
             [x], [node.output[0]])
