"""LatencyPredictor on a synthetic dataset: coverage, fallbacks, batch, cache, device."""

from __future__ import annotations

import math

import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.builder import build_predictor
from nnmeter.errors import PredictorError
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.predictors import clear_memo, load_predictor
from nnmeter.predictors.dataset import kernel_dataset_dir
from nnmeter.predictors.model import LatencyPredictor
from nnmeter.predictors.train import train_predictor

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


class _Fake:
    device = DeviceInfo(cpu_model="fake cpu", cores=2, runtime="onnxruntime", runtime_version="1",
                        settings={"threads": 1})

    def measure(self, graph, on_error="record", **protocol):
        c = graph.cost()
        ms = 0.01 + 2e-8 * c.flops + 1e-7 * c.memory_bytes
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=self.device)


PRIOR = {
    "conv-bn-relu": [{"h": h, "w": h, "cin": c, "cout": 2 * c, "kernel": 3, "stride": 1,
                      "groups": 1, "pads": None}
                     for h, c in ((56, 16), (56, 24), (28, 32), (28, 48), (14, 64), (14, 96))],
    "relu": [{"h": h, "w": h, "cin": c} for h, c in ((56, 16), (28, 32), (14, 64), (7, 128))],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=root, profiler=_Fake(), rules=RULES,
                    prior_configs=PRIOR, progress=False, train=False, max_samples_per_type=40,
                    rounds=1, regressor_params={"n_estimators": 10})
    return root


@pytest.fixture(scope="module")
def predictor(root):
    return train_predictor("ort-cpu", kernel_dataset_dir("ort-cpu", root), RULES)


def _model():
    b = GraphBuilder("m", (1, 16, 28, 28))
    y = b.relu(b.bn(b.conv(b.x, 32)))        # conv-bn-relu: own regressor
    y = b.bn(b.conv(y, 32))                  # conv-bn: family regressor
    y = b.maxpool(y, 2, 2)                   # maxpool: no data, fallback
    return b.build([b.relu(y)])


def test_report_rows_cover_every_kernel_and_never_zero(predictor):
    rep = predictor.predict(_model(), check_device=False)
    assert [r.type for r in rep.rows] == ["conv-bn-relu", "conv-bn", "maxpool", "relu"]
    assert all(r.predicted_ms > 0 and math.isfinite(r.predicted_ms) for r in rep.rows)
    assert rep.overhead_ms > 0
    assert rep.layout_ms > 0  # ort-cpu: the blocked convolutions' reorders, added once
    assert rep.total_ms == pytest.approx(sum(r.predicted_ms for r in rep.rows) + rep.overhead_ms
                                         + rep.layout_ms)
    how = {r.type: r.estimated_by for r in rep.rows}
    assert how == {"conv-bn-relu": "regressor", "conv-bn": "family:conv", "maxpool": "fallback",
                   "relu": "regressor"}
    assert {u["type"] for u in rep.uncovered} == {"conv-bn", "maxpool"}
    assert rep.warnings and len(rep.rows[0].features) > 5
    d = rep.as_dict()
    assert d["rows"][0]["estimated_by"] == "regressor" and d["total_ms"] == rep.total_ms
    assert d["layout_ms"] == rep.layout_ms


def test_prediction_tracks_truth_on_covered_kernels(predictor):
    b = GraphBuilder("c", (1, 24, 56, 56))
    g = b.build([b.relu(b.bn(b.conv(b.x, 48)))])
    truth = _Fake().measure(g).latency_ms
    got = predictor.predict(g, check_device=False).total_ms
    assert abs(got - truth) / truth < 0.25


def test_predict_many_matches_single(predictor):
    graphs = [_model(), _model()]
    many = predictor.predict_many(graphs)
    single = predictor.predict(graphs[0], check_device=False).total_ms
    assert many == pytest.approx([single, single])


def test_missing_fallback_is_refused():
    with pytest.raises(PredictorError, match="fallback"):
        LatencyPredictor("ort-cpu", RULES, {})


def test_device_mismatch_warns(predictor, caplog):
    other = LatencyPredictor("ort-cpu", RULES, predictor.regressors,
                             device={"cpu_model": "a cpu that is not this one", "cores": 1,
                                     "runtime": "onnxruntime", "settings": {}})
    rep = other.predict(_model())
    assert rep.device_mismatch and any("another device" in w for w in rep.warnings)
    assert "cpu_model" in " ".join(rep.warnings)


