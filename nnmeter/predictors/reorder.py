"""The cost of one layout reorder, profiled on the device.

:mod:`nnmeter.predictors.layout` says *which* reorders a single-kernel model and a whole
model execute. This module says what one costs. The first estimate was a straight line
fitted to ``relu`` kernels (one read and one write per element); ORT's profiler shows
that a reorder is not a relu:

=========================  ==========  ==================
dwconv input (H×W×C)        elements    ns per element
=========================  ==========  ==================
7×7×512 … 56×56×64          25 K–200 K  0.10–0.20
64×64×144                   590 K       0.17–0.21
128×128×144, 160×160×96     2.4 M       0.40–0.44
=========================  ==========  ==================

Past a few MB a reorder's scattered writes leave the caches and it costs four times the
relu line, so the single-kernel times of large convolutions kept about 1.4 ms of
reorders that the model does not execute (a 7x7 depthwise convolution over
128×128×144: 3.73 ms alone less the line's reorders, 2.35 ms for its ``nchwc.Conv``
node).

On other devices the relu line can overstate a reorder. On a 2-vCPU Intel Xeon (family
6 model 167, AVX-512 and AMX) the line put a reorder at 1.5-2x what ORT's profiler
reported for it (10^4-10^8 elements; on the Zen 4 the line is 0.5-0.6x), so training
took up to three quarters off every depthwise convolution's single-kernel time (the
floor) and the in-model term put it back per megabyte, unevenly across families. A
reorder therefore never costs more than its profiled node (:func:`reorder_cost_ms`):
on the Zen 4 nothing changes; the Xeon's full build went from 53.8 to 60.4 % of its
seed-1000 zoo set within ±10 % (seed 2000, not used for the choice: 49.0 → 53.8 %), the
Zen 5's from 50.0 to 67.7 % (38.5 → 62.5 %).

So the reorders are measured where they happen:

- :func:`measure_reorders` profiles single-kernel models of the dataset (convolutions
  and poolings, spread over their sizes) and keeps every ``ReorderInput`` /
  ``ReorderOutput`` node with the elements it moved;
- :func:`fit_reorder_curve` takes the median time in log-spaced bins of elements and
  makes it non-decreasing;
- :func:`write_reorders` / :func:`read_reorders` store it as ``<dataset>/reorders.json``
  with the raw points and the device fingerprint.

Training and prediction use the curve for one thing: how much a reorder's cost per
element rises once its tensor leaves the caches. :func:`reorder_ms` with the relu line
keeps the line up to :data:`IN_CACHE_ELEMENTS` and scales it past that by the curve's
per-element cost relative to its in-cache level. The profiled milliseconds themselves
were tried in place of the line and made whole-model predictions much worse (ort-cpu
test variants within ±10 %: 83.8 → 64.2 %): at small sizes a profiled node carries the
profiler's own cost (a 480-element reorder reads 2 µs, four times the line), and the
profiled times do not add up to the protocol's timings of the same models.

Examples
--------
>>> curve = fit_reorder_curve([(1_000, 0.001), (10_000, 0.002), (100_000, 0.011),
...                            (1_000_000, 0.4)], bins=4)
>>> round(reorder_ms(curve, 10_000), 4)
0.002
>>> round(reorder_ms(curve, 2_000_000), 3)   # past the last bin: linear in elements
0.8
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError

__all__ = ["REORDER_FILE", "REORDER_OPS", "fit_reorder_curve", "reorder_ms",
           "reorder_cost_ms", "single_kernel_reorders_ms",
           "measure_reorders", "planned_reorder_work", "write_reorders", "read_reorders"]

#: per-dataset file holding the profiled reorder cost
REORDER_FILE = "reorders.json"

#: executed-node types of ORT's layout reorders → which side of the kernel they move
REORDER_OPS = {"com.microsoft.nchwc.ReorderInput": "in",
               "com.microsoft.nchwc.ReorderOutput": "out"}

logger = logging.getLogger(__name__)


#: the curve's per-element cost in this range of elements (the tensor still in the
#: caches) is the reference that :func:`reorder_ms` scales the line by
IN_CACHE_ELEMENTS = (50_000, 1_000_000)


def fit_reorder_curve(points: list[tuple[int, float]], *, bins: int = 16) -> dict[str, Any]:
    """Knots (log elements, log ms) of the reorder cost: median of each log-spaced bin
    of elements, made non-decreasing; and ``in_cache_ms_per_element``, the median
    per-element cost of the knots inside :data:`IN_CACHE_ELEMENTS` (of all knots when
    none is), which :func:`reorder_ms` scales the relu line against.

    Raises
    ------
    DatasetError
        If no point has positive elements and time.
    """
    pts = np.array([(n, t) for n, t in points if n > 0 and t > 0], dtype=np.float64)
    if not len(pts):
        raise DatasetError("no reorder was profiled; nothing to fit")
    x, y = np.log(pts[:, 0]), np.log(pts[:, 1])
    edges = np.linspace(x.min(), x.max() + 1e-9, bins + 1)
    kx, ky = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (x >= lo) & (x < hi)
        if m.any():
            kx.append(float(np.median(x[m])))
            ky.append(float(np.median(y[m])))
    ky = list(np.maximum.accumulate(ky))
    curve: dict[str, Any] = {"log_elements": kx, "log_ms": ky, "points": len(pts)}
    lo, hi = (math.log(v) for v in IN_CACHE_ELEMENTS)
    xs = [a for a in kx if lo <= a <= hi] or kx
    curve["in_cache_ms_per_element"] = float(np.median(
        [_curve_ms(curve, math.exp(a)) / math.exp(a) for a in xs]))
    return curve


def _curve_ms(curve: dict[str, Any], elements: float) -> float:
    """Time (ms) of one reorder of ``elements`` elements on the curve."""
    if elements <= 0:
        return 0.0
    kx, ky = curve["log_elements"], curve["log_ms"]
    x = math.log(elements)
    if x <= kx[0]:
        return math.exp(ky[0]) * (elements / math.exp(kx[0]))
    if x >= kx[-1]:
        return math.exp(ky[-1]) * (elements / math.exp(kx[-1]))
    return float(math.exp(np.interp(x, kx, ky)))


def _dataset_block(dataset: Any) -> int:
    """The blocked layout's channel block on the device that measured ``dataset``."""
    from nnmeter.predictors.facts import device_facts

    return device_facts((dataset.meta() or {}).get("device")).layout_block


