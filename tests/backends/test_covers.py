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


def _onnx(tmp_path, nodes, inits, out):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
                     [h.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    p = tmp_path / "m.onnx"
    onnx.save(h.make_model(g), p)
    return OnnxIndex(p)


def _w(name, c):
    return h.make_tensor(name, TensorProto.FLOAT, [c, c, 1, 1], [0.0] * c * c)


def test_mnn_a_move_belongs_to_the_raster_that_made_it(tmp_path):
    """DenseNet: c1 = cat(x, a); c2 = cat(c1, b) -- a raster gathers each concat in front
    of the op that reads it, and MNN copies c2 from the sources again: each raster
    computes its own concat, the convolutions none."""
    index = _onnx(tmp_path, [
        h.make_node("Conv", ["x", "wa"], ["a"], name="a"),
        h.make_node("Concat", ["x", "a"], ["c1"], name="c1", axis=1),
        h.make_node("Conv", ["c1", "wb"], ["b"], name="b"),
        h.make_node("Concat", ["c1", "b"], ["c2"], name="c2", axis=1),
        h.make_node("Conv", ["c2", "wd"], ["d"], name="d"),
        h.make_node("Conv", ["c2", "we"], ["e"], name="e")],
        [_w("wa", 4), h.make_tensor("wb", TensorProto.FLOAT, [4, 8, 1, 1], [0.0] * 32),
         h.make_tensor("wd", TensorProto.FLOAT, [4, 12, 1, 1], [0.0] * 48),
         h.make_tensor("we", TensorProto.FLOAT, [4, 12, 1, 1], [0.0] * 48)], "e")
    graph = {"tensorName": ["x", "a", "b", "d", "e"],
             "oplists": [{"name": n, "type": "Convolution", "outputIndexes": [i]}
                         for i, n in enumerate("abde", start=1)]}
    order = [("a", "Convolution"), ("b_raster_0", "Raster"), ("b", "Convolution"),
             ("d_raster_0", "Raster"), ("d", "Convolution"), ("e", "Convolution")]
    covers = mnn_covers(order, graph, index)
    assert covers == [("a",), ("c1",), ("b",), ("c2",), ("d",), ("e",)]


def test_mnn_a_gemm_run_as_a_convolution(tmp_path):
    """x → pool → flatten → Gemm → Relu → Gemm: MNN runs each Gemm as a convolution
    between reshapes and layout conversions of its own, the Relu inside the first."""
    index = _onnx(tmp_path, [
        h.make_node("GlobalAveragePool", ["x"], ["p"], name="pool"),
        h.make_node("Flatten", ["p"], ["f"], name="flat"),
        h.make_node("Gemm", ["f", "w1"], ["g1"], name="fc1", transB=1),
        h.make_node("Relu", ["g1"], ["r1"], name="relu1"),
        h.make_node("Gemm", ["r1", "w2"], ["out"], name="fc2", transB=1)],
        [h.make_tensor("w1", TensorProto.FLOAT, [4, 4], [0.0] * 16),
         h.make_tensor("w2", TensorProto.FLOAT, [4, 4], [0.0] * 16)], "out")
    names = ["x", "p", "f", "R1", "ct1", "g1", "r1", "R2", "out__matmul_converted", "ct2", "out"]
    t = {n: i for i, n in enumerate(names)}

    def op(name, typ, ins, outs):
        return {"name": name, "type": typ, "inputIndexes": [t[i] for i in ins],
                "outputIndexes": [t[o] for o in outs]}
    graph = {"tensorName": names, "oplists": [
        op("p", "Pooling", ["x"], ["p"]),
        op("f", "Reshape", ["p"], ["f"]),
        op("R1", "Reshape", ["f"], ["R1"]),
        op("g1__matmul_converted", "Convolution", ["R1"], ["ct1"]),  # relu taken in
        op("ct1", "ConvertTensor", ["ct1"], ["g1"]),
        op("g1", "Reshape", ["g1"], ["r1"]),
        op("R2", "Reshape", ["r1"], ["R2"]),
        op("out__matmul_converted", "Convolution", ["R2"], ["out__matmul_converted"]),
        op("ct2", "ConvertTensor", ["out__matmul_converted"], ["ct2"]),
        op("out", "Reshape", ["ct2"], ["out"])]}
    order = [("p", "Pooling"), ("g1__matmul_converted_raster_0", "Raster"),
             ("g1__matmul_converted", "Convolution"),
             ("out__matmul_converted_raster_0", "Raster"),
             ("out__matmul_converted", "Convolution"), ("out_raster_0", "Raster")]
    covers = mnn_covers(order, graph, index)
    assert covers[0] == ("pool",)
    assert covers[1] == ("flat",)  # the flatten is the raster's copy, not the pool's
    assert covers[2] == ("fc1", "relu1")
    assert covers[3] == ()
    assert covers[4] == covers[5] == ("fc2",)  # the output reshape: the same op again


def test_mnn_the_conversion_in_front_of_a_reshape_does_the_reshape(tmp_path):
    index = _onnx(tmp_path, [
        h.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        h.make_node("Reshape", ["c", "s"], ["y"], name="resh")],
        [_w("w", 4), h.make_tensor("s", TensorProto.INT64, [2], [1, 64])], "y")
    graph = {"tensorName": ["x", "c", "c__before_tr", "y"], "oplists": [
        {"name": "conv", "type": "Convolution", "inputIndexes": [0], "outputIndexes": [1]},
        {"name": "resh__before_tr", "type": "ConvertTensor", "inputIndexes": [1],
         "outputIndexes": [2]},
        {"name": "resh", "type": "Reshape", "inputIndexes": [2], "outputIndexes": [3]}]}
    order = [("conv", "Convolution"), ("resh__before_tr_raster_0", "Raster")]
    assert mnn_covers(order, graph, index) == [("conv",), ("resh",)]
    # in front of an op that runs under its own name it only converts the layout
    order = [("conv", "Convolution"), ("resh__before_tr_raster_0", "Raster"),
             ("resh", "Softmax")]
    graph["oplists"][2]["type"] = "Softmax"
    assert mnn_covers(order, graph, index)[1] == ()
