"""Shared pieces of every kernel type: the Kernel record, the KernelType base class,
the kernel-type registry and small helpers for configs and features.

A *kernel* is a group of IR nodes that a backend runs as one unit after its own
fusion (nn-Meter). A *kernel type* (``conv-bn-relu``, ``gap``, ``concat``...) owns:

- a frozen config dataclass (the numbers that decide the kernel's latency),
- ``config_from_nodes(graph, names)``: read a config off a partitioned graph,
- ``features(config)``: THE feature function, used by the builder and the predictor
  alike (one copy only; the predecessor's two copies drifted apart),
- ``build_graph(config)``: a single-kernel ModelGraph, what the builder profiles,
- ``config_to_dict`` / ``config_from_dict``: JSON round trip of a config.

Feature vectors include cost figures from :mod:`nnmeter.ir.cost` of the single-kernel
graph that ``build_graph`` makes, so features and profiled models can never disagree
about FLOPs or bytes. Building that graph (builder, networkx, shape inference) for
every new config was most of the time of predicting a model of unseen configs, so a
type may give the same figures in closed form (:meth:`KernelType.analytic_cost`):
integer arithmetic equal to ``kernel_cost(build_graph(config))`` bit for bit
(tests/kernels check it on every stored config and on the zoo's kernels). Types
without one build the graph.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnmeter.ir.cost import bytes_per_element, flops_per_element, node_cost
from nnmeter.ir.graph import ModelGraph, Node
from nnmeter.registry import Registry

__all__ = [
    "Kernel",
    "KernelType",
    "KernelTypeRegistry",
    "KERNEL_TYPES",
    "KernelCost",
    "kernel_cost",
    "hwc",
    "topo_nodes",
    "BUILT_BYTES_PER_ELEMENT",
    "positive_ints",
    "int_tuple",
    "elementwise_flops",
]


@dataclass(frozen=True)
class Kernel:
    """One kernel of a partitioned model.

    Attributes
    ----------
    type : str
        Kernel type name, registered in :data:`KERNEL_TYPES` (``"conv-bn-relu"``).
    nodes : tuple of str
        IR node names the kernel covers, in topological order.
    ops : tuple of str
        The op types of ``nodes``, same order.
    config : object
        The kernel type's config record.
    """

    type: str
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    config: Any

    @classmethod
    def _fast(cls, type: str, nodes: tuple[str, ...], ops: tuple[str, ...],
              config: Any) -> "Kernel":
        """The same record as ``Kernel(type, nodes, ops, config)``, built without the
        frozen-dataclass ``__init__`` (the partitioner makes one per kernel of every
        model; this halves that cost). Arguments are not checked."""
        kernel = object.__new__(cls)
        kernel.__dict__.update(type=type, nodes=nodes, ops=ops, config=config)
        return kernel

    @property
    def kernel_type(self) -> "KernelType":
        """The registered :class:`KernelType` of this kernel."""
        return KERNEL_TYPES.get(self.type)

    def features(self) -> np.ndarray:
        """Feature vector of this kernel (its type's single feature function)."""
        return self.kernel_type.features(self.config)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able dict: type, nodes, ops and the config as a dict."""
        return {
            "type": self.type,
            "nodes": list(self.nodes),
            "ops": list(self.ops),
            "config": self.kernel_type.config_to_dict(self.config),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Kernel":
        """Inverse of :meth:`as_dict`."""
        ktype = KERNEL_TYPES.get(data["type"])
        return cls(data["type"], tuple(data["nodes"]), tuple(data["ops"]),
                   ktype.config_from_dict(data["config"]))


@dataclass(frozen=True)
class KernelCost:
    """Cost of a single-kernel graph: fused intermediates do not count as traffic."""

    flops: int
    params: int
    memory_bytes: int


def kernel_cost(graph: ModelGraph) -> KernelCost:
    """FLOPs, params and memory traffic of a whole single-kernel graph.

    Memory traffic is what a fused kernel moves: graph inputs read, stored weights
    read and graph outputs written (intermediate tensors stay in cache/registers).
    """
    bpe = bytes_per_element(graph.dtype)
    flops = params = weights_bytes = read = 0
    data = graph.nx.nodes
    for name in graph.nx:  # sums do not depend on the order: no topological sort
        node = data[name]["node"]
        c = node_cost(node, graph.dtype)
        flops += c.flops
        params += c.params
        weights_bytes += c.bytes_weights
        if node.op == "input":
            read += math.prod(node.output_shape) * bpe
    written = sum(math.prod(graph.shape_of(r)) for r in graph.outputs) * bpe
    return KernelCost(flops=flops, params=params, memory_bytes=read + weights_bytes + written)


#: bytes per element of every graph ``build_graph`` makes (GraphBuilder's float32)
BUILT_BYTES_PER_ELEMENT = bytes_per_element("float32")


def positive_ints(*values: Any) -> bool:
    """True when every value is a plain ``int`` above 0.

    Closed-form costs take only such configs: anything else (a numpy integer, a float,
    a size of 0) goes through the built graph, which gives its own result or error."""
    for v in values:
        if type(v) is not int or v <= 0:
            return False
    return True


def int_tuple(value: Any, length: int | None = None) -> bool:
    """True when ``value`` is a tuple of plain ints (of ``length`` items, if given)."""
    if type(value) is not tuple or (length is not None and len(value) != length):
        return False
    for v in value:
        if type(v) is not int:
            return False
    return True


def conv_output_hw(h: int, w: int, kernel: int | tuple[int, int], stride: int,
                   pads: Any) -> tuple[int, int] | None:
    """(H, W) out of a ``kernel`` convolution (an int: square; or (kh, kw)); ``pads``
    None means 'same'. None when the pads are not four plain ints or the output would
    be empty (the built graph then raises its own error)."""
    from nnmeter.ir.builder import same_pads
    from nnmeter.ir.shapes import conv_out_size

    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    pads = same_pads((kh, kw)) if pads is None else pads
    if not int_tuple(pads, 4):
        return None
    ho = conv_out_size(h, kh, stride, pads[0], pads[2])
    wo = conv_out_size(w, kw, stride, pads[1], pads[3])
    return (ho, wo) if ho > 0 and wo > 0 else None


def elementwise_flops(op: str, elements: int) -> int:
    """FLOPs of elementwise op ``op`` over ``elements`` outputs, as ``node_cost`` counts
    them (0 for an op its table does not list)."""
    return (flops_per_element(op) or 0) * elements


def hwc(shape: Sequence[int]) -> tuple[int, int, int]:
    """(H, W, C) of a canonical-layout shape.

    Rank 4 (N, C, H, W) gives (H, W, C); rank 2 (N, C) gives (1, 1, C); rank 3
    (N, C, L) gives (L, 1, C); rank 1 gives (1, 1, D); higher ranks fold the trailing
    axes into H.
    """
    s = tuple(int(d) for d in shape)
    if len(s) == 4:
        return s[2], s[3], s[1]
    if len(s) <= 1:
        return 1, 1, (s[0] if s else 1)
    if len(s) == 2:
        return 1, 1, s[1]
    return int(math.prod(s[2:])), 1, s[1]


def topo_nodes(graph: ModelGraph, names: Sequence[str]) -> list[Node]:
    """The nodes called ``names``, in topological order.

    Names already in a topological order (as the partitioner passes them) are kept
    in that order; otherwise the few named nodes are sorted by their own edges (ties:
    insertion order) instead of the whole graph, so reading a kernel's config costs
    O(kernel size). For a kernel (a convex group of nodes) the result is the graph's
    topological order restricted to the kernel.
    """
    data = graph.nx._node  # networkx's node dict, read directly: the view costs more
    if len(names) == 1 and names[0] in data:
        return [data[names[0]]["node"]]
    nodes = {}
    for n in names:
        if n not in nodes:
            try:
                nodes[n] = data[n]["node"]
            except KeyError:
                graph.node(n)  # raises the graph's own error for an unknown name
                raise
    if len(nodes) == 1:
        return list(nodes.values())
    seen: set[str] = set()
    in_order = True
    for n, node in nodes.items():
        for r in node.inputs:
            src = r.node
            if src in nodes and src not in seen:
                in_order = False
                break
        if not in_order:
            break
        seen.add(n)
    if in_order:
        return list(nodes.values())
    rank = {n: data[n]["order"] for n in nodes}
    indeg = {n: 0 for n in nodes}
    readers: dict[str, list[str]] = {n: [] for n in nodes}
    for n, node in nodes.items():
        for src in {r.node for r in node.inputs}:
            if src in nodes:
                indeg[n] += 1
                readers[src].append(n)
    ready = sorted((n for n in nodes if indeg[n] == 0), key=rank.__getitem__)
    out: list[Node] = []
    while ready:
        n = ready.pop(0)
        out.append(nodes[n])
        for r in readers[n]:
            indeg[r] -= 1
            if indeg[r] == 0:
                ready.append(r)
                ready.sort(key=rank.__getitem__)
    return out


def _tupleize(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tupleize(v) for v in value)
    return value


def _listify(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_listify(v) for v in value]
    return value


class KernelType:
    """Base class of kernel types. Subclasses set the class attributes and implement
    :meth:`config_from_nodes`, :meth:`base_features` and :meth:`build_graph`.

    Attributes
    ----------
    name : str
        The registered type name (``"conv-bn-relu"``).
    family : str
        The module/family the type belongs to (``"conv"``); types of one family share
        the config class and feature layout.
    config_cls : type
        The frozen config dataclass.
    feature_names : tuple of str
        Names of the entries of :meth:`features`, same order.
    alternative : str or None
        The type to try when :meth:`config_from_nodes` refuses the nodes (a ``split``
        of the last axis is a ``split-last``), before ``other``.
    size_fields : tuple of str or None
        The config fields that sampling treats as sizes (drawn from histograms and
        stepped around by the adaptive rounds, like channel counts); None: guessed from
        the field names (``cin``, ``cout``...; :func:`nnmeter.sampling.prior.is_channel_field`).
    """

    name: str = ""
    alternative: str | None = None
    size_fields: tuple[str, ...] | None = None
    family: str = ""
    config_cls: type = object
    feature_names: tuple[str, ...] = ()

    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> Any:
        """Config of the kernel made of nodes ``names`` of a shape-inferred ``graph``."""
        raise NotImplementedError

    def build_graph(self, config: Any, *, validate: bool = True) -> ModelGraph:
        """A runnable single-kernel ModelGraph for ``config`` (input named ``input``).

        ``validate=False`` skips the graph lint (for cost figures of a graph built by
        this very code; what is profiled is always validated)."""
        raise NotImplementedError

    def features(self, config: Any) -> np.ndarray:
        """THE feature vector of ``config`` (float64, length ``len(feature_names)``).

        Raises
        ------
        TypeError
            If ``config`` is not this type's config class.
        """
        if not isinstance(config, self.config_cls):
            raise TypeError(
                f"kernel type {self.name!r} takes {self.config_cls.__name__} configs, "
                f"got {type(config).__name__}; build it with config_from_nodes or "
                f"config_from_dict"
            )
        vec = np.asarray(self._features(config), dtype=np.float64)
        if vec.shape != (len(self.feature_names),):  # guard against drift
            raise AssertionError(
                f"{self.name}: {vec.shape[0]} features but {len(self.feature_names)} names"
            )
        return vec

    def _features(self, config: Any) -> list[float]:
        raise NotImplementedError

    def cost(self, config: Any) -> KernelCost:
        """Cost of the single-kernel graph of ``config`` (cached per config): its
        :meth:`analytic_cost`, or the cost of the built graph where that is None.

        Raises whatever ``build_graph`` raises for a config it cannot build."""
        cache = self.__dict__.get("_cost_cache")
        if cache is None:
            cache = self.__dict__["_cost_cache"] = {}
        hit = cache.get(config)
        if hit is None:
            hit = self.analytic_cost(config)
            if hit is None:
                hit = kernel_cost(self.build_graph(config, validate=False))
            if len(cache) > 4096:
                cache.clear()
            cache[config] = hit
        return hit

    def analytic_cost(self, config: Any) -> KernelCost | None:
        """``kernel_cost(self.build_graph(config, validate=False))`` in closed form,
        without building the graph; None where this type has no closed form or the
        config is one it does not take (see :func:`positive_ints`), so that
        :meth:`cost` builds the graph. Subclasses that override it must match the
        graph's figures exactly: regressors trained on them read them as features."""
        return None

    def config_to_dict(self, config: Any) -> dict[str, Any]:
        """JSON-able dict of ``config`` (tuples become lists)."""
        return {f.name: _listify(getattr(config, f.name)) for f in dataclasses.fields(config)}

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        """Rebuild a config from :meth:`config_to_dict` output.

        Raises
        ------
        TypeError
            If ``data`` lacks a required field or has an unknown one.
        """
        names = {f.name for f in dataclasses.fields(self.config_cls)}
        extra = set(data) - names
        if extra:
            raise TypeError(
                f"{self.name} config got unknown fields {sorted(extra)}; "
                f"allowed: {sorted(names)}"
            )
        return self.config_cls(**{k: _tupleize(v) for k, v in data.items()})

    def __repr__(self) -> str:
        return f"<KernelType {self.name}>"


class KernelTypeRegistry(Registry[KernelType]):
    """Registry of kernel types that also resolves names of fused variants.

    Families with a fused tail (``conv``, ``dwconv``, ``fc``, ``bn``, ``add``...) register a
    resolver: ``get("conv-bn-hswish-add")`` builds that variant on demand (pure,
    cached per registry). ``names()`` lists the registered canonical names only.
    """

    def __init__(self, kind: str, *, entry_point_group: str | None = None) -> None:
        super().__init__(kind, entry_point_group=entry_point_group)
        self._resolvers: list[Callable[[str], KernelType | None]] = []
        self._variants: dict[str, KernelType] = {}

    def add_resolver(self, resolver: Callable[[str], KernelType | None]) -> None:
        """Add a function mapping a type name to a KernelType, or None if not its own."""
        self._resolvers.append(resolver)

    def _resolve(self, name: str) -> KernelType | None:
        if name in self._variants:
            return self._variants[name]
        for resolver in self._resolvers:
            kt = resolver(name)
            if kt is not None:
                self._variants[name] = kt
                return kt
        return None

    def get(self, name: str) -> KernelType:
        _ensure_loaded()
        if name in self._items:
            return self._items[name]
        kt = self._resolve(name)
        if kt is not None:
            return kt
        return super().get(name)

    def names(self) -> list[str]:
        _ensure_loaded()
        return super().names()

    def __contains__(self, name: object) -> bool:
        _ensure_loaded()
        if isinstance(name, str) and (name in self._items or self._resolve(name)):
            return True
        return super().__contains__(name)


#: name -> KernelType. Kernel-type modules register themselves when
#: :mod:`nnmeter.kernels` is imported.
KERNEL_TYPES: KernelTypeRegistry = KernelTypeRegistry(
    "kernel types", entry_point_group="nnmeter.kernel_types"
)


def _ensure_loaded() -> None:
    # The type modules register on import of the package; a user importing only
    # base must still see them.
    import nnmeter.kernels  # noqa: F401

