"""The builder on a fake in-process profiler: rows on disk, resume, fingerprints."""

from __future__ import annotations

import json

import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.builder import build_predictor, importance_weights
from nnmeter.errors import FingerprintMismatchError
from nnmeter.fusion.rules import FusionRules
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
from nnmeter.predictors.train import train_predictor
from nnmeter.sampling.prior import config_key

RULES = FusionRules.from_decisions("fake-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


class FakeProfiler:
    """Profiler stand-in: synthetic latency from the kernel's FLOPs and bytes."""

    def __init__(self, cpu="fake cpu", runtime="fake"):
        self.device = DeviceInfo(cpu_model=cpu, cores=2, runtime=runtime, runtime_version="1",
                                 settings={"threads": 1})
        self.calls = 0

    def close(self):
        """Nothing to free: no worker process."""

    def measure(self, graph, on_error="record", **protocol):
        self.calls += 1
        c = graph.cost()
        ms = 0.01 + 2e-8 * c.flops + 1e-7 * c.memory_bytes
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=self.device)


PRIOR = {
    "conv-bn-relu": [{"h": h, "w": h, "cin": c, "cout": 2 * c, "kernel": 3, "stride": s,
                      "groups": 1, "pads": None}
                     for h, c in ((56, 16), (56, 24), (28, 32), (28, 48), (14, 64), (14, 96))
                     for s in (1, 2)],
    "relu": [{"h": h, "w": h, "cin": c} for h, c in ((56, 16), (28, 32), (14, 64), (7, 128))],
}


def _build(tmp_path, profiler, n, **kw):
    kw.setdefault("dataset", "fake-cpu")
    return build_predictor("fake-cpu", budget_minutes=5, root=tmp_path, profiler=profiler,
                           rules=RULES, prior_configs=PRIOR, progress=False, train=False,
                           max_samples_per_type=n, rounds=2,
                           regressor_params={"n_estimators": 20}, **kw)


def _rows(tmp_path, t):
    return KernelDataset(kernel_dataset_dir("fake-cpu", tmp_path), "fake-cpu").rows(t)


def test_build_writes_rows_and_logs(tmp_path):
    prof = FakeProfiler()
    res = _build(tmp_path, prof, 40)
    assert set(res.types) == {"conv-bn-relu", "relu"}
    rows = _rows(tmp_path, "conv-bn-relu")
    assert len(rows) == res.types["conv-bn-relu"]["samples"] > 20
    assert prof.calls == res.measurements
    row = rows[0]
    assert {"kernel_type", "config", "latency_ms", "fingerprint_id", "timestamp",
            "origin"} <= set(row) and "features" not in row
    assert row["fingerprint_id"] == prof.device.fingerprint_id
    d = kernel_dataset_dir("fake-cpu", tmp_path)
    rounds = [json.loads(line) for line in (d / "rounds.jsonl").read_text().splitlines()]
    assert any(r["round"] >= 1 and "test_acc10" in r for r in rounds)
    assert json.loads((d / "dataset.json").read_text())["fingerprint_id"] == \
        prof.device.fingerprint_id


def test_resume_continues_without_duplicates(tmp_path):
    _build(tmp_path, FakeProfiler(), 10)
    first = {config_key(r["config"]) for r in _rows(tmp_path, "conv-bn-relu")}
    # a killed run leaves a torn last line: it is skipped, nothing else is lost
    path = kernel_dataset_dir("fake-cpu", tmp_path) / "conv-bn-relu.jsonl"
    with open(path, "a") as fh:
        fh.write('{"kernel_type": "conv-bn-relu", "conf')
    assert len(_rows(tmp_path, "conv-bn-relu")) == len(first)
    path.write_text(path.read_text().rsplit("\n", 1)[0] + "\n")
    _build(tmp_path, FakeProfiler(), 30)
    rows = _rows(tmp_path, "conv-bn-relu")
    keys = [config_key(r["config"]) for r in rows]
    assert len(keys) == len(set(keys)) and first < set(keys)


