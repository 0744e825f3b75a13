"""Train a LatencyPredictor from a kernel dataset, deterministically.

Examples
--------
See :func:`nnmeter.predictors.load_predictor`, which trains on first use and caches.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError
from nnmeter.predictors.composition import Composition, fit_context
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.kernel_data import KernelData, family_of, load_kernel_data
from nnmeter.predictors.model import (FALLBACK_KEY, LatencyPredictor, PredictorSettings,
                                      type_fallback_key)
from nnmeter.predictors.regressors import LinearKernelRegressor, make_regressor
from nnmeter.predictors.terms import TERMS

__all__ = ["load_kernel_data", "train_predictor", "KernelData", "work_feature",
           "choose_regressors", "CHOICE_FILE", "scaled_fallback", "FALLBACK_SCALE_BOUNDS"]

#: per-dataset file with the regressor chosen for each kernel type (part of the settings)
CHOICE_FILE = "predictor.json"

logger = logging.getLogger(__name__)


def work_feature(kernel_type: Any) -> int | None:
    """Index of the kernel's work feature (FLOPs, else bytes, else elements), or None."""
    names = tuple(getattr(kernel_type, "feature_names", ()))
    for name in ("FLOPs", "bytes", "elements"):
        if name in names:
            return names.index(name)
    return None


def train_predictor(backend_id: str, dataset_dir: str | os.PathLike, rules: Any,
                    settings: PredictorSettings | None = None, *,
                    keep: Callable[[str, Any, str], bool] | None = None,
                    terms: Sequence[str] | None = None,
                    force: Sequence[str] = ()) -> LatencyPredictor:
    """Train every regressor of a predictor from the dataset in ``dataset_dir``.

    ``keep(kernel_type, config, origin)``, when given, selects the rows to train on
    (``experiments/kernel_accuracy.py`` holds the test configs out this way); the
    calibrations are used as they are. ``terms`` selects the composition terms by name
    (default: every registered one); ``force`` names terms applied even where their
    record says not to (``"apply": false``), for experiments that compare.

    Raises
    ------
    PredictorError
        If the dataset holds no usable kernel measurements.
    """
    settings = settings or PredictorSettings()
    ds = KernelDataset(Path(dataset_dir), backend_id)
    ctx = fit_context(backend_id, ds, settings, keep=keep, force=force)
    # what whole models do that single-kernel measurements do not (overhead, reorders,
    # edges, chain excess...): each term removes its share from the rows, in order, and
    # the predictor applies the same terms back (nnmeter.predictors.composition)
    composition = Composition.fit(ctx, TERMS, names=terms)
    regressors, counts = fit_regressors(ctx.data, ds, settings)
    meta = ds.meta() or {}
    pred = LatencyPredictor(
        backend_id, rules, regressors, device=meta.get("device"), composition=composition,
        meta={"samples": counts, "settings": settings.as_dict(),
              "fingerprint_id": meta.get("fingerprint_id"), "dataset": str(dataset_dir)},
    )
    if terms is None or "in_model" in terms:
        # fitted on the predictor's own estimates of whole models measured on the device
        from nnmeter.predictors.terms.in_model import fit_in_model

        pred = fit_in_model(pred, ds)
    return pred


def fit_regressors(data: dict[str, KernelData], choice: KernelDataset,
                   settings: PredictorSettings) -> tuple[dict[str, Any], dict[str, int]]:
    """The regressors of a predictor (``type:<t>``, ``family:<f>``, ``fallback``) fitted
    on ``data`` (rows with the composition terms removed), with the regressor choices of
    ``choice``'s ``predictor.json``; and the row count per type."""
    from nnmeter.kernels import KERNEL_TYPES

    regressors: dict[str, Any] = {}
    counts: dict[str, int] = {}
    chosen = _read_choice(choice)
    # types whose family regressor beat their own on held-out rows (choose_regressors)
    use_family = {t for t, src in _read_choice(choice, "source").items() if src == "family"}

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
        families.setdefault(family_of(t), []).append(d)
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
    fallback = LinearKernelRegressor(log_features=True, log_target=True).fit(fbX, fby)
    regressors[FALLBACK_KEY] = fallback
    for t, d in sorted(data.items()):
        if f"type:{t}" not in regressors:
            regressors[type_fallback_key(t)] = scaled_fallback(fallback, d.fb, d.y)
    return regressors, counts


#: bounds of a type's own scale of the fallback (:func:`scaled_fallback`)
FALLBACK_SCALE_BOUNDS = (0.05, 20.0)


def scaled_fallback(fallback: LinearKernelRegressor, fb: np.ndarray,
                    y: np.ndarray) -> LinearKernelRegressor:
    """The FLOPs/bytes fallback scaled to one kernel type's own rows: the same fit with
    its intercept moved by the median log ratio of the rows' latencies to the
    fallback's estimates (bounded by :data:`FALLBACK_SCALE_BOUNDS`).

    The fallback is one log-log line in FLOPs and bytes over every kernel type of the
    dataset. A type with too few rows for a regressor of its own (a NAS-Bench-201
    cell's standalone ``add`` on OpenVINO: three configurations in the zoo's prior) is
    far from that line: its three rows ran at 0.17x the line on the Zen 4, so its
    30 adds in a cell were predicted 0.29 ms where the runtime's profile showed
    0.03 ms. One multiplicative correction is all that so few rows can fit (HELP's
    few-sample adaptation keeps to a handful of parameters for the same reason); the
    median keeps one odd row from setting it.

    Examples
    --------
    >>> fb = np.array([[1e6, 1e4], [1e7, 1e5], [1e8, 1e6]])
    >>> line = LinearKernelRegressor().fit(fb, np.array([0.01, 0.1, 1.0]))
    >>> own = scaled_fallback(line, fb[:2], np.array([0.002, 0.02]))
    >>> [round(float(v), 4) for v in own.predict(fb[:2])]
    [0.002, 0.02]
    """
    ratio = float(np.exp(np.median(np.log(np.maximum(y, 1e-9)
                                          / np.maximum(fallback.predict(fb), 1e-9)))))
    ratio = min(max(ratio, FALLBACK_SCALE_BOUNDS[0]), FALLBACK_SCALE_BOUNDS[1])
    own = LinearKernelRegressor(log_features=fallback.log_features,
                                log_target=fallback.log_target, ridge=fallback.ridge)
    own.coef_, own.scale_ = fallback.coef_.copy(), fallback.scale_.copy()
    own.intercept_ = float(fallback.intercept_) + math.log(ratio)
    own.n_features_in_ = fallback.n_features_in_
    own.feature_lo_, own.feature_hi_ = fallback.feature_lo_, fallback.feature_hi_
    return own


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
        families.setdefault(family_of(t), []).append(t)
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
    from nnmeter.predictors.store import write_atomic

    write_atomic(dataset.directory / CHOICE_FILE, json.dumps(
        {"regressor": choice, "source": source, "cv_acc10": scores, "folds": folds},
        indent=1, sort_keys=True).encode())
    return scores
