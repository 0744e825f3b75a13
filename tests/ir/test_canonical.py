"""Canonical passes: each rewrite on a tiny graph, and what each leaves alone."""

from __future__ import annotations

import numpy as np
import pytest

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.canonical import (
    cancel_transposes, canonicalize, clip_as_relu6, drop_identity, fold_constant_affine,
    for_backend, merge_pad_into_conv, split_convs_as_group,
)


def _ops(g):
    return [n.op for n in g.topological_nodes() if n.op != "input"]


def test_fold_per_channel_mul_add_into_conv_sets_bias_and_records_names():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.conv(b.x, 16, bias=False, name="c")
    y = b.eltwise_const("mul", y, (16, 1, 1), name="scale")
    y = b.eltwise_const("add", y, (1, 16, 1, 1), name="shift")
    g = b.build([b.relu(y, name="r")])
    notes = fold_constant_affine(g)
    assert len(notes) == 2
    assert _ops(g) == ["conv", "relu"]
    assert g.node("c").attrs.bias is True
    assert g.node("c").meta["absorbed"] == ["scale", "shift"]
    assert g.node("r").inputs[0].node == "c"
    g.validate()


def test_fold_into_bn_after_conv():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.bn(b.conv(b.x, 8, name="c"), name="bn")
    y = b.eltwise_const("mul", y, (1, 8, 1, 1), name="m")
    g = b.build([b.relu(y)])
    fold_constant_affine(g)
    assert _ops(g) == ["conv", "bn", "relu"]
    assert g.node("bn").meta["absorbed"] == ["m"]


@pytest.mark.parametrize("const_shape", [(1,), (1, 1, 1, 1), (8, 8), (1, 8, 8, 8)])
def test_scalar_and_spatial_constants_stay(const_shape):
    # a scalar "+3" is what the decomposed h-swish is recognised by; a spatial
    # constant is not a scale-shift the weights can take
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.eltwise_const("add", b.conv(b.x, 8, name="c"), const_shape, name="a")
    g = b.build([b.relu(y)])
    assert fold_constant_affine(g) == []
    assert _ops(g) == ["conv", "add", "relu"]


def test_no_fold_when_the_conv_output_has_another_reader():
    b = GraphBuilder("m", (1, 8, 8, 8))
    c = b.conv(b.x, 8, name="c")
    y = b.eltwise_const("mul", c, (1, 8, 1, 1), name="m")
    g = b.build([b.add_(y, c)])
    assert fold_constant_affine(g) == []


def test_no_fold_after_an_op_that_has_no_weights():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.eltwise_const("mul", b.relu(b.x, name="r"), (1, 8, 1, 1), name="m")
    g = b.build([y])
    assert fold_constant_affine(g) == []


def test_drop_identity_keeps_graph_outputs():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.add("identity", [b.conv(b.x, 8, name="c")], name="id1")
    out = b.add("identity", [b.relu(y, name="r")], name="id2")
    g = b.build([out])
    notes = drop_identity(g)
    assert notes == ["removed identity 'id1'"]
    assert _ops(g) == ["conv", "relu", "identity"]
    assert g.node("c").meta["absorbed"] == ["id1"]


def test_merge_zero_pad_into_conv():
    b = GraphBuilder("m", (1, 8, 8, 8))
    p = b.pad(b.x, (0, 0, 1, 2, 0, 0, 1, 2), name="p")
    y = b.conv(p, 8, 3, pads=(0, 0, 0, 0), name="c")
    g = b.build([y])
    before = g.node("c").output_shape
    assert merge_pad_into_conv(g) == ["merged pad 'p' into conv 'c'"]
    assert _ops(g) == ["conv"]
    assert g.node("c").attrs.pads == (1, 2, 1, 2)
    assert g.node("c").input_shapes[0] == (1, 8, 8, 8)
    g.infer_shapes()
    assert g.node("c").output_shape == before
    g.validate()


def test_pad_of_channels_or_into_pooling_stays():
    b = GraphBuilder("m", (1, 8, 8, 8))
    p = b.pad(b.x, (0, 1, 0, 0, 0, 1, 0, 0), name="p")
    g = b.build([b.conv(p, 8, name="c")])
    assert merge_pad_into_conv(g) == []
    b = GraphBuilder("m", (1, 8, 8, 8))
    p = b.pad(b.x, (0, 0, 1, 1, 0, 0, 1, 1), name="p")
    g = b.build([b.maxpool(p, 2)])
    assert merge_pad_into_conv(g) == []


