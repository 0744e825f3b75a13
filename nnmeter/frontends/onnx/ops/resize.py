"""Spatial resizing: Resize and Upsample on 2-D inputs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import jsonable, node_attrs
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import ResizeAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["resize"]


@register("Resize", "Upsample")
def resize(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    xs = imp.shape(x)
    if len(xs) != 4:
        raise Fallback("only 2-D resize maps onto the IR")
    a = node_attrs(node)
    mode = a.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"bilinear": "linear"}.get(mode, mode)
    out: tuple[int, ...] | None = None
    ins = list(node.input) + [""] * 4
    if node.op_type == "Resize" and imp.opset >= 11 and ins[3]:
        out = tuple(int(v) for v in imp.value(ins[3]))[-4:]
    else:
        if "scales" in a:
            scales = [float(v) for v in a["scales"]]
        else:
            k = 2 if node.op_type == "Resize" and imp.opset >= 11 else 1
            scales = [float(v) for v in imp.value(ins[k])] if ins[k] else []
        if len(scales) == 4:
            out = tuple(int(math.floor(d * s)) for d, s in zip(xs, scales))
    if out is None:
        out = imp.vi_shapes.get(node.output[0])
    if out is None or len(out) != 4 or tuple(out[:2]) != tuple(xs[:2]):
        raise Fallback("resize changes N or C, or its size is unknown")
    meta = {k: jsonable(v) for k, v in a.items() if k != "mode"} or None
    imp.emit(node, idx, "resize", ResizeAttrs(size=(int(out[2]), int(out[3])), mode=mode),
             [x], [node.output[0]], meta=meta)
