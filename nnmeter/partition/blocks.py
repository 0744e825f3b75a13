"""Subgraph matchers for the multi-op blocks the partitioner groups before pairwise
fusion: squeeze-excite (``se``), decomposed h-swish / h-sigmoid, decomposed channel
shuffle, and global pooling followed by flatten (``gap``).

Each matcher returns ``(block_name, node_names)`` tuples; interior nodes of a match are
read only inside the block, so grouping them never hides a tensor another node needs.

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> b = GraphBuilder("m", (1, 16, 8, 8))
>>> g = b.build([b.se(b.x, name="se")])
>>> match_blocks(g)
[('se', ('se_gap', 'se_fc1', 'se_act', 'se_fc2', 'se_gate', 'se_mul'))]
"""

from __future__ import annotations

import heapq

from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.kernels.naming import block_type_of

__all__ = ["match_blocks", "GraphView"]


class GraphView:
    """A read-only snapshot of a ModelGraph in plain dicts, for fast passes.

    One topological sort; ``order`` (names), ``pos`` (name → index in ``order``),
    ``nodes`` (name → Node), ``succs`` (name → consumer names in insertion order, like
    :meth:`ModelGraph.successors`), ``preds`` (name → distinct producers in input order,
    like :meth:`ModelGraph.predecessors`), ``ops`` (name → op type), ``multi_output``
    (names of nodes with several output ports), ``shapes_known`` (every node has its
    output shapes) and ``output_nodes`` (names of nodes whose
    output is a graph output). Never mutate the graph while a view of it is in use.
    """

    __slots__ = ("graph", "order", "pos", "nodes", "succs", "preds", "output_nodes", "ops",
                 "multi_output", "shapes_known")

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        # networkx's node and adjacency dicts, read directly: the views cost more than
        # the work
        data = graph.nx._node
        succ_of, pred_of = graph.nx._succ, graph.nx._pred
        nodes: dict[str, Node] = {}
        self.nodes = nodes
        # The order is the Kahn pass with ties by insertion order that
        # ModelGraph.topological_order gives (networkx's lexicographical_topological_sort
        # keyed the same way). When the insertion order is itself topological (graphs are
        # mostly built producer first), that pass returns it unchanged: the earliest
        # remaining node is always ready. So it is checked first, in the same loop that
        # reads the inputs (the graph's edges are exactly its nodes' inputs).
        pos: dict[str, int] = {}
        preds: dict[str, list[str]] = {}
        ops: dict[str, str] = {}
        multi_output: set[str] = set()
        in_order = True
        shapes_known = True
        last_rank = None
        for n, d in data.items():
            node = nodes[n] = d["node"]
            ops[n] = node.op
            n_out = len(node.output_shapes)
            if n_out != 1:
                if n_out > 1:
                    multi_output.add(n)
                else:
                    shapes_known = False
            ins = node.inputs
            if len(ins) == 1:
                src = ins[0].node
                preds[n] = [src]
                if in_order and src not in pos:
                    in_order = False
            else:
                seen: list[str] = []
                for ref in ins:
                    if ref.node not in seen:
                        seen.append(ref.node)
                        if ref.node not in pos:  # a producer not yet placed
                            in_order = False
                preds[n] = seen
            if in_order:
                rank = d["order"]
                if last_rank is not None and rank <= last_rank:
                    in_order = False
                last_rank = rank
                pos[n] = len(pos)
        if in_order:
            order: list[str] = list(nodes)
        else:
            order = self._kahn(graph, data, succ_of, pred_of)
            pos = {n: i for i, n in enumerate(order)}
        if hasattr(graph, "_topo"):
            graph._topo = tuple(order)
        self.order = order
        self.pos = pos
        # consumers by insertion rank (which pos follows when the insertion order is
        # topological)
        succs: dict[str, list[str]] = {}
        for n in order:
            out = succ_of[n]
            if len(out) > 1:
                if in_order:
                    succs[n] = sorted(out, key=pos.__getitem__)
                else:
                    succs[n] = sorted(out, key=lambda m: data[m]["order"])
            else:
                succs[n] = list(out)
        self.succs = succs
        self.preds = preds
        self.ops = ops  # name -> op type
        self.multi_output = frozenset(multi_output)  # nodes with several output ports
        self.shapes_known = shapes_known  # every node has its output shapes
        self.output_nodes = frozenset(o.node for o in graph.outputs)

    @staticmethod
    def _kahn(graph: ModelGraph, data: dict, succ_of: dict, pred_of: dict) -> list[str]:
        """Kahn's pass, ties by insertion rank; the graph's own cycle error on a cycle."""
        cached = getattr(graph, "_topo", None)
        if cached is not None and len(cached) == len(data):
            return list(cached)  # the graph already knows its order
        rank = {n: d["order"] for n, d in data.items()}
        indeg = {n: len(pred_of[n]) for n in rank}
        heap = [(rank[n], n) for n, d in indeg.items() if d == 0]
        heapq.heapify(heap)
        order: list[str] = []
        while heap:
            _, n = heapq.heappop(heap)
            order.append(n)
            for s in succ_of[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (rank[s], s))
        if len(order) != len(rank):
            return graph.topological_order()  # raises the graph's cycle error
        return order

    # ModelGraph-like reading API used by the block matchers
    def node(self, name: str) -> Node:
        return self.nodes[name]

    def successors(self, name: str) -> list[str]:
        return self.succs[name]

    def topological_nodes(self) -> list[Node]:
        return [self.nodes[n] for n in self.order]

    @property
    def outputs(self) -> list[Ref]:
        return self.graph.outputs


