"""Cut points (nnmeter.partition.segments) and the partition of one segment."""

from __future__ import annotations

from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.partition import partition, partition_segment
from nnmeter.partition.segments import Segmenter, may_grow_into

RULES = FusionRules.from_decisions("t", pairs={("conv", "bn"): True, ("bn", "relu"): True,
                                               ("conv", "relu"): True})


def _two_blocks():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.add_(b.conv(b.x, 8, name="c1"), b.conv(b.x, 8, name="c2"), name="a1")
    y = b.add_(b.relu(y, name="r1"), b.avgpool(y, 3, 1, pads=(1, 1, 1, 1), name="p1"),
               name="a2")
    return b.build([b.conv(y, 8, name="c3")])


def test_cuts_are_single_tensor_joins():
    g = _two_blocks()
    split = Segmenter().split(g)
    assert [split.nodes[i].name for i in split.cuts] == ["a1", "a2"]


def test_equal_segments_have_equal_keys_whatever_their_names():
    s = Segmenter()
    one, two = s.split(_two_blocks()), s.split(_two_blocks())
    assert one.key(4, 6) == two.key(4, 6)
    assert one.key(4, 6) != one.key(1, 3)


def test_a_cut_inside_a_fused_chain_is_refused():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.add_(b.conv(b.x, 8, name="c1"), b.conv(b.x, 8, name="c2"), name="a1")
    g = b.build([b.relu(y, name="r"), b.conv(y, 8, name="c3")])
    kernels = partition(g, RULES)
    assert [k.type for k in kernels] == ["conv", "conv", "add", "relu", "conv"]
    # a segment after a1 with a stub for it: the stub is no kernel of the result
    from nnmeter.ir.graph import ModelGraph, Node

    sub = ModelGraph("s")
    a1 = g.node("a1")
    sub._insert(Node("a1", a1.op, a1.attrs, (), a1.input_shapes, a1.output_shapes))
    for name in ("r", "c3"):
        sub._insert(g.node(name))
    got = partition_segment(sub, RULES, "a1")
    assert [k.nodes for k in got] == [("r",), ("c3",)]
    assert not may_grow_into(RULES, ("add",), sub, "a1")
    # with a single reader, a conv kernel ending at the cut would take the relu
    one = ModelGraph("s")
    one._insert(Node("a1", a1.op, a1.attrs, (), a1.input_shapes, a1.output_shapes))
    one._insert(g.node("r"))
    assert may_grow_into(RULES, ("conv",), one, "a1")
    assert not may_grow_into(RULES, ("add",), one, "a1")
