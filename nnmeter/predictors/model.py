"""The model-level predictor: partition into kernels, predict each kernel, sum.

A :class:`LatencyPredictor` for a backend is *fusion rules + kernel measurements +
regressor settings*, trained deterministically (:func:`train_predictor`). Each kernel
is estimated by the first of:

1. ``regressor``: the regressor of its own kernel type (trained on that type's rows);
2. ``family``: the regressor of its family (``conv`` for ``conv-bn-hswish``), trained
   on every type of the family, whose features carry the fused tail as flags;
3. ``fallback``: a log-log regression on (FLOPs, memory bytes) trained on every kernel
   measured on the backend.

A type with enough rows of its own still goes to 2 when its family regressor scored
better on the type's held-out rows (:func:`~nnmeter.predictors.train.choose_regressors`).
Kernels estimated by 2 or 3 *for lack of data* are listed in ``LatencyReport.uncovered``
with how they were estimated; no kernel is ever counted as a silent 0 ms.

When the dataset holds the device's measured weight streaming rate
(``weight_stream.json``, :mod:`nnmeter.predictors.weight_stream`) and a model's kernels
move more bytes per inference than the last-level cache holds, its weights come from
memory once per inference while single-kernel measurements saw them hot:
:mod:`nnmeter.predictors.weight_refetch` lifts an fc kernel to the time of streaming
its weights and adds that time to the other kernels with weights.

A kernel the backend runs inside another one (an activation ORT folds into the
preceding convolution, a duplicate activation it merges;
:mod:`nnmeter.predictors.absorbed`) stays in the report with 0 ms and ``estimated_by``
``absorbed:<kernel type>``.

Examples
--------
>>> r = LatencyReport(total_ms=1.5, rows=(KernelRow("relu", ("r",), (1.0,), 1.5,
...                   "regressor"),), uncovered=(), backend_id="ort-cpu", device=None)
>>> r.as_dict()["total_ms"]
1.5
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nnmeter._gc import collector_paused
from nnmeter.errors import PredictorError
from nnmeter.ir.graph import ModelGraph
from nnmeter.predictors.composition import Composition, ModelView, TermRow
from nnmeter.predictors.features import fallback_features, model_input

__all__ = ["KernelRow", "LatencyReport", "LatencyPredictor", "PredictorSettings",
           "fallback_features", "FALLBACK_KEY", "TermRow", "type_fallback_key",
           "is_fallback_key"]

logger = logging.getLogger(__name__)

FALLBACK_KEY = "fallback"


def type_fallback_key(kernel_type: str) -> str:
    """The key of the fallback scaled to ``kernel_type``'s own rows
    (:func:`nnmeter.predictors.train.scaled_fallback`), for a type with rows but no
    regressor of its own.

    >>> type_fallback_key("add"), is_fallback_key(type_fallback_key("add"))
    ('fallback:add', True)
    """
    return f"{FALLBACK_KEY}:{kernel_type}"


def is_fallback_key(key: str) -> bool:
    """Whether an estimator key names the FLOPs/bytes fallback (plain or scaled to a
    type): its input is the fallback features, not the type's own."""
    return key == FALLBACK_KEY or key.startswith(FALLBACK_KEY + ":")


@dataclass(frozen=True)
class PredictorSettings:
    """Regressor settings of a predictor (part of its cache key).

    Attributes
    ----------
    regressor : str
        Registered regressor name for kernel types and families (``rf`` or ``lgbm``).
    min_type_samples : int
        Fewest rows a kernel type needs for its own regressor; fewer → family regressor.
    chain_correction : bool
        Subtract the dataset's measured chain excess (``chain_excess.json``,
        :mod:`nnmeter.predictors.chain`) from every kernel row when it has one.
    seed : int
        ``random_state`` of every regressor.
    overrides : dict
        Per kernel type hyper-parameter overrides.
    """

    regressor: str = "rf"
    min_type_samples: int = 30
    chain_correction: bool = True
    seed: int = 0
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KernelRow:
    """One kernel of a report. ``estimated_by`` is ``regressor``, ``family:<f>``,
    ``fallback``, ``fallback:<kernel type>`` (the fallback scaled to the type's own few
    rows), or ``absorbed:<kernel type>`` for a kernel the backend runs inside
    another one (0 ms of its own). ``predicted_ms`` is the kernel's time inside the
    model; ``base_ms`` the estimator's time before the composition terms named in
    ``terms`` adjusted it (equal when ``terms`` is empty)."""

    type: str
    nodes: tuple[str, ...]
    features: tuple[float, ...]
    predicted_ms: float
    estimated_by: str
    base_ms: float | None = None
    terms: tuple[str, ...] = ()
    #: (lo, hi) ms at the report's ``interval_level``; None without calibrated intervals
    interval_ms: tuple[float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "nodes": list(self.nodes), "features": list(self.features),
                "predicted_ms": self.predicted_ms, "estimated_by": self.estimated_by,
                "base_ms": self.predicted_ms if self.base_ms is None else self.base_ms,
                "terms": list(self.terms),
                "interval_ms": list(self.interval_ms) if self.interval_ms else None}


