"""Tests of ModelGraph: building, reading, editing, copying, subgraphs."""

from __future__ import annotations

import pytest

from nnmeter.errors import GraphValidationError, InputNameError
from nnmeter.ir import GraphBuilder, ModelGraph, Ref
from nnmeter.ir.graph import as_ref
from nnmeter.ir.ops import ConcatAttrs, ConvAttrs, NoAttrs


def _chain() -> ModelGraph:
    g = ModelGraph("chain")
    x = g.add_input("x", (1, 4, 8, 8))
    g.add_node("a", "relu", inputs=[x])
    g.add_node("b", "sigmoid", inputs=["a"])
    g.add_node("cat", "concat", ConcatAttrs(axis=1), inputs=["b", "a"])
    g.set_outputs(["cat"])
    return g.infer_shapes()


def test_refs_and_coercion():
    assert as_ref("n") == Ref("n", 0)
    assert as_ref(("n", 2)) == Ref("n", 2)
    assert str(Ref("n", 2)) == "n#2" and str(Ref("n")) == "n"
    with pytest.raises(TypeError):
        as_ref(3.5)


def test_input_order_is_kept_and_topological_order_is_deterministic():
    g = _chain()
    assert g["cat"].inputs == (Ref("b"), Ref("a"))
    assert g.topological_order() == ["x", "a", "b", "cat"]
    assert list(g) == ["x", "a", "b", "cat"]
    assert g.input_names == ["x"] and len(g) == 4 and "a" in g
    assert g.successors("a") == ["b", "cat"] and g.predecessors("cat") == ["b", "a"]
    assert g.consumers(Ref("a")) == ["b", "cat"]
    assert g.op_counts() == {"input": 1, "relu": 1, "sigmoid": 1, "concat": 1}
    assert g["cat"].output_shape == (1, 8, 8, 8)


def test_add_node_rejects_bad_requests():
    g = ModelGraph()
    g.add_input("x", (1, 4))
    with pytest.raises(GraphValidationError, match="already exists"):
        g.add_input("x", (1, 4))
    with pytest.raises(GraphValidationError, match="not in the vocabulary"):
        g.add_node("y", "frobnicate", inputs=["x"])
    with pytest.raises(GraphValidationError, match="takes ConvAttrs"):
        g.add_node("y", "conv", NoAttrs(), inputs=["x"])
    with pytest.raises(GraphValidationError, match="needs attributes"):
        g.add_node("y", "conv", inputs=["x"])
    with pytest.raises(GraphValidationError, match="does not exist"):
        g.add_node("y", "relu", inputs=["ghost"])
    with pytest.raises(InputNameError, match="ghost"):
        g.set_outputs(["ghost"])
    with pytest.raises(InputNameError, match="no node named"):
        g.node("ghost")


def test_replace_rewires_edges():
    g = _chain()
    g.replace("cat", inputs=["a", "a"])
    assert g.predecessors("cat") == ["a"] and g.successors("b") == []
    with pytest.raises(GraphValidationError, match="takes ConvAttrs"):
        g.replace("a", op="conv")
    g.replace("a", op="conv", attrs=ConvAttrs(out_channels=4))
    assert g["a"].op == "conv"


def test_bypass_and_remove():
    g = _chain()
    with pytest.raises(GraphValidationError, match="still read"):
        g.remove("b")
    g.bypass("b")
    assert "b" not in g and g["cat"].inputs == (Ref("a"), Ref("a"))
    with pytest.raises(GraphValidationError, match="2 inputs"):
        g.bypass("cat")
    g.set_outputs(["a"])
    g.remove("cat")
    assert g.topological_order() == ["x", "a"]


def test_bypass_of_an_output_moves_the_output():
    g = _chain()
    g.set_outputs(["b"])
    g.remove("cat")
    g.bypass("b")
    assert g.outputs == [Ref("a")]


def test_copy_is_independent():
    g = _chain()
    c = g.copy("other")
    c.bypass("b")
    assert "b" in g and "b" not in c and c.name == "other"
    assert g.structurally_equal(_chain())
    assert not g.structurally_equal(c)


def test_subgraph_turns_outside_tensors_into_inputs():
    b = GraphBuilder("m", (1, 4, 8, 8))
    y = b.conv(b.x, 8, name="c1")
    y = b.relu(y, name="r1")
    y = b.conv(y, 8, name="c2")
    g = b.build([y])
    sub = g.subgraph(["r1", "c2"])
    assert sub.input_names == ["in_0"]
    assert sub["in_0"].output_shape == (1, 8, 8, 8)
    assert sub["r1"].inputs == (Ref("in_0"),)
    assert sub.outputs == [Ref("c2")]
    sub.validate()


def test_cycle_is_reported_by_topological_order():
    g = ModelGraph("cyc")
    g.add_input("x", (1, 4))
    g.add_node("a", "relu", inputs=["x"])
    g.add_node("b", "relu", inputs=["a"])
    g.nx.add_edge("b", "a")
    with pytest.raises(GraphValidationError, match="cycle"):
        g.topological_order()


def test_unknown_ops_listed():
    from nnmeter.ir.ops import UnknownAttrs

    g = ModelGraph()
    g.add_input("x", (1, 4))
    g.add_node("u", "unknown", UnknownAttrs("onnx:Elu"), ["x"], output_shapes=[(1, 4)])
    assert [n.name for n in g.unknown_ops()] == ["u"]