def _calibration_rows(dataset: Any, per_type: int) -> list[tuple[str, dict[str, Any]]]:
    """Per blocked kernel type, ``per_type`` rows spread evenly over the elements its
    single-kernel model reorders (deterministic for the data)."""
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.layout import BLOCKED_FAMILIES, reorder_elements

    block = _dataset_block(dataset)
    out = []
    for t in dataset.kernel_types():
        if t not in KERNEL_TYPES or KERNEL_TYPES.get(t).family not in BLOCKED_FAMILIES:
            continue
        kt = KERNEL_TYPES.get(t)
        rows = []
        for row in dataset.rows(t):
            n_in, n_out = reorder_elements(kt, kt.config_from_dict(row["config"]), block)
            if n_out:
                rows.append((n_in + n_out, json.dumps(row["config"], sort_keys=True), row))
        rows.sort(key=lambda r: r[:2])
        if rows:
            picks = np.unique(np.linspace(0, len(rows) - 1, min(per_type, len(rows))).astype(int))
            out.extend((t, rows[i][2]) for i in picks)
    return out


def _row_key(kernel_type: str, row: dict[str, Any]) -> str:
    return json.dumps([kernel_type, row["config"]], sort_keys=True)


def _stored_nodes(point: Any) -> list[list[Any]] | None:
    """The reorder points of one profiled model read back from the points file, or
    None when the line does not hold them."""
    nodes = point.get("nodes") if isinstance(point, dict) else None
    if not isinstance(nodes, list) or not all(
            isinstance(n, list) and len(n) == 4 and n[2] in ("in", "out") for n in nodes):
        return None
    return nodes


