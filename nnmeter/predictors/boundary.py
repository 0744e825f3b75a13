"""Kernel boundary cost: the work a single-kernel model does at its own edges.

A single-kernel measurement runs a whole (tiny) model: the runtime converts the plain
fp32 NCHW input into its internal layout and precision, runs the kernel, and converts
the result back. OpenVINO's CPU plugin, for example, adds an input ``Reorder`` (fp32
``abcd`` → bf16 blocked) and an output ``Reorder`` around every single-kernel model;
MNN adds ``Raster`` layout nodes. Inside a whole model, consecutive kernels hand each
other tensors already in the internal layout, so these conversions happen only at the
model's edges. Summing single-kernel times therefore counts them once per kernel.

This module measures that boundary cost on the device and removes it from the kernel
data before training:

- :func:`measure_boundary` profiles a spread of single-kernel models from a dataset
  (the runtime's executed layout conversions that cover no original node are the
  boundary) and fits
  ``boundary_ms = fixed + a * input_elements + b * output_elements``, per kernel family
  where the family's points disagree with the shared fit;
- :func:`write_boundary` / :func:`read_boundary` store it as ``<dataset>/boundary.json``
  with the raw points, the fit and the device fingerprint;
- :func:`remove_boundary` subtracts the fitted cost from every row's net time in place.

Examples
--------
>>> fit = fit_boundary([
...     BoundaryPoint("relu", "activation", 1000, 1000, 0.012),
...     BoundaryPoint("relu", "activation", 4000, 4000, 0.042),
...     BoundaryPoint("relu", "activation", 9000, 9000, 0.092),
... ], min_family_points=99)
>>> round(boundary_cost_ms(fit, "activation", 2000, 2000), 4)
0.022
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError
from nnmeter.predictors.dataset import ROW_CONTEXT_FILE, ROW_EDGES_FILE

__all__ = ["BOUNDARY_FILE", "ROW_EDGES_FILE", "MIN_KERNEL_SHARE", "row_key", "read_row_edges",
           "row_edge_shares", "measure_row_edges", "planned_row_edges", "ROW_CONTEXT_FILE",
           "CONTEXT_FAMILIES", "MAX_CONTEXT_SHARE", "context_graph", "read_row_context",
           "measure_row_context", "planned_row_context", "measure_row_profiles", "FLOOR_SHARE", "LAYOUT_OPS", "BoundaryPoint", "boundary_elements",
           "fit_boundary", "boundary_cost_ms", "measure_boundary", "planned_boundary_work",
           "write_boundary", "read_boundary", "remove_boundary", "select_calibration_rows"]

#: per-dataset file holding the boundary calibration
BOUNDARY_FILE = "boundary.json"

#: a row's net time never drops below this share of itself when the boundary is removed
FLOOR_SHARE = 0.25

#: executed-node types that only convert layout or precision (OpenVINO ``Reorder`` and
#: ``Convert``, MNN ``Raster``); other uncovered nodes are the kernel itself whose
#: origin the runtime did not report (OpenVINO's ``ShuffleChannels``)
LAYOUT_OPS = frozenset({"Reorder", "Convert", "Raster"})


#: a row's kernel share of its profiled single-kernel model is taken no lower than this
MIN_KERNEL_SHARE = 0.05

#: kernel families that run in whatever layout the kernel before them produced: alone
#: (fed the plain model input) OpenVINO runs them in the plain layout, inside a model
#: in the blocked one its convolutions chose (:func:`measure_row_context`)
CONTEXT_FAMILIES = frozenset({"pool", "gap", "bn", "mul", "add", "concat", "split",
                              "channelshuffle", "activation", "lrn"})

#: a row's in-context kernel time is taken as at most this multiple of its
#: single-kernel model's profiled time
MAX_CONTEXT_SHARE = 2.0

#: a family gets its own coefficients only when they cut its RMS error by this share
_FAMILY_GAIN = 0.25

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoundaryPoint:
    """One profiled single-kernel model.

    ``boundary_ms`` sums the executed layout or precision conversions that cover no
    original node (:data:`LAYOUT_OPS`; one time per entry of ``boundary_nodes`` in
    ``boundary_node_ms``); ``kernel_ms`` sums the rest. Elements are summed over the
    model's inputs and outputs.
    """

    kernel_type: str
    family: str
    input_elements: int
    output_elements: int
    boundary_ms: float
    kernel_ms: float = 0.0
    boundary_nodes: tuple[str, ...] = ()
    boundary_node_ms: tuple[float, ...] = ()
    #: the dataset row's measured latency (whole single-kernel model), for comparison
    measured_ms: float | None = None


def boundary_elements(kernel_type: Any, config: Any) -> tuple[int, int]:
    """(input, output) elements of ``config``'s single-kernel model, each summed over
    the model's inputs (outputs)."""
    graph = kernel_type.build_graph(config, validate=False)
    n_in = sum(math.prod(graph.node(n).output_shape) for n in graph.input_names)
    n_out = sum(math.prod(graph.shape_of(r)) for r in graph.outputs)
    return int(n_in), int(n_out)


