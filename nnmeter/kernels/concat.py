"""The ``concat`` kernel: channel concatenation of several inputs.

Features (fixed length 8, whatever the number of inputs):
[H, W, N, CIN1, CIN2, CIN3, CIN4, CTOTAL]. With fewer than 4 inputs the slots are
padded with 0; with more, CIN4 holds the sum of the 4th and later inputs.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("concat")
>>> [float(v) for v in kt.features(kt.config_cls(h=7, w=7, cins=(16, 32)))]
[7.0, 7.0, 2.0, 16.0, 32.0, 0.0, 0.0, 48.0]
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

__all__ = ["ConcatConfig", "ConcatKernel"]


@dataclass(frozen=True)
class ConcatConfig:
    h: int
    w: int
    cins: tuple[int, ...]


class ConcatKernel(KernelType):
    name = "concat"
    family = "concat"
    config_cls = ConcatConfig
    feature_names = ("H", "W", "N", "CIN1", "CIN2", "CIN3", "CIN4", "CTOTAL")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> ConcatConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == "concat")
        h, w, _ = hwc(node.output_shape)
        return ConcatConfig(h=h, w=w, cins=tuple(hwc(s)[2] for s in node.input_shapes))

    def _features(self, config: ConcatConfig) -> list[float]:
        cins = list(config.cins)
        slots = cins[:3] + [sum(cins[3:])] if len(cins) > 4 else cins + [0] * (4 - len(cins))
        return [config.h, config.w, len(cins), *slots, sum(cins)]

    def analytic_cost(self, config: ConcatConfig) -> KernelCost | None:
        c = config
        if not (type(c.cins) is tuple and c.cins and positive_ints(c.h, c.w, *c.cins)):
            return None
        # every input read, the concatenation written: twice the output's elements
        n = sum(c.cins) * c.h * c.w
        return KernelCost(flops=0, params=0, memory_bytes=2 * n * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: ConcatConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("concat", (1, config.cins[0], config.h, config.w))
        xs = [b.x] + [b.input(f"input{i + 1}", (1, c, config.h, config.w))
                      for i, c in enumerate(config.cins[1:], start=1)]
        return b.build([b.concat(xs, name="concat")], validate=validate)


KERNEL_TYPES.register("concat", ConcatKernel())
