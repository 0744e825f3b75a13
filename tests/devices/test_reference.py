"""The speed reference: probes recorded beside the data, their drift, and a real build
that records them."""

from __future__ import annotations

import json

import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.devices.reference import (DRIFT_WARN, REFERENCE_FILE, SPEED_WARN,
                                       ProbingProfiler, SpeedReference, compare_records,
                                       drift_warning, read_reference, reference_graph,
                                       set_against_builds, speed_against_build,
                                       speed_change_warning, summarize)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class _Prof:
    """Times the reference at ``ms[i]`` on its i-th call; other graphs at 1 ms."""

    def __init__(self, ms, fail=False):
        self.ms, self.fail, self.graphs = list(ms), fail, []
        self.device = DeviceInfo(cpu_model="fake", cores=2, runtime="fake",
                                 runtime_version="1", settings={"threads": 1})
        self.opened = True

    def measure(self, graph, on_error="record", **_):
        self.graphs.append(graph.name)
        if self.fail:
            nan = float("nan")
            return Measurement(latency_ms=nan, median_ms=nan, min_ms=nan, std_ms=nan,
                               spread=nan, rounds=0, runs=0, device=None, ok=False,
                               error="boom")
        ms = self.ms.pop(0) if graph.name == "speed-reference" else 1.0
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.01,
                           rounds=1, runs=1, device=self.device)

    def close(self):
        self.opened = False


def test_reference_model_is_fixed():
    g = reference_graph()
    assert g.name == "speed-reference"
    assert [n.op for n in g.nodes()][1:] == ["conv", "relu", "dwconv", "relu", "conv", "relu"]
    # the same model every time: records made with it compare
    assert reference_graph().cost().flops == g.cost().flops > 0


def test_probes_are_recorded_at_most_once_an_interval(tmp_path):
    clock = _Clock()
    ref = SpeedReference(tmp_path, every_s=100, clock=clock)
    prof = _Prof([0.5, 0.55, 0.6])
    assert ref.probe(prof, "start")["latency_ms"] == 0.5
    clock.t = 50
    assert ref.probe(prof, "profile") is None  # not due
    assert ref.probe(prof, "calibrate", force=True)["latency_ms"] == 0.55
    clock.t = 151
    assert ref.probe(prof, "profile")["phase"] == "profile"
    rows = read_reference(tmp_path)
    assert [r["phase"] for r in rows] == ["start", "calibrate", "profile"]
    assert rows[0]["fingerprint_id"] == prof.device.fingerprint_id
    assert ref.points == rows


def test_a_failed_probe_is_skipped_and_never_raises(tmp_path, caplog):
    ref = SpeedReference(tmp_path)
    assert ref.probe(_Prof([], fail=True), "start", force=True) is None
    assert not (tmp_path / REFERENCE_FILE).exists()
    assert "speed reference" in caplog.text


def test_torn_and_foreign_lines_are_skipped(tmp_path):
    (tmp_path / REFERENCE_FILE).write_text(
        json.dumps({"latency_ms": 0.5}) + "\n" + '{"latency_ms": 0.' + "\n"
        + json.dumps({"latency_ms": -1}) + "\n" + json.dumps([1, 2]) + "\n"
        + json.dumps({"latency_ms": 0.52}) + "\n")
    assert [r["latency_ms"] for r in read_reference(tmp_path)] == [0.5, 0.52]
    assert read_reference(tmp_path / "none") == []
    # a probe after a torn last line (a killed write) starts a line of its own
    with open(tmp_path / REFERENCE_FILE, "a") as fh:
        fh.write('{"latency_ms": 0.')
    SpeedReference(tmp_path).probe(_Prof([0.61]), "start", force=True)
    assert [r["latency_ms"] for r in read_reference(tmp_path)] == [0.5, 0.52, 0.61]


def test_drift_summary_warning_and_comparison():
    steady = [{"latency_ms": 0.50}, {"latency_ms": 0.51}]
    s = summarize(steady)
    assert s["probes"] == 2 and s["drift"] == pytest.approx(0.02)
    assert drift_warning(s, "this build") is None
    moved = [{"latency_ms": 0.50}, {"latency_ms": 0.50 * (1 + DRIFT_WARN + 0.01)}]
    w = drift_warning(summarize(moved), "this build")
    assert w and "6.0 %" in w and "this build" in w and REFERENCE_FILE in w
    assert drift_warning(summarize([{"latency_ms": 0.5}]), "x") is None  # one probe
    # one disturbed probe among steady ones is noise; two slow ones in a row are drift
    spike = [{"latency_ms": x} for x in (0.672, 0.673, 0.708, 0.674, 0.673)]
    assert summarize(spike)["drift"] == pytest.approx(0.674 / 0.672 - 1)
    assert drift_warning(summarize(spike), "x") is None
    slow = [{"latency_ms": x} for x in (0.672, 0.673, 0.72, 0.73, 0.673)]
    assert summarize(slow)["drift"] == pytest.approx(0.72 / 0.672 - 1)
    assert drift_warning(summarize(slow), "x")
    assert summarize([]) is None and drift_warning(None, "x") is None
    # a model set measured while the device ran 20 % slower than during its build
    assert compare_records(steady, [{"latency_ms": 0.606}]) == pytest.approx(1.2, rel=1e-3)
    assert compare_records([], steady) is None


