"""Kernel boundary cost: fit, storage, removal from kernel data, fingerprint check."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nnmeter.errors import DatasetError, FingerprintMismatchError
from nnmeter.kernels import KERNEL_TYPES
from nnmeter.predictors.boundary import (
    BOUNDARY_FILE, BoundaryPoint, boundary_cost_ms, boundary_elements, fit_boundary,
    read_boundary, remove_boundary, select_calibration_rows, write_boundary,
)
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.train import KernelData

RELU = KERNEL_TYPES.get("relu")
CONV = KERNEL_TYPES.get("conv-bn-relu")


def _points(family, fixed, a_in, a_out, sizes):
    return [BoundaryPoint("relu", family, n, 2 * n, fixed + a_in * n + a_out * 2 * n)
            for n in sizes]


def test_boundary_elements_sum_inputs_and_outputs():
    assert boundary_elements(RELU, RELU.config_cls(h=4, w=5, cin=3)) == (60, 60)
    cfg = CONV.config_cls(h=8, w=8, cin=16, cout=32, kernel=3, stride=2)
    assert boundary_elements(CONV, cfg) == (16 * 64, 32 * 16)
    add = KERNEL_TYPES.get("add")
    n_in, n_out = boundary_elements(add, add.config_from_dict({"h": 4, "w": 4, "cin": 8}))
    assert (n_in, n_out) == (2 * 128, 128)  # both operands are model inputs


def test_fit_recovers_linear_cost_and_keeps_shared_when_families_agree():
    pts = _points("a", 0.01, 2e-6, 1e-6, [100, 1000, 5000, 20000, 80000, 3000, 700]) + \
        [BoundaryPoint("relu", "a", 4000, 100, 0.01 + 2e-6 * 4000 + 1e-6 * 100)]
    fit = fit_boundary(pts)
    assert fit["shared"] == pytest.approx([0.01, 2e-6, 1e-6], rel=1e-6, abs=1e-9)
    assert fit["families"] == {}
    assert boundary_cost_ms(fit, "other", 1000, 500) == pytest.approx(0.01 + 2e-3 + 5e-4)


def test_fit_gives_a_deviating_family_its_own_coefficients():
    sizes = [100, 1000, 5000, 20000, 80000, 3000, 700]
    pts = _points("a", 0.01, 2e-6, 0.0, sizes) + _points("b", 0.0, 0.0, 0.0, sizes)
    fit = fit_boundary(pts, min_family_points=6)
    assert set(fit["families"]) >= {"b"}
    assert boundary_cost_ms(fit, "b", 5000, 10000) == pytest.approx(0.0, abs=1e-9)
    assert boundary_cost_ms(fit, "a", 5000, 10000) == pytest.approx(0.01 + 2e-6 * 5000, rel=1e-6)
    # too few points: no family fit
    assert fit_boundary(pts, min_family_points=99)["families"] == {}


def test_fit_never_returns_negative_coefficients():
    pts = [BoundaryPoint("relu", "a", n, n, max(0.05 - 1e-6 * n, 0.0)) for n in
           (10, 100, 1000, 10000, 40000)]
    assert min(fit_boundary(pts)["shared"]) >= 0.0
    with pytest.raises(ValueError):
        fit_boundary([])


def _dataset(tmp_path, fid="abc123"):
    ds = KernelDataset(tmp_path / "ds", "openvino-cpu")
    ds.check_device({"fingerprint_id": fid})
    return ds


def _relu_data(sizes, y):
    cfgs = [RELU.config_cls(h=h, w=h, cin=c) for h, c in sizes]
    n = len(cfgs)
    return {"relu": KernelData("relu", cfgs, np.zeros((n, 1)), np.asarray(y, dtype=float),
                               np.zeros((n, 1)), ["initial"] * n)}


def _record(fid, shared, families=None):
    return {"fingerprint_id": fid, "backend_id": "openvino-cpu",
            "fit": {"shared": shared, "families": families or {}, "rms_ms": {}}, "points": []}


def test_remove_boundary_subtracts_the_fit_with_a_floor(tmp_path):
    ds = _dataset(tmp_path)
    write_boundary(ds.directory, _record("abc123", [0.01, 1e-5, 0.0]))
    # relu 4x4x4: 64 in, 64 out -> 0.01 + 0.00064 ms
    data = _relu_data([(4, 4), (4, 4)], [0.1, 0.012])
    fit = remove_boundary(ds, data)
    assert fit["shared"] == [0.01, 1e-5, 0.0]
    assert data["relu"].y[0] == pytest.approx(0.1 - 0.01064)
    assert data["relu"].y[1] == pytest.approx(0.25 * 0.012)  # floor


def test_remove_boundary_uses_family_coefficients(tmp_path):
    ds = _dataset(tmp_path)
    write_boundary(ds.directory, _record("abc123", [0.05, 0.0, 0.0],
                                         {"activation": [0.02, 0.0, 0.0]}))
    data = _relu_data([(4, 4)], [0.1])
    remove_boundary(ds, data)
    assert data["relu"].y[0] == pytest.approx(0.08)


def test_remove_boundary_without_calibration_changes_nothing(tmp_path):
    ds = _dataset(tmp_path)
    data = _relu_data([(4, 4)], [0.1])
    assert remove_boundary(ds, data) is None
    assert data["relu"].y[0] == 0.1


def test_remove_boundary_skips_a_calibration_marked_not_to_apply(tmp_path):
    ds = _dataset(tmp_path)
    write_boundary(ds.directory, {**_record("abc123", [0.01, 0.0, 0.0]), "apply": False})
    data = _relu_data([(4, 4)], [0.1])
    assert remove_boundary(ds, data) is None
    assert data["relu"].y[0] == 0.1


def test_remove_boundary_refuses_another_fingerprint(tmp_path):
    ds = _dataset(tmp_path, fid="abc123")
    write_boundary(ds.directory, _record("other9", [0.01, 0.0, 0.0]))
    data = _relu_data([(4, 4)], [0.1])
    with pytest.raises(FingerprintMismatchError, match="other9"):
        remove_boundary(ds, data)
    assert data["relu"].y[0] == 0.1


def test_read_boundary_rejects_broken_files(tmp_path):
    ds = _dataset(tmp_path)
    (ds.directory / BOUNDARY_FILE).write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        read_boundary(ds)
    (ds.directory / BOUNDARY_FILE).write_text(json.dumps({"fingerprint_id": "abc123"}))
    with pytest.raises(DatasetError, match="fit.shared"):
        read_boundary(ds)


def test_select_calibration_rows_spreads_over_sizes(tmp_path):
    ds = _dataset(tmp_path)
    for c in range(1, 41):
        ds.append("relu", {"config": {"h": 8, "w": 8, "cin": c}, "latency_ms": 0.01 * c})
    ds.append("relu", {"config": {"h": 8, "w": 8, "cin": 99}, "latency_ms": None})
    picked = select_calibration_rows(ds, per_family=4)
    assert picked == select_calibration_rows(ds, per_family=4)  # deterministic
    cins = sorted(row["config"]["cin"] for _, row in picked)
    assert len(cins) == 4 and all(t == "relu" for t, _ in picked)
    # one pick per quarter of the size range; the unmeasured row is never picked
    assert [(c - 1) // 10 for c in cins] == [0, 1, 2, 3]


class _FakeBackend:
    def __init__(self, fid):
        self.fid = fid

    def device_info(self):
        class _Info:
            fingerprint_id = self.fid
        return _Info()


class _FakeProfiler:
    """Stands in for a backend worker: an input and an output reorder around the kernel,
    each 1 µs + 1 ns per element."""

    fid = "abc123"

    def __init__(self, backend_id, core=None):
        self.backend = _FakeBackend(self.fid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def profile(self, graph, runs=10):
        import math

        from nnmeter.backends.base import ExecutedNode

        n_in = sum(math.prod(graph.node(n).output_shape) for n in graph.input_names)
        n_out = sum(math.prod(graph.shape_of(r)) for r in graph.outputs)
        return [ExecutedNode("in", "Reorder", (), 1e-3 + 1e-6 * n_in),
                ExecutedNode("k", "Eltwise", ("relu",), 0.04),
                # an uncovered node that is not a layout conversion is kernel work
                ExecutedNode("shuffle", "ShuffleChannels", (), 0.01),
                ExecutedNode("out", "Reorder", (), 1e-3 + 1e-6 * n_out)]


def test_measure_boundary_fits_the_uncovered_nodes(tmp_path, monkeypatch):
    import nnmeter.backends
    from nnmeter.predictors.boundary import measure_boundary

    ds = _dataset(tmp_path)
    for c in range(1, 13):
        ds.append("relu", {"config": {"h": 4 * c, "w": 8, "cin": 3 + c}, "latency_ms": 0.1})
    monkeypatch.setattr(nnmeter.backends, "Profiler", _FakeProfiler)
    record = measure_boundary("openvino-cpu", ds.directory, per_family=6)
    assert record["fingerprint_id"] == "abc123" and len(record["points"]) == 6
    p = record["points"][0]
    assert p["boundary_nodes"] == ("Reorder", "Reorder")
    assert p["kernel_ms"] == pytest.approx(0.05)
    assert p["boundary_ms"] == pytest.approx(2e-3 + 1e-6 * (p["input_elements"] +
                                                             p["output_elements"]))
    # relu: input and output elements are equal, so only their sum is identified
    fixed, a_in, a_out = record["fit"]["shared"]
    assert fixed == pytest.approx(2e-3, rel=1e-6) and a_in + a_out == pytest.approx(2e-6)
    write_boundary(ds.directory, record)
    assert read_boundary(ds)["fit"] == record["fit"]


def test_measure_boundary_refuses_another_device(tmp_path, monkeypatch):
    import nnmeter.backends
    from nnmeter.predictors.boundary import measure_boundary

    ds = _dataset(tmp_path, fid="zzz999")
    ds.append("relu", {"config": {"h": 4, "w": 8, "cin": 3}, "latency_ms": 0.1})
    monkeypatch.setattr(nnmeter.backends, "Profiler", _FakeProfiler)
    with pytest.raises(FingerprintMismatchError, match="zzz999"):
        measure_boundary("openvino-cpu", ds.directory)


def _relu_rows(ds, n, latency=0.1):
    for c in range(1, n + 1):
        ds.append("relu", {"config": {"h": 4 * c, "w": 8, "cin": 3 + c}, "latency_ms": latency})


def test_measure_row_edges_profiles_every_row_once_and_resumes(tmp_path, monkeypatch):
    import time

    import nnmeter.backends
    from nnmeter.predictors.boundary import (
        ROW_EDGES_FILE, measure_row_edges, planned_row_edges, read_row_edges, row_key,
    )

    ds = _dataset(tmp_path)
    _relu_rows(ds, 5)
    ds.append("relu", {"config": {"h": 4, "w": 8, "cin": 4}, "latency_ms": 0.2})  # a repeat
    ds.append("relu", {"config": {"h": 9, "w": 9, "cin": 9}, "latency_ms": None})  # failed
    monkeypatch.setattr(nnmeter.backends, "Profiler", _FakeProfiler)
    assert planned_row_edges("openvino-cpu", ds.directory) == 5
    # a deadline already passed profiles nothing and loses nothing
    out = measure_row_edges("openvino-cpu", ds.directory, deadline=time.monotonic() - 1)
    assert out == {"profiled": 0, "failed": 0, "remaining": 5}
    out = measure_row_edges("openvino-cpu", ds.directory)
    assert out == {"profiled": 5, "failed": 0, "remaining": 0}
    assert (ds.directory / ROW_EDGES_FILE).exists()
    assert ROW_EDGES_FILE not in {p.name for p in ds.files()}  # not kernel rows
    points = read_row_edges(ds)
    p = points[row_key("relu", {"h": 4, "w": 8, "cin": 4})]
    assert p.kernel_ms == pytest.approx(0.05) and p.boundary_nodes == ("Reorder", "Reorder")
    assert p.boundary_ms == pytest.approx(2e-3 + 2e-6 * 4 * 8 * 4)
    # everything profiled: a second call has nothing to do
    assert planned_row_edges("openvino-cpu", ds.directory) == 0
    assert measure_row_edges("openvino-cpu", ds.directory)["profiled"] == 0


def test_measure_row_edges_refuses_another_device(tmp_path, monkeypatch):
    import nnmeter.backends
    from nnmeter.predictors.boundary import measure_row_edges

    ds = _dataset(tmp_path, fid="zzz999")
    _relu_rows(ds, 2)
    monkeypatch.setattr(nnmeter.backends, "Profiler", _FakeProfiler)
    with pytest.raises(FingerprintMismatchError, match="zzz999"):
        measure_row_edges("openvino-cpu", ds.directory)
    # and points of another device's file are not read back as this dataset's
    other = _dataset(tmp_path / "o", fid="abc123")
    _relu_rows(other, 2)
    measure_row_edges("openvino-cpu", other.directory)
    from nnmeter.predictors.boundary import ROW_EDGES_FILE, read_row_edges
    (ds.directory / ROW_EDGES_FILE).write_bytes((other.directory / ROW_EDGES_FILE).read_bytes())
    assert read_row_edges(ds) == {}


def test_edges_term_takes_a_profiled_rows_own_share(tmp_path):
    """A row with its own profile loses its measured edges (its kernel's share of the
    profile), however far they are from the fit; a row without one loses the fit."""
    from nnmeter.predictors.boundary import ROW_EDGES_FILE, row_key
    from nnmeter.predictors.calibration_points import CalibrationPoints
    from nnmeter.predictors.composition import FitContext
    from nnmeter.predictors.facts import DeviceFacts
    from nnmeter.predictors.kernel_data import load_kernel_data
    from nnmeter.predictors.terms import EdgesTerm

    ds = _dataset(tmp_path)
    ds.append("relu", {"config": {"h": 4, "w": 4, "cin": 4}, "latency_ms": 1.0})
    ds.append("relu", {"config": {"h": 8, "w": 4, "cin": 4}, "latency_ms": 1.0})
    write_boundary(ds.directory, _record("abc123", [0.1, 0.0, 0.0]))
    slow = BoundaryPoint("relu", "activation", 64, 64, boundary_ms=0.9, kernel_ms=0.1)
    CalibrationPoints.at(ds.directory / ROW_EDGES_FILE, "abc123").append(
        row_key("relu", {"h": 4, "w": 4, "cin": 4}), dict(vars(slow)))
    data = {"relu": load_kernel_data(ds, "relu")}
    term = EdgesTerm.fit(FitContext("openvino-cpu", ds, data, DeviceFacts(row_edges=True), None))
    term.remove(data)
    assert data["relu"].y.tolist() == pytest.approx([0.1, 0.9])
    # a runtime whose rows' own profiles are not taken (MNN): the fit for every row
    data = {"relu": load_kernel_data(ds, "relu")}
    term = EdgesTerm.fit(FitContext("mnn-cpu", ds, data, DeviceFacts(), None))
    term.remove(data)
    assert data["relu"].y.tolist() == pytest.approx([0.9, 0.9])
    # subsets keep each row's stored config, so held-out rows keep their profiles
    assert data["relu"].subset(np.array([False, True])).stored == [{"h": 8, "w": 4, "cin": 4}]


def test_row_edges_are_part_of_the_predictor_cache_key(tmp_path):
    from nnmeter.predictors import _record_files
    from nnmeter.predictors.boundary import ROW_EDGES_FILE

    ds = _dataset(tmp_path)
    _relu_rows(ds, 1)
    assert ROW_EDGES_FILE not in {p.name for p in _record_files(ds)}
    (ds.directory / ROW_EDGES_FILE).write_text("")
    assert ROW_EDGES_FILE in {p.name for p in _record_files(ds)}


class _PlainProfiler(_FakeProfiler):
    """Alone, the kernel runs in the plain layout (no conversion at its edges, 0.04 ms);
    between two convolutions (``.anchor`` nodes) it takes 0.01 ms."""

    def profile(self, graph, runs=10):
        from nnmeter.backends.base import ExecutedNode

        anchors = [n.name for n in graph.nodes() if n.name.endswith((".anchor", ".anchor1"))]
        kernel = [n.name for n in graph.nodes() if n.op != "input" and n.name not in anchors]
        if not anchors:
            return [ExecutedNode("k", "Pooling", tuple(kernel), 0.04)]
        return ([ExecutedNode(a, "Convolution", (a,), 0.5) for a in anchors]
                + [ExecutedNode("k", "Pooling", tuple(kernel), 0.01)])


def test_measure_row_context_profiles_plain_layout_rows_in_context(tmp_path, monkeypatch):
    """Rows of a layout-following family whose own profile had no edge conversion are
    profiled between two convolutions (resumably); training then takes their
    in-context share; a row with conversions of its own, or of a convolution, is not."""
    import nnmeter.backends
    from nnmeter.predictors.boundary import (
        ROW_CONTEXT_FILE, measure_row_context, measure_row_edges, planned_row_context,
        read_row_context, row_key,
    )
    from nnmeter.predictors.composition import FitContext
    from nnmeter.predictors.facts import DeviceFacts
    from nnmeter.predictors.kernel_data import load_kernel_data
    from nnmeter.predictors.terms import EdgesTerm

    ds = _dataset(tmp_path)
    pool = {"h": 8, "w": 8, "cin": 16, "kernel": 2, "stride": 2, "pads": [0, 0, 0, 0],
            "ceil_mode": False, "kernel_w": None, "stride_w": None}
    ds.append("maxpool", {"config": pool, "latency_ms": 0.05})
    conv = {"h": 8, "w": 8, "cin": 4, "cout": 4, "kernel": 1, "stride": 1, "groups": 1,
            "pads": None}
    ds.append("conv", {"config": conv, "latency_ms": 0.05})
    monkeypatch.setattr(nnmeter.backends, "Profiler", _PlainProfiler)
    # nothing to do before the rows' own profiles exist
    assert planned_row_context("openvino-cpu", ds.directory) == 0
    measure_row_edges("openvino-cpu", ds.directory)
    assert planned_row_context("openvino-cpu", ds.directory) == 1  # the pooling only
    assert measure_row_context("openvino-cpu", ds.directory) == {
        "profiled": 1, "failed": 0, "remaining": 0}
    assert planned_row_context("openvino-cpu", ds.directory) == 0
    assert ROW_CONTEXT_FILE not in {p.name for p in ds.files()}
    assert read_row_context(ds) == {row_key("maxpool", pool): pytest.approx(0.01)}
    write_boundary(ds.directory, _record("abc123", [0.0, 0.0, 0.0]))
    data = {"maxpool": load_kernel_data(ds, "maxpool")}
    facts = DeviceFacts(row_edges=True, row_context=True)
    EdgesTerm.fit(FitContext("openvino-cpu", ds, data, facts, None)).remove(data)
    assert data["maxpool"].y.tolist() == pytest.approx([0.05 * 0.01 / 0.04])
    # without the fact, the row keeps its share of its own profile (all of it)
    data = {"maxpool": load_kernel_data(ds, "maxpool")}
    EdgesTerm.fit(FitContext("openvino-cpu", ds, data, DeviceFacts(row_edges=True),
                             None)).remove(data)
    assert data["maxpool"].y.tolist() == pytest.approx([0.05])
