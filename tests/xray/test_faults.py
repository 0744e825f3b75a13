import numpy as np
import pytest

from nnmeter.errors import XRayError
from nnmeter.xray.faults import corrupt_quant_scale, make_preprocess, smooth_images
from nnmeter.xray.instrument import open_runner


def test_preprocess_steps_and_layouts():
    raw = smooth_images(1, 40, 40)[0]
    out = make_preprocess(layout="NHWC", size=(16, 16))(raw)
    assert list(out) == ["resize", "normalize", "input"]
    assert out["input"].shape == (1, 16, 16, 3)
    assert 0 <= out["input"].min() and out["input"].max() <= 1
    bug = make_preprocess(layout="NHWC", size=(16, 16), layout_bug=True)(raw)["input"]
    assert bug.shape == (1, 16, 16, 3) and not np.allclose(bug, out["input"])
    assert make_preprocess(size=(16, 16), value_range="-1,1")(raw)["input"].min() < 0


@pytest.mark.integration
def test_corrupt_quant_scale_changes_one_tensor(pair, tmp_path):
    src = pair["int8"].tflite_path
    r = open_runner(src)
    conv = [l for l in r.layers.values() if l.op == "conv"][1]
    dst = corrupt_quant_scale(src, tmp_path / "bad.tflite", conv.name, 0.1)
    r2 = open_runner(dst)
    assert r2.layers[conv.name].quant[0] == pytest.approx(conv.quant[0] * 0.1)
    others = [n for n, l in r.layers.items() if l.quant and n != conv.name]
    assert all(r2.layers[n].quant == r.layers[n].quant for n in others)
    with pytest.raises(XRayError, match="no quantized tensor"):
        corrupt_quant_scale(src, tmp_path / "x.tflite", "nope", 2.0)
