"""Kernel types: configs, THE feature function of each type, single-kernel graphs.

Public API (see docs/contracts.md "Kernels"):

- :class:`Kernel` ``(type, nodes, ops, config)`` — one kernel of a partitioned model;
- :data:`KERNEL_TYPES` — registry name → :class:`KernelType`; fused variants of the
  tail families resolve on demand (``KERNEL_TYPES.get("conv-bn-hswish-add")``);
- :func:`kernel_type_of` — the type name of a fused op sequence; ``other`` covers the rest;
- :func:`kernel_from_nodes` — a Kernel for a group of nodes of a shape-inferred graph.

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> b = GraphBuilder("m", (1, 3, 16, 16))
>>> g = b.build([b.relu(b.bn(b.conv(b.x, 8, name="c"), name="b"), name="r")])
>>> k = kernel_from_nodes(g, ["c", "b", "r"])
>>> k.type, k.config.cout, len(k.features()) == len(KERNEL_TYPES.get(k.type).feature_names)
('conv-bn-relu', 8, True)
"""

from __future__ import annotations

from collections.abc import Sequence

from nnmeter.kernels.base import (
    KERNEL_TYPES, Kernel, KernelCost, KernelType, hwc, kernel_cost, topo_nodes,
)
from nnmeter.kernels.naming import block_type_of, bn_equivalent, kernel_type_of

# Each module registers its types in KERNEL_TYPES on import.
from nnmeter.kernels import (  # noqa: E402,F401  (registration side effect)
    activation, add, attention, bn, channelshuffle, concat, conv, convtranspose, datamove, dwconv,
    fc, gather, lrn, mul, other, pooling, se, split,
)

__all__ = [
    "Kernel", "KernelType", "KernelCost", "KERNEL_TYPES", "kernel_type_of",
    "block_type_of", "bn_equivalent", "kernel_from_nodes", "fallback_config", "kernel_cost",
    "hwc", "FAMILIES",
]

#: Kernel families (modules), for predictors that train one regressor per family.
FAMILIES = ("conv", "gconv", "dwconv", "convtranspose", "fc", "bn", "add", "activation", "pool",
            "gap", "mul", "concat", "split", "channelshuffle", "se", "datamove", "transpose",
            "lrn", "matmul", "softmax", "layernorm", "add-layernorm", "split-last", "gather",
            "other")


def fallback_config(graph, names: Sequence[str], ktype: KernelType) -> tuple[str, object]:
    """``(type name, config)`` of nodes that ``ktype`` refused: its
    :attr:`~KernelType.alternative` type where that takes them, else ``other``."""
    if ktype.alternative:
        alt = KERNEL_TYPES.get(ktype.alternative)
        try:
            return alt.name, alt.config_from_nodes(graph, names)
        except (StopIteration, ValueError, IndexError, AttributeError):
            pass
    return "other", KERNEL_TYPES.get("other").config_from_nodes(graph, names)


def kernel_from_nodes(graph, names: Sequence[str], type_name: str | None = None) -> Kernel:
    """The Kernel covering ``names`` of a shape-inferred ``graph``.

    ``type_name`` defaults to :func:`kernel_type_of` of the nodes' ops. If the named type
    cannot read a config from these nodes, the kernel falls back to ``other``.
    """
    nodes = topo_nodes(graph, names)
    ops = tuple(n.op for n in nodes)
    tname = type_name or kernel_type_of(ops)
    ktype = KERNEL_TYPES.get(tname)
    names = [n.name for n in nodes]
    try:
        config = ktype.config_from_nodes(graph, names)
    except (StopIteration, ValueError, IndexError, AttributeError):
        tname, config = fallback_config(graph, names, ktype)
    return Kernel(tname, tuple(n.name for n in nodes), ops, config)