def test_probing_profiler_probes_when_due_and_is_the_profiler_otherwise(tmp_path):
    clock = _Clock()
    ref = SpeedReference(tmp_path, every_s=100, clock=clock)
    inner = _Prof([0.5, 0.6])
    prof = ProbingProfiler(inner, ref, "profile")
    g = reference_graph()
    g.name = "kernel"
    prof.measure(g)
    prof.measure(g)
    clock.t = 100
    prof.measure(g)
    assert inner.graphs == ["speed-reference", "kernel", "kernel", "speed-reference", "kernel"]
    assert prof.device is inner.device
    prof.close()
    assert not inner.opened


def test_a_real_build_records_its_probes(tmp_path):
    """ORT, no profiler passed: the build opens its own and probes the reference at its
    start; the summary goes to builds.jsonl."""
    from nnmeter.builder import build_predictor
    from nnmeter.fusion.rules import FusionRules
    from nnmeter.predictors.dataset import kernel_dataset_dir

    rules = FusionRules.from_decisions("ort-cpu", pairs={})
    res = build_predictor("ort-cpu", dataset="ort-cpu@ref", budget_minutes=2, root=tmp_path,
                          rules=rules, prior_configs={"relu": [{"h": h, "w": h, "cin": 16}
                                                           for h in (7, 14, 28, 56)]},
                          kernels=("relu",), progress=False, train=False,
                          max_samples_per_type=4, rounds=0, initial_fraction=1.0,
                          calibrate_boundary=False, calibrate_weight_stream=False,
                          calibrate_reorders=False, calibrate_chain=False,
                          calibrate_in_model=False)
    d = kernel_dataset_dir("ort-cpu@ref", tmp_path)
    probes = read_reference(d)
    assert probes and probes[0]["phase"] == "start" and probes[0]["latency_ms"] > 0
    assert res.speed_reference["probes"] == len(probes)
    # a log beside the rows, never a kernel type (nor part of the predictor's cache key)
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(d, "ort-cpu")
    assert ds.kernel_types() == ["relu"]
    assert all(p.name != REFERENCE_FILE for p in ds.files())
    logged = json.loads((d / "builds.jsonl").read_text().splitlines()[-1])
    assert logged["speed_reference"]["median_ms"] == pytest.approx(
        summarize(probes)["median_ms"])


def test_a_model_set_is_compared_with_each_build(tmp_path):
    """The set's probes (tagged with its file's stem) against each build's record."""
    sets, build = tmp_path / "models", tmp_path / "kernels"
    SpeedReference(build).probe(_Prof([0.50]), "start", force=True)
    ref = SpeedReference(sets, tag="seed1000")
    ref.probe(_Prof([0.60]), "before resnet", force=True)
    SpeedReference(sets, tag="seed2000").probe(_Prof([0.90]), "before vgg", force=True)
    got = set_against_builds(sets / "seed1000.jsonl", {"full": build, "none": tmp_path / "x"})
    assert got["set"]["probes"] == 1 and got["set"]["median_ms"] == 0.60
    assert got["full"] == pytest.approx(1.2) and got["none"] is None
    assert set_against_builds(sets / "seed3000.jsonl", {"full": build}) == \
        {"set": None, "full": None}


def test_watch_and_around_probe_at_the_edges_of_their_work(tmp_path, monkeypatch):
    import nnmeter.backends as backends

    opened = []

    class _Own(_Prof):
        def __init__(self, backend_id):
            super().__init__([0.7])
            opened.append(backend_id)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

    monkeypatch.setattr(backends, "Profiler", _Own)
    ref = SpeedReference(tmp_path)
    inner = _Prof([0.5])
    prof = ref.watch(inner, "profile")
    assert isinstance(prof, ProbingProfiler) and inner.graphs == ["speed-reference"]
    with ref.around("ort-cpu"):
        assert [p["phase"] for p in ref.points] == ["start", "calibrate"]
    assert [p["phase"] for p in read_reference(tmp_path)] == ["start", "calibrate", "end"]
    assert opened == ["ort-cpu", "ort-cpu"]


def test_a_speed_change_between_two_records_is_named_either_way():
    assert speed_change_warning(None, "now", "then") is None
    assert speed_change_warning(SPEED_WARN, "now", "then") is None  # the edge is kept
    slow = speed_change_warning(1.3, "this build", "this dataset's earlier builds")
    assert "1.30x" in slow and "30 % slower" in slow and REFERENCE_FILE in slow
    assert "% faster" in speed_change_warning(0.8, "now", "then")
    assert speed_change_warning(float("nan"), "now", "then") is None


