"""Prediction intervals by split-conformal calibration, per kernel type and per model.

A predictor's error is a ratio: a kernel or a model predicted at ``p`` ms runs in
``p * exp(r)`` ms, ``r`` the log ratio measured/predicted. Split-conformal calibration
takes ``r`` on data the regressors did not train on and keeps its lower and upper
quantiles; the interval of a new prediction is ``[p * exp(lo), p * exp(hi)]``. For
exchangeable data it covers the truth with probability at least ``level`` (both tails
take ``(1 - level) / 2``, with the finite-sample rank ``ceil((n + 1) q)``).

- **Kernel rows** (``types``): per kernel type, the log ratios of the type's own rows
  predicted out of fold (5 folds, a regressor of the type's chosen kind trained on the
  other folds). A type without enough rows (or a row estimated by a family regressor or
  the fallback) takes the pooled bounds of every type (``"*"``).
- **Whole models** (``model``): the log ratios of measured zoo models of the device (a
  calibration set, never the one that is reported) against the full predictor. Kernel
  errors of one model are correlated (the same device, the same terms), so the model's
  interval is calibrated on models, not summed from rows.

:func:`calibrate` writes ``intervals.json`` into the kernel dataset's folder; the
predictor reads it (:func:`read_intervals`) and reports ``interval_ms`` on the total and
on every row. Without the file a report has no intervals, and says so.

Examples
--------
>>> conformal_bounds([0.0, 0.1, -0.1, 0.05, -0.05] * 4, 0.8)
(-0.1, 0.1)
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["INTERVALS_FILE", "LEVEL", "conformal_bounds", "kernel_log_ratios", "calibrate",
           "read_intervals", "Intervals"]

INTERVALS_FILE = "intervals.json"
LEVEL = 0.90
#: rows a type needs for bounds of its own (fewer: the pooled bounds)
MIN_TYPE_ROWS = 40


def conformal_bounds(log_ratios: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """(lo, hi): the split-conformal lower and upper quantiles of ``log_ratios`` for a
    two-sided interval of coverage ``level``."""
    r = np.sort(np.asarray(log_ratios, dtype=float))
    r = r[np.isfinite(r)]
    n = r.size
    if n == 0:
        raise ValueError("no calibration ratios")
    tail = (1.0 - level) / 2.0
    k_hi = min(n, math.ceil((n + 1) * (1.0 - tail)))  # 1-based rank
    k_lo = max(1, math.floor((n + 1) * tail))
    return float(r[k_lo - 1]), float(r[k_hi - 1])


def kernel_log_ratios(dataset: Any, *, folds: int = 5, seed: int = 0,
                      progress: Any = None) -> dict[str, np.ndarray]:
    """Per kernel type, log(measured / predicted) of every row predicted out of fold by
    a regressor of the type's chosen kind (``predictor.json``)."""
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.kernel_data import load_kernel_data
    from nnmeter.predictors.regressors import make_regressor
    from nnmeter.predictors.train import _read_choice, work_feature

    chosen = _read_choice(dataset)
    out: dict[str, np.ndarray] = {}
    types = sorted(dataset.kernel_types())
    for i, t in enumerate(types):
        if progress:
            progress(i, len(types), t)
        d = load_kernel_data(dataset, t)
        if d is None or len(d) < max(folds, 10):
            continue
        norm = work_feature(KERNEL_TYPES.get(t))
        fold = np.random.default_rng(seed).permutation(len(d)) % folds
        pred = np.empty(len(d))
        for k in range(folds):
            te = fold == k
            reg = make_regressor(t, chosen.get(t, "rf"), norm_feature=norm, random_state=seed)
            pred[te] = reg.fit(d.X[~te], d.y[~te]).predict(d.X[te])
        out[t] = np.log(d.y / pred)
    return out


def calibrate(dataset_dir: str | Path, backend_id: str, *, model_ratios: Sequence[float],
              model_source: str, level: float = LEVEL, kernel_ratios: dict[str, Any] | None
              = None, progress: Any = None) -> dict[str, Any]:
    """Write ``intervals.json`` for the kernel dataset at ``dataset_dir``: per-type
    bounds from out-of-fold kernel rows, and model bounds from ``model_ratios`` (log
    measured/predicted of calibration models, ``model_source`` naming them)."""
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.store import write_atomic

    ds = KernelDataset(Path(dataset_dir), backend_id)
    ratios = kernel_ratios if kernel_ratios is not None else kernel_log_ratios(
        ds, progress=progress)
    types = {}
    for t, r in sorted(ratios.items()):
        if len(r) >= MIN_TYPE_ROWS:
            lo, hi = conformal_bounds(r, level)
            types[t] = {"lo": round(lo, 6), "hi": round(hi, 6), "n": int(len(r))}
    pooled = np.concatenate([np.asarray(r) for r in ratios.values()]) if ratios else []
    if len(pooled):
        lo, hi = conformal_bounds(pooled, level)
        types["*"] = {"lo": round(lo, 6), "hi": round(hi, 6), "n": int(len(pooled))}
    mlo, mhi = conformal_bounds(model_ratios, level)
    record = {"level": level, "method": "split-conformal, log(measured/predicted)",
              "types": types,
              "model": {"lo": round(mlo, 6), "hi": round(mhi, 6), "n": len(model_ratios),
                        "source": model_source},
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(Path(dataset_dir) / INTERVALS_FILE,
                 (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return record


class Intervals:
    """The bounds of ``intervals.json``, applied to predictions."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.level = float(record["level"])
        self.types = {t: (float(v["lo"]), float(v["hi"])) for t, v in record["types"].items()}
        m = record["model"]
        self.model = (float(m["lo"]), float(m["hi"]))
        self.model_source = str(m.get("source", ""))

    def row(self, kernel_type: str, ms: float, *, own_regressor: bool) -> tuple[float, float]:
        """The interval of a kernel row: its type's bounds when its own regressor
        predicted it, else the pooled ones."""
        lo, hi = (self.types.get(kernel_type) if own_regressor else None) or \
            self.types.get("*", self.model)
        return ms * math.exp(lo), ms * math.exp(hi)

    def total(self, ms: float) -> tuple[float, float]:
        lo, hi = self.model
        return ms * math.exp(lo), ms * math.exp(hi)


def read_intervals(dataset_dir: str | Path) -> Intervals | None:
    """The dataset's intervals, or None without ``intervals.json``.

    Raises
    ------
    DatasetError
        If the file is not valid (naming it and what to do).
    """
    from nnmeter.errors import DatasetError

    path = Path(dataset_dir) / INTERVALS_FILE
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        iv = Intervals(rec)
    except (ValueError, KeyError, TypeError) as err:
        raise DatasetError(f"{path} is not a valid intervals record ({err}); run "
                           f"`python experiments/intervals.py calibrate` again or delete it"
                           ) from err
    if not (0 < iv.level < 1) or not all(lo <= hi for lo, hi in [*iv.types.values(), iv.model]):
        raise DatasetError(f"{path}: level must be in (0, 1) and every lo <= hi; run "
                           f"`python experiments/intervals.py calibrate` again")
    return iv
