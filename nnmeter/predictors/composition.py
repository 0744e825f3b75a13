"""Composition: what a whole model does that its kernels measured alone do not.

A prediction is the sum of the kernels' regressed times plus an ordered list of
*terms* behind one interface (:class:`Term`). Each term is a small frozen record of
fitted parameters that knows

- its calibration record (one file under the dataset, measured by the builder:
  :meth:`Term.measure` / :meth:`Term.write`), if it has one;
- what it removes from every single-kernel measurement in training
  (:meth:`Term.fit` reads the record and fits on the rows as the earlier terms left
  them, :meth:`Term.remove` subtracts);
- how it adjusts kernel times inside a model (:meth:`Term.adjust`: weights refetched
  past the cache, kernels the runtime runs inside others);
- what it adds once per model (:meth:`Term.model_ms`: per-inference overhead, layout
  reorders, edge conversions).

The built-in terms, in order, are registered in :mod:`nnmeter.predictors.terms`.
Training is ``net times = composition applied to raw rows``
(:meth:`Composition.fit`); prediction is ``kernels + terms``
(:meth:`Composition.assemble`), with the same records in the same order. Removal is
floored the same way for every term (:func:`remove_floored`).

Examples
--------
>>> import numpy as np
>>> remove_floored(np.array([1.0, 0.2]), 0.3, keep_share=0.5).tolist()
[0.7, 0.1]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import PredictorError
from nnmeter.predictors.facts import DeviceFacts

__all__ = ["Term", "FitContext", "ModelView", "Composition", "remove_floored",
           "TermRow", "fit_context"]


def remove_floored(y: np.ndarray, amount: Any, *, keep_share: float) -> np.ndarray:
    """Row times ``y`` less ``amount`` (a scalar or one value per row), never below
    ``keep_share`` of ``y``: the one floor rule of every term's removal (a calibration
    constant must not wipe out a tiny kernel)."""
    return np.maximum(y - amount, keep_share * y)


@dataclass
class FitContext:
    """What a term sees when it is fitted in training.

    ``data`` maps kernel type → :class:`~nnmeter.predictors.kernel_data.KernelData`,
    as the earlier terms left it (their removals done). ``settings`` is the predictor's
    :class:`~nnmeter.predictors.model.PredictorSettings`.
    """

    backend_id: str
    dataset: Any
    data: dict[str, Any]
    facts: DeviceFacts
    settings: Any
    #: terms applied even where their record says not to (``"apply": false``)
    force: frozenset[str] = frozenset()


def fit_context(backend_id: str, dataset: Any, settings: Any = None, *,
                keep: Any = None, force: Sequence[str] = ()) -> FitContext:
    """A :class:`FitContext` over every kernel type of ``dataset`` (a KernelDataset),
    with the facts of the device its ``dataset.json`` records.

    Raises
    ------
    PredictorError
        If the dataset holds no usable kernel measurements.
    """
    from nnmeter.predictors.facts import device_facts
    from nnmeter.predictors.kernel_data import load_all_kernel_data

    data = load_all_kernel_data(dataset, keep)
    if not data:
        raise PredictorError(
            f"no kernel measurements for {backend_id} in {dataset.directory}; build them "
            f"with `nnmeter build --backend {backend_id}`")
    meta = dataset.meta() or {}
    return FitContext(backend_id, dataset, data, device_facts(meta.get("device")), settings,
                      frozenset(force))


class ModelView:
    """One model while the composition assembles it: its graph, its kernels, each
    kernel's current time (``ms``, adjusted in place by kernel-level terms) and which
    terms adjusted which kernel (``adjusted``: kernel index → term names).

    ``absorbed`` (kernel index → index of the kernel it runs inside) is set by the
    absorbed term and read by the terms after it. ``batch`` is shared by every model of
    one prediction batch (terms keep batch-wide arrays there); ``slots`` are the batch
    rows of this model's kernels (see ``LatencyPredictor._estimate``).
    """

    __slots__ = ("graph", "kernels", "ms", "adjusted", "deltas", "absorbed", "batch", "slots",
                 "track")

    def __init__(self, graph: Any, kernels: Sequence[Any], ms: list[float], *,
                 batch: Any = None, slots: Sequence[Any] = (), track: bool = True) -> None:
        self.graph = graph
        self.kernels = kernels
        self.ms = ms
        self.adjusted: dict[int, list[str]] = {}
        #: term name -> how much it changed the kernels' summed time (when tracking)
        self.deltas: dict[str, float] = {}
        self.absorbed: Mapping[int, int] = {}
        self.batch = batch
        self.slots = slots
        #: record which term adjusted which kernel (reports); off in batch totals
        self.track = track

    def mark(self, index: int, term: str) -> None:
        if self.track:
            self.adjusted.setdefault(index, []).append(term)


@dataclass(frozen=True)
class TermRow:
    """One term of a report: ``ms`` is what it adds to the total once per model;
    ``kernel_ms`` what it changed inside the kernel rows (already in their times);
    ``kernels`` how many rows it adjusted."""

    name: str
    label: str
    ms: float
    kernel_ms: float = 0.0
    kernels: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "ms": self.ms,
                "kernel_ms": self.kernel_ms, "kernels": self.kernels}


class Term:
    """Base of every composition term (subclasses are frozen dataclasses whose fields
    are the fitted parameters; see the module docstring).

    Class attributes
    ----------------
    name : str
        Registry name, shown in reports and stored in predictor caches.
    label : str
        What the term is, in words, for the text report.
    record_file : str or None
        Its calibration record under the dataset directory (part of the cache key).
    calibration : str
        What the builder's calibration measures (for the log).
    calibration_skips : tuple of exception types
        Errors that skip its calibration with a warning instead of failing a build.
    keep_share : float
        Share of a row that its removal never goes below (:func:`remove_floored`).
    measures_after : bool
        Its calibration needs the composition of the terms ahead of it (``before``).
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    record_file: ClassVar[str | None] = None
    calibration: ClassVar[str] = ""
    calibration_skips: ClassVar[tuple[type, ...]] = ()
    keep_share: ClassVar[float] = 0.0
    #: its calibration measures what remains once the terms ahead of it are removed
    measures_after: ClassVar[bool] = False

    def __post_init__(self) -> None:
        # per-kernel-list memo of model-level work (not a parameter)
        object.__setattr__(self, "_memo", {})

    # -- calibration (builder) -------------------------------------------------
    @classmethod
    def wanted(cls, facts: DeviceFacts) -> bool:
        """Whether a build on a device with ``facts`` measures this term's record."""
        return cls.record_file is not None

    @classmethod
    def unfinished(cls, backend_id: str, dataset_dir: str | os.PathLike,
                   facts: DeviceFacts) -> bool:
        """Whether a complete record still leaves measuring to do (rows added since it
        was written that the term measures one by one); the builder then calls
        :meth:`measure` again."""
        return False

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: str | os.PathLike, *,
                before: "Composition | None" = None, deadline: float | None = None,
                progress: bool = False) -> dict[str, Any]:
        """Measure the calibration record on this device (the builder calls it once per
        dataset, when the record does not exist yet or is ``partial``). ``before`` is the
        composition of the terms ahead of this one, fitted on the dataset, for a term
        whose share is what remains once theirs is removed.

        ``deadline`` (a ``time.monotonic()`` time; None: no limit) stops the measuring
        between points: the record then says ``"partial": true`` with
        ``points_planned`` and ``points_measured``, or, with too little to fit, one of
        ``calibration_skips`` is raised. Points are kept in
        ``<dataset_dir>/<record_file stem>.points.jsonl`` as they are measured, and a
        later call measures only those missing (the builder removes the file once the
        complete record is written). ``progress`` shows a progress bar.

        A term may also say how much its calibration still has to measure, as a
        classmethod ``planned_work(backend_id, dataset_dir) -> int`` (measurements
        times rounds): :func:`nnmeter.builder.calibrate` splits its time by it."""
        raise NotImplementedError(f"term {cls.name!r} has no calibration to measure")

    @classmethod
    def write(cls, dataset_dir: str | os.PathLike, record: dict[str, Any]) -> Path:
        """Write the record atomically to ``<dataset_dir>/<record_file>``."""
        from nnmeter.predictors.dataset import write_calibration

        if cls.record_file is None:
            raise NotImplementedError(f"term {cls.name!r} keeps no record")
        return write_calibration(dataset_dir, cls.record_file, record)

    # -- training --------------------------------------------------------------
    @classmethod
    def fit(cls, ctx: FitContext) -> "Term | None":
        """The fitted term for a dataset, or None when it does not apply there."""
        raise NotImplementedError

    def remove(self, data: dict[str, Any]) -> None:
        """Subtract what this term adds from every training row's ``y`` (in place)."""

    # -- prediction ------------------------------------------------------------
    def adjust(self, view: ModelView) -> None:
        """Adjust the kernel times of one model in ``view.ms`` (in place)."""

    def model_ms(self, view: ModelView) -> float:
        """What this term adds to the model once (ms)."""
        return 0.0

    def memo(self, view: ModelView, compute: Any) -> Any:
        """``compute()`` once per kernel list: the predictor hands back one list per
        graph structure, so a repeated graph's model-level work is looked up."""
        cache = self._memo  # type: ignore[attr-defined]
        hit = cache.get(id(view.kernels))
        if hit is not None and hit[0] is view.kernels:
            return hit[1]
        value = compute()
        if len(cache) > 4096:
            cache.clear()
        cache[id(view.kernels)] = (view.kernels, value)
        return value

    # -- record ----------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """The fitted parameters as JSON-able values."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "Term":
        """The term from :meth:`params` (read back from a predictor cache).

        Raises
        ------
        PredictorError
            If a parameter is missing or unknown.
        """
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        if set(params) != names:
            raise PredictorError(
                f"composition term {cls.name!r}: stored parameters {sorted(params)} do not "
                f"match {sorted(names)}; the predictor cache is stale, it will be rebuilt")
        return cls(**{k: _from_json(cls, k, v) for k, v in params.items()})


