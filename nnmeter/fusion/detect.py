"""Fusion-rule detection: measure the crafted test cases on a backend and decide.

The rule (nn-Meter): op1 → op2 is fused when

    T1 + T2 - T12 > alpha * min(T1, T2)

with T1, T2 the times of op1 and op2 alone and T12 the time of op1 → op2 (alpha 0.5).

Per-inference overhead. Every measured model pays the runtime's fixed cost of one
inference (binding inputs, allocating outputs, scheduling) once: T1 + T2 pays it twice,
T12 once, so the raw saving holds one overhead whether or not the ops fuse, and for
small ops (a pooled plane, a 428-vector) that overhead is as large as the op itself,
which biases the raw rule towards "fused". The overhead O is measured on the smallest
models (one and three relus on 1x1x1x1: O = T(1) - (T(3) - T(1)) / 2, i.e. without the
one node's dispatch cost, which is part of what a fusion saves; see
:func:`measure_overhead`) and subtracted from each of T1, T2 and T12 before the rule is
applied (times floored at 0): saving = T1' + T2' - T12' = T1 + T2 - T12 - O,
threshold = alpha * min(T1', T2'). The decision uses the corrected times; the raw rule's
decision, saving and threshold are kept in ``extra.raw`` of every pattern. Blocks
generalise the rule: sum(parts') - T_block' > alpha * (sum(parts') - max(parts')).
Multi-output and multi-input tests keep the split hypothesis whose summed time
(corrected the same way) is closest to the measured time.

Noise: every time comes with its relative spread. When the margin of a decision is
smaller than the combined spread (root of the sum of squares of spread × time), all
models of the case are measured again (up to ``max_remeasure`` times; each time is then
the minimum over repeats, since interference only ever adds time) and the pattern is
recorded with ``close: true``.

Measurements go through one :class:`nnmeter.backends.Profiler` per backend, which
exports each ModelGraph to the backend's format. Identical models (same structure) are
measured once and shared between cases. Every measurement is appended to a partial
JSONL next to the output file, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnmeter.errors import MeasurementError
from nnmeter.fusion.rules import FusionRules, Pattern, rules_path
from nnmeter.fusion.testcases import TestCase, TestShapes, build_testcases, graph_signature
from nnmeter.ir.graph import ModelGraph

__all__ = ["detect_fusion", "decide_pair", "measure_overhead", "PairDecision", "Timing"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """A model's time (ms; minimum over repeats) and relative spread."""

    latency_ms: float
    spread: float
    repeats: int = 1

    @property
    def noise_ms(self) -> float:
        return self.latency_ms * self.spread

    def as_dict(self) -> dict[str, Any]:
        return {"latency_ms": round(self.latency_ms, 6), "spread": round(self.spread, 4),
                "repeats": self.repeats}


@dataclass(frozen=True)
class PairDecision:
    fused: bool
    saving_ms: float
    threshold_ms: float
    noise_ms: float

    @property
    def close(self) -> bool:
        """True when the margin is within the measurement noise."""
        return abs(self.saving_ms - self.threshold_ms) < self.noise_ms


def _noise(timings: Iterable[Timing]) -> float:
    return math.sqrt(sum(t.noise_ms ** 2 for t in timings))


def _net(t: Timing, overhead_ms: float) -> float:
    return max(t.latency_ms - overhead_ms, 0.0)


def decide_pair(t1: Timing, t2: Timing, t12: Timing, alpha: float = 0.5,
                overhead_ms: float = 0.0) -> PairDecision:
    """Apply T1' + T2' - T12' > alpha * min(T1', T2'), with T' = max(T - overhead, 0).

    Parameters
    ----------
    t1, t2, t12 : Timing
        op1 alone, op2 alone, op1 -> op2 (ms).
    alpha : float
        Threshold factor.
    overhead_ms : float
        The backend's per-inference overhead, subtracted from each time (0: the raw rule).

    Examples
    --------
    >>> d = decide_pair(Timing(1.0, 0.01), Timing(0.2, 0.01), Timing(1.02, 0.01))
    >>> d.fused, round(d.saving_ms, 2), d.threshold_ms
    (True, 0.18, 0.1)
    >>> d = decide_pair(Timing(1.0, 0.01), Timing(0.2, 0.01), Timing(1.02, 0.01),
    ...                 overhead_ms=0.1)
    >>> d.fused, round(d.saving_ms, 2), round(d.threshold_ms, 2)
    (True, 0.08, 0.05)
    """
    a, b, ab = (_net(t, overhead_ms) for t in (t1, t2, t12))
    saving = a + b - ab
    thr = alpha * min(a, b)
    return PairDecision(saving > thr, saving, thr, _noise((t1, t2, t12)))


