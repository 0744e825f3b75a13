"""Train a LatencyPredictor from a kernel dataset, deterministically.

Examples
--------
See :func:`nnmeter.predictors.load_predictor`, which trains on first use and caches.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError, PredictorError
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.features import model_input
from nnmeter.predictors.layout import BLOCKED_FAMILIES, LAYOUT_BLOCK, reorder_elements
from nnmeter.predictors.model import (
    FALLBACK_KEY, LatencyPredictor, PredictorSettings, fallback_features,
)
from nnmeter.predictors.regressors import LinearKernelRegressor, make_regressor

__all__ = ["load_kernel_data", "train_predictor", "KernelData", "work_feature",
           "choose_regressors", "CHOICE_FILE", "LAYOUT_BLOCK", "reorder_elements",
           "fit_reorder_cost"]

#: share of the smallest measured kernel time taken as the per-inference overhead
OVERHEAD_SHARE = 0.9

#: per-dataset file with the regressor chosen for each kernel type (part of the settings)
CHOICE_FILE = "predictor.json"

#: a reorder is one node that reads and writes every element once, like this kernel
_REORDER_PROXY = "relu"

logger = logging.getLogger(__name__)


class KernelData:
    """Configs, features and latencies of one kernel type, loaded from a dataset."""

    def __init__(self, kernel_type: str, configs: list[Any], X: np.ndarray, y: np.ndarray,
                 fb: np.ndarray, origins: list[str]) -> None:
        self.kernel_type = kernel_type
        self.configs = configs
        self.X = X
        self.y = y
        self.fb = fb
        self.origins = origins
        self._io: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.y)

    def io_elements(self) -> np.ndarray:
        """(rows, 2) input and output elements of each row's single-kernel model
        (:func:`~nnmeter.predictors.boundary.boundary_elements`), computed once."""
        if self._io is None:
            from nnmeter.kernels import KERNEL_TYPES
            from nnmeter.predictors.boundary import boundary_elements

            kt = KERNEL_TYPES.get(self.kernel_type)
            self._io = np.array([boundary_elements(kt, c) for c in self.configs],
                                dtype=np.float64).reshape(-1, 2)
        return self._io

    def subset(self, mask: np.ndarray) -> "KernelData":
        """The rows where ``mask`` is true."""
        idx = np.flatnonzero(mask)
        return KernelData(self.kernel_type, [self.configs[i] for i in idx], self.X[idx],
                          self.y[idx], self.fb[idx], [self.origins[i] for i in idx])


def load_kernel_data(dataset: KernelDataset, kernel_type: str) -> KernelData | None:
    """Rows of ``kernel_type`` with valid latencies; ``X`` is the regressor input
    (:func:`~nnmeter.predictors.features.model_input` of the recomputed features)."""
    from nnmeter.kernels import KERNEL_TYPES

    try:
        kt = KERNEL_TYPES.get(kernel_type)
    except KeyError:
        logger.warning("dataset %s has rows for unknown kernel type %r; skipped",
                       dataset.directory, kernel_type)
        return None
    configs, X, y, fb, origins = [], [], [], [], []
    for row in dataset.rows(kernel_type):
        lat = row.get("latency_ms")
        if lat is None or not math.isfinite(lat) or lat <= 0:
            continue
        try:
            cfg = kt.config_from_dict(row["config"])
        except (TypeError, KeyError) as err:
            raise DatasetError(f"{dataset.path(kernel_type)}: bad config {row.get('config')}: "
                               f"{err}") from err
        feats = kt.features(cfg)
        configs.append(cfg)
        X.append(model_input(kt.feature_names, feats))
        fb.append(fallback_features(kt, cfg, feats))
        y.append(float(lat))
        origins.append(str(row.get("origin", "initial")))
    if not y:
        return None
    return KernelData(kernel_type, configs, np.vstack(X), np.asarray(y), np.vstack(fb), origins)


def fit_reorder_cost(data: dict[str, "KernelData"]) -> tuple[float, float] | None:
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


def work_feature(kernel_type: Any) -> int | None:
    """Index of the kernel's work feature (FLOPs, else bytes, else elements), or None."""
    names = tuple(getattr(kernel_type, "feature_names", ()))
    for name in ("FLOPs", "bytes", "elements"):
        if name in names:
            return names.index(name)
    return None


