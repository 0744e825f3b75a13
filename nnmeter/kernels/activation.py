"""Stand-alone activation kernels, one type per activation (relu, relu6, hswish,
hsigmoid, sigmoid, swish, gelu, tanh, leakyrelu). Features: [H, W, CIN, elements, bytes].

The decomposed h-swish ``x * relu6(x + 3) / 6`` and h-sigmoid ``relu6(x + 3) / 6``,
matched as blocks by the partitioner, are kernels of type ``hswish`` / ``hsigmoid``;
their config is read from the block's first node.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("relu")
>>> [float(v) for v in kt.features(kt.config_cls(h=2, w=2, cin=3))]
[2.0, 2.0, 3.0, 12.0, 96.0]
"""

from __future__ import annotations

from collections.abc import Sequence

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import ACTIVATIONS
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, elementwise_flops, hwc,
    positive_ints, topo_nodes,
)
from nnmeter.kernels.bn import PlaneConfig

__all__ = ["ActivationKernel"]


class ActivationKernel(KernelType):
    family = "activation"
    config_cls = PlaneConfig
    feature_names = ("H", "W", "CIN", "elements", "bytes")

    def __init__(self, op: str) -> None:
        self.op = op
        self.name = op

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> PlaneConfig:
        first = topo_nodes(graph, names)[0]
        h, w, c = hwc(first.input_shape)
        return PlaneConfig(h=h, w=w, cin=c)

    def _features(self, config: PlaneConfig) -> list[float]:
        n = config.h * config.w * config.cin
        return [config.h, config.w, config.cin, n, self.cost(config).memory_bytes]

    def analytic_cost(self, config: PlaneConfig) -> KernelCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin):
            return None
        n = c.cin * c.h * c.w
        return KernelCost(flops=elementwise_flops(self.op, n), params=0,
                          memory_bytes=2 * n * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: PlaneConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder(self.name, (1, config.cin, config.h, config.w))
        return b.build([b.act(b.x, self.op, name=self.op)], validate=validate)


for _op in sorted(ACTIVATIONS):
    KERNEL_TYPES.register(_op, ActivationKernel(_op))
del _op
