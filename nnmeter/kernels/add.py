"""The ``add`` kernel family: elementwise addition (residual), optionally with a fused
activation (``add``, ``add-relu``). Features: [H, W, CIN, CONST, FLOPs, params, bytes,
tail flags...]; CONST is 1 when the second operand is a constant.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("add-relu")
>>> g = kt.build_graph(kt.config_cls(h=4, w=4, cin=8))
>>> sorted(g.input_names)
['input', 'input2']
"""

from __future__ import annotations

from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import elementwise_flops, hwc, positive_ints

__all__ = ["AddConfig", "AddKernel"]


@dataclass(frozen=True)
class AddConfig:
    """x + y on (1, cin, h, w); ``const`` when y is a constant of x's shape."""

    h: int
    w: int
    cin: int
    const: bool = False


class AddKernel(TailKernelType):
    family = "add"
    config_cls = AddConfig
    head_feature_names = ("H", "W", "CIN", "CONST")
    allow_bn = False
    allow_add = False

    def head_config(self, head: Node) -> AddConfig:
        h, w, c = hwc(head.output_shape)
        return AddConfig(h=h, w=w, cin=c, const=head.attrs.const_shape is not None)

    def head_features(self, config: AddConfig) -> list[float]:
        return [config.h, config.w, config.cin, float(config.const)]

    def input_shape(self, config: AddConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: AddConfig) -> HeadCost | None:
        c = config
        if not (positive_ints(c.h, c.w, c.cin) and type(c.const) is bool):
            return None
        n = c.cin * c.h * c.w
        flops = elementwise_flops("add", n)
        if c.const:  # a stored constant of x's shape
            return flops, n, n, n, (1, c.cin, c.h, c.w)
        return flops, 0, 0, 2 * n, (1, c.cin, c.h, c.w)  # two graph inputs

    def build_head(self, b: GraphBuilder, config: AddConfig) -> Ref:
        shape = self.input_shape(config)
        if config.const:
            return b.eltwise_const("add", b.x, shape, name="add")
        return b.add_(b.x, b.input("input2", shape), name="add")


register_family(AddKernel, [(), ("relu",), ("relu6",)])
