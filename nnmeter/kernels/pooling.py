"""Pooling kernels: ``maxpool``, ``avgpool`` (windowed) and ``gap`` (global average).

Features: maxpool/avgpool [H, W, CIN, K, S, FLOPs, bytes]; gap [H, W, CIN, FLOPs, bytes],
H and W of the *input* (the predecessor's gap always saw H=1, its output height).

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("gap")
>>> float(kt.features(kt.config_cls(h=7, w=7, cin=512))[0])
7.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.shapes import pool_out_size
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, hwc, int_tuple,
    positive_ints, topo_nodes,
)
from nnmeter.kernels.bn import PlaneConfig

__all__ = ["PoolConfig", "PoolKernel", "GapKernel"]


@dataclass(frozen=True)
class PoolConfig:
    h: int
    w: int
    cin: int
    kernel: int = 2
    stride: int = 2
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    ceil_mode: bool = False
    #: the window's width and stride along W when they differ from ``kernel`` and
    #: ``stride`` (a 2x1 pooling); None for a square window
    kernel_w: int | None = None
    stride_w: int | None = None

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return (self.kernel, self.kernel if self.kernel_w is None else self.kernel_w)

    @property
    def stride_hw(self) -> tuple[int, int]:
        return (self.stride, self.stride if self.stride_w is None else self.stride_w)


class PoolKernel(KernelType):
    family = "pool"
    config_cls = PoolConfig
    feature_names = ("H", "W", "CIN", "K", "S", "FLOPs", "bytes")

    def __init__(self, op: str) -> None:
        self.op = op
        self.name = op

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> PoolConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == self.op)
        _, c, h, w = node.input_shape
        a = node.attrs
        (kh, kw), (sh, sw) = a.kernel, a.stride
        return PoolConfig(h=h, w=w, cin=c, kernel=kh, stride=sh,
                          pads=tuple(a.pads), ceil_mode=a.ceil_mode,
                          kernel_w=None if kw == kh else kw, stride_w=None if sw == sh else sw)

    def _features(self, config: PoolConfig) -> list[float]:
        cost = self.cost(config)
        # a kh x kw window reads as the square one of the same area (FLOPs and bytes exact)
        (kh, kw), (sh, sw) = config.kernel_hw, config.stride_hw
        k = kh if kh == kw else (kh * kw) ** 0.5
        st = sh if sh == sw else (sh * sw) ** 0.5
        return [config.h, config.w, config.cin, k, st, cost.flops, cost.memory_bytes]

    def analytic_cost(self, config: PoolConfig) -> KernelCost | None:
        c = config
        (kh, kw), (sh, sw) = c.kernel_hw, c.stride_hw
        if not (positive_ints(c.h, c.w, c.cin, kh, kw, sh, sw) and int_tuple(c.pads, 4)
                and type(c.ceil_mode) is bool):
            return None
        ho = pool_out_size(c.h, kh, sh, c.pads[0], c.pads[2], c.ceil_mode)
        wo = pool_out_size(c.w, kw, sw, c.pads[1], c.pads[3], c.ceil_mode)
        if ho <= 0 or wo <= 0:
            return None  # the graph path raises its ShapeInferenceError
        out = c.cin * ho * wo
        # one FLOP per window element; the average also divides once per output
        flops = out * kh * kw + (out if self.op == "avgpool" else 0)
        return KernelCost(flops=flops, params=0,
                          memory_bytes=(c.cin * c.h * c.w + out) * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: PoolConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder(self.name, (1, config.cin, config.h, config.w))
        pool = b.maxpool if self.op == "maxpool" else b.avgpool
        return b.build([pool(b.x, config.kernel_hw, config.stride_hw, pads=config.pads,
                             ceil_mode=config.ceil_mode, name=self.op)], validate=validate)


class GapKernel(KernelType):
    name = "gap"
    family = "gap"
    config_cls = PlaneConfig
    feature_names = ("H", "W", "CIN", "FLOPs", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> PlaneConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == "gap")
        h, w, c = hwc(node.input_shape)  # the INPUT plane, never the 1x1 output
        return PlaneConfig(h=h, w=w, cin=c)

    def _features(self, config: PlaneConfig) -> list[float]:
        cost = self.cost(config)
        return [config.h, config.w, config.cin, cost.flops, cost.memory_bytes]

    def analytic_cost(self, config: PlaneConfig) -> KernelCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin):
            return None
        n = c.cin * c.h * c.w
        # one FLOP per element read plus one per (1, C, 1, 1) output
        return KernelCost(flops=n + c.cin, params=0,
                          memory_bytes=(n + c.cin) * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: PlaneConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("gap", (1, config.cin, config.h, config.w))
        return b.build([b.gap(b.x, name="gap")], validate=validate)


KERNEL_TYPES.register("maxpool", PoolKernel("maxpool"))
KERNEL_TYPES.register("avgpool", PoolKernel("avgpool"))
KERNEL_TYPES.register("gap", GapKernel())
