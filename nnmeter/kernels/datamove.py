"""Data-movement kernels: ``reshape``, ``flatten``, ``transpose`` and ``identity``.

Backends often elide reshape/flatten/identity (a view, no copy); the partitioner then
folds them into the producing kernel per the fusion rules, and only the ones that
stand alone become kernels of these types. Features: [elements, rank_in, rank_out, bytes];
a transpose adds which axes move (:class:`TransposeKernel`).

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("transpose")
>>> cfg = kt.config_cls(in_shape=(1, 2, 3), out_shape=(1, 3, 2), perm=(0, 2, 1))
>>> kt.build_graph(cfg)["transpose"].output_shape
(1, 3, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, int_tuple, positive_ints,
    topo_nodes,
)

__all__ = ["MoveConfig", "DataMoveKernel", "TransposeKernel", "DATA_MOVE_OPS", "contiguous_run"]

DATA_MOVE_OPS = ("reshape", "flatten", "transpose", "identity")


@dataclass(frozen=True)
class MoveConfig:
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    perm: tuple[int, ...] = ()
    axis: int = 1


class DataMoveKernel(KernelType):
    family = "datamove"
    config_cls = MoveConfig
    feature_names = ("elements", "rank_in", "rank_out", "bytes")

    def __init__(self, op: str) -> None:
        self.op = op
        self.name = op

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> MoveConfig:
        nodes = topo_nodes(graph, names)
        main = next((n for n in nodes if n.op == self.op), nodes[0])
        a = main.attrs
        return MoveConfig(in_shape=tuple(main.input_shape), out_shape=tuple(main.output_shape),
                          perm=tuple(getattr(a, "perm", ())), axis=getattr(a, "axis", 1))

    def _features(self, config: MoveConfig) -> list[float]:
        return [math.prod(config.in_shape), len(config.in_shape), len(config.out_shape),
                self.cost(config).memory_bytes]

    def analytic_cost(self, config: MoveConfig) -> KernelCost | None:
        c = config
        if not (int_tuple(c.in_shape) and c.in_shape and positive_ints(*c.in_shape)):
            return None
        n = math.prod(c.in_shape)
        if self.op == "reshape":
            if not (int_tuple(c.out_shape) and math.prod(c.out_shape) == n):
                return None
        elif self.op == "flatten":
            if type(c.axis) is not int:
                return None
        elif self.op == "transpose":
            rank = len(c.in_shape)
            if not int_tuple(c.perm) or (c.perm and sorted(c.perm) != list(range(rank))):
                return None
        # every op here keeps the element count: the input read, the output written
        return KernelCost(flops=0, params=0, memory_bytes=2 * n * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: MoveConfig, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder(self.name, config.in_shape)
        if self.op == "reshape":
            y = b.reshape(b.x, config.out_shape, name="reshape")
        elif self.op == "flatten":
            y = b.flatten(b.x, config.axis, name="flatten")
        elif self.op == "transpose":
            y = b.transpose(b.x, config.perm, name="transpose")
        else:
            y = b.add("identity", [b.x], name="identity")
        return b.build([y], validate=validate)


def contiguous_run(shape: Sequence[int], perm: Sequence[int]) -> int:
    """Elements that a transpose of ``shape`` by ``perm`` still copies as one contiguous
    run: the product of the trailing axes that ``perm`` leaves in place (1 when the last
    axis moves, every element then being gathered on its own).

    >>> contiguous_run((1, 197, 3, 64), (0, 2, 1, 3)), contiguous_run((1, 3, 197, 64), (0, 1, 3, 2))
    (64, 1)
    """
    run = 1
    for i in range(len(perm) - 1, -1, -1):
        if perm[i] != i:
            break
        run *= int(shape[i])
    return run


class TransposeKernel(DataMoveKernel):
    """A transpose: its time depends on which axes move, not only on how many elements
    there are. A head split (1, L, H, dh) -> (1, H, L, dh) copies runs of dh floats; a
    key transpose that moves the last axis gathers every element alone, several times
    slower. Features: [elements, rank_in, rank_out, bytes, RUN, IN_LAST, OUT_LAST]:
    RUN is :func:`contiguous_run`, IN_LAST and OUT_LAST the last axis before and after."""

    feature_names = DataMoveKernel.feature_names + ("RUN", "IN_LAST", "OUT_LAST")
    family = "transpose"  # its rows have features the other data moves lack

    def _features(self, config: MoveConfig) -> list[float]:
        c = config
        perm = c.perm or tuple(range(len(c.in_shape)))[::-1]
        return [*super()._features(c), contiguous_run(c.in_shape, perm),
                c.in_shape[-1] if c.in_shape else 1, c.out_shape[-1] if c.out_shape else 1]


for _op in DATA_MOVE_OPS:
    KERNEL_TYPES.register(_op, TransposeKernel(_op) if _op == "transpose" else DataMoveKernel(_op))
del _op
