"""Fusion rules read off the runtime's own graph, where the runtime shows one.

Timing detection (:mod:`nnmeter.fusion.detect`) infers a fusion from a saving, and
savings have other causes (layout conversions at a single-op model's edges, in-place
ops, hand-offs) and get lost in noise. ORT, OpenVINO and MNN say what they executed
(:meth:`nnmeter.backends.Profiler.profile`): whether ``op1 → op2`` runs as one node is
then a fact, read in one load without timing.

Two sources, in this order:

1. **Inside models** (``graphs``, by default the zoo's base models): every producer →
   consumer edge of every graph whose producer heads its executed node (a batch-norm
   folded into the convolution before it is not asked about) and whose consumer reads
   no other computed tensor (a residual add is the two-branch tests' question), as the
   runtime ran it; a pair is fused when most of those edges ran inside one node. This sees the contexts the partitioner
   meets: an activation that is not the graph output (ORT folds an activation into the
   convolution before it only then), residual adds whose operands are both computed.
2. **The test case** of a pattern no graph shows (and every multi-output, multi-input
   and block pattern): fused when one executed node covers ops of both sides *and* the
   pattern's model runs fewer kernels than its separate models (the definitions of
   ``experiments/fusion_truth.py``); a block only when its model runs one kernel, since
   the partitioner's block rule makes it one kernel (ORT runs a squeeze-excite block as
   four: pool, conv + activation, conv + gate, multiply, which the pair rules give).

:func:`new_pairs_from_models` adds, from source 1 only, the pairs that the graphs show and
the rules file has no pattern for (a transformer's ``matmul → mul``, ``add → layernorm``),
leaving every existing decision as it is.

:func:`runtime_rules` keeps each pattern's times and records, in ``extra.runtime``,
where the decision came from and the timed decision it replaced
(``extra.runtime.timed_fused``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from nnmeter.fusion.probes import EDGE_CONVERSION_OPS
from nnmeter.fusion.rules import FusionRules, Pattern, rule_op

logger = logging.getLogger(__name__)

__all__ = ["edges_in_models", "case_truth", "runtime_rules", "new_pairs_from_models",
           "kernel_count",
           "separate_roles", "covers_fused", "fewer_kernels", "LAYOUT_NODE_TYPES"]

#: executed-node types that convert layout or precision only: not kernels of an op
LAYOUT_NODE_TYPES = EDGE_CONVERSION_OPS | {"ConvertTensor"}


def kernel_count(executed: Sequence[Any]) -> int:
    """Kernels a runtime ran: executed nodes it timed, less the layout/precision
    conversions that do no original op's work."""
    return sum(1 for e in executed if e.time_ms is not None
               and (e.covers or e.op_type.rsplit(".", 1)[-1] not in LAYOUT_NODE_TYPES))


def _groups(graph: Any, executed: Sequence[Any]) -> dict[str, int]:
    from nnmeter.partition.truth import ir_set, ir_name_map

    names = ir_name_map(graph)
    group: dict[str, int] = {}
    for i, e in enumerate(executed):
        for n in ir_set(e.covers, names):
            group.setdefault(n, i)
    return group


