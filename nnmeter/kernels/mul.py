"""The ``mul`` kernel: elementwise multiplication. ``operand`` says what the second
factor is: ``same`` (a tensor of x's shape), ``channel`` (a (1, C, 1, 1) gate, as in
squeeze-excite) or ``const``. Features: [H, W, CIN, same, channel, const, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("mul")
>>> [float(v) for v in kt.features(kt.config_cls(h=2, w=2, cin=2, operand="channel"))[:6]]
[2.0, 2.0, 2.0, 0.0, 1.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, elementwise_flops, hwc,
    positive_ints, topo_nodes,
)

__all__ = ["MulConfig", "MulKernel", "MulTailKernel", "OPERANDS"]

OPERANDS = ("same", "channel", "const")


@dataclass(frozen=True)
class MulConfig:
    h: int
    w: int
    cin: int
    operand: str = "same"

    def __post_init__(self) -> None:
        if self.operand not in OPERANDS:
            raise ValueError(f"mul operand {self.operand!r} is not one of {OPERANDS}")


def mul_config(node: Node) -> MulConfig:
    """The config of one ``mul`` node: its shape and what its second factor is."""
    h, w, c = hwc(node.output_shape)
    if node.attrs.const_shape is not None:
        operand = "const"
    elif len(node.input_shapes) == 2 and node.input_shapes[0] != node.input_shapes[1]:
        operand = "channel"
    else:
        operand = "same"
    return MulConfig(h=h, w=w, cin=c, operand=operand)


class MulKernel(KernelType):
    name = "mul"
    family = "mul"
    config_cls = MulConfig
    feature_names = ("H", "W", "CIN", "same", "channel", "const", "bytes")

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> MulConfig:
        return mul_config(next(n for n in topo_nodes(graph, names) if n.op == "mul"))

    def _features(self, config: MulConfig) -> list[float]:
        return [config.h, config.w, config.cin,
                *(1.0 if config.operand == o else 0.0 for o in OPERANDS),
                self.cost(config).memory_bytes]

    def analytic_cost(self, config: MulConfig) -> KernelCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin):
            return None
        n = c.cin * c.h * c.w
        params = 0
        if c.operand == "const":  # a stored constant of x's shape
            params = read = n
        elif c.operand == "channel":  # a second graph input of (1, C, 1, 1)
            read = n + c.cin
        elif c.operand == "same":  # a second graph input of x's shape
            read = 2 * n
        else:
            return None
        return KernelCost(flops=elementwise_flops("mul", n), params=params,
                          memory_bytes=(read + params + n) * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: MulConfig, *, validate: bool = True) -> ModelGraph:
        shape = (1, config.cin, config.h, config.w)
        b = GraphBuilder("mul", shape)
        if config.operand == "const":
            y = b.eltwise_const("mul", b.x, shape, name="mul")
        else:
            other = shape if config.operand == "same" else (1, config.cin, 1, 1)
            y = b.mul(b.x, b.input("input2", other), name="mul")
        return b.build([y], validate=validate)


KERNEL_TYPES.register("mul", MulKernel())


class MulTailKernel(TailKernelType):
    """``mul-add[-act]``: a squeeze-excite gate's multiply, the residual add after it
    and the activation after that, as one kernel (OpenVINO runs the chain as one
    element-wise node). Features: [H, W, CIN, same, channel, const, FLOPs, params,
    bytes, tail flags...].

    >>> kt = KERNEL_TYPES.get("mul-add-relu")
    >>> g = kt.build_graph(MulConfig(h=4, w=4, cin=8, operand="channel"))
    >>> [n.op for n in g.topological_nodes() if n.op != "input"]
    ['mul', 'add', 'relu']
    >>> kt.cost(MulConfig(h=4, w=4, cin=8, operand="channel")).memory_bytes
    1568
    """

    family = "mul"
    config_cls = MulConfig
    head_feature_names = ("H", "W", "CIN", "same", "channel", "const")
    allow_bn = False
    allow_add = True

    def __init__(self, tail: tuple[str, ...] = ("add",)) -> None:
        if not tail or tail[0] != "add":
            raise ValueError(f"{tail!r} is not a tail of mul-add (it starts with the add)")
        super().__init__(tail)

    def head_config(self, head: Node) -> MulConfig:
        return mul_config(head)

    def head_features(self, config: MulConfig) -> list[float]:
        return [config.h, config.w, config.cin,
                *(1.0 if config.operand == o else 0.0 for o in OPERANDS)]

    def input_shape(self, config: MulConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: MulConfig) -> HeadCost | None:
        c = config
        if not positive_ints(c.h, c.w, c.cin) or c.operand not in OPERANDS:
            return None
        n = c.cin * c.h * c.w
        flops = elementwise_flops("mul", n)
        shape = (1, c.cin, c.h, c.w)
        if c.operand == "const":
            return flops, n, n, n, shape
        return flops, 0, 0, n + (c.cin if c.operand == "channel" else n), shape

    def build_head(self, b: GraphBuilder, config: MulConfig) -> Ref:
        shape = self.input_shape(config)
        if config.operand == "const":
            return b.eltwise_const("mul", b.x, shape, name="mul")
        other = shape if config.operand == "same" else (1, config.cin, 1, 1)
        return b.mul(b.x, b.input("input2", other), name="mul")


register_family(MulTailKernel, [("add",), ("add", "relu")])
