"""Calibrations under a deadline: points written as measured, partial records, resume.

Fake profilers stand in for the runtimes, and a fake clock, advanced by each
measurement, stands in for ``time.monotonic`` inside the module under test, so a
deadline falls between known points.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from types import SimpleNamespace

import pytest

import nnmeter.backends
from nnmeter.backends.base import DeviceInfo, ExecutedNode, Measurement
from nnmeter.errors import DatasetError
from nnmeter.predictors import boundary, chain, weight_stream
from nnmeter.predictors.chain import (CHAIN_FILE, LARGE_CASES, LENGTHS, PAIR_LINK,
                                      CalibrationPoints, chain_cases, measure_chain,
                                      planned_chain_work, points_path)
from nnmeter.predictors.composition import Composition
from nnmeter.predictors.dataset import KernelDataset

FID = "f1"


class Clock:
    """A ``time`` module for one module under test whose monotonic clock only moves
    when a fake profiler measures."""

    def __init__(self) -> None:
        self.now = 1000.0

    def module(self) -> SimpleNamespace:
        return SimpleNamespace(monotonic=lambda: self.now, time=time.time,
                               strftime=time.strftime)


class CountingProfiler:
    """Synthetic latency from the model's FLOPs and bytes; counts its measurements and
    moves ``clock`` by ``step_s`` for each."""

    def __init__(self, clock: Clock | None = None, step_s: float = 1.0) -> None:
        self.device = DeviceInfo(cpu_model="fake cpu", cores=2, runtime="onnxruntime",
                                 runtime_version="1", settings={"threads": 1})
        self.clock, self.step_s, self.calls = clock, step_s, 0

    def measure(self, graph, on_error="record", **protocol):
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.step_s
        c = graph.cost()
        ms = 0.01 + 2e-8 * c.flops + 1e-7 * c.memory_bytes
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=self.device)

    def close(self):
        """Nothing to free."""


def _dataset(tmp_path, device=None, fid=FID):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "dataset.json").write_text(json.dumps({
        "backend_id": "ort-cpu", "fingerprint_id": fid,
        "device": device or {"runtime": "onnxruntime"}}))
    return d


def _models(cases):
    return sum(len(LENGTHS) + (2 if c[0] == PAIR_LINK else 0) for c in cases)


def _lines(path):
    return path.read_text().split("\n")


def _measure_chain(d, prof, **kw):
    return measure_chain("ort-cpu", d, overhead_ms=0.0, single_costs=lambda kt, cfg: (0.0, 0.0),
                         profiler=prof, **kw)


# -- the order of the chain configs ----------------------------------------------------
def test_chain_cases_keep_their_configs_and_any_prefix_covers_every_family():
    original = [(name, c, hw, k) for name, k in (("conv-bn-relu", 1), ("conv-bn-relu", 3),
                                                 ("dwconv-bn", 3))
                for c in (24, 58, 64, 116) for hw in (7, 14, 28, 56)
                if not (name == "conv-bn-relu" and k == 3 and c * hw > 116 * 28)]
    original += list(LARGE_CASES)
    original += [(name, c, hw, 3) for name in ("channelshuffle", "maxpool", "avgpool", "relu",
                                               "hswish", PAIR_LINK)
                 for c in (24, 58, 64, 116) for hw in (7, 14, 28)]
    cases = chain_cases()
    assert sorted(cases) == sorted(original) and len(set(cases)) == len(cases) == 130
    types = list(dict.fromkeys(c[0] for c in cases))
    total = Counter(c[0] for c in cases)
    for n in range(1, len(cases) + 1):
        # round-robin: a type is ahead of another by more than one only when the other
        # has no config left
        seen = Counter(c[0] for c in cases[:n])
        assert all(seen[a] - seen[b] <= 1 or seen[b] == total[b] for a in types for b in types)
    assert set(c[0] for c in cases[:len(types)]) == set(types)
    # four rounds are enough for every family line, spread over each family's sizes
    pts = [{"kernel_type": t, "elements": 2.0 * c * hw * hw, "excess_ms": 1e-3 + 1e-9 * c * hw * hw}
           for t, c, hw, k in cases[:4 * len(types)]]
    rec = chain._record(pts, 0.0)
    assert set(rec["family_lines"]) == {"activation", "channelshuffle", "pool", "split",
                                        "concat"}
    shuffle = sorted(c[1] * c[2] ** 2 for c in original if c[0] == "channelshuffle")
    first4 = [c[1] * c[2] ** 2 for c in cases[:4 * len(types)] if c[0] == "channelshuffle"]
    assert min(first4) == shuffle[0] and max(first4) >= shuffle[len(shuffle) // 2]


# -- the chain calibration -------------------------------------------------------------
def test_a_deadline_cut_leaves_a_partial_record_and_a_points_file_that_calibrate_resumes(
        tmp_path, monkeypatch):
    from nnmeter.builder import calibrate
    from nnmeter.predictors import terms
    from nnmeter.predictors.terms import ChainTerm

    d = _dataset(tmp_path)
    clock = Clock()
    monkeypatch.setattr(chain, "time", clock.module())
    prof = CountingProfiler(clock)
    rec = _measure_chain(d, prof, rounds=1, deadline=clock.now + 40)
    m = rec["points_measured"]
    assert rec["partial"] is True and rec["points_planned"] == 130 and 8 <= m < 20
    assert len(rec["points"]) == m and prof.calls == _models(chain_cases()[:m])
    assert {"activation", "pool", "split", "concat", "channelshuffle"} <= set(rec["families"])
    log = points_path(d, CHAIN_FILE)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == m and {e["fingerprint_id"] for e in entries} == {FID}
    assert planned_chain_work("ort-cpu", d) == _models(chain_cases()[m:]) * chain.ROUNDS
    ChainTerm.write(d, rec)

    # the next calibration continues the partial record: only the missing configs
    again = CountingProfiler()
    monkeypatch.setattr(nnmeter.backends, "Profiler", lambda backend_id, **kw: again)
    monkeypatch.setattr(terms, "composition_before", lambda *a: Composition(()))
    assert calibrate("ort-cpu", d, ["chain"]) == ["chain"]
    assert again.calls == _models(chain_cases()[m:]) * chain.ROUNDS
    done = json.loads((d / CHAIN_FILE).read_text())
    assert "partial" not in done and len(done["points"]) == 130
    assert not log.exists()
    # the reused points kept their single round; the new ones have all of theirs
    assert Counter(len(p["rounds_ms"]) for p in done["points"]) == {1: m, chain.ROUNDS: 130 - m}
    assert calibrate("ort-cpu", d, ["chain"]) == [] and again.calls == _models(
        chain_cases()[m:]) * chain.ROUNDS  # complete: nothing more


def test_a_cut_before_every_family_has_a_point_is_a_skip_and_keeps_the_points(tmp_path,
                                                                              monkeypatch):
    from nnmeter.predictors.terms import ChainTerm

    d = _dataset(tmp_path)
    clock = Clock()
    monkeypatch.setattr(chain, "time", clock.module())
    with pytest.raises(DatasetError, match="deadline after 2 of 130 configs, before "
                       "activation, channelshuffle, concat, pool, split had one") as info:
        _measure_chain(d, CountingProfiler(clock), rounds=1, deadline=clock.now + 5)
    assert isinstance(info.value, ChainTerm.calibration_skips)
    assert "\n" not in str(info.value)
    assert len(points_path(d, CHAIN_FILE).read_text().splitlines()) == 2
    assert not (d / CHAIN_FILE).exists()


def test_a_torn_last_line_is_skipped_and_the_next_point_starts_its_own_line(tmp_path,
                                                                          monkeypatch,
                                                                          caplog):
    d = _dataset(tmp_path)
    clock = Clock()
    monkeypatch.setattr(chain, "time", clock.module())
    first = _measure_chain(d, CountingProfiler(clock), rounds=1, deadline=clock.now + 40)
    m = first["points_measured"]
    log = points_path(d, CHAIN_FILE)
    with open(log, "a") as fh:  # a kill in the middle of a write
        fh.write('{"fingerprint_id": "f1", "key": "[\\"relu\\", 58')
    prof = CountingProfiler(clock)
    with caplog.at_level(logging.WARNING, logger="nnmeter.predictors.chain"):
        second = _measure_chain(d, prof, rounds=1, deadline=clock.now + 20)
    assert any("not a calibration point" in r.getMessage() for r in caplog.records)
    n = second["points_measured"]
    assert n > m and prof.calls == _models(chain_cases()[m:n])  # nothing measured twice
    lines = _lines(log)
    torn = [i for i, line in enumerate(lines) if line.endswith("58")]
    assert len(torn) == 1 and lines[torn[0]].startswith('{"fingerprint_id"')
    assert all(json.loads(line)["key"] for line in lines[torn[0] + 1:] if line)
    assert len(CalibrationPoints(d, CHAIN_FILE, FID).load()) == n


def test_points_of_another_fingerprint_are_not_reused(tmp_path, monkeypatch):
    d = _dataset(tmp_path)
    clock = Clock()
    monkeypatch.setattr(chain, "time", clock.module())
    _measure_chain(d, CountingProfiler(clock), rounds=1, deadline=clock.now + 40)
    meta = json.loads((d / "dataset.json").read_text())
    (d / "dataset.json").write_text(json.dumps({**meta, "fingerprint_id": "other"}))
    assert planned_chain_work("ort-cpu", d, rounds=1) == _models(chain_cases())


# -- the other calibrations ------------------------------------------------------------
def test_the_weight_stream_stops_at_its_deadline_and_resumes(tmp_path, monkeypatch):
    d = _dataset(tmp_path, fid=CountingProfiler().device.fingerprint_id)
    clock = Clock()
    monkeypatch.setattr(weight_stream, "time", clock.module())
    prof = CountingProfiler(clock)
    rec = weight_stream.measure_weight_stream("ort-cpu", d, profiler=prof,
                                              deadline=clock.now + 0.5)
    assert prof.calls == 1 and rec["partial"] and rec["bytes_per_ms"] > 0
    assert (rec["points_planned"], rec["points_measured"]) == (2, 1)
    assert weight_stream.planned_stream_work("ort-cpu", d) == 1
    weight_stream.write_weight_stream(d, rec)
    assert points_path(d, weight_stream.STREAM_FILE).exists()  # partial: kept
    rec = weight_stream.measure_weight_stream("ort-cpu", d, profiler=prof)
    assert prof.calls == 2 and "partial" not in rec and len(rec["points"]) == 2
    weight_stream.write_weight_stream(d, rec)
    assert not points_path(d, weight_stream.STREAM_FILE).exists()


class _ProfilingWorker:
    """A backend worker that profiles: a reorder each side of the kernel; moves the
    boundary module's clock by 1 s a model."""

    clock: Clock
    calls = 0

    def __init__(self, backend_id, core=None):
        fid = FID
        self.backend = SimpleNamespace(device_info=lambda: SimpleNamespace(fingerprint_id=fid))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def profile(self, graph, runs=10):
        type(self).calls += 1
        self.clock.now += 1.0
        return [ExecutedNode("in", "Reorder", (), 1e-3), ExecutedNode("k", "Eltwise", ("relu",), 0.04),
                ExecutedNode("out", "Reorder", (), 1e-3)]


