"""Tests of nnmeter.frontends.tflite (and its flatbuffer reader).

Unit tests need no runtime: bad files, the hand-written schema tables. Integration
tests make real .tflite files with TensorFlow's converter (through the IR exporter or
tf.function directly) and check the IR the frontend reads back.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from nnmeter.errors import DynamicShapeError, InputNameError, ModelLoadError, NNMeterError
from nnmeter.frontends import _tflite_schema as S
from nnmeter.frontends.tflite import load_tflite, tf_same_pads
from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.ops import ReduceAttrs


# ------------------------------------------------------------------ unit tests
def test_schema_tables_match_litert_generated_schema():
    gen = pytest.importorskip("ai_edge_litert.schema_py_generated")
    codes = {v: k for k, v in vars(gen.BuiltinOperator).items() if not k.startswith("_")}
    for code, name in enumerate(S.BUILTIN_OPS):
        assert codes[code] == name
    types = {v: k for k, v in vars(gen.TensorType).items() if not k.startswith("_")}
    for code, name in enumerate(S.TENSOR_TYPES):
        assert types[code].lower() == name
    acts = {v: k for k, v in vars(gen.ActivationFunctionType).items() if not k.startswith("_")}
    for code, name in enumerate(S.ACTIVATIONS):
        assert acts[code].lower() == name
    assert S.builtin_name(10_000) == "BUILTIN_10000"


def test_tf_same_pads():
    assert tf_same_pads(28, 3, 1) == (1, 1)
    assert tf_same_pads(28, 3, 2) == (0, 1)
    assert tf_same_pads(7, 1, 2) == (0, 0)
    assert tf_same_pads(10, 3, 1, dilation=2) == (2, 2)


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="no .tflite file"):
        load_tflite(tmp_path / "nope.tflite")


@pytest.mark.parametrize("data", [b"", b"TFL3", b"hello world, not a model at all",
                                  b"\x10\x00\x00\x00TFL3" + b"\xff" * 8])
def test_not_a_flatbuffer_is_model_load_error(tmp_path, data):
    p = tmp_path / "bad.tflite"
    p.write_bytes(data)
    with pytest.raises(ModelLoadError, match="not a valid .tflite model"):
        load_tflite(p)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tf():
    pytest.importorskip("ai_edge_litert")
    pytest.importorskip("tensorflow")
    from nnmeter.exporters.tflite import _tf

    return _tf()


@pytest.fixture(scope="module")
def mobile_block(tf, tmp_path_factory):
    """An IR block covering the common TFLite ops, exported to .tflite once."""
    from nnmeter.exporters.tflite import export_tflite

    b = GraphBuilder("mobile", (1, 8, 16, 16), input_name="image")
    x = b.relu(b.bn(b.conv(b.x, 16, 3, 2, name="stem")), name="stem_relu")
    y = b.relu6(b.bn(b.dwconv(x, 3)), name="dw_relu6")
    y = b.hswish(b.conv(y, 16, 1, name="pw"), name="hs")
    y = b.add_(x, y, name="res")
    c = b.concat([y, x], axis=1, name="cat")
    s0, s1 = b.split(c, [8, 24], name="sp")
    p = b.pad(s1, (0, 0, 1, 0, 0, 0, 1, 0), name="padded")
    t = b.transpose(s0, (0, 1, 3, 2), name="tr")
    r = b.resize(t, (16, 16), name="up")
    m = b.add("reducemean", [p], ReduceAttrs(axes=(1,), keepdims=True), name="cmean")
    pool = b.maxpool(s1, 2, name="mp")
    avg = b.avgpool(pool, 2, name="ap")
    gp = b.gap(avg, keepdims=False, name="gp")
    logits = b.softmax(b.fc(gp, 10, name="head"), name="prob")
    sig = b.sigmoid(r, name="sig")
    g = b.build([logits, sig, m])
    path = tmp_path_factory.mktemp("tfl") / "mobile.tflite"
    export_tflite(g, path)
    return g, path


# ------------------------------------------------------------------ integration tests
@pytest.mark.integration
def test_ops_map_onto_the_vocabulary(mobile_block):
    ir, path = mobile_block
    g = load_tflite(path)
    counts = g.op_counts()
    for op in ("conv", "dwconv", "relu", "relu6", "hswish", "add", "concat", "split", "pad",
               "transpose", "resize", "reducemean", "maxpool", "avgpool", "gap", "fc",
               "softmax", "sigmoid"):
        assert counts.get(op, 0) >= 1, (op, counts)
    assert "bn" not in counts                       # folded into the convs by the converter
    assert not g.unknown_ops()
    assert g.input_names == ["image"]
    assert {o.node for o in g.outputs} == {"prob", "sig", "cmean"}
    # Output shapes are canonical NCHW and equal the IR's.
    for ref in ir.outputs:
        assert g[ref.node].output_shape == ir.shape_of(ref)
    for n in g.nodes():
        assert n.source["framework"] == "tflite"
        if n.op != "input":
            assert n.source["op_type"] and isinstance(n.source["index"], int)


@pytest.mark.integration
def test_layout_dependent_attributes_are_canonical(mobile_block):
    _, path = mobile_block
    g = load_tflite(path)
    by_op = {}
    for n in g.nodes():
        by_op.setdefault(n.op, []).append(n)
    assert by_op["concat"][0].attrs.axis == 1
    assert by_op["split"][0].attrs.axis == 1 and by_op["split"][0].attrs.sizes == (8, 24)
    assert by_op["pad"][0].attrs.pads == (0, 0, 1, 0, 0, 0, 1, 0)
    assert by_op["transpose"][0].attrs.perm == (0, 1, 3, 2)
    assert by_op["reducemean"][0].attrs.axes == (1,)
    gap = by_op["gap"][0]
    assert gap.attrs.keepdims is False and gap.output_shape == (1, 24)
    stem = next(n for n in by_op["conv"] if n.attrs.stride == (2, 2))
    assert stem.attrs.kernel == (3, 3) and stem.attrs.pads == (0, 0, 1, 1)  # TF SAME
    assert stem.output_shape == (1, 16, 8, 8)
    dw = by_op["dwconv"][0]
    assert dw.attrs.groups == 16 and dw.meta["fused_activation"] == "relu6"
    act = next(n for n in by_op["relu6"] if n.meta.get("fused_into") == dw.name)
    assert g.node(act.name).inputs[0].node == dw.name
    assert by_op["softmax"][0].attrs.axis == -1
    assert by_op["resize"][0].attrs.size == (16, 16)


@pytest.mark.integration
def test_int8_model_keeps_quant_params_and_quantize_ops(tf, tmp_path):
    from nnmeter.exporters.tflite import export_tflite

    b = GraphBuilder("q", (1, 4, 8, 8))
    g = b.build([b.relu(b.conv(b.x, 8, 3))])
    path = export_tflite(g, tmp_path / "q.tflite", quantize="int8", representative_samples=2)
    back = load_tflite(path)
    unknown = back.unknown_ops()
    assert [n.attrs.original_type for n in unknown] == ["tflite:QUANTIZE", "tflite:DEQUANTIZE"]
    assert unknown[0].attrs.fields["to_dtype"] == "int8"
    conv = next(n for n in back.nodes() if n.op == "conv")
    assert conv.meta["weight_quant"]["per_channel"]
    assert len(conv.meta["weight_quant"]["scale"]) == 8
    assert back.dtype == "int8"


def _patched(buf: bytes, edit) -> bytes:
    """Re-pack a .tflite after editing its object-API model (test helper)."""
    flatbuffers = pytest.importorskip("flatbuffers")
    gen = pytest.importorskip("ai_edge_litert.schema_py_generated")
    model = gen.ModelT.InitFromPackedBuf(buf, 0)
    edit(model, gen)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.mark.integration
def test_custom_op_becomes_unknown_and_is_listed(mobile_block, tmp_path):
    _, path = mobile_block

    def to_custom(model, gen):
        for code in model.operatorCodes:
            if code.builtinCode == gen.BuiltinOperator.HARD_SWISH:
                code.builtinCode = gen.BuiltinOperator.CUSTOM
                code.deprecatedBuiltinCode = gen.BuiltinOperator.CUSTOM
                code.customCode = "MyHardSwish"

    p = tmp_path / "custom.tflite"
    p.write_bytes(_patched(path.read_bytes(), to_custom))
    g = load_tflite(p)
    (node,) = g.unknown_ops()
    assert node.attrs.original_type == "tflite:CUSTOM:MyHardSwish"
    assert node.attrs.fields["custom_code"] == "MyHardSwish"
    assert node.output_shape == (1, 16, 8, 8)
    assert node.source["op_type"] == "CUSTOM:MyHardSwish"
    assert "hswish" not in g.op_counts()


@pytest.mark.integration
@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.8, 0.95])
def test_truncated_file_is_model_load_error(mobile_block, tmp_path, fraction):
    _, path = mobile_block
    data = path.read_bytes()
    p = tmp_path / "cut.tflite"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ModelLoadError):
        load_tflite(p)


@pytest.mark.integration
def test_several_subgraphs_load_the_first_with_a_warning(tf, tmp_path, caplog):
    class Two(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((1, 4, 4, 2), tf.float32, name="x")])
        def a(self, x):
            return {"y": tf.nn.relu(x)}

        @tf.function(input_signature=[tf.TensorSpec((1, 6), tf.float32, name="z")])
        def b(self, z):
            return {"w": tf.math.sigmoid(z)}

    m = Two()
    conv = tf.lite.TFLiteConverter.from_concrete_functions(
        [m.a.get_concrete_function(), m.b.get_concrete_function()], m)
    p = tmp_path / "two.tflite"
    p.write_bytes(conv.convert())
    with caplog.at_level(logging.WARNING, logger="nnmeter.frontends.tflite"):
        g = load_tflite(p)
    assert "2 subgraphs" in caplog.text
    assert g.op_counts() == {"input": 1, "relu": 1}
    assert g.input_names == ["x"] and g["x"].output_shape == (1, 2, 4, 4)
    g_b = load_tflite(p, subgraph="b")
    assert g_b.op_counts() == {"input": 1, "sigmoid": 1}
    assert g_b.meta["source"]["signature"] == "b"
    with pytest.raises(InputNameError, match="out of range"):
        load_tflite(p, subgraph=7)
    with pytest.raises(InputNameError, match="signatures"):
        load_tflite(p, subgraph="nope")


def _converted(tf, f, path):
    """``f`` (a tf.function with an input signature) written by the TFLite converter."""
    path.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions(
        [f.get_concrete_function()], tf.Module()).convert())
    return path


@pytest.fixture(scope="module")
def dynamic_model(tf, tmp_path_factory):
    w = np.full((3, 3, 3, 4), 0.1, np.float32)

    @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32, name="img")])
    def f(x):
        y = tf.nn.relu(tf.nn.conv2d(x, tf.constant(w), 1, "SAME"))
        return {"out": tf.reduce_mean(y, axis=[1, 2])}

    return _converted(tf, f, tmp_path_factory.mktemp("dyn") / "dyn.tflite")


@pytest.fixture(scope="module")
def tensordot_model(tf, tmp_path_factory):
    """A dense layer over an image, as Keras lowers it (tf.tensordot): the reshapes'
    targets are computed at run time from SHAPE, and the file stores 1 x 1 for them."""
    w = np.full((8, 16), 0.1, np.float32)

    @tf.function(input_signature=[tf.TensorSpec((None, 7, 7, 8), tf.float32, name="img")])
    def f(x):
        return {"out": tf.nn.relu(tf.tensordot(x, tf.constant(w), axes=1))}

    return _converted(tf, f, tmp_path_factory.mktemp("tensordot") / "tensordot.tflite")


@pytest.mark.integration
def test_shapes_computed_at_run_time_are_read_from_one_run(tensordot_model):
    from nnmeter.frontends._tflite_schema import read_model

    sg = read_model(tensordot_model.read_bytes()).subgraphs[0]
    assert "SHAPE" in [op.op_type for op in sg.operators]     # the case this covers
    g = load_tflite(tensordot_model)
    assert not g.unknown_ops()
    fc = [n for n in g.nodes() if n.op == "fc"]
    assert len(fc) == 1 and fc[0].output_shape == (49, 16)    # 7 x 7 rows, not 1
    assert g.outputs and g.shape_of(g.outputs[0]) == (1, 16, 7, 7)
    assert any(f.startswith("SHAPE#") for f in g.meta["folded_ops"])
    assert any("run time" in w for w in g.meta["warnings"])
    g2 = load_tflite(tensordot_model, input_shapes={"img": (2, 8, 7, 7)})
    assert [n for n in g2.nodes() if n.op == "fc"][0].output_shape == (98, 16)


@pytest.mark.integration
def test_swish_is_one_node_and_a_gate_stays_sigmoid_and_mul(tf, tmp_path):
    w = np.full((1, 1, 4, 4), 0.1, np.float32)

    @tf.function(input_signature=[tf.TensorSpec((1, 6, 6, 4), tf.float32, name="img")])
    def f(x):
        y = tf.nn.conv2d(x, tf.constant(w), 1, "SAME")
        y = y * tf.math.sigmoid(y)                                   # swish
        gate = tf.math.sigmoid(tf.reduce_mean(y, axis=[1, 2], keepdims=True))
        return {"out": y * gate}                                     # squeeze-excite gate

    p = tmp_path / "swish.tflite"
    p.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions(
        [f.get_concrete_function()], tf.Module()).convert())
    g = load_tflite(p)
    counts = g.op_counts()
    assert counts.get("swish") == 1 and counts.get("sigmoid") == 1 and counts.get("mul") == 1
    swish = next(n for n in g.nodes() if n.op == "swish")
    assert g.node(swish.inputs[0].node).op == "conv" and swish.meta["absorbed"]
    # nnmeter's own export of a swish reads back as a swish
    from nnmeter.exporters.tflite import export_tflite

    b = GraphBuilder("sw", (1, 4, 6, 6), input_name="image")
    ir = b.build([b.act(b.conv(b.x, 4, 1, name="c"), "swish", name="s")])
    export_tflite(ir, tmp_path / "own.tflite")
    assert load_tflite(tmp_path / "own.tflite").op_counts().get("swish") == 1


@pytest.fixture(scope="module")
def attention_model(tf, tmp_path_factory):
    """A Keras-style encoder layer written with tf ops: a layer norm as Keras lowers it
    (mean, squared difference, rsqrt...), heads split to (1, heads, tokens, dh) rank-4
    tensors, batched products with an adjoint operand, and a layer norm over an image's
    channels beside it, which has no IR op."""
    rng = np.random.default_rng(0)
    wq, wk, wv = (rng.normal(size=(16, 16)).astype(np.float32) for _ in range(3))
    gamma = rng.normal(size=(16,)).astype(np.float32)
    wc = np.full((3, 3, 3, 16), 0.1, np.float32)

    def layernorm(x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
        inv = tf.math.rsqrt(var + 1e-6) * gamma[: x.shape[-1]]
        return x * inv - mean * inv

    @tf.function(input_signature=[tf.TensorSpec((1, 10, 16), tf.float32, name="tokens"),
                                  tf.TensorSpec((1, 6, 6, 3), tf.float32, name="img")])
    def f(x, img):
        h = layernorm(x)
        q, k, v = (tf.transpose(tf.reshape(tf.matmul(h, w), (1, 10, 4, 4)), (0, 2, 1, 3))
                   for w in (wq, wk, wv))
        att = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) * 0.5, axis=-1)
        y = tf.reshape(tf.transpose(tf.matmul(att, v), (0, 2, 1, 3)), (1, 10, 16))
        c = layernorm(tf.nn.conv2d(img, tf.constant(wc), 1, "SAME"))
        return {"out": x + y + tf.reshape(tf.reduce_mean(c, axis=[1, 2]), (1, 1, 16))}

    return _converted(tf, f, tmp_path_factory.mktemp("attention") / "attention.tflite")


@pytest.mark.integration
def test_attention_tensors_are_not_images_and_layer_norms_are_one_node(attention_model):
    from nnmeter.frontends._tflite_schema import read_model

    ops = [op.op_type for op in read_model(attention_model.read_bytes()).subgraphs[0].operators]
    assert "SQUARED_DIFFERENCE" in ops and "RSQRT" in ops and "BATCH_MATMUL" in ops
    g = load_tflite(attention_model)
    counts = g.op_counts()
    # the token layer norm is one node; the one over the image's channels stays as ops
    norms = [n for n in g.nodes() if n.op == "layernorm"]
    assert len(norms) == 1 and norms[0].output_shape == (1, 10, 16)
    assert norms[0].attrs.epsilon == pytest.approx(1e-6)
    assert g.node(norms[0].inputs[0].node).op == "input"
    # (1, heads, tokens, dh) tensors keep the file's order: the products are matmuls
    mm = sorted((n for n in g.nodes() if n.op == "matmul"), key=lambda n: n.output_shape)
    assert [n.output_shape for n in mm] == [(1, 4, 10, 4), (1, 4, 10, 10)]
    # kᵀ is read as an (inserted) transpose in front of the scores' product
    adj = g.node(mm[1].inputs[1].node)
    assert adj.op == "transpose" and adj.meta.get("inserted") and adj.output_shape == (1, 4, 4, 10)
    sm = next(n for n in g.nodes() if n.op == "softmax")
    assert sm.attrs.axis in (-1, 3)
    unknown = {n.attrs.original_type for n in g.nodes() if n.op == "unknown"}
    assert "tflite:BATCH_MATMUL" not in unknown
    assert unknown <= {"tflite:NEG", "tflite:SQUARED_DIFFERENCE", "tflite:RSQRT"}
    assert counts.get("conv") == 1 and g.shape_of(g.outputs[0]) == (1, 10, 16)


@pytest.fixture(scope="module")
def relative_model(tf, tmp_path_factory):
    """DeBERTa's relative positions as the converter writes them: a constant (folded
    position projections) times the keys, and ``take_along_axis`` of the scores by
    constant indices (a GATHER with batch_dims)."""
    rng = np.random.default_rng(0)
    pos = tf.constant(rng.normal(size=(1, 2, 12, 4)).astype(np.float32))
    idx = tf.constant(rng.integers(0, 12, size=(1, 2, 6, 6)).astype(np.int64))

    @tf.function(input_signature=[tf.TensorSpec((1, 2, 6, 4), tf.float32, name="q"),
                                  tf.TensorSpec((1, 2, 4, 6), tf.float32, name="kt")])
    def f(q, kt):
        scores = tf.matmul(q, kt)                              # (1, 2, 6, 6)
        p2c = tf.matmul(pos, kt)                               # (1, 2, 12, 6): constant first
        rel = tf.gather(tf.transpose(p2c, (0, 1, 3, 2)), idx, axis=3, batch_dims=3)
        return {"out": tf.nn.softmax(scores + rel, axis=-1)}

    return _converted(tf, f, tmp_path_factory.mktemp("relative") / "relative.tflite")


@pytest.mark.integration
def test_constant_first_products_and_gathers_are_ir_ops(relative_model):
    g = load_tflite(relative_model)
    assert not [n for n in g.nodes() if n.op == "unknown"]
    const = [n for n in g.nodes() if n.op == "matmul" and n.attrs.const_a is not None]
    assert [(n.attrs.const_a, n.output_shape) for n in const] == [((1, 2, 12, 4), (1, 2, 12, 6))]
    (ga,) = [n for n in g.nodes() if n.op == "gather"]
    assert (ga.attrs.axis, ga.attrs.indices_shape, ga.attrs.batch_dims) == (3, (1, 2, 6, 6), 3)
    assert ga.output_shape == (1, 2, 6, 6)
    from nnmeter.kernels import KERNEL_TYPES

    cfg = KERNEL_TYPES.get("gather").config_from_nodes(g, [ga.name])
    assert (cfg.outer, cfg.axis_len, cfg.n, cfg.inner, cfg.shared) == (12, 12, 6, 1, False)
    mm = KERNEL_TYPES.get("matmul").config_from_nodes(g, [const[0].name])
    assert (mm.batch, mm.m, mm.k, mm.n) == (2, 12, 4, 6)


@pytest.mark.integration
def test_dynamic_batch_uses_one_with_warning(dynamic_model, caplog):
    with caplog.at_level(logging.WARNING, logger="nnmeter.frontends.tflite"):
        g = load_tflite(dynamic_model)
    assert "dynamic" in caplog.text and "input_shapes" in caplog.text
    assert g["img"].output_shape == (1, 3, 8, 8)
    assert g.meta["warnings"]


@pytest.mark.integration
def test_dynamic_batch_resized_by_input_shapes(dynamic_model):
    g = load_tflite(dynamic_model, input_shapes={"img": (4, 3, 8, 8)})
    assert g["img"].output_shape == (4, 3, 8, 8)
    assert [n.output_shape for n in g.nodes()][-1] == (4, 4)
    assert not g.unknown_ops()
    g2 = load_tflite(dynamic_model, input_shapes={"": (2, 3, 8, 8)})   # "" = first input
    assert g2["img"].output_shape == (2, 3, 8, 8)
    with pytest.raises(InputNameError, match="img"):
        load_tflite(dynamic_model, input_shapes={"image": (4, 3, 8, 8)})
    with pytest.raises(DynamicShapeError, match="only dynamic"):
        load_tflite(dynamic_model, input_shapes={"img": (4, 3, 9, 8)})
    with pytest.raises(DynamicShapeError, match="rank"):
        load_tflite(dynamic_model, input_shapes={"img": (4, 3, 8)})


@pytest.mark.integration
def test_loaded_graph_survives_json_round_trip(mobile_block):
    from nnmeter.ir.graph import ModelGraph

    _, path = mobile_block
    g = load_tflite(path)
    again = ModelGraph.from_json(g.to_json())
    assert again.structurally_equal(g)


@pytest.mark.integration
def test_errors_are_ours_never_tensorflow_tracebacks(mobile_block, tmp_path):
    _, path = mobile_block
    data = np.frombuffer(path.read_bytes(), dtype=np.uint8)
    rng = np.random.default_rng(0)
    for k in range(40):                      # scribble over random bytes of the body
        corrupt = data.copy()
        idx = rng.integers(8, len(corrupt), 16)
        corrupt[idx] = rng.integers(0, 256, 16).astype(np.uint8)
        p = tmp_path / f"c{k}.tflite"
        p.write_bytes(corrupt.tobytes())
        try:
            load_tflite(p)
        except NNMeterError:
            pass                             # a clear error of ours is the right outcome
