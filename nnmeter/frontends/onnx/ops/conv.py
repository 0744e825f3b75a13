"""Convolutions: Conv and ConvTranspose, 1-D and 2-D."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.frontends.onnx.ops.spatial import as_2d, auto_pads, emit_spatial, pair_pads
from nnmeter.ir.ops import ConvAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["conv"]


@register("Conv", "ConvTranspose")
def conv(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    w = node.input[1]
    if not imp.is_const(w):
        raise Fallback("weights are not constant")
    xs, ws = imp.shape(x), imp.const_shapes[w]
    if len(xs) not in (3, 4) or len(ws) != len(xs):
        raise Fallback(f"only 1-D and 2-D convolution map onto the IR (input {xs})")
    a = as_2d(node_attrs(node), len(xs))
    if len(xs) == 3:
        xs, ws = (xs[0], xs[1], 1, xs[2]), (ws[0], ws[1], 1, ws[2])
    kernel = tuple(a.get("kernel_shape", ws[2:]))
    stride = tuple(a.get("strides", (1, 1)))
    dilation = tuple(a.get("dilations", (1, 1)))
    group = int(a.get("group", 1))
    bias = len(node.input) > 2 and bool(node.input[2])
    if bias and not imp.is_const(node.input[2]):
        raise Fallback("bias is not constant")
    if node.op_type == "ConvTranspose":
        if imp.shape(x) != xs:
            raise Fallback("1-D ConvTranspose")
        _conv_transpose(imp, node, idx, x, xs, ws, a, kernel, stride, dilation, group, bias)
        return
    pads = auto_pads(a.get("auto_pad", "NOTSET"), xs[2:], kernel, stride, dilation,
                     a.get("pads"))
    attrs = ConvAttrs(out_channels=int(ws[0]), kernel=kernel, stride=stride, pads=pads,
                      dilation=dilation, groups=group, bias=bias)
    op = "dwconv" if group == xs[1] and group > 1 else "conv"
    emit_spatial(imp, node, idx, op, attrs, x)


def _conv_transpose(imp: Importer, node: Any, idx: int, x: str, xs: tuple, ws: tuple,
                    a: dict, kernel: tuple, stride: tuple, dilation: tuple, group: int,
                    bias: bool) -> None:
    out_pad = tuple(a.get("output_padding", (0, 0)))
    auto_pad = a.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    target = a.get("output_shape")
    if target is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [xs[2] * stride[0], xs[3] * stride[1]]
    if target is not None:
        target = list(target)[-2:]
        begin, end = [], []
        for i in range(2):
            total = stride[i] * (xs[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilation[i] \
                + 1 - target[i]
            if total < 0:
                raise Fallback("output_shape needs negative padding")
            if auto_pad == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        pads = (begin[0], begin[1], end[0], end[1])
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        pads = pair_pads(a.get("pads"))
    attrs = ConvAttrs(out_channels=int(ws[1]) * group, kernel=kernel, stride=stride,
                      pads=pads, dilation=dilation, groups=group, bias=bias,
                      output_padding=out_pad)
    imp.emit(node, idx, "convtranspose", attrs, [x], [node.output[0]])
