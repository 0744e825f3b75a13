"""The ``lrn`` kernel: local response normalisation across channels (AlexNet, ZFNet,
GoogLeNet; Caffe-era models carry it). Features: [H, W, CIN, SIZE, FLOPs, bytes].

Runtimes run it as a kernel of its own, and a slow one: ONNX Runtime's CPU LRN takes
about 8 ms on AlexNet's first 96 x 55 x 55 tensor here, 60 times what its FLOPs and
bytes would say through the fallback estimate.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("lrn")
>>> [float(v) for v in kt.features(kt.config_cls(h=2, w=2, cin=3, size=5))[:5]]
[2.0, 2.0, 3.0, 5.0, 156.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import LRNAttrs
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, hwc, positive_ints,
    topo_nodes,
)

__all__ = ["LRNConfig", "LRNKernel"]


@dataclass(frozen=True)
class LRNConfig:
    """An LRN over ``size`` neighbouring channels of a (1, cin, h, w) tensor (its alpha,
    beta and bias do not change the work)."""

    h: int
    w: int
    cin: int
    size: int = 5


class LRNKernel(KernelType):
    name = "lrn"
    family = "lrn"
    config_cls = LRNConfig
    feature_names = ("H", "W", "CIN", "SIZE", "FLOPs", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> LRNConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == "lrn")
        if len(node.input_shape) != 4:
            raise ValueError(f"lrn {node.name!r} reads a rank-{len(node.input_shape)} tensor")
        h, w, c = hwc(node.input_shape)
        return LRNConfig(h=h, w=w, cin=c, size=int(node.attrs.size))

    def _features(self, config: LRNConfig) -> list[float]:
        cost = self.cost(config)
        return [config.h, config.w, config.cin, config.size, cost.flops, cost.memory_bytes]

    def analytic_cost(self, config: LRNConfig) -> KernelCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin, c.size):
            return None
        n = c.cin * c.h * c.w
        # the square sum over the window, then scale, power and divide (as ir.cost)
        return KernelCost(flops=(2 * c.size + 3) * n, params=0,
                          memory_bytes=2 * n * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: LRNConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("lrn", (1, config.cin, config.h, config.w))
        y = b.add("lrn", [b.x], LRNAttrs(size=config.size), name="lrn")
        return b.build([y], validate=validate)


KERNEL_TYPES.register("lrn", LRNKernel())
