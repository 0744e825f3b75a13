"""The fused-tail grammar shared by compute kernels: ``head[-bn][-act][-add[-act]]``.

``conv-bn-relu``, ``dwconv-bn-relu6``, ``conv-bn-add-relu`` (ResNet), ``fc-relu`` are
all one head op followed by a *tail*. The tail is part of the type name, and the
feature vector carries it as flags too (``tail_bn``, one-hot activation, ``tail_add``,
``tail_post_act``), so a regressor trained per family can tell variants apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.ir.ops import ACTIVATIONS
from nnmeter.kernels.base import (
    BUILT_BYTES_PER_ELEMENT, KERNEL_TYPES, KernelCost, KernelType, elementwise_flops,
    topo_nodes,
)

__all__ = ["ACT_ONE_HOT", "TAIL_FEATURES", "HeadCost", "parse_tail", "TailKernelType",
           "register_family"]

#: Activations given their own one-hot column; any other activation sets ``act_other``.
ACT_ONE_HOT = ("relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish")
TAIL_FEATURES = ("tail_bn",) + tuple(f"act_{a}" for a in ACT_ONE_HOT) + (
    "act_other", "tail_add", "tail_post_act")

_ELIDED = ("identity",)

#: a head op in closed form: (FLOPs, params, stored weights, elements read from graph
#: inputs, output shape); see :meth:`TailKernelType.head_cost`
HeadCost = tuple[int, int, int, int, tuple[int, ...]]


def parse_tail(ops: Sequence[str], *, allow_bn: bool = True,
               allow_add: bool = True) -> tuple[str, ...] | None:
    """The tail ``ops`` as a tuple if it fits ``[bn][act][add[act]]``, else None."""
    ops = tuple(ops)
    i = 0
    if allow_bn and i < len(ops) and ops[i] == "bn":
        i += 1
    if i < len(ops) and ops[i] in ACTIVATIONS:
        i += 1
    if allow_add and i < len(ops) and ops[i] == "add":
        i += 1
        if i < len(ops) and ops[i] in ACTIVATIONS:
            i += 1
    return ops if i == len(ops) else None


def tail_features(tail: tuple[str, ...]) -> list[float]:
    """The tail flags: [bn, one-hot act before add..., act_other, add, act after add]."""
    has_add = "add" in tail
    pre = tail[: tail.index("add")] if has_add else tail
    post = tail[tail.index("add") + 1:] if has_add else ()
    act = next((o for o in pre if o in ACTIVATIONS), None)
    one_hot = [1.0 if act == a else 0.0 for a in ACT_ONE_HOT]
    other = 1.0 if act is not None and act not in ACT_ONE_HOT else 0.0
    return [1.0 if "bn" in pre else 0.0, *one_hot, other, 1.0 if has_add else 0.0,
            1.0 if post else 0.0]


def apply_tail(b: GraphBuilder, y: Ref, tail: tuple[str, ...]) -> Ref:
    """Append the tail ops after ``y``; ``add`` reads a second input called ``residual``."""
    for op in tail:
        if op == "bn":
            y = b.bn(y, name="bn")
        elif op == "add":
            res = b.input("residual", b.shape(y))
            y = b.add_(y, res, name="add")
        else:
            y = b.act(y, op, name=f"{op}_{len(b.graph)}")
    return y


class TailKernelType(KernelType):
    """A head op plus a fused tail. Subclasses define the head.

    Subclasses set ``family`` (= the head op), ``config_cls``, ``head_feature_names`` and
    implement :meth:`head_config`, :meth:`head_features` and :meth:`build_head`, and
    :meth:`head_cost` for a closed-form cost.
    """

    head_feature_names: tuple[str, ...] = ()
    allow_bn = True
    allow_add = True

    def __init__(self, tail: tuple[str, ...] = ()) -> None:
        if parse_tail(tail, allow_bn=self.allow_bn, allow_add=self.allow_add) is None:
            raise ValueError(f"{tail!r} is not a valid tail for {self.family}")
        self.tail = tuple(tail)
        self.name = "-".join((self.family,) + self.tail)
        self.feature_names = tuple(self.head_feature_names) + tuple(
            ("FLOPs", "params", "bytes")) + TAIL_FEATURES
        self._tail_flags = tuple(tail_features(self.tail))
        # the tail in closed form (see analytic_cost): FLOPs per output element, and
        # how many bn and add ops it holds
        self._tail_cost = (sum(elementwise_flops(op, 1) for op in self.tail),
                           self.tail.count("bn"), self.tail.count("add"))

    # -- to implement ----------------------------------------------------------
    def head_config(self, head: Node) -> Any:
        """Config of the kernel headed by ``head``; reads only the head's op,
        attributes and shapes (see :meth:`config_of_head`)."""
        raise NotImplementedError

    def head_features(self, config: Any) -> list[float]:
        raise NotImplementedError

    def build_head(self, b: GraphBuilder, config: Any) -> Ref:
        raise NotImplementedError

    def input_shape(self, config: Any) -> tuple[int, ...]:
        raise NotImplementedError

    def head_cost(self, config: Any) -> HeadCost | None:
        """The head op of :meth:`build_graph` in closed form: (FLOPs, params, stored
        weights, elements it reads from graph inputs, its output shape), as
        :func:`~nnmeter.ir.cost.node_cost` and shape inference give them; None where
        there is no closed form or the config is not one it takes. Default: None."""
        return None

    # -- shared ----------------------------------------------------------------
    def config_from_nodes(self, graph: ModelGraph, names: Sequence[str]) -> Any:
        family = self.family
        for node in topo_nodes(graph, names):
            if node.op == family:  # the first head in topological order
                return self.config_of_head(node)
        raise ValueError(
            f"kernel type {self.name!r} needs a {self.family!r} node among {list(names)}"
        )

    def config_of_head(self, head: Node) -> Any:
        """:meth:`head_config` of ``head``, memoised by what it may read: the head's op,
        attributes and shapes (never its name or inputs). Models repeat layers, so most
        heads of a batch are equal to one seen before; equal heads give equal configs."""
        key = (head.op, head.attrs, head.input_shapes, head.output_shapes)
        cache = self.__dict__.get("_head_cache")
        if cache is None:
            cache = self.__dict__["_head_cache"] = {}
        try:
            hit = cache.get(key)
        except TypeError:  # attributes that do not hash
            return self.head_config(head)
        if hit is None:
            if len(cache) > 4096:
                cache.clear()
            hit = cache[key] = self.head_config(head)
        return hit

    def analytic_cost(self, config: Any) -> KernelCost | None:
        """The cost of :meth:`build_graph`: :meth:`head_cost` plus the tail's ops, which
        keep the head's output shape. None when :meth:`head_cost` is None."""
        head = self.head_cost(config)
        if head is None:
            return None
        flops, params, stored, read, shape = head
        elements = math.prod(shape)
        per_element, n_bn, n_add = self._tail_cost
        if n_bn:  # scale and shift are params; the running stats are stored too
            params += 2 * n_bn * shape[1]
            stored += 4 * n_bn * shape[1]
        # every tail op keeps the head's shape; an add reads a second graph input
        flops += per_element * elements
        read += n_add * elements
        # what a fused kernel moves: graph inputs, stored weights and its one output
        return KernelCost(flops=flops, params=params,
                          memory_bytes=(read + stored + elements) * BUILT_BYTES_PER_ELEMENT)

    def _features(self, config: Any) -> list[float]:
        c = self.cost(config)
        return [*self.head_features(config), float(c.flops), float(c.params),
                float(c.memory_bytes), *self._tail_flags]

    def build_graph(self, config: Any, *, validate: bool = True) -> ModelGraph:
        b = GraphBuilder(self.name, self.input_shape(config))
        y = self.build_head(b, config)
        y = apply_tail(b, y, self.tail)
        return b.build([y], validate=validate)


def register_family(cls: type[TailKernelType], canonical_tails: Sequence[tuple[str, ...]]) -> None:
    """Register the canonical variants of ``cls`` and a resolver for every other tail."""
    for tail in canonical_tails:
        KERNEL_TYPES.register("-".join((cls.family,) + tuple(tail)), cls(tuple(tail)))
    family = cls.family

    def resolve(name: str) -> KernelType | None:
        parts = name.split("-")
        if parts[0] != family:
            return None
        tail = parse_tail(parts[1:], allow_bn=cls.allow_bn, allow_add=cls.allow_add)
        return None if tail is None else cls(tail)

    KERNEL_TYPES.add_resolver(resolve)
