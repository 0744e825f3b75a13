from __future__ import annotations

import math

import numpy as np
import pytest

from nnmeter import evaluate as ev


def test_within_bounds_inclusive():
    true = [10.0, 10.0, 10.0, 10.0]
    pred = [10.0, 11.0, 9.0, 11.5]
    assert ev.within(pred, true, 10) == 0.75
    assert ev.within(pred, true, 5) == 0.25
    assert ev.within(pred, true, 15) == 1.0


def test_error_metrics_known_values():
    pred, true = [1.1, 1.8], [1.0, 2.0]
    assert ev.mape(pred, true) == pytest.approx(10.0)
    assert ev.rmspe(pred, true) == pytest.approx(10.0)
    assert ev.rmse(pred, true) == pytest.approx(math.sqrt((0.01 + 0.04) / 2))


def test_rank_correlations():
    true = np.arange(1, 11, dtype=float)
    assert ev.spearman(true * 2, true) == pytest.approx(1.0)
    assert ev.kendall(true[::-1].copy(), true) == pytest.approx(-1.0)
    assert math.isnan(ev.spearman([1.0], [1.0]))


def test_evaluate_record_and_validation():
    m = ev.evaluate([1.0, 2.0, 3.3], [1.0, 2.1, 3.0])
    assert m.n == 3 and m.acc10 == 1.0 and m.acc5 == pytest.approx(2 / 3)
    assert set(m.as_dict()) >= {"acc5", "acc10", "acc15", "rmse_ms", "mape_percent"}
    with pytest.raises(ValueError, match="pair up"):
        ev.evaluate([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="> 0"):
        ev.evaluate([1.0], [0.0])