def test_a_measurement_is_compared_with_its_predictors_build(tmp_path):
    """``predict --measure``'s check: the reference now against the build's median."""
    SpeedReference(tmp_path).probe(_Prof([0.50]), "start", force=True)
    SpeedReference(tmp_path).probe(_Prof([0.54]), "end", force=True)
    seen = []

    def now(graph, backend):
        seen.append((graph.name, backend))
        return 0.65

    got = speed_against_build("ort-cpu", tmp_path, measure_ms=now)
    assert seen == [("speed-reference", "ort-cpu")]
    assert got["build_probes"] == 2 and got["build_ms"] == pytest.approx(0.52)
    assert got["ratio"] == pytest.approx(1.25) and "25 % slower" in got["warning"]
    assert speed_against_build("ort-cpu", tmp_path, measure_ms=lambda g, b: 0.53)["warning"] is None
    # nothing to compare with, or nothing measured: no figure, never an error
    assert speed_against_build("ort-cpu", tmp_path / "none", measure_ms=now) is None
    assert speed_against_build("ort-cpu", None, measure_ms=now) is None
    assert speed_against_build("ort-cpu", tmp_path, measure_ms=lambda g, b: None) is None

    def broken(graph, backend):
        raise RuntimeError("worker died")

    assert speed_against_build("ort-cpu", tmp_path, measure_ms=broken) is None


def test_a_build_that_joins_rows_made_at_another_speed_says_so(tmp_path):
    from nnmeter.builder import BuildResult, _note_speed

    new = SpeedReference(tmp_path / "new")  # a new dataset: nothing to join
    SpeedReference(tmp_path).probe(_Prof([0.50]), "start", force=True)
    ref = SpeedReference(tmp_path)
    assert [p["latency_ms"] for p in ref.earlier] == [0.50]
    for r in (ref, new):
        for ms in (0.62, 0.63):
            r.probe(_Prof([ms]), "profile", force=True)
    res = BuildResult(backend_id="ort-cpu", dataset_dir=str(tmp_path))
    _note_speed(res, ref, "this build")
    assert res.speed_reference["against_earlier"] == pytest.approx(1.25)
    assert any("earlier builds" in w and "1.25x" in w for w in res.warnings)
    fresh = BuildResult(backend_id="ort-cpu", dataset_dir=str(tmp_path / "new"))
    _note_speed(fresh, new, "this build")
    assert "against_earlier" not in fresh.speed_reference and not fresh.warnings


def test_docstring_examples_stay_true():
    import doctest

    import nnmeter.devices.reference as mod

    result = doctest.testmod(mod)
    assert result.failed == 0 and result.attempted >= 8


def _probes(*rows):
    return [{"timestamp": t, "phase": ph, "latency_ms": ms} for t, ph, ms in rows]


def test_disturbed_windows_span_the_neighbouring_probes_of_each_slow_one_per_build():
    from nnmeter.devices.reference import disturbed_windows

    pts = _probes(("10:00", "start", 0.50), ("10:02", "profile", 0.60),
                  ("10:04", "profile", 0.56), ("10:06", "profile", 0.50),
                  ("10:08", "profile", 0.52),  # 4 %: within the limit
                  ("10:09", "calibrate", 0.90),  # not a profiling probe: no rows around it
                  # a second build that ran slower all through: nothing to tell apart
                  ("11:00", "start", 0.70), ("11:02", "profile", 0.71),
                  ("11:04", "profile", 0.70))
    spans = disturbed_windows(pts)
    assert [(a, b) for a, b, _ in spans] == [("10:00", "10:06")]  # two slow probes merged
    assert spans[0][2] == pytest.approx(1.2)
    # a lower limit also catches 10:08 (merged, touching) and the second build's 1.4 %
    assert [(a, b) for a, b, _ in disturbed_windows(pts, limit=0.01)] == [
        ("10:00", "10:09"), ("11:00", "11:04")]
    assert disturbed_windows([]) == []
    # a slow first probe: its span starts at itself
    assert disturbed_windows(_probes(("a", "start", 0.7), ("b", "profile", 0.5)))[0][:2] == \
        ("a", "b")


def test_a_probe_keeps_the_memory_probe_of_its_measurement(tmp_path):
    class MemoryProf(_Prof):
        def measure(self, graph, on_error="record", **kw):
            m = super().measure(graph, on_error, **kw)
            m.extra["memory_ratio"] = self.ratios.pop(0)
            return m

    prof = MemoryProf([0.5, 0.5, 0.5])
    prof.ratios = [1.0, 1.4, 1.6]
    ref = SpeedReference(tmp_path)
    for _ in range(3):
        ref.probe(prof, "start", force=True)
    rows = read_reference(tmp_path)
    assert [r["memory_ratio"] for r in rows] == [1.0, 1.4, 1.6]
    s = summarize(rows)
    assert s["memory_ratio_median"] == 1.4 and s["drift"] == 0.0
    # records made before the memory probe existed summarise as before
    assert "memory_ratio_median" not in summarize([{"latency_ms": 0.5}])
