"""Tests of GraphBuilder."""

from __future__ import annotations

import pytest

from nnmeter.errors import ShapeInferenceError
from nnmeter.ir import GraphBuilder, Ref
from nnmeter.ir.builder import same_pads


def test_same_pads():
    assert same_pads(3) == (1, 1, 1, 1)
    assert same_pads((1, 5)) == (0, 2, 0, 2)
    assert same_pads(3, dilation=2) == (2, 2, 2, 2)
    assert same_pads(2) == (0, 0, 1, 1)


def test_shapes_follow_each_call_and_names_are_generated():
    b = GraphBuilder("m", (1, 16, 28, 28))
    y = b.conv(b.x, 32, 3, 2)
    assert y == Ref("conv_1") and b.shape(y) == (1, 32, 14, 14)
    y = b.bn(y)
    y = b.relu(y)
    z = b.conv(y, 32, 1)
    assert z.node == "conv_2"
    s = b.se(z, name="se")
    assert b.shape(s) == (1, 32, 14, 14)
    assert b.graph["se_fc1"].attrs.out_channels == 8
    g = b.build()
    assert g.outputs == [Ref("se_mul")]
    assert g.lint() == []


def test_split_returns_one_ref_per_part_and_dwconv_uses_channels():
    b = GraphBuilder("s", (1, 6, 8, 8))
    parts = b.split(b.x, [2, 4])
    assert parts == [Ref("split_1", 0), Ref("split_1", 1)]
    d = b.dwconv(parts[1], 5, 2)
    node = b.graph[d.node]
    assert node.attrs.groups == 4 and node.attrs.pads == (2, 2, 2, 2)
    assert node.output_shape == (1, 4, 4, 4)
    g = b.build(parts[:1] + [d])
    assert len(g.outputs) == 2


def test_convtranspose_doubles_resolution():
    b = GraphBuilder("t", (1, 8, 7, 7))
    assert b.shape(b.convtranspose(b.x, 4, 3, 2)) == (1, 4, 14, 14)
    assert b.shape(b.convtranspose(b.x, 4, 4, 2)) == (1, 4, 14, 14)


def test_more_inputs_and_explicit_names():
    b = GraphBuilder("two", None)
    assert b.x is None
    x = b.input("a", (1, 4))
    y = b.input("b", (1, 4))
    s = b.add_(x, y, name="sum")
    g = b.build([s])
    assert g.input_names == ["a", "b"] and g["sum"].output_shape == (1, 4)


def test_bad_call_raises_at_once():
    b = GraphBuilder("bad", (1, 3, 8, 8))
    with pytest.raises(ShapeInferenceError):
        b.reshape(b.x, (5, 5), name="r")
    assert "r" not in b.graph  # nothing half-built is left behind