def test_refuses_other_fingerprint(tmp_path):
    _build(tmp_path, FakeProfiler(), 6)
    n = len(_rows(tmp_path, "relu"))
    with pytest.raises(FingerprintMismatchError, match="--dataset"):
        _build(tmp_path, FakeProfiler(cpu="another cpu"), 6)
    assert len(_rows(tmp_path, "relu")) == n  # nothing appended
    # a new dataset id is fine
    _build(tmp_path, FakeProfiler(cpu="another cpu"), 6, dataset="fake-cpu@other")


def test_trained_predictor_from_fake_build(tmp_path):
    _build(tmp_path, FakeProfiler(), 40)
    pred = train_predictor("fake-cpu", kernel_dataset_dir("fake-cpu", tmp_path), RULES)
    assert "type:conv-bn-relu" in pred.regressors and "fallback" in pred.regressors
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("m", (1, 16, 28, 28))
    g = b.build([b.relu(b.bn(b.conv(b.x, 32)))])
    rep = pred.predict(g, check_device=False)
    assert [r.type for r in rep.rows] == ["conv-bn-relu"]
    truth = FakeProfiler().measure(g).latency_ms
    assert rep.rows[0].estimated_by == "regressor"
    assert abs(rep.total_ms - truth) / truth < 0.3


def test_importance_weights_favour_conv():
    w = importance_weights({"conv-bn-relu": [{}] * 50, "relu": [{}] * 50, "rare": [{}]})
    assert w["conv-bn-relu"] > w["relu"] and "rare" not in w
    assert sum(w.values()) == pytest.approx(1.0)


@pytest.mark.integration
def test_tiny_real_build_on_ort(tmp_path):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    res = build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=3, root=tmp_path, rules=RULES,
                          prior_configs=PRIOR, progress=False, train=False,
                          max_samples_per_type=6, rounds=1,
                          protocol={"rounds": 2, "round_ms": 5.0, "calibrate": False},
                          regressor_params={"n_estimators": 5}, calibrate_weight_stream=False,
                          calibrate_chain=False, calibrate_in_model=False)
    assert set(res.types) == {"conv-bn-relu", "relu"}
    rows = _rows_for(tmp_path, "ort-cpu", "conv-bn-relu")
    assert len(rows) >= 3 and all(r["ok"] and r["latency_ms"] > 0 for r in rows)
    meta = json.loads((kernel_dataset_dir("ort-cpu", tmp_path) / "dataset.json").read_text())
    assert meta["device"]["runtime"] == "onnxruntime"
    assert {r["fingerprint_id"] for r in rows} == {meta["fingerprint_id"]}
    # the single-kernel convolutions' layout reorders were profiled and fitted
    reorders = json.loads((kernel_dataset_dir("ort-cpu", tmp_path) / "reorders.json").read_text())
    assert reorders["fingerprint_id"] == meta["fingerprint_id"] and reorders["points"]
    assert {p[2] for p in reorders["points"]} <= {"in", "out"}
    pred = train_predictor("ort-cpu", kernel_dataset_dir("ort-cpu", tmp_path), RULES)
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("m", (1, 16, 28, 28))
    rep = pred.predict(b.build([b.relu(b.bn(b.conv(b.x, 32)))]), check_device=True)
    assert rep.total_ms > 0 and not rep.device_mismatch


def _rows_for(root, backend, t):
    return KernelDataset(kernel_dataset_dir(backend, root), backend).rows(t)