def test_the_boundary_calibration_stops_at_its_deadline_and_resumes(tmp_path, monkeypatch):
    d = _dataset(tmp_path, device={"runtime": "openvino"})
    ds = KernelDataset(d, "openvino-cpu")
    for c in range(1, 13):
        ds.append("relu", {"config": {"h": 4 * c, "w": 8, "cin": 3 + c}, "latency_ms": 0.1})
    clock = Clock()
    monkeypatch.setattr(boundary, "time", clock.module())
    worker = type("Worker", (_ProfilingWorker,), {"clock": clock, "calls": 0})
    monkeypatch.setattr(nnmeter.backends, "Profiler", worker)
    rec = boundary.measure_boundary("openvino-cpu", d, per_family=6, deadline=clock.now + 2)
    assert worker.calls == 2 and rec["partial"]
    assert (rec["points_planned"], rec["points_measured"]) == (6, 2)
    assert boundary.planned_boundary_work("openvino-cpu", d, per_family=6) == 4
    rec = boundary.measure_boundary("openvino-cpu", d, per_family=6)
    assert worker.calls == 6 and "partial" not in rec and len(rec["points"]) == 6
    assert rec["fit"]["shared"][0] == pytest.approx(2e-3, rel=1e-6)
    boundary.write_boundary(d, rec)
    assert not points_path(d, boundary.BOUNDARY_FILE).exists()


