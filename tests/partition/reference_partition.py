"""Reference partitioner: the first, networkx-based implementation, kept unchanged to
check that the fast one (nnmeter.partition) gives identical kernels.

Original module docstring follows.


:func:`partition` walks the graph depth-first along producer → consumer edges in a
deterministic topological order and grows each kernel from its first node while the
backend's fusion rules allow:

1. Multi-op blocks (squeeze-excite, decomposed h-swish/h-sigmoid, decomposed channel
   shuffle, gap+flatten; see :mod:`nnmeter.partition.blocks`) that the rules mark as
   fused become one kernel each, before any pairwise fusion.
2. From each node not yet in a kernel (graph inputs never are), the kernel grows to one
   consumer ``c`` of its last node ``t`` when all of these hold:

   - ``rules.fuses(op(t), op(c))``, or ``rules.fuses(head, op(c))`` when every op after
     the kernel's head fuses into the head (``conv-bn`` then ``relu`` follows the
     conv → relu rule, since the bn was folded into the conv); ``identity`` always
     fuses; ``flatten`` is looked up as ``reshape``, so a reshape the backend elides
     joins the kernel that produced its input;
   - the grown op sequence is a known kernel type (:func:`~nnmeter.kernels.kernel_type_of`
     is not ``other``), so every kernel has a type with a feature function;
   - if ``t``'s output has several consumers (or is also a graph output), the rules say
     ``multi_consumer_fuses(op(t))``; only one consumer joins;
   - if ``c`` reads tensors computed elsewhere (a residual add, a concat), the
     two-branch test allowed it (``multi_input_fuses``), and merging creates no cycle
     between kernels.
3. Kernels are returned in a topological order of the kernel graph.

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> from nnmeter.fusion.rules import FusionRules
>>> b = GraphBuilder("m", (1, 3, 16, 16))
>>> y = b.relu(b.bn(b.conv(b.x, 8)))
>>> g = b.build([b.maxpool(y)])
>>> rules = FusionRules.from_decisions("toy", pairs={("conv", "bn"): True, ("bn", "relu"): True})
>>> [k.type for k in partition(g, rules)]
['conv-bn-relu', 'maxpool']
"""

from __future__ import annotations

import logging
from typing import Any

import networkx as nx

from nnmeter.errors import PartitionError
from nnmeter.ir.graph import ModelGraph
from nnmeter.kernels import Kernel, kernel_from_nodes, kernel_type_of
from nnmeter.partition.blocks import match_blocks

__all__ = ["partition", "match_blocks", "kernel_graph"]

logger = logging.getLogger(__name__)

_BINARY = ("add", "mul", "concat", "sub", "div", "matmul")


class _State:
    """Node → kernel assignment during partitioning, with the quotient graph (kernels
    contracted to one vertex each) kept up to date for cycle checks."""

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        self.order = graph.topological_order()
        self.pos = {n: i for i, n in enumerate(self.order)}
        self.kernel_of: dict[str, int] = {}
        self.members: list[list[str]] = []
        self.types: list[str | None] = []
        self.q: nx.DiGraph = nx.DiGraph(graph.nx.edges)
        self.q.add_nodes_from(graph.nx.nodes)

    def _contract(self, name: str, kid: int) -> None:
        k = ("kernel", kid)
        self.q.add_node(k)
        for p in list(self.q.predecessors(name)):
            if p != k:
                self.q.add_edge(p, k)
        for c in list(self.q.successors(name)):
            if c != k:
                self.q.add_edge(k, c)
        self.q.remove_node(name)
        self.kernel_of[name] = kid

    def new(self, names: list[str], type_name: str | None = None) -> int:
        kid = len(self.members)
        self.members.append(list(names))
        self.types.append(type_name)
        for n in names:
            self._contract(n, kid)
        return kid

    def add(self, kid: int, name: str) -> None:
        self.members[kid].append(name)
        self._contract(name, kid)

    def group(self, name: str) -> Any:
        kid = self.kernel_of.get(name)
        return name if kid is None else ("kernel", kid)

    def merge_makes_cycle(self, kid: int, c: str) -> bool:
        """True when putting ``c`` into kernel ``kid`` would close a cycle: some other
        producer of ``c`` is reachable from the kernel (never through ``c`` itself,
        since a producer of ``c`` cannot descend from ``c``)."""
        k = ("kernel", kid)
        targets = {self.group(p) for p in self.graph.predecessors(c)} - {k}
        if not targets:
            return False
        reach = nx.descendants(self.q, k)
        return bool(targets & reach)


def _rule_tail_op(graph: ModelGraph, members: list[str]) -> str:
    for name in reversed(members):
        op = graph.node(name).op
        if op != "identity":
            return op
    return graph.node(members[-1]).op


