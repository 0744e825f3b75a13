"""The ``bn`` kernel family: a stand-alone batch normalisation, optionally with a fused
activation (``bn``, ``bn-relu``...). Features: [H, W, CIN, FLOPs, params, bytes, tail flags...].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("bn-relu")
>>> kt.build_graph(kt.config_cls(h=4, w=4, cin=8)).op_counts()["relu"]
1
"""

from __future__ import annotations

from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import elementwise_flops, hwc, positive_ints

__all__ = ["PlaneConfig", "BNKernel"]


@dataclass(frozen=True)
class PlaneConfig:
    """An activation tensor of (1, cin, h, w): the config of per-element kernels."""

    h: int
    w: int
    cin: int


class BNKernel(TailKernelType):
    family = "bn"
    config_cls = PlaneConfig
    head_feature_names = ("H", "W", "CIN")
    allow_bn = False
    allow_add = False

    def head_config(self, head: Node) -> PlaneConfig:
        h, w, c = hwc(head.input_shape)
        return PlaneConfig(h=h, w=w, cin=c)

    def head_features(self, config: PlaneConfig) -> list[float]:
        return [config.h, config.w, config.cin]

    def input_shape(self, config: PlaneConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: PlaneConfig) -> HeadCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin):
            return None
        n = c.cin * c.h * c.w
        # scale and shift are params; the running mean and variance are stored too
        return elementwise_flops("bn", n), 2 * c.cin, 4 * c.cin, n, (1, c.cin, c.h, c.w)

    def build_head(self, b: GraphBuilder, config: PlaneConfig) -> Ref:
        return b.bn(b.x, name="bn")


register_family(BNKernel, [(), ("relu",), ("relu6",), ("hswish",)])
