"""Choosing the fastest backend for a model (Walle-style), and the baselines to beat.

:func:`rank_backends` predicts a model on every candidate backend with this device's
predictors and ranks them. Two analytic baselines stand beside it:

- **MNN's analytic cost** (:class:`AnalyticCost` with ``per_class=False``): Walle's MNN
  chooses among backends by summing a per-op cost over the graph, on a CPU the op's
  FLOPs over the backend's measured FLOPS. One FLOPS per backend, measured here on a
  dense 3×3 convolution (:func:`measure_rates`).
- **Per op class** (``per_class=True``): the same sum with one measured rate per op
  class (dense convolution, depthwise convolution, fully connected, everything else),
  a stronger variant of the same idea.

:func:`regret` is the time lost by a pick against the measured fastest.

Examples
--------
>>> cost = AnalyticCost({"a": {"conv": 100.0, "dwconv": 10.0, "fc": 50.0, "other": 5.0},
...                      "b": {"conv": 50.0, "dwconv": 40.0, "fc": 50.0, "other": 20.0}})
>>> regret("b", {"a": 2.0, "b": 2.5})
0.25
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["OP_CLASSES", "NEAR_TIE", "op_class", "probe_graphs", "measure_rates",
           "AnalyticCost", "Candidate", "rank_backends", "speed_factor", "probe_speeds",
           "near_ties", "regret"]

#: two backends within this fraction of each other are a near tie: on a 2-vCPU
#: machine a model's measured winner among them changes from one pass to the next
NEAR_TIE = 0.03

#: the op classes of the per-class analytic cost, with the probe that measures each
OP_CLASSES = ("conv", "dwconv", "fc", "other")


def op_class(node: Any) -> str:
    """The analytic cost's class of ``node``."""
    if node.op in ("conv", "convtranspose"):
        return "conv"
    if node.op == "dwconv":
        return "dwconv"
    if node.op in ("fc", "matmul"):
        return "fc"
    return "other"


def probe_graphs() -> dict[str, Any]:
    """One single-op model per op class, sized so that each runs for about a
    millisecond on a 2-core CPU: the models whose FLOPS the analytic cost uses."""
    from nnmeter.ir import GraphBuilder

    out = {}
    b = GraphBuilder("probe_conv", (1, 64, 56, 56))
    out["conv"] = b.build([b.conv(b.x, 64, kernel=3)])
    b = GraphBuilder("probe_dwconv", (1, 256, 56, 56))
    out["dwconv"] = b.build([b.dwconv(b.x, kernel=3)])
    b = GraphBuilder("probe_fc", (1, 4096))
    out["fc"] = b.build([b.fc(b.x, 4096)])
    b = GraphBuilder("probe_other", (1, 64, 56, 56))
    out["other"] = b.build([b.relu(b.add_(b.x, b.x))])
    return out


def measure_rates(backend_id: str, profiler: Any = None) -> dict[str, float]:
    """FLOPs per millisecond of ``backend_id`` on each op class's probe (measured)."""
    from nnmeter.backends import Profiler

    own = profiler is None
    prof = profiler or Profiler(backend_id)
    try:
        rates = {}
        for cls, g in probe_graphs().items():
            m = prof.measure(g, on_error="raise")
            rates[cls] = g.cost().flops / m.latency_ms
        return rates
    finally:
        if own:
            prof.close()


class AnalyticCost:
    """Per-op analytic latency: each op's FLOPs over its backend's measured rate.

    Parameters
    ----------
    rates : mapping
        Backend id → {op class → FLOPs per ms} (:func:`measure_rates`).
    per_class : bool
        False: every op at the dense convolution's rate (MNN's single FLOPS per
        backend); True: each op at its class's rate.
    """

    def __init__(self, rates: Mapping[str, Mapping[str, float]], *,
                 per_class: bool = False) -> None:
        self.rates = {b: dict(r) for b, r in rates.items()}
        self.per_class = per_class

    def predict(self, graph: Any, backend_id: str) -> float:
        """Analytic ms of ``graph`` on ``backend_id``."""
        from nnmeter.ir.cost import node_cost

        r = self.rates[backend_id]
        if not self.per_class:
            return graph.cost().flops / r["conv"]
        return sum(node_cost(n).flops / r[op_class(n)] for n in graph.nodes())

    def pick(self, graph: Any, backend_ids: Sequence[str] | None = None) -> str:
        """The backend with the lowest analytic cost."""
        ids = list(backend_ids or self.rates)
        return min(ids, key=lambda b: self.predict(graph, b))


