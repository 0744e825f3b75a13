"""What convolution and pooling share: explicit and automatic 2-D pads, and 1-D ops run
as 2-D ones with H = 1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.ops.base import Fallback
from nnmeter.ir.ops import ReshapeAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["pair_pads", "auto_pads", "as_2d", "emit_spatial"]


def pair_pads(pads: Sequence[int] | None) -> tuple[int, int, int, int]:
    if not pads:
        return (0, 0, 0, 0)
    if len(pads) != 4:
        raise Fallback(f"pads {list(pads)} are not 2-D")
    return (int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3]))


def auto_pads(auto_pad: str, in_hw: Sequence[int], kernel: Sequence[int],
              stride: Sequence[int], dilation: Sequence[int],
              pads: Sequence[int] | None) -> tuple[int, int, int, int]:
    """Resolve ONNX auto_pad into explicit (top, left, bottom, right) pads."""
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else (auto_pad or "NOTSET")
    if auto_pad in ("NOTSET", ""):
        return pair_pads(pads)
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, stride, dilation):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(small)
            end.append(big)
        elif auto_pad == "SAME_LOWER":
            begin.append(big)
            end.append(small)
        else:
            raise Fallback(f"auto_pad {auto_pad!r}")
    return (begin[0], begin[1], end[0], end[1])


def as_2d(a: dict, rank: int) -> dict:
    """Spatial attributes of a 1-D op rewritten for the 2-D op with H = 1."""
    if rank != 3:
        return a
    a = dict(a)
    for key in ("kernel_shape", "strides", "dilations", "output_padding"):
        if key in a:
            a[key] = [1 if key != "output_padding" else 0] + list(a[key])
    if "pads" in a:
        a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    return a


def emit_spatial(imp: Importer, node: Any, idx: int, op: str, attrs: Any, x: str) -> None:
    """Emit a 2-D op; a rank-3 (N, C, L) input is reshaped to (N, C, 1, L) around it,
    as the canonical layout asks (nodes ``<name>/to2d``, ``<name>``, ``<name>/to1d``)."""
    xs = imp.shape(x)
    if len(xs) == 4:
        imp.emit(node, idx, op, attrs, [x], [node.output[0]])
        return
    n, c, length = xs
    base = imp.node_name(node, idx)
    t2d, t_op = f"{node.output[0]}#2d", f"{node.output[0]}#op"
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=(n, c, 1, length)), [x], [t2d],
             name=f"{base}/to2d")
    imp.emit(node, idx, op, attrs, [t2d], [t_op], name=base)
    n2, c2, _, l2 = imp.shape(t_op)
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=(n2, c2, l2)), [t_op],
             [node.output[0]], name=f"{base}/to1d")
