"""Tiny ONNX models built with onnx.helper, shared by the backend tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _save(nodes, inits, in_shape, out_shape, path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _bn(prefix, c, rng):
    from onnx import numpy_helper as nh

    return [nh.from_array((1 + 0.1 * rng.standard_normal(c)).astype(np.float32), f"{prefix}_s"),
            nh.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), f"{prefix}_b"),
            nh.from_array(np.zeros(c, np.float32), f"{prefix}_m"),
            nh.from_array(np.ones(c, np.float32), f"{prefix}_v")]


def conv_bn_relu(path: Path, c: int = 16, hw: int = 28) -> Path:
    """x -> conv1 (3x3) -> bn1 -> relu1 -> y."""
    from onnx import helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array((0.1 * rng.standard_normal((c, c, 3, 3))).astype(np.float32), "w")]
    inits += _bn("bn1", c, rng)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "bn1_s", "bn1_b", "bn1_m", "bn1_v"],
                              ["n"], name="bn1"),
             helper.make_node("Relu", ["n"], ["y"], name="relu1")]
    return _save(nodes, inits, [1, c, hw, hw], [1, c, hw, hw], path)


def mobilenet_block(path: Path, c: int = 16, hw: int = 28, expand: int = 4) -> Path:
    """Inverted residual: pw conv-bn-relu6, dw conv-bn-relu6, pw conv-bn, add."""
    from onnx import helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(1)
    e = c * expand
    inits = [
        nh.from_array((0.1 * rng.standard_normal((e, c, 1, 1))).astype(np.float32), "w_pw1"),
        nh.from_array((0.1 * rng.standard_normal((e, 1, 3, 3))).astype(np.float32), "w_dw"),
        nh.from_array((0.1 * rng.standard_normal((c, e, 1, 1))).astype(np.float32), "w_pw2"),
        nh.from_array(np.array(0.0, np.float32), "zero"),
        nh.from_array(np.array(6.0, np.float32), "six"),
    ]
    inits += _bn("bn_a", e, rng) + _bn("bn_b", e, rng) + _bn("bn_c", c, rng)
    bn = lambda p, i, o: helper.make_node(  # noqa: E731
        "BatchNormalization", [i, f"{p}_s", f"{p}_b", f"{p}_m", f"{p}_v"], [o], name=p)
    nodes = [
        helper.make_node("Conv", ["x", "w_pw1"], ["t1"], name="pw1", kernel_shape=[1, 1]),
        bn("bn_a", "t1", "t2"),
        helper.make_node("Clip", ["t2", "zero", "six"], ["t3"], name="relu6_a"),
        helper.make_node("Conv", ["t3", "w_dw"], ["t4"], name="dw", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], group=e),
        bn("bn_b", "t4", "t5"),
        helper.make_node("Clip", ["t5", "zero", "six"], ["t6"], name="relu6_b"),
        helper.make_node("Conv", ["t6", "w_pw2"], ["t7"], name="pw2", kernel_shape=[1, 1]),
        bn("bn_c", "t7", "t8"),
        helper.make_node("Add", ["t8", "x"], ["y"], name="add"),
    ]
    return _save(nodes, inits, [1, c, hw, hw], [1, c, hw, hw], path)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def cbr_onnx(model_dir) -> Path:
    return conv_bn_relu(model_dir / "cbr.onnx")


@pytest.fixture(scope="session")
def mbblock_onnx(model_dir) -> Path:
    return mobilenet_block(model_dir / "mbblock.onnx")


@pytest.fixture(scope="session")
def garbage_onnx(model_dir) -> Path:
    p = model_dir / "garbage.onnx"
    p.write_bytes(b"this is not an onnx model\x00\x01")
    return p
