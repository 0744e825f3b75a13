"""Weights refetched from memory in models that overflow the last-level cache.

Single-kernel measurements time a kernel with its weights hot; in a model that moves
more bytes per inference than the last-level cache holds, they come from memory once
per inference (:mod:`nnmeter.predictors.weight_stream` measures the rate,
:mod:`nnmeter.predictors.weight_refetch` says what each kernel then takes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import BackendError, DatasetError, MeasurementError
from nnmeter.predictors.composition import FitContext, ModelView, Term
from nnmeter.predictors.facts import DeviceFacts
from nnmeter.predictors.weight_refetch import STREAMING_FAMILIES, matrix_product

__all__ = ["RefetchTerm"]


@dataclass(frozen=True)
class RefetchTerm(Term):
    """``bytes_per_ms``: the device's weight streaming rate; ``llc_bytes``: its
    last-level cache; ``refetch``: kernels that re-read their weights pay the fetch on
    top of their hot time (else they only get the streaming floor); ``gemm_refetch``:
    fully connected layers over many rows pay it on top whatever ``refetch`` says (see
    :data:`GEMM_REFETCH_BACKENDS`); ``gemm_fetch``: the share of that fetch they add,
    1 until a device's whole-model measurements fit it
    (:func:`~nnmeter.predictors.terms.in_model.fit_gemm_fetch`)."""

    bytes_per_ms: float
    llc_bytes: float
    refetch: bool
    gemm_refetch: bool = False
    gemm_fetch: float = 1.0

    name: ClassVar[str] = "weight_refetch"
    label: ClassVar[str] = "weights refetched past the last-level cache"
    record_file: ClassVar[str | None] = "weight_stream.json"
    calibration: ClassVar[str] = "the weight streaming rate"
    #: a runtime that cannot time the calibration's kernels (or nothing to fit) skips it
    #: with a warning: the build still trains, without this term
    calibration_skips: ClassVar[tuple[type, ...]] = (DatasetError, BackendError,
                                                     MeasurementError)

    @classmethod
    def _module(cls) -> Any:
        from nnmeter.predictors import weight_stream

        return weight_stream

    @classmethod
    def wanted(cls, facts: DeviceFacts) -> bool:
        return True

    @classmethod
    def planned_work(cls, backend_id: str, dataset_dir: Any) -> int:
        """Kernels the calibration still has to time
        (:func:`~nnmeter.predictors.weight_stream.planned_stream_work`)."""
        return cls._module().planned_stream_work(backend_id, dataset_dir)

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: Any, *, before: Any = None,
                deadline: float | None = None, progress: bool = False) -> dict[str, Any]:
        """Measure ``weight_stream.json``
        (:func:`~nnmeter.predictors.weight_stream.measure_weight_stream`)."""
        return cls._module().measure_weight_stream(backend_id, dataset_dir, deadline=deadline,
                                                   progress=progress)

    @classmethod
    def fit(cls, ctx: FitContext) -> "RefetchTerm | None":
        stream = cls._module().read_weight_stream(ctx.dataset)
        if not stream or not stream.get("bytes_per_ms"):
            return None
        # the cache the rate was measured against (else the device record's)
        llc = stream.get("llc_bytes")
        if llc is None:
            llc = ctx.facts.llc_bytes or 0.0
        return cls(float(stream["bytes_per_ms"]), float(llc), bool(stream.get("refetch")),
                   str(ctx.backend_id).split("-", 1)[0] in GEMM_REFETCH_BACKENDS)

    def _cold(self, batch: Any) -> dict[str, list[float]]:
        """Every batch row's time inside a cold model, per estimator key (once a batch)."""
        hit = batch.memo.get(self.name)
        if hit is None:
            from nnmeter.predictors.weight_refetch import refetch_many_ms
            from nnmeter.predictors.weight_stream import WEIGHT_BYTES

            hit = batch.memo[self.name] = {}
            for key, (rows, _) in batch.jobs.items():
                n = len(rows)
                params = np.fromiter((r[3] for r in rows), float, n)
                fetched: Any = 1.0
                if self.gemm_fetch != 1.0 and self.gemm_refetch:
                    fetched = np.fromiter((self.gemm_fetch if _gemm(r) else 1.0
                                           for r in rows), float, n)
                hit[key] = refetch_many_ms(
                    np.maximum(batch.hot[key], 0.0), params * WEIGHT_BYTES / self.bytes_per_ms,
                    kernel_bytes=np.fromiter((r[1][1] for r in rows), float, n),
                    llc_bytes=self.llc_bytes,
                    streams=np.fromiter((_streams(r, self.refetch, self.gemm_refetch)
                                         for r in rows), bool, n),
                    fetched=fetched).tolist()
        return hit

    def adjust(self, view: ModelView) -> None:
        if sum(s[3] for s in view.slots) <= self.llc_bytes:
            return
        cold = self._cold(view.batch)
        ms = view.ms
        for j, s in enumerate(view.slots):
            new = cold[s[0]][s[1]]
            if new != ms[j]:
                ms[j] = new
                view.mark(j, self.name)


#: backends (by id prefix) on which a fully connected layer over many rows (a matrix
#: product: a transformer's projections) pays its weights' fetch on top of its hot time
#: in a model that overflows the cache, as a convolution that re-reads its weights does
#: (a batch-1 one, a matrix-vector product, streams them). Chosen on each backend's
#: transformer design set (seed 1000, on epyc-zen5-avx512-2c): ort-cpu 75.0 -> 85.0 %
#: within ±10 % (MAPE 7.1 -> 5.8 %, the CNNs unchanged); litert-cpu 62.1 -> 58.6 %
#: (MAPE 9.6 -> 9.7 %), so not there. This is the default of a device without whole-model
#: measurements; where a dataset has them (``in_model.json``), the share of the fetch
#: is fitted on them for every backend (:func:`~nnmeter.predictors.terms.in_model.fit_gemm_fetch`:
#: ort-cpu 1.0 on epyc-zen5-avx512-2c, 0.7 on epyc-zen4-avx512-2c; litert-cpu 0.5 on
#: epyc-zen5-avx512-2c)
GEMM_REFETCH_BACKENDS = frozenset({"ort"})


def _gemm(row: tuple[Any, ...]) -> bool:
    """Whether a batch row is a fully connected layer over many rows (a matrix product;
    raw fc features start [CIN, COUT, ROWS])."""
    return row[4] in STREAMING_FAMILIES and len(row[2]) > 2 and matrix_product(row[4], row[2][2])


def _streams(row: tuple[Any, ...], refetch: bool, gemm_refetch: bool = False) -> bool:
    """Whether a batch row (a feature-cache entry of
    :meth:`~nnmeter.predictors.model.LatencyPredictor._features`) only gets the streaming
    floor inside a cold model, rather than its fetch on top of its hot time."""
    if row[4] in STREAMING_FAMILIES:
        return not (gemm_refetch and _gemm(row))
    return not refetch
