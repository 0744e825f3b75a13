"""The ``other`` kernel type: any single op no other type covers (softmax, pad, resize,
layernorm, matmul, sub, div, clip, unknown ops...). Never silently free: its features
carry the op's cost, and ``build_graph`` rebuilds the op from its recorded attributes
so it can be profiled (except ``unknown`` ops, which cannot be rebuilt).

Features: [in_elements, out_elements, FLOPs, params, bytes].

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> from nnmeter.kernels import KERNEL_TYPES
>>> b = GraphBuilder("t", (1, 10))
>>> g = b.build([b.softmax(b.x, name="sm")])
>>> kt = KERNEL_TYPES.get("other")
>>> cfg = kt.config_from_nodes(g, ["sm"])
>>> cfg.op, [float(v) for v in kt.features(cfg)[:3]]
('softmax', [10.0, 10.0, 50.0])
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.errors import UnsupportedOpError
from nnmeter.ir.cost import node_cost
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import attrs_from_dict, attrs_to_dict
from nnmeter.kernels.base import KERNEL_TYPES, KernelCost, KernelType, topo_nodes

__all__ = ["OtherConfig", "OtherKernel", "UNBUILDABLE"]

#: ops no single-kernel graph can be built of: their cost is the one recorded in the config
UNBUILDABLE = frozenset(("unknown", "input"))


@dataclass(frozen=True)
class OtherConfig:
    """One op of any type; ``attrs_json`` is its attribute record as JSON."""

    op: str
    in_shapes: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    attrs_json: str = "{}"
    flops: int = 0
    params: int = 0
    memory_bytes: int = 0


class OtherKernel(KernelType):
    name = "other"
    family = "other"
    config_cls = OtherConfig
    feature_names = ("in_elements", "out_elements", "FLOPs", "params", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> OtherConfig:
        nodes = [n for n in topo_nodes(graph, names) if n.op != "identity"]
        main = max(nodes, key=lambda n: node_cost(n, graph.dtype).flops) if nodes else \
            topo_nodes(graph, names)[0]
        c = node_cost(main, graph.dtype)
        return OtherConfig(
            op=main.op, in_shapes=tuple(tuple(s) for s in main.input_shapes),
            out_shapes=tuple(tuple(s) for s in main.output_shapes),
            attrs_json=json.dumps(attrs_to_dict(main.attrs), sort_keys=True),
            flops=c.flops, params=c.params, memory_bytes=c.memory_bytes,
        )

    def _features(self, config: OtherConfig) -> list[float]:
        return [sum(math.prod(s) for s in config.in_shapes),
                sum(math.prod(s) for s in config.out_shapes),
                config.flops, config.params, config.memory_bytes]

    def analytic_cost(self, config: OtherConfig) -> KernelCost | None:
        """For an op nnmeter cannot build a graph of (``unknown``, ``input``), the cost its
        node had where the config was read (:meth:`config_from_nodes`): the composition's
        terms read a kernel's bytes, and such a kernel, predicted by a fallback, has no
        graph to count them on (a real model's unknown op crashed the in-model term on
        the Xeon, whose ``other`` group costs per megabyte). Every other op: None, its
        built graph's figures."""
        if config.op in UNBUILDABLE:
            return KernelCost(flops=int(config.flops), params=int(config.params),
                              memory_bytes=int(config.memory_bytes))
        return None

    def build_graph(self, config: OtherConfig, *, validate: bool = True) -> ModelGraph:
        if config.op in UNBUILDABLE:
            raise UnsupportedOpError(
                f"cannot build a profiling model for op {config.op!r}: its semantics are "
                f"not known to nnmeter; predict it with a fallback instead"
            )
        g = ModelGraph(f"other_{config.op}")
        refs = [g.add_input("input" if i == 0 else f"input{i}", s)
                for i, s in enumerate(config.in_shapes)]
        attrs = attrs_from_dict(config.op, json.loads(config.attrs_json))
        g.add_node(config.op, config.op, attrs, refs)
        g.set_outputs([config.op])
        g.infer_shapes()
        return g.validate() if validate else g


KERNEL_TYPES.register("other", OtherKernel())