def train_predictor(backend_id: str, dataset_dir: str | os.PathLike, rules: Any,
                    settings: PredictorSettings | None = None, *,
                    keep: Callable[[str, Any, str], bool] | None = None) -> LatencyPredictor:
    """Train every regressor of a predictor from the dataset in ``dataset_dir``.

    ``keep(kernel_type, config, origin)``, when given, selects the rows to train on
    (``experiments/kernel_accuracy.py`` holds the test configs out this way); the
    calibrations are used as they are.

    Raises
    ------
    PredictorError
        If the dataset holds no usable kernel measurements.
    """
    from nnmeter.kernels import KERNEL_TYPES

    settings = settings or PredictorSettings()
    ds = KernelDataset(Path(dataset_dir), backend_id)
    data: dict[str, KernelData] = {}
    for t in ds.kernel_types():
        d = load_kernel_data(ds, t)
        if d is not None and keep is not None:
            mask = np.array([keep(t, c, o) for c, o in zip(d.configs, d.origins)], dtype=bool)
            d = d.subset(mask) if mask.any() else None
        if d is not None:
            data[t] = d
    if not data:
        raise PredictorError(
            f"no kernel measurements for {backend_id} in {dataset_dir}; build them with "
            f"`nnmeter build --backend {backend_id}`"
        )
    regressors: dict[str, Any] = {}
    counts: dict[str, int] = {}
    # Every single-kernel measurement includes the runtime's fixed per-inference cost
    # (session run, input binding): about the time of the tiniest kernel. Summing
    # kernels would count it once per kernel; learn net kernel times instead and add it
    # once per model.
    overhead_ms = OVERHEAD_SHARE * float(min(d.y.min() for d in data.values()))
    for d in data.values():
        d.y = d.y - overhead_ms
    from nnmeter.predictors.reorder import read_reorders

    curve = read_reorders(ds) if LAYOUT_BLOCK.get(backend_id.split("@")[0]) else None
    reorder = _remove_reorders(backend_id, data, curve)
    # layout/precision conversions at a single-kernel model's edges, measured on the
    # device by the backend's own profiler (<dataset>/boundary.json, when present)
    from nnmeter.predictors.boundary import remove_boundary

    boundary = remove_boundary(ds, data)
    # what a single-kernel model costs beyond its kernel's in-model time once the
    # overhead and reorders are off, measured with chains of kernels (chain_excess.json)
    from nnmeter.predictors.chain import chain_excess_ms, read_chain, remove_excess

    chain = read_chain(ds) if settings.chain_correction else None
    excess = chain_excess_ms(chain)
    for t, d in data.items():
        fam = _family_of(t)
        if chain and (chain.get("size") or fam in (chain.get("family_lines") or {})):
            ex: Any = np.array([chain_excess_ms(chain, fam, n)
                                for n in d.io_elements().sum(axis=1)])
        else:
            ex = chain_excess_ms(chain, fam)
        if np.any(ex):
            d.y = remove_excess(d.y, ex)
    # the rate at which this device streams weights from memory: inside a model no
    # kernel runs faster than reading its weights once (<dataset>/weight_stream.json)
    from nnmeter.predictors.weight_stream import read_weight_stream

    stream = read_weight_stream(ds)

    chosen = _read_choice(ds)
    # types whose family regressor beat their own on held-out rows (choose_regressors)
    use_family = {t for t, src in _read_choice(ds, "source").items() if src == "family"}

    def fit(kind: str, member: str, X: np.ndarray, y: np.ndarray) -> Any:
        params = {"norm_feature": work_feature(KERNEL_TYPES.get(member))}
        params.update(settings.overrides.get(kind, {}))
        name = chosen.get(kind, settings.regressor) if settings.regressor == "rf" else \
            settings.regressor
        return make_regressor(kind, name, random_state=settings.seed, **params).fit(X, y)

    families: dict[str, list[KernelData]] = {}
    for t, d in sorted(data.items()):
        counts[t] = len(d)
        if len(d) >= settings.min_type_samples and t not in use_family:
            regressors[f"type:{t}"] = fit(t, t, d.X, d.y)
        families.setdefault(_family_of(t), []).append(d)
    for fam, members in sorted(families.items()):
        widths = {m.X.shape[1] for m in members}
        n = sum(len(m) for m in members)
        if len(widths) != 1 or n < min(settings.min_type_samples, 10):
            continue
        if len(members) == 1 and f"type:{members[0].kernel_type}" in regressors \
                and members[0].kernel_type == fam:
            regressors[f"family:{fam}"] = regressors[f"type:{fam}"]
            continue
        X = np.vstack([m.X for m in members])
        y = np.concatenate([m.y for m in members])
        regressors[f"family:{fam}"] = fit(fam, members[0].kernel_type, X, y)
    fbX = np.vstack([d.fb for d in data.values()])
    fby = np.concatenate([d.y for d in data.values()])
    regressors[FALLBACK_KEY] = LinearKernelRegressor(log_features=True, log_target=True).fit(
        fbX, fby)
    meta = ds.meta() or {}
    return LatencyPredictor(
        backend_id, rules, regressors, device=meta.get("device"),
        overhead_ms=overhead_ms,
        meta={"samples": counts, "settings": settings.as_dict(), "overhead_ms": overhead_ms,
              "reorder_cost": reorder, "reorder_curve": curve if reorder else None,
              "boundary": boundary, "chain_excess_ms": excess,
              "chain_excess_families": dict((chain or {}).get("families") or {}),
              "chain_excess_size": (chain or {}).get("size"),
              "chain_excess_lines": dict((chain or {}).get("family_lines") or {}),
              "weight_stream_bytes_per_ms": stream["bytes_per_ms"] if stream else None,
              "weight_stream_llc_bytes": stream.get("llc_bytes") if stream else None,
              "weight_stream_refetch": bool(stream.get("refetch")) if stream else False,
              "fingerprint_id": meta.get("fingerprint_id"), "dataset": str(dataset_dir)},
    )


