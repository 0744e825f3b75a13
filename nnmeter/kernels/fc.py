"""The ``fc`` kernel family: a dense layer with its fused tail (``fc``, ``fc-relu``...).

Features (nn-Meter's [CIN, COUT, FLOPs, params] plus rows, bytes and tail flags):
[CIN, COUT, ROWS, FLOPs, params, bytes, tail flags...]. ``rows`` is the number of
vectors the layer maps (batch × sequence length); 1 for a CNN classifier.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("fc")
>>> [float(v) for v in kt.features(kt.config_cls(cin=4, cout=2))[:5]]
[4.0, 2.0, 1.0, 16.0, 10.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import positive_ints

__all__ = ["FCConfig", "FCKernel"]


@dataclass(frozen=True)
class FCConfig:
    cin: int
    cout: int
    rows: int = 1


class FCKernel(TailKernelType):
    family = "fc"
    config_cls = FCConfig
    head_feature_names = ("CIN", "COUT", "ROWS")
    allow_bn = False

    def head_config(self, head: Node) -> FCConfig:
        x = head.input_shape
        return FCConfig(cin=x[-1], cout=head.attrs.out_features, rows=int(math.prod(x[:-1])))

    def head_features(self, config: FCConfig) -> list[float]:
        return [config.cin, config.cout, config.rows]

    def input_shape(self, config: FCConfig) -> tuple[int, ...]:
        return (config.rows, config.cin)

    def head_cost(self, config: FCConfig) -> HeadCost | None:
        c = config
        if not positive_ints(c.cin, c.cout, c.rows):
            return None
        weights = c.cin * c.cout
        params = weights + c.cout  # with bias
        return 2 * weights * c.rows, params, params, c.rows * c.cin, (c.rows, c.cout)

    def build_head(self, b: GraphBuilder, config: FCConfig) -> Ref:
        return b.fc(b.x, config.cout, name="fc")


register_family(FCKernel, [(), ("relu",), ("relu6",), ("hswish",), ("sigmoid",), ("add",)])
