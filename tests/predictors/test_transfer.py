"""Transfer: another device's predictor adapted to this one from a few hundred kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.builder import build_by_transfer, build_predictor
from nnmeter.errors import DatasetError
from nnmeter.fusion.rules import FusionRules
from nnmeter.predictors import load_predictor
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
from nnmeter.predictors.transfer import (LogRatioCorrection, choose_strength, find_source,
                                        plan_configs, plan_size)

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


class DeviceProfiler:
    """A fake device: time = scale * (a linear cost) + overhead, so a second device is
    the first one slower by a known factor."""

    def __init__(self, name: str, isa: tuple[str, ...], scale: float, overhead: float = 0.01):
        self.device = DeviceInfo("fake cpu", 2, "onnxruntime", "1", {"threads": 1}, "x86_64",
                                 vendor="Fake", family=1, model=1, stepping=1, isa=isa,
                                 caches={"L3": 1 << 25}, name=name)
        self.scale, self.overhead, self.calls = scale, overhead, 0

    def close(self):
        """No worker process to stop."""

    def measure(self, graph, on_error="record", **protocol):
        self.calls += 1
        c = graph.cost()
        ms = self.overhead + self.scale * (2e-8 * c.flops + 1e-7 * c.memory_bytes)
        return Measurement(ms, ms, ms, 0.0, 0.0, 1, 1, self.device)


PRIOR = {
    "conv-bn-relu": [{"h": h, "w": h, "cin": c, "cout": c, "kernel": 3, "stride": 1,
                      "groups": 1, "pads": None} for h in (7, 14, 28, 56) for c in range(8, 200, 12)],
    "relu": [{"h": h, "w": h, "cin": c} for h in (7, 14, 28, 56) for c in (16, 32, 64, 128)],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory, monkeypatch_module):
    """A data root with a source device's dataset (``ort-cpu@src``) and its rules."""
    root = tmp_path_factory.mktemp("transfer")
    rules_dir = root / "rules"
    rules_dir.mkdir()
    RULES.to_json(rules_dir / "ort-cpu.json")
    monkeypatch_module.setenv("NNMETER_FUSION_RULES_DIR", str(rules_dir))
    monkeypatch_module.setenv("NNMETER_CACHE", str(root / "cache"))
    src = DeviceProfiler("src", ("avx2", "fma", "avx512f"), 1.0)
    build_predictor("ort-cpu", dataset="ort-cpu@src", budget_minutes=5, root=root,
                    profiler=src, rules=RULES, prior_configs=PRIOR, progress=False,
                    train=False, max_samples_per_type=80, rounds=0, initial_fraction=1.0,
                    kernels=list(PRIOR))
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_the_source_is_found_by_name_id_or_fingerprint_and_unknown_lists_known(world):
    assert find_source("ort-cpu", "src", world).dataset_id == "ort-cpu@src"
    assert find_source("ort-cpu-t2", "ort-cpu@src", world).dataset_id == "ort-cpu@src"
    with pytest.raises(DatasetError, match="ort-cpu@src"):
        find_source("ort-cpu", "nosuch", world)
    with pytest.raises(DatasetError, match="runtime"):
        find_source("litert-cpu", "ort-cpu@src", world)


def test_the_plan_puts_the_zoo_first_and_covers_every_zoo_type(world):
    src = load_predictor("ort-cpu", dataset="ort-cpu@src", root=world)
    plan = plan_configs(src, kernel_dataset_dir("ort-cpu@src", world), "ort-cpu", limit=120)
    assert 0 < len(plan) <= 120
    assert {w for _, _, w in plan} >= {"zoo", "spread", "anchor"}
    types = [t for t, _, _ in plan]
    assert len(set(types)) >= 5  # every kernel type the zoo spends time in gets a share
    keys = [(t, json.dumps(c, sort_keys=True)) for t, c, _ in plan]
    assert len(keys) == len(set(keys))  # nothing planned twice


