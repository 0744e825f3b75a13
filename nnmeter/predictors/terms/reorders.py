"""Layout reorders of a blocked layout (ORT's NCHWc): a single-kernel model reorders
into and out of the blocked layout around its kernel; a whole model only where a
blocked tensor meets an op that needs NCHW or leaves the model
(:mod:`nnmeter.predictors.layout` says which, :mod:`nnmeter.predictors.reorder` what
one costs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import DatasetError
from nnmeter.predictors.composition import FitContext, ModelView, Term, remove_floored
from nnmeter.predictors.facts import DeviceFacts

__all__ = ["ReordersTerm", "fit_reorder_cost"]

#: a reorder is one node that reads and writes every element once, like this kernel
_REORDER_PROXY = "relu"


def fit_reorder_cost(data: dict[str, Any]) -> tuple[float, float] | None:
    """(fixed ms, ms per element) of one layout reorder, from kernel measurements.

    A reorder is one node that reads and writes every element once, like ``relu``:
    a straight-line fit of ``relu``'s net times (overhead removed) against elements.
    (A transpose-like slope from ``channelshuffle`` was tried and over-subtracted on
    large tensors.) None when ``relu`` has fewer than 5 measurements.
    """
    d = data.get(_REORDER_PROXY)
    if d is None or len(d) < 5:
        return None
    x = np.asarray([float(c.cin * c.h * c.w) for c in d.configs])
    slope, fixed = np.polyfit(x, np.asarray(d.y, dtype=np.float64), 1)
    return max(float(fixed), 0.0), max(float(slope), 0.0)


@dataclass(frozen=True)
class ReordersTerm(Term):
    """``block``: the layout's channel block on the device; ``line``: (fixed ms, ms per
    element) of one reorder (the relu line); ``curve``: the profiled rise of a reorder's
    cost past the caches (``reorders.json``), or None."""

    block: int
    line: tuple[float, float]
    curve: dict[str, Any] | None

    name: ClassVar[str] = "reorders"
    label: ClassVar[str] = "layout reorders (blocked layout, whole model)"
    record_file: ClassVar[str | None] = "reorders.json"
    calibration: ClassVar[str] = "the layout reorders of single-kernel models"
    calibration_skips: ClassVar[tuple[type, ...]] = (DatasetError,)
    keep_share: ClassVar[float] = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        # (kernel type, id of its config, block) -> (config, reorder elements)
        object.__setattr__(self, "_configs", {})

    @classmethod
    def wanted(cls, facts: DeviceFacts) -> bool:
        return bool(facts.layout_block)

    @classmethod
    def planned_work(cls, backend_id: str, dataset_dir: Any) -> int:
        """Models the calibration still has to profile
        (:func:`~nnmeter.predictors.reorder.planned_reorder_work`)."""
        from nnmeter.predictors.reorder import planned_reorder_work

        return planned_reorder_work(backend_id, dataset_dir)

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: Any, *, before: Any = None,
                deadline: float | None = None, progress: bool = False) -> dict[str, Any]:
        """Measure ``reorders.json`` (:func:`~nnmeter.predictors.reorder.measure_reorders`)."""
        from nnmeter.predictors.reorder import measure_reorders

        return measure_reorders(backend_id, dataset_dir, deadline=deadline, progress=progress)

    @classmethod
    def fit(cls, ctx: FitContext) -> "ReordersTerm | None":
        from nnmeter.predictors.reorder import read_reorders

        block = ctx.facts.layout_block
        if not block:
            return None
        curve = read_reorders(ctx.dataset)
        line = fit_reorder_cost(ctx.data)
        if line is None:
            return None
        return cls(block, (float(line[0]), float(line[1])), curve)

    def single_kernel_ms(self, kernel_type: Any, config: Any) -> float:
        """The reorders a single-kernel model of ``config`` executes (ms)."""
        from nnmeter.predictors.reorder import single_kernel_reorders_ms

        return single_kernel_reorders_ms(kernel_type, config, self.block, self.line, self.curve)

    def remove(self, data: dict[str, Any]) -> None:
        from nnmeter.kernels import KERNEL_TYPES
        from nnmeter.predictors.layout import BLOCKED_FAMILIES

        for t, d in data.items():
            kt = KERNEL_TYPES.get(t)
            if getattr(kt, "family", "") not in BLOCKED_FAMILIES:
                continue
            sub = np.array([self.single_kernel_ms(kt, cfg) for cfg in d.configs])
            d.y = remove_floored(d.y, sub, keep_share=self.keep_share)

    def model_ms(self, view: ModelView) -> float:
        def compute() -> float:
            from nnmeter.predictors.layout import model_reorders
            from nnmeter.predictors.reorder import reorder_cost_ms

            moved = model_reorders(view.graph, view.kernels, self.block,
                                   self._configs,  # type: ignore[attr-defined]
                                   absorbed=view.absorbed)
            return float(sum(reorder_cost_ms(n, self.line, self.curve) for n in moved))

        return self.memo(view, compute)
