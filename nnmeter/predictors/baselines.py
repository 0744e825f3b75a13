"""Model-level baselines of the nn-Meter paper: FLOPs and FLOPs+MAC linear regressions.

Both map whole-model cost figures to latency with a least-squares line
(``latency = a·FLOPs + c`` and ``latency = a·FLOPs + b·bytes + c``, bytes being the
memory access cost from :mod:`nnmeter.ir.cost`). They are trained on measured models
(the kernel predictor is not), so compare them by cross-validation
(:func:`cross_val_predict`).

Examples
--------
>>> import numpy as np
>>> F = np.array([[1e9, 1e7], [2e9, 2e7], [3e9, 2e7], [4e9, 5e7]])
>>> y = np.array([10.0, 20.0, 30.0, 40.0])
>>> b = FlopsBaseline().fit(F, y)
>>> [round(float(v), 3) for v in b.predict(F)]
[10.0, 20.0, 30.0, 40.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnmeter.predictors.regressors import LinearKernelRegressor

__all__ = ["graph_cost_features", "FlopsBaseline", "FlopsMacBaseline", "cross_val_predict"]


def graph_cost_features(graph: Any) -> np.ndarray:
    """[FLOPs, memory bytes] of a shape-inferred ModelGraph."""
    c = graph.cost()
    return np.array([float(c.flops), float(c.memory_bytes)])


class FlopsBaseline:
    """Latency ∝ FLOPs (+ intercept). ``fit(F, y)`` takes rows of [FLOPs, bytes]."""

    columns = (0,)

    def __init__(self) -> None:
        self.reg_ = None

    def fit(self, F: np.ndarray, y: np.ndarray) -> "FlopsBaseline":
        F = np.asarray(F, dtype=np.float64)
        self.reg_ = LinearKernelRegressor(log_features=False, log_target=False, ridge=0.0).fit(
            F[:, list(self.columns)], y)
        return self

    def predict(self, F: np.ndarray) -> np.ndarray:
        F = np.asarray(F, dtype=np.float64)
        # a line can go below 0 for tiny models; latency cannot
        return np.maximum(self.reg_.predict(F[:, list(self.columns)]), 1e-6)


class FlopsMacBaseline(FlopsBaseline):
    """Latency = a·FLOPs + b·memory bytes + c."""

    columns = (0, 1)


def cross_val_predict(make: Any, F: np.ndarray, y: np.ndarray, *, folds: int = 5,
                      seed: int = 0) -> np.ndarray:
    """Out-of-fold predictions of a baseline (``make()`` returns a fresh one)."""
    F = np.asarray(F, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    fold = np.random.default_rng(seed).permutation(len(y)) % folds
    out = np.empty(len(y))
    for k in range(folds):
        test = fold == k
        out[test] = make().fit(F[~test], y[~test]).predict(F[test])
    return out
