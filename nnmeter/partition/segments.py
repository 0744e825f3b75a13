"""Cut points: where a graph is a chain of segments joined by one tensor each.

Most CNNs are chains of blocks joined at single tensors (a NASBench-201 network: the
stem, 15 cells in 3 stages, 2 reduction blocks and the head), and models of one search
space share most of those blocks. A predictor that works segment by segment
(:mod:`nnmeter.predictors.segments`) partitions each distinct segment once.

A *cut* after node ``P`` (at position ``i`` of the insertion order) splits the graph
into the nodes up to ``i`` and those after when:

- the insertion order is topological (every input is inserted before its reader, and
  the insertion ranks grow, which is when the partitioner takes it as its order);
- ``P``'s output is the only tensor read on both sides: no other node up to ``i``
  (graph inputs included) is read after ``i``, and ``P`` is read after ``i`` only;
- ``P`` has one output port and is no graph output;
- ``P`` cannot be inside a fused block with a node after it: every multi-op block of
  :mod:`nnmeter.partition.blocks` reads its inner nodes once (so ``P`` with several
  readers is safe) and its single-input chain nodes and its inner ``mul`` take one
  input or are a ``mul`` (so ``P`` with several inputs that is no ``mul`` is safe);
- the kernel that ends at ``P`` does not grow into a reader of ``P``
  (:func:`may_grow_into`, checked once the segment before is partitioned).

The segment after a cut is partitioned with a *stub* in place of ``P``
(:func:`nnmeter.partition.partition_segment`): a node with ``P``'s op, attributes and
shapes, in a kernel of its own. Every question the partitioner asks inside the segment
(is a producer computed, which operand of a join hosts it, does a kernel close a cycle)
then gets the answer it gets in the whole graph, so the segments' kernels, in segment
order, are the kernels of the whole graph (a test compares them on zoo models).

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> b = GraphBuilder("m", (1, 8, 8, 8))
>>> y = b.relu(b.x, name="r")
>>> g = b.build([b.add_(b.conv(y, 8, name="c1"), b.conv(y, 8, name="c2"), name="a")])
>>> seg = Segmenter().split(g)
>>> [seg.nodes[i].name for i in seg.cuts]
['r']
"""

from __future__ import annotations

from typing import Any

from nnmeter.ir.graph import ModelGraph, Node

__all__ = ["Segmenter", "Split", "may_grow_into"]


class Split:
    """One graph read for segmenting: its nodes in insertion order, the positions of
    its cut candidates (``cuts``, ascending), one signature per node (``sigs``: op,
    attribute code, input shapes, output shapes, and its inputs as distance back and
    port, flat), and the graph outputs as (position, port)."""

    __slots__ = ("nodes", "cuts", "sigs", "outputs")

    def __init__(self, nodes: list[Node], cuts: list[int], sigs: list[tuple[Any, ...]],
                 outputs: list[tuple[int, int]]) -> None:
        self.nodes = nodes
        self.cuts = cuts
        self.sigs = sigs
        self.outputs = outputs

    def key(self, start: int, end: int) -> tuple[Any, ...]:
        """A key of nodes ``start..end`` (inclusive) and the stub before them: equal
        keys, equal segments (ops, attributes, shapes, wiring, outputs), whatever the
        node names."""
        outs = tuple((p - start, port) for p, port in self.outputs if start <= p <= end)
        stub = self.sigs[start - 1][:4] if start else None
        return (stub, tuple(self.sigs[start:end + 1]), outs)


