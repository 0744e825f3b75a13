"""The ``gather`` kernel: values picked along one axis by constant indices.

A gather copies ``inner`` contiguous elements per index. Two forms are common in
transformers: a row lookup (an embedding table, ``inner`` the width, one set of indices
for every row: ``shared``) and ``take_along_axis`` (DeBERTa's relative positions: each of
``outer`` rows picks its own ``n`` of ``axis_len`` single elements). Element by element,
LiteRT's gather is far slower than its bytes say (0.22 ms for 98,304 floats of a
(6, 128, 512) tensor on the machine these notes come from, where a FLOPs/bytes estimate
said 0.017 ms): it wants a regressor of its own.

Features: [OUTER, AXIS_LEN, N, INNER, SHARED, out elements, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("gather")
>>> cfg = kt.config_cls(outer=768, axis_len=512, n=128)
>>> g = kt.build_graph(cfg)
>>> [(n.op, n.output_shape) for n in g.topological_nodes()]
[('input', (768, 512, 1)), ('gather', (768, 128, 1))]
>>> [float(v) for v in kt.features(cfg)[:6]]
[768.0, 512.0, 128.0, 1.0, 0.0, 98304.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import GatherAttrs
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, positive_ints, topo_nodes,
)

__all__ = ["GatherConfig", "GatherKernel", "gather_config"]


@dataclass(frozen=True)
class GatherConfig:
    """Data viewed as (outer, axis_len, inner), gathered along the middle axis: ``n``
    indices per row, one set for all rows (``shared``) or one per row."""

    outer: int
    axis_len: int
    n: int
    inner: int = 1
    shared: bool = False


def gather_config(data: Sequence[int], attrs: GatherAttrs) -> GatherConfig:
    """The config of a gather of ``data`` (its shape) with ``attrs``; ValueError for a
    form the type does not take (batch axes that are not all the leading ones)."""
    rank = len(data)
    axis = attrs.axis + rank if attrs.axis < 0 else attrs.axis
    idx, bd = tuple(attrs.indices_shape), attrs.batch_dims
    outer = math.prod(data[:axis])
    inner = math.prod(data[axis + 1:])
    if bd == 0:
        return GatherConfig(outer=int(outer), axis_len=int(data[axis]), n=int(math.prod(idx)),
                            inner=int(inner), shared=True)
    if bd == axis:
        return GatherConfig(outer=int(outer), axis_len=int(data[axis]),
                            n=int(math.prod(idx[bd:])), inner=int(inner), shared=False)
    raise ValueError(f"gather with {bd} batch axes before axis {axis} is not a gather kernel")


class GatherKernel(KernelType):
    name = "gather"
    family = "gather"
    config_cls = GatherConfig
    # whole configurations from the prior: its fields are tied (a row lookup copies
    # whole rows; take_along_axis picks single elements), never drawn one by one
    size_fields: tuple[str, ...] = ()
    feature_names = ("OUTER", "AXIS_LEN", "N", "INNER", "SHARED", "out_elements", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> GatherConfig:
        node = next(n for n in topo_nodes(graph, names) if n.op == "gather")
        return gather_config(node.input_shapes[0], node.attrs)

    def _features(self, config: GatherConfig) -> list[float]:
        c = config
        return [c.outer, c.axis_len, c.n, c.inner, float(c.shared), c.outer * c.n * c.inner,
                self.cost(c).memory_bytes]

    def _indices(self, c: GatherConfig) -> tuple[int, ...]:
        return (c.n,) if c.shared else (c.outer, c.n)

    def analytic_cost(self, config: GatherConfig) -> KernelCost | None:
        c = config
        if not (positive_ints(c.outer, c.axis_len, c.n, c.inner) and type(c.shared) is bool):
            return None
        idx = math.prod(self._indices(c))
        # the graph's cost: the whole data tensor in, the stored indices, the result out
        return KernelCost(flops=0, params=idx, memory_bytes=(
            c.outer * c.axis_len * c.inner + idx + c.outer * c.n * c.inner)
            * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: GatherConfig, *, validate: bool = True) -> ModelGraph:
        c = config
        b = GraphBuilder("gather", (c.outer, c.axis_len, c.inner))
        attrs = GatherAttrs(axis=1, indices_shape=self._indices(c),
                            batch_dims=0 if c.shared else 1)
        y = b.add("gather", [b.x], attrs, name="gather")
        return b.build([y], validate=validate)


KERNEL_TYPES.register("gather", GatherKernel())
