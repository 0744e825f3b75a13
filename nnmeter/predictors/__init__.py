"""Latency predictors: per-kernel regressors, the model predictor, backend selection.

- :func:`load_predictor` — the predictor of a backend: trained from the committed kernel
  data (``datasets/kernels/<backend>/``) and fusion rules on first use, then cached;
- :func:`predict` — a :class:`LatencyReport` for a model on a backend;
- :func:`select_backend` — predicted latency on every backend with a predictor, ranked.

Cache
-----
Trained regressors are cached under ``$XDG_CACHE_HOME/nnmeter/predictors/<backend>/<key>/``
(``~/.cache/...`` by default; ``$NNMETER_CACHE`` overrides the root) as JSON + numpy
arrays (:mod:`nnmeter.predictors.store`; never pickle). ``key`` hashes the fusion-rules
file, every kernel data file and the settings, so new data or rules retrain
automatically; a cached predictor loads in well under a second.

Examples
--------
>>> report = predict("examples/mobilenetv2.json", "ort-cpu")       # doctest: +SKIP
>>> report.total_ms                                                 # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from nnmeter.errors import PredictorError
from nnmeter.predictors.composition import Composition
from nnmeter.predictors.terms import TERMS
from nnmeter.predictors.model import (
    KernelRow, LatencyPredictor, LatencyReport, PredictorSettings,
)

__all__ = ["load_predictor", "predict", "select_backend", "available_predictors",
           "LatencyPredictor", "LatencyReport", "KernelRow", "PredictorSettings",
           "cache_dir", "CACHE_VERSION"]

logger = logging.getLogger(__name__)

#: bump when training changes in a way the cache key cannot see
CACHE_VERSION = 11


def cache_dir() -> Path:
    """Root of the predictor cache (see the module docstring)."""
    env = os.environ.get("NNMETER_CACHE")
    if env:
        return Path(env) / "predictors"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nnmeter" / "predictors"


def _cache_key(rules_file: Path | None, data_files: list[Path], settings: PredictorSettings) -> str:
    h = hashlib.sha256()
    h.update(f"v{CACHE_VERSION}".encode())
    h.update(json.dumps(settings.as_dict(), sort_keys=True).encode())
    if rules_file is not None and rules_file.exists():
        h.update(rules_file.read_bytes())
    for f in data_files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def load_predictor(backend_id: str, *, dataset: str | None = None,
                   root: str | os.PathLike | None = None,
                   settings: PredictorSettings | None = None,
                   use_cache: bool = True) -> LatencyPredictor:
    """The predictor of ``backend_id``: from the cache, or trained from the kernel data.

    Parameters
    ----------
    dataset : str, optional
        Dataset id under ``datasets/kernels`` (default: the backend id).
    root : path, optional
        Folder holding ``datasets/`` (default ``$NNMETER_DATA`` or the checkout).
    settings : PredictorSettings, optional
    use_cache : bool
        Read and write the cache (default True).

    Raises
    ------
    PredictorError
        If the backend has no kernel data (build it with ``nnmeter build``).
    FusionRulesError
        If the backend has no fusion rules.
    """
    from nnmeter.fusion import load_rules, rules_path
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
    from nnmeter.predictors.store import load_regressors, save_regressors
    from nnmeter.predictors.train import train_predictor

    settings = settings or PredictorSettings()
    ds_dir = kernel_dataset_dir(dataset or backend_id, root)
    ds = KernelDataset(ds_dir, backend_id)
    files = ds.files()
    if not files:
        raise PredictorError(
            f"no kernel measurements for backend {backend_id!r} in {ds_dir}; build a "
            f"predictor with `nnmeter build --backend {backend_id}` (predictors exist for: "
            f"{', '.join(available_predictors(root)) or 'none'})"
        )
    rules = load_rules(backend_id)
    rp = rules_path(backend_id)
    key = _cache_key(rp if rp.exists() else None, files + _record_files(ds), settings)
    where = cache_dir() / (dataset or backend_id) / key
    if use_cache and (where / "manifest.json").exists():
        try:
            regs, meta = load_regressors(where)
            return LatencyPredictor(backend_id, rules, regs, device=meta.get("device"),
                                    meta={**meta, "cache": str(where)},
                                    composition=Composition.from_records(meta.get("terms"), TERMS))
        except PredictorError as err:
            logger.warning("ignoring a broken predictor cache: %s", err)
    logger.info("training the %s predictor from %s", backend_id, ds_dir)
    pred = train_predictor(backend_id, ds_dir, rules, settings)
    if use_cache:
        meta = {**pred.meta, "device": pred.device, "backend_id": backend_id, "key": key,
                "terms": pred.composition.records()}
        try:
            save_regressors(where, pred.regressors, meta=meta)
            pred.meta["cache"] = str(where)
        except OSError as err:
            logger.warning("could not cache the predictor in %s: %s", where, err)
    return pred


def _record_files(ds: Any) -> list[Path]:
    """The dataset's files besides the kernel rows that training reads: its device
    record, the regressor choice and every composition term's calibration record."""
    from nnmeter.predictors.train import CHOICE_FILE

    names = [ds.META, CHOICE_FILE] + [n for t in TERMS.ordered()
                                      if (n := TERMS.get(t).record_file)]
    return [ds.directory / n for n in names if (ds.directory / n).exists()]


def available_predictors(root: str | os.PathLike | None = None) -> list[str]:
    """Backend ids with kernel data under ``datasets/kernels`` (dataset ids without '@')."""
    from nnmeter.predictors.dataset import data_root

    base = Path(root or data_root()) / "datasets" / "kernels"
    if not base.exists():
        return []
    return sorted(p.name for p in base.iterdir()
                  if p.is_dir() and "@" not in p.name and any(p.glob("*.jsonl")))


def predict(model: Any, backend_id: str, **kwargs: Any) -> LatencyReport:
    """Predict ``model`` (ModelGraph or a model file) on ``backend_id``.

    ``kwargs`` go to :func:`load_predictor`.
    """
    return load_predictor(backend_id, **kwargs).predict(model)


def select_backend(model: Any, backends: list[str] | None = None,
                   **kwargs: Any) -> list[tuple[str, float]]:
    """(backend id, predicted ms) for every backend with a predictor, fastest first.

    Raises
    ------
    PredictorError
        If no backend has a predictor.
    """
    from nnmeter.predictors.model import _as_graph

    graph = _as_graph(model)
    ids = backends or available_predictors(kwargs.get("root"))
    if not ids:
        raise PredictorError("no backend has a predictor yet; build one with `nnmeter build`")
    out = []
    for b in ids:
        out.append((b, load_predictor(b, **kwargs).predict(graph).total_ms))
    return sorted(out, key=lambda kv: kv[1])