def test_edge_and_stream_calibrations_run_once_per_dataset(tmp_path, monkeypatch):
    import nnmeter.backends as backends
    import nnmeter.predictors.boundary as boundary

    class OwnProfiler(FakeProfiler):  # what build_predictor opens when given none
        def __init__(self, backend_id):
            # the runtime the backend runs (its device facts decide the calibrations)
            super().__init__(runtime={"openvino-cpu": "openvino", "mnn-cpu": "mnn",
                                      "litert-cpu": "litert"}[backend_id])

    calls = []

    def fake_measure(backend_id, dataset_dir, **kw):
        calls.append(backend_id)
        return {"backend_id": backend_id, "fit": {"shared": [0.0, 0.0, 0.0], "families": {}},
                "points": [],
                "fingerprint_id": KernelDataset(dataset_dir, backend_id).fingerprint_id}

    import nnmeter.predictors.weight_stream as weight_stream

    streams = []

    def fake_stream(backend_id, dataset_dir, **kw):
        streams.append(backend_id)
        return {"backend_id": backend_id, "bytes_per_ms": 2e7, "points": [],
                "fingerprint_id": KernelDataset(dataset_dir, backend_id).fingerprint_id}

    from nnmeter.predictors.terms import ChainTerm

    chains = []

    def fake_chain(backend_id, dataset_dir, **kw):
        chains.append(backend_id)
        return {"backend_id": backend_id, "excess_ms": 0.0, "families": {}, "points": [],
                "fingerprint_id": None}

    monkeypatch.setattr(backends, "Profiler", OwnProfiler)
    monkeypatch.setattr(boundary, "measure_boundary", fake_measure)
    row_edges = []
    monkeypatch.setattr(boundary, "measure_row_edges", lambda backend_id, d, **kw: (
        row_edges.append(backend_id) or {"profiled": 0, "failed": 0, "remaining": 0}))
    monkeypatch.setattr(weight_stream, "measure_weight_stream", fake_stream)
    monkeypatch.setattr(ChainTerm, "measure",
                        classmethod(lambda cls, b, d, before, **kw: fake_chain(b, d)))
    for backend_id in ("openvino-cpu", "openvino-cpu", "mnn-cpu", "litert-cpu"):
        build_predictor(backend_id, dataset=backend_id, budget_minutes=1, root=tmp_path, rules=RULES,
                        prior_configs=PRIOR, progress=False, train=False,
                        max_samples_per_type=3, rounds=0, calibrate_in_model=False)
    # once per dataset, and only where the runtime converts at a model's edges
    assert calls == ["openvino-cpu", "mnn-cpu"]
    # then every row's own edges, in what is left of the calibration's time, where
    # training takes them (OpenVINO); the fake profiles none, so the second build of
    # openvino-cpu still finds rows without one and tries them again (not the fit)
    assert row_edges == ["openvino-cpu", "openvino-cpu"]
    assert (kernel_dataset_dir("openvino-cpu", tmp_path) / "boundary.json").exists()
    assert (kernel_dataset_dir("mnn-cpu", tmp_path) / "boundary.json").exists()
    assert not (kernel_dataset_dir("litert-cpu", tmp_path) / "boundary.json").exists()
    # the weight streaming rate: once per dataset, on every backend
    assert streams == ["openvino-cpu", "mnn-cpu", "litert-cpu"]
    assert (kernel_dataset_dir("mnn-cpu", tmp_path) / "weight_stream.json").exists()
    # the chain calibration: once per dataset, on every backend
    assert chains == ["openvino-cpu", "mnn-cpu", "litert-cpu"]
    assert (kernel_dataset_dir("mnn-cpu", tmp_path) / "chain_excess.json").exists()


def test_sampling_skips_kernels_too_large_to_convert():
    from nnmeter.builder import MAX_TFLITE_KERNEL_PARAMS, _accept

    small = {"cin": 1024, "cout": 1000, "rows": 1}
    huge = {"cin": 25088, "cout": 4096, "rows": 1}  # a VGG classifier layer
    assert 25088 * 4096 > MAX_TFLITE_KERNEL_PARAMS
    capped = _accept("fc-relu", MAX_TFLITE_KERNEL_PARAMS)
    assert capped(small) and not capped(huge)
    assert _accept("fc-relu")(huge)  # no cap where the runtime takes the layer as is