def test_a_longer_budget_plans_more_configs_from_more_zoo_variants(world):
    assert plan_size(10) == plan_size(3) == (1000, 3)
    limit, variants = plan_size(40)
    assert limit == 4000 and variants == 12
    src = load_predictor("ort-cpu", dataset="ort-cpu@src", root=world)
    ds_dir = kernel_dataset_dir("ort-cpu@src", world)

    def zoo_configs(n):
        plan = plan_configs(src, ds_dir, "ort-cpu", limit=100_000, n_per_family=n)
        return {(t, json.dumps(c, sort_keys=True)) for t, c, w in plan if w == "zoo"}

    few, many = zoo_configs(1), zoo_configs(4)
    assert few < many  # the same seed's first variants, and more of them


def test_a_transfer_build_adapts_the_source_to_a_slower_device(world):
    tgt = DeviceProfiler("tgt", ("avx2", "fma"), 2.0, overhead=0.02)
    res = build_by_transfer("ort-cpu", "src", budget_minutes=5, dataset="ort-cpu@tgt",
                            profiler=tgt, progress=False, root=world, limit=80)
    assert res.measurements == tgt.calls and 0 < res.measurements <= 80
    assert set(res.phases) == {"plan", "measure", "calibrate", "train"}
    ds = KernelDataset(kernel_dataset_dir("ort-cpu@tgt", world), "ort-cpu")
    rec = json.loads((ds.directory / "transfer.json").read_text())
    assert rec["source_dataset"] == "ort-cpu@src"
    # no whole models measured here (a fake profiler calibrates nothing): the full
    # correction, recorded so that later trainings train once
    assert rec["strength"] == 1.0 and res.correction["strength"] == 1.0
    rows = [r for t in ds.kernel_types() for r in ds.rows(t)]
    assert rows and all(r["origin"] == "transfer" for r in rows)
    assert res.correction["median_ratio"] == pytest.approx(2.0, rel=0.35)
    # the adapted predictor predicts the target's times; the source's, the source's
    src = DeviceProfiler("src", ("avx2", "fma", "avx512f"), 1.0)
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get("conv-bn-relu")
    err_t, err_s = [], []
    pred_t = load_predictor("ort-cpu", dataset="ort-cpu@tgt", root=world)
    pred_s = load_predictor("ort-cpu", dataset="ort-cpu@src", root=world)
    for cfg in PRIOR["conv-bn-relu"][::5]:
        g = kt.build_graph(kt.config_from_dict(cfg))
        t_true = tgt.measure(g).latency_ms
        err_t.append(abs(pred_t.predict(g, check_device=False).total_ms / t_true - 1))
        err_s.append(abs(pred_s.predict(g, check_device=False).total_ms / t_true - 1))
    assert np.median(err_t) < 0.15 < np.median(err_s)
    # resumed: what is measured is not measured again
    again = DeviceProfiler("tgt", ("avx2", "fma"), 2.0, overhead=0.02)
    build_by_transfer("ort-cpu", "src", budget_minutes=5, dataset="ort-cpu@tgt",
                      profiler=again, progress=False, root=world, limit=80)
    assert again.calls == 0


def test_a_transfer_from_a_transfer_keeps_what_its_source_knows_from_its_own(world):
    """A transfer's dataset holds only the rows it measured; its predictor knows the
    rest from its own source. A transfer adapted from it must too: a kernel type that
    neither of the two last datasets measured is trained from the first one's
    configurations at the middle predictor's estimate, not left to the fallback."""
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.model import is_fallback_key
    from nnmeter.predictors.transfer import _source_key, source_chain

    mid = DeviceProfiler("mid", ("avx2", "fma"), 2.0, overhead=0.02)
    build_by_transfer("ort-cpu", "src", budget_minutes=5, dataset="ort-cpu@mid",
                      profiler=mid, progress=False, root=world, limit=60)
    (kernel_dataset_dir("ort-cpu@mid", world) / "relu.jsonl").unlink(missing_ok=True)
    leaf = DeviceProfiler("leaf", ("avx2",), 3.0, overhead=0.03)
    build_by_transfer("ort-cpu", "ort-cpu@mid", budget_minutes=5, dataset="ort-cpu@leaf",
                      profiler=leaf, progress=False, root=world, limit=60)
    leaf_dir = kernel_dataset_dir("ort-cpu@leaf", world)
    (leaf_dir / "relu.jsonl").unlink(missing_ok=True)
    assert [d.name for _, d in source_chain(leaf_dir)] == ["ort-cpu@mid", "ort-cpu@src"]
    pred = load_predictor("ort-cpu", dataset="ort-cpu@leaf", root=world, use_cache=False)
    assert not is_fallback_key(_source_key(pred, "relu"))
    # relu trained on the first dataset's configurations (every one the middle
    # predictor estimates), where before it had no rows at all
    assert pred.meta["samples"].get("relu", 0) >= len(PRIOR["relu"])
    kt = KERNEL_TYPES.get("relu")
    err = []
    for cfg in PRIOR["relu"]:
        g = kt.build_graph(kt.config_from_dict(cfg))
        err.append(pred.predict(g, check_device=False).total_ms / leaf.measure(g).latency_ms)
    assert 0.6 < float(np.median(err)) < 1.6


