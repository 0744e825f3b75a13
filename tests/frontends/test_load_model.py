"""Tests of load_model's dispatch on the kind of source."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from nnmeter.errors import ModelLoadError
from nnmeter.exporters.onnx import export_onnx, to_onnx_model
from nnmeter.frontends import SUPPORTED_FORMATS, load_model
from nnmeter.ir import GraphBuilder


def _graph():
    b = GraphBuilder("m", (1, 3, 8, 8))
    return b.build([b.relu(b.conv(b.x, 4, name="c"), name="r")])


def test_onnx_path_and_modelproto(tmp_path):
    g = _graph()
    path = export_onnx(g, tmp_path / "m.onnx")
    assert load_model(path).structurally_equal(g)
    assert load_model(str(path)).structurally_equal(g)
    assert load_model(to_onnx_model(g)).structurally_equal(g)


def test_json_ir(tmp_path):
    g = _graph()
    g.to_json(str(tmp_path / "m.json"))
    assert load_model(tmp_path / "m.json").structurally_equal(g)


def test_input_shapes_are_passed_to_the_onnx_frontend():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "d", [x], [y]))
    assert load_model(model, input_shapes={"x": (3, 4)})["r"].output_shape == (3, 4)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nothing.onnx")
    odd = tmp_path / "model.caffemodel"
    odd.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"\.onnx.*\.tflite"):
        load_model(odd)
    with pytest.raises(ModelLoadError, match="SavedModel"):
        load_model(tmp_path)
    with pytest.raises(ModelLoadError):
        load_model(12345)
    assert ".onnx" in SUPPORTED_FORMATS


def test_tflite_and_keras_dispatch_to_their_frontends(tmp_path, monkeypatch):
    import sys
    import types

    calls = []
    tfl = types.ModuleType("nnmeter.frontends.tflite")
    tfl.load_tflite = lambda path: calls.append(("tflite", path.name)) or "tfl-graph"
    ker = types.ModuleType("nnmeter.frontends.keras")
    ker.load_keras = lambda path: calls.append(("keras", path.name)) or "keras-graph"
    monkeypatch.setitem(sys.modules, "nnmeter.frontends.tflite", tfl)
    monkeypatch.setitem(sys.modules, "nnmeter.frontends.keras", ker)
    for name in ("m.tflite", "m.keras", "m.h5"):
        (tmp_path / name).write_bytes(b"x")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"x")
    assert load_model(tmp_path / "m.tflite") == "tfl-graph"
    assert load_model(tmp_path / "m.keras") == "keras-graph"
    assert load_model(tmp_path / "m.h5") == "keras-graph"
    assert load_model(saved) == "keras-graph"
    assert calls == [("tflite", "m.tflite"), ("keras", "m.keras"), ("keras", "m.h5"),
                     ("keras", "saved")]


def test_input_shape_of_ir_json_is_applied_not_ignored(tmp_path):
    from nnmeter.errors import InputNameError

    path = tmp_path / "m.json"
    _graph().to_json(str(path))
    g = load_model(path, input_shapes={"": (1, 3, 32, 16)})
    assert g["r"].output_shape == (1, 4, 32, 16) and g["c"].input_shapes == ((1, 3, 32, 16),)
    with pytest.raises(InputNameError, match="not an input of the graph"):
        load_model(path, input_shapes={"nosuch": (1, 3, 8, 8)})
    with pytest.raises(ModelLoadError, match="has rank 4"):
        load_model(path, input_shapes={"": (1, 3, 8)})
