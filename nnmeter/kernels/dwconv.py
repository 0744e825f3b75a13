"""The ``dwconv`` kernel family: a depthwise convolution with its fused tail.

Type names: ``dwconv``, ``dwconv-bn-relu6``, ``dwconv-bn-hswish``... Features:
[H, W, CIN, COUT, K, S, CIN_ALIGN, FLOPs, params, bytes, tail flags...] (COUT = CIN).

``CIN_ALIGN`` is the exponent of the largest power of two that divides CIN (capped at
12). In a channels-last runtime one pixel's channels are CIN floats apart, so with CIN a
multiple of 512 every tap of a k x k window lands on the same cache sets. On litert-cpu
(XNNPACK), per multiply-add and against the mean of CIN - 8 and CIN + 8, a 7x7 depthwise
conv over 1024 channels (10x10) ran 2.14 times slower, over 512 (12x12) 1.36 times, over
256 (20x20) 1.12 times; a 5x5 over 1024 channels 1.62 times
(``experiments/dwconv_alignment.py``). CIN alone, a smooth feature, cannot show a
regressor such a spike.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("dwconv-bn-relu")
>>> g = kt.build_graph(kt.config_cls(h=14, w=14, cin=32, kernel=3, stride=2))
>>> g["dwconv"].output_shape
(1, 32, 7, 7)
"""

from __future__ import annotations

from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder, same_pads
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import conv_output_hw, positive_ints

__all__ = ["DWConvConfig", "DWConvKernel", "channel_alignment"]

#: cap of :func:`channel_alignment` (4096 floats: 16 KiB between a pixel's neighbours)
MAX_ALIGNMENT = 12


def channel_alignment(channels: int) -> int:
    """The exponent of the largest power of two dividing ``channels``, at most
    :data:`MAX_ALIGNMENT`.

    >>> channel_alignment(512), channel_alignment(520), channel_alignment(768), channel_alignment(3)
    (9, 3, 8, 0)
    """
    if channels <= 0:
        return 0
    return min(MAX_ALIGNMENT, (channels & -channels).bit_length() - 1)


@dataclass(frozen=True)
class DWConvConfig:
    """A depthwise convolution on (1, cin, h, w). ``pads`` None means 'same'."""

    h: int
    w: int
    cin: int
    kernel: int = 3
    stride: int = 1
    pads: tuple[int, int, int, int] | None = None


class DWConvKernel(TailKernelType):
    family = "dwconv"
    config_cls = DWConvConfig
    head_feature_names = ("H", "W", "CIN", "COUT", "K", "S", "CIN_ALIGN")

    def head_config(self, head: Node) -> DWConvConfig:
        _, cin, h, w = head.input_shape
        a = head.attrs
        pads = tuple(a.pads)
        return DWConvConfig(h=h, w=w, cin=cin, kernel=a.kernel[0], stride=a.stride[0],
                            pads=None if pads == same_pads(a.kernel) else pads)

    def head_features(self, config: DWConvConfig) -> list[float]:
        return [config.h, config.w, config.cin, config.cin, config.kernel, config.stride,
                channel_alignment(config.cin)]

    def input_shape(self, config: DWConvConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: DWConvConfig) -> HeadCost | None:
        c = config
        k = c.kernel
        if not positive_ints(c.h, c.w, c.cin, k, c.stride):
            return None
        out = conv_output_hw(c.h, c.w, k, c.stride, c.pads)
        if out is None:
            return None
        ho, wo = out
        weights = c.cin * k * k  # one k x k filter per channel (groups = channels)
        params = weights + c.cin  # with bias
        return 2 * weights * ho * wo, params, params, c.cin * c.h * c.w, (1, c.cin, ho, wo)

    def build_head(self, b: GraphBuilder, config: DWConvConfig) -> Ref:
        return b.dwconv(b.x, config.kernel, config.stride, pads=config.pads, name="dwconv")


register_family(DWConvKernel, [(), ("bn",), ("relu",), ("bn", "relu"), ("bn", "relu6"),
                               ("bn", "hswish"), ("bn", "swish"), ("relu6",)])