@dataclass
class Candidate:
    """One backend's prediction for a model."""

    backend_id: str
    predicted_ms: float
    interval_ms: tuple[float, float] | None
    interval_level: float | None
    device: str
    device_mismatch: bool
    #: the factor ``predicted_ms`` (and its interval) was scaled by for the host's speed
    #: now against the predictor's build (:func:`probe_speeds`); None when not scaled
    speed_ratio: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"backend_id": self.backend_id, "predicted_ms": self.predicted_ms,
                "interval_ms": list(self.interval_ms) if self.interval_ms else None,
                "interval_level": self.interval_level, "device": self.device,
                "device_mismatch": self.device_mismatch, "speed_ratio": self.speed_ratio}


def rank_backends(graph: Any, backend_ids: Sequence[str], *,
                  device: str | None = None,
                  speed: Mapping[str, float | None] | None = None) -> list[Candidate]:
    """Every backend's predicted latency for ``graph``, fastest first, from the
    predictors of ``device`` (default: this machine's, else the nearest).

    ``speed`` (backend id -> factor, :func:`probe_speeds`' ``ratio``) scales a backend's
    prediction by how much slower the host runs that backend's speed reference now than
    while its predictor was built; a backend without a factor is left as predicted."""
    from nnmeter.predictors import load_predictor

    out = []
    for b in backend_ids:
        rep = load_predictor(b, device=device).predict(graph)
        f = (speed or {}).get(b)
        k = speed_factor(f)
        iv = (rep.interval_ms[0] * k, rep.interval_ms[1] * k) if rep.interval_ms else None
        out.append(Candidate(b, rep.total_ms * k, iv, rep.interval_level,
                             rep.device_name, bool(rep.device_mismatch),
                             k if f is not None else None))
    out.sort(key=lambda c: c.predicted_ms)
    return out


def speed_factor(ratio: float | None) -> float:
    """What a prediction is multiplied by for a speed ``ratio`` (:func:`probe_speeds`):
    the ratio itself, or 1 where there is none (or it is not a positive number).

    >>> speed_factor(1.2), speed_factor(None), speed_factor(float("nan"))
    (1.2, 1.0, 1.0)
    """
    return ratio if ratio is not None and math.isfinite(ratio) and ratio > 0 else 1.0


def probe_speeds(backend_ids: Sequence[str], *, device: str | None = None,
                 measure_ms: Any = None) -> dict[str, dict[str, Any]]:
    """How fast this machine runs each backend now against that backend's predictor's
    build: the speed reference (:mod:`nnmeter.devices.reference`, about half a
    millisecond's model) measured once per backend, over the median of the probes its
    build recorded.

    Predictors built at different times on a shared host were built at different speeds,
    and a ranking compares them with one another: one built while the host ran 10 %
    slow predicts its backend 10 % slow against the rest. Returns per backend a dict
    with ``ratio`` (now over build; None when not probed) and either ``now_ms``,
    ``build_ms``, ``build_probes`` or ``why`` (the predictor is another device's, or its
    build recorded no probe, or the measurement failed). ``measure_ms(graph, backend)``
    measures (default: a worker of its own, as ``nnmeter measure`` does)."""
    from nnmeter.devices.reference import speed_against_build
    from nnmeter.predictors import load_predictor

    out: dict[str, dict[str, Any]] = {}
    for b in backend_ids:
        pred = load_predictor(b, device=device)
        mismatch, _ = pred.check_device()
        if mismatch:
            name = pred.device_name or "another device"
            out[b] = {"ratio": None,
                      "why": f"the predictor is {name}'s, not this machine's"}
            continue
        got = speed_against_build(b, pred.dataset_dir, measure_ms=measure_ms)
        if got is None:
            out[b] = {"ratio": None, "why": "its build recorded no speed-reference probe, "
                                            "or the probe failed"}
            continue
        out[b] = {k: v for k, v in got.items() if k != "warning"}
    return out


def near_ties(ranked: Sequence[Candidate], tol: float = NEAR_TIE) -> list[str]:
    """The backends other than the pick (``ranked[0]``) predicted within ``tol`` of it:
    the pick among them is not worth trusting without measuring them.

    >>> near_ties([Candidate("a", 1.0, None, None, "d", False),
    ...            Candidate("b", 1.02, None, None, "d", False),
    ...            Candidate("c", 1.5, None, None, "d", False)])
    ['b']
    """
    if not ranked:
        return []
    best = ranked[0].predicted_ms
    return [c.backend_id for c in ranked[1:] if c.predicted_ms <= best * (1 + tol)]


def regret(pick: str, measured: Mapping[str, float]) -> float:
    """Time lost by ``pick`` against the measured fastest, as a fraction of it."""
    ok = {b: v for b, v in measured.items() if v is not None and math.isfinite(v)}
    best = min(ok.values())
    return (ok[pick] - best) / best
