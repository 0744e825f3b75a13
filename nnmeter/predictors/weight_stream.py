"""Cold weights: the floor a kernel's time has inside a whole model.

A single-kernel measurement runs the same kernel hundreds of times in a row, so a
kernel whose weights fit in the last-level cache (a 5 MB classifier, a 2 MB 1x1
convolution) is timed with its weights *hot*. Inside a whole model every kernel's
weights are read once per inference, after the rest of the model (and, on a shared
machine, the neighbours) went through the cache: they come from DRAM. A batch-1 fully
connected layer is a matrix-vector product that reads each weight once, so in a model
it cannot run faster than streaming its weights from memory.

Measured here (ort-cpu, 1 thread; ``experiments/weight_stream_check.py``): the
classifier of a MobileNetV2 variant (2176 → 1000, 8.7 MB) is predicted at 0.12 ms from
single-kernel measurements (a 1280 → 1000 fc measures 0.07 ms alone) but takes
0.31–0.43 ms inside the model (model minus the model without it); a 67 MB fc alone
streams at 23 GB/s and a 134 MB one at 20 GB/s, which puts 8.7 MB at about 0.4 ms.

This module measures that streaming rate on the device and turns it into a floor:

- :func:`measure_weight_stream` times single fc kernels whose weights are far larger
  than any CPU cache (:data:`STREAM_SHAPES`, 67 and 101 MB in float32) and keeps the
  slowest rate (fp32 bytes per ms of the whole single-kernel model);
- :func:`write_weight_stream` / :func:`read_weight_stream` store it as
  ``<dataset>/weight_stream.json`` with the raw points and the device fingerprint;
- the predictor then gives every kernel with weights at least
  ``params * 4 / bytes_per_ms`` (:func:`stream_floor_ms`): compute-bound kernels are
  far above it, and memory-bound ones (classifiers, wide 1x1 convolutions at 7x7) are
  lifted to it;
- but only in models whose kernels move more bytes per inference than the last-level
  cache holds (``llc_bytes``, read from the OS when the rate is measured: 32 MB here).
  A small model's weights stay in the cache between inferences: a ShuffleNetV2 variant
  moving 19 MB per inference spent 0.016 ms in its 0.8 MB classifier, as much as the
  classifier alone (0.012 ms), not the 0.04 ms that streaming it would take;
- with ``"refetch": true`` in the record, kernels that re-read their weights (all but
  fc) pay the fetch on top of their hot time instead of only the floor
  (:mod:`nnmeter.predictors.weight_refetch`; measured to hold on litert-cpu).

Examples
--------
>>> rec = fit_weight_stream([StreamPoint(4096, 4096, 3.0), StreamPoint(6144, 4096, 5.0)])
>>> round(rec["bytes_per_ms"] / 1e6, 2)        # slowest point: 100.7 MB in 5 ms
20.13
>>> round(stream_floor_ms(2_176_000, rec["bytes_per_ms"]), 3)   # a 2176 -> 1000 fc
0.432
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nnmeter.errors import DatasetError

__all__ = ["STREAM_FILE", "STREAM_SHAPES", "WEIGHT_BYTES", "StreamPoint", "fit_weight_stream",
           "last_level_cache_bytes", "stream_floor_ms", "measure_weight_stream", "write_weight_stream",
           "read_weight_stream", "planned_stream_work"]

#: per-dataset file holding the weight streaming rate
STREAM_FILE = "weight_stream.json"

#: (CIN, COUT) of the fc kernels timed for the rate: 67 and 101 MB of float32 weights,
#: several times any CPU's last-level cache, and under the 32 M parameters that the
#: .tflite converter handles on a 24 GiB machine
STREAM_SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (6144, 4096))

#: bytes per weight (the exported models are float32)
WEIGHT_BYTES = 4

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamPoint:
    """One timed fc kernel: its shape and its single-kernel model's latency (ms)."""

    cin: int
    cout: int
    latency_ms: float

    @property
    def weight_bytes(self) -> int:
        return self.cin * self.cout * WEIGHT_BYTES


def fit_weight_stream(points: list[StreamPoint]) -> dict[str, Any]:
    """The streaming rate of ``points``: the slowest point's weight bytes per ms.

    The slowest point is taken because a floor must not overshoot: a larger matrix
    streams at the sustained rate, a smaller one may still profit from the cache.

    Raises
    ------
    DatasetError
        If no point has a positive latency.
    """
    good = [p for p in points if p.latency_ms > 0]
    if not good:
        raise DatasetError("no fc kernel of the weight-stream calibration was timed; "
                           "nothing to fit")
    rates = [p.weight_bytes / p.latency_ms for p in good]
    return {"bytes_per_ms": float(min(rates)),
            "rates_gb_s": [round(r / 1e6, 3) for r in rates]}


def last_level_cache_bytes() -> int | None:
    """Size of this machine's last-level CPU cache (bytes), from Linux sysfs; None when
    the OS does not say."""
    best = None
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((d / "level").read_text())
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1], 1)
        try:
            n = int(size.rstrip("KMG")) * mult
        except ValueError:
            continue
        if best is None or level > best[0]:
            best = (level, n)
    return best[1] if best else None