def _jsonable(v: Any) -> Any:
    if isinstance(v, frozenset):
        return sorted(v)
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def _from_json(cls: type, name: str, v: Any) -> Any:
    kind = {f.name: f.type for f in fields(cls)}[name]  # type: ignore[arg-type]
    if isinstance(kind, str) and kind.startswith("frozenset") and isinstance(v, list):
        return frozenset(v)
    if isinstance(kind, str) and kind.startswith("tuple") and isinstance(v, list):
        return tuple(v)
    return v


@dataclass(frozen=True)
class Composition:
    """The ordered terms of one predictor (see the module docstring)."""

    terms: tuple[Term, ...] = ()

    @classmethod
    def fit(cls, ctx: FitContext, registry: Any, *, names: Sequence[str] | None = None,
            until: str | None = None) -> "Composition":
        """Fit every term of ``registry`` (:data:`nnmeter.predictors.terms.TERMS`; or
        those in ``names``) in order on ``ctx.data``, each removing its share before the
        next is fitted; stop before ``until``."""
        out = []
        TERMS = registry
        for name in TERMS.ordered():
            if name == until:
                break
            if names is not None and name not in names:
                continue
            term = TERMS.get(name).fit(ctx)
            if term is not None:
                term.remove(ctx.data)
                out.append(term)
        return cls(tuple(out))

    def get(self, name: str) -> Term | None:
        """The fitted term called ``name``, or None."""
        for t in self.terms:
            if t.name == name:
                return t
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.terms)

    def assemble(self, view: ModelView) -> list[float]:
        """Apply every term to one model in order: kernel adjustments in ``view.ms``,
        and each term's once-per-model ms (returned, one per term)."""
        out = []
        track = view.track
        for t in self.terms:
            if track:
                before = sum(view.ms)
                t.adjust(view)
                view.deltas[t.name] = sum(view.ms) - before
            else:
                t.adjust(view)
            out.append(t.model_ms(view))
        return out

    def records(self) -> list[dict[str, Any]]:
        """JSON-able records of the terms (for a predictor cache)."""
        return [{"name": t.name, "params": t.params()} for t in self.terms]

    @classmethod
    def from_records(cls, records: Any, registry: Any) -> "Composition":
        """The composition from :meth:`records`, with the term classes of ``registry``.

        Raises
        ------
        PredictorError
            If the records are malformed or name an unknown term.
        """
        TERMS = registry

        if not isinstance(records, list):
            raise PredictorError(f"composition records must be a list; got "
                                 f"{type(records).__name__}")
        out = []
        for rec in records:
            if not isinstance(rec, Mapping) or not isinstance(rec.get("params"), Mapping) \
                    or rec.get("name") not in TERMS:
                raise PredictorError(f"bad composition record {rec!r}; known terms: "
                                     f"{', '.join(TERMS.ordered())}")
            out.append(TERMS.get(rec["name"]).from_params(rec["params"]))
        return cls(tuple(out))
