"""Fixtures for xray tests: tiny ONNX models (no TensorFlow) and a TFLite/ONNX pair."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest


def make_onnx(path: pathlib.Path, *, fold_bn: bool = False, hw: int = 12, seed: int = 0,
              bad_bias: bool = False) -> pathlib.Path:
    """conv3x3(3->4) + bn + relu -> gap -> flatten -> gemm(5); ``fold_bn`` folds the BN
    into the conv weights like a converter would; ``bad_bias`` breaks the folded bias."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.4
    b = rng.standard_normal(4).astype(np.float32) * 0.1
    gamma, beta = rng.uniform(0.5, 1.5, 4).astype(np.float32), rng.standard_normal(4).astype(
        np.float32) * 0.1
    mean, var = rng.standard_normal(4).astype(np.float32) * 0.1, rng.uniform(0.5, 1.5, 4).astype(
        np.float32)
    fw = rng.standard_normal((5, 4)).astype(np.float32)
    fb = np.zeros(5, np.float32)
    inits = {"fc_w": fw, "fc_b": fb}
    nodes = []
    if fold_bn:
        s = gamma / np.sqrt(var + 1e-5)
        inits["w"] = (w * s[:, None, None, None]).astype(np.float32)
        inits["b"] = ((b - mean) * s + beta).astype(np.float32)
        if bad_bias:
            inits["b"] = inits["b"] + np.float32(2.0)
        nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["fused_conv"], name="fused_conv",
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", ["fused_conv"], ["act"], name="act"))
    else:
        inits.update(w=w, b=b, g=gamma, be=beta, m=mean, v=var)
        nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv",
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("BatchNormalization", ["conv", "g", "be", "m", "v"],
                                      ["bn"], name="bn"))
        nodes.append(helper.make_node("Relu", ["bn"], ["act"], name="act"))
    nodes += [helper.make_node("GlobalAveragePool", ["act"], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="logits",
                               transB=1)]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> dict[str, pathlib.Path]:
    d = tmp_path_factory.mktemp("tiny-onnx")
    return {"ref": make_onnx(d / "ref.onnx"),
            "folded": make_onnx(d / "folded.onnx", fold_bn=True),
            "broken": make_onnx(d / "broken.onnx", fold_bn=True, bad_bias=True),
            "small": make_onnx(d / "small.onnx", hw=8)}


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """The xray test model as float ONNX, float .tflite and int8 .tflite (needs TF)."""
    pytest.importorskip("tensorflow", reason="TensorFlow builds the .tflite test models")
    pytest.importorskip("ai_edge_litert", reason="ai_edge_litert runs .tflite models")
    from nnmeter.xray.faults import build_model_pair

    d = tmp_path_factory.mktemp("xray-pair")
    return {"float": build_model_pair(d, hw=(24, 24)),
            "int8": build_model_pair(d, hw=(24, 24), quantize="int8")}