def planned_reorder_work(backend_id: str, dataset_dir: str | os.PathLike, *,
                         per_type: int = 12) -> int:
    """Models :func:`measure_reorders` still has to profile on the dataset in
    ``dataset_dir``: its calibration rows without a point in the points file (reads
    the dataset's rows, profiles nothing)."""
    from nnmeter.predictors.calibration_points import CalibrationPoints
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    done = CalibrationPoints.of(ds, REORDER_FILE).load()
    return sum(1 for t, row in _calibration_rows(ds, per_type)
               if _stored_nodes(done.get(_row_key(t, row))) is None)


def measure_reorders(backend_id: str, dataset_dir: str | os.PathLike, *, per_type: int = 12,
                     runs: int = 15, core: int | str | None = "auto", deadline: float | None = None,
                     progress: bool = False) -> dict[str, Any]:
    """Profile single-kernel models of the dataset and fit the reorder curve.

    Returns the record :func:`write_reorders` stores (``points`` as [elements, ms,
    side, kernel type], ``curve``, ``fingerprint_id``, ``backend_id``, ``runs``).

    Each profiled model's reorders are appended to ``reorders.points.jsonl``
    (:class:`~nnmeter.predictors.chain.CalibrationPoints`); a model already there with
    the dataset's fingerprint is not profiled again. From ``deadline`` (a
    ``time.monotonic()`` time) on no model is started once one is done, and the record
    is marked ``partial`` (``points_planned`` and ``points_measured`` count models;
    :func:`~nnmeter.predictors.chain.mark_partial`); a later call continues it.
    ``progress`` shows a progress bar (tqdm).

    Raises
    ------
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    DatasetError
        If no reorder could be profiled.
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.calibration_points import CalibrationPoints, mark_partial, \
        refuse_other_device
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.layout import reorder_elements

    ds = KernelDataset(Path(dataset_dir), backend_id)
    block = _dataset_block(ds)
    points: list[list[Any]] = []
    chosen = _calibration_rows(ds, per_type)
    if not chosen:
        raise DatasetError(f"{ds.directory} holds no blocked kernel (conv, dwconv, pool) "
                           f"to profile reorders from")
    log = CalibrationPoints.of(ds, REORDER_FILE)
    done = log.load()
    stored = {}
    for t, row in chosen:
        nodes = _stored_nodes(done.get(_row_key(t, row)))
        if nodes is not None:
            stored[_row_key(t, row)] = nodes
    profiled = len(stored)
    missing = 0
    bar = tqdm(total=len(chosen), initial=profiled, unit="model", disable=not progress,
               desc=f"calibrate layout reorders ({backend_id})")
    with Profiler(backend_id, core=core) as prof:
        fid = prof.backend.device_info().fingerprint_id
        refuse_other_device(ds, fid)
        try:
            for t, row in chosen:
                key = _row_key(t, row)
                if key in stored:
                    points.extend(stored[key])
                    continue
                if deadline is not None and time.monotonic() >= deadline and profiled:
                    missing += 1
                    continue
                kt = KERNEL_TYPES.get(t)
                cfg = kt.config_from_dict(row["config"])
                n = dict(zip(("in", "out"), reorder_elements(kt, cfg, block)))
                try:
                    nodes = prof.profile(kt.build_graph(cfg), runs=runs)
                except Exception as err:  # one kernel the runtime rejects must not stop the rest
                    logger.warning("could not profile %s %s: %s", t, row["config"], err)
                    continue
                finally:
                    bar.update(1)
                new = []
                for node in nodes:
                    side = REORDER_OPS.get(node.op_type)
                    if side and node.time_ms and n[side]:
                        new.append([n[side], float(node.time_ms), side, t])
                points.extend(new)
                profiled += 1
                log.append(key, {"nodes": new})
        finally:
            bar.close()
    if not points:
        cut = (f" before its deadline cut it after {profiled} of {len(chosen)} models"
               if missing else "")
        raise DatasetError(f"no reorder was profiled from {ds.directory} on {backend_id}"
                           f"{cut}")
    rec = {"backend_id": backend_id, "fingerprint_id": fid, "runs": runs,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "curve": fit_reorder_curve([(p[0], p[1]) for p in points]), "points": points}
    if missing:
        mark_partial(rec, planned=len(chosen), measured=profiled)
    return rec


def write_reorders(dataset_dir: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``record`` (from :func:`measure_reorders`) to ``<dataset_dir>/reorders.json``,
    atomically; a complete record (not ``partial``) removes the calibration's points
    file."""
    from nnmeter.predictors.calibration_points import write_record

    return write_record(dataset_dir, REORDER_FILE, record)


