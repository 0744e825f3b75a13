"""The kernel partitioner: split a ModelGraph into the kernels a backend really runs.

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
     two-branch test of the kernel's op and ``c``'s op decides instead of the pair
     rule where it was tested (``multi_input_decision``: a residual add whose operands
     are both computed can fuse where the pair test, whose second operand is a graph
     input, does not), and otherwise may veto (``multi_input_fuses``); where the
     runtime sums in place (``join_needs_last_reader``), an add whose other operand is
     read after it stays apart; merging never creates a cycle between kernels.
3. Kernels are returned in a topological order of the kernel graph.

Speed: the partitioner reads the graph once into plain dicts (:class:`GraphView`:
positions, nodes, op types, ordered consumers; the insertion order is taken as the
topological order when it is one, which is what the sort would return), memoises every
rules question per rules object (a FusionRules keeps its memo across calls), checks
cycles by a search over the node graph with jumps inside kernels (only at joins, only
when a producer outside the kernel is computed), and orders the kernels by their first
node when that order is topological, else with its own Kahn pass. Models repeat layers,
so a kernel config read off one node (the head of a conv/dwconv/fc/bn/add kernel, the
node of a single-node activation or pooling kernel) is memoised per rules object, keyed
by that node's op, attributes and shapes; equal layers share one config object.
Results are identical to the first, networkx-based implementation (a test compares them
on every zoo base model).

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

import heapq
import logging
from typing import Any

import networkx as nx

from nnmeter.errors import PartitionError
from nnmeter.ir.graph import ModelGraph
from nnmeter.kernels import Kernel, fallback_config, kernel_type_of
from nnmeter.kernels._tail import TailKernelType
from nnmeter.kernels.activation import ActivationKernel
from nnmeter.kernels.base import KERNEL_TYPES
from nnmeter.kernels.pooling import PoolKernel
from nnmeter.partition.blocks import GraphView, match_blocks

__all__ = ["partition", "partition_segment", "match_blocks", "kernel_graph", "GraphView"]

logger = logging.getLogger(__name__)

# kernel types whose config_from_nodes reads a single-node kernel's op, attributes and
# shapes only (exact types: a subclass may read more)
_NODE_LOCAL_TYPES = frozenset((ActivationKernel, PoolKernel))

_BINARY = frozenset(("add", "mul", "concat", "sub", "div", "matmul"))


class _Rules:
    """Memoised lookups of a rules object (the partitioner asks the same few
    questions hundreds of times)."""

    def __init__(self, rules: Any) -> None:
        self.rules = rules
        self._fuses: dict[tuple[str, str], bool] = {}
        self._mc: dict[str, bool] = {}
        self._mi: dict[str, bool] = {}
        self._mid: dict[tuple[str, str], bool | None] = {}
        self._types: dict[tuple[str, ...], str] = {}
        self._ktypes: dict[str, Any] = {}
        self._heads: dict[tuple[str, ...], list[str]] = {}
        self._accepts: dict[tuple[tuple[str, ...], str, bool], bool] = {}
        self._kinds: dict[str, tuple[Any, str | None, bool]] = {}
        self._shared: dict[tuple[str, ...], bool] = {}
        # (type name, op, attrs, input shapes, output shapes) -> config of a
        # single-node kernel of a node-local type
        self._configs: dict[tuple[Any, ...], Any] = {}
        #: joins the runtime fuses into its first eligible operand's kernel
        operand = getattr(rules, "join_operand", None)
        self.join_first = frozenset(
            j for j in ("add",) if operand is not None and operand(j) == "first")
        #: joins the runtime fuses only when nothing reads the other operand after them
        last = getattr(rules, "join_needs_last_reader", None)
        self.join_last_reader = frozenset(
            j for j in ("add",) if last is not None and last(j))

    def fuses(self, a: str, b: str) -> bool:
        key = (a, b)
        hit = self._fuses.get(key)
        if hit is None:
            hit = self._fuses[key] = bool(self.rules.fuses(a, b))
        return hit

    def multi_consumer_fuses(self, op: str) -> bool:
        hit = self._mc.get(op)
        if hit is None:
            hit = self._mc[op] = bool(self.rules.multi_consumer_fuses(op))
        return hit

    def multi_input_fuses(self, op: str) -> bool:
        hit = self._mi.get(op)
        if hit is None:
            hit = self._mi[op] = bool(self.rules.multi_input_fuses(op))
        return hit

    def multi_input_decision(self, branch: str, join: str) -> bool | None:
        key = (branch, join)
        if key not in self._mid:
            ask = getattr(self.rules, "multi_input_decision", None)
            self._mid[key] = None if ask is None else ask(branch, join)
        return self._mid[key]

    def ktype(self, name: str) -> Any:
        hit = self._ktypes.get(name)
        if hit is None:
            hit = self._ktypes[name] = KERNEL_TYPES.get(name)
        return hit

    def kind(self, name: str) -> tuple[Any, str | None, bool]:
        """(KernelType, head op, node-local) of a kernel type name.

        The head op is set for a type whose config is read off its head node alone (a
        TailKernelType that keeps the shared ``config_from_nodes``), else None.
        Node-local: the config of a single-node kernel of the type is a function of that
        node's op, attributes and shapes (the activation and pooling types, whose
        ``config_from_nodes`` read nothing else; a test checks it on every zoo model).
        A tail type's config is its ``head_config`` of the head node, which reads no
        more either."""
        hit = self._kinds.get(name)
        if hit is None:
            ktype = self.ktype(name)
            head = None
            if (isinstance(ktype, TailKernelType)
                    and type(ktype).config_from_nodes is TailKernelType.config_from_nodes):
                head = ktype.family
            hit = self._kinds[name] = (ktype, head, type(ktype) in _NODE_LOCAL_TYPES)
        return hit

    def rule_ops(self, ops: tuple[str, ...], tail_op: str) -> list[str]:
        """Ops whose rules decide what fuses after a kernel of ``ops``: its tail op,
        and its head when every later op fuses into the head (conv-bn -> relu follows
        the conv -> relu rule, since the bn was folded into the conv)."""
        key = ops + (tail_op,)
        hit = self._heads.get(key)
        if hit is None:
            core = [o for o in ops if o != "identity"]
            hit = [tail_op]
            if len(core) > 1 and all(self.fuses(core[0], o) for o in core[1:]):
                hit.append(core[0])
            self._heads[key] = hit
        return hit

    def type_of(self, ops: tuple[str, ...]) -> str:
        hit = self._types.get(ops)
        if hit is None:
            hit = self._types[ops] = kernel_type_of(ops)
        return hit

    def accepts(self, ops: tuple[str, ...], cop: str, computed: bool) -> bool:
        """Whether a kernel of ``ops`` may grow by a non-identity op ``cop``, as far as
        the rules and the kernel-type grammar say (``computed``: ``cop`` also reads a
        tensor computed outside the kernel). Graph structure (cycles) is checked apart."""
        key = (ops, cop, computed)
        hit = self._accepts.get(key)
        if hit is None:
            hit = self._accepts[key] = self._decide(ops, cop, computed)
        return hit

    def _decide(self, ops: tuple[str, ...], cop: str, computed: bool) -> bool:
        rule_ops = self.rule_ops(ops, _rule_tail_op(ops))
        joined = None
        if computed and cop in _BINARY:
            # a join of computed tensors (residual add, concat): the two-branch test
            # of the kernel's op decides where it exists, and can veto otherwise
            for o in rule_ops:
                joined = self.multi_input_decision(o, cop)
                if joined is not None:
                    break
            if joined is None and not self.multi_input_fuses(cop):
                return False
        if joined is False:
            return False
        if not joined and not any(self.fuses(o, cop) for o in rule_ops):
            return False
        return self.type_of(ops + (cop,)) != "other"


# FusionRules are frozen: their memo is kept across calls (bounded; the entry holds
# the rules object so that its id is not reused while the memo lives)
_MEMOS: dict[int, tuple[Any, _Rules]] = {}


def _memo_of(rules: Any) -> _Rules:
    from nnmeter.fusion.rules import FusionRules

    if type(rules) is not FusionRules:
        return _Rules(rules)
    hit = _MEMOS.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]
    if len(_MEMOS) >= 64:
        _MEMOS.clear()
    memo = _Rules(rules)
    _MEMOS[id(rules)] = (rules, memo)
    return memo


class _State:
    """Node → kernel assignment during partitioning."""

    def __init__(self, view: GraphView) -> None:
        self.view = view
        self.kernel_of: dict[str, int] = {}
        self.members: list[list[str]] = []
        self.types: list[str | None] = []
        self.ops: list[tuple[str, ...]] = []  # op types of each kernel's members

    def new(self, names: list[str], type_name: str | None = None) -> int:
        kid = len(self.members)
        self.members.append(list(names))
        self.types.append(type_name)
        op_of = self.view.ops
        self.ops.append(tuple([op_of[n] for n in names]))
        for n in names:
            self.kernel_of[n] = kid
        return kid

    def merge_makes_cycle(self, kid: int, c: str) -> bool:
        """True when putting ``c`` into kernel ``kid`` would close a cycle between
        kernels: some other producer of ``c`` is reachable from the kernel in the graph
        where every kernel is contracted to one vertex (never through ``c`` itself,
        since a producer of ``c`` cannot descend from ``c``)."""
        view, kernel_of = self.view, self.kernel_of
        targets = set()
        for p in view.preds[c]:
            g = kernel_of.get(p, p)
            if g != kid and view.ops[p] != "input":
                targets.add(g)
        if not targets:
            return False
        # search forward from the kernel; entering a kernel at any member reaches all
        # of its members (they are one vertex)
        seen_groups: set[Any] = {kid}
        stack = list(self.members[kid])
        succs = view.succs
        while stack:
            n = stack.pop()
            for s in succs[n]:
                if s == c:
                    continue
                g = kernel_of.get(s, s)
                if g in seen_groups:
                    continue
                if g in targets:
                    return True
                seen_groups.add(g)
                if g == s:
                    stack.append(s)
                else:
                    stack.extend(self.members[g])
        return False


def _rule_tail_op(ops: tuple[str, ...]) -> str:
    """The op whose rules decide what follows a kernel of ``ops``: its last op that is
    not an ``identity`` (the last op when all are)."""
    for op in reversed(ops):
        if op != "identity":
            return op
    return ops[-1]


#: heads of the kernels a runtime that sums in place writes into the other operand
_SUM_HOSTS = frozenset({"conv", "dwconv", "convtranspose"})

#: ops whose kernel can take a residual add of a computed tensor (a convolution, or the
#: batch-norm folded into one)
_JOIN_HOSTS = frozenset({"conv", "dwconv", "convtranspose", "bn"})


def _first_host(producers: list[str], op_of: dict[str, str], succs: dict[str, list[str]],
                output_nodes: set[str]) -> str | None:
    """The first operand's producer that can take the join into its kernel (a
    convolution-like op whose output nothing else reads), None if no operand's can."""
    for p in producers:
        if op_of[p] in _JOIN_HOSTS and len(succs[p]) == 1 and p not in output_nodes:
            return p
    return None


