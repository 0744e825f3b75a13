"""ort-cpu in process: recording sessions take the measurement's session options."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference
import pytest

from nnmeter.backends import get_backend
from nnmeter.backends.ort import OrtCpuBackend, OrtRecording
from nnmeter.errors import BackendError

pytestmark = pytest.mark.integration

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

#: SessionOptions fields that change how a session runs
FIELDS = ("intra_op_num_threads", "inter_op_num_threads", "execution_mode",
          "graph_optimization_level", "log_severity_level")
SPINNING = "session.intra_op.allow_spinning"


def _options(so) -> dict:
    d = {f: getattr(so, f) for f in FIELDS}
    try:
        d[SPINNING] = so.get_session_config_entry(SPINNING)
    except RuntimeError:  # an entry never set cannot be read
        d[SPINNING] = None
    return d


@pytest.fixture
def built_sessions(monkeypatch):
    """The options of every InferenceSession built while the test runs, in order."""
    built: list[tuple[object, dict]] = []
    real = ort.InferenceSession

    class Spy(real):
        def __init__(self, model, sess_options=None, *args, **kwargs):
            super().__init__(model, sess_options, *args, **kwargs)
            built.append((model, _options(self.get_session_options())))

    monkeypatch.setattr(ort, "InferenceSession", Spy)
    return built


@pytest.mark.parametrize("threads", [1, 3])
def test_every_recording_session_has_the_measurement_options(threads, mbblock_onnx,
                                                             built_sessions):
    backend = OrtCpuBackend(threads=threads)
    prepared = backend.prepare(mbblock_onnx)
    measured = _options(prepared.session.get_session_options())
    assert measured["intra_op_num_threads"] == threads
    assert measured["inter_op_num_threads"] == 1
    assert measured["execution_mode"] == ort.ExecutionMode.ORT_SEQUENTIAL
    assert measured["graph_optimization_level"] == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert measured[SPINNING] == ("0" if threads == 1 else None)

    rec = backend.prepare_recording(mbblock_onnx)
    assert isinstance(rec, OrtRecording)
    # run() and time_once() go through a session with exactly the measurement options
    assert _options(rec.session.get_session_options()) == measured
    # the values session differs in one field only: no graph rewriting, so no value is
    # fused away
    values = _options(rec.values_session.get_session_options())
    assert values == {**measured,
                      "graph_optimization_level": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}

    built_sessions.clear()
    rec.op_times_ms(rec.random_inputs(), runs=2)
    assert [opts for _, opts in built_sessions] == [measured]  # the profiling session


def test_recording_returns_every_tensor_and_per_op_times(mbblock_onnx):
    backend = get_backend("ort-cpu")
    rec = backend.prepare_recording(mbblock_onnx)
    feeds = rec.random_inputs(0)
    values = rec.record(feeds)
    node_outputs = {o for n in onnx.load(str(mbblock_onnx)).graph.node for o in n.output}
    assert set(values) == node_outputs  # t1 ... t8 and y; the input is not an output
    ref = onnx.reference.ReferenceEvaluator(str(mbblock_onnx))
    t3, y = ref.run(["t3", "y"], feeds)
    assert np.allclose(values["t3"], t3, atol=1e-4)  # an intermediate fused in the real run
    assert np.allclose(values["y"], y, atol=1e-4)
    assert np.allclose(rec.run(feeds)[0], y, atol=1e-4)
    assert rec.time_once() > 0

    times = rec.op_times_ms(feeds, runs=3)
    # the nodes of ORT's optimised graph, the same ones the backend's profile times
    assert times and set(times) <= {n.name for n in backend.profile(mbblock_onnx, runs=1)}
    assert all(t >= 0 for t in times.values()) and any(t > 0 for t in times.values())


def test_recording_a_broken_model_raises_backend_error(garbage_onnx, tmp_path):
    backend = get_backend("ort-cpu")
    with pytest.raises(BackendError, match="garbage.onnx"):
        backend.prepare_recording(garbage_onnx)
    with pytest.raises(BackendError, match="does not exist"):
        backend.prepare_recording(tmp_path / "missing.onnx")
