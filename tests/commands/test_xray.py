"""`nnmeter xray` on tiny ONNX models (no TensorFlow needed)."""

import json
import sys

import pytest

from nnmeter.cli import main

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "xray"))
from conftest import make_onnx  # noqa: E402  (the xray tests' model helper)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-xray")
    return {"ref": make_onnx(d / "ref.onnx"), "ok": make_onnx(d / "ok.onnx", fold_bn=True),
            "bad": make_onnx(d / "bad.onnx", fold_bn=True, bad_bias=True),
            "small": make_onnx(d / "small.onnx", hw=8), "dir": d}


def test_ok_deployment_exits_0(models, capsys):
    rc = main(["xray", str(models["ok"]), "--reference", str(models["ref"]), "--random", "2",
               "--no-latency", "--layers"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("verdict: OK")
    assert "nRMSE" in out  # the per-layer table


def test_fault_json_and_html(models, capsys):
    html = models["dir"] / "r.html"
    rc = main(["xray", str(models["bad"]), "-r", str(models["ref"]), "--random", "2",
               "--json", "--html", str(html)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["verdict"] == "FAULT"
    assert data["first_divergent"] == "act" and data["cause"]["kind"] == "layer_divergence"
    assert html.exists() and "data:image/png;base64," in html.read_text()


def test_preprocess_option_names_the_bug(models, tmp_path, capsys):
    (tmp_path / "prep_mod.py").write_text(
        "import numpy as np\n"
        "def good(raw):\n    return {'input': raw.transpose(2, 0, 1)[None] / 255.0}\n"
        "def bgr(raw):\n    return {'input': raw[..., ::-1].transpose(2, 0, 1)[None] / 255.0}\n")
    import numpy as np

    from nnmeter.xray.checks import smooth_images

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i, img in enumerate(smooth_images(2, 12, 12)):
        np.save(inputs / f"{i}.npy", img)
    rc = main(["xray", str(models["ok"]), "-r", str(models["ref"]), "--inputs", str(inputs),
               "--preprocess", f"{tmp_path / 'prep_mod.py'}:bgr",
               "--reference-preprocess", f"{tmp_path / 'prep_mod.py'}:good", "--no-latency"])
    out = capsys.readouterr().out
    assert rc == 1 and "cause: [channel_order]" in out


def test_mismatched_inputs_are_one_line_errors(models, capsys):
    rc = main(["xray", str(models["small"]), "-r", str(models["ref"]), "--no-latency"])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and "canonical shape" in err
    assert "Traceback" not in err