def _grow_kernels(state: _State, rules: _Rules) -> None:
    """Start a kernel at each node not yet in one (graph inputs never are), in
    topological order, and grow it one consumer of its last node at a time while it may
    (see the module docstring)."""
    view = state.view
    multi_output, output_nodes, succs = view.multi_output, view.output_nodes, view.succs
    kernel_of, op_of, preds = state.kernel_of, view.ops, view.preds
    all_ops, all_members, types = state.ops, state.members, state.types
    accepted = rules._accepts
    shared = rules._shared  # kernel ops -> whether the output may feed several readers
    join_first = rules.join_first
    join_last_reader = rules.join_last_reader
    pos = view.pos
    for name in view.order:
        if name in kernel_of or op_of[name] == "input":
            continue
        # state.new([name]) and state.add(kid, c), written out: this loop is the hot path
        kid = len(all_members)
        members = [name]
        all_members.append(members)
        types.append(None)
        all_ops.append((op_of[name],))
        kernel_of[name] = kid
        while True:
            tail = members[-1]
            if tail in multi_output:
                break  # split-like nodes end their kernel
            consumers = succs[tail]
            if not consumers:
                break
            ops = all_ops[kid]
            if len(consumers) > 1 or tail in output_nodes:
                shared_ok = shared.get(ops)
                if shared_ok is None:
                    shared_ok = shared[ops] = rules.multi_consumer_fuses(_rule_tail_op(ops))
                if not shared_ok:
                    break
            for c in consumers:
                if c in kernel_of:
                    continue
                producers = preds[c]
                outside: list[str] = []
                computed = False
                if len(producers) > 1:  # else it reads the tail only
                    # a producer is in this kernel exactly when it is assigned to it
                    for p in producers:
                        if kernel_of.get(p) != kid:
                            outside.append(p)
                            if not computed and op_of[p] != "input":
                                computed = True
                cop = op_of[c]
                if computed and cop in join_first and _first_host(
                        producers, op_of, succs, output_nodes) not in (None, tail):
                    continue  # the runtime fuses it into its first operand's kernel
                if computed and cop in join_last_reader and ops[0] in _SUM_HOSTS and any(
                        p in output_nodes or any(pos[r] > pos[c] for r in succs[p])
                        for p in outside):
                    continue  # an in-place sum would overwrite a tensor read later
                if cop != "identity":
                    ok = accepted.get((ops, cop, computed))  # rules.accepts, memo first
                    if ok is None:
                        ok = rules.accepts(ops, cop, computed)
                    if not ok:
                        continue
                if outside and state.merge_makes_cycle(kid, c):
                    continue
                members.append(c)
                all_ops[kid] += (cop,)
                kernel_of[c] = kid
                break
            else:
                break


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


