"""LiteRT backends (XNNPACK and reference kernels) on a tiny exported model."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from nnmeter.backends import Profiler, get_backend

pytestmark = pytest.mark.integration

QUICK = dict(rounds=2, round_ms=3.0, warmup_ms=3.0, timeout_s=60.0)


_EXPORT = """
import sys
from nnmeter.exporters.tflite import export_tflite
from nnmeter.ir import GraphBuilder
b = GraphBuilder("cbr", (1, 8, 16, 16))
export_tflite(b.build([b.relu(b.bn(b.conv(b.x, 8)))]), sys.argv[1])
"""


@pytest.fixture(scope="module")
def cbr_tflite(tmp_path_factory):
    pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT runtime not installed")
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("the TFLite exporter needs TensorFlow")
    pytest.importorskip("nnmeter.exporters.tflite")
    path = tmp_path_factory.mktemp("tfl") / "cbr.tflite"
    # TensorFlow and MNN's converter abort when loaded in one process (protobuf
    # descriptor clash): keep TensorFlow out of the test process
    subprocess.run([sys.executable, "-c", _EXPORT, str(path)], check=True,
                   capture_output=True, timeout=300)
    return path


@pytest.mark.parametrize("backend_id", ["litert-cpu", "litert-cpu-ref"])
def test_litert_measure_and_profile(backend_id, cbr_tflite, tmp_path):
    prepared = get_backend(backend_id).prepare(cbr_tflite)
    out = prepared.run(prepared.random_inputs())
    assert out[0].shape[0] == 1 and prepared.time_once() > 0
    with Profiler(backend_id) as prof:
        m1 = prof.measure(cbr_tflite, **QUICK)
        m2 = prof.measure(cbr_tflite, **QUICK)
        assert m1.ok and m2.ok, (m1.error, m2.error)
        assert m1.latency_ms > 0 and m1.rounds >= 2 and m1.extra["total_runs"] >= 10
        # a run the OS preempted is timed but not kept; a kept round keeps at least half
        assert m1.rounds <= m1.runs <= m1.extra["total_runs"]
        assert m1.device.fingerprint_id == m2.device.fingerprint_id
        assert m1.device.settings["op_resolver"] == ("AUTO" if backend_id == "litert-cpu"
                                                     else "BUILTIN_REF")
        nodes = prof.profile(cbr_tflite)
        assert nodes and all(n.covers for n in nodes)
        if backend_id == "litert-cpu":
            assert any(n.op_type == "DELEGATE" for n in nodes)
        else:
            assert all(n.op_type != "DELEGATE" for n in nodes)
        bad = tmp_path / "bad.tflite"
        bad.write_bytes(b"not a flatbuffer")
        m = prof.measure(bad, **QUICK)
        assert not m.ok and m.extra["error_kind"] in ("compile", "crash")
        assert prof.measure(cbr_tflite, **QUICK).ok


@pytest.fixture
def built_interpreters(monkeypatch):
    """The keyword arguments of every LiteRT Interpreter built while the test runs."""
    import ai_edge_litert.interpreter as lite

    built: list[dict] = []
    real = lite.Interpreter

    class Spy(real):
        def __init__(self, *args, **kwargs):
            built.append(dict(kwargs))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(lite, "Interpreter", Spy)
    return built


@pytest.mark.parametrize("backend_id", ["litert-cpu", "litert-cpu-ref-t2"])
def test_litert_recording_uses_the_measurement_interpreter(backend_id, cbr_tflite,
                                                           built_interpreters):
    import numpy as np
    from ai_edge_litert.interpreter import OpResolverType

    backend = get_backend(backend_id)
    prepared = backend.prepare(cbr_tflite)
    (measured,) = built_interpreters
    assert measured["num_threads"] == backend.threads
    built_interpreters.clear()
    rec = backend.prepare_recording(cbr_tflite)
    real, recorder = built_interpreters
    assert real == measured  # run() and time_once() use the measurement interpreter
    # the recorder: the same threads, every tensor kept, and no delegate (which would
    # hide the tensors inside it)
    assert recorder == {**measured, "experimental_preserve_all_tensors": True,
                        "experimental_op_resolver_type": OpResolverType.BUILTIN_REF
                        if backend_id.startswith("litert-cpu-ref")
                        else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}

    feeds = prepared.random_inputs(0)
    values = rec.record(feeds)
    ops = rec.recorder._get_ops_details()
    assert all(o["op_name"] != "DELEGATE" for o in ops)
    outputs = {int(t) for o in ops for t in o["outputs"]}
    assert outputs <= set(values) and set(values) == set(rec.tensor_indices)
    out_index = rec.recorder.get_output_details()[0]["index"]
    expected = prepared.run(feeds)[0]
    assert np.allclose(rec.run(feeds)[0], expected, atol=1e-4)
    assert np.allclose(values[out_index], expected, atol=1e-4)
    assert rec.time_once() > 0
    assert rec.op_times_ms(feeds) == {}  # the Python API cannot time ops
