"""Adaptive step-point sampling (nn-Meter §4.3), with no duplicates and stable splits.

Kernel latency grows in *steps* as channels grow (SIMD widths, tiling), so a
prior-driven sample leaves the regressor blind around step points. After each
training round we look for configurations predicted more than ``threshold`` (10 %)
off by a model that did not see them (k-fold cross-validation over every non-test
sample; nn-Meter looked at a held-out split only, which finds far fewer of them), and measure new configurations around each of them:

- *random neighbours*: every channel field uniform in ``[0.5·c, 1.2·c)``, the other
  fields fixed (nn-Meter's rule);
- *a fine channel sweep*: one channel field at a time over evenly spaced integers of
  the same range, the other fields fixed, which locates the step points.

New configurations never repeat anything measured before (``exclude``).

Splits are a pure function of the configuration (a hash), so they survive a resumed
build: initial samples go 70/15/15 % to train/validation/test, adaptive samples
always to train. The test split, never looked at by the sampler, gives the held-out
accuracy we report; the validation split gives a second held-out figure.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> new = sample_around({"hw": 14, "cin": 64, "cout": 64}, 6, rng, ("cin", "cout"))
>>> all(32 <= c["cin"] < 77 and c["hw"] == 14 for c in new), len(new)
(True, 6)
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nnmeter.evaluate import evaluate
from nnmeter.sampling.prior import config_key

__all__ = ["Sample", "RoundLog", "AdaptiveResult", "split_of", "high_error_indices",
           "sample_around", "run_adaptive"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One measured kernel configuration. ``origin`` is "initial" or "round<k>"."""

    config: dict[str, Any]
    latency_ms: float
    origin: str = "initial"


@dataclass(frozen=True)
class RoundLog:
    """What one adaptive round did and reached. Accuracies are fractions."""

    kernel_type: str
    round: int
    n_train: int
    n_val: int
    n_test: int
    val_acc10: float
    cv_acc10: float
    test_acc10: float
    test_mape_percent: float
    n_high_error: int
    n_new: int
    n_measured_total: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AdaptiveResult:
    """The samples after sampling, the regressor of the last round and every round's log."""

    samples: list[Sample]
    regressor: Any
    logs: list[RoundLog] = field(default_factory=list)


def split_of(config: dict[str, Any], origin: str = "initial", *, val_percent: int = 15,
             test_percent: int = 15) -> str:
    """"train", "val" or "test" for a configuration, stable across runs and processes."""
    if origin != "initial":
        return "train"
    h = int(hashlib.sha1(config_key(config).encode()).hexdigest()[:8], 16) % 100
    if h < test_percent:
        return "test"
    if h < test_percent + val_percent:
        return "val"
    return "train"


def high_error_indices(true: Sequence[float], pred: Sequence[float],
                       threshold: float = 0.10) -> list[int]:
    """Indices whose relative error exceeds ``threshold``, largest error first."""
    t = np.asarray(true, dtype=np.float64)
    p = np.asarray(pred, dtype=np.float64)
    err = np.abs(p - t) / t
    idx = np.flatnonzero(err > threshold)
    return [int(i) for i in idx[np.argsort(-err[idx], kind="stable")]]


def _channel_range(c: int, low: float, high: float) -> tuple[int, int]:
    lo = max(1, int(np.floor(low * c)))
    hi = max(lo + 1, int(np.ceil(high * c)))
    return lo, hi  # [lo, hi)


