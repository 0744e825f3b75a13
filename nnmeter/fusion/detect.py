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
(corrected the same way) is closest to the measured time, and "none" whenever the
measured time is at least the sum of the unfused parts (a fusion only removes time).

Edge conversions. A runtime that computes in its own layout or precision (ONNX
Runtime's NCHWc kernels, OpenVINO's bf16 blocked layout, MNN's packed layout) converts
a model's plain fp32 NCHW input on the way in and its output on the way out. A
single-op model pays both conversions; the pair model pays them once at its edges, so
the conversion of op1's output and of op2's input counts as a saving although nothing
is fused. Where the backend's profiler reports timed executed nodes, every test model
is profiled once and the share of its executed time spent in *edge* conversions
(:data:`EDGE_CONVERSION_OPS` nodes that cover no original op and run before the first
or after the last node that does) is removed from its net time:
T' = max(T - O, 0) × (1 - share). A share, not the profiled milliseconds, because the
profiler's per-node times carry its own instrumentation cost and do not add up to the
measured time of small models. Conversions *between* two ops of the pair stay in
T12: a real model pays them too. A case keeps the plain rule when a model of it
cannot be profiled or reports a node without a time (ONNX Runtime and OpenVINO leave
some nodes untimed; LiteRT times none, and is not profiled past its first model);
``extra.edge`` records the shares and the milliseconds
removed from each model, or why the case was not corrected.

Hand-off. A runtime may also pay, per inference and outside any kernel, for a tensor
that crosses the model's boundary: OpenVINO's CPU plugin copies a model's output (a
200 KB tensor costs it ~10 µs, as much as a ReLU on it) and reads its input in place.
The single-op models hand op1's output over (out of the op1 model, into the op2 model);
the pair model keeps it inside. Two models measure it per tensor shape ``s``: one that
only flattens the tensor, H(s) = T(flatten s) - T(flatten of one element), the cost of
handing it in and out; and one that reads it through a flatten and a split and hands
back one element, the input side alone (OpenVINO: 0). They count only where the
backend's profile shows the models run no kernel at all (views: OpenVINO reports its
reshape and split not run); where a flatten runs a kernel (ONNX Runtime, MNN copy the
data) its time is the kernel's, not the boundary's, and the hand-off is 0, as on
backends that time no executed node (LiteRT). Where the input probe runs a kernel, H
is split in halves. Each model's net time loses the hand-off of its graph inputs and
outputs: T' = max(T - O, 0) × (1 - share) - hand-off, so that the rule compares what
the ops themselves cost (a pair's saving loses the hand-off of op1's output; the
threshold is half the smaller op's own time). ``extra.handoff_ms`` records each model's
hand-off and ``detection.handoff_ms`` each shape's.

Noise: every time comes with its relative spread. When the margin of a decision is
smaller than the combined spread (root of the sum of squares of spread × time), all
models of the case are measured again (up to ``max_remeasure`` times; each time is then
the minimum over repeats, since interference only ever adds time, and its spread the
larger of the repeats' median spread and the gap from the minimum to the next-best
repeat; ``samples_ms`` lists the repeats) and the pattern is recorded with
``close: true``. A decision still within the noise after the last
re-measurement goes to "not fused" (``extra.tie``: the decision the margin leaned to):
fusion is the exception to establish, and a runtime that fused would show a saving
well beyond the noise.

Measured against each runtime's executed graph (``experiments/fusion_truth.py``, 222
cases, detections on this machine; ``experiments/results/fusion_truth_candidates.txt``):
ort-cpu 97.3 %, mnn-cpu 96.4 %, openvino-cpu 64.0 % (the plain rule without any
correction: 6.5 %, 79.3 %, 41.5 %). On OpenVINO what the rule still misses are fusions
that save no time (its eltwise chains run as one Subgraph, but at these sizes an eltwise op
costs no more than handing its tensor over), ops it runs in place (a concat or reshape
after a producer is free inside a model, and the formula reads that as a fusion) and
decisions within its noise (its profiler counts whole microseconds).

Measurements go through one :class:`nnmeter.backends.Profiler` per backend, which
exports each ModelGraph to the backend's format. Identical models (same structure) are
measured once and shared between cases. Every measurement is appended to a partial
JSONL next to the output file, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnmeter.errors import BackendError, MeasurementError
from nnmeter.fusion.rules import FusionRules, Pattern, rules_path
from nnmeter.fusion.testcases import TestCase, TestShapes, build_testcases, graph_signature
from nnmeter.ir.graph import ModelGraph

