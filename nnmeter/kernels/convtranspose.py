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
from nnmeter.kernels._tail import TailKernelType, register_family

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

    def build_head(self, b: GraphBuilder, config: ConvTransposeConfig) -> Ref:
        return b.convtranspose(b.x, config.cout, config.kernel, config.stride,
                               name="convtranspose")


register_family(ConvTransposeKernel, [(), ("bn",), ("bn", "relu"), ("relu",)])