def test_cancel_inverse_transposes_only():
    b = GraphBuilder("m", (1, 8, 4, 6))
    t1 = b.transpose(b.relu(b.x, name="r"), (0, 2, 3, 1), name="t1")
    t2 = b.transpose(t1, (0, 3, 1, 2), name="t2")
    g = b.build([b.relu(t2, name="r2")])
    assert cancel_transposes(g) == ["cancelled transposes 't1' and 't2'"]
    assert _ops(g) == ["relu", "relu"]
    b = GraphBuilder("m", (1, 8, 4, 6))
    t1 = b.transpose(b.relu(b.x), (0, 2, 3, 1), name="t1")
    t2 = b.transpose(t1, (0, 2, 3, 1), name="t2")  # not the inverse
    g = b.build([b.relu(t2)])
    assert cancel_transposes(g) == []


def test_clip_bounds():
    b = GraphBuilder("m", (1, 8, 4, 4))
    y = b.clip(b.clip(b.clip(b.x, 0.0, 6.0, name="c6"), 0.0, float("inf"), name="c0"),
               -1.0, 1.0, name="c1")
    g = b.build([y])
    assert len(clip_as_relu6(g)) == 2
    assert _ops(g) == ["relu6", "relu", "clip"]


def test_canonicalize_records_notes_and_is_idempotent():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.eltwise_const("mul", b.conv(b.x, 8, name="c"), (1, 8, 1, 1), name="m")
    g = b.build([b.add("identity", [b.relu(y, name="r")], name="i"), b.relu(y, name="r2")])
    b2 = GraphBuilder("m", (1, 8, 8, 8))
    y2 = b2.add("identity", [b2.conv(b2.x, 8, name="c")], name="i")
    g = b2.build([b2.relu(y2)])
    notes = canonicalize(g)
    assert g.meta["canonical"] == notes and len(notes) == 1
    assert canonicalize(g) == []


def test_for_backend_folds_scale_shift_on_ort_and_openvino_only_and_copies():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.eltwise_const("mul", b.conv(b.x, 8, name="c"), (1, 8, 1, 1), name="m")
    g = b.build([b.relu(y)])
    for backend in ("mnn-cpu", "litert-cpu"):
        assert for_backend(g, backend) is g
    folded = for_backend(g, "ort-cpu")
    assert folded is not g and _ops(folded) == ["conv", "relu"]
    assert _ops(g) == ["conv", "mul", "relu"]  # the caller's graph is untouched
    assert "absorbed" not in g.node("c").meta
    assert _ops(for_backend(g, "openvino-cpu")) == ["conv", "relu"]
    plain = GraphBuilder("p", (1, 8, 8, 8))
    pg = plain.build([plain.relu(plain.conv(plain.x, 8))])
    assert for_backend(pg, "ort-cpu") is pg


def test_onnx_import_folds_a_tensorflow_style_batch_norm(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from nnmeter.frontends import load_model

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    s = numpy_helper.from_array(rng.standard_normal((4, 1, 1)).astype(np.float32), "s")
    t = numpy_helper.from_array(rng.standard_normal((4, 1, 1)).astype(np.float32), "t")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "s"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "t"], ["a"], name="add"),
             helper.make_node("Identity", ["a"], ["i"], name="ident"),
             helper.make_node("Relu", ["i"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "tfbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        initializer=[w, s, t])
    p = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), p)
    g = load_model(p)
    assert _ops(g) == ["conv", "mul", "add", "relu"]  # identity gone; ORT-only fold left
    ort = for_backend(g, "ort-cpu")
    assert _ops(ort) == ["conv", "relu"]
    assert set(ort.node("conv").meta["absorbed"]) >= {"mul", "add"}
    assert for_backend(g, "mnn-cpu") is g


def test_scale_shift_after_a_standalone_bn_stays():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.bn(b.relu(b.x, name="r"), name="bn")
    y = b.eltwise_const("mul", y, (1, 8, 1, 1), name="m")
    g = b.build([b.relu(y)])
    assert fold_constant_affine(g) == []
    # OpenVINO runs the norm, its scale and the next relu as one element-wise node
    ov = for_backend(g, "openvino-cpu")
    assert _ops(ov) == ["relu", "bn", "relu"]
    assert ov.node("bn").meta["absorbed"] == ["m"]
    assert for_backend(g, "ort-cpu") is g


def _sdpa(scale_after: str | None = None, shared_k: bool = False):
    """q and k (1, 2, 4, 8) / (1, 2, 8, 4), each scaled by a scalar, multiplied, then a
    softmax; optionally a scalar op after the product, or k's scale read twice."""
    b = GraphBuilder("sdpa", (1, 2, 4, 8))
    q = b.eltwise_const("mul", b.relu(b.x, name="q"), (), name="Mul")
    kt = b.transpose(b.relu(b.x, name="k"), (0, 1, 3, 2), name="kT")
    k = b.eltwise_const("mul", kt, (), name="Mul_1")
    s = b.add("matmul", [q, k], name="MatMul")
    if scale_after:
        s = b.eltwise_const(scale_after, s, (1, 1, 1, 1), name="after")
    outs = [b.softmax(s, name="p")]
    if shared_k:
        outs.append(b.relu(k, name="other_reader"))
    return b.build(outs)