def test_the_time_the_calibrations_leave_goes_back_to_the_kernels(world, monkeypatch):
    # a clock that moves only when a kernel is measured (one second each): a one-minute
    # budget measures 32 configurations by its sample share (0.52); this fake device
    # calibrates nothing, so the calibration share (0.36) measures about 21 more
    import time as time_module

    import nnmeter.builder as builder

    now = [1000.0]
    monkeypatch.setattr(time_module, "monotonic", lambda: now[0])

    class Clocked(DeviceProfiler):
        def measure(self, graph, on_error="record", **protocol):
            now[0] += 1.0
            return super().measure(graph, on_error, **protocol)

    monkeypatch.setattr(builder, "LEFTOVER_MIN_S", 10.0)
    tgt = Clocked("tgt-late", ("avx2", "fma"), 2.0)
    res = build_by_transfer("ort-cpu", "src", budget_minutes=1, dataset="ort-cpu@tgt-late",
                            profiler=tgt, progress=False, root=world, limit=200)
    assert res.planned > 60
    assert res.measurements == tgt.calls == 53  # 60 s * (0.52 + 0.36), one second each
    assert res.stopped_by_budget
    assert res.phases["measure"] == pytest.approx(53 / 60)
    # without a second pass: the sample share alone
    monkeypatch.setattr(builder, "LEFTOVER_MIN_S", 1e9)
    one = Clocked("tgt-late2", ("avx2", "fma"), 2.0)
    res1 = build_by_transfer("ort-cpu", "src", budget_minutes=1, dataset="ort-cpu@tgt-late2",
                             profiler=one, progress=False, root=world, limit=200)
    assert res1.measurements == 32 and res1.stopped_by_budget


def test_a_transfer_refuses_another_source_for_the_same_dataset(world):
    with pytest.raises(DatasetError, match="transferred from"):
        d = kernel_dataset_dir("ort-cpu@tgt2", world)
        d.mkdir(parents=True)
        (d / "transfer.json").write_text(json.dumps({"source_dataset": "ort-cpu@x",
                                                     "source_backend": "ort-cpu"}))
        build_by_transfer("ort-cpu", "src", budget_minutes=1, dataset="ort-cpu@tgt2",
                          profiler=DeviceProfiler("t", ("avx2",), 2.0), progress=False,
                          root=world)
    with pytest.raises(Exception, match="budget"):
        build_by_transfer("ort-cpu", "src", budget_minutes=0, root=world,
                          profiler=DeviceProfiler("t", ("avx2",), 2.0))


