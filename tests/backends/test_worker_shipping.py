"""A worker fed models by content (as an ssh or Ray runner feeds it): it asks for the
bytes it lacks, keeps what it received, and refuses a damaged copy."""

from __future__ import annotations

import io
import json

import pytest

from nnmeter.backends.protocol import Job, ProtocolSettings
from nnmeter.backends.shipping import ModelInbox, ModelShipper
from nnmeter.backends.worker import serve

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")


def _model(tmp_path):
    from nnmeter.exporters import export
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("m", (1, 8, 8, 8))
    return export(b.build([b.relu(b.x)]), tmp_path / "m.onnx", "onnx")


def _serve(requests):
    inp = io.StringIO("".join(json.dumps(r) + "\n" for r in requests))
    out = io.StringIO()
    serve("ort-cpu", None, inp, out)
    return [json.loads(line) for line in out.getvalue().splitlines()][1:]  # after "ready"


def test_worker_asks_for_missing_bytes_then_keeps_them(tmp_path):
    path = _model(tmp_path)
    job = Job(model="/elsewhere/m.onnx", backend_id="ort-cpu",
              protocol=ProtocolSettings(rounds=1, runs=2, calibrate=False)).as_dict()
    shipper = ModelShipper()
    with_bytes = shipper.fields(path)
    by_name = shipper.fields(path)
    assert "model_data" in with_bytes and "model_data" not in by_name
    replies = _serve([{"id": 1, "cmd": "measure", "job": job, **by_name},
                      {"id": 2, "cmd": "measure", "job": job, **with_bytes},
                      {"id": 3, "cmd": "measure", "job": job, **by_name}])
    assert replies[0]["error_kind"] == "need_model"
    assert replies[1]["ok"] and replies[2]["ok"]  # the third ran on the kept copy


def test_a_damaged_copy_is_refused_and_the_oldest_model_leaves_first(tmp_path):
    inbox = ModelInbox(tmp_path / "in", limit_bytes=5)
    (tmp_path / "in").mkdir()
    shipper = ModelShipper()
    for name, data in (("a", b"aaaa"), ("b", b"bbbb")):
        (tmp_path / name).write_bytes(data)
    fa, fb = shipper.fields(tmp_path / "a"), shipper.fields(tmp_path / "b")
    with pytest.raises(ValueError, match="damaged"):
        inbox.path_for({**fa, "model_data": fb["model_data"]})
    inbox.path_for(fa)
    inbox.path_for(fb)  # 8 bytes > 5: a goes
    assert inbox.path_for({**fa, "model_data": None}) is None
    assert inbox.path_for({**fb, "model_data": None}) is not None
