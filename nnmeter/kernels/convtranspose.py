"""The ``convtranspose`` kernel family: a transposed convolution with its fused tail.

Features: [H, W, CIN, COUT, K, S, FLOPs, params, bytes, tail flags...].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("convtranspose-bn-relu")
>>> g = kt.build_graph(kt.config_cls(h=8, w=8, cin=16, cout=8, kernel=3, stride=2))
>>> g["convtranspose"].output_shape
(1, 8, 16, 16)
"""

from __future__ import annotations

from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import positive_ints

__all__ = ["ConvTransposeConfig", "ConvTransposeKernel"]


@dataclass(frozen=True)
class ConvTransposeConfig:
    h: int
    w: int
    cin: int
    cout: int
    kernel: int = 3
    stride: int = 2


class ConvTransposeKernel(TailKernelType):
    family = "convtranspose"
    config_cls = ConvTransposeConfig
    head_feature_names = ("H", "W", "CIN", "COUT", "K", "S")

    def head_config(self, head: Node) -> ConvTransposeConfig:
        _, cin, h, w = head.input_shape
        a = head.attrs
        return ConvTransposeConfig(h=h, w=w, cin=cin, cout=a.out_channels,
                                   kernel=a.kernel[0], stride=a.stride[0])

    def head_features(self, config: ConvTransposeConfig) -> list[float]:
        return [config.h, config.w, config.cin, config.cout, config.kernel, config.stride]

    def input_shape(self, config: ConvTransposeConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: ConvTransposeConfig) -> HeadCost | None:
        c = config
        k, s = c.kernel, c.stride
        if not positive_ints(c.h, c.w, c.cin, c.cout, k, s):
            return None
        # GraphBuilder.convtranspose: pads (k-1)//2 on every side, and an output padding
        # of s-1 for odd kernels, so that the output is s times the input
        pad = (k - 1) // 2
        extra = s - 1 if k % 2 else 0
        ho = (c.h - 1) * s - 2 * pad + (k - 1) + 1 + extra
        wo = (c.w - 1) * s - 2 * pad + (k - 1) + 1 + extra
        if ho <= 0 or wo <= 0:
            return None  # the graph path raises its ShapeInferenceError
        weights = c.cin * c.cout * k * k
        params = weights + c.cout  # with bias
        # each input pixel is multiplied by the whole filter: MACs over the input plane
        return 2 * weights * c.h * c.w, params, params, c.cin * c.h * c.w, (1, c.cout, ho, wo)

    def build_head(self, b: GraphBuilder, config: ConvTransposeConfig) -> Ref:
        return b.convtranspose(b.x, config.cout, config.kernel, config.stride,
                               name="convtranspose")


register_family(ConvTransposeKernel, [(), ("bn",), ("bn", "relu"), ("relu",)])
