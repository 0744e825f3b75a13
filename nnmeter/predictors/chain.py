"""The chain excess: what a single-kernel measurement still carries beyond the kernel's
time inside a model, once the per-inference overhead and the layout reorders are off.

``experiments/chain_calibration.py`` measures it on the device: chains of n identical
kernels (n = 1, 2, 4, 8) give the kernel's in-model time as the slope of time over n;
the single-kernel model (n = 1) costs that, plus the overhead and its reorders, plus the
excess. The median over the calibration's convolutions is the default; families with
chains of their own (channel shuffle, pooling, activations) get their own median. Both
are stored in ``<dataset>/chain_excess.json`` and training subtracts a kernel's value
from its row (:func:`nnmeter.predictors.train.train_predictor`). The constant matters
for models of many tiny kernels (a 0.2 ms NASBench-201 cell has about 30).

Large tensors. A single-kernel model moves its input and output through more buffers
than the kernel does inside a model (the caller's input, its reordered copy, the
kernel's output, the caller's output), and once those no longer fit in the cache the
model pays for it: on this machine's ONNX Runtime a 3x3 depthwise conv over
(1, 96, 128, 128) costs 0.80 ms more alone than its 0.31 ms inside a chain, reorders
already removed, while below about 0.4 M elements per tensor the excess is nil. The
calibration therefore also runs large convolutions and fits the excess of the compute
kernels as a hinge in the single-kernel model's elements (inputs plus outputs):
``excess = e0 + k * max(0, elements - knee)`` (:func:`fit_size_excess`, stored under
``size``); training subtracts it per row with the row's own elements.

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

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CHAIN_FILE", "LENGTHS", "COMPUTE_TYPES", "LARGE_CASES", "chain_cases",
           "chain_graph", "measure_chain", "fit_size_excess", "write_chain", "read_chain",
           "chain_excess_ms"]

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
    plain and four sizes, and :data:`LARGE_CASES`; channel shuffles, poolings, relu and
    hswish over three."""
    cases = [(name, c, hw, k) for name, k in (("conv-bn-relu", 1), ("conv-bn-relu", 3),
                                              ("dwconv-bn", 3))
             for c in (24, 58, 64, 116) for hw in (7, 14, 28, 56)
             if not (name == "conv-bn-relu" and k == 3 and c * hw > 116 * 28)]
    cases += list(LARGE_CASES)
    cases += [(name, c, hw, 3) for name in ("channelshuffle", "maxpool", "avgpool", "relu",
                                            "hswish")
              for c in (24, 58, 64, 116) for hw in (7, 14, 28)]
    return cases


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


def measure_chain(backend_id: str, dataset_dir: str | os.PathLike, *, profiler: Any = None,
                  on_point: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Measure the chains of :func:`chain_cases` on ``backend_id`` and return the
    calibration record (``excess_ms``, per-family ``families``, raw ``points``) for the
    dataset in ``dataset_dir`` (``<root>/datasets/kernels/<dataset id>``).

    The overhead, reorder and boundary costs subtracted are those training removes,
    from the dataset's predictor trained without a chain correction. ``on_point`` is
    called with each point as it is measured."""
    from nnmeter.backends import Profiler
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors import PredictorSettings, load_predictor
    from nnmeter.predictors.boundary import boundary_elements
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.layout import LAYOUT_BLOCK
    from nnmeter.predictors.reorder import single_kernel_reorders_ms

    where = Path(dataset_dir)
    ds = KernelDataset(where, backend_id)
    pred = load_predictor(backend_id, dataset=where.name, root=where.parents[2],
                          settings=PredictorSettings(chain_correction=False))
    overhead = pred.overhead_ms
    block = LAYOUT_BLOCK.get(backend_id.split("@")[0], 0)
    line = pred.meta.get("reorder_cost")
    curve = pred.meta.get("reorder_curve")
    edges = pred.meta.get("boundary")  # boundary.json's fit, when training applies it

    def boundary(kt: Any, cfg: Any) -> float:
        if not edges:
            return 0.0
        from nnmeter.predictors.boundary import boundary_cost_ms, boundary_elements

        return boundary_cost_ms(edges, kt.family or kt.name, *boundary_elements(kt, cfg))

    def reorders(kt: Any, cfg: Any) -> float:
        if not block or not line:
            return 0.0
        return single_kernel_reorders_ms(kt, cfg, block, line, curve)

    own = profiler is None
    prof = Profiler(backend_id) if own else profiler
    points = []
    t0 = time.time()
    try:
        for name, c, hw, k in chain_cases():
            kt = KERNEL_TYPES.get(name)
            cfg = chain_config(kt, c, hw, k)
            times = [prof.measure(kt.build_graph(cfg) if n == 1 else
                                  chain_graph(name, c, hw, k, n), on_error="raise").latency_ms
                     for n in LENGTHS]
            slope = float(np.polyfit(LENGTHS, times, 1)[0])
            r, e = reorders(kt, cfg), boundary(kt, cfg)
            point = {"kernel_type": name, "config": kt.config_to_dict(cfg), "chain_ms": times,
                     "slope_ms": slope, "reorders_ms": r, "boundary_ms": e,
                     "elements": sum(boundary_elements(kt, cfg)),
                     "excess_ms": float(times[0] - overhead - r - e - slope)}
            points.append(point)
            if on_point is not None:
                on_point(point)
    finally:
        if own:
            prof.close()
    default, size = fit_size_excess(points)
    by_family: dict[str, list[float]] = {}
    for p in points:
        if p["kernel_type"] not in COMPUTE_TYPES:
            fam = KERNEL_TYPES.get(p["kernel_type"]).family
            by_family.setdefault(fam, []).append(p["excess_ms"])
    return {"backend_id": backend_id, "fingerprint_id": ds.fingerprint_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "excess_ms": default,
            "size": size,
            "families": {f: statistics.median(v) for f, v in sorted(by_family.items())},
            "overhead_ms": overhead, "lengths": list(LENGTHS), "seconds": time.time() - t0,
            "points": points}


def write_chain(dataset_dir: Any, record: dict[str, Any]) -> Any:
    """Write ``record`` to ``<dataset_dir>/chain_excess.json``; returns the path."""
    from nnmeter.predictors.dataset import write_calibration

    return write_calibration(dataset_dir, CHAIN_FILE, record)


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


def chain_excess_ms(record: dict[str, Any] | None, family: str = "",
                    elements: float | None = None) -> float:
    """The per-kernel excess (ms) of a record for kernels of ``family``: the family's own
    when it was calibrated, else the default, plus the record's size term for a
    single-kernel model of ``elements`` (inputs plus outputs) when both are given; 0
    without a record (never negative)."""
    if not record:
        return 0.0
    value = float((record.get("families") or {}).get(family, record.get("excess_ms", 0.0)))
    size = record.get("size")
    if size and elements is not None:
        value += float(size["ms_per_melem"]) * 1e-6 * max(
            0.0, float(elements) - float(size["knee_elements"]))
    return max(0.0, value)