def test_a_build_limited_to_some_kernels_keeps_the_full_prior_record(tmp_path):
    profiler = FakeProfiler()
    common = dict(budget_minutes=1, root=tmp_path, profiler=profiler, rules=RULES,
                  prior_configs=PRIOR, progress=False, train=False,
                  max_samples_per_type=3, rounds=0)
    build_predictor("fake-cpu", dataset="fake-cpu", **common)
    path = kernel_dataset_dir("fake-cpu", tmp_path) / "prior.json"
    full = json.loads(path.read_text())
    build_predictor("fake-cpu", dataset="fake-cpu", kernels=["relu"], resume=True, **common)
    after = json.loads(path.read_text())
    assert after["weights"] == full["weights"]  # the full run's record survives
    assert set(after["priors"]) == set(full["priors"])
    assert after["restricted_runs"] == [{"kernels": ["relu"], "weights": {"relu": 1.0}}]


def test_depthwise_types_also_get_power_of_two_channel_configs(tmp_path):
    from nnmeter.builder import N_ALIGNED

    prior = dict(PRIOR)
    prior["dwconv-bn"] = [{"h": h, "w": h, "cin": c, "kernel": k, "stride": 1, "pads": None}
                          for h, c in ((28, 96), (14, 384), (14, 576), (7, 960))
                          for k in (3, 5, 7)]
    build_predictor("fake-cpu", dataset="fake-cpu", budget_minutes=5, root=tmp_path, profiler=FakeProfiler(),
                    rules=RULES, prior_configs=prior, progress=False, train=False,
                    max_samples_per_type=200, rounds=1, regressor_params={"n_estimators": 20})
    aligned = [r for r in _rows(tmp_path, "dwconv-bn") if r["origin"] == "aligned"]
    assert 10 <= len(aligned) <= N_ALIGNED
    assert all(r["config"]["cin"] % 256 == 0 for r in aligned)
    assert {r["config"]["cin"] for r in aligned} & {512, 1024}
    # only types whose features can tell an aligned channel count apart
    assert not [r for r in _rows(tmp_path, "conv-bn-relu") if r["origin"] == "aligned"]
    # a resumed build tops up to N_ALIGNED and never measures a config twice
    build_predictor("fake-cpu", dataset="fake-cpu", budget_minutes=5, root=tmp_path, profiler=FakeProfiler(),
                    rules=RULES, prior_configs=prior, progress=False, train=False,
                    max_samples_per_type=200, rounds=1, regressor_params={"n_estimators": 20})
    rows = _rows(tmp_path, "dwconv-bn")
    again = [r for r in rows if r["origin"] == "aligned"]
    assert len(again) <= N_ALIGNED
    keys = [config_key(r["config"]) for r in rows]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("field, value", [
    ("budget_minutes", -1.0), ("budget_minutes", float("nan")), ("budget_minutes", "5"),
    ("rounds", -1), ("rounds", 1.5), ("n_per_family", -2), ("seed", True),
    ("initial_fraction", 1.5), ("explore_fraction", -0.1),
    ("max_samples_per_type", -3), ("resume", "yes"), ("kernels", "conv"),
    ("kernels", ["relu", ""]), ("dataset", ""), ("protocol", [("rounds", 2)]),
])
def test_build_settings_reject_values_out_of_range(field, value):
    from nnmeter.builder import BuildSettings
    from nnmeter.errors import NNMeterError, SettingsError

    with pytest.raises(SettingsError, match=rf"^BuildSettings\.{field}=.*: expected ") as info:
        BuildSettings(**{field: value})
    assert isinstance(info.value, ValueError) and isinstance(info.value, NNMeterError)
    assert "\n" not in str(info.value)