def _kernel_order(view: GraphView, members: list[list[str]], kernel_of: dict[str, int],
                  graph_name: str) -> list[int]:
    """Kernel indices in topological order of the kernel graph, ties by the position
    of each kernel's first node (a lexicographic Kahn pass).

    Raises
    ------
    PartitionError
        If the kernels form a cycle (a partitioner bug).
    """
    n = len(members)
    pos, succs = view.pos, view.succs
    first = [pos[names[0]] for names in members]  # members are sorted by position
    # When every edge between kernels runs from an earlier first node to a later one,
    # the order of first nodes is topological, and the Kahn pass returns it unchanged
    # (the earliest remaining kernel is always ready). An edge u -> s into the first
    # node of s's kernel always runs forward (u's kernel starts at or before u, which
    # precedes s), so only the producers of later members need a look.
    preds = view.preds
    forward = True
    for kid, names in enumerate(members):
        if len(names) == 1:
            continue
        f = first[kid]
        for name in names[1:]:
            for p in preds[name]:
                t = kernel_of.get(p)  # graph inputs are in no kernel
                if t is not None and first[t] > f:  # so t != kid
                    forward = False
                    break
            if not forward:
                break
        if not forward:
            break
    if forward:
        return sorted(range(n), key=first.__getitem__)
    # Kahn's pass over kernels renumbered by first node (r = rank), so that the heap
    # holds plain ints; an edge repeated between two kernels is counted as often in
    # the in-degree as it is listed, which leaves the order unchanged
    by_first = sorted(range(n), key=first.__getitem__)
    rank_of = [0] * n
    for r, k in enumerate(by_first):
        rank_of[k] = r
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for kid, names in enumerate(members):
        out = succ[rank_of[kid]]
        for name in names:
            for s in succs[name]:
                t = kernel_of[s]
                if t != kid:
                    rt = rank_of[t]
                    out.append(rt)
                    indeg[rt] += 1
    heap = [r for r in range(n) if indeg[r] == 0]  # ascending: already a heap
    order: list[int] = []
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        r = pop(heap)
        order.append(by_first[r])
        for t in succ[r]:
            indeg[t] -= 1
            if indeg[t] == 0:
                push(heap, t)
    if len(order) != n:
        stuck = [members[k][0] for k in range(n) if indeg[rank_of[k]] > 0][:5]
        raise PartitionError(
            f"kernels of {graph_name!r} form a cycle through kernels starting at {stuck}; "
            f"this is a partitioner bug, please report it with the model"
        )
    return order