@dataclass(frozen=True)
class LatencyReport:
    """A model's predicted latency, kernel by kernel.

    Attributes
    ----------
    total_ms : float
        Sum of every row's ``predicted_ms`` plus every term's ``ms``.
    rows : tuple of KernelRow
        One per kernel, in topological order.
    uncovered : tuple of dict
        Kernels without a regressor of their own type: ``type``, ``nodes``,
        ``estimated_by``, ``predicted_ms``.
    backend_id : str
    device : dict or None
        The DeviceInfo (as a dict) the kernel data was measured on.
    device_mismatch : bool
        True when this machine is not the device of ``device``.
    device_name : str
        The readable name of the device predicted for (``epyc-zen4-avx512-2c``).
    device_selection : str
        How its data was chosen: ``this machine``, ``requested`` (``device=``/``--device``),
        ``nearest`` (this machine has no data of its own), or "" (a predictor trained
        from a directory).
    device_differences : tuple of str
        What differs between this machine and that device (empty when they are one).
    warnings : tuple of str
    overhead_ms : float
        The ``overhead`` term's ms (the runtime's fixed per-inference time).
    layout_ms : float
        The ``reorders`` and ``edges`` terms' ms together (layout conversions the whole
        model executes).
    terms : tuple of TermRow
        Every composition term of the predictor, in order: what it adds once per model
        (``ms``, part of ``total_ms``) and what it changed inside the kernel rows
        (``kernel_ms``, already in their ``predicted_ms``).
    interval_ms, interval_level : (float, float) and float, or None
        The prediction interval of ``total_ms`` and its coverage level
        (:mod:`nnmeter.predictors.intervals`); None when the device has no calibrated
        intervals. Every row carries its own ``interval_ms`` too.
    """

    total_ms: float
    rows: tuple[KernelRow, ...]
    uncovered: tuple[dict[str, Any], ...]
    backend_id: str
    device: dict[str, Any] | None
    device_mismatch: bool = False
    warnings: tuple[str, ...] = ()
    model: str = ""
    overhead_ms: float = 0.0
    layout_ms: float = 0.0
    terms: tuple[TermRow, ...] = ()
    device_name: str = ""
    device_selection: str = ""
    device_differences: tuple[str, ...] = ()
    interval_ms: tuple[float, float] | None = None
    interval_level: float | None = None

    def by_type(self) -> dict[str, tuple[int, float]]:
        """Kernel type → (count, summed predicted ms)."""
        out: dict[str, tuple[int, float]] = {}
        for r in self.rows:
            n, t = out.get(r.type, (0, 0.0))
            out[r.type] = (n + 1, t + r.predicted_ms)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "backend_id": self.backend_id, "total_ms": self.total_ms,
                "overhead_ms": self.overhead_ms, "layout_ms": self.layout_ms,
                "terms": [t.as_dict() for t in self.terms],
                "rows": [r.as_dict() for r in self.rows], "uncovered": list(self.uncovered),
                "device": self.device, "device_name": self.device_name,
                "device_selection": self.device_selection,
                "device_mismatch": self.device_mismatch,
                "device_differences": list(self.device_differences),
                "interval_ms": list(self.interval_ms) if self.interval_ms else None,
                "interval_level": self.interval_level,
                "warnings": list(self.warnings)}


class _StructureMemo:
    """Values per graph *structure*: a graph matches an entry when every node and output
    is equal. Buckets are keyed by the node names (their hashes are cached by Python,
    unlike those of the nodes); bounded (:attr:`limit` buckets, :attr:`per_bucket`
    graphs of one set of names, e.g. other widths)."""

    limit = 4096
    per_bucket = 16

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, ...], list[tuple[Any, Any]]] = {}

    @staticmethod
    def _key(graph: Any) -> tuple[tuple[str, ...], Any]:
        nodes = graph.nx._node
        return tuple(nodes), (tuple([d["node"] for d in nodes.values()]), tuple(graph.outputs))

    def get(self, graph: Any) -> tuple[Any, Any]:
        """(value or None, the key to :meth:`put` it under)."""
        key = self._key(graph)
        for seen, value in self._buckets.get(key[0], ()):
            try:
                if seen == key[1]:
                    return value, key
            except (TypeError, ValueError):  # attributes that do not compare
                continue
        return None, key

    def put(self, key: tuple[tuple[str, ...], Any], value: Any) -> None:
        if len(self._buckets) > self.limit:
            self._buckets.clear()
        entries = self._buckets.setdefault(key[0], [])
        if len(entries) >= self.per_bucket:
            del entries[0]
        entries.append((key[1], value))

    def clear(self) -> None:
        self._buckets.clear()