def _private(graph: "ModelGraph | GraphView", name: str) -> bool:
    """True when ``name`` has one consumer node, one output port, and is no graph output."""
    node = graph.node(name)
    if len(graph.successors(name)) != 1 or len(node.output_shapes) > 1:
        return False
    if isinstance(graph, GraphView):
        return name not in graph.output_nodes
    return not any(o.node == name for o in graph.outputs)


def _producer(graph: "ModelGraph | GraphView", ref: Ref) -> Node:
    return graph.node(ref.node)


def _is_const(node: Node, op: str | tuple[str, ...]) -> bool:
    ops = (op,) if isinstance(op, str) else op
    return node.op in ops and getattr(node.attrs, "const_shape", None) is not None


def _match_se(graph: ModelGraph, mul: Node) -> tuple[str, ...] | None:
    if mul.op != "mul" or len(mul.inputs) != 2:
        return None
    for gate_i in (1, 0):
        x_ref = mul.inputs[1 - gate_i]
        chain: list[str] = []
        cur = _producer(graph, mul.inputs[gate_i])
        while len(chain) < 10:
            if cur.op == "input" or not _private(graph, cur.name) or len(cur.inputs) != 1:
                break
            chain.append(cur.name)
            if cur.op == "gap":
                break
            cur = _producer(graph, cur.inputs[0])
        if not chain or graph.node(chain[-1]).op != "gap":
            continue
        gap = graph.node(chain[-1])
        if gap.inputs[0] != x_ref:
            continue
        names = tuple(reversed(chain)) + (mul.name,)
        if block_type_of([graph.node(n).op for n in names]) == "se":
            return names
    return None


def _match_hswish(graph: ModelGraph, node: Node) -> tuple[str, tuple[str, ...]] | None:
    """h-swish x*relu6(x+3)/6 (either order of the last two) or h-sigmoid relu6(x+3)/6,
    matched from the ``add(+3)`` node."""
    if not _is_const(node, "add") or not _private(graph, node.name):
        return None
    x_ref = node.inputs[0]
    r = graph.node(graph.successors(node.name)[0])
    if r.op not in ("relu6", "clip") or not _private(graph, r.name):
        return None
    nxt = graph.node(graph.successors(r.name)[0])
    if nxt.op == "mul" and len(nxt.inputs) == 2 and x_ref in nxt.inputs:
        # x * relu6(x+3), then /6
        if _private(graph, nxt.name):
            d = graph.node(graph.successors(nxt.name)[0])
            if _is_const(d, ("div", "mul")):
                return "hswish", (node.name, r.name, nxt.name, d.name)
        return None
    if _is_const(nxt, ("div", "mul")):
        if _private(graph, nxt.name):
            m = graph.node(graph.successors(nxt.name)[0])
            if m.op == "mul" and len(m.inputs) == 2 and x_ref in m.inputs:
                return "hswish", (node.name, r.name, nxt.name, m.name)
        return "hsigmoid", (node.name, r.name, nxt.name)
    return None


def _match_shuffle(graph: ModelGraph, node: Node) -> tuple[str, ...] | None:
    if node.op != "reshape" or len(node.output_shape) != 5 or not _private(graph, node.name):
        return None
    t = graph.node(graph.successors(node.name)[0])
    if t.op != "transpose" or tuple(t.attrs.perm) != (0, 2, 1, 3, 4) or not _private(graph, t.name):
        return None
    r = graph.node(graph.successors(t.name)[0])
    if r.op != "reshape" or len(r.output_shape) != 4:
        return None
    return node.name, t.name, r.name


def _match_gap(graph: ModelGraph, node: Node) -> tuple[str, ...] | None:
    if node.op != "gap" or not _private(graph, node.name):
        return None
    nxt = graph.node(graph.successors(node.name)[0])
    if nxt.op in ("flatten", "reshape") and len(nxt.output_shape) == 2:
        return node.name, nxt.name
    return None


# ops a block match can start from (its anchor): se from its mul, h-swish/h-sigmoid from
# the add(+3), channel shuffle from the first reshape, gap+flatten from the gap
_ANCHORS = frozenset(("mul", "add", "reshape", "gap"))


def match_blocks(graph: ModelGraph, *,
                 view: GraphView | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """Every non-overlapping block match, in topological order of the first node.

    ``se`` is matched first (it contains a gap and may contain an h-sigmoid), then
    h-swish/h-sigmoid, channel shuffle and gap+flatten. ``view`` (a :class:`GraphView`
    of ``graph``) saves re-reading the graph.
    """
    if view is None:
        view = GraphView(graph)
    graph = view  # type: ignore[assignment]  # the matchers only read
    op_of, all_nodes = view.ops, view.nodes
    nodes = [all_nodes[n] for n in view.order if op_of[n] in _ANCHORS]
    # each matcher rejects any other op at once; it only sees the ops it starts from
    muls = [n for n in nodes if n.op == "mul"]
    adds = [n for n in nodes if n.op == "add"]
    reshapes = [n for n in nodes if n.op == "reshape"]
    gaps = [n for n in nodes if n.op == "gap"]
    taken: set[str] = set()
    found: list[tuple[str, tuple[str, ...]]] = []

    def keep(name: str, names: tuple[str, ...]) -> None:
        if not taken.intersection(names):
            taken.update(names)
            found.append((name, names))

    for n in muls:
        m = _match_se(graph, n)
        if m:
            keep("se", m)
    for n in adds:
        hm = _match_hswish(graph, n)
        if hm:
            keep(*hm)
    for n in reshapes:
        m = _match_shuffle(graph, n)
        if m:
            keep("channelshuffle", m)
    for n in gaps:
        m = _match_gap(graph, n)
        if m:
            keep("gap", m)
    pos = view.pos
    found.sort(key=lambda item: pos[item[1][0]])
    return found


