import numpy as np
import pytest

from nnmeter.errors import InputMismatchError, ModelLoadError
from nnmeter.xray.instrument import from_canonical, open_runner, to_canonical


def test_layout_helpers_round_trip():
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    assert from_canonical(x, "NHWC").shape == (2, 4, 5, 3)
    assert np.array_equal(to_canonical(from_canonical(x, "NHWC"), "NHWC"), x)
    assert from_canonical(x, "NCHW") is x


def test_onnx_records_every_intermediate(tiny_onnx):
    r = open_runner(tiny_onnx["ref"])
    assert r.fmt == "onnx" and r.backend == "ort-cpu"
    assert [l.op for l in r.layers.values()] == ["input", "conv", "bn", "relu", "gap",
                                                 "flatten", "fc"]
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 12, 12)).astype(np.float32)
    values = r.record(r.feeds_from_canonical([x]))
    assert set(values) == set(r.layers)
    assert values["bn"].shape == (1, 4, 12, 12)
    assert values["act"].min() >= 0 and np.array_equal(values["act"],
                                                       np.maximum(values["bn"], 0))
    out = r.run(r.feeds_from_canonical([x]))[0]
    assert np.allclose(out, values["logits"], atol=1e-5)
    assert r.layers["conv"].attrs["kernel_shape"] == [3, 3]


def test_bad_inputs_raise_clear_errors(tiny_onnx):
    r = open_runner(tiny_onnx["ref"])
    with pytest.raises(InputMismatchError, match=r"shape \(1, 3, 12, 12\)"):
        r.feeds_from_canonical([np.zeros((1, 3, 8, 8), np.float32)])
    with pytest.raises(InputMismatchError, match="1 input"):
        r.feeds_from_canonical([np.zeros((1, 3, 12, 12))] * 2)
    with pytest.raises(InputMismatchError, match="NaN"):
        r.feeds_from_canonical([np.full((1, 3, 12, 12), np.nan)])


def test_missing_or_unknown_files(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        open_runner(tmp_path / "nope.onnx")
    p = tmp_path / "m.pb"
    p.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"\.onnx"):
        open_runner(p)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError):
        open_runner(bad)


@pytest.mark.integration
def test_tflite_int8_tensors_are_dequantized_and_canonical(pair):
    r = open_runner(pair["int8"].tflite_path)
    assert r.input_specs[0].native_shape == (1, 24, 24, 3)
    assert r.input_specs[0].shape == (1, 3, 24, 24)
    convs = [l for l in r.layers.values() if l.op == "conv"]
    assert convs and all(l.quant and l.dtype == "int8" for l in convs)
    assert convs[0].attrs["fusedActivationFunction"] == "relu"
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 24, 24)).astype(np.float32)
    values = r.record(r.feeds_from_canonical([x]))
    v = values[convs[0].name]
    assert v.dtype == np.float32 and v.shape == convs[0].shape and v.shape[1] == 8
    scale, zp = convs[0].quant
    steps = v / scale
    assert np.allclose(steps, np.round(steps), atol=1e-3)  # on the int8 grid
    assert np.allclose(values[r.input_specs[0].name], x)
