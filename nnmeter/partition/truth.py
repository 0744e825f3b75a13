"""Kernels against the runtime: does the partition group ops as the runtime does?

A runtime that shows what it executed (ORT's optimised graph, OpenVINO's runtime model,
MNN's op callbacks; :meth:`nnmeter.backends.Profiler.profile`) reports, per executed
node, the original model nodes it computes (``ExecutedNode.covers``). Mapped onto the IR
(an IR node answers to its own name, the source node it came from and the source nodes a
canonical pass folded into it, ``meta["absorbed"]``), each executed node is a set of IR
nodes. The partition agrees with the runtime on an executed node when one kernel holds
exactly that set.

Examples
--------
>>> from nnmeter.backends.base import ExecutedNode
>>> from nnmeter.ir.builder import GraphBuilder
>>> b = GraphBuilder("t", (1, 8, 8, 8))
>>> y = b.relu(b.conv(b.x, 8, name="c"), name="r")
>>> g = b.build([y])
>>> from types import SimpleNamespace as K
>>> ks = [K(type="conv-relu", nodes=("c", "r"))]
>>> c = compare_with_runtime(g, ks, [ExecutedNode("fused", "FusedConv", ("c", "r"))])
>>> c.runtime_equal, c.runtime_compute, c.share_equal
(1, 1, 1.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from nnmeter.ir.graph import ModelGraph

__all__ = ["GroupingComparison", "compare_with_runtime", "ir_name_map", "ir_set",
           "merge_absorbed"]


@dataclass(frozen=True)
class GroupingComparison:
    """One model's partition against the runtime's executed nodes.

    ``runtime_compute`` counts executed nodes that compute some IR node (layout reorders
    and copies the runtime added cover none), an IR node set the runtime computes in
    several passes once (MNN runs a grouped convolution as one convolution per group);
    ``runtime_equal`` those whose IR nodes are exactly one kernel's. ``extra_kernels`` are
    kernels (by their first node) that match no executed node: ops nnmeter predicts the
    runtime does not run apart.
    """

    kernels: int
    runtime_nodes: int
    runtime_compute: int
    runtime_equal: int
    first_difference: str | None
    extra_kernels: tuple[str, ...] = field(default=())
    unmatched_runtime: tuple[str, ...] = field(default=())

    @property
    def share_equal(self) -> float:
        return self.runtime_equal / self.runtime_compute if self.runtime_compute else 1.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["share_equal"] = self.share_equal
        d["extra_kernels"] = list(self.extra_kernels)
        d["unmatched_runtime"] = list(self.unmatched_runtime)
        return d


def ir_name_map(graph: ModelGraph) -> dict[str, str]:
    """Source-model node name → the IR node that computes it (itself, the node it was
    imported as, or the node a canonical pass folded it into)."""
    out: dict[str, str] = {}
    for n in graph.topological_nodes():
        if n.op == "input":
            continue
        for alias in n.meta.get("absorbed", ()) or ():
            out.setdefault(str(alias), n.name)
        src = (n.source or {}).get("name")
        if src:
            out.setdefault(str(src), n.name)
        out[n.name] = n.name
    return out


def ir_set(covers: Iterable[str], names: dict[str, str]) -> frozenset[str]:
    """The IR nodes that runtime-reported source names ``covers`` stand for, through
    ``names`` (:func:`ir_name_map`)."""
    out = set()
    for c in covers:
        hit = names.get(c)
        if hit is None:
            # an IR op imported from several source nodes keeps the first one's name;
            # a runtime may report a decorated name ("conv_1/relu")
            best = max((n for n in names if c.startswith(n) and c[len(n):len(n) + 1] in "_/:."),
                       key=len, default=None)
            hit = names[best] if best else None
        if hit is not None:
            out.add(hit)
    return frozenset(out)


@dataclass(frozen=True)
class _Group:
    type: str
    nodes: tuple[str, ...]


def merge_absorbed(kernels: Sequence[Any], absorbed: Mapping[int, int]) -> list[_Group]:
    """The kernels as the predictor models them: a kernel the runtime runs inside
    another (``absorbed``: index → host index, :func:`~nnmeter.predictors.absorbed.
    absorbed_kernels`) joins its host's group.

    >>> from types import SimpleNamespace as K
    >>> ks = [K(type="conv-bn-add", nodes=("c", "b", "a")), K(type="relu", nodes=("r",))]
    >>> [(g.type, g.nodes) for g in merge_absorbed(ks, {1: 0})]
    [('conv-bn-add+relu', ('c', 'b', 'a', 'r'))]
    """
    def root(i: int) -> int:
        seen = set()
        while i in absorbed and i not in seen:
            seen.add(i)
            i = absorbed[i]
        return i

    members: dict[int, list[int]] = {}
    for i in range(len(kernels)):
        members.setdefault(root(i), []).append(i)
    return [_Group("+".join(kernels[j].type for j in js),
                   tuple(n for j in js for n in kernels[j].nodes))
            for _, js in sorted(members.items())]


def compare_with_runtime(graph: ModelGraph, kernels: Sequence[Any],
                         executed: Sequence[Any],
                         absorbed: Mapping[int, int] | None = None) -> GroupingComparison:
    """Compare a partition (``kernels``, each with ``.nodes`` and ``.type``) with the
    nodes a runtime executed (:class:`~nnmeter.backends.base.ExecutedNode`).

    With ``absorbed``, kernels the predictor runs inside another count as part of it
    (:func:`merge_absorbed`); ``kernels`` in the result still counts the partition's."""
    n_kernels = len(kernels)
    if absorbed:
        kernels = merge_absorbed(kernels, absorbed)
    names = ir_name_map(graph)
    compute, seen = [], set()
    for e in executed:
        s = ir_set(e.covers, names)
        if s and s not in seen:  # an op run in several passes is one runtime group
            seen.add(s)
            compute.append((e, s))
    kernel_sets = {frozenset(k.nodes): k for k in kernels}
    runtime_sets = {s for _, s in compute}
    equal = [s in kernel_sets for _, s in compute]
    first = None
    unmatched = []
    for (e, s), ok in zip(compute, equal):
        if ok:
            continue
        unmatched.append(f"{e.op_type}{sorted(s)}")
        if first is None:
            ours = sorted({f"{k.type}{list(k.nodes)}" for ks, k in kernel_sets.items() if ks & s})
            first = f"runtime {e.op_type}{sorted(s)} vs kernels {ours[:3]}"
    extra = tuple(f"{k.type}:{k.nodes[0]}" for ks, k in kernel_sets.items()
                  if ks not in runtime_sets)
    return GroupingComparison(
        kernels=n_kernels, runtime_nodes=len(executed), runtime_compute=len(compute),
        runtime_equal=sum(equal), first_difference=first, extra_kernels=extra,
        unmatched_runtime=tuple(unmatched))
