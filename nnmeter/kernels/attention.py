"""Kernels of transformer layers: batched ``matmul`` (with its scale, ``matmul-scale``),
``softmax``, ``layernorm`` and ``add-layernorm`` (a residual add, or the constant
position embedding of an encoder's input, then a layer norm).

The rest of a transformer layer are kernels of existing types: its linear layers are
``fc`` kernels over (tokens, features) rows, GELU is the ``gelu`` activation, the
head split and merge are ``transpose`` and ``reshape`` kernels, residuals ``add``.

How runtimes run these (read from their own graphs, onnxruntime 1.32): the attention
scores ``q @ kᵀ`` then the scale ``* 1/√d`` run as one kernel (ORT's ``FusedMatMul``
takes the scale as its alpha), the context ``p @ v`` is a plain batched matmul, softmax
and layer norm are kernels of their own, and a residual add whose only reader is a
layer norm (post-norm encoders such as BERT) runs inside it (ORT's
``SkipLayerNormalization``). Whether a backend fuses is its fusion rules' decision; these
types only name and measure the kernels.

Shapes: a matmul reads ``A`` of (batch..., m, k) and ``B`` of (batch..., k, n) or a 2-D
(k, n); its config folds the leading axes into ``batch`` (a (1, heads, L, L) @
(1, heads, L, d) product is ``batch = heads``). Softmax and layer norm normalise the last
axis of ``rows`` vectors of ``d`` values. Softmax over another axis is an ``other``
kernel.

Features:

- ``matmul``, ``matmul-scale``: [BATCH, M, K, N, B_BATCHED, SCALED, FLOPs, bytes];
- ``softmax``, ``layernorm``, ``add-layernorm``: [ROWS, D, FLOPs, bytes].

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("matmul-scale")
>>> cfg = kt.config_cls(batch=3, m=197, k=64, n=197)
>>> [float(v) for v in kt.features(cfg)[:7]]
[3.0, 197.0, 64.0, 197.0, 1.0, 1.0, 15019083.0]
>>> KERNEL_TYPES.get("layernorm").features(KERNEL_TYPES.get("layernorm").config_cls(
...     rows=197, d=192))[:3].tolist()
[197.0, 192.0, 302592.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Node
from nnmeter.ir.ops import EltwiseAttrs, MatMulAttrs
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, elementwise_flops,
    positive_ints, topo_nodes,
)

__all__ = ["MatMulConfig", "MatMulKernel", "RowsConfig", "RowsKernel", "SCALE_OPS"]

#: ops that scale a matmul's output by a constant (fused into it as its alpha)
SCALE_OPS = ("mul", "div")


@dataclass(frozen=True)
class MatMulConfig:
    """``batch`` products of an (m, k) and a (k, n) matrix; ``b_batched`` False when
    the second operand is one 2-D matrix shared by the whole batch."""

    batch: int
    m: int
    k: int
    n: int
    b_batched: bool = True


def _is_scalar_scale(node: Node) -> bool:
    shape = node.attrs.const_shape
    return node.op in SCALE_OPS and shape is not None and math.prod(shape) == 1


class MatMulKernel(KernelType):
    """``matmul`` (a product of two activations) and ``matmul-scale`` (the same, its
    output then multiplied or divided by one constant, as attention scores are)."""

    family = "matmul"
    config_cls = MatMulConfig
    size_fields = ("m", "k", "n")
    feature_names = ("BATCH", "M", "K", "N", "B_BATCHED", "SCALED", "FLOPs", "bytes")

    def __init__(self, scaled: bool) -> None:
        self.scaled = scaled
        self.name = "matmul-scale" if scaled else "matmul"

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> MatMulConfig:
        nodes = topo_nodes(graph, names)
        mm = next(n for n in nodes if n.op == "matmul")
        rest = [n for n in nodes if n.op not in ("matmul", "reshape", "flatten", "identity")]
        if self.scaled != bool(rest) or any(not _is_scalar_scale(n) for n in rest):
            raise ValueError(f"{self.name}: nodes {list(names)} are not a matmul"
                             f"{' and one scalar scale' if self.scaled else ''}")
        # a constant first operand (MatMulAttrs.const_a) runs as a product of two
        # activations of the same shapes does (LiteRT, measured apart: 0.459 and 0.458 ms)
        const_a = getattr(mm.attrs, "const_a", None)
        a = tuple(const_a) if const_a is not None else mm.input_shapes[0]
        b = mm.input_shapes[-1]
        if len(a) < 2 or len(b) < 2:
            raise ValueError(f"matmul {mm.name!r} reads a vector ({a} @ {b})")
        batch = math.prod(mm.output_shape[:-2]) if len(mm.output_shape) > 2 else 1
        return MatMulConfig(batch=int(batch), m=int(a[-2]), k=int(a[-1]), n=int(b[-1]),
                            b_batched=len(b) > 2 and math.prod(b[:-2]) > 1)

    def _features(self, config: MatMulConfig) -> list[float]:
        c = config
        cost = self.cost(c)
        return [c.batch, c.m, c.k, c.n, float(c.b_batched), float(self.scaled), cost.flops,
                cost.memory_bytes]

    def analytic_cost(self, config: MatMulConfig) -> KernelCost | None:
        c = config
        if not (positive_ints(c.batch, c.m, c.k, c.n) and type(c.b_batched) is bool):
            return None
        out = c.batch * c.m * c.n
        b_el = (c.batch if c.b_batched else 1) * c.k * c.n
        flops = 2 * c.batch * c.m * c.k * c.n
        params = 0
        if self.scaled:  # one stored constant, one multiply per output
            flops += elementwise_flops("mul", out)
            params = 1
        return KernelCost(flops=flops, params=params,
                          memory_bytes=(c.batch * c.m * c.k + b_el + out + params)
                          * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: MatMulConfig, *, validate: bool = True) -> ModelGraph:
        c = config
        b = GraphBuilder(self.name, (c.batch, c.m, c.k))
        rhs = b.input("input1", (c.batch, c.k, c.n) if c.b_batched else (c.k, c.n))
        y = b.add("matmul", [b.x, rhs], MatMulAttrs(), name="matmul")
        if self.scaled:
            y = b.add("mul", [y], EltwiseAttrs(const_shape=(1,)), name="scale")
        return b.build([y], validate=validate)


@dataclass(frozen=True)
class RowsConfig:
    """``rows`` vectors of ``d`` values, normalised along ``d`` (the last axis)."""

    rows: int
    d: int


class RowsKernel(KernelType):
    """Row-wise kernels over the last axis: ``softmax``, ``layernorm`` and
    ``add-layernorm`` (an add, then a layer norm; its single-kernel graph adds two
    inputs: a constant operand of the same size reads as many bytes)."""

    config_cls = RowsConfig
    size_fields = ("rows", "d")
    feature_names = ("ROWS", "D", "FLOPs", "bytes")

    def __init__(self, name: str) -> None:
        # a family each: the three differ in work per value and share no flag that
        # would tell a pooled regressor which one a row is
        self.name = self.family = name
        self.ops = tuple(name.split("-"))

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> RowsConfig:
        nodes = [n for n in topo_nodes(graph, names)
                 if n.op not in ("reshape", "flatten", "identity")]
        if tuple(n.op for n in nodes) != self.ops:
            raise ValueError(f"{self.name}: nodes {list(names)} run "
                             f"{[n.op for n in nodes]}")
        last = nodes[-1]
        shape = last.input_shape
        axis = last.attrs.axis
        if len(shape) < 1 or axis not in (-1, len(shape) - 1):
            raise ValueError(f"{last.op} {last.name!r} normalises axis {axis} of {shape}, "
                             f"not the last one")
        return RowsConfig(rows=int(math.prod(shape[:-1])), d=int(shape[-1]))

    def _features(self, config: RowsConfig) -> list[float]:
        cost = self.cost(config)
        return [config.rows, config.d, cost.flops, cost.memory_bytes]

    def analytic_cost(self, config: RowsConfig) -> KernelCost | None:
        c = config
        if not positive_ints(c.rows, c.d):
            return None
        n = c.rows * c.d
        flops, params, inputs = elementwise_flops(self.ops[-1], n), 0, 1
        if self.ops[-1] == "layernorm":
            params = 2 * c.d  # scale and shift
        if self.ops[0] == "add":
            flops += elementwise_flops("add", n)
            inputs = 2
        return KernelCost(flops=flops, params=params,
                          memory_bytes=((inputs + 1) * n + params) * BUILT_BYTES_PER_ELEMENT)

    def build_graph(self, config: RowsConfig, *, validate: bool = True) -> ModelGraph:
        c = config
        b = GraphBuilder(self.name, (1, c.rows, c.d))
        x = b.x
        if self.ops[0] == "add":
            x = b.add_(x, b.input("input2", (1, c.rows, c.d)), name="add")
        if self.ops[-1] == "softmax":
            y = b.softmax(x, axis=-1, name="softmax")
        else:
            y = b.layernorm(x, name="layernorm")
        return b.build([y], validate=validate)


KERNEL_TYPES.register("matmul", MatMulKernel(scaled=False))
KERNEL_TYPES.register("matmul-scale", MatMulKernel(scaled=True))
for _name in ("softmax", "layernorm", "add-layernorm"):
    KERNEL_TYPES.register(_name, RowsKernel(_name))
del _name