def _next_member(state: _State, kid: int, rules: Any) -> str | None:
    g = state.graph
    members = state.members[kid]
    tail = members[-1]
    tail_node = g.node(tail)
    if len(tail_node.output_shapes) > 1:
        return None  # split-like nodes end their kernel
    consumers = g.successors(tail)
    if not consumers:
        return None
    is_output = any(o.node == tail for o in g.outputs)
    tail_op = _rule_tail_op(g, members)
    if (len(consumers) > 1 or is_output) and not rules.multi_consumer_fuses(tail_op):
        return None
    ops = tuple(g.node(n).op for n in members)
    core = [o for o in ops if o != "identity"]
    # ops the head absorbed (conv <- bn folded, conv <- relu) make the head the op the
    # next one fuses with: conv-bn -> relu follows the conv -> relu rule
    rule_ops = [tail_op]
    if len(core) > 1 and all(rules.fuses(core[0], o) for o in core[1:]):
        rule_ops.append(core[0])
    for c in consumers:
        if c in state.kernel_of:
            continue
        cnode = g.node(c)
        if cnode.op != "identity":
            if not any(rules.fuses(o, cnode.op) for o in rule_ops):
                continue
            if kernel_type_of(ops + (cnode.op,)) == "other":
                continue
        outside = [p for p in g.predecessors(c) if p not in members]
        computed = [p for p in outside if g.node(p).op != "input"]
        if computed and cnode.op in _BINARY and not rules.multi_input_fuses(cnode.op):
            continue
        if outside and state.merge_makes_cycle(kid, c):
            continue
        return c
    return None


def kernel_graph(graph: ModelGraph, kernels: list[Kernel]) -> nx.DiGraph:
    """The DAG between kernels (node = kernel index; edge = a tensor passed between them).

    Raises
    ------
    PartitionError
        If the kernels overlap, miss a non-input node, or form a cycle.
    """
    owner: dict[str, int] = {}
    for i, k in enumerate(kernels):
        for n in k.nodes:
            if n in owner:
                raise PartitionError(f"node {n!r} is in kernels {owner[n]} and {i}")
            owner[n] = i
    missing = [n.name for n in graph.topological_nodes() if n.op != "input" and n.name not in owner]
    if missing:
        raise PartitionError(f"nodes {missing[:5]} are in no kernel")
    kg = nx.DiGraph()
    kg.add_nodes_from(range(len(kernels)))
    for u, v in graph.nx.edges:
        if u in owner and v in owner and owner[u] != owner[v]:
            kg.add_edge(owner[u], owner[v])
    if not nx.is_directed_acyclic_graph(kg):
        raise PartitionError(
            f"kernels of {graph.name!r} form a cycle {nx.find_cycle(kg)}; this is a "
            f"partitioner bug, please report it with the model"
        )
    return kg


def partition(graph: ModelGraph, rules: Any) -> list[Kernel]:
    """Split ``graph`` into kernels according to ``rules``; deterministic.

    Parameters
    ----------
    graph : ModelGraph
        A valid graph; shapes are inferred on a copy when missing.
    rules : FusionRules
        The backend's rules (:func:`nnmeter.fusion.load_rules`), or any object with
        ``fuses``, ``multi_consumer_fuses``, ``multi_input_fuses`` and ``block_fused``.

    Returns
    -------
    list of Kernel
        In a topological order of the kernel graph; graph inputs are in no kernel.

    Raises
    ------
    PartitionError
        If the result would not be a DAG of kernels covering every op (a bug).
    """
    if any(not n.output_shapes for n in graph.topological_nodes()):
        graph = graph.copy().infer_shapes()
    state = _State(graph)
    for block, names in match_blocks(graph):
        if rules.block_fused(block):
            state.new(list(names), block)
    for name in state.order:
        if name in state.kernel_of or graph.node(name).op == "input":
            continue
        kid = state.new([name])
        while True:
            nxt = _next_member(state, kid, rules)
            if nxt is None:
                break
            state.add(kid, nxt)
    kernels = []
    for names, tname in zip(state.members, state.types):
        names_sorted = sorted(names, key=state.pos.__getitem__)
        kernels.append(kernel_from_nodes(graph, names_sorted, tname))
    kg = kernel_graph(graph, kernels)
    first = [state.pos[k.nodes[0]] for k in kernels]
    order = list(nx.lexicographical_topological_sort(kg, key=lambda i: first[i]))
    logger.debug("partitioned %s: %d nodes into %d kernels", graph.name, len(graph),
                 len(order))
    return [kernels[i] for i in order]
