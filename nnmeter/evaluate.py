"""Accuracy metrics of latency predictions: ±5/±10/±15 % accuracy, RMSE, RMSPE, MAPE,
and rank correlations (Spearman ρ, Kendall τ).

±p % accuracy is the share of samples whose prediction lies within ±p % of the
measured value: ``|pred − true| / true <= p/100`` (nn-Meter's definition).

Examples
--------
>>> m = evaluate([1.0, 2.0, 3.3], [1.0, 2.1, 3.0])
>>> round(m.acc10, 3), round(m.acc5, 3)
(1.0, 0.667)
>>> within([1.0, 1.2], [1.0, 1.0], 10.0)
0.5
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["Metrics", "evaluate", "within", "rmse", "rmspe", "mape", "spearman",
           "kendall", "relative_errors"]


def _pair(pred: Sequence[float], true: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64).ravel()
    t = np.asarray(true, dtype=np.float64).ravel()
    if p.shape != t.shape:
        raise ValueError(f"got {p.size} predictions for {t.size} measurements; they must pair up")
    if np.any(t <= 0):
        raise ValueError("measured latencies must be > 0 ms for relative metrics")
    return p, t


def relative_errors(pred: Sequence[float], true: Sequence[float]) -> np.ndarray:
    """``(pred − true) / true`` per sample (signed, as a fraction)."""
    p, t = _pair(pred, true)
    return (p - t) / t


def within(pred: Sequence[float], true: Sequence[float], percent: float) -> float:
    """Share (0..1) of samples predicted within ±``percent`` % of the measurement."""
    p, t = _pair(pred, true)
    if p.size == 0:
        return float("nan")
    return float(np.mean(np.abs(p - t) <= percent / 100.0 * t + 1e-12))


def rmse(pred: Sequence[float], true: Sequence[float]) -> float:
    """Root mean squared error, in the unit of the inputs (ms)."""
    p, t = _pair(pred, true)
    return float(np.sqrt(np.mean((p - t) ** 2))) if p.size else float("nan")


def rmspe(pred: Sequence[float], true: Sequence[float]) -> float:
    """Root mean squared percentage error, in percent."""
    r = relative_errors(pred, true)
    return float(100.0 * np.sqrt(np.mean(r ** 2))) if r.size else float("nan")


def mape(pred: Sequence[float], true: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    r = relative_errors(pred, true)
    return float(100.0 * np.mean(np.abs(r))) if r.size else float("nan")


def spearman(pred: Sequence[float], true: Sequence[float]) -> float:
    """Spearman rank correlation ρ (nan for fewer than 2 samples or constant input)."""
    p, t = _pair(pred, true)
    if p.size < 2 or np.ptp(p) == 0 or np.ptp(t) == 0:
        return float("nan")
    from scipy.stats import spearmanr

    return float(spearmanr(p, t).statistic)


def kendall(pred: Sequence[float], true: Sequence[float]) -> float:
    """Kendall rank correlation τ-b (nan for fewer than 2 samples or constant input)."""
    p, t = _pair(pred, true)
    if p.size < 2 or np.ptp(p) == 0 or np.ptp(t) == 0:
        return float("nan")
    from scipy.stats import kendalltau

    return float(kendalltau(p, t).statistic)


@dataclass(frozen=True)
class Metrics:
    """All metrics of one set of predictions; accuracies are fractions (0..1)."""

    n: int
    acc5: float
    acc10: float
    acc15: float
    rmse_ms: float
    rmspe_percent: float
    mape_percent: float
    spearman: float
    kendall: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(pred: Sequence[float], true: Sequence[float]) -> Metrics:
    """Every metric of ``pred`` against measured ``true`` (both in ms)."""
    p, t = _pair(pred, true)
    return Metrics(
        n=int(p.size), acc5=within(p, t, 5), acc10=within(p, t, 10), acc15=within(p, t, 15),
        rmse_ms=rmse(p, t), rmspe_percent=rmspe(p, t), mape_percent=mape(p, t),
        spearman=spearman(p, t), kendall=kendall(p, t),
    )
