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

import gc
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nnmeter.errors import PredictorError
from nnmeter.ir.graph import ModelGraph
from nnmeter.predictors.absorbed import absorbed_kernels
from nnmeter.predictors.features import model_input
from nnmeter.predictors.layout import LAYOUT_BLOCK, model_reorders
from nnmeter.predictors.reorder import reorder_cost_ms
from nnmeter.predictors.weight_refetch import STREAMING_FAMILIES, refetch_many_ms
from nnmeter.predictors.weight_stream import stream_floor_ms

__all__ = ["KernelRow", "LatencyReport", "LatencyPredictor", "PredictorSettings",
           "fallback_features", "FALLBACK_KEY"]

logger = logging.getLogger(__name__)

FALLBACK_KEY = "fallback"


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
    ``fallback``, or ``absorbed:<kernel type>`` for a kernel the backend runs inside
    another one (0 ms of its own)."""

    type: str
    nodes: tuple[str, ...]
    features: tuple[float, ...]
    predicted_ms: float
    estimated_by: str

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "nodes": list(self.nodes), "features": list(self.features),
                "predicted_ms": self.predicted_ms, "estimated_by": self.estimated_by}


@dataclass(frozen=True)
class LatencyReport:
    """A model's predicted latency, kernel by kernel.

    Attributes
    ----------
    total_ms : float
        Sum of every row's ``predicted_ms`` plus ``overhead_ms``.
    rows : tuple of KernelRow
        One per kernel, in topological order.
    uncovered : tuple of dict
        Kernels without a regressor of their own type: ``type``, ``nodes``,
        ``estimated_by``, ``predicted_ms``.
    backend_id : str
    device : dict or None
        The DeviceInfo (as a dict) the kernel data was measured on.
    device_mismatch : bool
        True when the current device's fingerprint differs from ``device``.
    warnings : tuple of str
    overhead_ms : float
        The runtime's fixed per-inference time, counted once per model.
    layout_ms : float
        Layout reorders the whole model executes (ORT NCHWc ReorderInput/Output
        where a blocked tensor meets an op that needs NCHW); included in ``total_ms``.
        Kernel rows exclude the reorders of their single-kernel measurement.
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
                "rows": [r.as_dict() for r in self.rows], "uncovered": list(self.uncovered),
                "device": self.device, "device_mismatch": self.device_mismatch,
                "warnings": list(self.warnings)}


def fallback_features(kernel_type: Any, config: Any, features: np.ndarray | None = None) -> np.ndarray:
    """[FLOPs, memory bytes] of a kernel, the input of the fallback regressor.

    Taken from the kernel type's feature vector when it names ``FLOPs``/``bytes``,
    else from the cost of its single-kernel graph.
    """
    names = tuple(getattr(kernel_type, "feature_names", ()))
    if features is not None and "bytes" in names:
        flops = float(features[names.index("FLOPs")]) if "FLOPs" in names else 0.0
        return np.array([flops, float(features[names.index("bytes")])])
    try:
        c = kernel_type.cost(config)
        return np.array([float(c.flops), float(c.memory_bytes)])
    except Exception as err:  # unbuildable kernels (unknown ops) still get an estimate
        logger.debug("no cost for %s: %s", getattr(kernel_type, "name", kernel_type), err)
        return np.zeros(2)


