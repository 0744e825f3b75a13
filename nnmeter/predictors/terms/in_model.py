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
    >>> t = InModelTerm((("conv", 1.0), ("dwconv", 1.25)), 30)
    >>> t.factor("dwconv-bn-relu6"), t.factor("conv-bn")
    (1.25, 1.0)
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

    def factor(self, kernel_type: str) -> float:
        """The factor of a kernel type's group (1 for a group without one)."""
        hit = self._by_type.get(kernel_type)  # type: ignore[attr-defined]
        if hit is None:
            from nnmeter.predictors.in_model import group_of

            hit = self._groups.get(group_of(kernel_type), 1.0)  # type: ignore[attr-defined]
            self._by_type[kernel_type] = hit  # type: ignore[attr-defined]
        return hit

    def adjust(self, view: ModelView) -> None:
        ms = view.ms
        for j, k in enumerate(view.kernels):
            f = self.factor(k.type)
            if f != 1.0 and ms[j]:
                ms[j] *= f
                view.mark(j, self.name)


def fit_in_model(pred: Any, dataset: Any) -> Any:
    """``pred`` with the in-model term appended to its composition when ``dataset``
    holds an in-model record (fitted on its models' predictions by ``pred`` itself);
    else ``pred`` unchanged."""
    from nnmeter.predictors.in_model import GROUPS, fit_factors, group_of, read_in_model
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
        for r in rep.rows:
            K[i, GROUPS.index(group_of(r.type))] += r.predicted_ms
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
