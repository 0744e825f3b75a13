"""The ``split`` kernel: a channel split into several outputs.
Features: [H, W, CIN, NOUT, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("split")
>>> [float(v) for v in kt.features(kt.config_cls(h=2, w=2, cin=4, sizes=(2, 2)))[:4]]
[2.0, 2.0, 4.0, 2.0]
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

__all__ = ["SplitConfig", "SplitKernel"]


@dataclass(frozen=True)
class SplitConfig:
    h: int
    w: int
    cin: int
    sizes: tuple[int, ...]


class SplitKernel(KernelType):
    name = "split"
    family = "split"
    config_cls = SplitConfig
    feature_names = ("H", "W", "CIN", "NOUT", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> SplitConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == "split")
        rank = len(node.input_shape)
        if node.attrs.axis % max(rank, 1) != (1 if rank > 1 else 0):
            # a split of another axis (a spatial crop written as a Slice) is no channel
            # split: the partitioner keeps it as an ``other`` kernel
            raise ValueError(f"split {node.name!r} cuts axis {node.attrs.axis}, not channels")
        h, w, c = hwc(node.input_shape)
        return SplitConfig(h=h, w=w, cin=c, sizes=tuple(node.attrs.sizes))

    def _features(self, config: SplitConfig) -> list[float]:
        return [config.h, config.w, config.cin, len(config.sizes),
                self.cost(config).memory_bytes]

    def analytic_cost(self, config: SplitConfig) -> KernelCost | None:
        c = config
        if not (type(c.sizes) is tuple and c.sizes and positive_ints(c.h, c.w, c.cin, *c.sizes)
                and sum(c.sizes) == c.cin):
            return None
        # the input read, every part written: twice the input's elements
        return KernelCost(flops=0, params=0,
                          memory_bytes=2 * c.cin * c.h * c.w * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: SplitConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("split", (1, config.cin, config.h, config.w))
        return b.build(b.split(b.x, config.sizes, name="split"), validate=validate)


KERNEL_TYPES.register("split", SplitKernel())
