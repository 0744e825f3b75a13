"""Fusion-rule detection: run the crafted test cases through a backend and write the rules.

The rule (nn-Meter): op1 → op2 is fused when T1 + T2 - T12 > alpha * min(T1, T2), with
T1, T2 the times of op1 and op2 alone and T12 the time of op1 → op2 (alpha 0.5), on
times corrected for the per-inference overhead, the edge conversions and the hand-off
of tensors across a model's boundary. The work is split by job:

- :mod:`nnmeter.fusion.decision` — the rule, the corrections applied to the times, the
  multi-output and multi-input hypotheses, and ties;
- :mod:`nnmeter.fusion.probes` — the overhead, edge-conversion and hand-off probes;
- :mod:`nnmeter.fusion.journal` — the resumable record of the measurements;
- this module — measuring each case (again while its decision is within the noise),
  deciding it, and writing the rules file.

Noise: when the margin of a decision is smaller than the combined spread, all models of
the case are measured again (up to ``max_remeasure`` times; each time is then the
minimum over repeats, and its spread the larger of the repeats' median spread and the
gap from the minimum to the next-best repeat; ``samples_ms`` lists the repeats) and the
pattern is recorded with ``close: true``; one still within the noise after the last
re-measurement goes to "not fused" (:func:`~nnmeter.fusion.decision.split_tie`).

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
measured once and shared between cases, and journaled so that an interrupted run
resumes where it stopped.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from nnmeter.errors import BackendError, MeasurementError
from nnmeter.fusion.decision import PairDecision, Timing, decide_case, decide_pair, split_tie
from nnmeter.fusion.joins import is_conv_add_join, join_operand_from_runtime, with_join_operand
from nnmeter.fusion.probes import (
    EDGE_CONVERSION_OPS, EDGE_PROFILE_RUNS, ProbingStore, case_shares, edge_share,
    input_probe_model, measure_overhead, model_handoff, null_model, passthrough_model,
)
from nnmeter.fusion.rules import FusionRules, Pattern, rules_path
from nnmeter.fusion.testcases import TestCase, TestShapes, build_testcases
from nnmeter.ir.graph import ModelGraph

__all__ = ["detect_fusion", "decide_pair", "measure_overhead", "edge_share",
           "passthrough_model", "input_probe_model", "EDGE_CONVERSION_OPS",
           "EDGE_PROFILE_RUNS", "PairDecision", "Timing"]

logger = logging.getLogger(__name__)

# the names this module had before its split, which tests still import from here
_Store = ProbingStore
_null_model = null_model
_decide_case = decide_case


def _evaluate(case: TestCase, store: ProbingStore, alpha: float, max_remeasure: int,
              overhead_ms: float, tie_to_split: bool = True) -> Pattern:
    """Measure ``case``, again while its decision is within the noise, and decide it."""
    for g in case.models.values():
        store.ensure(g)
    shares, why = case_shares(case, store)
    # measured (once per tensor shape) only while the backend can tell a hand-off
    handoff = ({role: model_handoff(g, store) for role, g in case.models.items()}
               if store.no_handoff is None else {})
    close = False
    decisions: list[bool] = []
    why_again = ""
    for attempt in range(max_remeasure + 1):
        t = {role: store.timing(g) for role, g in case.models.items()}
        pattern, margin, noise = decide_case(case, t, alpha, overhead_ms, shares,
                                             handoff if store.no_handoff is None else None)
        decisions.append(bool(pattern["fused"]))
        if abs(margin) < noise:
            close, why_again = True, f"margin {margin:.4f} ms within noise {noise:.4f} ms"
        elif attempt == 0 and any(store.disturbed(g) for g in case.models.values()):
            why_again = "a measurement was disturbed (busy machine)"
        elif attempt == 1 and decisions[0] != decisions[1]:
            why_again = "the decision flipped on re-measurement"
        else:
            break
        if attempt < max_remeasure:
            logger.info("%s: %s, measuring again", case.name, why_again)
            for g in case.models.values():
                store.measure_new(g)
    if len(set(decisions)) > 1:
        pattern["extra"]["flipped"] = decisions
    if shares is None:
        pattern["extra"]["edge"] = {"skipped": why}
    if tie_to_split:
        # still within the noise after the re-measurements: not fused (module doc)
        pattern = split_tie(pattern, margin, noise)
    return Pattern(**{**pattern, "close": close})


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
        backend reports timed executed nodes (:mod:`~nnmeter.fusion.probes`); False: the
        plain rule.
    handoff_correction : bool
        Remove from each saving the hand-off of the tensors that cross between the
        separate models, where the backend's profile shows a flatten to be a view
        (:mod:`~nnmeter.fusion.probes`).
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
    store = ProbingStore(lambda g: prof.measure(g, on_error="record", **kw), journal, resume,
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
        joins = None
        if profile is not None and any(is_conv_add_join(p) for p in patterns):
            try:
                joins = join_operand_from_runtime(prof)
            except (BackendError, MeasurementError) as err:
                logger.warning("join operand probe: %s", err)
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
    if joins is not None:
        rules = with_join_operand(rules, joins)
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
    from nnmeter.predictors.store import write_atomic

    write_atomic(out_path, (json.dumps(data, indent=1) + "\n").encode())
    if journal.exists():
        journal.unlink()
    logger.info("wrote %s (%d patterns, %d failed)", out_path, len(patterns), len(failed))
    return rules
