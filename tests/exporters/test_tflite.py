"""Tests of nnmeter.exporters.tflite: IR -> .tflite through tf.function + the converter.

Integration tests run TensorFlow's converter and LiteRT's interpreter on tiny graphs;
they check output shapes (back in NCHW), finite outputs, exact numerics of the
layout-sensitive ops against numpy, names, determinism and int8 quantization.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnmeter.errors import ExportError, UnsupportedOpError
from nnmeter.exporters.tflite import (
    NHWC, SUPPORTED_OPS, _spatial_padding, export_tflite, tensor_layouts, tf_name,
)
from nnmeter.ir import layout
from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.ir.ops import (
    ClipAttrs, GatherAttrs, LRNAttrs, MatMulAttrs, ReduceAttrs, UnknownAttrs,
)


def _run(path, inputs: dict[str, np.ndarray], graph: ModelGraph) -> dict[str, np.ndarray]:
    """Run a .tflite file through its signature; canonical (NCHW) in and out, each rank-4
    input and output converted from the layout the exporter holds it in."""
    from ai_edge_litert.interpreter import Interpreter

    held = tensor_layouts(graph)
    interp = Interpreter(model_path=str(path))
    runner = interp.get_signature_runner()
    feeds = {k: layout_in(v, held.get(Ref(k, 0))) for k, v in inputs.items()}
    outs = runner(**feeds)
    names = {tf_name(r.node if r.port == 0 else f"{r.node}_{r.port}"): r for r in graph.outputs}
    return {k: layout_out(v, held.get(names[k])) for k, v in outs.items()}


def layout_in(x: np.ndarray, held: str | None = NHWC) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(layout.NCHW_TO_NHWC)) if held == NHWC else x


def layout_out(y: np.ndarray, held: str | None = NHWC) -> np.ndarray:
    return y.transpose(layout.NHWC_TO_NCHW) if held == NHWC else y


def _random_inputs(graph: ModelGraph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-1, 1, graph[n].output_shape).astype(np.float32)
            for n in graph.input_names}


# ------------------------------------------------------------------ unit tests (no TF)
def test_tf_name_makes_legal_names():
    assert tf_name("conv_1") == "conv_1"
    assert tf_name("layer1.0/conv:0") == "layer1.0/conv_0"
    assert tf_name("_private") == "n_private"
    assert tf_name("") == "n"


def test_spatial_padding_choices():
    k3, one = (3, 3), (1, 1)
    # symmetric pads, stride 1: same output as SAME
    assert _spatial_padding(28, 28, k3, one, one, (1, 1, 1, 1), (28, 28)) == ("SAME", None)
    # stride 2 with symmetric pads still gives SAME's output size
    assert _spatial_padding(28, 28, k3, (2, 2), one, (1, 1, 1, 1), (14, 14)) == ("SAME", None)
    assert _spatial_padding(28, 28, k3, one, one, (0, 0, 0, 0), (26, 26)) == ("VALID", None)
    pad, explicit = _spatial_padding(28, 28, (3, 3), (1, 1), (1, 1), (2, 2, 2, 2), (30, 30))
    assert pad == "VALID" and explicit == [[0, 0], [2, 2], [2, 2], [0, 0]]
    # ceil_mode pooling: one extra end row/col
    pad, explicit = _spatial_padding(7, 7, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (4, 4))
    assert pad == "SAME" and explicit is None
    pad, explicit = _spatial_padding(8, 8, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), (4, 4))
    assert (pad, explicit) == ("SAME", None)
    pad, explicit = _spatial_padding(9, 9, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), (5, 5))
    assert pad == "SAME"


def test_unsupported_op_names_op_and_node():
    g = ModelGraph("u")
    x = g.add_input("x", (1, 3, 4, 4))
    g.add_node("nms", "unknown", UnknownAttrs(original_type="onnx:NonMaxSuppression"), [x],
               input_shapes=[(1, 3, 4, 4)], output_shapes=[(1, 3, 4, 4)])
    g.set_outputs(["nms"])
    with pytest.raises(UnsupportedOpError, match=r"onnx:NonMaxSuppression.*nms"):
        export_tflite(g, "/nonexistent/never_written.tflite")


def test_bad_quantize_mode_lists_allowed(tmp_path):
    b = GraphBuilder("q", (1, 3, 4, 4))
    g = b.build([b.relu(b.x)])
    with pytest.raises(ExportError, match="allowed"):
        export_tflite(g, tmp_path / "q.tflite", quantize="int4")


def test_every_vocabulary_op_the_zoo_uses_is_supported():
    needed = {"conv", "dwconv", "convtranspose", "fc", "bn", "relu", "relu6", "hswish",
              "hsigmoid", "sigmoid", "swish", "add", "mul", "concat", "split",
              "channelshuffle", "maxpool", "avgpool", "gap", "reshape", "flatten",
              "transpose", "pad", "resize", "softmax", "clip", "sub", "div", "matmul",
              "layernorm", "gelu", "tanh"}
    assert needed <= SUPPORTED_OPS
    assert "unknown" not in SUPPORTED_OPS and "input" not in SUPPORTED_OPS


# ------------------------------------------------------------------ per-op graphs
def _one_op_graphs() -> dict[str, ModelGraph]:
    graphs: dict[str, ModelGraph] = {}

    def new(name, shape=(1, 8, 12, 12)):
        return GraphBuilder(name, shape)

    b = new("conv"); graphs["conv"] = b.build([b.conv(b.x, 16, 3, 2)])
    b = new("conv_grouped"); graphs["conv_grouped"] = b.build([b.conv(b.x, 16, 3, groups=4)])
    b = new("conv_pads"); graphs["conv_pads"] = b.build([b.conv(b.x, 4, 3, pads=(2, 0, 1, 0))])
    b = new("conv_dil"); graphs["conv_dil"] = b.build([b.conv(b.x, 4, 3, dilation=2)])
    b = new("dwconv"); graphs["dwconv"] = b.build([b.dwconv(b.x, 5, 2)])
    b = new("convtranspose"); graphs["convtranspose"] = b.build([b.convtranspose(b.x, 4, 3, 2)])
    b = new("convtranspose_k2")
    graphs["convtranspose_k2"] = b.build([b.convtranspose(b.x, 4, 2, 2)])
    b = new("fc", (2, 20)); graphs["fc"] = b.build([b.fc(b.x, 7)])
    b = new("fc3d", (1, 5, 20)); graphs["fc3d"] = b.build([b.fc(b.x, 7)])
    b = new("bn"); graphs["bn"] = b.build([b.bn(b.x)])
    for act in ("relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish", "gelu", "tanh",
                "leakyrelu"):
        b = new(act); graphs[act] = b.build([b.act(b.x, act)])
    b = new("clip"); graphs["clip"] = b.build([b.clip(b.x, -0.5, 0.5)])
    for op in ("add", "sub", "mul", "div"):
        b = new(op)
        other = b.sigmoid(b.x)  # never zero: div stays finite
        graphs[op] = b.build([b.add(op, [b.x, other])] if op != "add" else [b.add_(b.x, other)])
        b = new(f"{op}_const")
        graphs[f"{op}_const"] = b.build([b.eltwise_const(op, b.x, (8, 1, 1))])
    b = new("mul_bcast"); graphs["mul_bcast"] = b.build([b.mul(b.x, b.sigmoid(b.gap(b.x)))])
    b = new("concat"); graphs["concat"] = b.build([b.concat([b.x, b.relu(b.x)], axis=1)])
    b = new("split"); graphs["split"] = b.build(b.split(b.x, [3, 5]))
    b = new("channelshuffle"); graphs["channelshuffle"] = b.build([b.channelshuffle(b.x, 2)])
    b = new("maxpool"); graphs["maxpool"] = b.build([b.maxpool(b.x, 3, 2, pads=(1, 1, 1, 1))])
    b = new("maxpool_ceil", (1, 8, 13, 13))
    graphs["maxpool_ceil"] = b.build([b.maxpool(b.x, 2, 2, ceil_mode=True)])
    b = new("avgpool"); graphs["avgpool"] = b.build([b.avgpool(b.x, 2)])
    b = new("gap"); graphs["gap"] = b.build([b.gap(b.x, keepdims=False)])
    b = new("reshape"); graphs["reshape"] = b.build([b.reshape(b.x, (1, 8, 144))])
    b = new("flatten"); graphs["flatten"] = b.build([b.flatten(b.x)])
    b = new("transpose"); graphs["transpose"] = b.build([b.transpose(b.x, (0, 2, 3, 1))])
    b = new("pad"); graphs["pad"] = b.build([b.pad(b.x, (0, 0, 1, 2, 0, 0, 3, 4))])
    b = new("resize"); graphs["resize"] = b.build([b.resize(b.x, (24, 24))])
    b = new("resize_linear"); graphs["resize_linear"] = b.build([b.resize(b.x, (6, 6), "linear")])
    b = new("softmax"); graphs["softmax"] = b.build([b.softmax(b.x, axis=1)])
    b = new("layernorm", (1, 5, 16)); graphs["layernorm"] = b.build([b.layernorm(b.x)])
    b = new("matmul", (1, 5, 16))
    xt = b.transpose(b.x, (0, 2, 1))
    graphs["matmul"] = b.build([b.add("matmul", [b.x, xt], MatMulAttrs())])
    b = new("matmul_const", (1, 2, 16, 5))
    graphs["matmul_const"] = b.build([b.add("matmul", [b.x], MatMulAttrs(const_a=(1, 2, 7, 16)))])
    b = new("gather", (1, 2, 6, 20))
    graphs["gather"] = b.build([b.add("gather", [b.x], GatherAttrs(
        axis=3, indices_shape=(1, 2, 6, 6), batch_dims=3))])
    b = new("gather_rows", (1, 30, 16))
    graphs["gather_rows"] = b.build([b.add("gather", [b.x], GatherAttrs(axis=1,
                                                                         indices_shape=(7,)))])
    b = new("reducemean")
    mean_c = ReduceAttrs(axes=(1,), keepdims=True)
    graphs["reducemean"] = b.build([b.add("reducemean", [b.x], mean_c)])
    b = new("lrn"); graphs["lrn"] = b.build([b.add("lrn", [b.x], LRNAttrs(size=5))])
    return graphs


ONE_OP = _one_op_graphs()


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(ONE_OP))
def test_op_exports_runs_and_matches_ir_shapes(tmp_path, case):
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    g = ONE_OP[case]
    path = export_tflite(g, tmp_path / f"{case}.tflite")
    assert path.exists() and path.stat().st_size > 0
    outs = _run(path, _random_inputs(g), g)
    want = {tf_name(r.node if r.port == 0 else f"{r.node}_{r.port}"): g.shape_of(r)
            for r in g.outputs}
    assert {k: v.shape for k, v in outs.items()} == want
    for v in outs.values():
        assert np.isfinite(v).all()


@pytest.mark.integration
def test_layout_sensitive_ops_compute_what_the_ir_says(tmp_path):
    """Weight-free ops: the .tflite output equals numpy on the NCHW data."""
    pytest.importorskip("ai_edge_litert")
    b = GraphBuilder("layout", (1, 4, 3, 5))
    x = b.x
    t = b.transpose(x, (0, 3, 1, 2), name="t")                 # (1, 5, 4, 3)
    f = b.flatten(x, name="f")                                  # (1, 60)
    r = b.reshape(x, (1, 2, 2, 15), name="r")
    parts = b.split(x, [1, 3], axis=1, name="s")
    c = b.concat([parts[1], parts[0]], axis=1, name="c")
    cs = b.channelshuffle(x, 2, name="cs")
    p = b.pad(x, (0, 0, 1, 0, 0, 0, 0, 2), name="p")
    sm = b.softmax(x, axis=1, name="sm")
    g = b.build([t, f, r, c, cs, p, sm])
    xv = np.random.default_rng(1).standard_normal((1, 4, 3, 5)).astype(np.float32)
    out = _run(export_tflite(g, tmp_path / "layout.tflite"), {"input": xv}, g)
    e = np.exp(xv - xv.max(axis=1, keepdims=True))
    ref = {
        "t": xv.transpose(0, 3, 1, 2),
        "f": xv.reshape(1, 60),
        "r": xv.reshape(1, 2, 2, 15),
        "c": np.concatenate([xv[:, 1:], xv[:, :1]], axis=1),
        "cs": xv.reshape(1, 2, 2, 3, 5).transpose(0, 2, 1, 3, 4).reshape(1, 4, 3, 5),
        "p": np.pad(xv, [(0, 0), (0, 0), (1, 0), (0, 2)]),
        "sm": e / e.sum(axis=1, keepdims=True),
    }
    for key, want in ref.items():
        np.testing.assert_allclose(out[key], want, rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.integration
def test_clip_and_constant_operands_are_exact(tmp_path):
    pytest.importorskip("ai_edge_litert")
    b = GraphBuilder("clip", (1, 3, 2, 2))
    y = b.add("clip", [b.x], ClipAttrs(-0.25, 0.5), name="y")
    g = b.build([y])
    xv = np.linspace(-1, 1, 12, dtype=np.float32).reshape(1, 3, 2, 2)
    out = _run(export_tflite(g, tmp_path / "clip.tflite"), {"input": xv}, g)
    np.testing.assert_allclose(out["y"], np.clip(xv, -0.25, 0.5))


@pytest.mark.integration
def test_names_determinism_and_bn_folding(tmp_path):
    pytest.importorskip("ai_edge_litert")
    from nnmeter.frontends.tflite import load_tflite

    b = GraphBuilder("cbr", (1, 8, 16, 16), input_name="image")
    y = b.relu(b.bn(b.conv(b.x, 16, 3, name="conv1"), name="bn1"), name="relu1")
    g = b.build([b.gap(y, name="pool")])
    p1 = export_tflite(g, tmp_path / "a.tflite", seed=0)
    p2 = export_tflite(g, tmp_path / "b.tflite", seed=0)
    p3 = export_tflite(g, tmp_path / "c.tflite", seed=1)
    assert p1.read_bytes() == p2.read_bytes()
    assert p1.read_bytes() != p3.read_bytes()
    back = load_tflite(p1)
    assert back.input_names == ["image"]
    assert [o.node for o in back.outputs] == ["pool"]
    # The converter folds bn into the conv and fuses the relu into it.
    assert back.op_counts() == {"input": 1, "conv": 1, "relu": 1, "gap": 1}
    conv = next(n for n in back.nodes() if n.op == "conv")
    relu = next(n for n in back.nodes() if n.op == "relu")
    assert conv.meta["fused_activation"] == "relu"
    assert relu.meta["fused_into"] == conv.name
    assert relu.name == "relu1"
    assert conv.source["op_type"] == "CONV_2D"


@pytest.mark.integration
def test_int8_export_is_fully_quantized(tmp_path):
    pytest.importorskip("ai_edge_litert")
    from nnmeter.frontends.tflite import load_tflite

    b = GraphBuilder("q", (1, 8, 16, 16))
    y = b.relu(b.bn(b.conv(b.x, 16, 3)))
    y = b.add_(y, b.relu(b.bn(b.conv(y, 16, 3))))
    g = b.build([b.fc(b.gap(y, keepdims=False), 10)])
    path = export_tflite(g, tmp_path / "q.tflite", quantize="int8", representative_samples=4)
    out = _run(path, _random_inputs(g), g)
    (value,) = out.values()
    assert value.shape == (1, 10) and value.dtype == np.float32 and np.isfinite(value).all()
    back = load_tflite(path)
    assert back.dtype == "int8" and back.meta["quantized"]
    originals = sorted(n.attrs.original_type for n in back.unknown_ops())
    assert originals == ["tflite:DEQUANTIZE", "tflite:QUANTIZE"]
    conv = next(n for n in back.nodes() if n.op == "conv")
    wq = conv.meta["weight_quant"]
    assert wq["dtype"] == "int8" and wq["per_channel"] and len(wq["scale"]) == 16
    assert wq["quantized_dimension"] == 0
    relu = next(n for n in back.nodes() if n.op == "relu")
    assert relu.meta["quant"]["dtype"] == "int8"


def test_unsupported_op_setting_raises_before_converting(tmp_path):
    b = GraphBuilder("lrn_even", (1, 4, 3, 3))
    g = b.build([b.add("lrn", [b.x], LRNAttrs(size=4))])
    pytest.importorskip("tensorflow")
    with pytest.raises(UnsupportedOpError, match="odd"):
        export_tflite(g, tmp_path / "lrn.tflite")
    assert not (tmp_path / "lrn.tflite").exists()


# ------------------------------------------------------------------ per-tensor layouts
def _image_attention_image() -> ModelGraph:
    """Weight-free: an image pooled, turned into tokens (as a ViT patch embedding), one
    attention core with 2 heads and an additive rank-4 mask input, and back to an image
    added to the pooled one (as a MobileViT fold)."""
    b = GraphBuilder("img_attn", (1, 8, 4, 6), input_name="image")
    mask = b.input("mask", (1, 2, 6, 6))
    pooled = b.maxpool(b.x, 2, name="pool")                              # (1, 8, 2, 3)
    tokens = b.transpose(b.reshape(pooled, (1, 8, 6), name="flat"), (0, 2, 1),
                         name="to_tokens")                                 # (1, 6, 8)
    q = b.transpose(b.reshape(tokens, (1, 6, 2, 4), name="q_heads"), (0, 2, 1, 3), name="q_t")
    k = b.transpose(b.reshape(b.relu(tokens), (1, 6, 2, 4), name="k_heads"), (0, 2, 3, 1),
                    name="k_t")
    v = b.transpose(b.reshape(b.sigmoid(tokens), (1, 6, 2, 4), name="v_heads"), (0, 2, 1, 3),
                    name="v_t")
    scores = b.add_(b.add("matmul", [q, k], MatMulAttrs(), name="scores"), mask, name="masked")
    probs = b.softmax(scores, -1, name="probs")
    ctx = b.transpose(b.add("matmul", [probs, v], MatMulAttrs(), name="ctx"), (0, 2, 1, 3),
                      name="ctx_t")
    merged = b.reshape(ctx, (1, 6, 8), name="merge")
    back = b.reshape(b.transpose(merged, (0, 2, 1), name="to_channels"), (1, 8, 2, 3),
                     name="fold")
    return b.build([b.relu(b.add_(back, pooled, name="res"), name="out"), probs])


def test_tensor_layouts_keep_attention_tensors_canonical():
    g = _image_attention_image()
    held = tensor_layouts(g)
    nhwc = sorted(r.node for r, v in held.items() if v == NHWC)
    assert nhwc == ["fold", "image", "out", "pool", "res"]
    assert held[Ref("mask", 0)] == held[Ref("probs", 0)] == held[Ref("q_t", 0)] == "NCHW"
    # A CNN holds every rank-4 tensor as NHWC, as before.
    b = GraphBuilder("cnn", (1, 8, 8, 8))
    y = b.relu(b.conv(b.x, 8, 3))
    z = b.concat([b.transpose(y, (0, 1, 3, 2)), b.mul(y, b.sigmoid(b.gap(y)))], axis=1)
    g = b.build([b.softmax(z, 1), b.flatten(b.reshape(y, (1, 16, 4, 8)))])
    assert {r.node: v for r, v in tensor_layouts(g).items() if v != NHWC} == {"reshape_1": "NCHW"}


@pytest.mark.integration
def test_attention_exports_only_its_own_transposes(tmp_path):
    """TRANSPOSE ops in the file: the IR's attention transposes, the patch embedding's
    folded into its reshape, and one conversion where tokens become an image again."""
    pytest.importorskip("ai_edge_litert")
    from nnmeter.frontends._tflite_schema import read_model

    g = _image_attention_image()
    path = export_tflite(g, tmp_path / "attn.tflite")
    ops = [o.op_type for o in read_model(path.read_bytes()).subgraphs[0].operators]
    ir_transposes = g.op_counts()["transpose"]
    assert ops.count("TRANSPOSE") == ir_transposes == 6, ops    # -1 patch, +1 fold
    assert ops.count("RESHAPE") == g.op_counts()["reshape"], ops
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((1, 8, 4, 6)).astype(np.float32)
    mv = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    out = _run(path, {"image": xv, "mask": mv}, g)
    pooled = xv.reshape(1, 8, 2, 2, 3, 2).max(axis=(3, 5))
    t = pooled.reshape(1, 8, 6).transpose(0, 2, 1)
    q, k, v = (a.reshape(1, 6, 2, 4) for a in (t, np.maximum(t, 0), 1 / (1 + np.exp(-t))))
    s = q.transpose(0, 2, 1, 3) @ k.transpose(0, 2, 3, 1) + mv
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    ctx = (p @ v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3).reshape(1, 6, 8)
    back = ctx.transpose(0, 2, 1).reshape(1, 8, 2, 3)
    np.testing.assert_allclose(out["probs"], p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["out"], np.maximum(back + pooled, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.integration
def test_an_export_leaves_no_traced_function_behind(tmp_path):
    """The traced function and its graph (weights as constants) sit in reference cycles;
    an export collects them before returning, or a long run grows by gigabytes."""
    pytest.importorskip("tensorflow")
    import gc

    def traced() -> int:  # the traced graphs still held (collected or not)
        return sum(1 for o in gc.get_objects() if type(o).__name__ == "FuncGraph")

    g = ONE_OP["conv"]
    export_tflite(g, tmp_path / "warm.tflite")  # TensorFlow's own one-time objects
    gc.disable()  # as in a run whose collector is paused: the export must not rely on it
    try:
        before = traced()
        for i in range(3):
            export_tflite(g, tmp_path / f"m{i}.tflite")
        assert traced() == before
    finally:
        gc.enable()


@pytest.mark.integration
def test_large_weights_enter_as_variables_and_the_model_is_the_same(tmp_path, monkeypatch):
    """Weights of VARIABLE_ELEMENTS or more go in as variables (the converter is 5x
    faster and needs far less memory on them); the written model computes the same."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    import nnmeter.exporters.tflite as tfl

    b = GraphBuilder("fcnet", (1, 256))
    g = b.build([b.relu(b.fc(b.fc(b.x, 128), 64))])  # 32768 and 8192 weights
    inputs = _random_inputs(g)
    module_weights = []
    real = tfl._build_function

    def spy(graph, seed):
        out = real(graph, seed)
        module_weights.append(out[3])
        return out

    monkeypatch.setattr(tfl, "_build_function", spy)
    mixed = export_tflite(g, tmp_path / "mixed.tflite")
    assert [tuple(v.shape) for v in module_weights[0].weights] == [(256, 128)]
    monkeypatch.setattr(tfl, "VARIABLE_ELEMENTS", 10 ** 12)  # every weight a constant
    const = export_tflite(g, tmp_path / "const.tflite")
    a, c = _run(mixed, inputs, g), _run(const, inputs, g)
    assert a.keys() == c.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], c[k])