def test_a_cpu_of_the_same_name_with_another_isa_warns(predictor, monkeypatch):
    # the round-1 trap: an AVX2 machine fingerprints like the AVX-512 one the data is from
    import dataclasses

    import nnmeter.devices.datasets as dsets

    here = dsets.local_device("ort-cpu")
    recorded = {k: v for k, v in here.as_dict().items() if k != "fingerprint_id"}
    recorded["isa"] = ["avx2", "fma", "avx512f", "avx512bw"]
    avx2 = dataclasses.replace(here, isa=("avx2", "fma"))
    monkeypatch.setattr(dsets, "local_device", lambda backend_id: avx2)
    rep = LatencyPredictor("ort-cpu", RULES, predictor.regressors, device=recorded).predict(
        _model())
    assert rep.device_mismatch
    text = " ".join(rep.warnings)
    assert "data has avx512f, avx512bw" in text and "--transfer-from" in text
    same_isa = dataclasses.replace(here, isa=("fma", "avx512bw", "avx2", "avx512f"))
    monkeypatch.setattr(dsets, "local_device", lambda backend_id: same_isa)
    same = LatencyPredictor("ort-cpu", RULES, predictor.regressors, device=recorded)
    assert same.check_device() == (False, ())


@pytest.fixture
def rules_env(tmp_path, monkeypatch):
    """The test rules in their own folder and a cache of the test's own."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    RULES.to_json(rules_dir / "ort-cpu.json")
    monkeypatch.setenv("NNMETER_FUSION_RULES_DIR", str(rules_dir))
    monkeypatch.setenv("NNMETER_CACHE", str(tmp_path / "cache"))
    return rules_dir


def test_load_predictor_trains_then_uses_cache(root, tmp_path, rules_env):
    first = load_predictor("ort-cpu", root=root)
    clear_memo()  # another process: it reads the cache
    cached = load_predictor("ort-cpu", root=root)
    assert "cache" in cached.meta
    g = _model()
    assert cached.predict(g, check_device=False).total_ms == \
        pytest.approx(first.predict(g, check_device=False).total_ms, rel=1e-12)
    with pytest.raises(PredictorError, match="nnmeter build"):
        load_predictor("ort-cpu", root=tmp_path / "empty")


def test_choose_regressors_is_recorded_and_used(root, tmp_path):
    import json
    import shutil

    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.regressors import LightGBMKernelRegressor
    from nnmeter.predictors.train import choose_regressors

    d = tmp_path / "copy"
    shutil.copytree(kernel_dataset_dir("ort-cpu", root), d)
    scores = choose_regressors(KernelDataset(d, "ort-cpu"), candidates=("rf", "lgbm"),
                               folds=3, min_samples=10)
    assert set(scores) == {"conv-bn-relu", "relu"}
    assert all(0 <= v <= 1 for s in scores.values() for v in s.values())
    (d / "predictor.json").write_text(json.dumps({"regressor": {"relu": "lgbm"}}))
    pred = train_predictor("ort-cpu", d, RULES)
    assert isinstance(pred.regressors["type:relu"], LightGBMKernelRegressor)


def test_edge_conversions_are_paid_once_per_model(predictor):
    # a predictor whose training removed edge conversions (boundary.json) adds them back
    # once, at the model's own input and output, in predict and predict_many alike
    fit = {"shared": [0.0, 0.0, 0.0], "families": {"conv": [0.002, 1e-6, 2e-6]}}
    from nnmeter.predictors.composition import Composition
    from nnmeter.predictors.terms import EdgesTerm

    edged = LatencyPredictor(predictor.backend_id, predictor.rules, predictor.regressors,
                             device=predictor.device, meta=predictor.meta,
                             composition=Composition((*predictor.composition.terms,
                                                      EdgesTerm(fit))))
    g = _model()
    base = predictor.predict(g, check_device=False)
    rep = edged.predict(g, check_device=False)
    # input (1, 16, 28, 28) read by a conv kernel; the output is written by a kernel of
    # another family, which takes the shared coefficients (0 here)
    expected = 0.001 + 1e-6 * 16 * 28 * 28
    assert rep.layout_ms - base.layout_ms == pytest.approx(expected)
    assert rep.total_ms - base.total_ms == pytest.approx(expected)
    assert edged.predict_many([g]) == pytest.approx([rep.total_ms])


def test_a_conv_whose_exporter_folded_the_bn_uses_the_conv_bn_regressor(predictor):
    # torch.onnx (eval) and the TFLite converter fold the norm: conv -> relu with a bias
    rules = FusionRules.from_decisions(
        "ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True, ("conv", "relu"): True})
    pred = LatencyPredictor("ort-cpu", rules, predictor.regressors, meta=predictor.meta)
    b = GraphBuilder("folded", (1, 16, 28, 28))
    g = b.build([b.relu(b.conv(b.x, 32, bias=True))])
    assert [k.type for k in pred.kernels(g)] == ["conv-relu"]
    assert pred.regressor_type("conv-relu") == "conv-bn-relu"
    rep = pred.predict(g)
    assert rep.rows[0].estimated_by == "regressor" and not rep.uncovered
    ref = GraphBuilder("unfolded", (1, 16, 28, 28))
    ref_g = ref.build([ref.relu(ref.bn(ref.conv(ref.x, 32)))])
    assert math.isclose(rep.total_ms, pred.predict(ref_g).total_ms, rel_tol=1e-9)
    # a backend that does not fold the norm keeps the types apart
    apart = LatencyPredictor("ort-cpu", FusionRules.from_decisions("ort-cpu"),
                             predictor.regressors, meta=predictor.meta)
    assert apart.regressor_type("conv-relu") == "conv-relu"


def test_a_grouped_conv_is_one_groups_conv_once_per_group(predictor):
    b = GraphBuilder("grouped", (1, 32, 28, 28))
    g = b.build([b.relu(b.bn(b.conv(b.x, 64, groups=4)))])
    one = GraphBuilder("one", (1, 8, 28, 28))
    g1 = one.build([one.relu(one.bn(one.conv(one.x, 16)))])
    grouped, single = predictor.predict(g).rows[0], predictor.predict(g1).rows[0]
    assert grouped.type == single.type == "conv-bn-relu"
    assert math.isclose(grouped.base_ms, 4 * single.base_ms, rel_tol=1e-9)
    # the row keeps the grouped kernel's own features (its real FLOPs)
    assert grouped.features != single.features


@pytest.mark.parametrize("damage", ["arrays", "manifest-field", "manifest-json"])
def test_a_broken_cache_is_rebuilt_not_fatal(root, rules_env, caplog, damage):
    import json

    first = load_predictor("ort-cpu", root=root)
    where = first.meta["cache"]
    import pathlib

    where = pathlib.Path(where)
    if damage == "arrays":
        blob = bytearray((where / "arrays.npz").read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        (where / "arrays.npz").write_bytes(bytes(blob))
    elif damage == "manifest-field":
        m = json.loads((where / "manifest.json").read_text())
        next(iter(m["regressors"].values()))["params"] = "x"
        (where / "manifest.json").write_text(json.dumps(m))
    else:
        (where / "manifest.json").write_text("{not json")
    clear_memo()  # another process: it reads the cache
    with caplog.at_level("WARNING"):
        again = load_predictor("ort-cpu", root=root)
    assert "broken predictor cache" in caplog.text
    g = _model()
    assert again.predict(g, check_device=False).total_ms == \
        pytest.approx(first.predict(g, check_device=False).total_ms, rel=1e-12)
    # the rebuilt cache is whole again: the next load uses it without a warning
    caplog.clear()
    clear_memo()
    with caplog.at_level("WARNING"):
        load_predictor("ort-cpu", root=root)
    assert "broken predictor cache" not in caplog.text


def test_kernels_far_outside_the_training_range_are_named(predictor):
    near = predictor.predict(_model(), check_device=False)
    assert not any("far outside" in w for w in near.warnings), near.warnings
    b = GraphBuilder("huge", (1, 16, 2000, 2000))
    far = predictor.predict(b.build([b.relu(b.bn(b.conv(b.x, 32)))]), check_device=False)
    (w,) = [w for w in far.warnings if "far outside" in w]
    assert "conv-bn-relu" in w and "H=2000" in w and "trained 14–56" in w


def test_the_memo_returns_one_predictor_until_its_files_change(root, rules_env):
    first = load_predictor("ort-cpu", root=root)
    assert load_predictor("ort-cpu", root=root) is first
    assert load_predictor("ort-cpu", root=root, use_cache=False) is not first
    import os
    import time

    rules = rules_env / "ort-cpu.json"
    later = time.time() + 5
    os.utime(rules, (later, later))  # the rules file changed
    assert load_predictor("ort-cpu", root=root) is not first


class _Reg:
    """A fitted regressor as the estimator choice sees it: only its input width."""

    def __init__(self, width):
        self.n_features_in_ = width


def test_a_family_regressor_of_another_feature_layout_is_not_used():
    """``mul-add-relu`` (an SE gate with its residual add; 23 model inputs) has no data
    on a backend whose ``mul`` family regressor was fitted on plain ``mul`` (11): the
    fallback estimates it instead of a shape error (seresnet18 on openvino-cpu-f32)."""
    pred = LatencyPredictor("ort-cpu", RULES, {"family:mul": _Reg(11), "fallback": _Reg(4)})
    assert pred._estimator_key("mul", "mul") == "family:mul"
    assert pred._estimator_key("mul-add-relu", "mul") == "fallback"


def test_a_type_with_rows_but_no_regressor_uses_its_own_scaled_fallback():
    """A type whose few rows are not enough for a regressor of its own (a NAS-Bench-201
    ``add`` on OpenVINO) gets the fallback scaled to those rows; a type with no rows at
    all keeps the plain fallback."""
    pred = LatencyPredictor("ort-cpu", RULES, {"fallback": _Reg(2), "fallback:add": _Reg(2)})
    assert pred._estimator_key("add", "add") == "fallback:add"
    assert pred._estimator_key("relu", "activation") == "fallback"