__all__ = ["detect_fusion", "decide_pair", "measure_overhead", "edge_share",
           "passthrough_model", "input_probe_model", "EDGE_CONVERSION_OPS",
           "EDGE_PROFILE_RUNS", "PairDecision", "Timing"]

logger = logging.getLogger(__name__)

#: executed-node types that only convert layout or precision: OpenVINO ``Reorder`` and
#: ``Convert``, MNN ``Raster`` (``nnmeter.predictors.boundary.LAYOUT_OPS``) and ONNX
#: Runtime's NCHWc ``ReorderInput``/``ReorderOutput``; matched on the name after the
#: last dot, since ONNX Runtime reports them as ``com.microsoft.nchwc.ReorderInput``
EDGE_CONVERSION_OPS = frozenset({"Reorder", "Convert", "Raster", "ReorderInput",
                                 "ReorderOutput"})

#: timed runs of each profile behind the edge-conversion shares (the profile's node
#: times are medians over these runs)
EDGE_PROFILE_RUNS = 100


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


def edge_share(nodes: Iterable[Any]) -> float | None:
    """The share of a model's profiled time spent in edge layout/precision conversions.

    ``nodes`` are the executed nodes of one model in execution order
    (:class:`~nnmeter.backends.ExecutedNode`: ``op_type``, ``covers``, ``time_ms``).
    Edge conversions are :data:`EDGE_CONVERSION_OPS` nodes that cover no original op and
    run before the first or after the last node that covers one. Returns None when the
    share cannot be told: a node without a time, no node covering an op, or no time.

    Examples
    --------
    >>> from nnmeter.backends import ExecutedNode
    >>> edge_share([ExecutedNode("r1", "Reorder", (), 0.01),
    ...             ExecutedNode("c", "Convolution", ("op1",), 0.06),
    ...             ExecutedNode("r2", "Reorder", (), 0.03)])
    0.4
    >>> edge_share([ExecutedNode("c", "Conv", ("op1",), None)]) is None
    True
    """
    nodes = list(nodes)
    if not nodes or any(n.time_ms is None for n in nodes):
        return None
    covering = [i for i, n in enumerate(nodes) if n.covers]
    total = sum(n.time_ms for n in nodes)
    if not covering or total <= 0:
        return None
    first, last = covering[0], covering[-1]
    edge = sum(n.time_ms for i, n in enumerate(nodes)
               if (i < first or i > last) and not n.covers
               and n.op_type.rsplit(".", 1)[-1] in EDGE_CONVERSION_OPS)
    return edge / total


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
        Share of each model's time spent in edge conversions (see :func:`edge_share`).
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