def _make_kernels(graph: ModelGraph, view: GraphView, state: _State, order: list[int],
                  rules: _Rules) -> list[Kernel]:
    """The Kernel records of ``state``'s kernels, in ``order``. A kernel whose config
    cannot be read becomes an ``other`` kernel.

    Models repeat layers, so the config of a kernel read off one node (the head of a
    tail type, the single node of a node-local type) is memoised per rules object by
    that node's op, attributes and shapes, all that its config may depend on."""
    members, all_ops, types, nodes = state.members, state.ops, state.types, view.nodes
    kinds, known_types, configs = rules._kinds, rules._types, rules._configs
    new = object.__new__
    kernels = []
    for kid in order:
        names, ops = members[kid], all_ops[kid]
        tname = types[kid] or known_types.get(ops) or rules.type_of(ops)
        ktype, head, local = kinds.get(tname) or rules.kind(tname)
        try:
            if head is not None and head in ops:
                # names are in topological order: the first head op in ops is the head
                # TailKernelType.config_from_nodes would pick
                node = nodes[names[ops.index(head)]]
            elif local and len(names) == 1:
                node = nodes[names[0]]
            else:
                node = None
            if node is None:
                config = ktype.config_from_nodes(graph, names)
            else:
                key: tuple[Any, ...] | None = (tname, node.op, node.attrs,
                                               node.input_shapes, node.output_shapes)
                try:
                    config = configs.get(key)
                except TypeError:  # attributes that do not hash: no memo
                    key = config = None
                if config is None:
                    config = (ktype.head_config(node) if head is not None
                              else ktype.config_from_nodes(graph, names))
                    if key is not None:
                        if len(configs) > 16384:
                            configs.clear()
                        configs[key] = config
        except (StopIteration, ValueError, IndexError, AttributeError):
            tname, config = fallback_config(graph, names, ktype)
        # Kernel._fast(tname, tuple(names), ops, config), written out
        kernel = new(Kernel)
        kernel.__dict__.update(type=tname, nodes=tuple(names), ops=ops, config=config)
        kernels.append(kernel)
    return kernels


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
    return _partition(graph, rules)


