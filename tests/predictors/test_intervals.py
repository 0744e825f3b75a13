"""Split-conformal intervals: the bounds, the record, and the report's interval_ms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nnmeter.errors import DatasetError
from nnmeter.predictors.intervals import (
    INTERVALS_FILE, Intervals, conformal_bounds, read_intervals,
)


def test_bounds_cover_the_level_on_exchangeable_data():
    # the guarantee is on average over calibration sets: at least the level
    rng = np.random.default_rng(0)
    covers = []
    for _ in range(200):
        lo, hi = conformal_bounds(rng.normal(0, 0.1, 100), 0.9)
        test = rng.normal(0, 0.1, 2000)
        covers.append(np.mean((test >= lo) & (test <= hi)))
    assert 0.9 <= np.mean(covers) <= 0.93
    assert lo < 0 < hi


def test_bounds_with_few_points_take_the_extremes():
    assert conformal_bounds([0.3, -0.2, 0.1], 0.9) == (-0.2, 0.3)
    with pytest.raises(ValueError):
        conformal_bounds([], 0.9)


def test_record_round_trip_and_application(tmp_path):
    rec = {"level": 0.9, "types": {"conv": {"lo": -0.1, "hi": 0.2, "n": 50},
                                   "*": {"lo": -0.3, "hi": 0.3, "n": 500}},
           "model": {"lo": -0.05, "hi": 0.08, "n": 200, "source": "seed1000"}}
    (tmp_path / INTERVALS_FILE).write_text(json.dumps(rec))
    iv = read_intervals(tmp_path)
    assert iv.level == 0.9
    assert iv.row("conv", 1.0, own_regressor=True) == pytest.approx(
        (math.exp(-0.1), math.exp(0.2)))
    # a family or fallback estimate, or a type without bounds: the pooled ones
    assert iv.row("conv", 1.0, own_regressor=False) == pytest.approx(
        (math.exp(-0.3), math.exp(0.3)))
    assert iv.row("relu", 2.0, own_regressor=True)[1] == pytest.approx(2 * math.exp(0.3))
    assert iv.total(10.0) == pytest.approx((10 * math.exp(-0.05), 10 * math.exp(0.08)))
    assert read_intervals(tmp_path / "none") is None


@pytest.mark.parametrize("text", ["{", '{"level": 2, "types": {}, "model": {"lo": 0, "hi": 1}}',
                                  '{"level": 0.9, "types": {}, "model": {"lo": 1, "hi": 0}}',
                                  '{"level": 0.9}'])
def test_a_bad_record_names_the_file(tmp_path, text):
    (tmp_path / INTERVALS_FILE).write_text(text)
    with pytest.raises(DatasetError, match=INTERVALS_FILE):
        read_intervals(tmp_path)


def test_a_report_carries_intervals_on_total_and_rows(predictor_with_intervals):
    from nnmeter.ir import GraphBuilder

    pred = predictor_with_intervals
    b = GraphBuilder("m", (1, 16, 28, 28))
    report = pred.predict(b.build([b.relu(b.bn(b.conv(b.x, 32)))]), check_device=False)
    lo, hi = report.interval_ms
    assert lo < report.total_ms < hi and report.interval_level == 0.9
    assert all(r.interval_ms[0] <= r.predicted_ms <= r.interval_ms[1] for r in report.rows)
    d = report.as_dict()
    assert d["interval_ms"] == [lo, hi] and d["rows"][0]["interval_ms"]
    assert pred.interval(10.0) == pytest.approx(Intervals.total(pred.intervals, 10.0))


@pytest.fixture
def predictor_with_intervals(conv_bn_relu_dir):
    from nnmeter.fusion.rules import FusionRules
    from nnmeter.predictors.train import train_predictor

    rules = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True,
                                                         ("bn", "relu"): True})
    predictor = train_predictor("ort-cpu", conv_bn_relu_dir, rules)
    predictor.intervals = Intervals({
        "level": 0.9, "types": {"*": {"lo": -0.2, "hi": 0.2}},
        "model": {"lo": -0.1, "hi": 0.1, "source": "test"}})
    return predictor
