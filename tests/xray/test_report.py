import base64
import json
import re

from nnmeter.xray import xray


def test_summary_json_and_single_file_html(tiny_onnx, tmp_path):
    rep = xray(tiny_onnx["broken"], tiny_onnx["ref"], n_random=2)
    text = rep.summary()
    assert text.startswith("verdict: FAULT")
    assert "first divergent layer: act" in text and "layer_divergence" in text
    data = json.loads(json.dumps(rep.as_dict()))
    assert data["verdict"] == "FAULT" and data["first_divergent"] == "act"
    assert data["latency"]["model_ms"] > 0
    assert len(data["layers"]) == len(rep.diffs)
    out = tmp_path / "r.html"
    page = rep.to_html(out)
    assert out.read_text() == page
    pngs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(pngs) == 2  # per-layer error plot and latency chart
    assert all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "<script" not in page and "http" not in page.split("<body>")[1]
    assert "class='bad'" in page  # the divergent row is marked


def test_ok_report_says_so(tiny_onnx):
    rep = xray(tiny_onnx["folded"], tiny_onnx["ref"], n_random=1, latency=False)
    assert rep.cause is None and "first divergent layer: none" in rep.summary()
    assert rep.as_dict()["cause"] is None