def test_a_transfer_never_writes_into_a_full_build(world, monkeypatch):
    # a full build of this "machine" (device tgt3), then a transfer: named, it is refused;
    # by default it goes beside the full build, into <dataset>-transfer
    tgt = DeviceProfiler("tgt3", ("avx2", "fma"), 2.0)
    build_predictor("ort-cpu", dataset="ort-cpu@tgt3", budget_minutes=1, root=world,
                    profiler=tgt, rules=RULES, prior_configs={"relu": PRIOR["relu"][:4]},
                    progress=False, train=False, rounds=0, initial_fraction=1.0,
                    kernels=["relu"])
    full = kernel_dataset_dir("ort-cpu@tgt3", world)
    rows = sorted(p.read_text() for p in full.glob("*.jsonl"))
    with pytest.raises(DatasetError, match="not a transfer.*ort-cpu@tgt3-transfer"):
        build_by_transfer("ort-cpu", "src", budget_minutes=1, dataset="ort-cpu@tgt3",
                          profiler=tgt, progress=False, root=world, limit=5)
    assert not (full / "transfer.json").exists()
    import nnmeter.devices.datasets as datasets

    monkeypatch.setattr(datasets, "default_dataset_id", lambda b, root=None, device=None: "ort-cpu@tgt3")
    res = build_by_transfer("ort-cpu", "src", budget_minutes=1, profiler=tgt,
                            progress=False, root=world, limit=5)
    assert res.dataset_dir.endswith("ort-cpu@tgt3-transfer")
    assert (kernel_dataset_dir("ort-cpu@tgt3-transfer", world) / "transfer.json").exists()
    assert sorted(p.read_text() for p in full.glob("*.jsonl")) == rows  # untouched


def test_the_correction_recovers_a_size_dependent_factor():
    # small kernels 1x (overhead-bound), large ones 2x faster: a function of size
    rng = np.random.default_rng(0)
    base = np.exp(rng.uniform(np.log(0.01), np.log(50), 200))
    true_ratio = np.where(base > 1, 0.5, 1.0) * (1 + 0.02 * rng.standard_normal(200))
    X = np.column_stack([base * 1e6, rng.integers(8, 256, 200)])
    corr = LogRatioCorrection().fit({"conv-bn-relu": (X, base, base * true_ratio)})
    got = np.exp(corr.log_ratio("conv-bn-relu", X, base))
    assert np.median(np.abs(got / true_ratio - 1)) < 0.05
    assert corr.summary()["family_models"] == ["conv"]
    # a family without enough rows gets the median ratio of all rows, bounded
    few = np.exp(corr.log_ratio("relu", np.ones((3, 2)), np.ones(3)))
    assert np.allclose(few, np.exp(corr.fallback)) and 0.05 <= few[0] <= 20


def test_a_family_with_a_few_rows_keeps_its_own_median_ratio():
    # convolutions 2x faster, element-wise adds only 1.4x: three add rows are too few
    # for a forest, and the median of all rows (the convolutions') would halve them
    rng = np.random.default_rng(1)
    base = np.exp(rng.uniform(np.log(0.05), np.log(20), 60))
    rows = {"conv-bn-relu": (np.column_stack([base, base]), base, 0.5 * base),
            "add": (np.ones((3, 3)), np.array([0.01, 0.02, 0.04]),
                    np.array([0.007, 0.014, 0.028]))}
    corr = LogRatioCorrection().fit(rows)
    got = np.exp(corr.log_ratio("add", np.ones((2, 3)), np.array([0.01, 0.1])))
    assert np.allclose(got, 0.7)
    assert corr.summary()["family_medians"] == {"add": pytest.approx(0.7)}
    # a family with fewer rows than that, or none, still gets the median of all rows
    rows["relu"] = (np.ones((2, 2)), np.array([0.01, 0.02]), np.array([0.01, 0.02]))
    corr = LogRatioCorrection().fit(rows)
    assert np.allclose(np.exp(corr.log_ratio("relu", np.ones((1, 2)), np.ones(1))),
                       np.exp(corr.fallback))


def test_the_correction_strength_moves_it_towards_one_factor():
    # strength 0: every kernel gets the median ratio of all rows; 0.5: half way in logs
    rng = np.random.default_rng(2)
    base = np.exp(rng.uniform(np.log(0.01), np.log(50), 120))
    ratio = np.where(base > 1, 0.5, 2.0)
    X = np.column_stack([base, base])
    corr = LogRatioCorrection().fit({"conv-bn-relu": (X, base, base * ratio)})
    full = corr.log_ratio("conv-bn-relu", X, base)
    corr.strength = 0.0
    assert np.allclose(corr.log_ratio("conv-bn-relu", X, base), corr.fallback)
    corr.strength = 0.5
    assert np.allclose(corr.log_ratio("conv-bn-relu", X, base), 0.5 * full + 0.5 * corr.fallback)
    assert corr.summary()["strength"] == 0.5