def partition_segment(graph: ModelGraph, rules: Any, stub: str) -> list[Kernel] | None:
    """The kernels of one segment of a larger graph (:mod:`nnmeter.partition.segments`).

    ``graph`` holds the segment's nodes after ``stub``, a node that stands for the
    producer of the segment's input (its op, attributes and shapes, no inputs). The stub
    is a kernel of its own that never grows, as the producer's kernel in the whole
    graph does not when the cut is safe (:func:`~nnmeter.partition.segments.may_grow_into`
    says), and it is left out of the result. None when a fused block would contain the
    stub (the cut is not one the segments may use).
    """
    return _partition(graph, rules, stub=stub)


def _partition(graph: ModelGraph, rules: Any, stub: str | None = None) -> list[Kernel] | None:
    view = GraphView(graph)
    if not view.shapes_known:
        graph = graph.copy().infer_shapes()
        view = GraphView(graph)
    memo = _memo_of(rules)
    state = _State(view)
    stub_kid = state.new([stub], "stub") if stub is not None else None
    for block, names in match_blocks(graph, view=view):
        if rules.block_fused(block):
            if stub is not None and stub in names:
                return None
            state.new(list(names), block)
    _grow_kernels(state, memo)
    op_of = view.ops
    pos = view.pos
    members = state.members
    ops = state.ops
    for kid, names in enumerate(members):
        if len(names) > 1:
            ordered = sorted(names, key=pos.__getitem__)
            if ordered != names:  # blocks are matched from their anchor
                members[kid] = ordered
                ops[kid] = tuple([op_of[n] for n in ordered])
    order = _kernel_order(view, members, state.kernel_of, graph.name)
    if stub_kid is not None:
        order = [kid for kid in order if kid != stub_kid]
    kernels = _make_kernels(graph, view, state, order, memo)
    logger.debug("partitioned %s: %d nodes into %d kernels", graph.name, len(view.nodes),
                 len(kernels))
    return kernels
