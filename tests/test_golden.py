"""Golden predictions: every committed dataset reproduces the stored zoo and example
predictions to 1e-9 ms or one part in a million, whichever is larger (totals, the batch
path and every kernel's time).

The relative part is for training on another CPU: a predictor with the in-model term or
a transfer correction is fitted by scipy's least squares and a forest at load time, and
their floating-point sums round differently on another machine (seen: the Xeon
predictors, captured there, reproduce to 8e-11 of their values on an AMD Zen 5). Any
change of the predictor itself moves a value by far more.

A refactor of the predictor must leave these numbers where they are; a change that has
to move one rewrites ``tests/golden/predictions.json`` with ``python
tests/golden/capture.py`` in a commit of its own that says why.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("golden_capture", HERE / "golden" / "capture.py")
capture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capture)

TOL_MS = 1e-9
TOL_REL = 1e-6


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(capture.GOLDEN.read_text())


@pytest.fixture(scope="module")
def graphs():
    return capture.golden_graphs()


def test_golden_covers_every_committed_dataset(stored):
    assert sorted(stored) == sorted(capture.golden_datasets())
    for dataset_id, preds in stored.items():
        assert len(preds) >= 5 * 13 + 2, dataset_id


@pytest.mark.parametrize("dataset_id", capture.golden_datasets())
def test_predictions_unchanged(dataset_id, stored, graphs):
    now = capture.predictions(dataset_id, graphs)
    want = stored[dataset_id]
    assert sorted(now) == sorted(want)
    for name, w in want.items():
        got = now[name]
        assert got["total_ms"] == pytest.approx(w["total_ms"], rel=TOL_REL, abs=TOL_MS), name
        assert got["many_ms"] == pytest.approx(w["many_ms"], rel=TOL_REL, abs=TOL_MS), name
        assert [t for t, _ in got["kernels"]] == [t for t, _ in w["kernels"]], name
        for (t, ms), (_, wms) in zip(got["kernels"], w["kernels"]):
            assert ms == pytest.approx(wms, rel=TOL_REL, abs=TOL_MS), (name, t)