def _remove_reorders(backend_id: str, data: dict[str, KernelData],
                     curve: dict[str, Any] | None = None) -> list[float] | None:
    """Subtract the single-kernel layout reorders from the blocked kernels' net times
    (in place; never below a quarter of the time). A reorder costs ``curve``'s time
    (profiled on the device, :mod:`nnmeter.predictors.reorder`) when given, else the
    relu line. Returns the relu line (the fallback the predictor keeps)."""
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.reorder import single_kernel_reorders_ms

    block = LAYOUT_BLOCK.get(backend_id.split("@")[0], 0)
    fit = fit_reorder_cost(data) if block else None
    if fit is None:
        return None
    fixed, per_elem = fit
    for t, d in data.items():
        kt = KERNEL_TYPES.get(t)
        if getattr(kt, "family", "") not in BLOCKED_FAMILIES:
            continue
        sub = np.array([single_kernel_reorders_ms(kt, cfg, block, (fixed, per_elem), curve)
                        for cfg in d.configs])
        d.y = np.maximum(d.y - sub, 0.25 * d.y)
    return [fixed, per_elem]


def _family_of(kernel_type: str) -> str:
    """The family a kernel type's rows pool into (``conv`` for ``conv-bn-relu``)."""
    from nnmeter.kernels import KERNEL_TYPES

    return getattr(KERNEL_TYPES.get(kernel_type), "family", "") or kernel_type


