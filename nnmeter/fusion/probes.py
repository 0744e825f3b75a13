"""The probes behind the corrections: overhead, edge-conversion and hand-off probes.

:mod:`nnmeter.fusion.decision` corrects every time for three costs that are not the
ops' own; this module builds the models that measure them and reads their profiles.

Overhead. O = T(1) - (T(3) - T(1)) / 2 on the smallest models (one and three relus on
1x1x1x1), i.e. the per-inference cost without the one node's dispatch cost, which is
part of what a fusion saves (:func:`measure_overhead`).

Edge conversions. A runtime that computes in its own layout or precision (ONNX
Runtime's NCHWc kernels, OpenVINO's bf16 blocked layout, MNN's packed layout) converts
a model's plain fp32 NCHW input on the way in and its output on the way out. Where the
backend's profiler reports timed executed nodes, every test model is profiled once and
the share of its executed time spent in *edge* conversions (:data:`EDGE_CONVERSION_OPS`
nodes that cover no original op and run before the first or after the last node that
does; :func:`edge_share`) is what the decision removes. Conversions *between* two ops
of the pair stay in T12: a real model pays them too. A case keeps the plain rule when a
model of it cannot be profiled or reports a node without a time (ONNX Runtime and
OpenVINO leave some nodes untimed; LiteRT times none, and is not profiled past its
first model); ``extra.edge`` then records why the case was not corrected.

Hand-off. OpenVINO's CPU plugin copies a model's output (a 200 KB tensor costs it
~10 µs, as much as a ReLU on it) and reads its input in place. Two models measure it
per tensor shape ``s``: one that only flattens the tensor (:func:`passthrough_model`),
H(s) = T(flatten s) - T(flatten of one element), the cost of handing it in and out; and
one that reads it through a flatten and a split and hands back one element
(:func:`input_probe_model`), the input side alone (OpenVINO: 0). They count only where
the backend's profile shows the models run no kernel at all (views: OpenVINO reports
its reshape and split not run); where a flatten runs a kernel (ONNX Runtime, MNN copy
the data) its time is the kernel's, not the boundary's, and the hand-off is 0, as on
backends that time no executed node (LiteRT). Where the input probe runs a kernel, H is
split in halves. ``detection.handoff_ms`` of the rules file records each shape's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from nnmeter.errors import BackendError, MeasurementError
from nnmeter.fusion.journal import MeasurementJournal
from nnmeter.fusion.testcases import TestCase, graph_signature
from nnmeter.ir.graph import ModelGraph

__all__ = ["EDGE_CONVERSION_OPS", "EDGE_PROFILE_RUNS", "edge_share", "null_model",
           "passthrough_model", "input_probe_model", "ProbingStore", "measure_overhead",
           "model_handoff", "case_shares"]

#: executed-node types that only convert layout or precision: OpenVINO ``Reorder`` and
#: ``Convert``, MNN ``Raster`` (``nnmeter.predictors.boundary.LAYOUT_OPS``) and ONNX
#: Runtime's NCHWc ``ReorderInput``/``ReorderOutput``; matched on the name after the
#: last dot, since ONNX Runtime reports them as ``com.microsoft.nchwc.ReorderInput``
EDGE_CONVERSION_OPS = frozenset({"Reorder", "Convert", "Raster", "ReorderInput",
                                 "ReorderOutput"})

#: timed runs of each profile behind the edge-conversion shares (the profile's node
#: times are medians over these runs)
EDGE_PROFILE_RUNS = 100


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


def null_model(n_ops: int = 1) -> ModelGraph:
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


class ProbingStore(MeasurementJournal):
    """The measurement journal, plus what profiling its models tells: each model's
    edge-conversion share, whether a model is a view, and each shape's hand-off.

    ``profile`` returns a model's executed nodes (None: nothing is profiled). A backend
    that reports no executed graph, or a profiler that times no node, turns both
    profile-based corrections off for the rest of the run (``no_profile`` and
    ``no_handoff`` say why).
    """

    def __init__(self, measure: Callable[[ModelGraph], Any], journal: Path | None,
                 resume: bool, profile: Callable[[ModelGraph], list[Any]] | None = None,
                 *, edge_correction: bool = True, handoff_correction: bool = False) -> None:
        super().__init__(measure, journal, resume)
        self._profile = profile
        #: why this backend's models are not profiled at all (None: they are)
        self.no_profile: str | None = (None if profile and edge_correction
                                       else "edge correction off")
        #: why no hand-off is removed on this backend (None: it is, where measured)
        self.no_handoff: str | None = (None if profile and handoff_correction
                                       else "hand-off correction off")
        self._handoff: dict[tuple[int, ...], dict[str, Any]] = {}
        self.profiled = 0

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
            self.record_edge(sig, rec)
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
            self.record_view(sig, rec)
        return self.views[sig]

    def times_nodes(self) -> bool:
        """Whether the backend's profiler times a node that surely runs (the relu of
        the one-element null model)."""
        return self.view(null_model(1))["view"] is False

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
        probe = self.view(null_model(1))
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


def model_handoff(graph: ModelGraph, store: ProbingStore) -> float:
    """The hand-off of every graph input and output of ``graph`` (ms)."""
    return (sum(store.handoff(tuple(graph.shape_of(i)), "in") for i in graph.input_names)
            + sum(store.handoff(tuple(graph.shape_of(o)), "out") for o in graph.outputs))


def measure_overhead(store: MeasurementJournal) -> tuple[float, float]:
    """(per-inference overhead, per-node overhead) in ms.

    T(1 relu) = O_inf + O_node; T(3 relus) = O_inf + 3 O_node (a runtime that merges
    the chain gives O_node = 0, and the whole T(1 relu) counts as per-inference).
    The detector subtracts O_inf from every time: one node's dispatch is part of what a
    fusion saves, so it stays in T1, T2 and T12.

    Raises
    ------
    MeasurementError
        If a null model cannot be measured.
    """
    one, three = null_model(1), null_model(3)
    store.ensure(one)
    store.ensure(three)
    t1, t3 = store.timing(one).latency_ms, store.timing(three).latency_ms
    per_node = min(max((t3 - t1) / 2, 0.0), t1)
    return t1 - per_node, per_node


def case_shares(case: TestCase, store: ProbingStore) -> tuple[dict[str, float] | None, str]:
    """Edge-conversion share of every model of ``case``, or None and why not."""
    shares: dict[str, float] = {}
    for role, g in case.models.items():
        rec = store.edge(g)
        if rec["share"] is None:
            return None, f"{role}: {rec['why']}" if store.no_profile is None else rec["why"]
        shares[role] = float(rec["share"])
    return shares, ""
