"""Training choices: regressor per type and own-vs-family data source, by kernel CV."""

from __future__ import annotations

import json
import shutil

import pytest

from nnmeter.builder import build_predictor
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
from nnmeter.predictors.train import choose_regressors, train_predictor

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


def _convs(n):
    return [{"h": h, "w": h, "cin": c, "cout": c + 8 * (i % 3), "kernel": 3, "stride": 1,
             "groups": 1, "pads": None}
            for i, (h, c) in enumerate((h, c) for h in (7, 14, 28, 56) for c in range(8, 8 + 4 * n, 4))]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, linear_cost_profiler):
    # every conv-family kernel costs the same function of its work, so the family's
    # pooled rows can predict a thinly sampled member better than its own few rows
    root = tmp_path_factory.mktemp("data")
    build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=root, profiler=linear_cost_profiler, rules=RULES,
                    prior_configs={"conv-bn-relu": _convs(40), "conv-bn": _convs(40)},
                    kernels=["conv-bn-relu"], progress=False, train=False,
                    max_samples_per_type=150, rounds=0, initial_fraction=1.0)
    build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=root, profiler=linear_cost_profiler, rules=RULES,
                    prior_configs={"conv-bn-relu": _convs(40), "conv-bn": _convs(40)},
                    kernels=["conv-bn"], progress=False, train=False,
                    max_samples_per_type=35, rounds=0, initial_fraction=1.0)
    build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=root, profiler=linear_cost_profiler, rules=RULES,
                    prior_configs={"conv": _convs(40)},
                    kernels=["conv"], progress=False, train=False,
                    max_samples_per_type=35, rounds=0, initial_fraction=1.0)
    return kernel_dataset_dir("ort-cpu", root)


def test_source_is_chosen_on_held_out_rows_and_recorded(data_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    ds = KernelDataset(d, "ort-cpu")
    assert len(ds.rows("conv-bn")) >= 30 and len(ds.rows("conv-bn-relu")) >= 100
    scores = choose_regressors(ds, folds=3, min_samples=100, min_type_samples=30)
    saved = json.loads((d / "predictor.json").read_text())
    # both members get paired scores on their own held-out rows
    for t in ("conv-bn", "conv-bn-relu"):
        assert {"own", "family"} <= set(scores[t])
        assert all(0.0 <= scores[t][k] <= 1.0 for k in ("own", "family"))
        expect = "family" if scores[t]["family"] > scores[t]["own"] else None
        assert saved["source"].get(t) == expect


def test_train_honours_a_family_source(data_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    (d / "predictor.json").write_text(json.dumps({"source": {"conv-bn": "family"}}))
    pred = train_predictor("ort-cpu", d, RULES)
    assert "type:conv-bn" not in pred.regressors
    assert "type:conv-bn-relu" in pred.regressors and "family:conv" in pred.regressors
    b = GraphBuilder("m", (1, 16, 28, 28))
    g = b.build([b.bn(b.conv(b.relu(b.bn(b.conv(b.x, 24))), 32))])
    rows = pred.predict(g, check_device=False).rows
    by = {r.type: r.estimated_by for r in rows}
    assert by == {"conv-bn-relu": "regressor", "conv-bn": "family:conv"}
    assert all(r.predicted_ms > 0 for r in rows)


def test_the_head_type_is_scored_against_its_family_too(data_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    ds = KernelDataset(d, "ort-cpu")
    assert len(ds.rows("conv")) >= 30
    scores = choose_regressors(ds, folds=3, min_samples=100, min_type_samples=30)
    assert {"own", "family"} <= set(scores["conv"])
    saved = json.loads((d / "predictor.json").read_text())
    expect = "family" if scores["conv"]["family"] > scores["conv"]["own"] else None
    assert saved["source"].get("conv") == expect


def test_a_head_type_on_its_family_is_predicted_by_the_family(data_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    (d / "predictor.json").write_text(json.dumps({"source": {"conv": "family"}}))
    pred = train_predictor("ort-cpu", d, RULES)
    assert "type:conv" not in pred.regressors and "family:conv" in pred.regressors
    b = GraphBuilder("m", (1, 16, 28, 28))
    rows = pred.predict(b.build([b.conv(b.x, 24)]), check_device=False).rows
    assert [(r.type, r.estimated_by) for r in rows] == [("conv", "family:conv")]
    assert rows[0].predicted_ms > 0


def test_keep_trains_on_the_selected_rows_only(data_dir):
    full = train_predictor("ort-cpu", data_dir, RULES)
    small = train_predictor("ort-cpu", data_dir, RULES,
                            keep=lambda t, c, o: t != "conv-bn" and c.h <= 14)
    assert "conv-bn" not in small.meta["samples"]
    assert small.meta["samples"]["conv-bn-relu"] < full.meta["samples"]["conv-bn-relu"]
    # keeping every row changes nothing
    same = train_predictor("ort-cpu", data_dir, RULES, keep=lambda t, c, o: True)
    assert same.meta["samples"] == full.meta["samples"]


def test_the_fallback_is_scaled_to_a_thin_types_own_rows():
    """The type's fallback is the shared log-log line moved by the median ratio of the
    type's own rows to it: one odd row does not set it, and it is bounded."""
    import numpy as np

    from nnmeter.predictors.regressors import LinearKernelRegressor
    from nnmeter.predictors.train import FALLBACK_SCALE_BOUNDS, scaled_fallback

    fb = np.array([[1e5, 1e3], [1e6, 1e4], [1e7, 1e5], [1e8, 1e6]])
    line = LinearKernelRegressor().fit(fb, np.array([0.001, 0.01, 0.1, 1.0]))
    base = line.predict(fb[:3])
    own = scaled_fallback(line, fb[:3], base * np.array([0.2, 0.2, 3.0]))
    assert np.allclose(own.predict(fb), line.predict(fb) * 0.2)
    # the line itself is not changed
    assert np.allclose(line.predict(fb[:3]), base)
    far = scaled_fallback(line, fb[:1], base[:1] * 1e-4)
    assert np.allclose(far.predict(fb[:1]), base[:1] * FALLBACK_SCALE_BOUNDS[0])


def test_a_thin_type_gets_its_own_fallback_key(data_dir):
    """Training adds ``fallback:<type>`` for a type without a regressor of its own and
    stores it like any regressor (it survives the cache)."""
    import numpy as np

    from nnmeter.predictors.kernel_data import KernelData
    from nnmeter.predictors.model import PredictorSettings
    from nnmeter.predictors.train import fit_regressors

    from nnmeter.kernels import KERNEL_TYPES

    rng = np.random.default_rng(0)

    def rows(t, n, ms_per_unit):
        X = rng.uniform(1.0, 100.0, (n, len(KERNEL_TYPES.get(t).feature_names)))
        fb = rng.uniform(1e4, 1e6, (n, 2))
        return KernelData(t, [None] * n, X, fb[:, 0] * ms_per_unit, fb, ["initial"] * n)

    thick, thin = rows("conv-bn-relu", 20, 1e-5), rows("add", 3, 1e-8)
    regs, counts = fit_regressors({"conv-bn-relu": thick, "add": thin},
                                  KernelDataset(data_dir, "ort-cpu"),
                                  PredictorSettings(min_type_samples=10))
    assert "type:conv-bn-relu" in regs and "fallback:conv-bn-relu" not in regs
    assert "fallback:add" in regs and counts["add"] == 3
    assert np.all(regs["fallback:add"].predict(thin.fb) < regs["fallback"].predict(thin.fb))
