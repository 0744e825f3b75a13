"""The fusion decision: whether measured times show a fusion, after the corrections.

The rule (nn-Meter): op1 → op2 is fused when

    T1 + T2 - T12 > alpha * min(T1, T2)

with T1, T2 the times of op1 and op2 alone and T12 the time of op1 → op2 (alpha 0.5).

Per-inference overhead. Every measured model pays the runtime's fixed cost of one
inference (binding inputs, allocating outputs, scheduling) once: T1 + T2 pays it twice,
T12 once, so the raw saving holds one overhead whether or not the ops fuse, and for
small ops (a pooled plane, a 428-vector) that overhead is as large as the op itself,
which biases the raw rule towards "fused". The overhead O (measured by
:func:`nnmeter.fusion.probes.measure_overhead`) is subtracted from each of T1, T2 and
T12 before the rule is applied (times floored at 0): saving = T1' + T2' - T12' =
T1 + T2 - T12 - O, threshold = alpha * min(T1', T2'). The decision uses the corrected
times; the raw rule's decision, saving and threshold are kept in ``extra.raw`` of every
pattern. Blocks generalise the rule: sum(parts') - T_block' > alpha * (sum(parts') -
max(parts')). Multi-output and multi-input tests keep the split hypothesis whose summed
time (corrected the same way) is closest to the measured time, and "none" whenever the
measured time is at least the sum of the unfused parts (a fusion only removes time).

Edge conversions. A single-op model pays the conversion of its plain fp32 NCHW input
and output into and out of the runtime's own layout or precision; the pair model pays
them once at its edges, so the conversion of op1's output and of op2's input counts as
a saving although nothing is fused. Given the share of each model's executed time spent
in edge conversions (:func:`nnmeter.fusion.probes.edge_share`), that share is removed
from its net time: T' = max(T - O, 0) × (1 - share). A share, not the profiled
milliseconds, because the profiler's per-node times carry its own instrumentation cost
and do not add up to the measured time of small models. ``extra.edge`` records the
shares and the milliseconds removed from each model.

Hand-off. A runtime may also pay, per inference and outside any kernel, for a tensor
that crosses the model's boundary (:mod:`nnmeter.fusion.probes` measures it). The
single-op models hand op1's output over (out of the op1 model, into the op2 model); the
pair model keeps it inside. Each model's net time loses the hand-off of its graph
inputs and outputs: T' = max(T - O, 0) × (1 - share) - hand-off, so that the rule
compares what the ops themselves cost (a pair's saving loses the hand-off of op1's
output; the threshold is half the smaller op's own time). ``extra.handoff_ms`` records
each model's hand-off.

Noise: every time comes with its relative spread. A decision whose margin is smaller
than the combined spread (root of the sum of squares of spread × time) is ``close``;
the detector measures its case again, and one still within the noise after the last
re-measurement goes to "not fused" (:func:`split_tie`; ``extra.tie``: the decision the
margin leaned to): fusion is the exception to establish, and a runtime that fused would
show a saving well beyond the noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nnmeter.fusion.testcases import TestCase

__all__ = ["Timing", "PairDecision", "decide_pair", "decide_case", "split_tie"]


@dataclass(frozen=True)
class Timing:
    """A model's time (ms; minimum over repeats) and relative spread.

    ``samples_ms`` keeps every repeat's time (sorted) when there is more than one.
    """

    latency_ms: float
    spread: float
    repeats: int = 1
    samples_ms: tuple[float, ...] = ()

    @property
    def noise_ms(self) -> float:
        return self.latency_ms * self.spread

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"latency_ms": round(self.latency_ms, 6),
                             "spread": round(self.spread, 4), "repeats": self.repeats}
        if len(self.samples_ms) > 1:
            d["samples_ms"] = [round(x, 6) for x in self.samples_ms]
        return d


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


def _net(t: Timing, overhead_ms: float, share: float = 0.0, handoff_ms: float = 0.0) -> float:
    return max(max(t.latency_ms - overhead_ms, 0.0) * (1.0 - share) - handoff_ms, 0.0)


def decide_pair(t1: Timing, t2: Timing, t12: Timing, alpha: float = 0.5,
                overhead_ms: float = 0.0,
                edge_shares: tuple[float, float, float] = (0.0, 0.0, 0.0),
                handoffs: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> PairDecision:
    """Apply T1' + T2' - T12' > alpha * min(T1', T2'), with
    T' = max(T - overhead, 0) × (1 - edge share) - hand-off.

    Parameters
    ----------
    t1, t2, t12 : Timing
        op1 alone, op2 alone, op1 -> op2 (ms).
    alpha : float
        Threshold factor.
    overhead_ms : float
        The backend's per-inference overhead, subtracted from each time (0: the raw rule).
    edge_shares : (float, float, float)
        Share of each model's time spent in edge conversions (see
        :func:`nnmeter.fusion.probes.edge_share`).
    handoffs : (float, float, float)
        What each model pays, outside any kernel, for handing its inputs and outputs
        over (ms; module doc).

    Examples
    --------
    >>> d = decide_pair(Timing(1.0, 0.01), Timing(0.2, 0.01), Timing(1.02, 0.01))
    >>> d.fused, round(d.saving_ms, 2), d.threshold_ms
    (True, 0.18, 0.1)
    >>> d = decide_pair(Timing(1.0, 0.01), Timing(0.2, 0.01), Timing(1.02, 0.01),
    ...                 overhead_ms=0.1)
    >>> d.fused, round(d.saving_ms, 2), round(d.threshold_ms, 2)
    (True, 0.08, 0.05)
    >>> d = decide_pair(Timing(1.0, 0.01), Timing(0.2, 0.01), Timing(1.02, 0.01),
    ...                 overhead_ms=0.1, handoffs=(0.04, 0.04, 0.02))
    >>> d.fused, round(d.saving_ms, 2)  # the saving was the hand-off of op1's output
    (False, 0.02)
    """
    a, b, ab = (_net(t, overhead_ms, e, h)
                for t, e, h in zip((t1, t2, t12), edge_shares, handoffs))
    saving = a + b - ab
    thr = alpha * min(a, b)
    return PairDecision(saving > thr, saving, thr, _noise((t1, t2, t12)))


def _decide_block(parts: list[Timing], block: Timing, alpha: float,
                  overhead_ms: float = 0.0,
                  edge_shares: tuple[float, ...] | None = None,
                  handoffs: tuple[float, ...] | None = None) -> PairDecision:
    """The pair rule over a block; ``edge_shares`` and ``handoffs`` list the parts'
    values, then the block's."""
    shares = edge_shares or (0.0,) * (len(parts) + 1)
    hand = handoffs or (0.0,) * (len(parts) + 1)
    net = [_net(p, overhead_ms, e, h) for p, e, h in zip(parts, shares, hand)]
    total = sum(net)
    thr = alpha * (total - max(net))
    saving = total - _net(block, overhead_ms, shares[-1], hand[-1])
    return PairDecision(saving > thr, saving, thr, _noise([*parts, block]))


