"""Edge conversions: the layout/precision conversions a single-kernel model pays at its
own edges (OpenVINO's input and output ``Reorder``), which a whole model pays only at
its inputs and outputs (:mod:`nnmeter.predictors.boundary` measures them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import BackendError, DatasetError, MeasurementError
from nnmeter.predictors.composition import FitContext, ModelView, Term, remove_floored
from nnmeter.predictors.facts import DeviceFacts

__all__ = ["EdgesTerm", "model_edges_ms"]


def model_edges_ms(graph: Any, kernels: Sequence[Any], fit: dict[str, Any]) -> float:
    """Edge conversions a whole model pays at its own inputs and outputs, from the fit
    training removed from every single-kernel row: each graph input at the input rate of
    the family of the kernel that reads it, each output at the output rate of the
    family of the kernel that writes it, and the fixed part of those two families,
    half each.

    Examples
    --------
    >>> from nnmeter.ir import GraphBuilder
    >>> from nnmeter.partition import partition
    >>> from nnmeter.fusion.rules import FusionRules
    >>> b = GraphBuilder("m", (1, 4, 10, 10))
    >>> g = b.build([b.relu(b.conv(b.x, 8, 3))])
    >>> ks = partition(g, FusionRules.from_decisions("x", pairs={("conv", "relu"): True}))
    >>> fit = {"shared": [0.0, 0.0, 0.0], "families": {"conv": [0.002, 1e-6, 2e-6]}}
    >>> round(model_edges_ms(g, ks, fit), 6)  # 0.002 + 400 in + 800 out elements
    0.004
    """
    from nnmeter.predictors.boundary import boundary_cost_ms

    owner = {n: k for k in kernels for n in k.nodes}
    total = 0.0
    for name in graph.input_names:
        readers = [owner[r] for r in graph.successors(name) if r in owner]
        if readers:
            fam = readers[0].kernel_type.family or readers[0].type
            n = math.prod(graph.node(name).output_shape)
            total += boundary_cost_ms(fit, fam, n, 0) - boundary_cost_ms(fit, fam, 0, 0) / 2
    for ref in graph.outputs:
        k = owner.get(ref.node)
        if k is not None:
            fam = k.kernel_type.family or k.type
            n = math.prod(graph.shape_of(ref))
            total += boundary_cost_ms(fit, fam, 0, n) - boundary_cost_ms(fit, fam, 0, 0) / 2
    return max(total, 0.0)


@dataclass(frozen=True)
class EdgesTerm(Term):
    """``coefficients``: the boundary fit (``shared`` and per-family [fixed ms, ms per input
    element, ms per output element]) of ``boundary.json``."""

    coefficients: dict[str, Any]

    name: ClassVar[str] = "edges"
    label: ClassVar[str] = "edge conversions (model inputs and outputs)"
    record_file: ClassVar[str | None] = "boundary.json"
    calibration: ClassVar[str] = "the boundary cost of single-kernel models"
    #: a runtime that cannot time the calibration's kernels (or nothing to fit) skips it
    #: with a warning: the build still trains, without this term
    calibration_skips: ClassVar[tuple[type, ...]] = (DatasetError, BackendError,
                                                     MeasurementError)
    keep_share: ClassVar[float] = 0.25

    @classmethod
    def wanted(cls, facts: DeviceFacts) -> bool:
        return facts.edge_conversions

    @classmethod
    def unfinished(cls, backend_id: str, dataset_dir: Any, facts: DeviceFacts) -> bool:
        """Rows without their own edge profile, where training takes them
        (``facts.row_edges``), or without their in-context time (``facts.row_context``)."""
        from nnmeter.predictors.boundary import planned_row_context, planned_row_edges

        return (facts.row_edges and planned_row_edges(backend_id, dataset_dir) > 0) or (
            facts.row_context and planned_row_context(backend_id, dataset_dir) > 0)

    @classmethod
    def planned_work(cls, backend_id: str, dataset_dir: Any) -> int:
        """Models the calibration still has to profile
        (:func:`~nnmeter.predictors.boundary.planned_boundary_work`; once its fit is
        complete, the rows without their own profile or in-context time)."""
        from nnmeter.predictors.boundary import planned_boundary_work, planned_row_context, \
            planned_row_edges, read_boundary
        from nnmeter.predictors.dataset import KernelDataset

        record = read_boundary(KernelDataset(dataset_dir, backend_id))
        if record is not None and not record.get("partial"):
            return (planned_row_edges(backend_id, dataset_dir)
                    + planned_row_context(backend_id, dataset_dir))
        return planned_boundary_work(backend_id, dataset_dir)

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: Any, *, before: Any = None,
                deadline: float | None = None, progress: bool = False) -> dict[str, Any]:
        """Measure ``boundary.json`` (:func:`~nnmeter.predictors.boundary.measure_boundary`),
        then, where the runtime's facts say so (``row_edges``) and in the time this
        calibration has left, profile the dataset's rows one by one, the slowest first
        (:func:`~nnmeter.predictors.boundary.measure_row_edges`): a profiled row loses
        its own edges in training, not the fit's; then (``row_context``) profile the
        layout-following rows that ran in the plain layout between two convolutions
        (:func:`~nnmeter.predictors.boundary.measure_row_context`)."""
        from nnmeter.predictors.boundary import measure_boundary, measure_row_profiles, \
            read_boundary
        from nnmeter.predictors.dataset import KernelDataset
        from nnmeter.predictors.facts import device_facts

        ds = KernelDataset(dataset_dir, backend_id)
        record = read_boundary(ds)
        if record is None or record.get("partial"):
            record = measure_boundary(backend_id, dataset_dir, deadline=deadline,
                                      progress=progress)
        # else: a complete fit, called again for the rows added since (unfinished)
        meta = ds.meta() or {}
        if not record.get("partial") and device_facts(meta.get("device")).row_edges:
            record.update(measure_row_profiles(backend_id, dataset_dir, deadline=deadline,
                                               progress=progress))
        return record

    @classmethod
    def fit(cls, ctx: FitContext) -> "EdgesTerm | None":
        from nnmeter.predictors.boundary import read_boundary, read_row_context, read_row_edges

        record = read_boundary(ctx.dataset)
        # a record kept with "apply": false made whole-model predictions worse
        if record is None or not record["fit"] or (
                record.get("apply", True) is False and cls.name not in ctx.force):
            return None
        term = cls(record["fit"])
        if ctx.facts is not None and ctx.facts.row_edges:
            # rows profiled one by one (row_edges.jsonl) lose their own measured edges,
            # not the fit's: a training-time input, not a parameter of the predictor
            object.__setattr__(term, "_row_edges", read_row_edges(ctx.dataset))
            if ctx.facts.row_context:
                object.__setattr__(term, "_row_context", read_row_context(ctx.dataset))
        return term

    def single_kernel_ms(self, kernel_type: Any, config: Any) -> float:
        """The edge conversions a single-kernel model of ``config`` pays (ms)."""
        from nnmeter.predictors.boundary import boundary_cost_ms, boundary_elements

        return boundary_cost_ms(self.coefficients, kernel_type.family or kernel_type.name,
                                *boundary_elements(kernel_type, config))

    def remove(self, data: dict[str, Any]) -> None:
        """Each row less its edges: a row profiled on its own keeps its kernel's share of
        the profile (:func:`~nnmeter.predictors.boundary.row_edge_shares`), any other
        loses the fitted cost of its sizes (floored at ``keep_share``)."""
        from nnmeter.kernels import KERNEL_TYPES
        from nnmeter.predictors.boundary import boundary_cost_ms, row_edge_shares

        rows = getattr(self, "_row_edges", None) or {}
        context = getattr(self, "_row_context", None) or {}
        for t, d in data.items():
            family = KERNEL_TYPES.get(t).family or t
            sub = np.array([boundary_cost_ms(self.coefficients, family, n_in, n_out)
                            for n_in, n_out in d.io_elements()])
            y = remove_floored(d.y, sub, keep_share=self.keep_share)
            if rows and d.stored is not None:
                share = row_edge_shares(rows, t, d.stored, context)
                y = np.where(np.isfinite(share), d.y * np.nan_to_num(share), y)
            d.y = y

    def model_ms(self, view: ModelView) -> float:
        return self.memo(view, lambda: model_edges_ms(view.graph, view.kernels, self.coefficients))