def sample_around(config: dict[str, Any], n: int, rng: np.random.Generator,
                  channel_fields: Sequence[str], *, ties: Sequence[Sequence[str]] = (),
                  low: float = 0.5, high: float = 1.2, sweep_fraction: float = 0.5,
                  exclude: set[str] | None = None, align: int = 8,
                  align_fraction: float = 0.5) -> list[dict[str, Any]]:
    """Up to ``n`` new configurations near ``config`` (see the module docstring).

    Parameters
    ----------
    channel_fields : sequence of str
        Fields that are varied; all others stay as in ``config``.
    ties : sequence of field groups
        Groups that must stay equal (dwconv CIN == COUT); the first of each is varied.
    sweep_fraction : float
        Share of the ``n`` spent on fine one-field sweeps, the rest on random neighbours.
    exclude : set of str, optional
        ``config_key`` of every configuration measured or queued; updated in place.
    align, align_fraction : int, float
        This share of the random neighbours has every varied field rounded to a
        multiple of ``align``: the step points of blocked kernels sit there.
    """
    exclude = set() if exclude is None else exclude
    groups: list[tuple[str, ...]] = [tuple(t) for t in ties if t and t[0] in channel_fields]
    tied = {f for g in groups for f in g}
    groups += [(f,) for f in channel_fields if f not in tied]
    if not groups:
        return []
    out: list[dict[str, Any]] = []

    def take(cfg: dict[str, Any]) -> bool:
        key = config_key(cfg)
        if key in exclude:
            return False
        exclude.add(key)
        out.append(cfg)
        return True

    def with_value(base: dict[str, Any], group: tuple[str, ...], value: int) -> dict[str, Any]:
        cfg = dict(base)
        for f in group:
            cfg[f] = int(value)
        return cfg

    n_sweep = int(round(n * sweep_fraction))
    per_group = max(1, n_sweep // len(groups)) if n_sweep else 0
    for group in groups:
        lo, hi = _channel_range(int(config[group[0]]), low, high)
        values = np.unique(np.linspace(lo, hi - 1, num=min(per_group, hi - lo)).round())
        for v in values:
            if len(out) >= n_sweep:
                break
            take(with_value(config, group, int(v)))
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        cfg = dict(config)
        snap = align > 1 and rng.random() < align_fraction
        for group in groups:
            lo, hi = _channel_range(int(config[group[0]]), low, high)
            v = int(rng.integers(lo, hi))
            if snap:  # to the nearest multiple inside [lo, hi), if there is one
                m = align * int(round(v / align))
                m = m - align if m >= hi else m
                v = m if m >= max(lo, align) else v
            cfg = with_value(cfg, group, v)
        take(cfg)
    return out


def run_adaptive(
    kernel_type: str,
    samples: list[Sample],
    measure: Callable[[list[dict[str, Any]], str], list[Sample]],
    featurize: Callable[[list[dict[str, Any]]], np.ndarray],
    make_regressor: Callable[[], Any],
    *,
    channel_fields: Sequence[str],
    ties: Sequence[Sequence[str]] = (),
    rounds: int = 3,
    start_round: int = 1,
    per_point: int = 10,
    threshold: float = 0.10,
    target_acc10: float = 0.97,
    max_new_per_round: int = 300,
    accept: Callable[[dict[str, Any]], bool] | None = None,
    cv_folds: int = 3,
    explore: Callable[[int, set[str]], list[dict[str, Any]]] | None = None,
    explore_fraction: float = 0.0,
    seed: int = 0,
    should_stop: Callable[[], bool] = lambda: False,
    on_round: Callable[[RoundLog], None] | None = None,
) -> AdaptiveResult:
    """Train, find high-error validation points, measure around them, repeat.

    Parameters
    ----------
    samples : list of Sample
        Everything measured so far for this kernel type (initial and earlier rounds).
    measure : callable
        ``measure(configs, origin) -> list[Sample]`` profiles the configurations (and,
        in the builder, appends each to disk as soon as it is measured); it may return
        fewer than asked when the budget runs out or a measurement fails.
    featurize : callable
        Configurations → feature matrix (the kernel type's single feature function).
    make_regressor : callable
        Returns a fresh, unfitted regressor.
    rounds, start_round : int
        Rounds ``start_round .. rounds`` run (a resumed build starts later).
    per_point : int
        New configurations per high-error point (nn-Meter: 10–20).
    target_acc10 : float
        Stop early once the cross-validated ±10 % accuracy reaches this share.
    cv_folds : int
        Folds of the cross-validation that finds high-error points.
    explore : callable, optional
        ``explore(n, exclude_keys) -> configs``: fresh draws from the prior. With
        ``explore_fraction`` > 0, that share of each round's new configurations comes
        from the prior instead of the neighbourhoods of high-error points, which keeps
        the whole space covered when errors cluster.
    explore_fraction : float
        See ``explore``.
    max_new_per_round : int
        Cap on new configurations per round (largest errors first).
    accept : callable, optional
        Filter for new configurations (e.g. a FLOPs cap).
    should_stop : callable
        Polled between rounds and passed on to nothing else; True ends the loop (budget).
    on_round : callable, optional
        Called with each round's :class:`RoundLog` as soon as it is known.

    Returns
    -------
    AdaptiveResult
        All samples (old and new), the last trained regressor, the round logs.
    """
    samples = list(samples)
    logs: list[RoundLog] = []
    exclude = {config_key(s.config) for s in samples}
    reg = None
    for rnd in range(start_round, rounds + 1):
        t0 = time.perf_counter()
        reg, parts = _train_and_score(samples, featurize, make_regressor)
        val, test = parts["val"], parts["test"]
        val_acc = val[2].acc10 if val[2] is not None else float("nan")
        # Where to sample: every non-test point judged by a model that did not see it
        # (k-fold cross-validation), so the whole training set, not only the small
        # validation split, points at unseen step points.
        pool_cfgs, pool_true, pool_pred = _cross_val(samples, featurize, make_regressor,
                                                     folds=cv_folds, seed=seed)
        high = high_error_indices(pool_true, pool_pred, threshold) if pool_cfgs else []
        cv_acc = float(np.mean(np.abs(pool_pred - pool_true) <= threshold * pool_true)) \
            if pool_cfgs else float("nan")
        done = (bool(pool_cfgs) and cv_acc >= target_acc10) or should_stop()
        new_cfgs: list[dict[str, Any]] = []
        if not done and high:
            rng = np.random.default_rng([seed, rnd, len(samples)])
            for i in rng.permutation(high) if len(high) * per_point > max_new_per_round else high:
                cands = sample_around(pool_cfgs[int(i)], per_point, rng, channel_fields, ties=ties,
                                      exclude=exclude)
                new_cfgs += [c for c in cands if accept is None or accept(c)]
                if len(new_cfgs) >= max_new_per_round:
                    new_cfgs = new_cfgs[:max_new_per_round]
                    break
            if explore is not None and explore_fraction > 0 and new_cfgs:
                n_explore = int(round(len(new_cfgs) * explore_fraction))
                drawn = explore(n_explore, exclude)
                for c in drawn:
                    exclude.add(config_key(c))
                new_cfgs = new_cfgs[:len(new_cfgs) - len(drawn)] + list(drawn)
        new = measure(new_cfgs, f"round{rnd}") if new_cfgs else []
        samples += new
        log = RoundLog(
            kernel_type=kernel_type, round=rnd, n_train=len(parts["train"][0]),
            n_val=len(val[0]), n_test=len(test[0]), val_acc10=float(val_acc),
            cv_acc10=cv_acc,
            test_acc10=float(test[2].acc10) if test[2] is not None else float("nan"),
            test_mape_percent=float(test[2].mape_percent) if test[2] is not None else float("nan"),
            n_high_error=len(high), n_new=len(new), n_measured_total=len(samples),
            seconds=time.perf_counter() - t0,
        )
        logs.append(log)
        if on_round is not None:
            on_round(log)
        logger.info("%s round %d (cv ±10%% %.3f): val ±10%% %.3f, test ±10%% %.3f, %d high-error, %d new",
                    kernel_type, rnd, cv_acc, log.val_acc10, log.test_acc10, len(high), len(new))
        if done or not new:
            break
    return AdaptiveResult(samples=samples, regressor=reg, logs=logs)


def _cross_val(samples: list[Sample], featurize, make_regressor, *, folds: int, seed: int):
    """Out-of-fold predictions for every non-test sample: (configs, true, predicted)."""
    pool = [s for s in samples if split_of(s.config, s.origin) != "test"]
    if len(pool) < 2 * folds:
        return [], np.array([]), np.array([])
    cfgs = [s.config for s in pool]
    X = featurize(cfgs)
    y = np.array([s.latency_ms for s in pool])
    fold = np.random.default_rng(seed).permutation(len(pool)) % folds
    pred = np.empty(len(pool))
    for k in range(folds):
        test = fold == k
        pred[test] = make_regressor().fit(X[~test], y[~test]).predict(X[test])
    return cfgs, y, pred


def _train_and_score(samples: list[Sample], featurize, make_regressor):
    """Fit on the train split; return (regressor, {split: (configs, true, metrics, pred)})."""
    by: dict[str, list[Sample]] = {"train": [], "val": [], "test": []}
    for s in samples:
        by[split_of(s.config, s.origin)].append(s)
    if not by["train"]:  # tiny sets: train on what there is
        by["train"] = list(samples)
    X = featurize([s.config for s in by["train"]])
    y = np.array([s.latency_ms for s in by["train"]])
    reg = make_regressor().fit(X, y)
    parts = {}
    for name, group in by.items():
        cfgs = [s.config for s in group]
        true = np.array([s.latency_ms for s in group])
        if group:
            pred = reg.predict(featurize(cfgs))
            parts[name] = (cfgs, true, evaluate(pred, true), pred)
        else:
            parts[name] = ([], true, None, np.array([]))
    return reg, parts