def test_build_settings_are_frozen_copies():
    import dataclasses

    from nnmeter.builder import BuildSettings

    protocol = {"rounds": 2}
    s = BuildSettings(kernels=["relu"], protocol=protocol, max_samples_per_type=0,
                      budget_minutes=0, initial_fraction=1, explore_fraction=0.0)
    protocol["rounds"] = 9
    assert s.kernels == ("relu",) and s.protocol == {"rounds": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rounds = 5
    with pytest.raises(TypeError):
        s.protocol["rounds"] = 3


def test_build_predictor_rejects_unknown_keywords_listing_the_valid_ones(tmp_path):
    from nnmeter.errors import SettingsError, UnknownSettingError

    with pytest.raises(UnknownSettingError, match="budget_minuts") as info:
        build_predictor("fake-cpu", dataset="fake-cpu", budget_minuts=5, root=tmp_path, profiler=FakeProfiler(),
                        rules=RULES, prior_configs=PRIOR, progress=False, train=False)
    msg = str(info.value)
    assert "budget_minutes" in msg and "calibrate_chain" in msg and "prior_configs" in msg
    assert isinstance(info.value, TypeError) and isinstance(info.value, SettingsError)
    assert not (tmp_path / "datasets").exists()  # refused before touching anything
    with pytest.raises(SettingsError, match="rounds"):
        build_predictor("fake-cpu", dataset="fake-cpu", rounds=-1, root=tmp_path, profiler=FakeProfiler(),
                        rules=RULES, prior_configs=PRIOR, progress=False, train=False)


def test_settings_record_and_keywords_build_the_same_rows(tmp_path):
    from nnmeter.builder import BuildSettings

    kw = dict(budget_minutes=5, train=False, max_samples_per_type=20, rounds=1,
              regressor_params={"n_estimators": 10})
    build_predictor("fake-cpu", dataset="fake-cpu", root=tmp_path / "a", profiler=FakeProfiler(), rules=RULES,
                    prior_configs=PRIOR, progress=False, **kw)
    # a settings record, with one field overridden by keyword
    build_predictor("fake-cpu", BuildSettings(**{**kw, "rounds": 3}), rounds=1, dataset="fake-cpu",
                    root=tmp_path / "b", profiler=FakeProfiler(), rules=RULES,
                    prior_configs=PRIOR, progress=False)
    for t in PRIOR:
        a, b = (_rows(tmp_path / d, t) for d in "ab")
        assert [r["config"] for r in a] == [r["config"] for r in b] and a
        assert [r["latency_ms"] for r in a] == [r["latency_ms"] for r in b]


@pytest.mark.parametrize("value", [1.0, 1.5, -0.1, float("nan"), "0.3", True, None])
def test_build_settings_reject_a_calibration_share_outside_zero_to_one(value):
    from nnmeter.builder import BuildSettings
    from nnmeter.errors import SettingsError

    with pytest.raises(SettingsError, match=r"^BuildSettings\.calibration_share=.*in \[0, 1\)"):
        BuildSettings(calibration_share=value)
    assert BuildSettings(calibration_share=0).calibration_share == 0
    assert BuildSettings().calibration_share == 0.35


def _fake_calibrations(monkeypatch, work, partial=()):
    """Replace the weight-stream, chain and in-model calibrations by fakes that record
    the deadline each got and take no time; ``work`` is what each says it has to measure
    (the in-model calibration 0 unless given)."""
    import time

    from nnmeter.predictors import terms
    from nnmeter.predictors.composition import Composition
    from nnmeter.predictors.terms import ChainTerm, InModelTerm, RefetchTerm

    got = []

    def fake(term):
        def measure(cls, backend_id, dataset_dir, *, before=None, deadline=None,
                    progress=False):
            got.append((term.name, time.monotonic(), deadline))
            rec = {"fingerprint_id": KernelDataset(dataset_dir, backend_id).fingerprint_id,
                   "bytes_per_ms": 1e7, "excess_ms": 0.0, "points": []}
            if term.name in partial:
                rec.update(partial=True, points_planned=10, points_measured=4)
            return rec
        return classmethod(measure)

    for term in (RefetchTerm, ChainTerm, InModelTerm):
        monkeypatch.setattr(term, "measure", fake(term))
        monkeypatch.setattr(term, "planned_work",
                            classmethod(lambda cls, b, d, n=work.get(term.name, 0): n))
    monkeypatch.setattr(terms, "composition_before", lambda *a: Composition(()))
    return got


def _calibration_dataset(tmp_path):
    d = kernel_dataset_dir("fake-cpu", tmp_path)
    d.mkdir(parents=True)
    device = FakeProfiler().device.as_dict()  # runtime "fake": no reorders, no edges
    (d / "dataset.json").write_text(json.dumps({"backend_id": "fake-cpu", "device": device,
                                                "fingerprint_id": device["fingerprint_id"]}))
    return d


def test_calibrate_splits_its_deadline_by_planned_work_and_continues_partial_records(
        tmp_path, monkeypatch, caplog):
    import logging
    import time

    from nnmeter.builder import calibrate, pending_calibrations
    from nnmeter.predictors.chain import points_path

    d = _calibration_dataset(tmp_path)
    got = _fake_calibrations(monkeypatch, {"weight_refetch": 1, "chain": 3}, partial=("chain",))
    for name in ("weight_stream.json", "chain_excess.json"):
        points_path(d, name).write_text("{}\n")
    assert pending_calibrations("fake-cpu", d) == ["weight_refetch", "chain", "in_model"]
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="nnmeter.builder"):
        assert calibrate("fake-cpu", d, deadline=start + 100.0) == \
            ["in_model", "weight_refetch", "chain"]
    (first, t1, d1), (second, t2, d2), (third, t3, d3) = got
    # the in-model record first, with all the time (CALIBRATE_FIRST); then the split
    assert (first, second, third) == ("in_model", "weight_refetch", "chain")
    assert d1 == pytest.approx(start + 100.0, abs=1e-6)
    assert d2 - t2 == pytest.approx(25.0, abs=1.0)  # 1 of 4 units of work
    assert d3 == pytest.approx(start + 100.0, abs=1e-6)  # the rest: all that is left
    assert any("partial" in r.getMessage() and "chain" in r.getMessage() for r in caplog.records)
    # the complete record replaced its points; the partial one keeps them
    assert not points_path(d, "weight_stream.json").exists()
    assert points_path(d, "chain_excess.json").exists()
    # a partial record is calibrated again, a complete one is not
    assert pending_calibrations("fake-cpu", d) == ["chain"]
    assert calibrate("fake-cpu", d) == ["chain"] and got[-1][0] == "chain" and got[-1][2] is None
    assert len(got) == 4


