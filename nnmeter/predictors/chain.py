"""The chain excess: what a single-kernel measurement still carries beyond the kernel's
time inside a model, once the per-inference overhead and the layout reorders are off.

``experiments/chain_calibration.py`` measures it on the device: chains of n identical
kernels (n = 1, 2, 4, 8) give the kernel's in-model time as the slope of time over n;
the single-kernel model (n = 1) costs that, plus the overhead and its reorders, plus the
excess. Every config is measured in :data:`ROUNDS` rounds over its lengths and each
model keeps its median round; runs can be merged (:func:`merge_chain`). Split and
concat are calibrated together: a link splits the tensor in halves and concatenates
them back (:data:`PAIR_LINK`), and the split and concat single-kernel models are
measured beside the chain; each gets half of what the two cost beyond the link.

What the record holds (``<dataset>/chain_excess.json``), and what training subtracts
from a kernel's row (:func:`nnmeter.predictors.train.train_predictor`):

- families with chains of their own (channel shuffle, pooling, activations, split,
  concat): a robust line in the single-kernel model's elements (inputs plus outputs),
  held flat beyond the largest calibrated size (:func:`fit_family_line`), and their
  median for callers without a size;
- every other kernel: the convolutions' excess ``e0`` plus a size term.

Budget and resume. Every point is appended to ``chain_excess.points.jsonl`` as it is
measured (:class:`CalibrationPoints`, shared by every calibration), so a stopped
calibration keeps its points and the next call measures only the rest. At a
``deadline`` :func:`measure_chain` stops between configs and returns a record marked
``partial`` when every family has a point: :func:`chain_cases` lists the configs
round-robin over the kernel types, so any prefix covers every family and a cut
calibration still fits each family line it has four points for.

The constants matter for models of many tiny kernels (a 0.2 ms NASBench-201 cell has
about 30; a ShuffleNetV2 unit has a split, a concat and a channel shuffle).

Large tensors. A single-kernel model moves its input and output through more buffers
than the kernel does inside a model (the caller's input, its reordered copy, the
kernel's output, the caller's output), and once those no longer fit in the cache the
model pays for it: on this machine's ONNX Runtime a 3x3 depthwise conv over
(1, 144, 128, 128) costs about 1 ms more alone than its 0.56 ms inside a chain,
reorders already removed, while below about 0.4 M elements per tensor the excess is
nil. The calibration therefore also runs large convolutions (:data:`LARGE_CASES`) and
fits the excess of the compute kernels as a hinge in the single-kernel model's
elements: ``excess = e0 + k * max(0, elements - knee)`` (:func:`fit_size_excess`,
stored under ``size``); training subtracts it per row with the row's own elements.

Examples
--------
>>> chain_excess_ms(None)
0.0
>>> chain_excess_ms({"excess_ms": 0.0011})
0.0011
>>> chain_excess_ms({"excess_ms": 0.0011, "families": {"pool": 0.003}}, "pool")
0.003
>>> rec = {"excess_ms": 0.001, "size": {"knee_elements": 1e6, "ms_per_melem": 0.5}}
>>> chain_excess_ms(rec, elements=500_000), chain_excess_ms(rec, elements=3_000_000)
(0.001, 1.001)
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError

__all__ = ["CHAIN_FILE", "LENGTHS", "ROUNDS", "COMPUTE_TYPES", "LARGE_CASES", "chain_cases",
           "chain_graph", "measure_chain", "planned_chain_work", "fit_size_excess",
           "fit_family_line", "merge_chain", "write_chain", "read_chain", "chain_excess_ms",
           "PAIR_LINK", "FLOOR_SHARE", "remove_excess", "restored_excess",
           "CalibrationPoints", "points_path", "mark_partial"]

logger = logging.getLogger(__name__)

#: a link of two kernels that undo each other (split into halves, concat them back):
#: its chains calibrate split and concat, whose single-kernel models are measured too
PAIR_LINK = "split-concat"

#: rounds over a config's chain lengths; each model keeps its median round (one
#: disturbed round bent the line of a large chain: 3.67, 3.74, 4.36, 8.01 ms for 1-8 links)
ROUNDS = 3

#: per-dataset calibration file (``nnmeter build`` and experiments/chain_calibration.py)
CHAIN_FILE = "chain_excess.json"

#: chain lengths measured per config (1 is the builder's single-kernel model)
LENGTHS = (1, 2, 4, 8)

#: kernel types whose median excess is the default for every family without chains
COMPUTE_TYPES = ("conv-bn-relu", "dwconv-bn")


#: large compute configs (kernel type, channels, height = width, kernel size) behind
#: the size term: 0.4 M to 2.4 M elements per tensor
LARGE_CASES = (("dwconv-bn", 64, 80, 3), ("dwconv-bn", 48, 128, 3), ("dwconv-bn", 96, 96, 3),
               ("dwconv-bn", 96, 112, 3), ("dwconv-bn", 96, 128, 3),
               ("dwconv-bn", 144, 128, 3), ("dwconv-bn", 192, 112, 3),
               ("dwconv-bn", 144, 128, 7), ("conv-bn-relu", 64, 80, 1),
               ("conv-bn-relu", 48, 128, 1), ("conv-bn-relu", 96, 96, 1),
               ("conv-bn-relu", 96, 128, 1))


def chain_cases() -> list[tuple[str, int, int, int]]:
    """(kernel type, channels, height = width, kernel size) of every calibrated config:
    convolutions (1x1, 3x3) and depthwise 3x3 over channel counts that run blocked and
    plain and four sizes, and :data:`LARGE_CASES`; channel shuffles, poolings, relu,
    hswish and split-concat pairs (:data:`PAIR_LINK`) over three.

    The order is round-robin over the kernel types (in the order above), each type's
    configs spread over its sizes (:func:`_spread`): any prefix holds every type once
    before any twice, so a calibration stopped at its deadline has a point of every
    family, and lines through them once it has four of each. Only the order is new: the
    configs are those the committed records were measured with.

    Examples
    --------
    >>> cases = chain_cases()
    >>> len(cases), [c[0] for c in cases[:3]]
    (130, ['conv-bn-relu', 'dwconv-bn', 'channelshuffle'])
    """
    cases = [(name, c, hw, k) for name, k in (("conv-bn-relu", 1), ("conv-bn-relu", 3),
                                              ("dwconv-bn", 3))
             for c in (24, 58, 64, 116) for hw in (7, 14, 28, 56)
             if not (name == "conv-bn-relu" and k == 3 and c * hw > 116 * 28)]
    cases += list(LARGE_CASES)
    cases += [(name, c, hw, 3) for name in ("channelshuffle", "maxpool", "avgpool", "relu",
                                            "hswish", PAIR_LINK)
              for c in (24, 58, 64, 116) for hw in (7, 14, 28)]
    groups: dict[str, list[tuple[str, int, int, int]]] = {}
    for case in cases:
        groups.setdefault(case[0], []).append(case)
    queues = [_spread(sorted(g, key=lambda x: (x[1] * x[2] * x[2], x[3], x[1])))
              for g in groups.values()]
    out = []
    for i in range(max(len(q) for q in queues)):
        out += [q[i] for q in queues if i < len(q)]
    return out


def _spread(items: list[Any]) -> list[Any]:
    """``items`` (sorted by size) reordered so that every prefix spreads over the whole
    range: the first, then the middle, the quarters, the eighths... (van der Corput).

    >>> _spread(list(range(8)))
    [0, 4, 2, 6, 1, 5, 3, 7]
    """
    n = len(items)
    bits = max(1, (n - 1).bit_length())
    order: list[int] = []
    seen: set[int] = set()
    for j in range(1 << bits):
        rev = int(format(j, f"0{bits}b")[::-1], 2)
        i = rev * n >> bits
        if i not in seen:
            seen.add(i)
            order.append(i)
    return [items[i] for i in order]


def fit_size_excess(points: list[dict[str, Any]], *, min_above: int = 3
                    ) -> tuple[float, dict[str, float] | None]:
    """(e0, size term) of the compute kernels' excess against their elements.

    Fits ``excess = e0 + k * max(0, elements - knee)`` over the points of
    :data:`COMPUTE_TYPES` (each with ``elements`` and ``excess_ms``): for every candidate
    knee (each point's elements), e0 is the median excess of the points at or below it
    and k >= 0 the least-squares slope of the rest; the knee with the smallest squared
    error wins. Without ``min_above`` points above any knee, or when the best slope is
    0, the size term is None and e0 the median of all points.

    Examples
    --------
    >>> pts = [{"kernel_type": "dwconv-bn", "elements": n, "excess_ms": e}
    ...        for n, e in ((1e5, 0.0), (2e5, 0.001), (4e5, 0.0), (1e6, 0.3), (2e6, 0.8),
    ...                     (3e6, 1.3))]
    >>> e0, size = fit_size_excess(pts)
    >>> e0, size["knee_elements"], round(size["ms_per_melem"], 3)
    (0.0, 400000.0, 0.5)
    """
    pts = sorted((float(p["elements"]), float(p["excess_ms"])) for p in points
                 if p["kernel_type"] in COMPUTE_TYPES and p.get("elements"))
    if not pts:
        return 0.0, None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    best: tuple[float, float, float, float] | None = None  # sse, knee, e0, k
    for knee in np.unique(x):
        below, above = x <= knee, x > knee
        if above.sum() < min_above or not below.any():
            continue
        e0 = float(np.median(y[below]))
        dx, dy = x[above] - knee, y[above] - e0
        k = max(float(dx @ dy / (dx @ dx)), 0.0)
        sse = float(np.sum((y[below] - e0) ** 2) + np.sum((dy - k * dx) ** 2))
        if best is None or sse < best[0]:
            best = (sse, float(knee), e0, k)
    if best is None or best[3] <= 0:
        return float(np.median(y)), None
    return best[2], {"knee_elements": best[1], "ms_per_melem": best[3] * 1e6}


def _link(name: str, b: Any, y: Any, c: int, k: int, i: int) -> Any:
    if name == PAIR_LINK:
        halves = b.split(y, [c // 2, c - c // 2], name=f"s{i}")
        return b.concat(list(halves), name=f"j{i}")
    if name == "conv-bn-relu":
        return b.relu(b.bn(b.conv(y, c, k, 1, name=f"c{i}"), name=f"b{i}"), name=f"r{i}")
    if name == "dwconv-bn":
        return b.bn(b.dwconv(y, k, 1, name=f"d{i}"), name=f"b{i}")
    if name == "channelshuffle":
        return b.channelshuffle(y, 2, name=f"s{i}")
    if name in ("maxpool", "avgpool"):
        pool = b.maxpool if name == "maxpool" else b.avgpool
        return pool(y, k, 1, pads=(k // 2,) * 4, name=f"p{i}")
    return b.act(y, name, name=f"a{i}")


def chain_config(kt: Any, c: int, hw: int, k: int) -> Any:
    """The single-kernel config of one link of a chain (shape-preserving)."""
    name = kt.name
    if name == "conv-bn-relu":
        return kt.config_cls(h=hw, w=hw, cin=c, cout=c, kernel=k, stride=1)
    if name == "dwconv-bn":
        return kt.config_cls(h=hw, w=hw, cin=c, kernel=k, stride=1)
    if name == "channelshuffle":
        return kt.config_cls(h=hw, w=hw, cin=c, groups=2)
    if name in ("maxpool", "avgpool"):
        return kt.config_cls(h=hw, w=hw, cin=c, kernel=k, stride=1, pads=(k // 2,) * 4)
    return kt.config_cls(h=hw, w=hw, cin=c)


def chain_graph(name: str, c: int, hw: int, k: int, n: int) -> Any:
    """A model of ``n`` identical kernels of type ``name`` in a row."""
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder(f"chain-{name}", (1, c, hw, hw))
    y = b.x
    for i in range(n):
        y = _link(name, b, y, c, k, i)
    return b.build([y])


# the points of a calibration in progress live in nnmeter.predictors.calibration_points
from nnmeter.predictors.calibration_points import (  # noqa: E402  (re-exported)
    CalibrationPoints, mark_partial, points_path,
)


def _case_parts(name: str, c: int, hw: int, k: int) -> list[tuple[Any, Any]]:
    """(kernel type, config) of the single-kernel models a case's excess is taken over:
    one link's kernel, or a pair link's split and concat."""
    from nnmeter.kernels import KERNEL_TYPES

    if name == PAIR_LINK:
        split, concat = KERNEL_TYPES.get("split"), KERNEL_TYPES.get("concat")
        return [(split, split.config_cls(h=hw, w=hw, cin=c, sizes=(c // 2, c - c // 2))),
                (concat, concat.config_cls(h=hw, w=hw, cins=(c // 2, c - c // 2)))]
    kt = KERNEL_TYPES.get(name)
    return [(kt, chain_config(kt, c, hw, k))]


def _case_graphs(name: str, c: int, hw: int, k: int, parts: list[tuple[Any, Any]]) -> list[Any]:
    """The models a case measures each round: a pair's single models, then the chains
    of :data:`LENGTHS` (the chain of one link of any other type is its single model)."""
    if name == PAIR_LINK:
        return [kt.build_graph(cfg) for kt, cfg in parts] + [
            chain_graph(name, c, hw, k, n) for n in LENGTHS]
    kt, cfg = parts[0]
    return [kt.build_graph(cfg) if n == 1 else chain_graph(name, c, hw, k, n)
            for n in LENGTHS]


def _case_models(name: str) -> int:
    """How many models a case measures per round."""
    return len(LENGTHS) + (2 if name == PAIR_LINK else 0)


def _case_key(case: tuple[str, int, int, int]) -> str:
    return json.dumps(list(case))


def _stored_runs(point: Any, name: str) -> list[list[float]] | None:
    """The ``rounds_ms`` of a point read back from the points file, or None when it
    does not hold a time for every model of its case in every round."""
    runs = point.get("rounds_ms") if isinstance(point, dict) else None
    if not isinstance(runs, list) or not runs or not all(
            isinstance(r, list) and len(r) == _case_models(name)
            and all(isinstance(x, (int, float)) for x in r) for r in runs):
        return None
    return runs


def planned_chain_work(backend_id: str, dataset_dir: str | os.PathLike, *,
                       rounds: int = ROUNDS) -> int:
    """Measurements :func:`measure_chain` still has to make on the dataset in
    ``dataset_dir``: the models of every config without a point in its points file,
    times ``rounds`` (cheap: reads the points file, measures nothing)."""
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    done = CalibrationPoints.of(ds, CHAIN_FILE).load()
    return sum(_case_models(case[0]) for case in chain_cases()
               if _stored_runs(done.get(_case_key(case)), case[0]) is None) * max(1, rounds)


def _chain_families(kernel_types: Iterable[str]) -> set[str]:
    """The families a chain record gives a value to: the compute types (the default)
    and every family of the other types."""
    out: set[str] = set()
    for t in kernel_types:
        out |= {t} if t in COMPUTE_TYPES else set(_families_of(t))
    return out


def measure_chain(backend_id: str, dataset_dir: str | os.PathLike, *, overhead_ms: float,
                  single_costs: Callable[[Any, Any], tuple[float, float]],
                  profiler: Any = None,
                  on_point: Callable[[dict[str, Any]], None] | None = None,
                  rounds: int = ROUNDS, deadline: float | None = None,
                  progress: bool = False) -> dict[str, Any]:
    """Measure the chains of :func:`chain_cases` on ``backend_id`` and return the
    calibration record (``excess_ms``, per-family ``families``, raw ``points``) for the
    dataset in ``dataset_dir`` (``<root>/datasets/kernels/<dataset id>``).

    Each config's lengths are measured in ``rounds`` rounds and each keeps its median
    time (``rounds_ms`` keeps them all). ``overhead_ms`` and ``single_costs(kernel
    type, config) -> (reorders ms, boundary ms)`` are what training removes from a
    single-kernel row before the chain term (the composition terms ahead of it;
    :meth:`nnmeter.predictors.terms.ChainTerm.measure` passes them). ``on_point`` is
    called with each point as it is measured.

    Every measured config is appended to ``chain_excess.points.jsonl``
    (:class:`CalibrationPoints`); a config already there with the dataset's fingerprint
    is not measured again (its times are summarised anew with this call's overhead and
    single costs). :func:`write_chain` removes the file with the complete record.

    Parameters
    ----------
    deadline : float, optional
        A ``time.monotonic()`` time: from then on no config is started (one is measured
        even past it when nothing is there yet). The record of a calibration cut short
        is marked ``partial`` with ``points_planned`` and ``points_measured``
        (:func:`mark_partial`); its points file stays for the next call to continue.
        None: measure every config.
    progress : bool
        Show a progress bar with the time left (tqdm), one step per config.

    Raises
    ------
    DatasetError
        If the deadline came before every family (the compute types, and the families
        of the other types) had a point: too little to fit the record. The points
        measured are kept for the next call.
    MeasurementError
        If a model fails to run (from the profiler).
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.predictors.boundary import boundary_elements
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    overhead = float(overhead_ms)
    log = CalibrationPoints.of(ds, CHAIN_FILE)
    done = log.load()
    cases = chain_cases()
    keys = [_case_key(case) for case in cases]
    stored = {key: runs for case, key in zip(cases, keys)
              if (runs := _stored_runs(done.get(key), case[0])) is not None}
    reused = len(stored)
    prof = profiler
    points = []
    missing = 0
    t0 = time.time()
    bar = tqdm(total=len(cases), initial=reused, unit="config", disable=not progress,
               desc=f"calibrate chain excess ({backend_id})")
    try:
        for (name, c, hw, k), key in zip(cases, keys):
            parts = _case_parts(name, c, hw, k)
            runs = stored.get(key)
            if runs is None:
                if deadline is not None and time.monotonic() >= deadline and \
                        (points or reused):
                    missing += 1
                    continue
                if prof is None:
                    prof = Profiler(backend_id)
                graphs = _case_graphs(name, c, hw, k, parts)
                # rounds over all lengths, so that a slow spell hits one round, not one length
                runs = [[prof.measure(g, on_error="raise").latency_ms for g in graphs]
                        for _ in range(max(1, rounds))]
            point = _summarise({
                "kernel_type": name, "config": parts[0][0].config_to_dict(parts[0][1]),
                "singles": len(parts) if name == PAIR_LINK else 0, "rounds_ms": runs,
                "reorders_ms": sum(single_costs(kt, cfg)[0] for kt, cfg in parts),
                "boundary_ms": sum(single_costs(kt, cfg)[1] for kt, cfg in parts),
                "elements": sum(boundary_elements(*parts[0]))}, overhead)
            points.append(point)
            if key not in stored:
                log.append(key, point)
                bar.update(1)
                if on_point is not None:
                    on_point(point)
    finally:
        bar.close()
        if prof is not None and profiler is None:
            prof.close()
    if missing:
        lacking = sorted(_chain_families(c[0] for c in cases)
                         - _chain_families(p["kernel_type"] for p in points))
        if lacking:
            raise DatasetError(
                f"the chain calibration of {ds.directory} reached its deadline after "
                f"{len(points)} of {len(cases)} configs, before {', '.join(lacking)} had "
                f"one; too few to fit. Its points are kept in {log.path.name}: the next "
                f"`nnmeter build` continues them (give it more --budget-minutes)")
    rec = _record(points, overhead)
    rec.update({"backend_id": backend_id, "fingerprint_id": ds.fingerprint_id,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "rounds": max(1, rounds),
                "seconds": time.time() - t0})
    if missing:
        mark_partial(rec, planned=len(cases), measured=len(points))
    return rec


def _summarise(point: dict[str, Any], overhead: float) -> dict[str, Any]:
    """Fill in a raw point's times (median round per model), slope and excess.

    The median, not the fastest: a training row is one measurement, and the fastest of
    several rounds would sit below it, more so for the single model than for the
    chain's slope; the median still ignores one disturbed round of three.

    ``rounds_ms`` rows list the ``singles`` single-kernel models first (a pair link's
    split and concat), then the chain lengths of :data:`LENGTHS`; without singles the
    chain of one link is the single-kernel model. A pair's excess is per kernel: what
    its two single models cost beyond the link's in-model time, halved.
    """
    times = [float(np.median(col)) for col in zip(*point["rounds_ms"])]
    k = int(point.get("singles", 0))
    chain = times[k:]
    slope = float(np.polyfit(LENGTHS, chain, 1)[0])
    alone = sum(times[:k]) if k else chain[0]
    n = max(k, 1)
    excess = (alone - n * overhead - point["reorders_ms"] - point["boundary_ms"] - slope) / n
    out = dict(point, chain_ms=chain, slope_ms=slope, excess_ms=float(excess))
    if k:
        out["singles_ms"] = times[:k]
    return out


def _families_of(kernel_type: str) -> tuple[str, ...]:
    from nnmeter.predictors.kernel_data import family_of

    return ("split", "concat") if kernel_type == PAIR_LINK else (family_of(kernel_type),)


def fit_family_line(points: list[dict[str, Any]]) -> dict[str, float] | None:
    """A robust line ``excess = a + b * elements`` (Theil-Sen: the median of the pairwise
    slopes, clamped at 0, and the median intercept) through a family's points; None
    with fewer than 4 points. ``max_elements`` is the largest calibrated size: the line
    is not extended beyond it (:func:`chain_excess_ms`).

    Examples
    --------
    >>> pts = [{"elements": n, "excess_ms": 0.001 + 2e-8 * n} for n in (1e4, 2e4, 4e4, 8e4)]
    >>> pts.append({"elements": 3e4, "excess_ms": 0.05})  # one disturbed point
    >>> line = fit_family_line(pts)
    >>> round(line["a_ms"], 6), round(line["ms_per_melem"], 4)
    (0.001, 0.02)
    """
    if len(points) < 4:
        return None
    x = np.array([float(p["elements"]) for p in points])
    y = np.array([float(p["excess_ms"]) for p in points])
    i, j = np.triu_indices(len(x), 1)
    ok = x[i] != x[j]
    b = max(float(np.median((y[j] - y[i])[ok] / (x[j] - x[i])[ok])), 0.0) if ok.any() else 0.0
    return {"a_ms": float(np.median(y - b * x)), "ms_per_melem": b * 1e6,
            "max_elements": float(x.max())}


def _record(points: list[dict[str, Any]], overhead: float) -> dict[str, Any]:
    """The calibration record of summarised points (see :func:`measure_chain`)."""
    default, size = fit_size_excess(points)
    by_family: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        if p["kernel_type"] not in COMPUTE_TYPES:
            for fam in _families_of(p["kernel_type"]):
                by_family.setdefault(fam, []).append(p)
    lines = {f: fit_family_line(v) for f, v in sorted(by_family.items())}
    return {"excess_ms": default, "size": size,
            "families": {f: statistics.median(p["excess_ms"] for p in v)
                         for f, v in sorted(by_family.items())},
            "family_lines": {f: v for f, v in lines.items() if v is not None},
            "overhead_ms": overhead, "lengths": list(LENGTHS), "points": points}


def merge_chain(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from several calibrations of the same dataset: every config keeps its
    median time per model over all their rounds, and the fits are redone.

    Raises
    ------
    ValueError
        If the records are of different fingerprints or overheads, or one has no rounds.
    """
    if not records:
        raise ValueError("nothing to merge")
    first = records[0]
    for r in records[1:]:
        if (r.get("fingerprint_id"), r.get("overhead_ms")) != (first.get("fingerprint_id"),
                                                              first.get("overhead_ms")):
            raise ValueError("chain records of different fingerprints or overheads "
                             "cannot be merged")
    merged: dict[str, dict[str, Any]] = {}
    for r in records:
        for p in r["points"]:
            if "rounds_ms" not in p:
                raise ValueError("a record without rounds_ms (measured before rounds were "
                                 "kept) cannot be merged")
            key = json.dumps([p["kernel_type"], p["config"]], sort_keys=True)
            if key in merged:
                merged[key]["rounds_ms"] = merged[key]["rounds_ms"] + p["rounds_ms"]
            else:
                merged[key] = dict(p)
    overhead = float(first["overhead_ms"])
    points = [_summarise(p, overhead) for p in merged.values()]
    rec = _record(points, overhead)
    rec.update({k: first[k] for k in ("backend_id", "fingerprint_id") if k in first})
    rec.update({"created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "rounds": sum(int(r.get("rounds", 1)) for r in records),
                "merged": [r.get("created") for r in records],
                "seconds": sum(float(r.get("seconds", 0.0)) for r in records)})
    return rec


def write_chain(dataset_dir: Any, record: dict[str, Any]) -> Any:
    """Write ``record`` to ``<dataset_dir>/chain_excess.json`` atomically; returns the
    path. A complete record (not ``partial``) replaces the calibration's points file,
    which is removed."""
    from nnmeter.predictors.calibration_points import write_record

    return write_record(dataset_dir, CHAIN_FILE, record)


def read_chain(dataset: Any) -> dict[str, Any] | None:
    """The dataset's chain calibration record, or None when it has none.

    Raises
    ------
    DatasetError
        If the file is not valid JSON.
    FingerprintMismatchError
        If it was measured on another device fingerprint than the dataset.
    """
    from nnmeter.predictors.dataset import read_calibration

    return read_calibration(dataset, CHAIN_FILE, remedy=(
        "run experiments/chain_calibration.py under the measurement lock"))


#: removing the excess keeps at least this share of a row's time (the chain term's
#: floor, :func:`nnmeter.predictors.composition.remove_floored`)
FLOOR_SHARE = 0.5


def remove_excess(y: Any, excess: Any) -> Any:
    """Row times ``y`` without their ``excess``, never below :data:`FLOOR_SHARE` of ``y``
    (what training does to every row).

    >>> remove_excess(np.array([0.010, 0.002]), 0.0015).tolist()
    [0.0085, 0.001]
    """
    from nnmeter.predictors.composition import remove_floored

    return remove_floored(y, excess, keep_share=FLOOR_SHARE)


def restored_excess(kernel_ms: float, excess: float) -> float:
    """What to add back to a predicted in-model ``kernel_ms`` to get its single-kernel
    time: the inverse of :func:`remove_excess`, so the excess, but no more than the
    share of the row that the floor kept.

    >>> restored_excess(0.0085, 0.0015), restored_excess(0.001, 0.0015)
    (0.0015, 0.001)
    """
    return min(excess, (1.0 / FLOOR_SHARE - 1.0) * kernel_ms)


def chain_excess_ms(record: dict[str, Any] | None, family: str = "",
                    elements: float | None = None) -> float:
    """The per-kernel excess (ms) of a record for kernels of ``family`` whose
    single-kernel model has ``elements`` (inputs plus outputs): the family's fitted line
    when it has one and ``elements`` is given (held flat beyond the largest calibrated
    size), else its median; for a family without
    chains the default plus the size term. 0 without a record (never negative)."""
    if not record:
        return 0.0
    line = (record.get("family_lines") or {}).get(family)
    if line and elements is not None:
        n = min(float(elements), float(line.get("max_elements", elements)))
        return max(0.0, float(line["a_ms"]) + float(line["ms_per_melem"]) * 1e-6 * n)
    families = record.get("families") or {}
    if family in families:
        return max(0.0, float(families[family]))
    value = float(record.get("excess_ms", 0.0))
    size = record.get("size")
    if size and elements is not None:
        value += float(size["ms_per_melem"]) * 1e-6 * max(
            0.0, float(elements) - float(size["knee_elements"]))
    return max(0.0, value)
