import pytest

from nnmeter.xray.instrument import open_runner
from nnmeter.xray.latency import alternative_backends, check_latency


def test_ort_latency_has_per_op_rows(tiny_onnx):
    r = open_runner(tiny_onnx["ref"])
    x = r.feeds_from_canonical([__import__("numpy").zeros((1, 3, 12, 12), "float32")])
    chk = check_latency(r, x, repeats=3)
    assert chk.model_ms > 0 and chk.rows[0].name == "model"
    assert len(chk.rows) > 1  # ORT's profiler gives time per executed node
    assert all(row.measured_ms >= 0 for row in chk.rows)
    assert alternative_backends(r) == []


@pytest.mark.integration
def test_litert_alternatives(pair):
    assert alternative_backends(open_runner(pair["float"].tflite_path)) == ["litert-cpu-ref"]
    ref = open_runner(pair["float"].tflite_path, "litert-cpu-ref")
    assert alternative_backends(ref) == ["litert-cpu"]
    assert ref.reference_kernels