def read_reorders(dataset: Any) -> dict[str, Any] | None:
    """The dataset's reorder curve, or None when it has none.

    Raises
    ------
    FingerprintMismatchError
        If the curve was profiled on another fingerprint than the dataset.
    DatasetError
        If the file is not valid JSON or has no curve.
    """
    from nnmeter.predictors.dataset import read_calibration

    record = read_calibration(dataset, REORDER_FILE,
                              remedy="profile it again (experiments/reorder_calibration.py)")
    if record is None:
        return None
    curve = record.get("curve") or {}
    if not curve.get("log_elements") or len(curve["log_elements"]) != len(curve.get("log_ms", ())) \
            or not curve.get("in_cache_ms_per_element"):
        raise DatasetError(f"{Path(dataset.directory) / REORDER_FILE} has no usable 'curve'; "
                           f"profile it again")
    return curve


def reorder_ms(curve: dict[str, Any], elements: float,
               line: tuple[float, float] | None = None) -> float:
    """Time (ms) of one reorder of ``elements`` elements.

    Without ``line``: the profiled curve. With ``line`` (fixed ms, ms per element; the
    relu line): the line, and past :data:`IN_CACHE_ELEMENTS` the line scaled up by how
    much more the curve's per-element cost is at this size than inside that range
    (never down)."""
    if line is None:
        return _curve_ms(curve, elements)
    if elements <= 0:
        return 0.0
    scale = 1.0
    if elements > IN_CACHE_ELEMENTS[1]:
        ref = curve["in_cache_ms_per_element"]
        scale = max(1.0, _curve_ms(curve, elements) / elements / ref)
    return (line[0] + line[1] * elements) * scale


def reorder_cost_ms(elements: float, line: Sequence[float],
                    curve: dict[str, Any] | None = None) -> float:
    """Time (ms) of one reorder as training and prediction count it: the relu ``line``
    (fixed ms, ms per element), scaled past the caches by the profiled ``curve`` when the
    dataset has one (:func:`reorder_ms`), and never more than the curve itself: a
    profiled reorder node carries the profiler's own cost, so it bounds the reorder from
    above (see the module's notes on other devices)."""
    if curve:
        return min(reorder_ms(curve, elements, line), _curve_ms(curve, elements))
    return line[0] + line[1] * elements


def single_kernel_reorders_ms(kernel_type: Any, config: Any, block: int,
                              line: Sequence[float],
                              curve: dict[str, Any] | None = None) -> float:
    """Time (ms) of the layout reorders a single-kernel model of ``config`` executes:
    into and out of the blocked layout, and a fused residual add's second input, which
    the single-kernel model also reorders (in a model it arrives blocked from the
    convolution that made it). 0 for a kernel that runs unblocked."""
    from nnmeter.predictors.layout import reorder_elements

    n_in, n_out = reorder_elements(kernel_type, config, block)
    extra = n_out if "add" in getattr(kernel_type, "tail", ()) else 0
    return sum(reorder_cost_ms(n, line, curve) for n in (n_in, n_out, extra) if n)