class Segmenter:
    """Reads graphs into :class:`Split` s. Attribute records are compared by value
    through small integer codes (an equal record gets the code of the first one seen),
    looked up by identity first: the layers of a stage share one record.

    The codes are only meaningful to keys made by the same Segmenter; :meth:`clear`
    forgets them (and a caller that kept keys must forget those too)."""

    def __init__(self) -> None:
        # id(attrs) -> (attrs, code); the entry holds the record so its id stays its own
        self._by_id: dict[int, tuple[Any, int]] = {}
        self._by_value: dict[Any, int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def clear(self) -> None:
        self._by_id.clear()
        self._by_value.clear()

    def split(self, graph: ModelGraph) -> Split | None:
        """The cut candidates of ``graph``; None when its insertion order is not the
        partitioner's order, a node has no shapes, or an attribute record does not
        hash (no segments: partition it whole)."""
        data = graph.nx._node
        succ_of = graph.nx._succ
        by_id, by_value = self._by_id, self._by_value
        pos: dict[str, int] = {}
        nodes: list[Node] = []
        sigs: list[tuple[Any, ...]] = []
        last: list[int] = []  # position of the last reader (-1: none)
        add_node, add_sig, add_last = nodes.append, sigs.append, last.append
        last_rank = -1
        j = 0
        try:
            for d in data.values():
                node = d["node"]
                rank = d["order"]
                if rank <= last_rank or not node.output_shapes:
                    return None
                last_rank = rank
                ins = node.inputs
                if len(ins) == 1:
                    r = ins[0]
                    p = pos[r.node]
                    last[p] = j
                    rel: tuple[Any, ...] = (j - p, r.port)
                else:
                    wires: list[int] = []
                    for r in ins:
                        p = pos[r.node]
                        last[p] = j
                        wires += (j - p, r.port)
                    rel = tuple(wires)
                attrs = node.attrs
                hit = by_id.get(id(attrs))
                if hit is None or hit[0] is not attrs:
                    # a record's class and field values (hashed in C; a field left out
                    # of its equality only makes equal records look different)
                    fields = getattr(attrs, "__dict__", None)
                    value = attrs if fields is None else (type(attrs), *fields.values())
                    code = by_value.get(value)
                    if code is None:
                        code = by_value[value] = len(by_value)
                    hit = by_id[id(attrs)] = (attrs, code)
                add_sig((node.op, hit[1], node.input_shapes, node.output_shapes, rel))
                add_node(node)
                add_last(-1)
                pos[node.name] = j
                j += 1
        except (KeyError, TypeError):  # an input not inserted yet; attributes that do not hash
            return None
        n = j
        outputs = []
        for ref in graph.outputs:
            p = pos.get(ref.node)
            if p is None:
                return None
            outputs.append((p, ref.port))
            last[p] = n  # read after every cut
        closes = [0] * (n + 1)
        for p, at in enumerate(last):
            if at > p:
                closes[at] += 1
        cuts = []
        live = 0
        for i in range(n - 1):
            live -= closes[i]
            at = last[i]
            if at > i:
                live += 1
                if live == 1 and at < n:
                    node = nodes[i]
                    if len(node.output_shapes) == 1 and node.op != "input" and (
                            len(succ_of[node.name]) > 1
                            or (len(node.inputs) > 1 and node.op != "mul")):
                        cuts.append(i)
        return Split(nodes, cuts, sigs, outputs)


def may_grow_into(rules: Any, exit_ops: tuple[str, ...], graph: ModelGraph, stub: str) -> bool:
    """Whether a kernel of ``exit_ops`` ending at the producer that ``stub`` stands for
    could take one of its readers in ``graph`` (a segment graph made for
    :func:`nnmeter.partition.partition_segment`) when the whole graph is partitioned:
    the growth test of the partitioner, leaving out what can only stop a growth (the
    cycle check, a join its first operand hosts). False means the cut is safe."""
    from nnmeter.partition import _memo_of, _rule_tail_op

    memo = _memo_of(rules)
    readers = list(graph.nx._succ[stub])  # in insertion order, as the partitioner reads
    if not readers:
        return False
    if len(readers) > 1 and not memo.multi_consumer_fuses(_rule_tail_op(exit_ops)):
        return False
    data = graph.nx._node
    for c in readers:
        node = data[c]["node"]
        if node.op == "identity":
            return True
        computed = any(r.node != stub and data[r.node]["node"].op != "input"
                       for r in node.inputs)
        if memo.accepts(exit_ops, node.op, computed):
            return True
    return False
