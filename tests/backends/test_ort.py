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


def _residual_swish_onnx(path):
    """x -> c1 -> relu1 -> c2 -> add(c2, relu1) -> relu2 -> c3 -> sigmoid * c3 -> c4 -> y:
    a residual add ORT folds into the convolution before it (with the activation after
    it), and a swish ORT fuses into one QuickGelu node."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    c = 16
    inits = [nh.from_array((0.1 * rng.standard_normal((c, c, 3, 3))).astype(np.float32), f"w{i}")
             for i in range(1, 5)]
    pads = [1, 1, 1, 1]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=pads),
             helper.make_node("Relu", ["a"], ["ra"], name="relu1"),
             helper.make_node("Conv", ["ra", "w2"], ["b"], name="c2", pads=pads),
             helper.make_node("Add", ["b", "ra"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["rs"], name="relu2"),
             helper.make_node("Conv", ["rs", "w3"], ["d"], name="c3", pads=pads),
             helper.make_node("Sigmoid", ["d"], ["sg"], name="sig"),
             helper.make_node("Mul", ["d", "sg"], ["sw"], name="mul"),
             helper.make_node("Conv", ["sw", "w4"], ["y"], name="c4", pads=pads)]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 16, 16])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.mark.integration
def test_profile_attributes_a_folded_residual_add_and_a_quickgelu_to_their_nodes(tmp_path):
    pytest.importorskip("onnxruntime")
    from nnmeter.backends import get_backend

    path = _residual_swish_onnx(tmp_path / "res.onnx")
    nodes = get_backend("ort-cpu").profile(path, runs=1)
    groups = [set(n.covers) for n in nodes if n.covers]
    # c2 computes the add and relu2 that ORT fused into it, not the next convolution
    assert {"c2", "add", "relu2"} in groups, groups
    assert {"c3"} in groups, groups
    # sigmoid and mul run as ORT's QuickGelu node, named after the mul
    assert {"sig", "mul"} in groups, groups
    assert {"c4"} in groups, groups
    assert sorted(c for g in groups for c in g) == sorted(
        ["c1", "relu1", "c2", "add", "relu2", "c3", "sig", "mul", "c4"])
