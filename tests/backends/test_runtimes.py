"""Every ONNX backend that imports here: compile, run, measure in a worker, profile."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import pytest

from nnmeter.backends import Profiler, get_backend, measure, profile
from nnmeter.errors import BackendError

pytestmark = pytest.mark.integration

ONNX_BACKENDS = {"ort-cpu": "onnxruntime", "openvino-cpu": "openvino", "mnn-cpu": "MNN"}
QUICK = dict(rounds=2, round_ms=3.0, warmup_ms=3.0, timeout_s=60.0)


def _need(backend_id: str) -> None:
    try:
        importlib.import_module(ONNX_BACKENDS[backend_id])
    except ImportError as err:
        pytest.skip(f"{backend_id}: runtime not importable ({err})")


@pytest.fixture(scope="module", params=sorted(ONNX_BACKENDS))
def prof(request):
    _need(request.param)
    with Profiler(request.param) as p:
        yield p


def _node_names(path) -> set[str]:
    return {n.name for n in onnx.load(str(path)).graph.node}


@pytest.mark.parametrize("backend_id", sorted(ONNX_BACKENDS))
def test_prepare_run_matches_onnxruntime_reference(backend_id, mbblock_onnx):
    _need(backend_id)
    if backend_id == "mnn-cpu" and "tensorflow" in sys.modules:
        # MNN's converter and TensorFlow abort when loaded in one process (protobuf
        # descriptor clash); the xray tests load TensorFlow when they run first
        pytest.skip("mnn-cpu converts in process, which aborts once TensorFlow is loaded; "
                    "run tests/backends on its own to cover it")
    prepared = get_backend(backend_id).prepare(mbblock_onnx)
    feeds = prepared.random_inputs(0)
    out = prepared.run(feeds)[0]
    ref = onnx.reference.ReferenceEvaluator(str(mbblock_onnx)).run(None, feeds)[0]
    assert out.shape == ref.shape
    # OpenVINO runs bf16 on CPUs that have it: compare loosely
    assert np.allclose(out, ref, atol=0.2 if backend_id == "openvino-cpu" else 1e-3)
    assert prepared.time_once() > 0
    prepared.close()


def test_measure_records_protocol_and_fingerprint(prof, cbr_onnx, mbblock_onnx):
    m1 = prof.measure(cbr_onnx, **QUICK)
    m2 = prof.measure(mbblock_onnx, **QUICK)
    for m in (m1, m2):
        assert m.ok, m.error
        assert m.latency_ms > 0 and m.min_ms > 0 and m.median_ms >= m.min_ms
        assert m.rounds >= 2 and m.extra["total_runs"] >= 2 * 3 and m.spread >= 0
        assert m.rounds <= m.runs <= m.extra["total_runs"]  # preempted runs are dropped
        assert m.extra["calibration_ms"] > 0 and m.extra["timed_ms"] > 0
        assert m.extra["stats"]["min"] <= m.extra["stats"]["median"]
        assert m.backend_id == prof.backend_id and m.model.endswith(".onnx")
    assert m1.device.fingerprint_id == m2.device.fingerprint_id
    assert m1.device.runtime_version and m1.device.settings["threads"] == 1
    assert m1.device.cpu_model


def test_profile_covers_real_nodes(prof, cbr_onnx, mbblock_onnx):
    nodes = prof.profile(cbr_onnx, runs=3)
    names = _node_names(cbr_onnx)
    compute = [n for n in nodes if n.covers]
    assert compute, nodes
    covered = {c for n in compute for c in n.covers}
    assert covered <= names
    # conv, bn and relu run as one fused kernel on every one of these runtimes
    assert any(set(n.covers) == {"conv1", "bn1", "relu1"} for n in compute), nodes
    mb = prof.profile(mbblock_onnx, runs=3)
    mb_names = _node_names(mbblock_onnx)
    mb_covered = [c for n in mb for c in n.covers]
    assert set(mb_covered) == mb_names  # every original node is covered ...
    assert len(mb_covered) == len(set(mb_covered))  # ... exactly once
    assert any(n.time_ms and n.time_ms > 0 for n in mb)


def test_compile_error_raises_or_is_recorded(prof, garbage_onnx, cbr_onnx):
    with pytest.raises(BackendError) as exc:
        prof.measure(garbage_onnx, on_error="raise", **QUICK)
    assert "garbage.onnx" in str(exc.value)
    m = prof.measure(garbage_onnx, **QUICK)
    assert not m.ok and m.extra["error_kind"] == "compile" and m.error
    assert prof.measure(cbr_onnx, **QUICK).ok  # the worker lives on


def test_worker_crash_is_recorded_and_next_job_runs(cbr_onnx):
    _need("ort-cpu")
    with Profiler("ort-cpu") as p:
        pid = p.start().worker_pid
        m = p.measure(cbr_onnx, _hook="exit", **QUICK)
        assert not m.ok and m.extra["error_kind"] == "crash" and "code 17" in m.error
        assert p.restarts == 1
        ok = p.measure(cbr_onnx, **QUICK)
        assert ok.ok and p.worker_pid != pid


def test_worker_hang_times_out_and_next_job_runs(cbr_onnx):
    _need("ort-cpu")
    with Profiler("ort-cpu") as p:
        m = p.measure(cbr_onnx, _hook="hang", **{**QUICK, "timeout_s": 1.0})
        assert not m.ok and m.extra["error_kind"] == "timeout" and "1 s" in m.error
        assert p.measure(cbr_onnx, **QUICK).ok


def test_module_level_measure_and_profile(cbr_onnx):
    _need("ort-cpu")
    m = measure(cbr_onnx, "ort-cpu-t2", **QUICK)
    assert m.ok and m.backend_id == "ort-cpu-t2" and m.device.settings["threads"] == 2
    nodes = profile(cbr_onnx, "ort-cpu", runs=2)
    assert any(n.covers for n in nodes)


def test_measure_model_graph_exports_first():
    _need("ort-cpu")
    exporters = pytest.importorskip("nnmeter.exporters.onnx")
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("tiny", (1, 8, 16, 16))
    g = b.build([b.relu(b.x)])
    assert exporters is not None
    m = measure(g, "ort-cpu", **QUICK)
    assert m.ok and m.model.endswith("tiny.onnx")


def test_exported_models_are_deleted_after_their_job(cbr_onnx):
    _need("ort-cpu")
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("tiny", (1, 8, 16, 16))
    g = b.build([b.relu(b.x)])
    with Profiler("ort-cpu") as p:
        workdir = Path(p._tmp.name)
        assert p.measure(g, **QUICK).ok
        assert p.profile(g, runs=1)
        assert not list(workdir.glob("*.onnx"))  # the profiler's own exports are gone
        assert p.measure(cbr_onnx, **QUICK).ok
        assert Path(cbr_onnx).exists()  # a file the caller gave stays


def test_mnn_graph_dump_holds_the_graph_without_weights(tmp_path):
    _need("mnn-cpu")
    if "tensorflow" in sys.modules:
        pytest.skip("mnn-cpu converts in process, which aborts once TensorFlow is loaded")
    import json

    from onnx import helper
    from onnx import numpy_helper as nh

    from nnmeter.backends.mnn import convert_onnx_to_mnn

    w = nh.from_array(np.full((64, 64, 3, 3), 0.01, np.float32), "w")  # 36,864 weights
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "wide",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64, 8, 8])], [w])
    src = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
    mnn = convert_onnx_to_mnn(src, tmp_path / "wide.mnn", json_file=tmp_path / "wide.json")
    graph = json.loads((tmp_path / "wide.json").read_text())
    assert "Convolution" in {op.get("type") for op in graph["oplists"]}
    assert graph["tensorName"]
    # the weights alone would be 147 kB as floats and several times that as JSON text
    assert (tmp_path / "wide.json").stat().st_size < 20_000 < mnn.stat().st_size


def test_openvino_names_a_pooling_between_two_convolutions():
    """The in-context profile of a layout-following row (training takes it on OpenVINO):
    the runtime names the pooling between the two 1x1 anchors on its own, unfused."""
    _need("openvino-cpu")
    from nnmeter.backends import Profiler
    from nnmeter.predictors.boundary import _profile_row_in_context

    pool = {"h": 16, "w": 16, "cin": 16, "kernel": 3, "stride": 1, "pads": [1, 1, 1, 1],
            "ceil_mode": False, "kernel_w": None, "stride_w": None}
    with Profiler("openvino-cpu-f32") as prof:
        point = _profile_row_in_context(prof, "avgpool", {"config": pool}, 3)
        flat = _profile_row_in_context(prof, "fc", {"config": {"cin": 16, "cout": 8}}, 3)
    assert point["context_ms"] is not None and point["context_ms"] > 0, point
    assert flat["context_ms"] is None and flat["why"]


class _FakeTensor:
    def __init__(self, shape):
        self.shape = shape

    def getShape(self):  # noqa: N802 - MNN's name
        return self.shape


class _FakeInterpreter:
    """MNN's Interpreter as a session it could not resize leaves it: empty outputs and
    runSession returning an error code (3), raising nothing."""

    out_shape = (0, 0, 0, 0)

    def __init__(self, path):
        self.path = path

    def createSession(self, config):  # noqa: N802
        return object()

    def getSessionInputAll(self, session):  # noqa: N802
        return {"input": _FakeTensor((1, 3, 8, 8))}

    def getSessionOutputAll(self, session):  # noqa: N802
        return {"output": _FakeTensor(self.out_shape)}

    def runSession(self, session):  # noqa: N802
        return 3


def test_mnn_refuses_a_session_it_could_not_resize_and_a_failed_run(tmp_path, monkeypatch):
    """torch.onnx's AlexNet has an op MNN cannot infer a shape for: its session ran
    nothing and was timed at 0.0007 ms. Such a session is refused when opened, and a run
    whose runSession returns an error code raises instead of timing nothing."""
    import types

    from nnmeter.backends.mnn import MnnCpuBackend

    fake = types.SimpleNamespace(Interpreter=_FakeInterpreter)
    monkeypatch.setitem(sys.modules, "MNN", fake)
    backend = MnnCpuBackend()
    monkeypatch.setattr(backend, "_convert", lambda path, with_json=False: (
        str(tmp_path / "w"), tmp_path / "m.mnn", None))
    with pytest.raises(BackendError, match="could not infer the shapes of m.onnx.*output"):
        backend._open(tmp_path / "m.onnx")
    monkeypatch.setattr(_FakeInterpreter, "out_shape", (1, 10))
    prepared, _ = backend._open(tmp_path / "m.onnx")
    with pytest.raises(BackendError, match="error code 3"):
        prepared._invoke()
