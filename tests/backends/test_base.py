"""Records, backend ids and the registry (no runtime needed)."""

from __future__ import annotations

import math

import pytest

from nnmeter.backends import BACKENDS, get_backend
from nnmeter.backends.base import DeviceInfo, ExecutedNode, Measurement, parse_backend_id
from nnmeter.errors import BackendError, UnknownNameError


def test_parse_backend_id_thread_suffix():
    assert parse_backend_id("ort-cpu") == ("ort-cpu", 1)
    assert parse_backend_id("ort-cpu-t4") == ("ort-cpu", 4)
    assert parse_backend_id("litert-cpu-ref-t2") == ("litert-cpu-ref", 2)
    assert parse_backend_id("litert-cpu-ref") == ("litert-cpu-ref", 1)


def test_registry_ids_and_threads():
    assert {"ort-cpu", "litert-cpu", "litert-cpu-ref", "openvino-cpu", "mnn-cpu"} <= set(
        BACKENDS.names())
    b = get_backend("ort-cpu-t4")
    assert (b.id, b.threads, b.model_format) == ("ort-cpu-t4", 4, "onnx")
    assert get_backend("litert-cpu").model_format == "tflite"
    assert get_backend("litert-cpu-ref").settings()["op_resolver"] == "BUILTIN_REF"


def test_unknown_backend_lists_known_ids():
    with pytest.raises(UnknownNameError) as exc:
        get_backend("tvm-gpu")
    assert "tvm-gpu" in str(exc.value) and "ort-cpu" in str(exc.value)


def test_device_info_fingerprint_stable_and_sensitive():
    a = DeviceInfo("AMD EPYC", 2, "onnxruntime", "1.0", {"threads": 1}, "x86_64")
    b = DeviceInfo.from_dict(a.as_dict())
    assert a == b and a.fingerprint_id == b.fingerprint_id and len(a.fingerprint_id) == 12
    c = DeviceInfo("AMD EPYC", 2, "onnxruntime", "1.0", {"threads": 4}, "x86_64")
    assert c.fingerprint_id != a.fingerprint_id


def test_measurement_round_trip_and_failed():
    d = DeviceInfo("cpu", 2, "rt", "1", {"threads": 1})
    m = Measurement(1.5, 1.6, 1.4, 0.1, 0.02, 5, 100, d, extra={"stats": {"min": 1.4}},
                    backend_id="ort-cpu", model="m.onnx")
    assert Measurement.from_dict(m.as_dict()) == m
    f = Measurement.failed("boom", kind="crash", backend_id="ort-cpu", model="m.onnx")
    dd = f.as_dict()
    assert dd["latency_ms"] is None and dd["ok"] is False and dd["extra"]["error_kind"] == "crash"
    back = Measurement.from_dict(dd)
    assert not back.ok and math.isnan(back.latency_ms) and back.error == "boom"


def test_executed_node_round_trip():
    n = ExecutedNode("y_nchwc", "Conv", ("conv1", "relu1"), 0.1)
    assert ExecutedNode.from_dict(n.as_dict()) == n


def test_prepare_rejects_wrong_format_and_missing_file(tmp_path):
    b = get_backend("ort-cpu")
    with pytest.raises(BackendError, match="does not exist"):
        b.prepare(tmp_path / "nope.onnx")
    p = tmp_path / "m.tflite"
    p.write_bytes(b"x")
    with pytest.raises(BackendError, match=r"\.onnx"):
        b.prepare(p)


def test_a_backend_without_recording_says_so_before_touching_the_file(tmp_path):
    with pytest.raises(NotImplementedError, match="openvino-cpu cannot record"):
        get_backend("openvino-cpu").prepare_recording(tmp_path / "never-read.onnx")


def test_profiler_refuses_to_pin_a_multithread_backend_to_one_core():
    # its two threads would take turns on the core: the calibrations of the first -t2
    # datasets were measured that way (1.7x the one-thread time instead of 0.6x)
    from nnmeter.backends import Profiler
    from nnmeter.predictors import in_model, reorder, weight_stream, boundary
    import inspect

    with pytest.raises(ValueError, match="ort-cpu-t2.*2 threads to one core"):
        Profiler("ort-cpu-t2", core=1)
    assert Profiler("ort-cpu-t2").core is None  # auto: unpinned, no worker started yet
    assert Profiler("ort-cpu-t2", core=None).core is None
    # every calibration measures with the automatic choice unless told otherwise
    for fn in (in_model.measure_in_model, in_model.add_in_model_pass,
               reorder.measure_reorders, weight_stream.measure_weight_stream,
               boundary.measure_boundary):
        assert inspect.signature(fn).parameters["core"].default == "auto", fn.__name__