def _read_choice(ds: KernelDataset, key: str = "regressor") -> dict[str, str]:
    import json

    path = ds.directory / CHOICE_FILE
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text()).get(key, {}))
    except ValueError as err:
        raise DatasetError(f"{path} is not valid JSON ({err}); delete it to use defaults") from err


def choose_regressors(dataset: KernelDataset, *, candidates: tuple[str, ...] = ("rf", "lgbm"),
                      folds: int = 5, min_samples: int = 100, seed: int = 0,
                      min_type_samples: int = PredictorSettings.min_type_samples) -> dict[str, Any]:
    """Pick, per kernel type, the regressor and the data source with the best
    cross-validated ±10 % accuracy; write them to ``<dataset>/predictor.json``
    (deterministic for the data).

    - **Regressor** (rf or lgbm): types with fewer than ``min_samples`` rows keep the
      default (``rf``); their CV figures are too noisy to choose on.
    - **Source** (own or family): a fused type such as ``conv-bn-relu6`` may have too
      few rows for a regressor of its own, while its family (every ``conv-*`` type,
      the fused tail as flags) has thousands. Both are scored on the *same* held-out
      rows of the type: its own regressor trained on the other folds, and the family
      regressor trained on the other folds plus every other member's rows. The type
      keeps its own regressor only when that scores at least as well. The head type
      itself (``conv``) is scored the same way: in runtimes that fold the tail into
      the convolution, the fused variants' rows are more convolutions to learn from.

    Returns ``{type: {regressor or "family": acc10}}``.
    """
    import json

    from nnmeter.kernels import KERNEL_TYPES

    scores: dict[str, Any] = {}
    choice: dict[str, str] = {}
    source: dict[str, str] = {}
    data = {t: d for t in dataset.kernel_types()
            if (d := load_kernel_data(dataset, t)) is not None}

    def cv(t: str, name: str, d: KernelData, extra: list[KernelData]) -> float:
        norm = work_feature(KERNEL_TYPES.get(t))
        fold = np.random.default_rng(seed).permutation(len(d)) % folds
        pred = np.empty(len(d))
        for k in range(folds):
            te = fold == k
            X = np.vstack([d.X[~te], *[e.X for e in extra]])
            y = np.concatenate([d.y[~te], *[e.y for e in extra]])
            pred[te] = make_regressor(t, name, norm_feature=norm, random_state=seed).fit(
                X, y).predict(d.X[te])
        return float(np.mean(np.abs(pred - d.y) <= 0.10 * d.y))

    for t, d in sorted(data.items()):
        if len(d) < min_samples:
            continue
        scores[t] = {name: cv(t, name, d, []) for name in candidates}
        best = max(candidates, key=lambda n: (scores[t][n], n == candidates[0]))
        if best != "rf":
            choice[t] = best
    families: dict[str, list[str]] = {}
    for t in data:
        families.setdefault(_family_of(t), []).append(t)
    for fam, members in sorted(families.items()):
        if len(members) < 2:
            continue
        for t in sorted(members):
            d = data[t]
            # the family's own head type (``conv``) is scored too: its rows alone
            # against them pooled with every fused variant's
            if len(d) < max(min_type_samples, folds):
                continue
            others = [data[m] for m in members if m != t and data[m].X.shape[1] == d.X.shape[1]]
            if not others:
                continue
            own = scores.get(t, {}).get(choice.get(t, "rf"))
            if own is None:
                own = cv(t, choice.get(t, "rf"), d, [])
            fam_name = choice.get(fam, "rf")
            famv = cv(t, fam_name, d, others)
            scores.setdefault(t, {})["own"] = own
            scores[t]["family"] = famv
            if famv > own:
                source[t] = "family"
    (dataset.directory / CHOICE_FILE).write_text(json.dumps(
        {"regressor": choice, "source": source, "cv_acc10": scores, "folds": folds},
        indent=1, sort_keys=True))
    return scores
