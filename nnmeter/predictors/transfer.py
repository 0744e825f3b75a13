"""A new device's predictor in minutes, adapted from a device that has one.

``nnmeter build -b ort-cpu --transfer-from DEVICE --budget-minutes 10`` reuses DEVICE's
kernel data and predictor and measures on this machine only what it must:

1. **Kernel configurations** (about half the budget), in priority order so that a budget
   cut keeps the most useful ones: the configurations where the zoo spends its time
   (the source predictor partitions a few variants of every family, seed 0; a kernel
   weighs its share of its model's predicted time, so every model counts alike), and,
   interleaved, configurations of the source's own data chosen far apart in feature
   space (farthest-point order), where two devices most likely differ: sizes from tiny
   to large (threading and cache effects) and channel counts off the vector width.
   Every kernel type of the zoo gets a share in proportion to the square root of its
   time weight, at least :data:`MIN_PER_TYPE`. Rows go to this machine's own dataset
   (``origin: "transfer"``), one at a time, so a stopped build resumes.
2. **The calibrations** the device needs (overhead, reorders, chain...; about a third of
   the budget), measured here, bounded by the budget and resumable
   (:func:`nnmeter.builder.calibrate`).
3. **The adaptation** (training, the rest). The target device's composition terms are
   fitted on its own rows; the source's on the source rows. A *correction model*
   learns ``log(target kernel ms / source predicted ms)`` per kernel type from the
   measured rows: a ridge regression on the log of the source's prediction (clamped to
   the measured range: never extrapolated) and whether the channel counts are
   multiples of 8 and 16, fitted
   hierarchically (all rows, then per family, then per type, each on what the level
   above left, each ridge's strength chosen by leave-one-out error), so a type with few
   rows borrows its family's correction. Every source row then becomes a pseudo-row of
   the target device (its time times the correction) and the target's own rows are
   added as they are; the regressors are trained on those exactly as a full build's.

Why this model: what changes between two devices is mostly a per-kernel-type factor
(clock, vector width, cache) that varies smoothly with the kernel's size (threading
pays off only on large kernels; small ones are overhead-bound), plus alignment effects
of the vector width. A few hundred measured configurations pin down such a smooth,
low-dimensional correction well, while the source's tens of thousands of rows keep the
shape of each kernel's latency surface: LitePred's observation (a pre-trained
predictor plus a small, well-chosen target sample; 1.4k-18.5k samples, under an hour)
and HELP's (a few samples suffice when the model knows what is shared across devices).

Training is deterministic from files: the target dataset holds only its own
measurements and ``transfer.json`` naming the source dataset; the predictor cache key
covers both datasets' files.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError

__all__ = ["TRANSFER_FILE", "find_source", "plan_configs", "read_transfer",
           "train_transfer", "LogRatioCorrection", "MIN_PER_TYPE"]

logger = logging.getLogger(__name__)

TRANSFER_FILE = "transfer.json"
#: fewest configurations a kernel type of the zoo gets in a transfer plan
MIN_PER_TYPE = 6
#: share of the budget for kernel measurements, calibrations; the rest trains
SAMPLE_SHARE, CALIBRATION_SHARE = 0.52, 0.36
#: zoo variants per family the plan partitions (seed 0: never a reported set)
PLAN_VARIANTS, PLAN_SEED = 3, 0


# -- the source ------------------------------------------------------------------------
def find_source(backend_id: str, source: str, root: Any = None) -> Any:
    """The dataset ``source`` names for a transfer to ``backend_id``: a device of the
    same backend (name, dataset id or fingerprint prefix), or a dataset id of another
    backend of the same runtime (``ort-cpu@...`` for ``ort-cpu-t2``).

    Raises
    ------
    DatasetError
        If nothing matches (the message lists the candidates), the match is of another
        runtime, or it has no predictor data.
    """
    from nnmeter.backends import get_backend
    from nnmeter.devices.datasets import device_datasets

    runtime = get_backend(backend_id).runtime
    sets = device_datasets(None, root)
    same = [d for d in sets if d.backend_id == backend_id and d.matches(source)]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        raise DatasetError(f"--transfer-from {source!r} names {len(same)} datasets "
                           f"({', '.join(d.dataset_id for d in same)}); pass a dataset id")
    other = [d for d in sets if d.dataset_id == source]
    if other:
        d = other[0]
        if get_backend(d.backend_id).runtime != runtime:
            raise DatasetError(f"--transfer-from {source!r} is a {d.backend_id} dataset "
                               f"(runtime {get_backend(d.backend_id).runtime}); a transfer "
                               f"to {backend_id} needs one of runtime {runtime}")
        return d
    known = [d.dataset_id for d in sets if get_backend(d.backend_id).runtime == runtime]
    raise DatasetError(f"--transfer-from {source!r} names no dataset of runtime {runtime}; "
                       f"known: {', '.join(known) or 'none'} (`nnmeter devices` lists them)")


# -- the plan --------------------------------------------------------------------------
def _farthest_order(Z: np.ndarray, first: int = 0) -> list[int]:
    """Indices of ``Z``'s rows in farthest-point order (each next row the farthest from
    those already taken), deterministic."""
    n = len(Z)
    if n == 0:
        return []
    order = [first]
    dist = np.linalg.norm(Z - Z[first], axis=1)
    for _ in range(n - 1):
        i = int(np.argmax(dist))
        if dist[i] <= 0:
            break
        order.append(i)
        dist = np.minimum(dist, np.linalg.norm(Z - Z[i], axis=1))
    return order


def _log_std(X: np.ndarray) -> np.ndarray:
    Z = np.log1p(np.abs(np.asarray(X, dtype=float)))
    sd = Z.std(axis=0)
    return (Z - Z.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def plan_configs(source_pred: Any, source_dir: str | os.PathLike, backend_id: str, *,
                 limit: int = 1000, n_per_family: int = PLAN_VARIANTS,
                 seed: int = PLAN_SEED) -> list[tuple[str, dict[str, Any], str]]:
    """The configurations a transfer measures, most useful first: ``(kernel type,
    config dict, why)`` with ``why`` ``zoo`` (a kernel of a zoo variant), ``spread`` (a
    source row, farthest-point order) or ``anchor`` (the source's fastest rows, which fix
    the runtime's per-inference overhead). See the module docstring."""
    from nnmeter import zoo
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.kernel_data import load_kernel_data
    from nnmeter.sampling.prior import config_key

    weight: dict[str, float] = defaultdict(float)
    zoo_cfgs: dict[str, dict[str, list[Any]]] = defaultdict(dict)
    for fam in zoo.FAMILY_NAMES:
        for v in zoo.sample_variants(fam, n_per_family, seed=seed):
            g = v.build()
            kernels = source_pred.kernels(g)
            rep = source_pred.predict(g, check_device=False)
            total = sum(r.predicted_ms for r in rep.rows) or 1.0
            for k, row in zip(kernels, rep.rows):
                if row.estimated_by.startswith("absorbed:") or row.predicted_ms <= 0:
                    continue
                d = k.kernel_type.config_to_dict(k.config)
                w = row.predicted_ms / total
                weight[k.type] += w
                hit = zoo_cfgs[k.type].setdefault(config_key(d), [d, 0.0])
                hit[1] += w
    src = KernelDataset(Path(source_dir), source_pred.backend_id)
    per_type: dict[str, list[tuple[dict[str, Any], str]]] = {}
    anchors: list[tuple[float, str, dict[str, Any]]] = []
    for t in sorted(weight):
        zoo_list = [d for d, _ in sorted(zoo_cfgs[t].values(), key=lambda e: -e[1])]
        spread: list[dict[str, Any]] = []
        data = load_kernel_data(src, t) if t in src.kernel_types() else None
        if data is not None and len(data):
            kt = KERNEL_TYPES.get(t)
            order = _farthest_order(_log_std(data.X), first=int(np.argmax(data.y)))
            spread = [kt.config_to_dict(data.configs[i]) for i in order]
            j = int(np.argmin(data.y))
            anchors.append((float(data.y[j]), t, kt.config_to_dict(data.configs[j])))
        merged, seen = [], set()
        for a, b in _interleave(zoo_list, spread):
            key = config_key(b)
            if key not in seen:
                seen.add(key)
                merged.append((b, a))
        per_type[t] = merged
    # quotas: the square root of each type's time weight, at least MIN_PER_TYPE
    root_w = {t: math.sqrt(w) for t, w in weight.items() if per_type.get(t)}
    scale = sum(root_w.values()) or 1.0
    quota = {t: max(MIN_PER_TYPE, limit * w / scale) for t, w in root_w.items()}
    plan: list[tuple[str, dict[str, Any], str]] = []
    for _, t, cfg in sorted(anchors, key=lambda a: a[0])[:3]:
        plan.append((t, cfg, "anchor"))
    taken = {t: 0 for t in quota}
    seen_all = {(t, config_key(c)) for t, c, _ in plan}
    while len(plan) < limit:
        live = [t for t in quota if taken[t] < len(per_type[t])]
        if not live:
            break
        # stride scheduling: the type furthest behind its quota goes next
        t = min(live, key=lambda t: (taken[t] / quota[t], t))
        cfg, why = per_type[t][taken[t]]
        taken[t] += 1
        if (t, config_key(cfg)) in seen_all:
            continue
        seen_all.add((t, config_key(cfg)))
        plan.append((t, cfg, why))
    logger.info("transfer plan for %s: %d configs over %d kernel types", backend_id,
                len(plan), len(quota))
    return plan


def _interleave(zoo_list: list[Any], spread: list[Any]) -> list[tuple[str, Any]]:
    """Zoo configs and spread configs alternately (two zoo configs per spread one while
    both last)."""
    out, i, j = [], 0, 0
    while i < len(zoo_list) or j < len(spread):
        for _ in range(2):
            if i < len(zoo_list):
                out.append(("zoo", zoo_list[i]))
                i += 1
        if j < len(spread):
            out.append(("spread", spread[j]))
            j += 1
    return out


# -- the adaptation --------------------------------------------------------------------
def _channels(cfg: Any) -> tuple[float, float]:
    cin = getattr(cfg, "cin", None)
    cout = getattr(cfg, "cout", None)
    if cin is None:
        cins = getattr(cfg, "cins", None)
        cin = sum(cins) if cins else None
    return (float(cin) if cin else 0.0, float(cout) if cout else float(cin or 0.0))


def _design(configs: list[Any], base: np.ndarray) -> np.ndarray:
    """The correction's inputs: log of the source's prediction, and whether the
    input/output channel counts are multiples of 16 and of 8."""
    lb = np.log(np.maximum(base, 1e-6))
    ch = np.array([_channels(c) for c in configs], dtype=float).reshape(-1, 2)
    off16 = (np.mod(ch, 16) != 0).astype(float)
    off8 = (np.mod(ch, 8) != 0).astype(float)
    return np.column_stack([lb, off16, off8])


class _Ridge:
    """A ridge regression with its strength chosen by leave-one-out error; inputs
    standardised with the training rows' mean and spread."""

    ALPHAS = (0.1, 1.0, 10.0, 100.0, 1000.0)

    def __init__(self) -> None:
        self.mean = self.scale = self.coef = None
        self.intercept = 0.0
        self.alpha = 0.0

    def fit(self, Z: np.ndarray, r: np.ndarray) -> "_Ridge":
        # never extrapolated: a kernel outside the measured range gets the edge's value
        self.lo, self.hi = Z.min(axis=0), Z.max(axis=0)
        self.mean = Z.mean(axis=0)
        sd = Z.std(axis=0)
        self.scale = np.where(sd > 1e-12, sd, 1.0)
        S = (Z - self.mean) / self.scale
        self.intercept = float(r.mean())
        rc = r - self.intercept
        best = None
        n = len(r)
        for a in self.ALPHAS:
            A = S.T @ S + a * np.eye(S.shape[1])
            coef = np.linalg.solve(A, S.T @ rc)
            H = S @ np.linalg.solve(A, S.T)
            h = np.clip(np.diag(H) + 1.0 / n, 0.0, 0.999)
            loo = float(np.mean(((rc - S @ coef) / (1 - h)) ** 2))
            if best is None or loo < best[0]:
                best = (loo, a, coef)
        _, self.alpha, self.coef = best
        return self

    def predict(self, Z: np.ndarray) -> np.ndarray:
        Z = np.clip(Z, self.lo, self.hi)
        return self.intercept + ((Z - self.mean) / self.scale) @ self.coef

    def as_dict(self) -> dict[str, Any]:
        return {"intercept": self.intercept, "alpha": self.alpha,
                "coef": [float(c) for c in self.coef], "mean": [float(m) for m in self.mean],
                "scale": [float(s) for s in self.scale]}


class LogRatioCorrection:
    """``log(target ms / source predicted ms)`` as a function of a kernel: a global ridge,
    a per-family ridge on its residual (families with :attr:`MIN_ROWS` rows), a per-type
    ridge on that residual (types with :attr:`MIN_ROWS` rows)."""

    MIN_ROWS = 8

    def __init__(self) -> None:
        self.root: _Ridge | None = None
        self.family: dict[str, _Ridge] = {}
        self.type: dict[str, _Ridge] = {}
        self.rows: dict[str, int] = {}

    def fit(self, rows: dict[str, tuple[list[Any], np.ndarray, np.ndarray]]) -> "LogRatioCorrection":
        """``rows``: kernel type → (configs, source predicted ms, target ms)."""
        from nnmeter.predictors.kernel_data import family_of

        Zs, rs, fams, types = [], [], [], []
        for t, (cfgs, base, y) in sorted(rows.items()):
            ok = (base > 0) & (y > 0) & np.isfinite(base) & np.isfinite(y)
            if not ok.any():
                continue
            cfgs = [c for c, k in zip(cfgs, ok) if k]
            Zs.append(_design(cfgs, base[ok]))
            rs.append(np.log(y[ok] / base[ok]))
            fams += [family_of(t)] * int(ok.sum())
            types += [t] * int(ok.sum())
            self.rows[t] = int(ok.sum())
        if not Zs:
            raise DatasetError("a transfer needs measured kernel rows on this device; none "
                               "are usable (rerun the transfer build)")
        Z, r = np.vstack(Zs), np.concatenate(rs)
        fams_a, types_a = np.array(fams), np.array(types)
        self.root = _Ridge().fit(Z, r)
        res = r - self.root.predict(Z)
        for f in sorted(set(fams)):
            m = fams_a == f
            if m.sum() >= self.MIN_ROWS:
                self.family[f] = _Ridge().fit(Z[m], res[m])
                res[m] -= self.family[f].predict(Z[m])
        for t in sorted(set(types)):
            m = types_a == t
            if m.sum() >= self.MIN_ROWS:
                self.type[t] = _Ridge().fit(Z[m], res[m])
        return self

    def log_ratio(self, kernel_type: str, configs: list[Any], base: np.ndarray) -> np.ndarray:
        from nnmeter.predictors.kernel_data import family_of

        Z = _design(configs, base)
        out = self.root.predict(Z)
        f = self.family.get(family_of(kernel_type))
        if f is not None:
            out = out + f.predict(Z)
        t = self.type.get(kernel_type)
        if t is not None:
            out = out + t.predict(Z)
        # a correction is a device factor, not a new latency surface: bounded
        return np.clip(out, math.log(1 / 20), math.log(20))

    def summary(self) -> dict[str, Any]:
        return {"rows": int(sum(self.rows.values())), "types": dict(self.rows),
                "family_models": sorted(self.family), "type_models": sorted(self.type)}


def _source_key(pred: Any, kernel_type: str) -> str:
    """The source predictor's estimator key for a kernel type."""
    from nnmeter.kernels import KERNEL_TYPES

    fam = getattr(KERNEL_TYPES.get(kernel_type), "family", "") or ""
    return pred._estimator_key(kernel_type, fam)


def _source_base(pred: Any, kernel_type: str, data: Any) -> np.ndarray:
    """The source predictor's kernel estimate (before composition) for each row."""
    from nnmeter.predictors.model import FALLBACK_KEY

    key = _source_key(pred, kernel_type)
    X = data.fb if key == FALLBACK_KEY else data.X
    return np.asarray(pred.regressors[key].predict(X), dtype=float)


def read_transfer(directory: str | os.PathLike) -> dict[str, Any]:
    """The ``transfer.json`` of a dataset.

    Raises
    ------
    DatasetError
        If it is not valid JSON or lacks ``source_dataset``/``source_backend``.
    """
    path = Path(directory) / TRANSFER_FILE
    try:
        rec = json.loads(path.read_text())
    except ValueError as err:
        raise DatasetError(f"{path} is not valid JSON ({err}); rerun the transfer build "
                           f"or delete it") from err
    if not isinstance(rec, dict) or not rec.get("source_dataset") or not rec.get("source_backend"):
        raise DatasetError(f"{path} must name 'source_dataset' and 'source_backend'; rerun "
                           f"the transfer build or delete it")
    return rec


def train_transfer(backend_id: str, ds: Any, rules: Any, settings: Any, source: Any) -> Any:
    """The predictor of a dataset built by transfer (see the module docstring), from
    ``source``, the source dataset's trained predictor
    (:func:`nnmeter.predictors.load_predictor` passes it).

    Raises
    ------
    DatasetError
        If the source dataset named in ``transfer.json`` is missing.
    PredictorError
        If this device has no usable kernel rows yet.
    """
    from nnmeter.predictors.composition import Composition, fit_context
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.kernel_data import KernelData
    from nnmeter.predictors.model import LatencyPredictor
    from nnmeter.predictors.terms import TERMS
    from nnmeter.predictors.train import fit_regressors

    rec = read_transfer(ds.directory)
    src_dir = ds.directory.parent / rec["source_dataset"]
    if not src_dir.is_dir():
        raise DatasetError(f"{ds.directory / TRANSFER_FILE} names source dataset "
                           f"{rec['source_dataset']!r}, which is not in {ds.directory.parent}")
    src_backend = rec["source_backend"]
    src_pred = source
    # this device's rows, its own terms removed
    ctx_t = fit_context(backend_id, ds, settings)
    comp_t = Composition.fit(ctx_t, TERMS)
    # the source's rows, the source's terms removed (what its regressors learnt)
    src_ds = KernelDataset(src_dir, src_backend)
    ctx_s = fit_context(src_backend, src_ds, settings)
    Composition.fit(ctx_s, TERMS)

    # the correction learns from types the source has a regressor for (its own or its
    # family's); against the source's FLOPs/bytes fallback a ratio says little
    pairs = {t: (d.configs, _source_base(src_pred, t, d), d.y) for t, d in ctx_t.data.items()
             if _source_key(src_pred, t) != "fallback"} or \
        {t: (d.configs, _source_base(src_pred, t, d), d.y) for t, d in ctx_t.data.items()}
    corr = LogRatioCorrection().fit(pairs)
    ratios = np.concatenate([y / np.maximum(b, 1e-9) for _, b, y in pairs.values()])
    data: dict[str, KernelData] = {}
    for t, d in ctx_s.data.items():
        base = _source_base(src_pred, t, d)
        factor = np.exp(corr.log_ratio(t, d.configs, base))
        pseudo = KernelData(t, list(d.configs), d.X, d.y * factor, d.fb,
                            ["pseudo"] * len(d))
        own = ctx_t.data.get(t)
        if own is not None:
            pseudo = KernelData(t, pseudo.configs + list(own.configs),
                                np.vstack([pseudo.X, own.X]), np.concatenate([pseudo.y, own.y]),
                                np.vstack([pseudo.fb, own.fb]), pseudo.origins + own.origins)
        data[t] = pseudo
    for t, d in ctx_t.data.items():
        data.setdefault(t, d)
    regressors, counts = fit_regressors(data, src_ds, settings)
    meta = ds.meta() or {}
    summary = {**corr.summary(), "median_ratio": float(np.median(ratios)),
               "source": rec["source_dataset"]}
    return LatencyPredictor(
        backend_id, rules, regressors, device=meta.get("device"), composition=comp_t,
        meta={"samples": counts, "settings": settings.as_dict(),
              "fingerprint_id": meta.get("fingerprint_id"), "dataset": str(ds.directory),
              "transfer": {"source": rec["source_dataset"], "summary": summary,
                           "root": corr.root.as_dict() if corr.root else None}})
