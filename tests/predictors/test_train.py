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