class _Batch:
    """The estimator work of one prediction batch: per estimator key, the distinct
    kernel rows (feature-cache entries) and their predicted times; ``memo`` holds what
    composition terms compute once per batch."""

    __slots__ = ("jobs", "hot", "preds", "hows", "memo")

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[list[tuple[Any, ...]], dict[int, int]]] = {}
        self.hot: dict[str, np.ndarray] = {}
        self.preds: dict[str, list[float]] = {}
        self.hows: dict[str, str] = {}
        self.memo: dict[str, Any] = {}


class LatencyPredictor:
    """Predicts model latency on one backend from per-kernel regressors and the
    composition terms (:mod:`nnmeter.predictors.composition`).

    Build with :func:`nnmeter.predictors.load_predictor` (cached) or
    :func:`nnmeter.predictors.train.train_predictor`.

    Parameters
    ----------
    backend_id : str
    rules : FusionRules
        The backend's fusion rules (for partitioning).
    regressors : dict
        ``"type:<kernel-type>"``, ``"family:<family>"`` and ``"fallback"`` → fitted
        regressor.
    device : dict, optional
        DeviceInfo dict of the kernel data.
    meta : dict, optional
        Provenance (cache key, sample counts, settings).
    composition : Composition, optional
        The terms training removed from the kernel rows, applied back in prediction
        (none: the plain sum of kernels).
    """

    def __init__(self, backend_id: str, rules: Any, regressors: dict[str, Any], *,
                 device: dict[str, Any] | None = None, meta: dict[str, Any] | None = None,
                 composition: Composition | None = None) -> None:
        if FALLBACK_KEY not in regressors:
            raise PredictorError(
                f"predictor for {backend_id} has no fallback regressor; uncovered kernels "
                f"would have no estimate. Retrain with train_predictor"
            )
        self.backend_id = backend_id
        self.rules = rules
        self.regressors = dict(regressors)
        self.device = device
        self.meta = dict(meta or {})
        self.composition = composition or Composition()
        self._feature_cache: dict[tuple[str, Any], tuple[Any, ...]] = {}
        #: (estimator key, id of a feature-cache entry) -> (that entry, predicted ms)
        self._pred_cache: dict[tuple[str, int], tuple[Any, float]] = {}
        # node names -> [((nodes, outputs), kernels)]
        self._partition_cache = _StructureMemo()
        # predict_many's totals per graph structure, for the composition they were made
        # with (a repeated graph in a NAS loop costs one lookup)
        self._totals: tuple[Any, _StructureMemo] | None = None
        self._device_check: tuple[bool, tuple[str, ...]] | None = None
        #: kernel type -> the type whose regressor predicts it (regressor_type)
        self._alias: dict[str, str] = {}
        #: (regressor key, kernel type) -> whether that regressor reads the type (_takes)
        self._takes_memo: dict[tuple[str, str], bool] = {}
        #: how :func:`~nnmeter.predictors.load_predictor` chose the data (a
        #: :class:`~nnmeter.devices.datasets.Resolution`), None when built from a folder
        self.resolution: Any = None
        #: the device warning already logged (once per predictor), if any
        self.logged_warning: str | None = None
        #: the files it was trained from (``load_predictor``'s memo checks them)
        self.source_files: list[str] = []
        #: the kernel dataset folder it was trained from (None when not loaded by
        #: ``load_predictor``); its speed-reference record is the build's speed
        self.dataset_dir: str | None = None
        #: calibrated prediction intervals (:mod:`nnmeter.predictors.intervals`) or None
        self.intervals: Any = None
        #: grouped convolutions get the ``gconv-*`` types where the data has them
        self.grouped = any(k.startswith(("type:gconv", "family:gconv")) for k in self.regressors)
        #: predict_many works segment by segment where it can
        #: (:mod:`nnmeter.predictors.segments`); False: whole models only (same figures)
        self.use_segments = True
        self._segments: Any = None
        #: NAS-Bench-201 tables per network definition, with the composition they were
        #: made for (:mod:`nnmeter.predictors.space_table`)
        self._space_tables: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def __repr__(self) -> str:
        types = sorted(k.split(":", 1)[1] for k in self.regressors if k.startswith("type:"))
        return f"LatencyPredictor({self.backend_id!r}, {len(types)} kernel types)"

    @property
    def kernel_types(self) -> list[str]:
        """Kernel types with a regressor of their own."""
        return sorted(k.split(":", 1)[1] for k in self.regressors if k.startswith("type:"))

    @property
    def overhead_ms(self) -> float:
        """The runtime's fixed per-inference time the model pays once (the ``overhead``
        term; 0 without one)."""
        term = self.composition.get("overhead")
        return float(term.overhead_ms) if term is not None else 0.0

    # -- internals ----------------------------------------------------------------
    def _family_by_choice(self, ktype_name: str, how: str) -> bool:
        """True when a family regressor estimated a type that has data of its own: the
        family won on the type's held-out rows (``choose_regressors``), so the kernel
        is covered, not a gap in the data."""
        return how.startswith("family:") and self._enough_rows(ktype_name)

    def _enough_rows(self, ktype_name: str) -> bool:
        """The type has the rows a regressor of its own needs (``min_type_samples``)."""
        least = int(self.meta.get("settings", {}).get("min_type_samples", 30))
        return int(self.meta.get("samples", {}).get(ktype_name, 0)) >= least

    def _for_backend(self, graph: Any) -> Any:
        """The graph as this backend's runtime runs it (a per-channel scale and shift
        folded into the convolution before it where the runtime does that:
        :func:`nnmeter.ir.canonical.for_backend`); the graph itself when that changes
        nothing."""
        from nnmeter.ir.canonical import for_backend

        return for_backend(graph, self.backend_id) if hasattr(graph, "nx") else graph

    def _has_data(self, ktype_name: str) -> bool:
        """A regressor of its own, or enough rows that its family regressor was chosen
        for it on its own held-out rows."""
        return f"type:{ktype_name}" in self.regressors or self._enough_rows(ktype_name)

    def regressor_type(self, ktype_name: str) -> str:
        """The kernel type whose regressor predicts ``ktype_name``: itself, or, when it
        has none and the backend folds a batch-norm into the convolution before it, the
        same kernel with the norm toggled (``conv-relu6`` → ``conv-bn-relu6``,
        :func:`~nnmeter.kernels.bn_equivalent`): an exporter that folded the norm
        itself leaves the kernel the runtime runs unchanged."""
        hit = self._alias.get(ktype_name)
        if hit is not None:
            return hit
        out = ktype_name
        if not self._has_data(ktype_name):
            from nnmeter.kernels import KERNEL_TYPES, bn_equivalent

            alt = bn_equivalent(ktype_name)
            head = ktype_name.split("-", 1)[0]
            if (alt is not None and self._has_data(alt) and alt in KERNEL_TYPES
                    and self.rules.fuses("conv" if head == "gconv" else head, "bn")):
                out = alt
        self._alias[ktype_name] = out
        return out

    def _estimator_key(self, ktype_name: str, family: str) -> str:
        ktype_name = self.regressor_type(ktype_name)
        if f"type:{ktype_name}" in self.regressors:
            return f"type:{ktype_name}"
        if family and f"family:{family}" in self.regressors \
                and self._takes(f"family:{family}", ktype_name):
            return f"family:{family}"
        own = type_fallback_key(ktype_name)
        return own if own in self.regressors else FALLBACK_KEY

    def _takes(self, key: str, ktype_name: str) -> bool:
        """Whether regressor ``key`` reads the model input of ``ktype_name``: a family's
        regressor is fitted on its members of one feature layout (``mul``), and a type
        of the family with no data here may have another (``mul-add-relu``, a
        squeeze-excite gate with its residual add): that type goes to the fallback."""
        hit = self._takes_memo.get((key, ktype_name))
        if hit is None:  # every prediction asks again; the regressors never change
            from nnmeter.kernels import KERNEL_TYPES

            width = getattr(self.regressors[key], "n_features_in_", None)
            kt = KERNEL_TYPES.get(ktype_name)
            names = kt.feature_names if kt is not None else ()
            hit = self._takes_memo[(key, ktype_name)] = (
                width is None or kt is None
                or model_input(names, np.zeros(len(names))).shape[-1] == width)
        return hit

    def _features(self, kernel: Any) -> tuple[Any, ...]:
        """(regressor input, fallback input, raw kernel features, weights (parameters;
        0 for a type without a ``params`` feature), kernel family, groups the regressor
        input stands for once each: :func:`_one_group`), cached per config."""
        key = (kernel.type, kernel.config)
        hit = self._feature_cache.get(key)
        if hit is None:
            kt = kernel.kernel_type
            alias = self.regressor_type(kernel.type)
            if alias != kernel.type:
                from nnmeter.kernels import KERNEL_TYPES

                kt = KERNEL_TYPES.get(alias)
            feats = kt.features(kernel.config)
            names = kt.feature_names
            params = float(feats[names.index("params")]) if "params" in names else 0.0
            per_group, groups = _one_group(kt, kernel.config)
            reg_feats = feats if per_group is None else kt.features(per_group)
            hit = (model_input(names, reg_feats),
                   fallback_features(kt, kernel.config, feats), feats, params,
                   getattr(kt, "family", ""), groups)
            if len(self._feature_cache) > 200_000:
                self._feature_cache.clear()
            self._feature_cache[key] = hit
        return hit

    def kernels(self, graph: Any) -> list[Any]:
        """The graph's kernels under this backend's fusion rules (memoised per graph
        structure, so re-predicting a graph in a NAS loop skips partitioning)."""
        from nnmeter.partition import partition

        kernels, key = self._partition_cache.get(graph)
        if kernels is not None:
            return kernels
        kernels = partition(graph, self.rules)
        if self.grouped:
            kernels = _grouped_types(kernels)
        self._partition_cache.put(key, kernels)
        return kernels

    def _estimate(self, kernels_per_graph: Sequence[Sequence[Any]]) -> tuple[_Batch, list[list[tuple[Any, ...]]]]:
        """Batch every kernel of every graph by estimator; one predict call per estimator.

        Returns the batch and, per graph, its slots ``(estimator key, row index, raw
        features, bytes the single-kernel model moves)`` in kernel order. Kernels repeat
        across a batch (NAS cells share configs): each distinct (type, config) is
        predicted once. A row's prediction does not depend on the other rows of its
        batch, so this gives the same numbers as predicting each kernel alone."""
        batch = _Batch()
        jobs = batch.jobs
        slots: list[list[tuple[Any, ...]]] = []
        key_of: dict[str, str] = {}
        # graphs of equal structure share one kernel list (see kernels()): read it once
        slots_of: dict[int, list[tuple[Any, ...]]] = {}
        # estimator key -> its job, per kernel type
        job_of: dict[str, tuple[str, list[tuple[Any, ...]], dict[int, int]]] = {}
        cached = self._feature_cache
        slot_of: dict[tuple[str, int], tuple[Any, ...]] = {}
        for kernels in kernels_per_graph:
            row_slots = slots_of.get(id(kernels))
            if row_slots is not None:
                slots.append(row_slots)
                continue
            row_slots = slots_of[id(kernels)] = []
            add_slot = row_slots.append
            for k in kernels:
                ktype, config = k.type, k.config
                # configs are mostly shared objects (the partitioner memoises them): by
                # identity first, which skips hashing the config; the kernels hold the
                # configs for the whole batch, so an id is not reused meanwhile
                slot = slot_of.get((ktype, id(config)))
                if slot is not None:
                    add_slot(slot)
                    continue
                hit = cached.get((ktype, config))  # self._features(k), cache first
                if hit is None:
                    hit = self._features(k)
                about = job_of.get(ktype)
                if about is None:
                    key = key_of.get(ktype)
                    if key is None:
                        family = getattr(k.kernel_type, "family", "")
                        key = key_of[ktype] = self._estimator_key(ktype, family)
                    job = jobs.get(key)
                    if job is None:
                        job = jobs[key] = ([], {})
                    about = job_of[ktype] = (key, *job)
                key, rows, index = about
                i = index.get(id(hit))
                if i is None:
                    i = index[id(hit)] = len(rows)
                    rows.append(hit)
                slot = slot_of[(ktype, id(config))] = (key, i, hit[2], hit[1][1])
                add_slot(slot)
            slots.append(row_slots)
        known = self._pred_cache
        for key, (rows, _) in jobs.items():
            col = 1 if is_fallback_key(key) else 0
            # a row predicted before (same estimator, same cached features) is not sent
            # to the regressor again: the regressors never change
            got = [known.get((key, id(hit))) for hit in rows]
            todo = [i for i, g in enumerate(got) if g is None]
            if todo:
                X = np.vstack([rows[i][col] for i in todo])
                fresh = self.regressors[key].predict(X)
                if col == 0 and any(rows[i][5] != 1 for i in todo):
                    # grouped convolutions: one group's time, once per group (_one_group)
                    fresh = fresh * np.array([rows[i][5] for i in todo])
                if len(known) > 400_000:
                    known.clear()
                for i, v in zip(todo, fresh.tolist()):
                    got[i] = (rows[i], v)  # the row is kept so that its id stays its own
                    known[(key, id(rows[i]))] = got[i]
            batch.preds[key] = [g[1] for g in got]
            batch.hot[key] = np.array(batch.preds[key])
            batch.hows[key] = "regressor" if key.startswith("type:") else key
        return batch, slots

    # -- public -------------------------------------------------------------------
    def predict(self, model: Any, *, check_device: bool = True) -> "LatencyReport":
        """Predict one model (ModelGraph or anything ``load_model`` reads).

        Raises
        ------
        PredictorError
            If a kernel's estimate is not a positive finite number.
        """
        graph = self._for_backend(_as_graph(model))
        kernels = self.kernels(graph)
        batch, all_slots = self._estimate([kernels])
        slots = all_slots[0]
        preds = batch.preds
        base = [preds[s[0]][s[1]] for s in slots]
        view = ModelView(graph, kernels, list(base), batch=batch, slots=slots)
        term_ms = self.composition.assemble(view)
        absorbed = view.absorbed
        iv = self.intervals
        rows, uncovered = [], []
        for j, (k, s) in enumerate(zip(kernels, slots)):
            ms, how, feats = view.ms[j], batch.hows[s[0]], s[2]
            used = tuple(view.adjusted.get(j, ()))
            if j in absorbed:  # runs inside another kernel: no time of its own
                rows.append(KernelRow(k.type, tuple(k.nodes), tuple(feats.tolist()), ms,
                                      f"absorbed:{kernels[absorbed[j]].type}", base[j], used,
                                      (0.0, 0.0) if iv is not None else None))
                continue
            if not (math.isfinite(ms) and ms > 0):
                raise PredictorError(
                    f"kernel {k.type} over {list(k.nodes)} got estimate {ms} ms from {how}; "
                    f"every kernel must get a positive time. Retrain the predictor"
                )
            band = iv.row(self.regressor_type(k.type), ms, own_regressor=how == "regressor") \
                if iv is not None else None
            rows.append(KernelRow(k.type, tuple(k.nodes), tuple(feats.tolist()), ms, how,
                                  base[j], used, band))
            if how != "regressor" and not self._family_by_choice(
                    self.regressor_type(k.type), how):
                uncovered.append({"type": k.type, "nodes": list(k.nodes), "estimated_by": how,
                                  "predicted_ms": ms})
        mismatch, diffs = self.check_device() if check_device else (False, ())
        warnings = []
        res = self.resolution
        if mismatch and not (res is not None and res.how == "requested"):
            warnings.append(self._mismatch_warning(diffs))
        far = self._far_outside(kernels, batch, slots)
        if far:
            shown = "; ".join(far[:3])
            more = f" (and {len(far) - 3} more)" if len(far) > 3 else ""
            warnings.append(f"{len(far)} kernel(s) far outside the range their regressor was "
                            f"trained on, so their estimates are guesses: {shown}{more}")
        if uncovered:
            warnings.append(f"{len(uncovered)} kernel(s) had no regressor of their own type "
                            f"and were estimated by a family regressor or the FLOPs/bytes "
                            f"fallback")
        terms = tuple(
            TermRow(t.name, t.label, ms, view.deltas.get(t.name, 0.0),
                    sum(1 for used in view.adjusted.values() if t.name in used))
            for t, ms in zip(self.composition.terms, term_ms))
        # exactly what a reader of the report adds up: the rows, then the terms
        total = float(sum(r.predicted_ms for r in rows)) + float(sum(term_ms))
        named = dict(zip(self.composition.names, term_ms))
        return LatencyReport(
            total_ms=total, rows=tuple(rows), overhead_ms=named.get("overhead", 0.0),
            layout_ms=named.get("reorders", 0.0) + named.get("edges", 0.0), terms=terms,
            uncovered=tuple(uncovered), backend_id=self.backend_id, device=self.device,
            device_mismatch=mismatch, warnings=tuple(warnings),
            model=getattr(graph, "name", ""), device_name=self.device_name,
            device_selection=res.how if res is not None else "",
            device_differences=tuple(diffs),
            interval_ms=iv.total(total) if iv is not None else None,
            interval_level=iv.level if iv is not None else None,
        )

    def _far_outside(self, kernels: Sequence[Any], batch: _Batch,
                     slots: Sequence[tuple[Any, ...]]) -> list[str]:
        """One line per kernel whose regressor input is far outside the training range
        (:meth:`~nnmeter.predictors.regressors.KernelRegressor.far_outside`), naming the
        kernel, the feature, its value and the range seen."""
        from nnmeter.kernels import KERNEL_TYPES

        flagged: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for key, (rows, _) in batch.jobs.items():
            reg = self.regressors[key]
            if getattr(reg, "feature_lo_", None) is None:
                continue
            col = 1 if is_fallback_key(key) else 0
            X = np.vstack([hit[col] for hit in rows])
            far = reg.far_outside(X)
            if far.any():
                flagged[key] = (X, far)
        out = []
        for k, s in zip(kernels, slots):
            got = flagged.get(s[0])
            if got is None or not got[1][s[1]].any():
                continue
            X, far_rows = got
            reg = self.regressors[s[0]]
            if is_fallback_key(s[0]):
                names: Sequence[str] = ("FLOPs", "bytes")
            else:
                alias = self.regressor_type(k.type)
                kt = k.kernel_type if alias == k.type else KERNEL_TYPES.get(alias)
                names = kt.feature_names
            x = X[s[1]:s[1] + 1]
            bad = np.flatnonzero(far_rows[s[1]][:len(names)])
            if bad.size:
                parts = ", ".join(
                    f"{names[i]}={_num(x[0, i])} (trained {_num(reg.feature_lo_[i])}–"
                    f"{_num(reg.feature_hi_[i])})" for i in bad[:2])
                out.append(f"{k.type} {k.nodes[0]!r}: {parts}")
        return out

    def interval(self, total_ms: float) -> tuple[float, float] | None:
        """The prediction interval of a model predicted at ``total_ms`` (for
        :meth:`predict_many`'s figures), at ``self.intervals.level``; None without
        calibrated intervals."""
        return self.intervals.total(total_ms) if self.intervals is not None else None

    def _segment_totals(self) -> Any:
        """The segment memo for the current composition, or None when a term is one
        :mod:`nnmeter.predictors.segments` does not know (or ``use_segments`` is off)."""
        if not self.use_segments:
            return None
        from nnmeter.predictors.segments import SegmentTotals

        held = self._segments
        if held is None or held[0] is not self.composition:
            seg = (SegmentTotals(self, _grouped_types if self.grouped else None)
                   if SegmentTotals.supports(self.composition) else None)
            held = self._segments = (self.composition, seg)
        return held[1]

    def predict_many(self, graphs: Sequence[Any]) -> list[float]:
        """Total predicted ms of each graph; kernels of all graphs are predicted in
        one batch per estimator (fast for NAS loops). Graphs that are chains of
        segments are predicted segment by segment, each distinct segment once
        (:mod:`nnmeter.predictors.segments`; the figures are the same).

        ``graphs`` may also hold NAS-Bench-201 configs (or zoo variants of them): those
        are looked up in the predictor's table of the space, each network built and
        predicted the first time it is asked for
        (:mod:`nnmeter.predictors.space_table`; the figures are those of the built
        graphs)."""
        if not all(type(g) is ModelGraph for g in graphs):
            from nnmeter.predictors.space_table import nasbench201_config, predict_configs

            configs = {i: c for i, g in enumerate(graphs)
                       if not isinstance(g, ModelGraph)
                       and (c := nasbench201_config(g)) is not None}
            if configs:
                out_all: list[float] = [0.0] * len(graphs)
                for i, t in zip(configs, predict_configs(self, list(configs.values()))):
                    out_all[i] = t
                rest = [i for i in range(len(graphs)) if i not in configs]
                if rest:
                    for i, t in zip(rest, self.predict_many([graphs[i] for i in rest])):
                        out_all[i] = t
                return out_all
        graphs = [_as_graph(g) for g in graphs]
        # A batch allocates many small, acyclic objects; with the cyclic collector on,
        # its full passes over the caller's graphs cost more than the prediction. It is
        # paused for the batch (nothing created here needs it) and restored after
        # (nnmeter._gc).
        with collector_paused():
            if self._totals is None or self._totals[0] is not self.composition:
                self._totals = (self.composition, _StructureMemo())
            memo = self._totals[1]
            out: list[float | None] = []
            keys = []
            for g in graphs:
                total, key = memo.get(g) if isinstance(g, ModelGraph) else (None, None)
                out.append(total)
                keys.append(key)
            todo = [i for i, t in enumerate(out) if t is None]
            if todo:
                for i, t in zip(todo, self._predict_new([graphs[i] for i in todo])):
                    out[i] = t
                    if keys[i] is not None:
                        memo.put(keys[i], t)
            return out  # type: ignore[return-value]

    def _predict_new(self, graphs: Sequence[Any]) -> list[float]:
        """:meth:`predict_many` for graphs not in its memo (the collector paused)."""
        seg = self._segment_totals()
        if seg is not None:
            got = seg.totals(list(graphs))
            rest = [i for i, t in enumerate(got) if t is None]
            if rest:
                for i, t in zip(rest, self._predict_whole([graphs[i] for i in rest])):
                    got[i] = t
            return got  # type: ignore[return-value]
        return self._predict_whole(graphs)

    def _predict_whole(self, graphs: Sequence[Any]) -> list[float]:
        """:meth:`predict_many` over whole models (the collector already paused)."""
        graphs = [self._for_backend(g) for g in graphs]
        kernels = [self.kernels(g) for g in graphs]
        batch, slots = self._estimate(kernels)
        preds, assemble = batch.preds, self.composition.assemble
        # graphs of one structure share their kernel and slot lists: one total each
        done: dict[int, float] = {}
        out = []
        for g, ks, sl in zip(graphs, kernels, slots):
            total = done.get(id(sl))
            if total is None:
                view = ModelView(g, ks, [preds[s[0]][s[1]] for s in sl], batch=batch,
                                 slots=sl, track=False)
                term_ms = assemble(view)
                total = float(sum(view.ms)) + float(sum(term_ms))
                done[id(sl)] = total
            out.append(total)
        return out

    @property
    def device_name(self) -> str:
        """The readable name of the device the kernel data was measured on."""
        if self.resolution is not None and self.resolution.dataset.device_name:
            return self.resolution.dataset.device_name
        return str((self.device or {}).get("name") or "")

    def _mismatch_warning(self, diffs: Sequence[str]) -> str:
        res, b = self.resolution, self.backend_id
        here = (res.local.get("name") if res is not None else "") or "this machine"
        there = self.device_name or "another device"
        # the dataset id names the source unambiguously (two devices of one CPU can
        # differ in settings only)
        source = res.dataset.dataset_id if res is not None else there
        if res is not None and res.how == "nearest":
            return (f"no {b} predictor for this machine ({here}); predicted with the nearest "
                    f"device's, {there} (differs in: {', '.join(diffs)}), so the times are "
                    f"that device's and may be far off here. Build one here in about ten "
                    f"minutes: `nnmeter build --backend {b} --transfer-from {source} "
                    f"--budget-minutes 10`")
        return (f"the kernel data of {b} was measured on another device ({there}; differs "
                f"in: {', '.join(diffs)}); predictions may be far off on {here}. Build a "
                f"predictor here with `nnmeter build --backend {b} --transfer-from "
                f"{source} --budget-minutes 10`")

    def check_device(self) -> tuple[bool, tuple[str, ...]]:
        """(mismatch, what differs) of this machine against the data's device.

        Uses the resolution :func:`nnmeter.predictors.load_predictor` made, else a cheap
        DeviceInfo of this machine (the runtime's version from package metadata; the
        runtime is not started).
        """
        if self._device_check is None:
            if self.resolution is not None:
                self._device_check = (self.resolution.mismatch,
                                      tuple(self.resolution.differences))
            else:
                self._device_check = _compare_device(self.backend_id, self.device)
            if self._device_check[0] and not (self.resolution is not None
                                              and self.resolution.how == "requested"):
                self.logged_warning = self._mismatch_warning(self._device_check[1])
                logger.warning("%s", self.logged_warning)
        return self._device_check


