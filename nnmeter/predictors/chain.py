"""The chain excess: what a single-kernel measurement still carries beyond the kernel's
time inside a model, once the per-inference overhead and the layout reorders are off.

``experiments/chain_calibration.py`` measures it on the device: chains of n identical
kernels (n = 1, 2, 4, 8) give the kernel's in-model time as the slope of time over n;
the single-kernel model (n = 1) costs that, plus the overhead and its reorders, plus the
excess. The median over the calibration's convolutions is the default; families with
chains of their own (channel shuffle, pooling, activations) get their own median. Both
are stored in ``<dataset>/chain_excess.json`` and training subtracts a kernel's value
from its row (:func:`nnmeter.predictors.train.train_predictor`). It matters only for
models of many tiny kernels (a 0.2 ms NASBench-201 cell has about 30).

Examples
--------
>>> chain_excess_ms(None)
0.0
>>> chain_excess_ms({"excess_ms": 0.0011})
0.0011
>>> chain_excess_ms({"excess_ms": 0.0011, "families": {"pool": 0.003}}, "pool")
0.003
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CHAIN_FILE", "LENGTHS", "COMPUTE_TYPES", "chain_cases", "chain_graph",
           "measure_chain", "write_chain", "read_chain", "chain_excess_ms"]

#: per-dataset calibration file (``nnmeter build`` and experiments/chain_calibration.py)
CHAIN_FILE = "chain_excess.json"

#: chain lengths measured per config (1 is the builder's single-kernel model)
LENGTHS = (1, 2, 4, 8)

#: kernel types whose median excess is the default for every family without chains
COMPUTE_TYPES = ("conv-bn-relu", "dwconv-bn")


def chain_cases() -> list[tuple[str, int, int, int]]:
    """(kernel type, channels, height = width, kernel size) of every calibrated config:
    convolutions (1x1, 3x3) and depthwise 3x3 over channel counts that run blocked and
    plain and four sizes; channel shuffles, poolings, relu and hswish over three."""
    cases = [(name, c, hw, k) for name, k in (("conv-bn-relu", 1), ("conv-bn-relu", 3),
                                              ("dwconv-bn", 3))
             for c in (24, 58, 64, 116) for hw in (7, 14, 28, 56)
             if not (name == "conv-bn-relu" and k == 3 and c * hw > 116 * 28)]
    cases += [(name, c, hw, 3) for name in ("channelshuffle", "maxpool", "avgpool", "relu",
                                            "hswish")
              for c in (24, 58, 64, 116) for hw in (7, 14, 28)]
    return cases


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
                     "excess_ms": float(times[0] - overhead - r - e - slope)}
            points.append(point)
            if on_point is not None:
                on_point(point)
    finally:
        if own:
            prof.close()
    default = statistics.median(p["excess_ms"] for p in points
                                if p["kernel_type"] in COMPUTE_TYPES)
    by_family: dict[str, list[float]] = {}
    for p in points:
        if p["kernel_type"] not in COMPUTE_TYPES:
            fam = KERNEL_TYPES.get(p["kernel_type"]).family
            by_family.setdefault(fam, []).append(p["excess_ms"])
    return {"backend_id": backend_id, "fingerprint_id": ds.fingerprint_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "excess_ms": default,
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


def chain_excess_ms(record: dict[str, Any] | None, family: str = "") -> float:
    """The per-kernel excess (ms) of a record for kernels of ``family``: the family's own
    when it was calibrated, else the default; 0 without a record (never negative)."""
    if not record:
        return 0.0
    value = (record.get("families") or {}).get(family, record.get("excess_ms", 0.0))
    return max(0.0, float(value))