def edges_in_models(profile: Any, graphs: Iterable[Any], *, single_consumer: bool = False
                    ) -> dict[tuple[str, str], list[int]]:
    """``(op1, op2)`` (rule names) → ``[edges run inside one node, edges seen]`` over
    every producer → consumer edge of ``graphs`` that the runtime's report covers.
    ``profile`` is a callable graph → executed nodes (``Profiler.profile``).
    ``single_consumer`` counts only edges whose producer has no other reader: the
    partitioner asks the pair rule only then (a producer with several readers is the
    multi-output tests' question), and runtimes fuse the two cases differently (ORT
    fuses a residual add into the layer norm after it only when nothing else reads
    the sum)."""
    from nnmeter.errors import NNMeterError

    seen: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for g in graphs:
        try:
            executed = profile(g)
        except NNMeterError as err:  # a runtime that cannot load one model: skip it
            logger.warning("runtime rules: %s skipped (%s)", getattr(g, "name", "?"), err)
            continue
        group = _groups(g, executed)
        graph_outputs = {o.node for o in g.outputs} if single_consumer else set()
        for n in g.topological_nodes():
            if n.op == "input" or n.name not in group:
                continue
            if len({r.node for r in n.inputs}) > 1:
                continue  # a join of computed tensors: the two-branch tests' question
            for r in n.inputs:
                u = g.node(r.node)
                if u.op == "input" or u.name not in group:
                    continue
                if single_consumer and (len(g.successors(u.name)) > 1
                                        or u.name in graph_outputs):
                    continue
                if any(group.get(q.node) == group[u.name] for q in u.inputs):
                    # u runs inside the node of its own producer (a bn folded into a
                    # conv): the pair test's question is about u heading a kernel
                    continue
                key = (rule_op(u.op), rule_op(n.op))
                seen[key][1] += 1
                seen[key][0] += group[u.name] == group[n.name]
    return dict(seen)


def separate_roles(case: Any) -> list[str]:
    """The roles of the separate models whose kernels a fused pattern would undercut."""
    if case.kind == "pair":
        return ["op1", "op2"]
    if case.kind == "multi_output":
        return ["p", "c1", "c2"]
    if case.kind == "multi_input":
        return ["branch", "branch", "join"]
    return [r for r in case.models if r.startswith("part:")]


def covers_fused(case: Any, executed: Sequence[Any]) -> bool:
    """One executed node covers ops of both sides of the pattern (pair: or one op
    left no trace, absorbed into another node)."""
    from nnmeter.partition.truth import ir_set, ir_name_map

    names = ir_name_map(case.models["block"])
    groups = [ir_set(e.covers, names) for e in executed]
    if case.kind == "pair":
        if not all(any(op in s for s in groups) for op in ("op1", "op2")):
            return True  # one op absorbed into another node without a trace in its names
        return any({"op1", "op2"} <= s for s in groups)
    if case.kind == "multi_output":
        return any("op1" in s and s & {"op2", "op3"} for s in groups)
    if case.kind == "multi_input":
        return any("op3" in s and s & {"op1", "op2"} for s in groups)
    return any(len(s) >= 2 for s in groups)


def case_truth(profile: Any, case: Any, counts: dict[str, int] | None = None) -> dict[str, Any]:
    """The runtime's answer for one test case: ``fused`` (covers and kernel count both
    say so), ``covers``, ``kernels`` (the counts). ``counts`` memoises single-model
    kernel counts by graph signature across cases."""
    from nnmeter.fusion.testcases import graph_signature

    counts = {} if counts is None else counts
    executed = profile(case.models["block"])
    k = {"block": kernel_count(executed)}
    for role in dict.fromkeys(separate_roles(case)):  # in order: stable files
        sig = graph_signature(case.models[role])
        if sig not in counts:
            counts[sig] = kernel_count(profile(case.models[role]))
        k[role] = counts[sig]
    by_covers = covers_fused(case, executed)
    by_kernels = fewer_kernels(case, k)
    out = {"fused": by_covers and by_kernels, "covers": by_covers, "kernels": k}
    if case.kind == "block" and out["fused"] and k["block"] > 1:
        # some parts merged, but the block still runs as several kernels: the
        # partitioner's block rule means one kernel, so the block is not fused
        out.update(fused=False, partial=True)
    return out


def fewer_kernels(case: Any, counts: dict[str, int]) -> bool:
    """The pattern's model runs fewer kernels than its separate models. A block
    pattern is fused (for the partitioner: one kernel for all its parts) only when its
    model runs one kernel; one that merges some of its parts is ``partial`` in
    :func:`case_truth`'s answer."""
    return counts["block"] < sum(counts[r] for r in separate_roles(case))


