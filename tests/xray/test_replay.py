import numpy as np
import pytest

from nnmeter.errors import XRayError
from nnmeter.xray.instrument import open_runner
from nnmeter.xray.replay import (as_nchw, load_function, load_inputs, random_inputs,
                                 record_pipeline)


def test_load_function_from_module_and_file(tmp_path):
    assert load_function("numpy:asarray") is np.asarray
    f = tmp_path / "prep.py"
    f.write_text("def pre(raw):\n    return {'a': raw, 'input': raw * 2}\n")
    assert load_function(f"{f}:pre")(np.ones(2))["input"].sum() == 4
    with pytest.raises(XRayError, match="module:function"):
        load_function("nocolon")
    with pytest.raises(XRayError, match="cannot load"):
        load_function("nnmeter_no_such_module:f")


def test_load_inputs_reads_npy_and_png(tmp_path):
    import matplotlib.image as mpimg

    np.save(tmp_path / "a.npy", np.zeros((1, 3, 4, 4), np.float32))
    mpimg.imsave(tmp_path / "b.png", np.full((4, 4, 3), 0.5))
    got = load_inputs(tmp_path)
    assert got[0].shape == (1, 3, 4, 4) and got[1].shape == (4, 4, 3)
    assert got[1].dtype == np.uint8
    with pytest.raises(XRayError, match="not a folder"):
        load_inputs(tmp_path / "a.npy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(XRayError, match="no .npy"):
        load_inputs(tmp_path / "empty")


def test_random_inputs_and_steps_are_recorded(tiny_onnx):
    r = open_runner(tiny_onnx["ref"])
    xs = random_inputs(r, 2, seed=1)
    assert xs[0].shape == (1, 3, 12, 12) and 0 <= xs[0].min() and xs[0].max() <= 1
    raws = random_inputs(r, 2, seed=1, for_preprocess=True)
    assert raws[0].shape == (18, 18, 3) and raws[0].dtype == np.uint8

    def pre(raw):
        x = raw[:12, :12].transpose(2, 0, 1)[None] / 255.0
        return {"crop": raw[:12, :12], "input": x}

    t = record_pipeline(r, raws, preprocess=pre)
    assert list(t.steps[0]) == ["crop", "input"] and len(t.values) == 2
    assert np.allclose(t.values[0]["x"], pre(raws[0])["input"])


def test_preprocess_errors_are_reported_not_raised_raw(tiny_onnx):
    r = open_runner(tiny_onnx["ref"])
    with pytest.raises(XRayError, match="preprocessing function failed on input 0"):
        record_pipeline(r, [np.zeros(3)], preprocess=lambda raw: raw.reshape(7, 7))


def test_as_nchw_guesses_image_layouts():
    assert as_nchw(np.zeros((8, 9, 3))).shape == (1, 3, 8, 9)
    assert as_nchw(np.zeros((2, 3, 8, 9))).shape == (2, 3, 8, 9)
    assert as_nchw(np.zeros((2, 8, 9, 3))).shape == (2, 3, 8, 9)
