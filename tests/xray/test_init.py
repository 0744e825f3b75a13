"""End-to-end xray: injected faults are named, clean deployments pass."""

import numpy as np
import pytest

from nnmeter.errors import InputMismatchError
from nnmeter.xray import xray
from nnmeter.xray.faults import corrupt_quant_scale, make_preprocess, smooth_images


def test_onnx_folded_bn_deployment_is_ok(tiny_onnx):
    rep = xray(tiny_onnx["folded"], tiny_onnx["ref"], n_random=2, latency=False)
    assert rep.verdict == "OK", rep.summary()
    conv = next(d for d in rep.diffs if d.op == "conv")
    assert conv.reference == "act"  # the folded conv is compared with the ReLU output
    assert conv.nrmse < 1e-5 and conv.cosine > 0.9999
    assert rep.unaligned_deployed == [] and rep.unaligned_reference == []
    assert rep.top1_agreement == 1.0


def test_onnx_broken_layer_is_found(tiny_onnx):
    rep = xray(tiny_onnx["broken"], tiny_onnx["ref"], n_random=2, latency=False)
    assert rep.verdict == "FAULT"
    assert rep.first_divergent.deployed == "act"  # block of the broken fused conv
    assert rep.cause.kind == "layer_divergence"
    assert rep.divergent_detail["source_op"] == "Conv" and rep.divergent_detail["op"] == "conv"
    assert rep.divergent_detail["members"] == ["fused_conv", "act"]


def test_input_shape_mismatch_is_a_clear_error(tiny_onnx):
    with pytest.raises(InputMismatchError, match="canonical shape"):
        xray(tiny_onnx["small"], tiny_onnx["ref"], n_random=1, latency=False)


def test_onnx_needs_a_reference(tiny_onnx):
    from nnmeter.errors import XRayError

    with pytest.raises(XRayError, match="reference"):
        xray(tiny_onnx["ref"], None, n_random=1, latency=False)


RAW = list(smooth_images(3, 36, 36, seed=7))
REF_PRE = make_preprocess(layout="NCHW", size=(24, 24))


@pytest.mark.integration
@pytest.mark.parametrize("bug, kind", [
    (dict(channel_order="BGR"), "channel_order"),
    (dict(value_range="-1,1"), "normalization"),
    (dict(layout_bug=True), "layout"),
    (dict(resize="nearest"), "resize_method"),
    (dict(rotate=180), "rotation"),
])
def test_preprocessing_faults_are_named(pair, bug, kind):
    rep = xray(pair["float"].tflite_path, pair["float"].onnx_path, inputs=RAW,
               preprocess=make_preprocess(layout="NHWC", size=(24, 24), **bug),
               reference_preprocess=REF_PRE, latency=False)
    assert rep.verdict == "FAULT"
    assert rep.cause.kind == kind, rep.summary()
    assert rep.first_divergent is not None and rep.first_divergent.op == "input"


@pytest.mark.integration
def test_clean_float_and_int8_deployments_are_ok(pair):
    for key in ("float", "int8"):
        rep = xray(pair[key].tflite_path, pair[key].onnx_path, inputs=RAW,
                   preprocess=make_preprocess(layout="NHWC", size=(24, 24)),
                   reference_preprocess=REF_PRE, latency=False)
        assert rep.verdict == "OK", rep.summary()
        assert rep.first_divergent is None
        # conv+bn+relu in ONNX = one CONV_2D in TFLite: all aligned
        assert rep.unaligned_deployed == [] and rep.unaligned_reference == []
        convs = [d for d in rep.diffs if d.op == "conv"]
        assert convs and all(d.reference.startswith("relu") for d in convs)
        if key == "float":
            assert max(d.nrmse for d in rep.diffs) < 1e-4
        else:
            assert all(d.rmse_scales is not None and d.rmse_scales < 4 for d in convs)


@pytest.mark.integration
def test_corrupted_quantization_scale_is_named_at_its_layer(pair, tmp_path):
    from nnmeter.xray.instrument import open_runner

    src = pair["int8"].tflite_path
    target = [l for l in open_runner(src).layers.values() if l.op == "conv"][1]
    bad = corrupt_quant_scale(src, tmp_path / "bad.tflite", target.name, 0.1)
    rep = xray(bad, pair["int8"].onnx_path, n_random=3, latency=False)
    assert rep.verdict == "FAULT"
    assert rep.cause.kind == "quantization", rep.summary()
    assert rep.first_divergent.deployed == target.name
    assert rep.divergent_detail["quant"][0] == pytest.approx(target.quant[0] * 0.1)


@pytest.mark.integration
def test_reference_kernels_are_flagged_slow(pair):
    # reference kernels are 10-40x slower here; the check compares side by side, k = 3
    rep = xray(pair["float"].tflite_path, pair["float"].onnx_path, n_random=1,
               backend="litert-cpu-ref")
    assert rep.cause.kind == "slow_kernels", rep.summary()
    assert rep.slow_kernels == ["model"]
    assert rep.latency.alternatives_ms["litert-cpu"] < rep.latency.model_ms
    ok = xray(pair["float"].tflite_path, pair["float"].onnx_path, n_random=1)
    assert ok.verdict == "OK" and ok.slow_kernels == []


@pytest.mark.integration
def test_reference_with_other_outputs_gives_a_warning(pair, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 1, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "other.onnx"))
    rep = xray(pair["float"].tflite_path, tmp_path / "other.onnx", n_random=1, latency=False)
    assert any("output shapes differ" in w for w in rep.warnings)
    assert rep.top1_agreement is None
    assert rep.unaligned_deployed  # nothing but the input lines up


@pytest.mark.integration
def test_out_of_range_inputs_warn_for_int8(pair):
    raw = [np.asarray(x, np.float32).transpose(2, 0, 1)[None] for x in
           smooth_images(1, 24, 24, seed=3)]  # 0..255 fed where [0,1] is expected
    rep = xray(pair["int8"].tflite_path, pair["int8"].onnx_path, inputs=raw, latency=False)
    assert any("input quantization covers" in w for w in rep.warnings)


@pytest.mark.integration
def test_keras_reference(tmp_path):
    tf = pytest.importorskip("tensorflow", reason="Keras references need TensorFlow")
    pytest.importorskip("ai_edge_litert", reason="ai_edge_litert runs .tflite models")
    keras = tf.keras
    inp = keras.Input((16, 16, 3), batch_size=1)
    y = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inp)
    y = keras.layers.ReLU(name="act")(y)
    y = keras.layers.GlobalAveragePooling2D(name="gap")(y)
    y = keras.layers.Dense(5, name="fc")(y)
    model = keras.Model(inp, y)
    model.save(tmp_path / "m.keras")
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    (tmp_path / "m.tflite").write_bytes(conv.convert())
    rep = xray(tmp_path / "m.tflite", tmp_path / "m.keras", n_random=2, latency=False)
    assert rep.verdict == "OK", rep.summary()
    assert [d.op for d in rep.diffs] == ["input", "conv", "gap", "fc"]