def test_a_malformed_recorded_strength_is_a_clear_error(tmp_path):
    from nnmeter.predictors.transfer import read_transfer

    rec = {"source_dataset": "ort-cpu@src", "source_backend": "ort-cpu"}
    for bad in (1.5, "half", True):
        (tmp_path / "transfer.json").write_text(json.dumps({**rec, "strength": bad}))
        with pytest.raises(DatasetError, match="transfer.json: 'strength' must be a number"):
            read_transfer(tmp_path)
    (tmp_path / "transfer.json").write_text(json.dumps({**rec, "strength": 0}))
    assert read_transfer(tmp_path)["strength"] == 0


def test_the_build_summary_says_which_strength_and_why():
    from nnmeter.builder import TransferResult

    res = TransferResult("ort-cpu", "/d/ort-cpu@tgt", "ort-cpu@src")
    res.correction = {"median_ratio": 0.64, "rows": 300, "strength": 0.5,
                      "strength_scores": {"1.0": {"loo_rms_log": 0.084, "models": 36},
                                          "0.5": {"loo_rms_log": 0.0815, "models": 36}}}
    text = res.summary()
    assert "correction strength 0.5 (1: per kernel, 0: one factor), chosen on 36 whole " \
           "models left out one by one (rms log error 1.0: 0.084, 0.5: 0.082)" in text
    assert "speed reference" not in text  # none measured
    res.speed_reference = {"probes": 4, "min_ms": 0.52, "max_ms": 0.65, "drift": 0.141}
    assert "speed reference: 4 probes, 0.52-0.65 ms (drift 14.1 %)" in res.summary()


class _Adapted:
    """A stand-in for a transfer predictor: its meta as train_transfer's holds it."""

    def __init__(self, strength, loo, models):
        im = {} if loo is None else {"loo_rms_log": loo, "models": models}
        self.meta = {"in_model": im, "transfer": {"summary": {"strength": strength}}}


def test_the_strength_is_the_one_whose_whole_models_are_predicted_best():
    loo = {1.0: 0.08, 0.5: 0.05, 0.0: 0.06}
    got = choose_strength(lambda s: _Adapted(s, loo[s], 30))
    assert got.meta["transfer"]["summary"]["strength"] == 0.5
    assert got.meta["transfer"]["summary"]["strength_scores"]["1.0"] == \
        {"loo_rms_log": 0.08, "models": 30}
    # a strength whose fit left a model out is not compared on fewer models
    models = {1.0: 30, 0.5: 29, 0.0: 30}
    got = choose_strength(lambda s: _Adapted(s, loo[s], models[s]))
    assert got.meta["transfer"]["summary"]["strength"] == 0.0
    # no whole models measured (no in-model record): the full correction, trained once
    calls = []
    got = choose_strength(lambda s: calls.append(s) or _Adapted(s, None, 0))
    assert calls == [1.0] and got.meta["transfer"]["summary"]["strength"] == 1.0


def test_predicting_for_a_named_device_or_the_nearest(world):
    # runs after the transfer build above: the root holds ort-cpu@src and ort-cpu@tgt
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get("conv-bn-relu")
    g = kt.build_graph(kt.config_from_dict(PRIOR["conv-bn-relu"][-1]))
    for name in ("src", "tgt"):
        rep = load_predictor("ort-cpu", device=name, root=world).predict(g)
        assert rep.device_name == name and rep.device_selection == "requested"
        assert rep.device_mismatch and not any("--transfer-from" in w for w in rep.warnings)
    slow = load_predictor("ort-cpu", device="tgt", root=world).predict(g).total_ms
    fast = load_predictor("ort-cpu", device="src", root=world).predict(g).total_ms
    assert slow > 1.5 * fast
    # this machine is neither fake device: the nearest one, said plainly
    rep = load_predictor("ort-cpu", root=world).predict(g)
    assert rep.device_selection == "nearest" and rep.device_mismatch
    assert any("--transfer-from" in w and "nearest" in w for w in rep.warnings)
    d = rep.as_dict()
    assert d["device_name"] in ("src", "tgt") and d["device_differences"]
