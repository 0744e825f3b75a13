"""The ``conv`` kernel family: a (grouped) convolution with its fused tail.

Type names carry the tail: ``conv``, ``conv-bn``, ``conv-bn-relu``, ``conv-bn-add-relu``...
(see :mod:`nnmeter.kernels._tail`). Features (nn-Meter's, plus memory traffic and the
tail flags): [H, W, CIN, COUT, K, S, FLOPs, params, bytes, tail flags...], H and W of
the kernel's *input*.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("conv-bn-relu")
>>> cfg = kt.config_cls(h=28, w=28, cin=64, cout=128, kernel=3, stride=1)
>>> [float(v) for v in kt.features(cfg)[:6]]
[28.0, 28.0, 64.0, 128.0, 3.0, 1.0]
"""

from __future__ import annotations

from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder, same_pads
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import conv_output_hw, positive_ints

__all__ = ["ConvConfig", "ConvKernel"]


@dataclass(frozen=True)
class ConvConfig:
    """A convolution on a (1, cin, h, w) input. ``pads`` None means 'same' padding."""

    h: int
    w: int
    cin: int
    cout: int
    kernel: int = 3
    stride: int = 1
    groups: int = 1
    pads: tuple[int, int, int, int] | None = None
    #: the kernel's width when it differs from its height (``kernel``): Inception's
    #: 1x7 and 7x1; None for a square kernel
    kernel_w: int | None = None

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return (self.kernel, self.kernel if self.kernel_w is None else self.kernel_w)


class ConvKernel(TailKernelType):
    family = "conv"
    config_cls = ConvConfig
    head_feature_names = ("H", "W", "CIN", "COUT", "K", "S")

    def head_config(self, head: Node) -> ConvConfig:
        _, cin, h, w = head.input_shape
        a = head.attrs
        pads = tuple(a.pads)
        kh, kw = a.kernel
        return ConvConfig(h=h, w=w, cin=cin, cout=a.out_channels, kernel=kh,
                          stride=a.stride[0], groups=a.groups,
                          pads=None if pads == same_pads(a.kernel) else pads,
                          kernel_w=None if kw == kh else kw)

    def head_features(self, config: ConvConfig) -> list[float]:
        # a kh x kw kernel reads as the square one of the same area (its FLOPs, params
        # and bytes features are exact)
        kh, kw = config.kernel_hw
        k = kh if kh == kw else (kh * kw) ** 0.5
        return [config.h, config.w, config.cin, config.cout, k, config.stride]

    def input_shape(self, config: ConvConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: ConvConfig) -> HeadCost | None:
        c = config
        kh, kw = c.kernel_hw
        if not positive_ints(c.h, c.w, c.cin, c.cout, kh, kw, c.stride, c.groups) or \
                c.cin % c.groups:
            return None
        out = conv_output_hw(c.h, c.w, (kh, kw), c.stride, c.pads)
        if out is None:
            return None
        ho, wo = out
        weights = c.cout * (c.cin // c.groups) * kh * kw
        params = weights + c.cout  # with bias
        return 2 * weights * ho * wo, params, params, c.cin * c.h * c.w, (1, c.cout, ho, wo)

    def build_head(self, b: GraphBuilder, config: ConvConfig) -> Ref:
        return b.conv(b.x, config.cout, config.kernel_hw, config.stride, groups=config.groups,
                      pads=config.pads, name="conv")


register_family(ConvKernel, [(), ("bn",), ("relu",), ("bn", "relu"), ("bn", "relu6"),
                             ("bn", "hswish"), ("bn", "swish"), ("bn", "add"),
                             ("bn", "add", "relu"), ("relu6",), ("hswish",), ("add",),
                             ("add", "relu")])