def _edge_extra(t: dict[str, Timing], shares: dict[str, float],
                overhead_ms: float) -> dict[str, Any]:
    return {"share": {r: round(e, 4) for r, e in shares.items()},
            "removed_ms": {r: round(max(t[r].latency_ms - overhead_ms, 0.0) * e, 6)
                           for r, e in shares.items()}}


def decide_case(case: TestCase, t: dict[str, Timing], alpha: float,
                overhead_ms: float = 0.0, shares: dict[str, float] | None = None,
                handoff: dict[str, float] | None = None
                ) -> tuple[dict[str, Any], float, float]:
    """(pattern fields, decision margin in ms, noise in ms) of one case.

    Every case is decided on net times: less the per-inference overhead and, given
    ``shares`` (role -> edge-conversion share), less the edge conversions (see the
    module doc). Given ``handoff`` (role -> ms the model pays for handing its inputs
    and outputs over), the savings and hypotheses lose the hand-off that the separate
    models pay and the case's model does not. ``extra.raw`` holds the raw rule's
    decision, saving and threshold; ``extra.edge`` the shares and the milliseconds they
    removed; ``extra.handoff_ms`` the hand-off removed.

    Raises
    ------
    ValueError
        If ``case.kind`` is not one of pair, block, multi_output, multi_input.
    """
    h = handoff or {}
    times = {role: tm.as_dict() for role, tm in t.items()}
    base = {"name": case.name, "kind": case.kind, "ops": case.ops, "times_ms": times}
    e = shares or {}
    edge = _edge_extra(t, shares, overhead_ms) if shares is not None else None
    if case.kind in ("pair", "block"):
        if case.kind == "pair":
            args: tuple[Any, ...] = (t["op1"], t["op2"], t["block"], alpha)
            edge_shares: tuple[float, ...] = tuple(e.get(r, 0.0) for r in ("op1", "op2", "block"))
            decide: Callable[..., PairDecision] = decide_pair
            extra: dict[str, Any] = {}
            roles: tuple[str, ...] = ("op1", "op2", "block")
        else:
            parts = [role for role in t if role.startswith("part:")]
            args = ([t[role] for role in parts], t["block"], alpha)
            edge_shares = tuple(e.get(r, 0.0) for r in (*parts, "block"))
            decide = _decide_block
            extra = {"block": case.block}
            roles = (*parts, "block")
        d = decide(*args, overhead_ms=overhead_ms, edge_shares=edge_shares,
                   handoffs=tuple(h.get(r, 0.0) for r in roles))
        raw = decide(*args, overhead_ms=0.0)
        extra.update({"overhead_ms": round(overhead_ms, 6), "raw": {
            "fused": raw.fused, "saving_ms": round(raw.saving_ms, 6),
            "threshold_ms": round(raw.threshold_ms, 6)}})
        if edge is not None:
            extra["edge"] = edge
        if handoff is not None:
            extra["handoff_ms"] = {r: round(v, 6) for r, v in h.items()}
        return ({**base, "fused": d.fused, "saving_ms": round(d.saving_ms, 6),
                 "threshold_ms": round(d.threshold_ms, 6), "extra": extra},
                d.saving_ms - d.threshold_ms, d.noise_ms)
    # each separately measured model pays the per-inference overhead (and its edge
    # conversions) once; comparing net times removes them from every hypothesis
    net = {role: _net(tm, overhead_ms, e.get(role, 0.0)) - h.get(role, 0.0)
           for role, tm in t.items()}
    if case.kind == "multi_output":
        p, c1, c2 = case.ops
        hyps = {"none": net["p"] + net["c1"] + net["c2"],
                f"{p}+{c1}": net["p+c1"] + net["c2"],
                f"{p}+{c2}": net["p+c2"] + net["c1"]}
    elif case.kind == "multi_input":
        branch, _, join = case.ops
        hyps = {"none": 2 * net["branch"] + net["join"],
                f"{branch}+{join}": net["branch"] + net["branch+join"]}
    else:
        raise ValueError(f"unknown test-case kind {case.kind!r}")
    measured = net["block"]
    noise = _noise(t.values())
    if measured >= hyps["none"]:
        # a fusion only removes time: a model that costs at least what its parts cost
        # apart saved nothing, whichever fused hypothesis its excess happens to be near
        chosen = "none"
        margin = measured - hyps["none"]
    else:
        ranked = sorted(hyps, key=lambda k: (abs(hyps[k] - measured), k))
        chosen = ranked[0]
        # margin: how much closer the winner is than the runner-up
        margin = abs(hyps[ranked[1]] - measured) - abs(hyps[chosen] - measured)
    extra = {"hypotheses_ms": {k: round(v, 6) for k, v in hyps.items()}, "chosen": chosen,
             "measured_ms": round(measured, 6), "overhead_ms": round(overhead_ms, 6)}
    if edge is not None:
        extra["edge"] = edge
    if handoff is not None:
        extra["handoff_ms"] = {r: round(v, 6) for r, v in h.items()}
    return ({**base, "fused": chosen != "none", "extra": extra,
             "saving_ms": round(hyps["none"] - measured, 6)}, margin, noise)


def split_tie(pattern: dict[str, Any], margin_ms: float, noise_ms: float) -> dict[str, Any]:
    """``pattern`` (fields from :func:`decide_case`) decided "not fused" when it is fused
    with a margin within the noise (module doc), else ``pattern`` itself.

    The split pattern records ``extra.tie``: the decision the margin leaned to, the
    margin and the noise (ms); a multi-output or multi-input one has ``chosen`` "none".

    Examples
    --------
    >>> p = {"fused": True, "extra": {}}
    >>> split_tie(p, 0.001, 0.002)["extra"]["tie"]["leaned_to"]
    'fused'
    >>> split_tie(p, 0.003, 0.002) is p
    True
    """
    if not (abs(margin_ms) < noise_ms and pattern["fused"]):
        return pattern
    extra = dict(pattern["extra"])
    extra["tie"] = {"leaned_to": extra.get("chosen", "fused"),
                    "margin_ms": round(margin_ms, 6), "noise_ms": round(noise_ms, 6)}
    if "chosen" in extra:
        extra["chosen"] = "none"
    return {**pattern, "fused": False, "extra": extra}