def _decide_block(parts: list[Timing], block: Timing, alpha: float,
                  overhead_ms: float = 0.0) -> PairDecision:
    net = [_net(p, overhead_ms) for p in parts]
    total = sum(net)
    thr = alpha * (total - max(net))
    saving = total - _net(block, overhead_ms)
    return PairDecision(saving > thr, saving, thr, _noise([*parts, block]))


class _Store:
    """Measurements by graph signature, with a JSONL journal for resuming."""

    def __init__(self, measure: Callable[[ModelGraph], Any], journal: Path | None,
                 resume: bool) -> None:
        self._measure = measure
        self.journal = journal
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.device: dict[str, Any] | None = None
        self.fresh = 0
        if journal is not None and resume and journal.exists():
            for line in journal.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                self.rows.setdefault(row["sig"], []).append(row["m"])
            logger.info("resuming from %s (%d models measured)", journal, len(self.rows))
        elif journal is not None and journal.exists():
            journal.unlink()

    def _append(self, sig: str, m: dict[str, Any]) -> None:
        self.rows.setdefault(sig, []).append(m)
        if self.journal is not None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a") as f:
                f.write(json.dumps({"sig": sig, "m": m}) + "\n")

    def measure_new(self, graph: ModelGraph) -> dict[str, Any]:
        m = self._measure(graph)
        d = m.as_dict()
        if m.ok and m.device is not None and self.device is None:
            self.device = m.device.as_dict()
        self.fresh += 1
        if m.ok:
            self._append(graph_signature(graph), d)
        return d

    def ensure(self, graph: ModelGraph) -> None:
        sig = graph_signature(graph)
        ok = [m for m in self.rows.get(sig, []) if m.get("ok")]
        if self.device is not None:
            ok = [m for m in ok if (m.get("device") or {}).get("fingerprint_id")
                  == self.device["fingerprint_id"]]
        if not ok:
            d = self.measure_new(graph)
            if not d.get("ok"):
                raise MeasurementError(
                    f"measuring {graph.name} failed: {d.get('error')}")
        elif self.device is None:
            self.device = ok[0].get("device")

    def timing(self, graph: ModelGraph) -> Timing:
        sig = graph_signature(graph)
        ms = [m for m in self.rows.get(sig, []) if m.get("ok")]
        if self.device is not None:
            ms = [m for m in ms if (m.get("device") or {}).get("fingerprint_id")
                  == self.device["fingerprint_id"]] or ms
        lat = [float(m["latency_ms"]) for m in ms]
        spreads = sorted(float(m["spread"]) for m in ms if m.get("spread") is not None)
        spread = spreads[len(spreads) // 2] if spreads else 0.0
        if len(lat) > 1:
            spread = max(spread, (max(lat) - min(lat)) / min(lat) / 2)
        return Timing(min(lat), spread, len(lat))


def _null_model(n_ops: int = 1) -> ModelGraph:
    """The smallest model: ``n_ops`` relus in a chain on one element."""
    from nnmeter.ir.builder import GraphBuilder

    b = GraphBuilder(f"null_model_{n_ops}", (1, 1, 1, 1))
    y = b.x
    for i in range(n_ops):
        y = b.relu(y, name=f"op{i + 1}")
    return b.build([y])


def measure_overhead(store: "_Store") -> tuple[float, float]:
    """(per-inference overhead, per-node overhead) in ms.

    T(1 relu) = O_inf + O_node; T(3 relus) = O_inf + 3 O_node (a runtime that merges
    the chain gives O_node = 0, and the whole T(1 relu) counts as per-inference).
    The detector subtracts O_inf from every time: one node's dispatch is part of what a
    fusion saves, so it stays in T1, T2 and T12.
    """
    one, three = _null_model(1), _null_model(3)
    store.ensure(one)
    store.ensure(three)
    t1, t3 = store.timing(one).latency_ms, store.timing(three).latency_ms
    per_node = min(max((t3 - t1) / 2, 0.0), t1)
    return t1 - per_node, per_node


def _evaluate(case: TestCase, store: _Store, alpha: float, max_remeasure: int,
              overhead_ms: float) -> Pattern:
    for g in case.models.values():
        store.ensure(g)
    close = False
    for attempt in range(max_remeasure + 1):
        t = {role: store.timing(g) for role, g in case.models.items()}
        pattern, margin, noise = _decide_case(case, t, alpha, overhead_ms)
        if abs(margin) >= noise:
            break
        close = True
        if attempt < max_remeasure:
            logger.info("%s: margin %.4f ms within noise %.4f ms, measuring again",
                        case.name, margin, noise)
            for g in case.models.values():
                store.measure_new(g)
    return Pattern(**{**pattern, "close": close})


def _decide_case(case: TestCase, t: dict[str, Timing], alpha: float,
                 overhead_ms: float = 0.0) -> tuple[dict[str, Any], float, float]:
    """(pattern fields, decision margin in ms, noise in ms) of one case.

    Pairs and blocks are decided on overhead-corrected times (see the module doc);
    ``extra.raw`` holds the raw rule's decision, saving and threshold.
    """
    times = {role: tm.as_dict() for role, tm in t.items()}
    base = {"name": case.name, "kind": case.kind, "ops": case.ops, "times_ms": times}
    if case.kind in ("pair", "block"):
        if case.kind == "pair":
            args: tuple[Any, ...] = (t["op1"], t["op2"], t["block"], alpha)
            decide: Callable[..., PairDecision] = decide_pair
            extra: dict[str, Any] = {}
        else:
            args = ([tm for role, tm in t.items() if role.startswith("part:")], t["block"],
                    alpha)
            decide = _decide_block
            extra = {"block": case.block}
        d = decide(*args, overhead_ms=overhead_ms)
        raw = decide(*args, overhead_ms=0.0)
        extra.update({"overhead_ms": round(overhead_ms, 6), "raw": {
            "fused": raw.fused, "saving_ms": round(raw.saving_ms, 6),
            "threshold_ms": round(raw.threshold_ms, 6)}})
        return ({**base, "fused": d.fused, "saving_ms": round(d.saving_ms, 6),
                 "threshold_ms": round(d.threshold_ms, 6), "extra": extra},
                d.saving_ms - d.threshold_ms, d.noise_ms)
    L = {role: tm.latency_ms for role, tm in t.items()}
    if case.kind == "multi_output":
        p, c1, c2 = case.ops
        hyps = {"none": L["p"] + L["c1"] + L["c2"],
                f"{p}+{c1}": L["p+c1"] + L["c2"],
                f"{p}+{c2}": L["p+c2"] + L["c1"]}
    elif case.kind == "multi_input":
        branch, _, join = case.ops
        hyps = {"none": 2 * L["branch"] + L["join"],
                f"{branch}+{join}": L["branch"] + L["branch+join"]}
    else:
        raise ValueError(f"unknown test-case kind {case.kind!r}")
    # each separately measured model pays the per-inference overhead once; the
    # measured model pays it once in all, so a hypothesis summing k models is k-1
    # overheads too high
    n_models = {"none": 3}
    hyps = {h: v - (n_models.get(h, 2) - 1) * overhead_ms for h, v in hyps.items()}
    measured = L["block"]
    ranked = sorted(hyps, key=lambda h: (abs(hyps[h] - measured), h))
    chosen = ranked[0]
    # margin: how much closer the winner is than the runner-up
    margin = abs(hyps[ranked[1]] - measured) - abs(hyps[chosen] - measured)
    noise = _noise(t.values())
    extra = {"hypotheses_ms": {h: round(v, 6) for h, v in hyps.items()}, "chosen": chosen,
             "measured_ms": round(measured, 6), "overhead_ms": round(overhead_ms, 6)}
    return ({**base, "fused": chosen != "none", "extra": extra,
             "saving_ms": round(hyps["none"] - measured, 6)}, margin, noise)


def detect_fusion(backend_id: str, *, alpha: float = 0.5, shapes: TestShapes | None = None,
                  out: str | Path | None = None, only: Iterable[str] | None = None,
                  kinds: Iterable[str] = ("pair", "multi_output", "multi_input", "block"),
                  progress: bool = True, resume: bool = True, max_remeasure: int = 2,
                  protocol: dict[str, Any] | None = None,
                  profiler: Any = None) -> FusionRules:
    """Detect the fusion rules of ``backend_id`` by measuring the test cases.

    Parameters
    ----------
    backend_id : str
        E.g. ``"ort-cpu"``.
    alpha : float
        Threshold factor of the fusion rule.
    shapes : TestShapes, optional
        Test-case shapes; default :meth:`TestShapes.for_backend` of ``backend_id``.
    out : path, optional
        Where to write the rules JSON; default ``fusion_rules/<backend-id>.json``.
        Pass ``out=False``-like empty string to skip writing.
    only : iterable of str, optional
        Test only these case names (``"conv->relu"``, ``"block:se"``...).
    kinds : iterable of str
        Kinds of case to run.
    progress : bool
        Show a tqdm progress bar.
    resume : bool
        Reuse measurements journaled in ``<out>.partial.jsonl`` by an interrupted run.
    max_remeasure : int
        Extra measurements of a case whose decision falls within the noise.
    protocol : dict, optional
        :class:`~nnmeter.backends.ProtocolSettings` overrides for every measurement.
    profiler : Profiler, optional
        An open profiler to use (its backend must be ``backend_id``).

    Returns
    -------
    FusionRules
        Also written to ``out``; the partial journal is removed once the file is written.

    Raises
    ------
    MeasurementError
        If a test model cannot be measured at all (its case is then recorded in
        ``failed`` and skipped; the error is raised only when every case failed).
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler

    shapes = shapes or TestShapes.for_backend(backend_id)
    cases = build_testcases(shapes, only=only, kinds=kinds)
    if not cases:
        raise ValueError(f"no test case matches only={list(only or [])}")
    out_path = Path(out) if out else rules_path(backend_id)
    journal = out_path.with_name(out_path.name + ".partial.jsonl")
    own = profiler is None
    prof = profiler or Profiler(backend_id)
    kw = dict(protocol or {})
    store = _Store(lambda g: prof.measure(g, on_error="record", **kw), journal, resume)
    patterns: list[Pattern] = []
    failed: list[dict[str, str]] = []
    t0 = time.perf_counter()
    overhead_ms = node_overhead_ms = 0.0
    try:
        overhead_ms, node_overhead_ms = measure_overhead(store)
        for case in tqdm(cases, desc=f"detect-fusion {backend_id}", disable=not progress,
                         unit="case"):
            try:
                patterns.append(_evaluate(case, store, alpha, max_remeasure, overhead_ms))
            except MeasurementError as err:
                logger.warning("%s: %s", case.name, err)
                failed.append({"name": case.name, "error": str(err)[:500]})
    finally:
        if own:
            prof.close()
    if not patterns:
        raise MeasurementError(
            f"every fusion test case failed on {backend_id}; first error: "
            f"{failed[0]['error'] if failed else '?'}")
    device = store.device or {}
    rules = FusionRules(
        backend_id=backend_id, device=device, alpha=alpha,
        shapes=shapes.as_dict(), patterns=tuple(patterns),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    data = rules.to_dict()
    data["failed"] = failed
    data["detection"] = {"overhead_ms": round(overhead_ms, 6),
                         "node_overhead_ms": round(node_overhead_ms, 6), "cases": len(cases),
                         "measurements": store.fresh,
                         "wall_s": round(time.perf_counter() - t0, 1), "protocol": kw}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1) + "\n")
    if journal.exists():
        journal.unlink()
    logger.info("wrote %s (%d patterns, %d failed)", out_path, len(patterns), len(failed))
    return rules
