"""The ``backends``, ``measure`` and ``profile`` subcommands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from nnmeter.commands import backends as cmd


def conv_bn_relu(path: Path, c: int = 8, hw: int = 16) -> Path:
    import onnx
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array((0.1 * rng.standard_normal((c, c, 3, 3))).astype(np.float32), "w")]
    inits += [nh.from_array(v, n) for n, v in (("s", np.ones(c, np.float32)),
              ("b", np.zeros(c, np.float32)), ("m", np.zeros(c, np.float32)),
              ("v", np.ones(c, np.float32)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"],
                              name="bn1"),
             helper.make_node("Relu", ["n"], ["y"], name="relu1")]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, hw, hw])  # noqa
    m = helper.make_model(helper.make_graph(nodes, "g", [vi("x")], [vi("y")], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nnmeter")
    cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(scope="module")
def cbr(tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    return conv_bn_relu(tmp_path_factory.mktemp("cli") / "cbr.onnx")


def test_backends_json(capsys):
    assert _run(["backends", "--json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out[out.index("["):])
    ids = {r["backend_id"] for r in rows}
    assert {"ort-cpu", "litert-cpu", "litert-cpu-ref", "openvino-cpu", "mnn-cpu"} <= ids
    ort = next(r for r in rows if r["backend_id"] == "ort-cpu")
    assert ort["available"] and ort["version"]


@pytest.mark.integration
def test_measure_json_and_table(cbr, capsys):
    assert _run(["measure", str(cbr), "--backend", "ort-cpu", "--rounds", "2", "--runs", "5",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] and d["latency_ms"] > 0 and d["rounds"] >= 2
    # every round timed its 5 runs; a run the OS preempted is timed but not kept
    assert d["extra"]["total_runs"] >= 10
    assert d["rounds"] <= d["runs"] <= d["extra"]["total_runs"]
    assert d["device"]["fingerprint_id"]
    # the memory probe is sampled around the job, against the fastest sample known
    assert len(d["extra"]["memory_probe_ms"]) == 2 and d["extra"]["memory_ratio"] >= 1.0
    assert _run(["measure", str(cbr), "-b", "ort-cpu", "--rounds", "2", "--runs", "5"]) == 0
    out = capsys.readouterr().out
    assert "spread" in out and "memory probe" in out


@pytest.mark.integration
def test_profile_json(cbr, capsys):
    assert _run(["profile", str(cbr), "--backend", "ort-cpu", "--json", "--runs", "2"]) == 0
    nodes = json.loads(capsys.readouterr().out)
    assert any(set(n["covers"]) == {"conv1", "bn1", "relu1"} for n in nodes)


def test_unknown_backend_is_our_error(cbr):
    from nnmeter.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="ort-cpu"):
        _run(["measure", str(cbr), "--backend", "nope-gpu"])


@pytest.mark.integration
def test_garbage_model_raises_backend_error(tmp_path):
    from nnmeter.errors import BackendError

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    with pytest.raises(BackendError, match="bad.onnx"):
        _run(["measure", str(bad), "--backend", "ort-cpu", "--rounds", "1", "--runs", "1"])


@pytest.mark.integration
def test_a_failed_measurement_exits_2_as_the_readme_says(cbr, capsys):
    # a job that cannot finish within its timeout is killed and recorded as failed
    assert _run(["measure", str(cbr), "-b", "ort-cpu", "--timeout", "0.001", "--json"]) == 2
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False and d["extra"]["error_kind"] == "timeout"
    assert _run(["measure", str(cbr), "-b", "ort-cpu", "--timeout", "0.001"]) == 2
    assert "measurement failed (timeout)" in capsys.readouterr().err


@pytest.mark.integration
def test_measure_records_the_timing_lock(cbr, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NNMETER_TIMING_LOCK", str(tmp_path / "t.lock"))
    assert _run(["measure", str(cbr), "-b", "ort-cpu", "--rounds", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["extra"]["timing_lock"] == "held" and d["extra"]["lock_wait_ms"] >= 0
    assert isinstance(d["warnings"], list)
