"""The ``se`` kernel: a squeeze-excite block matched as one subgraph,
gap → conv1x1 (or fc) → act → conv1x1 (or fc) → gate → mul with the block input.

Features: [H, W, CIN, MID, FLOPs, params, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("se")
>>> g = kt.build_graph(kt.config_cls(h=7, w=7, cin=64, mid=16))
>>> g.op_counts()["conv"]
2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import ACTIVATIONS
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, elementwise_flops, hwc,
    positive_ints, topo_nodes,
)

__all__ = ["SEConfig", "SEKernel"]


@dataclass(frozen=True)
class SEConfig:
    h: int
    w: int
    cin: int
    mid: int
    inner_act: str = "relu"
    gate: str = "hsigmoid"


class SEKernel(KernelType):
    name = "se"
    family = "se"
    config_cls = SEConfig
    feature_names = ("H", "W", "CIN", "MID", "FLOPs", "params", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> SEConfig:
        nodes = topo_nodes(graph, names)
        gap = next(n for n in nodes if n.op == "gap")
        h, w, c = hwc(gap.input_shape)
        dense = [n for n in nodes if n.op in ("conv", "fc")]
        acts = [n.op for n in nodes if n.op in ACTIVATIONS]
        mid = (dense[0].attrs.out_channels if dense[0].op == "conv"
               else dense[0].attrs.out_features) if dense else c
        return SEConfig(h=h, w=w, cin=c, mid=mid,
                        inner_act=acts[0] if len(acts) > 1 else "relu",
                        gate=acts[-1] if acts else "hsigmoid")

    def _features(self, config: SEConfig) -> list[float]:
        cost = self.cost(config)
        return [config.h, config.w, config.cin, config.mid, cost.flops, cost.params,
                cost.memory_bytes]

    def analytic_cost(self, config: SEConfig) -> KernelCost | None:
        c = config
        if not (positive_ints(c.h, c.w, c.cin, c.mid) and c.inner_act in ACTIVATIONS
                and c.gate in ACTIVATIONS):
            return None
        n = c.cin * c.h * c.w
        squeeze = n + c.cin  # gap: one FLOP per element read plus one per output
        fc1, fc2 = c.mid * c.cin, c.cin * c.mid  # the two 1x1 convolutions' weights
        flops = (squeeze + 2 * fc1 + elementwise_flops(c.inner_act, c.mid) + 2 * fc2
                 + elementwise_flops(c.gate, c.cin) + elementwise_flops("mul", n))
        params = fc1 + c.mid + fc2 + c.cin  # with biases
        # the block input read once (gap and mul read the same graph input), the output
        # written
        return KernelCost(flops=flops, params=params,
                          memory_bytes=(n + params + n) * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: SEConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder("se", (1, config.cin, config.h, config.w))
        s = b.gap(b.x, name="se_gap")
        s = b.conv(s, config.mid, 1, name="se_fc1")
        s = b.act(s, config.inner_act, name="se_act")
        s = b.conv(s, config.cin, 1, name="se_fc2")
        s = b.act(s, config.gate, name="se_gate")
        return b.build([b.mul(b.x, s, name="se_mul")], validate=validate)


KERNEL_TYPES.register("se", SEKernel())
