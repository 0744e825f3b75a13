"""The runtime's fixed per-inference cost (session run, input binding), counted once.

Every single-kernel measurement includes it: about the time of the tiniest kernel.
Summing kernels would count it once per kernel; training learns net kernel times
instead and the model pays it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nnmeter.predictors.composition import FitContext, ModelView, Term, remove_floored

__all__ = ["OverheadTerm", "OVERHEAD_SHARE"]

#: share of the smallest measured kernel time taken as the per-inference overhead
OVERHEAD_SHARE = 0.9


@dataclass(frozen=True)
class OverheadTerm(Term):
    """``overhead_ms``: removed from every row, added once per model."""

    overhead_ms: float

    name: ClassVar[str] = "overhead"
    label: ClassVar[str] = "runtime overhead (once per model)"

    @classmethod
    def fit(cls, ctx: FitContext) -> "OverheadTerm":
        return cls(OVERHEAD_SHARE * float(min(d.y.min() for d in ctx.data.values())))

    def remove(self, data: dict) -> None:
        # a row is never below the smallest row, so nothing reaches the floor
        for d in data.values():
            d.y = remove_floored(d.y, self.overhead_ms, keep_share=self.keep_share)

    def model_ms(self, view: ModelView) -> float:
        return self.overhead_ms