def _num(v: float) -> str:
    return f"{v:.4g}"


def _one_group(kt: Any, config: Any) -> tuple[Any, int]:
    """A grouped convolution (1 < groups < channels) as one of its groups, and the
    number of groups: ``(config of one group, groups)``, or ``(None, 1)`` for any other
    kernel.

    The kernel data holds dense convolutions only (the zoo has none with groups), and a
    dense regressor reads a grouped one as a cheap dense one of the same channels. The
    runtimes run a grouped convolution as one small dense convolution per group (ORT's
    MLAS loops over the groups), so one group's predicted time, once per group, stands
    for it; the fused tail over all channels is the tail over one group's, per group."""
    g = getattr(config, "groups", 1) or 1
    if g <= 1 or getattr(kt, "family", "") != "conv":
        return None, 1
    cin, cout = getattr(config, "cin", 0), getattr(config, "cout", 0)
    if not cin or not cout or cin % g or cout % g:
        return None, 1
    import dataclasses

    return dataclasses.replace(config, cin=cin // g, cout=cout // g, groups=1), g


def _grouped_types(kernels: list[Any]) -> list[Any]:
    """``kernels`` with every grouped convolution (1 < groups < cin) as its ``gconv-*``
    type (:class:`~nnmeter.kernels.conv.GroupedConvKernel`), the others unchanged (the
    list itself when there is none)."""
    from nnmeter.kernels import KERNEL_TYPES, Kernel
    from nnmeter.kernels.conv import GroupedConvConfig, is_grouped

    out = None
    for i, k in enumerate(kernels):
        if not k.type.startswith("conv") or not is_grouped(k.config):
            continue
        name = "g" + k.type
        if name not in KERNEL_TYPES:
            continue
        if out is None:
            out = list(kernels)
        g = object.__new__(Kernel)
        g.__dict__.update(type=name, nodes=k.nodes, ops=k.ops,
                          config=GroupedConvConfig.of(k.config))
        out[i] = g
    return kernels if out is None else out


def _as_graph(model: Any) -> Any:
    if isinstance(model, ModelGraph):
        return model
    from nnmeter.frontends import load_model

    return load_model(model)


def current_device(backend_id: str) -> dict[str, Any]:
    """This machine's DeviceInfo for ``backend_id`` as a dict (no runtime import)."""
    from nnmeter.devices.datasets import local_device

    return local_device(backend_id).as_dict()


def _compare_device(backend_id: str, device: dict[str, Any] | None) -> tuple[bool, tuple[str, ...]]:
    if not device:
        return True, ("no device recorded",)
    try:
        from nnmeter.devices.datasets import differences, local_device

        local = local_device(backend_id)
    except Exception as err:  # an unknown backend here must not break prediction
        logger.debug("cannot fingerprint %s: %s", backend_id, err)
        return False, ()
    # the ISA the kernels dispatch on is compared too: two CPUs of one model name can
    # differ there (an AVX-512 machine's data runs 1.6-1.9x slower on an AVX2 one)
    diffs = differences(local, device)
    return bool(diffs), tuple(diffs)