def _lstsq_nonneg(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    # scale the columns so the per-element slopes and the fixed term are comparable
    scale = np.maximum(np.abs(A).max(axis=0), 1e-30)
    coef, _ = nnls(A / scale, y)
    return coef / scale


def _design(points: list[BoundaryPoint]) -> tuple[np.ndarray, np.ndarray]:
    A = np.array([[1.0, p.input_elements, p.output_elements] for p in points], dtype=float)
    y = np.array([p.boundary_ms for p in points], dtype=float)
    return A, y


def _rms(A: np.ndarray, y: np.ndarray, coef: np.ndarray) -> float:
    return float(np.sqrt(np.mean((A @ coef - y) ** 2)))


def fit_boundary(points: list[BoundaryPoint], *, min_family_points: int = 3) -> dict[str, Any]:
    """Non-negative least-squares fit of ``boundary_ms`` on (1, input, output elements).

    Returns ``{"shared": [fixed_ms, ms_per_input_element, ms_per_output_element],
    "families": {family: [...]}, "rms_ms": {...}}``. A family with at least
    ``min_family_points`` points gets its own coefficients when they cut its RMS error
    by a quarter or more against the shared fit.

    Raises
    ------
    ValueError
        If ``points`` is empty.
    """
    if not points:
        raise ValueError("fit_boundary needs at least one profiled point; got none")
    A, y = _design(points)
    shared = _lstsq_nonneg(A, y)
    families: dict[str, list[float]] = {}
    rms: dict[str, float] = {"shared": _rms(A, y, shared)}
    by_family: dict[str, list[BoundaryPoint]] = {}
    for p in points:
        by_family.setdefault(p.family, []).append(p)
    for fam, pts in sorted(by_family.items()):
        Af, yf = _design(pts)
        base = _rms(Af, yf, shared)
        rms[f"{fam}:shared"] = base
        if len(pts) < min_family_points:
            continue
        own = _lstsq_nonneg(Af, yf)
        err = _rms(Af, yf, own)
        rms[f"{fam}:own"] = err
        if err <= (1.0 - _FAMILY_GAIN) * base:
            families[fam] = [float(c) for c in own]
    return {"shared": [float(c) for c in shared], "families": families, "rms_ms": rms}


def boundary_cost_ms(fit: dict[str, Any], family: str, input_elements: int,
                     output_elements: int) -> float:
    """Fitted boundary cost (ms) of a single-kernel model of ``family``."""
    fixed, a_in, a_out = fit.get("families", {}).get(family) or fit["shared"]
    return float(fixed + a_in * input_elements + a_out * output_elements)


def select_calibration_rows(dataset: Any, *, per_family: int = 10,
                            seed: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """(kernel type, row) pairs to profile: per family, ``per_family`` rows spread
    evenly over the range of input + output elements, cycling over the family's types
    (deterministic for the data)."""
    from nnmeter.kernels import KERNEL_TYPES

    by_family: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for t in dataset.kernel_types():
        if t not in KERNEL_TYPES:
            continue
        kt = KERNEL_TYPES.get(t)
        for row in dataset.rows(t):
            lat = row.get("latency_ms")
            if lat is None or not math.isfinite(lat) or lat <= 0:
                continue
            n_in, n_out = boundary_elements(kt, kt.config_from_dict(row["config"]))
            by_family.setdefault(kt.family or t, []).append((n_in + n_out, t, row))
    rng = np.random.default_rng(seed)
    out: list[tuple[str, dict[str, Any]]] = []
    for fam, rows in sorted(by_family.items()):
        rows.sort(key=lambda r: (r[0], r[1]))
        k = min(per_family, len(rows))
        # quantiles of size, with a small random jitter inside each slice so that
        # repeated sizes do not always pick the same type
        edges = np.linspace(0, len(rows), k + 1).astype(int)
        for lo, hi in zip(edges[:-1], edges[1:]):
            if hi > lo:
                _, t, row = rows[int(rng.integers(lo, hi))]
                out.append((t, row))
    return out


def row_key(kernel_type: str, config: dict[str, Any]) -> str:
    """The key of a row (its kernel type and config as stored) in the points files."""
    return json.dumps([kernel_type, config], sort_keys=True)


def _row_key(kernel_type: str, row: dict[str, Any]) -> str:
    return row_key(kernel_type, row["config"])


def _stored_point(point: Any) -> BoundaryPoint | None:
    """A profiled point read back from the points file, or None when the line does not
    hold one."""
    if not isinstance(point, dict):
        return None
    try:
        return BoundaryPoint(**{**point, "boundary_nodes": tuple(point["boundary_nodes"]),
                                "boundary_node_ms": tuple(point["boundary_node_ms"])})
    except (KeyError, TypeError):
        return None


def _profile_row(prof: Any, kernel_type: str, row: dict[str, Any], runs: int) -> BoundaryPoint:
    """Profile one row's single-kernel model through ``prof`` (a Profiler): its
    executed layout conversions that cover no original node (the boundary) and the
    rest (the kernel)."""
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get(kernel_type)
    cfg = kt.config_from_dict(row["config"])
    nodes = prof.profile(kt.build_graph(cfg), runs=runs)
    timed = [n for n in nodes if n.time_ms is not None]
    edge = [n for n in timed if not n.covers and n.op_type in LAYOUT_OPS]
    work = [n for n in timed if n not in edge]
    n_in, n_out = boundary_elements(kt, cfg)
    return BoundaryPoint(
        kernel_type=kernel_type, family=kt.family or kernel_type, input_elements=n_in,
        output_elements=n_out, boundary_ms=float(sum(n.time_ms for n in edge)),
        kernel_ms=float(sum(n.time_ms for n in work)),
        boundary_nodes=tuple(n.op_type for n in edge),
        boundary_node_ms=tuple(float(n.time_ms) for n in edge),
        measured_ms=float(row["latency_ms"]))


def _points_log(dataset: Any, name: str) -> Any:
    """The dataset's per-row points file ``name`` (its device's points only)."""
    from nnmeter.predictors.calibration_points import CalibrationPoints

    return CalibrationPoints.at(Path(dataset.directory) / name, dataset.fingerprint_id,
                                getattr(dataset, "fingerprint_ids", None))


def _row_edges_log(dataset: Any) -> Any:
    return _points_log(dataset, ROW_EDGES_FILE)


def read_row_edges(dataset: Any) -> dict[str, BoundaryPoint]:
    """Row key (``json.dumps([kernel type, config])``) → the row's own profiled edges
    (:func:`measure_row_edges`), for the rows that have one; {} without the file."""
    out = {}
    for key, point in _row_edges_log(dataset).load().items():
        p = _stored_point(point)
        if p is not None:
            out[key] = p
    return out


def row_edge_shares(points: dict[str, BoundaryPoint], kernel_type: str,
                    configs: list[dict[str, Any]],
                    context: dict[str, float] | None = None) -> np.ndarray:
    """Per row, the kernel's share of its single-kernel model's profiled time,
    ``kernel_ms / (kernel_ms + boundary_ms)`` (never below :data:`MIN_KERNEL_SHARE`),
    from the row's own profile; NaN for a row without one, or whose profile timed
    nothing. A row with an in-context time (``context``, :func:`read_row_context`)
    takes that in place of ``kernel_ms`` (at most :data:`MAX_CONTEXT_SHARE`).

    >>> p = BoundaryPoint("conv", "conv", 10, 10, boundary_ms=3.0, kernel_ms=1.0)
    >>> row_edge_shares({row_key("conv", {"h": 1}): p}, "conv", [{"h": 1}, {"h": 2}]).tolist()
    [0.25, nan]
    >>> q = BoundaryPoint("maxpool", "pool", 10, 10, boundary_ms=0.0, kernel_ms=0.02)
    >>> k = row_key("maxpool", {"h": 1})
    >>> row_edge_shares({k: q}, "maxpool", [{"h": 1}], context={k: 0.005}).tolist()
    [0.25]
    """
    out = np.full(len(configs), np.nan)
    context = context or {}
    for i, cfg in enumerate(configs):
        key = row_key(kernel_type, cfg)
        p = points.get(key)
        if p is not None and p.kernel_ms + p.boundary_ms > 0:
            ctx = context.get(key)
            share = (ctx if ctx is not None else p.kernel_ms) / (p.kernel_ms + p.boundary_ms)
            out[i] = min(max(share, MIN_KERNEL_SHARE), MAX_CONTEXT_SHARE)
    return out


def planned_row_edges(backend_id: str, dataset_dir: str | os.PathLike) -> int:
    """Rows of the dataset in ``dataset_dir`` whose edges :func:`measure_row_edges` has
    not profiled yet."""
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    return len(_rows_without_edges(ds, read_row_edges(ds)))


def _rows_without_edges(ds: Any, done: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    from nnmeter.kernels import KERNEL_TYPES

    out = []
    for t in ds.kernel_types():
        if t not in KERNEL_TYPES:
            continue
        for row in ds.rows(t):
            lat = row.get("latency_ms")
            if not isinstance(lat, (int, float)) or not math.isfinite(lat) or lat <= 0:
                continue
            if _row_key(t, row) not in done:
                out.append((t, row))
    # one config measured twice is profiled once; the slowest rows first (their edges
    # weigh most, and a deadline then leaves the cheapest rows to the fit)
    unique = {_row_key(t, r): (t, r) for t, r in out}.values()
    return sorted(unique, key=lambda tr: -tr[1]["latency_ms"])


def measure_row_edges(backend_id: str, dataset_dir: str | os.PathLike, *, runs: int = 10,
                      core: int | str | None = "auto", deadline: float | None = None,
                      progress: bool = False) -> dict[str, int]:
    """Profile the single-kernel model of every row of the dataset that has no profile
    yet, appending each to ``<dataset_dir>/row_edges.jsonl`` as it goes (a stopped call
    loses nothing; the next one continues).

    The boundary fit (:func:`measure_boundary`) describes a family's edges by their
    sizes; some configurations pay far more (OpenVINO converting a 256-channel 128x128
    tensor into and out of its blocked layout takes 10 ms around a 1.5 ms depthwise
    convolution). Training takes each profiled row's own share
    (:func:`row_edge_shares`) instead of the fit.

    Returns ``{"profiled", "failed", "remaining"}`` (``remaining``: rows left when
    ``deadline``, a ``time.monotonic()`` time, passed).

    Raises
    ------
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    """
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    log = _row_edges_log(ds)
    return _profile_rows(
        backend_id, ds, log, _rows_without_edges(ds, log.load()),
        lambda prof, t, row: asdict(_profile_row(prof, t, row, runs)), core=core,
        deadline=deadline, progress=progress,
        desc=f"profile the edges of every row ({backend_id})")


def _profile_rows(backend_id: str, ds: Any, log: Any, todo: list[tuple[str, dict[str, Any]]],
                  profile_one: Any, *, core: int | str | None, deadline: float | None,
                  progress: bool, desc: str) -> dict[str, int]:
    """Profile each ``(kernel type, row)`` of ``todo`` with ``profile_one(profiler, type,
    row) -> point`` and append the point to ``log`` under the row's key at once, until
    ``deadline``; a row the runtime rejects is counted and skipped. Starts no runtime
    worker when ``todo`` is empty. Returns ``{"profiled", "failed", "remaining"}``."""
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.predictors.calibration_points import refuse_other_device

    if not todo:
        return {"profiled": 0, "failed": 0, "remaining": 0}
    profiled = failed = 0
    bar = tqdm(total=len(todo), unit="model", disable=not progress, desc=desc)
    try:
        with Profiler(backend_id, core=core) as prof:
            refuse_other_device(ds, prof.backend.device_info().fingerprint_id)
            for t, row in todo:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                try:
                    point = profile_one(prof, t, row)
                except Exception as err:  # one kernel the runtime rejects must not stop the rest
                    logger.warning("could not profile %s %s: %s", t, row["config"], err)
                    failed += 1
                    continue
                finally:
                    bar.update(1)
                log.append(_row_key(t, row), point)
                profiled += 1
    finally:
        bar.close()
    return {"profiled": profiled, "failed": failed,
            "remaining": len(todo) - profiled - failed}


def context_graph(graph: Any) -> Any:
    """A single-kernel model with its kernel between 1x1 convolutions: every 4-D input
    goes through one (which is also a model output, so that the runtime cannot fuse the
    kernel into it as a post-op) and every 4-D output into one. The kernel's nodes keep
    their names, so the runtime's profile names them (:func:`_profile_row_in_context`).

    Examples
    --------
    >>> from nnmeter.ir import GraphBuilder
    >>> b = GraphBuilder("pool", (1, 16, 8, 8))
    >>> g = context_graph(b.build([b.maxpool(b.x, 2, 2, name="pool")]))
    >>> [n.op for n in g.nodes()], [r.node for r in g.outputs]
    (['input', 'conv', 'maxpool', 'conv'], ['pool.anchor', 'input.anchor'])
    """
    from nnmeter.ir.builder import GraphBuilder
    from nnmeter.ir.graph import Ref

    b = GraphBuilder(f"{graph.name}-in-context", None)
    mapped: dict[str, Ref] = {}
    anchors: list[Ref] = []
    for name in graph.input_names:
        shape = graph.shape_of(name)
        ref = b.input(name, shape)
        if len(shape) == 4:
            ref = b.conv(ref, shape[1], 1, name=f"{name}.anchor")
            anchors.append(ref)
        mapped[name] = ref
    for node in graph.topological_nodes():
        if node.op == "input":
            continue
        ins = [mapped.get(r.node, r) for r in node.inputs]
        b.add(node.op, ins, node.attrs, name=node.name, ports=max(len(node.output_shapes), 1))
    outs = []
    for i, ref in enumerate(graph.outputs):
        shape = graph.shape_of(ref)
        outs.append(b.conv(ref, shape[1], 1, name=f"{ref.node}.anchor" if i == 0 else
                           f"{ref.node}.anchor{i}") if len(shape) == 4 else ref)
    return b.build(outs + anchors)


def _profile_row_in_context(prof: Any, kernel_type: str, row: dict[str, Any],
                            runs: int) -> dict[str, Any]:
    """Profile one row's kernel between 1x1 convolutions (:func:`context_graph`):
    ``{"context_ms"}``, the time of the executed nodes that cover the kernel's own nodes;
    None (with ``"why"``) when the kernel has no 4-D input or the runtime fused it with a
    convolution around it."""
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get(kernel_type)
    graph = kt.build_graph(kt.config_from_dict(row["config"]))
    if not any(len(graph.shape_of(n)) == 4 for n in graph.input_names):
        return {"context_ms": None, "why": "no 4-D input"}
    own = {n.name for n in graph.nodes() if n.op != "input"}
    nodes = prof.profile(context_graph(graph), runs=runs)
    mine = [n for n in nodes if n.time_ms is not None and own & set(n.covers)]
    if not mine:
        return {"context_ms": None, "why": "the profile names none of the kernel's nodes"}
    if any(set(n.covers) - own for n in mine):
        return {"context_ms": None, "why": "fused with a convolution around it"}
    return {"context_ms": float(sum(n.time_ms for n in mine))}


def _row_context_log(dataset: Any) -> Any:
    return _points_log(dataset, ROW_CONTEXT_FILE)


def read_row_context(dataset: Any) -> dict[str, float]:
    """Row key → the row's kernel time profiled inside a context
    (:func:`measure_row_context`), for the rows that have one; {} without the file."""
    out = {}
    for key, point in _row_context_log(dataset).load().items():
        ms = point.get("context_ms") if isinstance(point, dict) else None
        if isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0:
            out[key] = float(ms)
    return out


def _rows_without_context(ds: Any, edges: dict[str, BoundaryPoint],
                          done: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Rows of :data:`CONTEXT_FAMILIES` whose own profile (``edges``) ran without any
    edge conversion, i.e. in the plain layout, and that have no context point yet."""
    from nnmeter.kernels import KERNEL_TYPES

    out = {}
    for t in ds.kernel_types():
        kt = KERNEL_TYPES.get(t) if t in KERNEL_TYPES else None
        if kt is None or (kt.family or t) not in CONTEXT_FAMILIES:
            continue
        for row in ds.rows(t):
            key = _row_key(t, row)
            p = edges.get(key)
            if p is None or p.boundary_nodes or p.kernel_ms <= 0 or key in done:
                continue
            out[key] = (t, row)
    return sorted(out.values(), key=lambda tr: -tr[1]["latency_ms"])


def planned_row_context(backend_id: str, dataset_dir: str | os.PathLike) -> int:
    """Rows :func:`measure_row_context` has still to profile."""
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    return len(_rows_without_context(ds, read_row_edges(ds), _row_context_log(ds).load()))


def measure_row_context(backend_id: str, dataset_dir: str | os.PathLike, *, runs: int = 10,
                        core: int | str | None = "auto", deadline: float | None = None,
                        progress: bool = False) -> dict[str, int]:
    """Profile, inside a context, the kernel of every row that ran in the plain layout
    alone, appending each to ``<dataset_dir>/row_context.jsonl`` as it goes (resumable,
    like :func:`measure_row_edges`, whose profiles it needs first).

    A pooling, activation or concatenation kernel takes its input in the layout of the
    kernel before it. Alone, fed the model's plain NCHW input, OpenVINO runs it in the
    plain layout, with no conversion at its edges; inside a model, after a convolution,
    in the blocked one, where it can be several times faster (a 3x3 average pooling of
    16x32x32 on the Zen 4: 0.023 ms alone, 0.006 ms after a 1x1 convolution, per the
    runtime's profile). Training takes such a row's kernel at its in-context share of
    its profile (:func:`row_edge_shares`).

    Returns ``{"profiled", "failed", "remaining"}``.

    Raises
    ------
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    """
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    log = _row_context_log(ds)
    return _profile_rows(
        backend_id, ds, log, _rows_without_context(ds, read_row_edges(ds), log.load()),
        lambda prof, t, row: _profile_row_in_context(prof, t, row, runs), core=core,
        deadline=deadline, progress=progress,
        desc=f"profile rows in context ({backend_id})")


def measure_row_profiles(backend_id: str, dataset_dir: str | os.PathLike, *, runs: int = 10,
                         core: int | str | None = "auto", deadline: float | None = None,
                         progress: bool = False) -> dict[str, dict[str, int]]:
    """Every row's own edges (:func:`measure_row_edges`), then, once all rows have them
    and the dataset's runtime facts say ``row_context``, the in-context times
    (:func:`measure_row_context`, which reads those profiles). Returns
    ``{"row_edges": counts}`` plus ``"row_context": counts`` when that step ran."""
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.facts import device_facts

    out = {"row_edges": measure_row_edges(backend_id, dataset_dir, runs=runs, core=core,
                                          deadline=deadline, progress=progress)}
    meta = KernelDataset(Path(dataset_dir), backend_id).meta() or {}
    if device_facts(meta.get("device")).row_context and not out["row_edges"]["remaining"]:
        out["row_context"] = measure_row_context(backend_id, dataset_dir, runs=runs, core=core,
                                                 deadline=deadline, progress=progress)
    return out


def planned_boundary_work(backend_id: str, dataset_dir: str | os.PathLike, *,
                          per_family: int = 10, seed: int = 0) -> int:
    """Models :func:`measure_boundary` still has to profile on the dataset in
    ``dataset_dir``: its calibration rows without a point in the points file (reads
    the dataset's rows, profiles nothing)."""
    from nnmeter.predictors.calibration_points import CalibrationPoints
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    done = CalibrationPoints.of(ds, BOUNDARY_FILE).load()
    return sum(1 for t, row in select_calibration_rows(ds, per_family=per_family, seed=seed)
               if _stored_point(done.get(_row_key(t, row))) is None)


def measure_boundary(backend_id: str, dataset_dir: str | os.PathLike, *,
                     per_family: int = 10, runs: int = 15, core: int | str | None = "auto",
                     seed: int = 0, deadline: float | None = None,
                     progress: bool = False) -> dict[str, Any]:
    """Profile single-kernel models of the dataset on this device and fit their
    boundary cost (see the module docstring).

    Returns the calibration record that :func:`write_boundary` stores: ``points``,
    ``fit``, ``fingerprint_id``, ``backend_id``, ``runs`` and a timestamp.

    Each profiled model is appended to ``boundary.points.jsonl``
    (:class:`~nnmeter.predictors.chain.CalibrationPoints`); one already there with the
    dataset's fingerprint is not profiled again. From ``deadline`` (a
    ``time.monotonic()`` time) on no model is started once there is a point, and the
    record is marked ``partial`` (:func:`~nnmeter.predictors.chain.mark_partial`); a
    later call continues it. ``progress`` shows a progress bar (tqdm).

    Raises
    ------
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    DatasetError
        If no selected model could be profiled.
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.predictors.calibration_points import CalibrationPoints, mark_partial, \
        refuse_other_device
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    chosen = select_calibration_rows(ds, per_family=per_family, seed=seed)
    log = CalibrationPoints.of(ds, BOUNDARY_FILE)
    done = log.load()
    stored = {}
    for t, row in chosen:
        point = _stored_point(done.get(_row_key(t, row)))
        if point is not None:
            stored[_row_key(t, row)] = point
    missing = 0
    points: list[BoundaryPoint] = []
    bar = tqdm(total=len(chosen), initial=len(stored), unit="model", disable=not progress,
               desc=f"calibrate edge conversions ({backend_id})")
    with Profiler(backend_id, core=core) as prof:
        device = prof.backend.device_info()
        fid = device.fingerprint_id
        refuse_other_device(ds, fid)
        try:
            for t, row in chosen:
                key = _row_key(t, row)
                if key in stored:
                    points.append(stored[key])
                    continue
                if deadline is not None and time.monotonic() >= deadline and (points or stored):
                    missing += 1
                    continue
                try:
                    point = _profile_row(prof, t, row, runs)
                except Exception as err:  # one kernel the runtime rejects must not stop the rest
                    logger.warning("could not profile %s %s: %s", t, row["config"], err)
                    continue
                finally:
                    bar.update(1)
                points.append(point)
                log.append(key, asdict(point))
        finally:
            bar.close()
    if not points:
        cut = (" before its deadline" if missing else "")
        raise DatasetError(f"no single-kernel model of {ds.directory} could be profiled "
                           f"on {backend_id}{cut}")
    rec = {"backend_id": backend_id, "fingerprint_id": fid, "runs": runs,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "fit": fit_boundary(points),
           "points": [asdict(p) for p in points]}
    if missing:
        mark_partial(rec, planned=len(chosen), measured=len(points))
    return rec


def write_boundary(dataset_dir: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``record`` (from :func:`measure_boundary`) to ``<dataset_dir>/boundary.json``,
    atomically; a complete record (not ``partial``) removes the calibration's points
    file."""
    from nnmeter.predictors.calibration_points import write_record

    return write_record(dataset_dir, BOUNDARY_FILE, record)


def read_boundary(dataset: Any) -> dict[str, Any] | None:
    """The dataset's boundary calibration, or None when it has none.

    Raises
    ------
    FingerprintMismatchError
        If the calibration was measured on another fingerprint than the dataset.
    DatasetError
        If the file is not valid JSON or has no fit.
    """
    from nnmeter.predictors.dataset import read_calibration

    record = read_calibration(dataset, BOUNDARY_FILE, remedy="re-run the calibration "
                              "(experiments/boundary_calibration.py)")
    if record is not None and "shared" not in record.get("fit", {}):
        raise DatasetError(f"{Path(dataset.directory) / BOUNDARY_FILE} has no 'fit.shared' "
                           f"coefficients; re-run the calibration")
    return record


def remove_boundary(dataset: Any, data: dict[str, Any], *,
                    floor_share: float = FLOOR_SHARE) -> dict[str, Any] | None:
    """Subtract the fitted boundary cost from every row's ``y`` (ms), in place.

    ``data`` maps kernel type → :class:`~nnmeter.predictors.train.KernelData`. A row never
    drops below ``floor_share`` of its time. Returns the fit (for the predictor's meta),
    or None (nothing is changed) when the dataset has no ``boundary.json`` or its record
    says ``"apply": false`` (a calibration kept for the record because removing it made
    whole-model predictions worse).

    Raises
    ------
    FingerprintMismatchError
        If ``boundary.json`` was calibrated on another fingerprint than the dataset.
    """
    from nnmeter.kernels import KERNEL_TYPES

    record = read_boundary(dataset)
    if record is None or record.get("apply", True) is False:
        return None
    fit = record["fit"]
    for t, d in data.items():
        family = KERNEL_TYPES.get(t).family or t
        sub = np.array([boundary_cost_ms(fit, family, n_in, n_out)
                        for n_in, n_out in d.io_elements()])
        d.y = np.maximum(d.y - sub, floor_share * d.y)
    return fit
