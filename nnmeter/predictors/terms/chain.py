"""The chain excess: what a single-kernel model still costs beyond its kernel's time
inside a model once the overhead, reorders and edges are off, measured with chains of
identical kernels (:mod:`nnmeter.predictors.chain`). Training removes it; a model adds
nothing back (its kernels run in a chain)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import DatasetError, MeasurementError, PredictorError
from nnmeter.predictors.composition import FitContext, Term, remove_floored

__all__ = ["ChainTerm"]

#: the parts of chain_excess.json that training uses
_KEYS = ("excess_ms", "families", "size", "family_lines")


@dataclass(frozen=True)
class ChainTerm(Term):
    """``record``: the default excess, per-family medians and lines, and the size term
    of ``chain_excess.json`` (:func:`~nnmeter.predictors.chain.chain_excess_ms`)."""

    record: dict[str, Any]

    name: ClassVar[str] = "chain"
    label: ClassVar[str] = "single-kernel excess (removed in training only)"
    record_file: ClassVar[str | None] = "chain_excess.json"
    calibration: ClassVar[str] = "chains of kernels against single kernels"
    calibration_skips: ClassVar[tuple[type, ...]] = (DatasetError, PredictorError,
                                                     MeasurementError)
    keep_share: ClassVar[float] = 0.5
    measures_after: ClassVar[bool] = True

    @classmethod
    def planned_work(cls, backend_id: str, dataset_dir: Any) -> int:
        """Measurements the calibration still has to make
        (:func:`~nnmeter.predictors.chain.planned_chain_work`)."""
        from nnmeter.predictors.chain import planned_chain_work

        return planned_chain_work(backend_id, dataset_dir)

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: Any, *, before: Any = None,
                deadline: float | None = None, progress: bool = False,
                **kwargs: Any) -> dict[str, Any]:
        """Measure ``chain_excess.json`` (:func:`~nnmeter.predictors.chain.measure_chain`,
        stopping at ``deadline`` with a partial record, resuming from its points file;
        ``progress`` and ``kwargs`` go there), removing what ``before`` removes: the
        composition of the terms ahead of this one on the dataset
        (:func:`nnmeter.predictors.terms.composition_before`)."""
        from nnmeter.predictors.chain import measure_chain

        if before is None:
            raise TypeError("ChainTerm.measure needs before=composition_before(backend_id, "
                            "dataset_dir, 'chain')")
        overhead, reorders, edges = (before.get(n) for n in ("overhead", "reorders", "edges"))

        def single_costs(kt: Any, cfg: Any) -> tuple[float, float]:
            return (reorders.single_kernel_ms(kt, cfg) if reorders is not None else 0.0,
                    edges.single_kernel_ms(kt, cfg) if edges is not None else 0.0)

        return measure_chain(backend_id, dataset_dir,
                             overhead_ms=overhead.overhead_ms if overhead is not None else 0.0,
                             single_costs=single_costs, deadline=deadline,
                             progress=progress, **kwargs)

    @classmethod
    def fit(cls, ctx: FitContext) -> "ChainTerm | None":
        from nnmeter.predictors.chain import read_chain

        if not getattr(ctx.settings, "chain_correction", True):
            return None
        chain = read_chain(ctx.dataset)
        if not chain:
            return None
        return cls({k: chain.get(k) for k in _KEYS})

    def excess_ms(self, family: str = "", elements: float | None = None) -> float:
        from nnmeter.predictors.chain import chain_excess_ms

        return chain_excess_ms(self.record, family, elements)

    def remove(self, data: dict[str, Any]) -> None:
        from nnmeter.predictors.kernel_data import family_of

        lines = self.record.get("family_lines") or {}
        for t, d in data.items():
            fam = family_of(t)
            if self.record.get("size") or fam in lines:
                ex: Any = np.array([self.excess_ms(fam, n)
                                    for n in d.io_elements().sum(axis=1)])
            else:
                ex = self.excess_ms(fam)
            if np.any(ex):
                d.y = remove_floored(d.y, ex, keep_share=self.keep_share)
