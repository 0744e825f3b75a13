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

from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.kernels.naming import block_type_of

__all__ = ["match_blocks"]


def _private(graph: ModelGraph, name: str) -> bool:
    """True when ``name`` has one consumer node, one output port, and is no graph output."""
    node = graph.node(name)
    return (len(graph.successors(name)) == 1 and len(node.output_shapes) <= 1
            and not any(o.node == name for o in graph.outputs))


def _producer(graph: ModelGraph, ref: Ref) -> Node:
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


def match_blocks(graph: ModelGraph) -> list[tuple[str, tuple[str, ...]]]:
    """Every non-overlapping block match, in topological order of the first node.

    ``se`` is matched first (it contains a gap and may contain an h-sigmoid), then
    h-swish/h-sigmoid, channel shuffle and gap+flatten.
    """
    nodes = graph.topological_nodes()
    taken: set[str] = set()
    found: list[tuple[str, tuple[str, ...]]] = []

    def keep(name: str, names: tuple[str, ...]) -> None:
        if not taken.intersection(names):
            taken.update(names)
            found.append((name, names))

    for n in nodes:
        m = _match_se(graph, n)
        if m:
            keep("se", m)
    for n in nodes:
        hm = _match_hswish(graph, n)
        if hm:
            keep(*hm)
    for n in nodes:
        m = _match_shuffle(graph, n)
        if m:
            keep("channelshuffle", m)
    for n in nodes:
        m = _match_gap(graph, n)
        if m:
            keep("gap", m)
    pos = {n.name: i for i, n in enumerate(nodes)}
    found.sort(key=lambda item: pos[item[1][0]])
    return found