def stream_floor_ms(params: float, bytes_per_ms: float) -> float:
    """The least time (ms) a kernel with ``params`` weights takes inside a model."""
    if bytes_per_ms <= 0:
        return 0.0
    return float(params) * WEIGHT_BYTES / bytes_per_ms


def _stream_key(cin: int, cout: int) -> str:
    return f"fc {cin}x{cout}"


def planned_stream_work(backend_id: str, dataset_dir: str | os.PathLike) -> int:
    """Measurements :func:`measure_weight_stream` still has to make on the dataset in
    ``dataset_dir``: the :data:`STREAM_SHAPES` without a point in its points file."""
    from nnmeter.predictors.calibration_points import CalibrationPoints
    from nnmeter.predictors.dataset import KernelDataset

    done = CalibrationPoints.of(KernelDataset(Path(dataset_dir), backend_id), STREAM_FILE).load()
    return sum(1 for cin, cout in STREAM_SHAPES if _stream_key(cin, cout) not in done)


def _stored_point(point: Any) -> StreamPoint | None:
    try:
        return StreamPoint(int(point["cin"]), int(point["cout"]), float(point["latency_ms"]))
    except (KeyError, TypeError, ValueError):
        return None


def measure_weight_stream(backend_id: str, dataset_dir: str | os.PathLike, *,
                          core: int | str | None = "auto", profiler: Any = None,
                          deadline: float | None = None,
                          progress: bool = False) -> dict[str, Any]:
    """Time the :data:`STREAM_SHAPES` fc kernels on this device and fit the rate.

    Returns the record that :func:`write_weight_stream` stores: ``points``,
    ``bytes_per_ms``, ``fingerprint_id``, ``backend_id`` and a timestamp.

    Each timed kernel is appended to ``weight_stream.points.jsonl``
    (:class:`~nnmeter.predictors.chain.CalibrationPoints`); one already there with the
    dataset's fingerprint is not timed again. From ``deadline`` (a ``time.monotonic()``
    time) on no kernel is started once there is a point, and the record is marked
    ``partial`` (:func:`~nnmeter.predictors.chain.mark_partial`); a later call
    continues it. ``progress`` shows a progress bar (tqdm).

    Raises
    ------
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    DatasetError
        If no kernel could be timed.
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.calibration_points import CalibrationPoints, mark_partial, \
        refuse_other_device
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    kt = KERNEL_TYPES.get("fc")
    log = CalibrationPoints.of(ds, STREAM_FILE)
    stored = {k: p for k, v in log.load().items() if (p := _stored_point(v)) is not None}
    prof = profiler
    fid = None
    points: list[StreamPoint] = []
    missing = 0
    bar = tqdm(total=len(STREAM_SHAPES), unit="kernel", disable=not progress,
               initial=sum(1 for c in STREAM_SHAPES if _stream_key(*c) in stored),
               desc=f"calibrate weight stream ({backend_id})")
    try:
        for cin, cout in STREAM_SHAPES:
            key = _stream_key(cin, cout)
            if key in stored:
                points.append(stored[key])
                continue
            if deadline is not None and time.monotonic() >= deadline and (points or stored):
                missing += 1
                continue
            if prof is None:
                prof = Profiler(backend_id, core=core)
            m = prof.measure(kt.build_graph(kt.config_cls(cin=cin, cout=cout)))
            bar.update(1)
            if not m.ok:
                logger.warning("weight stream: fc %dx%d failed: %s", cin, cout, m.error)
                continue
            fid = m.device.fingerprint_id if m.device is not None else fid
            refuse_other_device(ds, fid)
            points.append(StreamPoint(cin, cout, float(m.latency_ms)))
            log.append(key, asdict(points[-1]))
    finally:
        bar.close()
        if prof is not None and profiler is None:
            prof.close()
    fit = fit_weight_stream(points)
    rec = {"backend_id": backend_id, "fingerprint_id": fid or ds.fingerprint_id,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **fit,
           "llc_bytes": last_level_cache_bytes(),
           "points": [asdict(p) for p in points]}
    if missing:
        mark_partial(rec, planned=len(STREAM_SHAPES), measured=len(points))
    return rec


def write_weight_stream(dataset_dir: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``record`` (from :func:`measure_weight_stream`) to the dataset's file,
    atomically; a complete record (not ``partial``) removes the calibration's points
    file."""
    from nnmeter.predictors.calibration_points import write_record

    return write_record(dataset_dir, STREAM_FILE, record)


def read_weight_stream(dataset: Any) -> dict[str, Any] | None:
    """The dataset's weight-stream record, or None when it has none (or it says
    ``"apply": false``).

    Raises
    ------
    FingerprintMismatchError
        If the record was measured on another fingerprint than the dataset.
    DatasetError
        If the file is not valid JSON or has no positive ``bytes_per_ms``.
    """
    from nnmeter.predictors.dataset import read_calibration

    record = read_calibration(dataset, STREAM_FILE, remedy="measure it again "
                              "(experiments/weight_stream_check.py --write)")
    if record is None:
        return None
    rate = record.get("bytes_per_ms")
    if not isinstance(rate, (int, float)) or rate <= 0:
        raise DatasetError(f"{Path(dataset.directory) / STREAM_FILE} has no positive "
                           f"'bytes_per_ms'; measure it again")
    if record.get("apply", True) is False:
        return None
    return record