def test_scalar_scales_of_a_matmuls_inputs_move_to_its_output_on_ort_only():
    from nnmeter.fusion.rules import FusionRules
    from nnmeter.partition import partition

    g = _sdpa()
    for backend in ("mnn-cpu", "litert-cpu", "openvino-cpu"):
        assert for_backend(g, backend) is g
    ort = for_backend(g, "ort-cpu")
    assert _ops(g).count("mul") == 2  # the caller's graph is untouched
    assert _ops(ort) == ["relu", "relu", "transpose", "matmul", "mul", "softmax"]
    assert ort.node("MatMul/scale").meta["absorbed"] == ["Mul", "Mul_1"]
    assert ort.node("p").inputs[0].node == "MatMul/scale"
    assert any("moved scalar 'Mul', 'Mul_1'" in line for line in ort.meta["canonical"])
    rules = FusionRules.from_decisions("ort-cpu", pairs={("matmul", "mul"): True})
    assert [k.type for k in partition(ort, rules) if "MatMul" in k.nodes] == ["matmul-scale"]


def test_a_scale_already_after_the_matmul_takes_the_moved_ones():
    ort = for_backend(_sdpa(scale_after="div"), "ort-cpu")
    assert _ops(ort) == ["relu", "relu", "transpose", "matmul", "div", "softmax"]
    assert ort.node("after").meta["absorbed"] == ["Mul", "Mul_1"]


def test_a_scale_read_by_another_op_stays_before_the_matmul():
    ort = for_backend(_sdpa(shared_k=True), "ort-cpu")
    assert ort.node("MatMul").inputs[1].node == "Mul_1"
    assert ort.node("MatMul/scale").meta["absorbed"] == ["Mul"]


def _mixconv(kernels=(1, 1), sizes=(4, 4), dw=False, extra_reader=False):
    b = GraphBuilder("mix", (1, sum(sizes), 8, 8))
    parts = b.split(b.x, sizes, name="s")
    convs = []
    for i, (p, k) in enumerate(zip(parts, kernels)):
        if dw:
            convs.append(b.dwconv(p, kernel=k, name=f"c{i}"))
        else:
            convs.append(b.conv(p, 6, kernel=k, name=f"c{i}"))
    y = b.relu(b.bn(b.concat(convs, name="cat"), name="n"), name="r")
    outs = [y, convs[0]] if extra_reader else [y]
    return b.build(outs)


def test_split_convs_concat_is_one_grouped_conv_on_openvino():
    g = _mixconv(kernels=(1, 1, 1), sizes=(4, 4, 4))
    ov = for_backend(g, "openvino-cpu")
    assert _ops(ov) == ["conv", "bn", "relu"]
    c = ov.node("c0")
    assert (c.attrs.groups, c.attrs.out_channels, c.input_shape) == (3, 18, (1, 12, 8, 8))
    assert sorted(c.meta["absorbed"]) == ["c1", "c2", "cat", "s"]
    # FLOPs are the three parts' together
    assert ov.cost().flops == g.cost().flops
    assert for_backend(g, "ort-cpu") is g and for_backend(g, "mnn-cpu") is g


@pytest.mark.parametrize("kw", [dict(kernels=(1, 3)), dict(sizes=(4, 8)), dict(dw=True),
                                dict(extra_reader=True)])
def test_split_convs_that_openvino_runs_apart_stay(kw):
    g = _mixconv(**kw)
    assert split_convs_as_group(g.copy()) == []


@pytest.mark.parametrize("groups,dropped", [(1, True), (2, False)])
def test_a_shuffle_of_one_group_is_dropped_on_openvino(groups, dropped):
    b = GraphBuilder("shuffle", (1, 8, 4, 4))
    y = b.reshape(b.relu(b.x, name="r"), (1, groups, 8 // groups, 4, 4), name="r1")
    y = b.reshape(b.transpose(y, (0, 2, 1, 3, 4), name="t"), (1, 8, 4, 4), name="r2")
    g = b.build([b.dwconv(y, 3, name="dw")])
    ov = for_backend(g, "openvino-cpu")
    if dropped:
        assert _ops(ov) == ["relu", "dwconv"]
        assert ov.node("dw").meta["absorbed"] == ["r1", "t", "r2"]
    else:
        assert ov is g  # a real shuffle stays
    assert for_backend(g, "ort-cpu") is g  # ORT runs all three ops


def test_rewrite_candidates_are_per_backend():
    from nnmeter.ir.canonical import _rewrite_candidate

    mix = _mixconv(kernels=(1, 1), sizes=(4, 4))
    # a split read by convolutions only: OpenVINO may merge them, nobody else rewrites it
    assert _rewrite_candidate(mix, "openvino-cpu")
    assert not _rewrite_candidate(mix, "ort-cpu") and not _rewrite_candidate(mix, "mnn-cpu")
    assert not _rewrite_candidate(mix, "litert-cpu")
    assert _rewrite_candidate(mix)  # some backend would