def runtime_rules(rules: FusionRules, profile: Any, graphs: Iterable[Any] = (), *,
                  progress: bool = False) -> tuple[FusionRules, dict[str, Any]]:
    """``rules`` with every decision taken from the runtime (module doc), and a report:
    per pattern its source, the runtime's and the timed decision."""
    from tqdm import tqdm

    from nnmeter.fusion.testcases import TestShapes, build_testcases

    seen = edges_in_models(profile, graphs)
    shapes = TestShapes(**{k: v for k, v in rules.shapes.items()
                           if k in TestShapes.__dataclass_fields__})
    cases = {c.name: c for c in build_testcases(shapes)}
    counts: dict[str, int] = {}
    out, report = [], {}
    for p in tqdm(rules.patterns, desc=f"runtime rules {rules.backend_id}", unit="pattern",
                  disable=not progress):
        # the timing detector's decision; a rules file read from the runtime before
        # keeps the one it recorded then
        before = (p.extra or {}).get("runtime") if isinstance(p.extra, dict) else None
        timed = before.get("timed_fused", p.fused) if isinstance(before, dict) else p.fused
        info: dict[str, Any] = {"timed_fused": timed}
        fused = None
        if p.kind == "pair" and len(p.ops) == 2:
            hit = seen.get((rule_op(p.ops[0]), rule_op(p.ops[1])))
            if hit and hit[1]:
                fused = 2 * hit[0] > hit[1]
                info.update(source="models", fused_edges=hit[0], edges=hit[1])
        if fused is None and p.name in cases:
            try:
                t = case_truth(profile, cases[p.name], counts)
            except Exception as err:  # noqa: BLE001 - a runtime that cannot load one case
                info.update(source="timed (the runtime could not load the test case)",
                            error=str(err)[:200])
            else:
                fused = t["fused"]
                info.update(source="test case", covers=t["covers"], kernels=t["kernels"])
                if t.get("partial"):
                    info["partial"] = True
        if fused is None:
            fused = p.fused
            info.setdefault("source", "timed (no runtime evidence)")
        info["fused"] = fused
        report[p.name] = info
        out.append(dataclasses.replace(p, fused=bool(fused),
                                       extra={**p.extra, "runtime": info}))
    return dataclasses.replace(rules, patterns=tuple(out)), report


def new_pairs_from_models(rules: FusionRules, profile: Any, graphs: Iterable[Any], *,
                          min_edges: int = 2) -> tuple[FusionRules, dict[str, Any]]:
    """``rules`` plus a ``pair`` pattern for every producer → consumer edge kind of
    ``graphs`` that it has no pattern for, decided as :func:`runtime_rules` decides
    from models (fused when most such edges ran inside one executed node). Patterns
    already in ``rules`` are kept unchanged, so no existing prediction moves.

    Only edges whose producer has one reader count (``single_consumer``). Edge kinds
    seen fewer than ``min_edges`` times are left out (one edge is one context, not a
    rule). Returns the new rules and, per added pattern, its evidence.
    """
    seen = edges_in_models(profile, graphs, single_consumer=True)
    have = {tuple(p.ops) for p in rules.patterns if p.kind == "pair"}
    added, report = [], {}
    for (op1, op2), (fused_edges, edges) in sorted(seen.items()):
        if (op1, op2) in have or edges < min_edges:
            continue
        fused = 2 * fused_edges > edges
        info = {"source": "models (new pair)", "fused_edges": fused_edges, "edges": edges,
                "fused": fused, "timed_fused": None}
        name = f"{op1}->{op2}"
        report[name] = info
        added.append(Pattern(name=name, kind="pair", ops=(op1, op2), fused=fused,
                             extra={"runtime": info}))
    if not added:
        return rules, report
    return dataclasses.replace(rules, patterns=tuple(rules.patterns) + tuple(added)), report
