"""Kernel data for training: the configs, features and measured times of one kernel
type, loaded from a dataset (the rows every composition term and regressor sees).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.features import fallback_features, model_input

__all__ = ["KernelData", "load_kernel_data", "load_all_kernel_data", "family_of"]

logger = logging.getLogger(__name__)


class KernelData:
    """Configs, features and latencies of one kernel type, loaded from a dataset."""

    def __init__(self, kernel_type: str, configs: list[Any], X: np.ndarray, y: np.ndarray,
                 fb: np.ndarray, origins: list[str],
                 stored: list[dict[str, Any]] | None = None) -> None:
        self.kernel_type = kernel_type
        self.configs = configs
        #: each row's config as the dataset stores it (the key of its profiles)
        self.stored = stored
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
                          self.y[idx], self.fb[idx], [self.origins[i] for i in idx],
                          None if self.stored is None else [self.stored[i] for i in idx])

    def concat(self, other: "KernelData") -> "KernelData":
        """These rows followed by ``other``'s (of the same kernel type); ``stored`` only
        when both have it."""
        return KernelData(self.kernel_type, list(self.configs) + list(other.configs),
                          np.vstack([self.X, other.X]), np.concatenate([self.y, other.y]),
                          np.vstack([self.fb, other.fb]),
                          list(self.origins) + list(other.origins),
                          None if self.stored is None or other.stored is None
                          else list(self.stored) + list(other.stored))


#: no single kernel measured here takes 100 s; a larger "latency" is a corrupt row
MAX_KERNEL_MS = 1e5


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
    from nnmeter.sampling.prior import config_key

    configs, X, y, fb, origins, stored = [], [], [], [], [], []
    bad = 0
    # a configuration measured more than once (again after a disturbed first
    # measurement, nnmeter.builder.remeasure_disturbed) keeps its fastest row:
    # interference only adds time
    at: dict[str, int] = {}
    for row in dataset.rows(kernel_type):
        lat = row.get("latency_ms")
        if lat is None:
            continue  # a failed measurement, recorded as such
        if (isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat)
                or not 0 < lat < MAX_KERNEL_MS):
            bad += 1
            continue
        try:
            cfg = kt.config_from_dict(row["config"])
        except (TypeError, KeyError) as err:
            raise DatasetError(f"{dataset.path(kernel_type)}: bad config {row.get('config')}: "
                               f"{err}") from err
        key = config_key(row["config"])
        if key in at:
            i = at[key]
            y[i] = min(y[i], float(lat))  # the first row's origin says why it was sampled
            continue
        at[key] = len(y)
        feats = kt.features(cfg)
        configs.append(cfg)
        X.append(model_input(kt.feature_names, feats))
        fb.append(fallback_features(kt, cfg, feats))
        y.append(float(lat))
        origins.append(str(row.get("origin", "initial")))
        stored.append(row["config"])
    if bad:
        logger.warning("%s: %d row(s) skipped, their latency_ms is not a number of "
                       "milliseconds in (0, %g)", dataset.path(kernel_type), bad, MAX_KERNEL_MS)
    if not y:
        return None
    return KernelData(kernel_type, configs, np.vstack(X), np.asarray(y), np.vstack(fb), origins,
                      stored)


def family_of(kernel_type: str) -> str:
    """The family a kernel type's rows pool into (``conv`` for ``conv-bn-relu``)."""
    from nnmeter.kernels import KERNEL_TYPES

    return getattr(KERNEL_TYPES.get(kernel_type), "family", "") or kernel_type


def load_all_kernel_data(dataset: KernelDataset, keep: Any = None) -> dict[str, KernelData]:
    """Every kernel type's :class:`KernelData` in ``dataset`` (types without usable rows
    left out). ``keep(kernel_type, config, origin)``, when given, selects the rows."""
    data: dict[str, KernelData] = {}
    for t in dataset.kernel_types():
        d = load_kernel_data(dataset, t)
        if d is not None and keep is not None:
            mask = np.array([keep(t, c, o) for c, o in zip(d.configs, d.origins)], dtype=bool)
            d = d.subset(mask) if mask.any() else None
        if d is not None:
            data[t] = d
    return data