class _ReorderWorker(_ProfilingWorker):
    def profile(self, graph, runs=10):
        type(self).calls += 1
        self.clock.now += 1.0
        return [ExecutedNode("i", "com.microsoft.nchwc.ReorderInput", (), 2e-3),
                ExecutedNode("k", "com.microsoft.nchwc.Conv", ("conv",), 0.05),
                ExecutedNode("o", "com.microsoft.nchwc.ReorderOutput", (), 3e-3)]


def test_the_reorder_calibration_stops_at_its_deadline_and_resumes(tmp_path, monkeypatch):
    from nnmeter.predictors import reorder

    d = _dataset(tmp_path, device={"runtime": "onnxruntime", "isa": ["avx2", "fma"]})
    ds = KernelDataset(d, "ort-cpu")
    for h in (7, 14, 28, 56, 112):
        ds.append("conv-bn-relu", {"config": {"h": h, "w": h, "cin": 32, "cout": 64, "kernel": 3,
                                              "stride": 1, "groups": 1, "pads": None},
                                   "latency_ms": 0.1})
    clock = Clock()
    monkeypatch.setattr(reorder, "time", clock.module())
    worker = type("Worker", (_ReorderWorker,), {"clock": clock, "calls": 0})
    monkeypatch.setattr(nnmeter.backends, "Profiler", worker)
    rec = reorder.measure_reorders("ort-cpu", d, deadline=clock.now + 3)
    assert worker.calls == 3 and rec["partial"]
    assert (rec["points_planned"], rec["points_measured"]) == (5, 3)
    assert sorted({p[2] for p in rec["points"]}) == ["in", "out"] and rec["curve"]
    assert reorder.planned_reorder_work("ort-cpu", d) == 2
    rec = reorder.measure_reorders("ort-cpu", d)
    assert worker.calls == 5 and "partial" not in rec and len(rec["points"]) == 10
    reorder.write_reorders(d, rec)
    assert not points_path(d, reorder.REORDER_FILE).exists()
