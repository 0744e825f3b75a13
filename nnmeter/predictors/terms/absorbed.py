"""Kernels the runtime runs inside others (an activation folded into the preceding
convolution, a duplicate merged away): 0 ms of their own in a model
(:mod:`nnmeter.predictors.absorbed` finds them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nnmeter.predictors.composition import FitContext, ModelView, Term
from nnmeter.predictors.facts import DeviceFacts

__all__ = ["AbsorbedTerm"]


@dataclass(frozen=True)
class AbsorbedTerm(Term):
    """``folded``: activation types the runtime runs as a convolution's epilogue;
    ``merged``: weightless types it runs once per input tensor and attributes."""

    folded: frozenset[str]
    merged: frozenset[str]

    name: ClassVar[str] = "absorbed"
    label: ClassVar[str] = "kernels run inside others"

    @classmethod
    def fit(cls, ctx: FitContext) -> "AbsorbedTerm | None":
        f = ctx.facts
        if not (f.folded_activations or f.merged_types):
            return None
        return cls(f.folded_activations, f.merged_types)

    @property
    def facts(self) -> DeviceFacts:
        return DeviceFacts(folded_activations=self.folded, merged_types=self.merged)

    def absorbed(self, graph: object, kernels: object) -> dict[int, int]:
        from nnmeter.predictors.absorbed import absorbed_kernels

        return absorbed_kernels(graph, kernels, self.facts)

    def adjust(self, view: ModelView) -> None:
        absorbed = self.memo(view, lambda: self.absorbed(view.graph, view.kernels))
        view.absorbed = absorbed
        ms = view.ms
        for j in absorbed:
            ms[j] = 0.0
            view.mark(j, self.name)
