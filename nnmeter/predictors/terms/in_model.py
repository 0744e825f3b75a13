"""Kernels inside a whole model: a per-group factor on kernel times, fitted on whole
models measured on the device (:mod:`nnmeter.predictors.in_model` says why and how)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import BackendError, DatasetError, MeasurementError
from nnmeter.predictors.composition import Composition, FitContext, ModelView, Term
from nnmeter.predictors.facts import DeviceFacts

__all__ = ["InModelTerm", "fit_in_model"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InModelTerm(Term):
    """``factors``: (group, factor) pairs that scale the kernels of each group of
    :data:`~nnmeter.predictors.in_model.GROUPS` inside a model; ``models``: how many
    measured models they were fitted on.

    It is fitted after the regressors (:func:`fit_in_model`
    needs the predictor's own estimates of the measured models), so :meth:`fit` in the
    composition's pass returns None and removes nothing from the kernel rows: a
    single-kernel row is the kernel alone, which is what the regressors learn.

    Examples
    --------
    >>> t = InModelTerm((("conv", 1.0), ("pointwise", 1.2), ("dwconv", 1.25)), 30)
    >>> t.factor("dwconv-bn-relu6", 3), t.factor("conv-bn", 3), t.factor("conv-bn", 1)
    (1.25, 1.0, 1.2)
    """

    factors: tuple[tuple[str, float], ...]
    models: int

    name: ClassVar[str] = "in_model"
    label: ClassVar[str] = "kernels inside the model (fitted on measured models)"
    record_file: ClassVar[str | None] = "in_model.json"
    calibration: ClassVar[str] = "whole zoo models measured on the device"
    calibration_skips: ClassVar[tuple[type, ...]] = (DatasetError, BackendError,
                                                     MeasurementError)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_by_type", {})
        object.__setattr__(self, "_groups", {str(g): float(f) for g, f in self.factors})

    @classmethod
    def wanted(cls, facts: DeviceFacts) -> bool:
        return True

    @classmethod
    def planned_work(cls, backend_id: str, dataset_dir: Any) -> int:
        from nnmeter.predictors.in_model import planned_in_model_work

        return planned_in_model_work(backend_id, dataset_dir)

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: Any, *, before: Any = None,
                deadline: float | None = None, progress: bool = False) -> dict[str, Any]:
        from nnmeter.predictors.in_model import measure_in_model

        return measure_in_model(backend_id, dataset_dir, deadline=deadline, progress=progress)

    @classmethod
    def fit(cls, ctx: FitContext) -> "InModelTerm | None":
        return None  # fitted after the regressors: fit_in_model

    def factor(self, kernel_type: str, kernel_size: int | None = None) -> float:
        """The factor of a kernel's group (1 for a group without one)."""
        from nnmeter.predictors.in_model import group_of

        return self._groups.get(group_of(kernel_type, kernel_size), 1.0)  # type: ignore[attr-defined]

    def _kernel_factor(self, kernel: Any) -> float:
        key = (kernel.type, id(kernel.config))
        hit = self._by_type.get(key)  # type: ignore[attr-defined]
        if hit is None or hit[0] is not kernel.config:
            from nnmeter.predictors.in_model import kernel_group

            by = self._by_type  # type: ignore[attr-defined]
            if len(by) > 100_000:
                by.clear()
            hit = by[key] = (kernel.config,
                             self._groups.get(kernel_group(kernel), 1.0))  # type: ignore[attr-defined]
        return hit[1]

    def adjust(self, view: ModelView) -> None:
        ms = view.ms
        for j, k in enumerate(view.kernels):
            f = self._kernel_factor(k)
            if f != 1.0 and ms[j]:
                ms[j] *= f
                view.mark(j, self.name)


def fit_in_model(pred: Any, dataset: Any) -> Any:
    """``pred`` with the in-model term appended to its composition when ``dataset``
    holds an in-model record (fitted on its models' predictions by ``pred`` itself);
    else ``pred`` unchanged."""
    from nnmeter.predictors.in_model import GROUPS, fit_factors, kernel_group, read_in_model
    from nnmeter.zoo import get_variant

    rec = read_in_model(dataset)
    if rec is None:
        return pred
    rows = []
    for p in rec["points"]:
        try:
            graph = get_variant(str(p["variant"])).build()
            ms = float(p["latency_ms"])
        except Exception as err:  # noqa: BLE001 - a stale point is skipped, never fatal
            logger.warning("in-model calibration: skipping point %r (%s)", p, err)
            continue
        if ms > 0:
            rows.append((graph, ms))
    if not rows:
        return pred
    K = np.zeros((len(rows), len(GROUPS)))
    rest = np.zeros(len(rows))
    for i, (graph, _) in enumerate(rows):
        rep = pred.predict(graph, check_device=False)
        kernels = pred.kernels(pred._for_backend(graph))  # the rows' kernels, in order
        for k, r in zip(kernels, rep.rows):
            K[i, GROUPS.index(kernel_group(k))] += r.predicted_ms
        rest[i] = rep.total_ms - K[i].sum()
    measured = np.array([ms for _, ms in rows])
    factors = fit_factors(K, rest, measured)
    before = float(np.median(np.abs(K.sum(axis=1) + rest - measured) / measured))
    after = float(np.median(np.abs(K @ np.array(factors) + rest - measured) / measured))
    logger.info("in-model factors %s from %d models (median error %.1f%% -> %.1f%%)",
                dict(zip(GROUPS, np.round(factors, 3))), len(rows), 100 * before, 100 * after)
    term = InModelTerm(tuple(zip(GROUPS, factors)), len(rows))
    pred.composition = Composition(tuple(pred.composition.terms) + (term,))
    pred.meta["in_model"] = {"factors": dict(zip(GROUPS, factors)), "models": len(rows),
                             "median_error_before": before, "median_error_after": after}
    return pred
