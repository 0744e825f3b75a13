"""Executed nodes mapped back to the ONNX nodes they compute, from runtime names alone."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper as h

from nnmeter.backends._covers import OnnxIndex, assign_covers
from nnmeter.backends.mnn import mnn_covers


@pytest.fixture()
def index(tmp_path):
    """x → conv a → relu ra ─┐
       x → conv b ───────────┴ concat → conv c (grouped) → conv d"""
    w = lambda n, c: h.make_tensor(n, TensorProto.FLOAT, [c, c, 1, 1], [0.0] * c * c)  # noqa: E731
    nodes = [h.make_node("Conv", ["x", "wa"], ["a"], name="a"),
             h.make_node("Relu", ["a"], ["ra"], name="ra"),
             h.make_node("Conv", ["x", "wb"], ["b"], name="b"),
             h.make_node("Concat", ["ra", "b"], ["cat"], name="cat", axis=1),
             h.make_node("Conv", ["cat", "wc"], ["c"], name="c", group=2),
             h.make_node("Conv", ["c", "wd"], ["d"], name="d")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
                     [h.make_tensor_value_info("d", TensorProto.FLOAT, None)],
                     [w("wa", 4), w("wb", 4),
                      h.make_tensor("wc", TensorProto.FLOAT, [8, 4, 1, 1], [0.0] * 32),
                      w("wd", 8)])
    p = tmp_path / "m.onnx"
    onnx.save(h.make_model(g), p)
    return OnnxIndex(p)


def test_openvino_without_biases_names_the_original_conv(index):
    assert index.anchors_of_name("c/WithoutBiases") == {"c"}
    assert index.anchors_of_name("c/ConvFusion/x") == {"c"}
    assert index.anchors_of_name("nothing/WithoutBiases") == set()
    covers = assign_covers(index, [index.anchors_of_name("a/WithoutBiases"), {"ra"}])
    assert covers == [("a",), ("ra",)]


def test_mnn_groups_and_gathering_rasters(index):
    graph = {"tensorName": ["x", "a", "ra", "b", "cat", "c", "d"],
             "oplists": [{"name": "x", "type": "Input", "outputIndexes": [0]},
                         {"name": "a", "type": "Convolution", "outputIndexes": [2]},
                         {"name": "b", "type": "Convolution", "outputIndexes": [3]},
                         {"name": "c", "type": "Convolution", "outputIndexes": [5]},
                         {"name": "d", "type": "Convolution", "outputIndexes": [6]}]}
    order = [("a_raster_0", "Raster"), ("a", "Convolution"), ("b", "Convolution"),
             ("c__group__0_raster_0", "Raster"), ("c__group__0", "Convolution"),
             ("c__group__1_raster_0", "Raster"), ("c__group__1", "Convolution"),
             ("d_raster_0", "Raster"), ("d", "Convolution")]
    covers = mnn_covers(order, graph, index)
    assert covers[0] == ()  # the input's layout conversion computes nothing
    assert covers[1] == ("a", "ra") and covers[2] == ("b",)
    # the first group's raster gathers the concat: the concat is a region copy
    assert set(covers[3]) == {"cat", "c"} and covers[3] == covers[4]
    assert covers[5] == covers[6] == covers[3]
    # d's raster only joins the groups' outputs (nothing of the model to move): nothing
    assert covers[7] == () and covers[8] == ("d",)


def test_mnn_raster_in_front_of_a_conv_takes_the_concat(index):
    graph = {"tensorName": ["x", "a", "ra", "b", "cat", "c", "d"],
             "oplists": [{"name": "a", "type": "Convolution", "outputIndexes": [2]},
                         {"name": "b", "type": "Convolution", "outputIndexes": [3]},
                         {"name": "c", "type": "Convolution", "outputIndexes": [5]},
                         {"name": "d", "type": "Convolution", "outputIndexes": [6]}]}
    order = [("a", "Convolution"), ("b", "Convolution"), ("c_raster_0", "Raster"),
             ("c", "Convolution"), ("d", "Convolution")]
    covers = mnn_covers(order, graph, index)
    assert covers[2] == ("cat",) and covers[3] == ("c",) and covers[4] == ("d",)
    # with no raster in front, the convolution is what reads the concat
    plain = mnn_covers([o for o in order if o[1] != "Raster"], graph, index)
    assert plain[2] == ("cat", "c")
