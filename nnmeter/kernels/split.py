"""The ``split`` kernel: a channel split into several outputs.
Features: [H, W, CIN, NOUT, bytes]. ``split-last``: a split of the last axis of a token
tensor (rank 3 or more), features [ROWS, D, NOUT, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("split")
>>> [float(v) for v in kt.features(kt.config_cls(h=2, w=2, cin=4, sizes=(2, 2)))[:4]]
[2.0, 2.0, 4.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, hwc, positive_ints,
    topo_nodes,
)

__all__ = ["SplitConfig", "SplitKernel", "SplitLastConfig", "SplitLastKernel"]


@dataclass(frozen=True)
class SplitConfig:
    h: int
    w: int
    cin: int
    sizes: tuple[int, ...]


class SplitKernel(KernelType):
    name = "split"
    family = "split"
    alternative = "split-last"
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


@dataclass(frozen=True)
class SplitLastConfig:
    """``rows`` vectors of ``sum(sizes)`` values cut along the last axis into parts of
    ``sizes`` (a transformer's fused q, k, v projection split into its three parts)."""

    rows: int
    sizes: tuple[int, ...]


class SplitLastKernel(KernelType):
    """A split of the last axis of a tensor of rank 3 or more. Features: [ROWS, D, NOUT,
    bytes]. The partitioner names a split ``split``; a split that cuts the last axis of a
    token tensor is this type instead (:attr:`SplitKernel.alternative`)."""

    name = "split-last"
    family = "split-last"
    config_cls = SplitLastConfig
    size_fields = ("rows",)
    feature_names = ("ROWS", "D", "NOUT", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> SplitLastConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == "split")
        shape = node.input_shape
        if len(shape) < 3 or node.attrs.axis % len(shape) != len(shape) - 1:
            raise ValueError(f"split {node.name!r} cuts axis {node.attrs.axis} of {shape}, "
                             f"not the last axis of a token tensor")
        return SplitLastConfig(rows=int(math.prod(shape[:-1])), sizes=tuple(node.attrs.sizes))

    def _features(self, config: SplitLastConfig) -> list[float]:
        return [config.rows, sum(config.sizes), len(config.sizes),
                self.cost(config).memory_bytes]

    def analytic_cost(self, config: SplitLastConfig) -> KernelCost | None:
        c = config
        if not (type(c.sizes) is tuple and c.sizes and positive_ints(c.rows, *c.sizes)):
            return None
        return KernelCost(flops=0, params=0,
                          memory_bytes=2 * c.rows * sum(c.sizes) * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: SplitLastConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("split_last", (1, config.rows, sum(config.sizes)))
        return b.build(b.split(b.x, config.sizes, axis=-1, name="split"), validate=validate)


KERNEL_TYPES.register("split-last", SplitLastKernel())
