"""Tests of the ONNX exporter: round trip through the frontend, onnxruntime, determinism."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from nnmeter.errors import ExportError, UnsupportedOpError
from nnmeter.exporters import export
from nnmeter.exporters.onnx import export_onnx
from nnmeter.frontends.onnx import load_onnx
from nnmeter.ir import GraphBuilder, ModelGraph
from nnmeter.ir.ops import (
    GatherAttrs, LRNAttrs, MatMulAttrs, NoAttrs, ReduceAttrs, UnknownAttrs,
)


def every_op_graph() -> ModelGraph:
    """A small graph holding every vocabulary op the exporter writes (not identity,
    which the frontend removes, and not unknown)."""
    b = GraphBuilder("every_op", (1, 8, 16, 16))
    y = b.conv(b.x, 16, 3, 2, name="c1")
    y = b.bn(y, name="bn1")
    y = b.relu6(y, name="r6")
    y = b.dwconv(y, 3, name="dw")
    y = b.hswish(y, name="hs")
    y = b.conv(y, 16, 1, groups=4, bias=False, name="gconv")
    y = b.relu(y, name="relu")
    y = b.channelshuffle(y, 4, name="cs")
    a, c = b.split(y, [8, 8], name="sp")
    a = b.swish(a, name="sw")
    c = b.hsigmoid(c, name="hsg")
    y = b.concat([a, c], name="cat")
    y = b.act(y, "leakyrelu", name="lr")
    y = b.act(y, "gelu", name="ge")
    y = b.act(y, "tanh", name="th")
    y = b.act(y, "sigmoid", name="sg")
    y = b.clip(y, -1.0, 2.0, name="cl")
    y = b.eltwise_const("mul", y, (16, 1, 1), name="mc")
    y = b.eltwise_const("div", y, (1,), name="dc")
    y = b.eltwise_const("add", y, (1, 16, 1, 1), name="ac")
    y = b.eltwise_const("sub", y, (1,), name="sc")
    y = b.add_(y, y, name="ad")
    y = b.mul(y, y, name="mu")
    y = b.maxpool(y, 3, 2, pads=(1, 1, 1, 1), name="mp")
    y = b.avgpool(y, 2, 1, ceil_mode=True, name="ap")
    y = b.pad(y, (0, 0, 1, 1, 0, 0, 1, 1), name="pd")
    y = b.resize(y, (12, 12), name="rs")
    y = b.convtranspose(y, 8, 3, 2, name="ct")
    y = b.add("lrn", [y], LRNAttrs(size=3), name="lrn")
    head = b.gap(y, name="gp")
    head = b.flatten(head, name="fl")
    head = b.fc(head, 10, name="fc")
    head = b.softmax(head, name="sm")
    t = b.reshape(y, (1, 8, 24 * 24), name="rsh")
    t = b.transpose(t, (0, 2, 1), name="tr")
    t = b.fc(t, 16, name="fc3d")
    t = b.layernorm(t, name="ln")
    t2 = b.transpose(t, (0, 2, 1), name="tr2")
    m = b.add("matmul", [t, t2], MatMulAttrs(), name="mm")
    m = b.add("reducemean", [m], ReduceAttrs(axes=(1,), keepdims=False), name="rm")
    g2 = b.gap(y, keepdims=False, name="gp2")
    # a constant times an activation, then a per-row and a shared gather
    mc = b.add("matmul", [t2], MatMulAttrs(const_a=(1, 4, 16)), name="mmc")
    per_row = b.add("gather", [mc], GatherAttrs(axis=2, indices_shape=(1, 4, 8), batch_dims=2),
                    name="ga")
    shared = b.add("gather", [t], GatherAttrs(axis=1, indices_shape=(5,)), name="gs")
    return b.build([head, m, g2, per_row, shared])


def test_every_op_graph_covers_the_exportable_vocabulary():
    from nnmeter.ir.ops import OPS

    covered = set(every_op_graph().op_counts())
    assert OPS - covered == {"identity", "unknown"}


@pytest.mark.parametrize("opset", [17, 18, 21])
def test_round_trip_is_structurally_equal(tmp_path, opset):
    g = every_op_graph()
    path = export_onnx(g, tmp_path / "m.onnx", opset=opset)
    back = load_onnx(path)
    assert back.unknown_ops() == []
    assert back.structurally_equal(g)


def test_names_and_declared_outputs(tmp_path):
    g = every_op_graph()
    model = onnx.load(str(export_onnx(g, tmp_path / "m.onnx")))
    names = {n.name for n in model.graph.node}
    assert {n.name for n in g.nodes() if n.op != "input"} <= names
    assert [i.name for i in model.graph.input] == g.input_names
    declared = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim)
                for o in model.graph.output]
    assert declared == [g.shape_of(r) for r in g.outputs]


@pytest.mark.integration
def test_export_runs_in_onnxruntime_with_matching_shapes(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    g = every_op_graph()
    path = export_onnx(g, tmp_path / "m.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype(np.float32)
    outs = sess.run(None, {"input": x})
    assert [o.shape for o in outs] == [g.shape_of(r) for r in g.outputs]
    assert all(np.isfinite(o).all() for o in outs)


def test_weights_are_deterministic_per_seed(tmp_path):
    g = every_op_graph()
    a = export_onnx(g, tmp_path / "a.onnx", seed=3).read_bytes()
    b = export_onnx(g, tmp_path / "b.onnx", seed=3).read_bytes()
    c = export_onnx(g, tmp_path / "c.onnx", seed=4).read_bytes()
    assert a == b and a != c
    inits = {i.name: onnx.numpy_helper.to_array(i)
             for i in onnx.load(str(tmp_path / "a.onnx")).graph.initializer}
    assert (inits["bn1/var"] > 0).all()
    assert np.abs(inits["c1/weight"]).max() < 1.0


def test_unknown_op_is_refused_by_name(tmp_path):
    g = ModelGraph("u")
    g.add_input("x", (1, 4))
    g.add_node("weird", "unknown", UnknownAttrs(original_type="onnx:Elu"), ["x"],
               input_shapes=[(1, 4)], output_shapes=[(1, 4)])
    g.set_outputs(["weird"])
    with pytest.raises(UnsupportedOpError, match="weird.*onnx:Elu"):
        export_onnx(g, tmp_path / "u.onnx")


def test_gelu_exports_as_one_op_from_opset_20(tmp_path):
    b = GraphBuilder("g", (1, 4))
    g = b.build([b.add("gelu", [b.x], NoAttrs(), name="ge")])
    model = onnx.load(str(export_onnx(g, tmp_path / "g.onnx", opset=20)))
    assert [n.op_type for n in model.graph.node] == ["Gelu"]
    assert load_onnx(tmp_path / "g.onnx").structurally_equal(g)


def test_old_opset_is_refused_and_dispatcher_checks_format(tmp_path):
    g = GraphBuilder("r", (1, 4)).build()
    with pytest.raises(ExportError, match="opset"):
        export_onnx(g.copy(), tmp_path / "r.onnx", opset=9)
    with pytest.raises(ExportError, match="onnx"):
        export(g, tmp_path / "r.bin", "caffe")


def test_dispatcher_writes_onnx(tmp_path):
    b = GraphBuilder("r", (1, 4))
    g = b.build([b.relu(b.x, name="r")])
    path = export(g, tmp_path / "sub" / "r.onnx", "onnx", seed=1)
    assert path.exists() and load_onnx(path).structurally_equal(g)