class _Store:
    """Measurements by graph signature, with a JSONL journal for resuming."""

    def __init__(self, measure: Callable[[ModelGraph], Any], journal: Path | None,
                 resume: bool, profile: Callable[[ModelGraph], list[Any]] | None = None,
                 *, edge_correction: bool = True, handoff_correction: bool = False) -> None:
        self._measure = measure
        self._profile = profile
        self.journal = journal
        self.rows: dict[str, list[dict[str, Any]]] = {}
        #: edge-conversion share of each profiled model: {"share": float | None, "why": str}
        self.edges: dict[str, dict[str, Any]] = {}
        #: whether a pass-through model's flatten runs no kernel: {"view": bool | None, "why"}
        self.views: dict[str, dict[str, Any]] = {}
        #: why this backend's models are not profiled at all (None: they are)
        self.no_profile: str | None = (None if profile and edge_correction
                                       else "edge correction off")
        #: why no hand-off is removed on this backend (None: it is, where measured)
        self.no_handoff: str | None = (None if profile and handoff_correction
                                       else "hand-off correction off")
        self._handoff: dict[tuple[int, ...], dict[str, Any]] = {}
        self.device: dict[str, Any] | None = None
        self.fresh = 0
        self.profiled = 0
        if journal is not None and resume and journal.exists():
            for line in journal.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                if "edge" in row:
                    self.edges[row["sig"]] = row["edge"]
                elif "view" in row:
                    self.views[row["sig"]] = row["view"]
                else:
                    self.rows.setdefault(row["sig"], []).append(row["m"])
            logger.info("resuming from %s (%d models measured)", journal, len(self.rows))
        elif journal is not None and journal.exists():
            journal.unlink()

    def _journal(self, row: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a") as f:
                f.write(json.dumps(row) + "\n")

    def _append(self, sig: str, m: dict[str, Any]) -> None:
        self.rows.setdefault(sig, []).append(m)
        self._journal({"sig": sig, "m": m})

    def _try_profile(self, graph: ModelGraph) -> tuple[list[Any] | None, str, bool]:
        """(executed nodes, "", False) or (None, why not, whether for good). A backend
        that reports no executed graph turns both profile-based corrections off."""
        assert self._profile is not None
        try:
            nodes = self._profile(graph)
        except NotImplementedError as err:
            why = f"the backend reports no executed graph ({err})"[:200]
            self.no_profile = self.no_profile or why
            self.no_handoff = self.no_handoff or why
            return None, why, True
        except (BackendError, MeasurementError) as err:
            return None, f"profiling failed: {err}"[:200], False
        self.profiled += 1
        return nodes, "", False

    def edge(self, graph: ModelGraph) -> dict[str, Any]:
        """The model's edge-conversion share (profiled once per structure)."""
        if self.no_profile is not None:
            return {"share": None, "why": self.no_profile}
        sig = graph_signature(graph)
        if sig not in self.edges:
            nodes, why, for_good = self._try_profile(graph)
            if for_good:
                return {"share": None, "why": why}
            if nodes is None:
                rec: dict[str, Any] = {"share": None, "why": why}
            else:
                if (nodes and all(n.time_ms is None for n in nodes)
                        and not self.times_nodes()):
                    # a profiler that times no node at all (LiteRT's Python API) will not
                    # time the next model either (a model whose only op is a view, such
                    # as OpenVINO's reshape, is untimed on a profiler that times others)
                    self.no_profile = "the backend's profiler times no executed node"
                    self.no_handoff = self.no_handoff or self.no_profile
                    return {"share": None, "why": self.no_profile}
                share = edge_share(nodes)
                rec = {"share": share,
                       "why": "" if share is not None else "the profile has untimed nodes"}
            self.edges[sig] = rec
            self._journal({"sig": sig, "edge": rec})
        return self.edges[sig]

    def view(self, graph: ModelGraph) -> dict[str, Any]:
        """Whether ``graph`` runs no kernel at all (profiled once per structure):
        {"view": True} when no timed executed node covers any of its ops, False when
        one does, None (with "why") when that cannot be told."""
        sig = graph_signature(graph)
        if sig not in self.views:
            nodes, why, for_good = self._try_profile(graph)
            if for_good:
                return {"view": None, "why": why}
            rec: dict[str, Any] = (
                {"view": None, "why": why} if nodes is None
                else {"view": not [n for n in nodes if n.covers and n.time_ms], "why": ""})
            self.views[sig] = rec
            self._journal({"sig": sig, "view": rec})
        return self.views[sig]

    def times_nodes(self) -> bool:
        """Whether the backend's profiler times a node that surely runs (the relu of
        the one-element null model)."""
        return self.view(_null_model(1))["view"] is False

    def handoff(self, shape: tuple[int, ...], side: str) -> float:
        """What handing a tensor of ``shape`` into (``side="in"``) or out of
        (``"out"``) a model costs outside any kernel, in ms (module doc); 0 where not
        measurable."""
        key = tuple(int(d) for d in shape)
        if key not in self._handoff:
            self._handoff[key] = self._measure_handoff(key)
        return float(self._handoff[key][side])

    def _measure_handoff(self, shape: tuple[int, ...]) -> dict[str, Any]:
        none = {"in": 0.0, "out": 0.0}
        if self.no_handoff is not None:
            return {**none, "why": self.no_handoff}
        # a profiler that times no node at all cannot tell a view from a kernel
        probe = self.view(_null_model(1))
        if probe["view"] is not False:
            self.no_handoff = self.no_handoff or (
                "the backend's profiler does not time a running node: "
                + (probe["why"] or "the null model's relu is untimed"))
            return {**none, "why": self.no_handoff}
        g = passthrough_model(shape)
        rec = self.view(g)
        if not rec["view"]:
            return {**none, "why": rec["why"] or "the flatten runs a kernel"}
        one = passthrough_model((1, 1, 1, 1))
        self.ensure(g)
        self.ensure(one)
        base = self.timing(one).latency_ms
        both = max(self.timing(g).latency_ms - base, 0.0)
        # the input side alone: a model that reads the tensor through views and hands
        # back one element
        probe = input_probe_model(shape)
        if probe is None or not self.view(probe)["view"]:
            return {"in": both / 2, "out": both / 2,
                    "why": "", "note": "input side not separable: split in halves"}
        self.ensure(probe)
        ms_in = min(max(self.timing(probe).latency_ms - base, 0.0), both)
        return {"in": ms_in, "out": both - ms_in, "why": ""}

    def handoff_record(self) -> dict[str, Any]:
        """Every hand-off measured: {"1x128x28x28": {"in": ms, "out": ms} or why}."""
        return {"x".join(map(str, k)): (v["why"] if v["why"] else
                                        {"in": round(v["in"], 6), "out": round(v["out"], 6),
                                         **({"note": v["note"]} if "note" in v else {})})
                for k, v in sorted(self._handoff.items())}

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
        lat = sorted(float(m["latency_ms"]) for m in ms)
        spreads = sorted(float(m["spread"]) for m in ms if m.get("spread") is not None)
        spread = spreads[len(spreads) // 2] if spreads else 0.0
        if len(lat) > 1:
            # the time is the minimum over repeats: how well it is known is how close the
            # next-best repeat comes, not how slow the worst one was (interference only
            # ever adds time, so one disturbed repeat says nothing about the minimum)
            spread = max(spread, (lat[1] - lat[0]) / lat[0])
        return Timing(lat[0], spread, len(lat), tuple(lat))


def _null_model(n_ops: int = 1) -> ModelGraph:
    """The smallest model: ``n_ops`` relus in a chain on one element."""
    from nnmeter.ir.builder import GraphBuilder

    b = GraphBuilder(f"null_model_{n_ops}", (1, 1, 1, 1))
    y = b.x
    for i in range(n_ops):
        y = b.relu(y, name=f"op{i + 1}")
    return b.build([y])


def passthrough_model(shape: tuple[int, ...]) -> ModelGraph:
    """A model that only reshapes a tensor of ``shape`` (node ``op1``): what handing
    the tensor in and out of a model costs, where the reshape is a view."""
    from nnmeter.ir.builder import GraphBuilder

    shape = tuple(int(d) for d in shape)
    b = GraphBuilder("passthrough_" + "x".join(map(str, shape)), shape)
    n = math.prod(shape)
    target = (n, 1) if len(shape) == 2 or n == 1 else (shape[0], n // shape[0])
    return b.build([b.reshape(b.x, target, name="op1")])


def input_probe_model(shape: tuple[int, ...]) -> ModelGraph | None:
    """A model that reads a tensor of ``shape`` and hands back one element of it (a
    reshape and a split, views on a runtime that has them), or None for one element."""
    from nnmeter.ir.builder import GraphBuilder

    shape = tuple(int(d) for d in shape)
    n = math.prod(shape)
    if n < 2:
        return None
    b = GraphBuilder("inputprobe_" + "x".join(map(str, shape)), shape)
    flat = b.reshape(b.x, (1, n), name="op0")
    head = b.split(flat, [1, n - 1], axis=1, name="op1")[0]
    return b.build([head])


def _model_handoff(graph: ModelGraph, store: "_Store") -> float:
    """The hand-off of every graph input and output of ``graph`` (ms)."""
    return (sum(store.handoff(tuple(graph.shape_of(i)), "in") for i in graph.input_names)
            + sum(store.handoff(tuple(graph.shape_of(o)), "out") for o in graph.outputs))


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


def _case_shares(case: TestCase, store: _Store) -> tuple[dict[str, float] | None, str]:
    """Edge-conversion share of every model of ``case``, or None and why not."""
    shares: dict[str, float] = {}
    for role, g in case.models.items():
        rec = store.edge(g)
        if rec["share"] is None:
            return None, f"{role}: {rec['why']}" if store.no_profile is None else rec["why"]
        shares[role] = float(rec["share"])
    return shares, ""


def _evaluate(case: TestCase, store: _Store, alpha: float, max_remeasure: int,
              overhead_ms: float, tie_to_split: bool = True) -> Pattern:
    for g in case.models.values():
        store.ensure(g)
    shares, why = _case_shares(case, store)
    # measured (once per tensor shape) only while the backend can tell a hand-off
    handoff = ({role: _model_handoff(g, store) for role, g in case.models.items()}
               if store.no_handoff is None else {})
    close = False
    for attempt in range(max_remeasure + 1):
        t = {role: store.timing(g) for role, g in case.models.items()}
        pattern, margin, noise = _decide_case(case, t, alpha, overhead_ms, shares,
                                              handoff if store.no_handoff is None else None)
        if abs(margin) >= noise:
            break
        close = True
        if attempt < max_remeasure:
            logger.info("%s: margin %.4f ms within noise %.4f ms, measuring again",
                        case.name, margin, noise)
            for g in case.models.values():
                store.measure_new(g)
    if shares is None:
        pattern["extra"]["edge"] = {"skipped": why}
    if tie_to_split and abs(margin) < noise and pattern["fused"]:
        # still within the noise after the re-measurements: not fused (module doc)
        extra = dict(pattern["extra"])
        extra["tie"] = {"leaned_to": extra.get("chosen", "fused"),
                        "margin_ms": round(margin, 6), "noise_ms": round(noise, 6)}
        if "chosen" in extra:
            extra["chosen"] = "none"
        pattern = {**pattern, "fused": False, "extra": extra}
    return Pattern(**{**pattern, "close": close})


def _edge_extra(t: dict[str, Timing], shares: dict[str, float],
                overhead_ms: float) -> dict[str, Any]:
    return {"share": {r: round(e, 4) for r, e in shares.items()},
            "removed_ms": {r: round(max(t[r].latency_ms - overhead_ms, 0.0) * e, 6)
                           for r, e in shares.items()}}


def _decide_case(case: TestCase, t: dict[str, Timing], alpha: float,
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


def detect_fusion(backend_id: str, *, alpha: float = 0.5, shapes: TestShapes | None = None,
                  out: str | Path | None = None, only: Iterable[str] | None = None,
                  kinds: Iterable[str] = ("pair", "multi_output", "multi_input", "block"),
                  progress: bool = True, resume: bool = True, max_remeasure: int = 2,
                  protocol: dict[str, Any] | None = None,
                  profiler: Any = None, edge_correction: bool = True,
                  handoff_correction: bool = True, tie_to_split: bool = True) -> FusionRules:
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
    edge_correction : bool
        Profile every test model and remove its edge conversions from its time where the
        backend reports timed executed nodes (module doc); False: the plain rule.
    handoff_correction : bool
        Remove from each saving the hand-off of the tensors that cross between the
        separate models, where the backend's profile shows a flatten to be a view
        (module doc).
    tie_to_split : bool
        Decide "not fused" when a decision is still within the noise after the last
        re-measurement (module doc); False: keep the side the margin leans to.

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
    profile: Callable[[ModelGraph], list[Any]] | None = None
    if (edge_correction or handoff_correction) and hasattr(prof, "profile"):
        profile = functools.partial(prof.profile, runs=EDGE_PROFILE_RUNS)
    store = _Store(lambda g: prof.measure(g, on_error="record", **kw), journal, resume,
                   profile, edge_correction=edge_correction,
                   handoff_correction=handoff_correction)
    patterns: list[Pattern] = []
    failed: list[dict[str, str]] = []
    t0 = time.perf_counter()
    overhead_ms = node_overhead_ms = 0.0
    try:
        overhead_ms, node_overhead_ms = measure_overhead(store)
        for case in tqdm(cases, desc=f"detect-fusion {backend_id}", disable=not progress,
                         unit="case"):
            try:
                patterns.append(_evaluate(case, store, alpha, max_remeasure, overhead_ms,
                                          tie_to_split))
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
                         "measurements": store.fresh, "profiles": store.profiled,
                         "edge_correction": edge_correction and store.no_profile is None,
                         "edge_corrected_cases": sum(
                             "share" in (p.extra.get("edge") or {}) for p in patterns),
                         "handoff_correction": store.no_handoff is None,
                         "handoff_ms": store.handoff_record(),
                         "tie_to_split": tie_to_split,
                         "ties_split": sum("tie" in p.extra for p in patterns),
                         "wall_s": round(time.perf_counter() - t0, 1), "protocol": kw}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1) + "\n")
    if journal.exists():
        journal.unlink()
    logger.info("wrote %s (%d patterns, %d failed)", out_path, len(patterns), len(failed))
    return rules