def test_calibrate_starts_nothing_without_time_left(tmp_path, monkeypatch, caplog):
    import logging
    import time

    from nnmeter.builder import calibrate

    d = _calibration_dataset(tmp_path)
    got = _fake_calibrations(monkeypatch, {"weight_refetch": 1, "chain": 3})
    with caplog.at_level(logging.WARNING, logger="nnmeter.builder"):
        assert calibrate("fake-cpu", d, deadline=time.monotonic() - 1.0) == []
    assert got == [] and not (d / "chain_excess.json").exists()
    assert sum("no calibration time left" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.parametrize("train, records", [(False, False), (True, False), (True, True)])
def test_the_budget_bounds_profiling_calibrations_and_training(tmp_path, monkeypatch, train,
                                                               records):
    import time

    import nnmeter.backends as backends
    import nnmeter.builder as builder

    d = _calibration_dataset(tmp_path)
    if records:  # every calibration done: profiling keeps the budget less the reserve
        for name in ("weight_stream.json", "chain_excess.json", "in_model.json"):
            (d / name).write_text(json.dumps({"fingerprint_id": "x"}))
    seen = {}

    def fake_profile(plan, result, *, deadline, **kw):
        seen["profile"] = deadline

    def fake_calibrate(backend_id, dataset_dir, names=None, *, deadline=None, progress=False):
        seen["calibrate"] = deadline
        return []

    monkeypatch.setattr(backends, "Profiler", lambda backend_id: FakeProfiler())
    monkeypatch.setattr(builder, "profile_kernel_types", fake_profile)
    monkeypatch.setattr(builder, "calibrate", fake_calibrate)
    monkeypatch.setattr(builder, "train_and_cache", lambda *a, **kw: seen.setdefault("train", 1))
    t0 = time.monotonic()
    res = build_predictor("fake-cpu", dataset="fake-cpu", budget_minutes=2, root=tmp_path,
                          rules=RULES, prior_configs=PRIOR, progress=False, train=train)
    reserve = 20.0 if train else 0.0  # 5 % of 120 s is below the 20 s floor
    share = 0.0 if records else 0.35
    assert seen["profile"] - t0 == pytest.approx(120 * (1 - share) - reserve, abs=2.0)
    assert seen["calibrate"] - t0 == pytest.approx(120 - reserve, abs=2.0)
    assert ("train" in seen) == train
    logged = json.loads((d / "builds.jsonl").read_text().splitlines()[-1])
    assert set(logged["phases"]) == {"profile", "calibrate", "train"}
    assert logged["phases"] == res.as_dict()["phases"]
    assert logged["minutes"] == pytest.approx(sum(logged["phases"].values()), abs=0.01)


def test_a_full_build_calibrates_kernels_inside_models_by_default():
    # the in-model term needs whole models measured on the device; a full build that
    # skipped it left a new device's predictor without the term (seen on a Zen 5)
    from nnmeter.builder import BuildSettings, _wanted_calibrations

    assert _wanted_calibrations(BuildSettings()) == ["edges", "weight_refetch", "reorders",
                                                     "chain", "in_model"]
    assert "in_model" not in _wanted_calibrations(BuildSettings(calibrate_in_model=False))
    with pytest.raises(Exception, match="calibrate_in_model"):
        BuildSettings(calibrate_in_model="yes")


def test_prior_families_give_transformer_kernels_their_prior():
    from nnmeter.builder import BuildSettings, collect_prior
    from nnmeter.errors import UnknownNameError

    rules = FusionRules.from_decisions("toy", pairs={("matmul", "mul"): True,
                                                    ("add", "layernorm"): True})
    settings = BuildSettings(prior_families=["bert"], n_per_family=1,
                             kernels=("matmul", "matmul-scale", "softmax", "add-layernorm"))
    assert settings.prior_families == ("bert",)
    plan = collect_prior(rules, settings=settings)
    assert set(plan.weights) == {"matmul", "matmul-scale", "softmax", "add-layernorm"}
    # the CNN zoo's prior has none of them
    cnn = collect_prior(rules, settings=BuildSettings(n_per_family=0, kernels=("matmul",)))
    assert cnn.weights == {}
    with pytest.raises(UnknownNameError, match="vit"):
        BuildSettings(prior_families=["vitt"])
    with pytest.raises(Exception, match="not one string"):
        BuildSettings(prior_families="vit")


def test_rows_added_after_a_complete_edge_fit_are_profiled_by_the_next_build(tmp_path, monkeypatch):
    """OpenVINO trains on each row's own edges: a complete boundary.json with rows that
    have no profile leaves the edge calibration pending, and measuring it then profiles
    only the rows (the fit is kept); MNN, which keeps the fit, is not pending."""
    import json

    import nnmeter.predictors.boundary as boundary
    from nnmeter.builder import pending_calibrations
    from nnmeter.predictors.terms import EdgesTerm

    record = {"fingerprint_id": "f1", "backend_id": "x", "points": [],
              "fit": {"shared": [0.0, 0.0, 0.0], "families": {}, "rms_ms": {}}}
    dirs = {}
    for runtime in ("openvino", "mnn"):
        ds = KernelDataset(tmp_path / runtime, f"{runtime}-cpu")
        ds.check_device({"fingerprint_id": "f1", "runtime": runtime})
        ds.append("relu", {"config": {"h": 4, "w": 4, "cin": 4}, "latency_ms": 0.1})
        (ds.directory / "boundary.json").write_text(json.dumps(record))
        dirs[runtime] = ds.directory
    assert "edges" in pending_calibrations("openvino-cpu", dirs["openvino"])
    assert "edges" not in pending_calibrations("mnn-cpu", dirs["mnn"])
    assert EdgesTerm.planned_work("openvino-cpu", dirs["openvino"]) == 1

    def no_refit(*a, **kw):
        raise AssertionError("a complete fit is not measured again")

    profiled = []
    monkeypatch.setattr(boundary, "measure_boundary", no_refit)
    monkeypatch.setattr(boundary, "measure_row_edges", lambda b, d, **kw: (
        profiled.append(b) or {"profiled": 1, "failed": 0, "remaining": 0}))
    monkeypatch.setattr(boundary, "measure_row_context", lambda b, d, **kw: (
        profiled.append(f"{b} in context") or {"profiled": 0, "failed": 0, "remaining": 0}))
    out = EdgesTerm.measure("openvino-cpu", dirs["openvino"])
    # the rows' own edges first, then (OpenVINO's row_context) their in-context times
    assert profiled == ["openvino-cpu", "openvino-cpu in context"]
    assert out["fit"] == record["fit"]
    assert out["row_edges"]["profiled"] == 1 and out["row_context"]["profiled"] == 0


def _disturbed_dataset(tmp_path):
    """A dataset whose relu rows were measured at 10:01, 10:03 and 10:07, and a speed
    record whose 10:03 probe ran 40 % slow."""
    ds = KernelDataset(kernel_dataset_dir("fake-cpu", tmp_path), "fake-cpu")
    ds.directory.mkdir(parents=True)
    for i, (ts, ms) in enumerate((("10:01", 0.011), ("10:03", 0.02), ("10:07", 0.010))):
        ds.append("relu", {"kernel_type": "relu", "config": PRIOR["relu"][i],
                           "latency_ms": ms, "ok": True, "origin": "initial",
                           "timestamp": f"2026-12-07T{ts}:00"})
    with open(ds.directory / "speed_reference.jsonl", "w") as fh:
        for ts, ph, ms in (("10:00", "start", 0.50), ("10:02", "profile", 0.50),
                           ("10:03", "profile", 0.70), ("10:05", "profile", 0.50)):
            fh.write(json.dumps({"timestamp": f"2026-12-07T{ts}:00", "phase": ph,
                                 "latency_ms": ms}) + "\n")
    return ds


def test_rows_measured_while_the_device_ran_slow_are_measured_again(tmp_path):
    import time

    from nnmeter.builder import disturbed_rows, remeasure_disturbed
    from nnmeter.predictors.kernel_data import load_kernel_data

    ds = _disturbed_dataset(tmp_path)
    todo = disturbed_rows(ds)
    # 10:03 lies between the probes around the slow one (10:02-10:05); 10:01 and 10:07 not
    assert [(t, c) for _, t, c in todo] == [("relu", PRIOR["relu"][1])]
    assert todo[0][0] == pytest.approx(1.4)
    # no time left: nothing measured, nothing lost
    prof = FakeProfiler()
    out = remeasure_disturbed(ds, profiler=prof, deadline=time.monotonic() - 1,
                              progress=False)
    assert out == {"pending": 1, "measured": 0, "left": 1} and prof.calls == 0
    out = remeasure_disturbed(ds, profiler=prof, deadline=time.monotonic() + 60,
                              progress=False)
    assert out == {"pending": 1, "measured": 1, "left": 0} and prof.calls == 1
    rows = ds.rows("relu")
    assert len(rows) == 4 and rows[-1]["origin"] == "remeasure"
    assert rows[-1]["config"] == PRIOR["relu"][1]
    # the new row is now the quiet one: nothing left, and training keeps the fastest
    assert disturbed_rows(ds) == []
    data = load_kernel_data(ds, "relu")
    assert len(data.y) == 3
    assert data.y[1] == pytest.approx(min(0.02, rows[-1]["latency_ms"]))
