"""The ``channelshuffle`` kernel (ShuffleNet): either the IR's ``channelshuffle`` op or
its decomposition reshape(N, g, C/g, H, W) → transpose → reshape(N, C, H, W), which
the partitioner matches as one block. Features: [H, W, CIN, G, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("channelshuffle")
>>> [float(v) for v in kt.features(kt.config_cls(h=4, w=4, cin=8, groups=2))[:4]]
[4.0, 4.0, 8.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, hwc, positive_ints,
    topo_nodes,
)

__all__ = ["ShuffleConfig", "ChannelShuffleKernel"]


@dataclass(frozen=True)
class ShuffleConfig:
    h: int
    w: int
    cin: int
    groups: int = 2


class ChannelShuffleKernel(KernelType):
    name = "channelshuffle"
    family = "channelshuffle"
    config_cls = ShuffleConfig
    feature_names = ("H", "W", "CIN", "G", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> ShuffleConfig:
        nodes = topo_nodes(graph, names)
        first = nodes[0]
        h, w, c = hwc(first.input_shape)
        if first.op == "channelshuffle":
            groups = first.attrs.groups
        else:  # decomposed: the first reshape splits C into (g, C/g)
            groups = int(first.output_shape[1]) if len(first.output_shape) == 5 else 2
        return ShuffleConfig(h=h, w=w, cin=c, groups=groups)

    def _features(self, config: ShuffleConfig) -> list[float]:
        return [config.h, config.w, config.cin, config.groups,
                self.cost(config).memory_bytes]

    def analytic_cost(self, config: ShuffleConfig) -> KernelCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin, c.groups) or c.cin % c.groups:
            return None
        # data movement only: the input read and the output written
        return KernelCost(flops=0, params=0,
                          memory_bytes=2 * c.cin * c.h * c.w * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: ShuffleConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("channelshuffle", (1, config.cin, config.h, config.w))
        y = b.channelshuffle(b.x, config.groups, name="channelshuffle")
        return b.build([y], validate=validate)


KERNEL_TYPES.register("channelshuffle", ChannelShuffleKernel())
