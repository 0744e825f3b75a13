"""Latency side of xray: measured time per op or per model, against what it should be.

"What it should be" comes from two places, side by side in one process:

- the same model on another resolver or backend (LiteRT's XNNPACK path against its
  reference kernels): LiteRT's Python API gives no time per op, so LiteRT is compared
  per model;
- the per-kernel prediction of :mod:`nnmeter.predictors`, when a predictor for the
  backend is installed.

A kernel (or the model) is *slow* when it takes more than ``k`` times the better of
those. Times are the minimum of repeated in-process runs (noise only adds time).

Examples
--------
>>> chk = check_latency(runner, feeds)                  # doctest: +SKIP
>>> [(r.name, r.ratio) for r in chk.slow]               # doctest: +SKIP
[('model', 24.1)]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from nnmeter.errors import NNMeterError
from nnmeter.xray.instrument import Runner, open_runner

__all__ = ["LatencyRow", "LatencyCheck", "check_latency", "alternative_backends"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LatencyRow:
    """Measured against expected time of one op, kernel or the whole model (``name='model'``).

    ``expected_ms`` is the better of ``other_ms`` (another backend) and ``predicted_ms``;
    ``ratio`` = measured / expected.
    """

    name: str
    op: str
    measured_ms: float
    predicted_ms: float | None = None
    other_ms: float | None = None
    other_backend: str | None = None
    ratio: float | None = None
    slow: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LatencyCheck:
    """Latency findings of one deployment."""

    backend: str
    model_ms: float
    alternatives_ms: dict[str, float]
    rows: tuple[LatencyRow, ...]
    k: float
    notes: tuple[str, ...] = field(default=())

    @property
    def slow(self) -> tuple[LatencyRow, ...]:
        return tuple(r for r in self.rows if r.slow)

    def as_dict(self) -> dict:
        return {"backend": self.backend, "model_ms": self.model_ms,
                "alternatives_ms": dict(self.alternatives_ms), "k": self.k,
                "rows": [r.as_dict() for r in self.rows],
                "slow": [r.name for r in self.slow], "notes": list(self.notes)}


def alternative_backends(runner: Runner) -> list[str]:
    """Backends that run the same model file, to compare the deployed one against."""
    if runner.fmt == "tflite":
        return ["litert-cpu"] if runner.backend.startswith("litert-cpu-ref") else \
            ["litert-cpu-ref"]
    return []


def _predicted(runner: Runner) -> tuple[float | None, dict[str, float], str]:
    """Predicted total and per-node times, or (None, {}, why not)."""
    try:
        from nnmeter.predictors import predict
    except ImportError as err:
        return None, {}, f"no latency predictor available ({err})"
    try:
        report = predict(str(runner.path), runner.backend.removesuffix("-ref"))
    except (NNMeterError, ImportError, NotImplementedError, ValueError, KeyError,
            RuntimeError, OSError) as err:
        return None, {}, f"no prediction for {runner.backend}: {err}"
    per_node: dict[str, float] = {}
    for row in getattr(report, "rows", []) or []:
        nodes = getattr(row, "nodes", None) or getattr(row, "node_names", ()) or ()
        ms = getattr(row, "predicted_ms", None)
        if ms is None or not nodes:
            continue
        for n in nodes:
            per_node[str(n)] = float(ms) / len(nodes)
    total = getattr(report, "total_ms", None)
    return (float(total) if total is not None else None), per_node, ""


def check_latency(runner: Runner, feeds: dict[str, np.ndarray], *, k: float = 3.0,
                  repeats: int = 20, alternatives: list[str] | None = None,
                  use_predictor: bool = True) -> LatencyCheck:
    """Time the deployed model, per op where possible, and flag what is ``k``× too slow.

    Parameters
    ----------
    runner : Runner
        The deployed model on its backend.
    feeds : dict
        One set of model feeds.
    k : float
        Slowness factor that flags an op or the model.
    alternatives : list of str, optional
        Backends to time the same file on (default: :func:`alternative_backends`).
    """
    notes: list[str] = []
    model_ms = runner.time_ms(feeds, repeats=repeats)
    alts: dict[str, float] = {}
    for b in alternative_backends(runner) if alternatives is None else alternatives:
        try:
            other = open_runner(runner.path, b)
            alts[b] = other.time_ms(other.feeds_from_native(list(feeds.values())),
                                    repeats=repeats)
        except NNMeterError as err:
            notes.append(f"could not time {runner.path.name} on {b}: {err}")
    pred_total, pred_nodes, why = (None, {}, "predictor not used")
    if use_predictor:
        pred_total, pred_nodes, why = _predicted(runner)
    if why:
        notes.append(why)
    rows: list[LatencyRow] = []
    best_alt = min(alts, key=alts.get) if alts else None
    expected = [v for v in (alts.get(best_alt) if best_alt else None, pred_total) if v]
    ratio = model_ms / min(expected) if expected else None
    rows.append(LatencyRow("model", "model", model_ms, pred_total,
                           alts.get(best_alt) if best_alt else None, best_alt, ratio,
                           bool(ratio and ratio > k)))
    for name, ms in runner.op_times_ms(feeds).items():
        pred = pred_nodes.get(name) or pred_nodes.get(name.split("_nchwc")[0])
        r = ms / pred if pred else None
        layer = runner.layers.get(name)
        rows.append(LatencyRow(name, layer.op if layer else name.split("_")[0], ms, pred,
                               None, None, r, bool(r and r > k)))
    if runner.fmt == "tflite":
        notes.append("LiteRT's Python API gives no time per op; compared per model")
    return LatencyCheck(runner.backend, model_ms, alts, tuple(rows), k, tuple(notes))
