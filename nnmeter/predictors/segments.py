"""Batch totals segment by segment: what a model of a search space shares with the
others is predicted once.

A NASBench-201 network is a chain of segments joined at single tensors (the stem, 15
cells in 3 stages, 2 reduction blocks, the head; :mod:`nnmeter.partition.segments` finds
the cuts). The 5 cells of a stage are one segment repeated, and a batch of networks
shares its stem, reduction blocks and head. :class:`SegmentTotals` keeps, per distinct
segment (ops, attributes, shapes and wiring, and the stub that stands for the producer
of its input), its kernels, their estimates, and for each *context* (the type of the
kernel that produces its input, whether that kernel's output is blocked and already
reordered) what the composition terms make of it: the kernel times (with weights hot
and refetched past the cache), the layout reorders found at its kernels and at its
outputs, and the context it hands to the next segment.

A model's total is then the same sums the whole-model path computes
(:meth:`~nnmeter.predictors.model.LatencyPredictor.predict_many`), over the segments'
lists chained in order, so the figures are equal to the last bit: the kernels are the
whole graph's (the cuts are safe for the partitioner), each term sees in a segment what
it sees in the whole model at those kernels, and every sum adds the same numbers in the
same order.

Only the built-in terms are known here (overhead, weight refetch, absorbed kernels,
reorders, chain, in-model, in any order); a predictor with another term, a graph
without cuts the partitioner's order agrees with, or one that its backend would rewrite
(:func:`nnmeter.ir.canonical.for_backend`) takes the whole-model path.

The memo is bounded: past :data:`LIMIT` segments it is cleared whole, between graphs.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.kernels import Kernel
from nnmeter.partition import partition, partition_segment
from nnmeter.partition.segments import Segmenter, Split, may_grow_into
from nnmeter.predictors.terms import (AbsorbedTerm, ChainTerm, InModelTerm, OverheadTerm,
                                      RefetchTerm, ReordersTerm)

__all__ = ["SegmentTotals", "LIMIT"]

#: distinct segments kept before the memo is cleared
LIMIT = 20_000

_KNOWN = frozenset((OverheadTerm, RefetchTerm, AbsorbedTerm, ReordersTerm, ChainTerm,
                    InModelTerm))


class _Part:
    """One distinct segment: its graph (the stub first, when it has one), its kernels,
    the index of the kernel holding its last node (``exit``), their estimates once the
    batch has made them, and its evaluations per context."""

    __slots__ = ("graph", "stub", "kernels", "exit", "exit_ops", "exit_is_output",
                 "rewritten", "safe_after", "hot", "cold", "bytes", "evals")

    def __init__(self, graph: ModelGraph, stub: str | None, kernels: list[Any],
                 last: str, rewritten: bool) -> None:
        self.graph = graph
        self.stub = stub
        self.kernels = kernels
        self.exit = next(i for i, k in enumerate(kernels) if last in k.nodes)
        ek = kernels[self.exit]
        self.exit_ops = ek.ops
        outputs = {r.node for r in graph.outputs}
        self.exit_is_output = not outputs.isdisjoint(ek.nodes)
        self.rewritten = rewritten
        #: (exit ops of the segment before) -> whether the cut before this one is safe
        self.safe_after: dict[tuple[str, ...], bool] = {}
        self.hot: list[float] | None = None
        self.cold: list[float] | None = None
        self.bytes: list[float] = []
        self.evals: dict[Any, _Eval] = {}


class _Eval:
    """A segment in one context: kernel times with weights hot and refetched (None
    without a refetch term), reorder costs found at its kernels and at its outputs, and
    the context of the segment after it."""

    __slots__ = ("hot", "cold", "moved", "at_outputs", "after")

    def __init__(self, hot: list[float], cold: list[float] | None, moved: list[float],
                 at_outputs: list[float], after: tuple[str, bool, bool]) -> None:
        self.hot = hot
        self.cold = cold
        self.moved = moved
        self.at_outputs = at_outputs
        self.after = after


class SegmentTotals:
    """The segment memo of one predictor (see the module docstring). ``retype``: what
    the predictor does to a partition's kernel list after partitioning (its grouped
    convolution types), or None."""

    def __init__(self, predictor: Any, retype: Any = None) -> None:
        self.predictor = predictor
        #: what the predictor does to a partition's kernels (the grouped types), if any
        self.retype = retype
        self.segmenter = Segmenter()
        self.parts: dict[tuple[Any, ...], _Part] = {}

    @staticmethod
    def supports(composition: Any) -> bool:
        """Whether every term of ``composition`` is one this path knows."""
        return all(type(t) in _KNOWN for t in composition.terms)

    def clear(self) -> None:
        self.parts.clear()
        self.segmenter.clear()  # its codes are in the parts' keys

    # -- segments -------------------------------------------------------------------
    def _part(self, split: Split, start: int, end: int, graph: ModelGraph) -> _Part | None:
        key = (graph.dtype, split.key(start, end))
        part = self.parts.get(key)
        if part is not None:
            return part
        from nnmeter.ir.canonical import _rewrite_candidate

        pred = self.predictor
        nodes = split.nodes
        sub = ModelGraph(graph.name, dtype=graph.dtype)
        stub = None
        if start:
            p = nodes[start - 1]
            stub = p.name
            sub._insert(Node(p.name, p.op, p.attrs, (), p.input_shapes, p.output_shapes))
        for node in nodes[start:end + 1]:
            sub._insert(node)
        sub.outputs = [Ref(nodes[p].name, port) for p, port in split.outputs
                       if start <= p <= end]
        kernels = (partition_segment(sub, pred.rules, stub) if stub is not None
                   else partition(sub, pred.rules))
        if kernels is None:
            return None
        if self.retype is not None:
            kernels = self.retype(kernels)
        part = _Part(sub, stub, kernels, nodes[end].name,
                     _rewrite_candidate(sub, pred.backend_id))
        self.parts[key] = part
        return part

    def _safe(self, before: _Part, part: _Part) -> bool:
        """Whether the cut between ``before`` and ``part`` keeps the whole graph's
        kernels and terms: the kernel ending at the cut takes none of its readers, and
        holds no graph output (a reorder at the outputs depends on its readers)."""
        if before.exit_is_output:
            return False
        hit = part.safe_after.get(before.exit_ops)
        if hit is None:
            hit = part.safe_after[before.exit_ops] = not may_grow_into(
                self.predictor.rules, before.exit_ops, part.graph, part.stub)
        return hit

    def _plan(self, graph: ModelGraph) -> list[_Part] | None:
        """The graph's segments, in order; None for the whole-model path."""
        split = self.segmenter.split(graph)
        if split is None:
            return None
        parts: list[tuple[int, _Part]] = []
        start = 0
        for end in chain(split.cuts, (len(split.nodes) - 1,)):
            part = self._part(split, start, end, graph)
            while part is not None and parts and not self._safe(parts[-1][1], part):
                start = parts.pop()[0]  # one segment across the unsafe cut
                part = self._part(split, start, end, graph)
            if part is None or part.rewritten:
                return None
            parts.append((start, part))
            start = end + 1
        return [p for _, p in parts]

    # -- estimates and terms ----------------------------------------------------------
    def _estimate(self, new: list[_Part]) -> None:
        pred = self.predictor
        batch, slots = pred._estimate([p.kernels for p in new])
        preds = batch.preds
        refetch = pred.composition.get(RefetchTerm.name)
        cold = refetch._cold(batch) if type(refetch) is RefetchTerm else None
        for p, sl in zip(new, slots):
            p.hot = [preds[s[0]][s[1]] for s in sl]
            p.bytes = [s[3] for s in sl]
            if cold is not None:
                p.cold = [cold[s[0]][s[1]] for s in sl]

    def _eval(self, part: _Part, context: tuple[str, bool, bool] | None) -> _Eval:
        """What the terms make of ``part`` after a segment that hands it ``context``
        (None for the first segment), as :meth:`Composition.assemble` does it over the
        whole model."""
        from nnmeter.predictors.absorbed import absorbed_kernels
        from nnmeter.predictors.layout import layout_pass
        from nnmeter.predictors.reorder import reorder_cost_ms

        kernels = part.kernels
        if context is not None:
            stub = Kernel._fast(context[0], (part.stub,), (), None)
            every = [stub, *kernels]
            off = 1
            given: dict[int, tuple[bool, bool]] | None = {0: (context[1], context[2])}
        else:
            every, off, given = list(kernels), 0, None
        assert part.hot is not None
        hot = list(part.hot)
        cold = list(part.hot) if part.cold is not None else None
        absorbed: dict[int, int] = {}
        moved: list[float] = []
        at_outputs: list[float] = []
        exit_state = (False, False)
        for t in self.predictor.composition.terms:
            kind = type(t)
            if kind is RefetchTerm:
                if cold is not None:
                    cold = list(part.cold)  # type: ignore[arg-type]
            elif kind is AbsorbedTerm:
                absorbed = absorbed_kernels(part.graph, every, t.facts)
                for i in absorbed:
                    if i >= off:
                        hot[i - off] = 0.0
                        if cold is not None:
                            cold[i - off] = 0.0
            elif kind is ReordersTerm:
                if t.block:
                    main, outs, blocked, reordered = layout_pass(
                        part.graph, every, t.block, t._configs, absorbed=absorbed,
                        given=given)
                    moved = [reorder_cost_ms(n, t.line, t.curve) for n in main]
                    at_outputs = [reorder_cost_ms(n, t.line, t.curve) for n in outs]
                    e = part.exit + off
                    exit_state = (blocked[e], e in reordered)
            elif kind is InModelTerm:
                for ms in (hot, cold):
                    if ms is None:
                        continue
                    for j, k in enumerate(kernels):
                        if not ms[j]:
                            continue
                        b, mb = t._kernel(k)
                        if b:
                            ms[j] = max(ms[j] + b * mb, 0.5 * ms[j])
        return _Eval(hot, cold, moved, at_outputs, (kernels[part.exit].type, *exit_state))

    # -- public -----------------------------------------------------------------------
    def totals(self, graphs: list[Any]) -> list[float | None]:
        """Each graph's total ms, None for a graph that takes the whole-model path."""
        pred = self.predictor
        terms = pred.composition.terms
        plans: list[list[_Part] | None] = []
        new: list[_Part] = []
        for g in graphs:
            if len(self.parts) > LIMIT:
                # the plans made so far hold their parts; only the lookups start afresh
                self.clear()
            plan = self._plan(g) if isinstance(g, ModelGraph) else None
            if plan is not None:
                for p in plan:
                    if p.hot is None:
                        p.hot = []  # marks it as queued
                        new.append(p)
            plans.append(plan)
        if new:
            self._estimate(new)
        refetch = pred.composition.get(RefetchTerm.name)
        llc = refetch.llc_bytes if type(refetch) is RefetchTerm else None
        out: list[float | None] = []
        for plan in plans:
            if plan is None:
                out.append(None)
                continue
            evals = []
            context = None
            for p in plan:
                ev = p.evals.get(context)
                if ev is None:
                    ev = p.evals[context] = self._eval(p, context)
                evals.append(ev)
                context = ev.after
            use_cold = llc is not None and sum(chain.from_iterable(
                p.bytes for p in plan)) > llc
            ms = chain.from_iterable(ev.cold if use_cold else ev.hot for ev in evals)
            term_ms = []
            for t in terms:
                kind = type(t)
                if kind is OverheadTerm:
                    term_ms.append(t.overhead_ms)
                elif kind is ReordersTerm:
                    term_ms.append(float(sum(chain(
                        chain.from_iterable(ev.moved for ev in evals),
                        chain.from_iterable(ev.at_outputs for ev in evals)))))
                else:
                    term_ms.append(0.0)
            out.append(float(sum(ms)) + float(sum(term_ms)))
        return out
