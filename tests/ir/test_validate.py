"""Tests of the validator: each lint finding, and a clean graph."""

from __future__ import annotations

import dataclasses

import pytest

from nnmeter.errors import GraphValidationError
from nnmeter.ir import GraphBuilder, ModelGraph, lint, validate
from nnmeter.ir.ops import ConvAttrs, NoAttrs


def _ok() -> ModelGraph:
    b = GraphBuilder("ok", (1, 3, 8, 8))
    return b.build([b.relu(b.conv(b.x, 4, name="c"), name="r")])


def test_clean_graph_has_no_findings():
    assert lint(_ok()) == []
    validate(_ok())


def test_empty_graph():
    assert "no nodes" in lint(ModelGraph("e"))[0]


def test_cycle():
    g = _ok()
    g.nx.add_edge("r", "c")
    (msg,) = lint(g)
    assert "cycle" in msg and "DAG" in msg


def test_disconnected():
    g = _ok()
    g.add_input("y", (1, 4))
    g.add_node("lonely", "relu", None, ["y"], input_shapes=[(1, 4)], output_shapes=[(1, 4)])
    assert any("disconnected" in p for p in lint(g))


def test_missing_inputs_and_outputs():
    g = ModelGraph("noin")
    g.add_node("r", "relu", NoAttrs(), output_shapes=[(1, 4)])
    problems = lint(g)
    assert any("no input node" in p for p in problems)
    assert any("declares no outputs" in p for p in problems)
    assert any("reads no tensor" in p for p in problems)


def test_missing_shapes():
    g = ModelGraph()
    g.add_input("x", (1, 4))
    g.add_node("r", "relu", None, ["x"])
    g.set_outputs(["r"])
    assert any("no output shape" in p and "infer_shapes" in p for p in lint(g))


def test_wrong_recorded_shapes():
    g = _ok()
    g.replace("r", output_shapes=((1, 4, 9, 9),))
    assert any("differ from inferred" in p for p in lint(g))
    g = _ok()
    g.replace("r", input_shapes=((1, 5, 8, 8),))
    assert any("recorded input shapes" in p for p in lint(g))


def test_non_positive_dimension_and_bad_port():
    g = _ok()
    g.replace("r", output_shapes=((1, 0, 8, 8),))
    assert any("zero-size dimension" in p and "not a dynamic one" in p for p in lint(g))
    g.replace("r", output_shapes=((1, -1, 8, 8),))
    assert any("negative dimension" in p for p in lint(g))
    g = _ok()
    g.replace("r", inputs=[("c", 3)])
    assert any("port 3" in p for p in lint(g))


def test_spatial_op_needs_rank_4():
    g = ModelGraph()
    g.add_input("x", (1, 3, 8))
    g.add_node("c", "conv", ConvAttrs(4), ["x"], input_shapes=[(1, 3, 8)],
               output_shapes=[(1, 4, 8, 8)])
    g.set_outputs(["c"])
    assert any("not rank-4 NCHW" in p for p in lint(g))


def test_wrong_attrs_type_is_reported():
    g = _ok()
    node = g["r"]
    import dataclasses

    g.nx.nodes["r"]["node"] = dataclasses.replace(node, attrs=ConvAttrs(4))
    assert any("attrs are ConvAttrs" in p for p in lint(g))


def test_shape_inference_failure_is_a_finding():
    g = _ok()
    g.replace("c", attrs=ConvAttrs(4, groups=2))
    assert any("shape inference fails" in p for p in lint(g))


def test_validate_raises_with_every_problem():
    g = ModelGraph("bad")
    g.add_node("r", "relu", NoAttrs(), output_shapes=[(1, 4)])
    with pytest.raises(GraphValidationError) as info:
        validate(g)
    assert len(info.value.problems) >= 3
    assert "'bad' is invalid" in str(info.value)


@pytest.mark.parametrize("field, value, message", [
    ("kernel", (0, 3), "kernel=[0, 3] must be at least 1"),
    ("stride", (1, 0), "stride=[1, 0] must be at least 1"),
    ("groups", 0, "groups=0 must be at least 1"),
    ("out_channels", -4, "out_channels=-4 must be at least 1"),
    ("pads", (0, -1, 0, 0), "pads=[0, -1, 0, 0] must not be negative"),
])
def test_attribute_ranges(field, value, message):
    g = ModelGraph("t")
    g.add_input("x", (1, 3, 8, 8))
    attrs = dataclasses.replace(ConvAttrs(out_channels=4), **{field: value})
    g.add_node("c", "conv", attrs, ["x"], input_shapes=[(1, 3, 8, 8)],
               output_shapes=[(1, 4, 8, 8)])
    g.set_outputs(["c"])
    assert any(message in p for p in lint(g)), lint(g)


def test_a_pad_op_may_crop():
    from nnmeter.ir.ops import PadAttrs
    from nnmeter.ir.validate import attr_problems

    assert attr_problems("pad", PadAttrs(pads=(0, 0, -1, -1, 0, 0, 0, 0))) == []