def model_edges_ms(graph: Any, kernels: Sequence[Any], fit: dict[str, Any]) -> float:
    """Edge conversions a whole model pays at its own inputs and outputs, from the fit
    training removed from every single-kernel row (:mod:`nnmeter.predictors.boundary`):
    each graph input at the input rate of the family of the kernel that reads it, each
    output at the output rate of the family of the kernel that writes it, and the fixed
    part of those two families, half each.

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


class LatencyPredictor:
    """Predicts model latency on one backend from per-kernel regressors.

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
    overhead_ms : float
        The runtime's fixed per-inference time, added once per model; kernel
        regressors predict net kernel times (see :func:`~nnmeter.predictors.train.train_predictor`).
    """

    def __init__(self, backend_id: str, rules: Any, regressors: dict[str, Any], *,
                 device: dict[str, Any] | None = None, meta: dict[str, Any] | None = None,
                 overhead_ms: float = 0.0) -> None:
        if FALLBACK_KEY not in regressors:
            raise PredictorError(
                f"predictor for {backend_id} has no fallback regressor; uncovered kernels "
                f"would have no estimate. Retrain with train_predictor"
            )
        self.backend_id = backend_id
        self.overhead_ms = float(overhead_ms)
        self.rules = rules
        self.regressors = dict(regressors)
        self.device = device
        self.meta = dict(meta or {})
        self._feature_cache: dict[tuple[str, Any], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # node names -> [((nodes, outputs), kernels)]
        self._partition_cache: dict[tuple[str, ...], list[tuple[Any, list[Any]]]] = {}
        self._device_check: tuple[bool, tuple[str, ...]] | None = None
        # id(kernel list) -> (that list, layout ms); (type, config, block) -> reorders
        self._layout_cache: dict[int, tuple[list[Any], float]] = {}
        self._absorbed_cache: dict[int, tuple[list[Any], dict[int, int]]] = {}
        self._reorder_memo: dict[Any, tuple[int, int]] = {}
        cost = self.meta.get("reorder_cost")
        self._layout_block = LAYOUT_BLOCK.get(backend_id.split("@")[0], 0) if cost else 0
        self._reorder_cost = (float(cost[0]), float(cost[1])) if cost else (0.0, 0.0)
        # the profiled reorder cost (nnmeter.predictors.reorder), in place of the line
        self._reorder_curve = self.meta.get("reorder_curve") or None
        # bytes/ms at which the device streams weights from memory (None: no floor);
        # see nnmeter.predictors.weight_stream
        self._stream_rate = float(self.meta.get("weight_stream_bytes_per_ms") or 0.0)
        # the floor holds for models moving more bytes per inference than this
        self._stream_llc = float(self.meta.get("weight_stream_llc_bytes") or 0.0)
        # whether kernels that re-read their weights pay the fetch on top (else every
        # kernel only gets the streaming floor); per dataset, in weight_stream.json
        self._stream_refetch = bool(self.meta.get("weight_stream_refetch"))
        # the edge-conversion fit training removed from every row (boundary.json): a
        # model pays it once, at its own inputs and outputs
        self._edges = self.meta.get("boundary") or None

    def __repr__(self) -> str:
        types = sorted(k.split(":", 1)[1] for k in self.regressors if k.startswith("type:"))
        return f"LatencyPredictor({self.backend_id!r}, {len(types)} kernel types)"

    @property
    def kernel_types(self) -> list[str]:
        """Kernel types with a regressor of their own."""
        return sorted(k.split(":", 1)[1] for k in self.regressors if k.startswith("type:"))

    # -- internals ----------------------------------------------------------------
    def _family_by_choice(self, ktype_name: str, how: str) -> bool:
        """True when a family regressor estimated a type that has data of its own: the
        family won on the type's held-out rows (``choose_regressors``), so the kernel
        is covered, not a gap in the data."""
        if not how.startswith("family:"):
            return False
        least = int(self.meta.get("settings", {}).get("min_type_samples", 30))
        return int(self.meta.get("samples", {}).get(ktype_name, 0)) >= least

    def _estimator_key(self, ktype_name: str, family: str) -> str:
        if f"type:{ktype_name}" in self.regressors:
            return f"type:{ktype_name}"
        if family and f"family:{family}" in self.regressors:
            return f"family:{family}"
        return FALLBACK_KEY

    def _features(self, kernel: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool]:
        """(regressor input, fallback input, raw kernel features, time to stream its
        weights once, whether it reads each weight once), cached per config. The
        streaming time is :func:`~nnmeter.predictors.weight_stream.stream_floor_ms`
        (0 without a measured rate or for kernels without weights); see
        :mod:`nnmeter.predictors.weight_refetch` for how it enters a cold model."""
        key = (kernel.type, kernel.config)
        hit = self._feature_cache.get(key)
        if hit is None:
            kt = kernel.kernel_type
            feats = kt.features(kernel.config)
            names = kt.feature_names
            floor = stream_floor_ms(feats[names.index("params")], self._stream_rate) \
                if self._stream_rate and "params" in names else 0.0
            hit = (model_input(names, feats),
                   fallback_features(kt, kernel.config, feats), feats, floor,
                   getattr(kt, "family", "") in STREAMING_FAMILIES)
            if len(self._feature_cache) > 200_000:
                self._feature_cache.clear()
            self._feature_cache[key] = hit
        return hit

    def kernels(self, graph: Any) -> list[Any]:
        """The graph's kernels under this backend's fusion rules (memoised per graph
        structure, so re-predicting a graph in a NAS loop skips partitioning)."""
        from nnmeter.partition import partition

        nodes = graph.nx._node
        # Buckets are keyed by the node names (their hashes are cached by Python, unlike
        # those of the nodes); a graph matches an entry only when every node and output
        # is equal.
        bucket = tuple(nodes)
        sig = (tuple([d["node"] for d in nodes.values()]), tuple(graph.outputs))
        entries = self._partition_cache.get(bucket)
        if entries:
            for seen, kernels in entries:
                try:
                    if seen == sig:
                        return kernels
                except (TypeError, ValueError):  # attributes that do not compare
                    continue
        kernels = partition(graph, self.rules)
        if len(self._partition_cache) > 4096:
            self._partition_cache.clear()
        entries = self._partition_cache.setdefault(bucket, [])
        if len(entries) >= 16:  # many graphs with these names (e.g. other widths)
            del entries[0]
        entries.append((sig, kernels))
        return kernels

    def _estimate(self, kernels_per_graph: Sequence[Sequence[Any]]) -> list[list[tuple[float, str, np.ndarray]]]:
        """Batch every kernel of every graph by estimator; one predict call per estimator.

        Kernels repeat across a batch (NAS cells share configs): each distinct
        (type, config) is predicted once. A row's prediction does not depend on the
        other rows of its batch, so this gives the same numbers as predicting each kernel
        alone."""
        # estimator key -> (feature-cache entries, entry id -> row index); the entries are
        # held so that their ids stay theirs for the whole batch
        jobs: dict[str, tuple[list[tuple[np.ndarray, ...]], dict[int, int]]] = {}
        slots: list[list[tuple[str, int, np.ndarray]]] = []
        key_of: dict[str, str] = {}
        # graphs of equal structure share one kernel list (see kernels()): read it once
        slots_of: dict[int, list[tuple[str, int, np.ndarray]]] = {}
        # estimator key -> its job, per kernel type
        job_of: dict[str, tuple[str, list[tuple[np.ndarray, ...]], dict[int, int]]] = {}
        cached = self._feature_cache
        slot_of: dict[tuple[str, int], tuple[str, int, np.ndarray]] = {}
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
        preds: dict[str, list[float]] = {}
        ys: dict[str, np.ndarray] = {}
        for key, (rows, _) in jobs.items():
            col = 1 if key == FALLBACK_KEY else 0
            X = np.vstack([hit[col] for hit in rows])
            ys[key] = self.regressors[key].predict(X)
            preds[key] = ys[key].tolist()
        # graphs whose memory traffic overflows the last-level cache read their weights
        # from memory (nnmeter.predictors.weight_stream); only they need the cold times
        llc = self._stream_llc
        is_cold: dict[int, bool] = {}
        for r in slots:  # graphs of one structure share their slot list: once each
            if id(r) not in is_cold:
                is_cold[id(r)] = bool(self._stream_rate) and sum(s[3] for s in r) > llc
        cold: dict[str, list[float]] = {}
        if any(is_cold.values()):
            for key, (rows, _) in jobs.items():
                n = len(rows)
                cold[key] = refetch_many_ms(
                    np.maximum(ys[key], 0.0), np.fromiter((hit[3] for hit in rows), float, n),
                    kernel_bytes=np.fromiter((hit[1][1] for hit in rows), float, n),
                    llc_bytes=llc,
                    streams=np.fromiter((hit[4] or not self._stream_refetch for hit in rows),
                                        bool, n)).tolist()
        hows = {key: ("regressor" if key.startswith("type:") else key) for key in jobs}
        out: dict[int, list[tuple[float, str, np.ndarray]]] = {}
        for row_slots in slots:
            if id(row_slots) not in out:
                use = cold if is_cold[id(row_slots)] else preds
                out[id(row_slots)] = [(use[key][i], hows[key], raw)
                                      for key, i, raw, _ in row_slots]
        return [out[id(row_slots)] for row_slots in slots]  # shared lists: read only

    def absorbed(self, graph: Any, kernels: Sequence[Any]) -> dict[int, int]:
        """{index of a kernel the backend runs inside another: index of that one}
        (:func:`nnmeter.predictors.absorbed.absorbed_kernels`), memoised per kernel
        list like :meth:`layout_ms`."""
        cache = self._absorbed_cache
        hit = cache.get(id(kernels))
        if hit is not None and hit[0] is kernels:
            return hit[1]
        value = absorbed_kernels(graph, kernels, self.backend_id)
        if len(cache) > 4096:
            cache.clear()
        cache[id(kernels)] = (kernels, value)
        return value

    def layout_ms(self, graph: Any, kernels: Sequence[Any]) -> float:
        """Time of the layout reorders and conversions ``graph`` executes as a whole:
        the reorders of a blocked layout (ORT's NCHWc), and the edge conversions at the
        model's own inputs and outputs where training removed them from every kernel
        row (``boundary.json``, OpenVINO). 0 when the predictor models neither."""
        if not self._layout_block and not self._edges:
            return 0.0
        # The partition cache hands back the same kernel list for a graph it has seen,
        # so the reorders of a repeated graph are looked up rather than recounted.
        cache = self._layout_cache
        hit = cache.get(id(kernels))
        if hit is not None and hit[0] is kernels:
            return hit[1]
        value = 0.0
        if self._layout_block:
            moved = model_reorders(graph, kernels, self._layout_block, self._reorder_memo,
                                   absorbed=self.absorbed(graph, kernels))
            line, curve = self._reorder_cost, self._reorder_curve
            value += float(sum(reorder_cost_ms(n, line, curve) for n in moved))
        if self._edges:
            value += model_edges_ms(graph, kernels, self._edges)
        if len(cache) > 4096:
            cache.clear()
        cache[id(kernels)] = (kernels, value)
        return value

    # -- public -------------------------------------------------------------------
    def predict(self, model: Any, *, check_device: bool = True) -> "LatencyReport":
        """Predict one model (ModelGraph or anything ``load_model`` reads).

        Raises
        ------
        PredictorError
            If a kernel's estimate is not a positive finite number.
        """
        graph = _as_graph(model)
        kernels = self.kernels(graph)
        est = self._estimate([kernels])[0]
        absorbed = self.absorbed(graph, kernels)
        rows, uncovered = [], []
        for j, (k, (ms, how, feats)) in enumerate(zip(kernels, est)):
            if j in absorbed:  # runs inside another kernel: no time of its own
                rows.append(KernelRow(k.type, tuple(k.nodes), tuple(feats.tolist()),
                                      0.0, f"absorbed:{kernels[absorbed[j]].type}"))
                continue
            if not (math.isfinite(ms) and ms > 0):
                raise PredictorError(
                    f"kernel {k.type} over {list(k.nodes)} got estimate {ms} ms from {how}; "
                    f"every kernel must get a positive time. Retrain the predictor"
                )
            rows.append(KernelRow(k.type, tuple(k.nodes), tuple(feats.tolist()),
                                  ms, how))
            if how != "regressor" and not self._family_by_choice(k.type, how):
                uncovered.append({"type": k.type, "nodes": list(k.nodes), "estimated_by": how,
                                  "predicted_ms": ms})
        mismatch, diffs = self.check_device() if check_device else (False, ())
        warnings = []
        if mismatch:
            warnings.append(
                f"the kernel data of {self.backend_id} was measured on another device or "
                f"runtime (differs in: {', '.join(diffs)}); predictions may be far off. "
                f"Build a predictor on this device with `nnmeter build --backend "
                f"{self.backend_id} --dataset {self.backend_id}@<new-id>`")
        if uncovered:
            warnings.append(f"{len(uncovered)} kernel(s) had no regressor of their own type "
                            f"and were estimated by a family regressor or the FLOPs/bytes "
                            f"fallback")
        layout = self.layout_ms(graph, kernels)
        return LatencyReport(
            total_ms=float(sum(r.predicted_ms for r in rows)) + self.overhead_ms + layout,
            rows=tuple(rows), overhead_ms=self.overhead_ms, layout_ms=layout,
            uncovered=tuple(uncovered), backend_id=self.backend_id, device=self.device,
            device_mismatch=mismatch, warnings=tuple(warnings),
            model=getattr(graph, "name", ""),
        )

    def predict_many(self, graphs: Sequence[Any]) -> list[float]:
        """Total predicted ms of each graph; kernels of all graphs are predicted in
        one batch per estimator (fast for NAS loops)."""
        graphs = [_as_graph(g) for g in graphs]
        # A batch allocates many small, acyclic objects; with the cyclic collector on,
        # its full passes over the caller's graphs cost more than the prediction. It is
        # paused for the batch (nothing created here needs it) and restored after.
        collecting = gc.isenabled()
        gc.disable()
        try:
            kernels = [self.kernels(g) for g in graphs]
            est = self._estimate(kernels)
            out = []
            for g, ks, e in zip(graphs, kernels, est):
                absorbed = self.absorbed(g, ks)
                total = float(sum(ms for ms, _, _ in e)) if not absorbed else float(
                    sum(ms for j, (ms, _, _) in enumerate(e) if j not in absorbed))
                out.append(total + self.overhead_ms + self.layout_ms(g, ks))
            return out
        finally:
            if collecting:
                gc.enable()

    def check_device(self) -> tuple[bool, tuple[str, ...]]:
        """(mismatch, differing fields) of this machine against the data's device.

        Uses a cheap fingerprint (CPU model, cores, architecture, runtime package version
        from its metadata, backend settings) without starting the runtime.
        """
        if self._device_check is None:
            self._device_check = _compare_device(self.backend_id, self.device)
            if self._device_check[0]:
                logger.warning("%s predictor: data measured on a different device/runtime "
                               "(%s)", self.backend_id, ", ".join(self._device_check[1]))
        return self._device_check


def _as_graph(model: Any) -> Any:
    if isinstance(model, ModelGraph):
        return model
    from nnmeter.frontends import load_model

    return load_model(model)


def current_device(backend_id: str) -> dict[str, Any]:
    """A cheap DeviceInfo-like dict of this machine for ``backend_id`` (no runtime import)."""
    import os
    import platform
    from importlib import metadata

    from nnmeter.backends import get_backend
    from nnmeter.backends.base import local_cpu_model

    backend = get_backend(backend_id)
    version = ""
    top = (backend.runtime_module or "").split(".")[0]
    try:
        dists = metadata.packages_distributions().get(top, [])
        if dists:
            version = metadata.version(dists[0])
    except Exception:  # metadata can be incomplete; then the version is not compared
        version = ""
    return {"cpu_model": local_cpu_model(), "cores": os.cpu_count() or 0,
            "runtime": backend.runtime, "runtime_version": version,
            "settings": backend.settings(), "arch": platform.machine()}


def _compare_device(backend_id: str, device: dict[str, Any] | None) -> tuple[bool, tuple[str, ...]]:
    if not device:
        return True, ("no device recorded",)
    try:
        now = current_device(backend_id)
    except Exception as err:  # an unknown backend here must not break prediction
        logger.debug("cannot fingerprint %s: %s", backend_id, err)
        return False, ()
    diffs = []
    for key in ("cpu_model", "cores", "arch", "runtime", "settings"):
        if key in device and device.get(key) != now.get(key):
            diffs.append(key)
    v_old, v_new = str(device.get("runtime_version", "")), now.get("runtime_version", "")
    if v_new and v_old and not (v_old.startswith(v_new) or v_new.startswith(v_old)):
        diffs.append("runtime_version")
    return bool(diffs), tuple(diffs)
