"""Build a latency predictor for a backend: detect → sample → profile → train, resumable.

:func:`build_predictor` runs, for one backend id:

1. fusion-rule detection if ``fusion_rules/<backend>.json`` is missing
   (:func:`nnmeter.fusion.detect_fusion`);
2. the kernel-configuration prior: zoo variants partitioned with those rules, so the
   prior is over the *kernel types the backend really runs* (``conv-bn-relu``...);
3. per kernel type, by importance (share of zoo kernels, conv and dwconv weighted up):
   initial configurations from the prior, profiled one by one through one long-lived
   :class:`~nnmeter.backends.Profiler`, then adaptive step-point rounds
   (:mod:`nnmeter.sampling.adaptive`) while the type's share of the budget lasts;
4. training (and caching) the predictor.

Every measurement is appended to ``datasets/kernels/<dataset>/<kernel-type>.jsonl``
as soon as it is made; rerunning resumes (the initial list is deterministic, measured
configurations are skipped, rounds continue from the log). Datasets never mix device
fingerprints (:class:`~nnmeter.errors.FingerprintMismatchError`).

Examples
--------
>>> result = build_predictor("ort-cpu", budget_minutes=15)        # doctest: +SKIP
>>> result.types["conv-bn-relu"]["samples"]                        # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import (BackendError, DatasetError, FusionRulesError, MeasurementError,
                            PredictorError,
                            UnsupportedOpError)
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
from nnmeter.predictors.features import model_input
from nnmeter.sampling.adaptive import Sample, run_adaptive
from nnmeter.sampling.initial import iter_initial
from nnmeter.sampling.prior import KernelPrior, config_key

__all__ = ["calibrate", "build_predictor", "BuildResult", "kernel_prior_from_zoo", "importance_weights",
           "profile_configs"]

logger = logging.getLogger(__name__)

#: importance multipliers of kernel families (nn-Meter shipped ~2x conv samples)
FAMILY_WEIGHT = {"conv": 3.0, "dwconv": 2.0, "fc": 1.0}
#: kernels above this many FLOPs are not sampled (seconds per run; no real layer of the zoo
#: at batch 1 comes close)
MAX_KERNEL_FLOPS = 8e9
#: on backends that take .tflite files, kernels with more weights than this are not
#: sampled: converting one fc layer of ~100 M parameters (VGG-sized) took the converter
#: past 24 GiB here
MAX_TFLITE_KERNEL_PARAMS = 32e6
DEFAULT_PROTOCOL = {"rounds": 4, "round_ms": 20.0}


@dataclass
class BuildResult:
    """Outcome of a build: per kernel type the samples, held-out accuracy and minutes."""

    backend_id: str
    dataset_dir: str
    types: dict[str, dict[str, Any]] = field(default_factory=dict)
    minutes: float = 0.0
    measurements: int = 0
    stopped_by_budget: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"backend_id": self.backend_id, "dataset_dir": self.dataset_dir,
                "types": self.types, "minutes": self.minutes,
                "measurements": self.measurements, "stopped_by_budget": self.stopped_by_budget}


def kernel_prior_from_zoo(rules: Any, *, n_per_family: int = 8, seed: int = 0,
                          families: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Kernel configurations (as dicts) per kernel type, from zoo variants partitioned
    with ``rules``. Duplicates are kept: they carry the frequencies."""
    from nnmeter import zoo
    from nnmeter.partition import partition

    names = list(families) if families is not None else list(zoo.FAMILY_NAMES)
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        variants = [zoo.base_variant(name)] + list(zoo.sample_variants(name, n_per_family, seed))
        for v in variants:
            graph = v.build()
            for k in partition(graph, rules):
                if k.type == "other":
                    continue
                out.setdefault(k.type, []).append(k.kernel_type.config_to_dict(k.config))
    return dict(sorted(out.items()))


def importance_weights(configs: dict[str, list[dict[str, Any]]], *,
                       min_count: int = 3) -> dict[str, float]:
    """Budget share per kernel type: zoo frequency × family weight, normalised."""
    from nnmeter.kernels import KERNEL_TYPES

    raw = {}
    for t, cfgs in configs.items():
        if len(cfgs) < min_count:
            continue
        fam = getattr(KERNEL_TYPES.get(t), "family", t)
        raw[t] = math.sqrt(len(cfgs)) * FAMILY_WEIGHT.get(fam, 1.0)
    total = sum(raw.values()) or 1.0
    return {t: w / total for t, w in sorted(raw.items(), key=lambda kv: -kv[1])}


def _measurement_row(kernel_type: str, config: dict[str, Any], m: Any, origin: str) -> dict[str, Any]:
    return {
        "kernel_type": kernel_type, "config": config,
        "latency_ms": m.latency_ms if m.ok else None,
        "median_ms": m.median_ms if m.ok else None, "min_ms": m.min_ms if m.ok else None,
        "std_ms": m.std_ms if m.ok else None, "spread": m.spread if m.ok else None,
        "runs": m.runs, "rounds": m.rounds, "ok": bool(m.ok), "error": m.error,
        "fingerprint_id": m.device.fingerprint_id if m.device else None,
        "origin": origin, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def profile_configs(kernel_type: str, configs: Sequence[dict[str, Any]], origin: str, *,
                    profiler: Any, dataset: KernelDataset, deadline: float,
                    protocol: dict[str, Any] | None = None,
                    on_measured: Callable[[int], None] | None = None) -> list[Sample]:
    """Measure each config's single-kernel model and append its row at once.

    Stops at ``deadline`` (``time.monotonic()`` seconds). Failed measurements are
    recorded (``ok: false``) so a resumed build does not retry them, but not returned.

    Raises
    ------
    FingerprintMismatchError
        If the device measured differs from the dataset's.
    """
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get(kernel_type)
    out: list[Sample] = []
    for cfg in configs:
        if time.monotonic() >= deadline:
            break
        try:
            graph = kt.build_graph(kt.config_from_dict(cfg))
        except (UnsupportedOpError, ValueError, TypeError) as err:
            logger.info("%s %s: cannot build a profiling model: %s", kernel_type, cfg, err)
            continue
        try:
            m = profiler.measure(graph, on_error="record", **(protocol or {}))
        except (BackendError, MeasurementError) as err:
            logger.warning("%s %s: measurement failed: %s", kernel_type, cfg, err)
            continue
        if m.device is not None:
            dataset.check_device(m.device.as_dict())
        dataset.append(kernel_type, _measurement_row(kernel_type, cfg, m, origin))
        if on_measured is not None:
            on_measured(1)
        if m.ok and m.latency_ms > 0 and math.isfinite(m.latency_ms):
            out.append(Sample(cfg, float(m.latency_ms), origin))
    return out


def _accept(kernel_type: str, max_params: float | None = None) -> Callable[[dict[str, Any]], bool]:
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get(kernel_type)
    names = tuple(kt.feature_names)
    capped = max_params is not None and "params" in names

    def ok(cfg: dict[str, Any]) -> bool:
        if "FLOPs" not in names and not capped:
            return True
        try:
            feats = kt.features(kt.config_from_dict(cfg))
        except Exception:  # an invalid config (e.g. a kernel larger than its input)
            return False
        if "FLOPs" in names and feats[names.index("FLOPs")] > MAX_KERNEL_FLOPS:
            return False
        return not capped or feats[names.index("params")] <= max_params
    return ok


#: features that mark a type as sensitive to power-of-two channel counts (see
#: :func:`nnmeter.kernels.dwconv.channel_alignment`): its build also measures
#: :data:`N_ALIGNED` configurations whose channels are multiples of 256, 512 or 1024
ALIGNMENT_FEATURES = frozenset({"CIN_ALIGN"})
N_ALIGNED = 60


def aligned_configs(prior: KernelPrior, n: int, *, seed: int = 0,
                    exclude: Iterable[dict[str, Any]] = (),
                    accept: Callable[[dict[str, Any]], bool] | None = None
                    ) -> list[dict[str, Any]]:
    """Up to ``n`` configurations from ``prior`` whose tied channel fields are snapped to a
    multiple of 256, 512 or 1024 (one chosen per config; at least that multiple), none of
    them in ``exclude``.

    A prior drawn from real models rarely lands on such counts (about 2 % of the zoo's
    depthwise convs have channels divisible by 512), yet that is where a channels-last
    kernel's taps alias in the cache; without a few measured there, a regressor cannot
    learn the spike. Deterministic for (prior, n, seed, exclude, accept).

    >>> from nnmeter.sampling.prior import KernelPrior
    >>> pr = KernelPrior.from_configs("dwconv-bn", [
    ...     {"h": 14, "w": 14, "cin": c, "kernel": 3, "stride": 1, "pads": None}
    ...     for c in (96, 384, 576, 960)])
    >>> cfgs = aligned_configs(pr, 5, seed=1)
    >>> all(c["cin"] % 256 == 0 for c in cfgs), len(cfgs) == len({str(c) for c in cfgs})
    (True, True)
    """
    groups = prior.ties or tuple((f,) for f in prior.channel_fields)

    def snap(cfg: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        step = int(rng.choice((256, 512, 1024)))
        for group in groups:
            v = max(step, step * int(round(cfg[group[0]] / step)))
            for f in group:
                cfg[f] = v
        return cfg

    return list(itertools.islice(iter_initial(prior, seed=(seed, 256), exclude=exclude,
                                              accept=accept, transform=snap), n))


def _featurizer(kernel_type: str) -> Callable[[list[dict[str, Any]]], np.ndarray]:
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get(kernel_type)
    cache: dict[str, np.ndarray] = {}

    def featurize(cfgs: list[dict[str, Any]]) -> np.ndarray:
        rows = []
        for c in cfgs:
            key = config_key(c)
            if key not in cache:
                cache[key] = model_input(kt.feature_names, kt.features(kt.config_from_dict(c)))
            rows.append(cache[key])
        return np.vstack(rows) if rows else np.zeros((0, len(model_input(
            kt.feature_names, np.zeros(len(kt.feature_names))))))
    return featurize


def _record_prior(path: Path, weights: dict[str, float], priors: dict[str, Any],
                  kernels: Sequence[str] | None) -> None:
    """Write the sampling prior of this run to ``path`` (``prior.json``, for the record).

    A run limited to some kernel types (``kernels``) merges its priors into the file
    rather than replacing it, and lists its own weights under ``restricted_runs``: the
    full run's record must survive a targeted resume.
    """
    import json

    record = {"weights": weights, "priors": {t: p.to_dict() for t, p in priors.items()}}
    if kernels and path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = None
        if isinstance(old, dict) and "priors" in old:
            old["priors"].update(record["priors"])
            old.setdefault("restricted_runs", []).append(
                {"kernels": sorted(kernels), "weights": weights})
            record = old
    path.write_text(json.dumps(record, default=str))


def calibrate(backend_id: str, dataset_dir: Path, names: Sequence[str] | None = None) -> list[str]:
    """Measure and write the calibration record of every composition term
    (:mod:`nnmeter.predictors.terms`, in their order) that the device needs
    (``Term.wanted`` on the dataset's device facts), that ``names`` selects (None: all)
    and that the dataset does not hold yet. Returns the terms calibrated.

    A term's ``calibration_skips`` errors skip it with a warning instead of failing.
    """
    from nnmeter.predictors.facts import device_facts
    from nnmeter.predictors.terms import TERMS, composition_before

    ds = KernelDataset(dataset_dir, backend_id)
    facts = device_facts((ds.meta() or {}).get("device"))
    done = []
    for name in TERMS.ordered():
        term = TERMS.get(name)
        if term.record_file is None or (names is not None and name not in names) \
                or not term.wanted(facts) or (dataset_dir / term.record_file).exists():
            continue
        logger.info("measuring %s", term.calibration or name)
        try:
            before = composition_before(backend_id, dataset_dir, name) \
                if term.measures_after else None
            term.write(dataset_dir, term.measure(backend_id, dataset_dir, before=before))
            done.append(name)
        except term.calibration_skips as err:
            logger.warning("%s calibration skipped: %s", name, err)
    return done


def build_predictor(
    backend_id: str,
    *,
    budget_minutes: float = 20.0,
    resume: bool = True,
    kernels: Sequence[str] | None = None,
    dataset: str | None = None,
    root: str | Path | None = None,
    rounds: int = 3,
    initial_fraction: float = 0.6,
    explore_fraction: float = 0.3,
    n_per_family: int = 5,
    seed: int = 0,
    protocol: dict[str, Any] | None = None,
    profiler: Any = None,
    progress: bool = True,
    train: bool = True,
    max_samples_per_type: int | None = None,
    regressor_params: dict[str, Any] | None = None,
    rules: Any = None,
    prior_configs: dict[str, list[dict[str, Any]]] | None = None,
    on_type_done: Callable[[str, dict[str, Any]], None] | None = None,
    calibrate_boundary: bool = True,
    calibrate_weight_stream: bool = True,
    calibrate_reorders: bool = True,
    calibrate_chain: bool = True,
) -> BuildResult:
    """Sample, profile and train kernel regressors for ``backend_id`` within a budget.

    Parameters
    ----------
    budget_minutes : float
        Wall-clock budget of this run's profiling, split across kernel types by
        importance; time a type does not use passes to the next.
    resume : bool
        Continue an existing dataset (default). ``False`` refuses to touch a dataset
        that already has rows.
    kernels : sequence of str, optional
        Only these kernel types (or families: ``conv`` selects every ``conv-*`` type).
    dataset : str, optional
        Dataset id (folder under ``datasets/kernels``); default the backend id.
    rounds : int
        Adaptive sampling rounds per kernel type.
    initial_fraction : float
        Share of a type's budget for the initial (prior) sample.
    explore_fraction : float
        Share of each adaptive round's new configurations drawn fresh from the prior
        (the rest go around high-error points). On synthetic 2-D step functions, pure
        neighbourhood sampling fell behind uniform sampling of equal size over the
        whole space; mixing in prior draws closed most of that gap.
    protocol : dict, optional
        Measurement protocol overrides (default: 4 rounds of 20 ms).
    profiler : Profiler-like, optional
        Anything with ``measure(graph, on_error=..., **protocol) -> Measurement``; by
        default one :class:`~nnmeter.backends.Profiler` for the whole build.
    train : bool
        Choose each kernel type's regressor by cross-validation (rf or lgbm, written to
        ``predictor.json``), then train and cache the predictor.
    max_samples_per_type : int, optional
        Cap on the measurements per kernel type in this run (small test builds).
    regressor_params : dict, optional
        Overrides of the sampling-time regressors' hyper-parameters.
    rules : FusionRules, optional
        Use these rules instead of loading (or detecting) the backend's.
    prior_configs : dict, optional
        Kernel type → real configurations (dicts), instead of walking the zoo.
    calibrate_boundary : bool
        On devices whose runtime pays edge conversions (:class:`DeviceFacts`), measure
        the boundary cost of single-kernel models (``boundary.json``, the ``edges``
        term) once per dataset, after profiling.
    calibrate_weight_stream : bool
        Measure the rate at which the device streams weights from memory
        (``weight_stream.json``, :mod:`nnmeter.predictors.weight_stream`) once per
        dataset, after profiling.
    calibrate_reorders : bool
        On devices with a blocked layout (``DeviceFacts.layout_block``),
        profile the single-kernel models' layout reorders (``reorders.json``,
        :mod:`nnmeter.predictors.reorder`) once per dataset, after profiling.
    calibrate_chain : bool
        Measure chains of identical kernels against the single kernel
        (``chain_excess.json``, :mod:`nnmeter.predictors.chain`) once per dataset, after
        the other calibrations (about two minutes).

    Returns
    -------
    BuildResult
    """
    from nnmeter.fusion import load_rules
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.train import work_feature
    from nnmeter.predictors.regressors import make_regressor

    t_start = time.monotonic()
    deadline = t_start + budget_minutes * 60.0
    ds_dir = kernel_dataset_dir(dataset or backend_id, root)
    ds = KernelDataset(ds_dir, backend_id)
    if not resume and ds.kernel_types():
        raise DatasetError(f"dataset {ds_dir} already has measurements and resume=False; "
                           f"pass --resume to continue it or --dataset NEW_ID to start anew")
    if rules is None:
        try:
            rules = load_rules(backend_id)
        except FusionRulesError:
            from nnmeter.fusion import detect_fusion

            logger.warning("no fusion rules for %s; detecting them first", backend_id)
            rules = detect_fusion(backend_id, progress=progress)

    max_params = None
    try:
        from nnmeter.backends import get_backend

        from nnmeter.predictors.facts import split_dataset_id

        if get_backend(split_dataset_id(backend_id)[0]).model_format == "tflite":
            max_params = MAX_TFLITE_KERNEL_PARAMS
    except Exception as err:  # an unknown backend id (test doubles): no cap
        logger.debug("no parameter cap for %s: %s", backend_id, err)
    if prior_configs is None:
        logger.info("collecting the kernel prior from the zoo")
        zoo_configs = kernel_prior_from_zoo(rules, n_per_family=n_per_family, seed=seed)
    else:
        zoo_configs = {t: list(c) for t, c in prior_configs.items()}
    weights = importance_weights(zoo_configs)
    if kernels:
        wanted = set(kernels)
        weights = {t: w for t, w in weights.items()
                   if t in wanted or getattr(KERNEL_TYPES.get(t), "family", "") in wanted}
        norm = sum(weights.values()) or 1.0
        weights = {t: w / norm for t, w in weights.items()}
    priors = {t: KernelPrior.from_configs(t, zoo_configs[t]) for t in weights}
    ds.directory.mkdir(parents=True, exist_ok=True)
    _record_prior(ds.directory / "prior.json", weights, priors, kernels)

    result = BuildResult(backend_id=backend_id, dataset_dir=str(ds_dir))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=int(budget_minutes * 60), unit="s", desc=f"build {backend_id}",
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}s [{elapsed}<{remaining}] {postfix}")

    def tick(_: int = 1) -> None:
        result.measurements += 1
        if bar is not None:
            bar.n = min(bar.total, int(time.monotonic() - t_start))
            bar.set_postfix_str(f"{current['type']} n={result.measurements}", refresh=True)

    current = {"type": ""}
    own_profiler = profiler is None
    if own_profiler:
        from nnmeter.backends import Profiler

        profiler = Profiler(backend_id)
    proto = dict(DEFAULT_PROTOCOL if protocol is None else protocol)
    try:
        remaining_weight = 1.0
        for t, w in weights.items():
            now = time.monotonic()
            if now >= deadline:
                result.stopped_by_budget = True
                break
            share = w / remaining_weight if remaining_weight > 0 else 1.0
            remaining_weight -= w
            type_deadline = now + share * (deadline - now)
            t0 = now
            current["type"] = t
            done_rows = ds.rows(t)
            measured = {config_key(r["config"]) for r in done_rows}
            samples = [Sample(r["config"], float(r["latency_ms"]), r.get("origin", "initial"))
                       for r in done_rows if r.get("ok", True) and r.get("latency_ms")]
            accept = _accept(t, max_params)
            budget_left = [max_samples_per_type if max_samples_per_type is not None else 10**9]
            # power-of-two channel counts first (a few; a resumed build's initial list
            # would otherwise take all the time before them)
            kt = KERNEL_TYPES.get(t)
            if ALIGNMENT_FEATURES & set(getattr(kt, "feature_names", ())):
                have = sum(1 for r in done_rows if r.get("origin") == "aligned")
                todo_aligned = aligned_configs(
                    priors[t], max(0, min(N_ALIGNED - have, budget_left[0])), seed=seed,
                    exclude=[r["config"] for r in done_rows], accept=accept)
                got = profile_configs(t, todo_aligned, "aligned", profiler=profiler,
                                      dataset=ds, deadline=type_deadline, protocol=proto,
                                      on_measured=tick)
                samples += got
                measured |= {config_key(x.config) for x in got}
                budget_left[0] -= len(got)
                logger.info("%s: %d power-of-two channel samples (%d new)", t,
                            have + len(got), len(got))
            # initial sample: a deterministic list, skipping what is measured already
            init_deadline = t0 + initial_fraction * (type_deadline - t0)
            todo = itertools.islice(
                (c for c in iter_initial(priors[t], seed=seed, accept=accept)
                 if config_key(c) not in measured),
                int(math.ceil(budget_left[0] * initial_fraction)))
            n_initial_done = sum(1 for r in done_rows if r.get("origin", "initial") == "initial")
            new = profile_configs(t, todo, "initial", profiler=profiler, dataset=ds,
                                  deadline=init_deadline, protocol=proto, on_measured=tick)
            samples += new
            budget_left[0] -= len(new)
            logger.info("%s: %d initial samples (%d new)", t, n_initial_done + len(new), len(new))
            ds.log_round({"kernel_type": t, "round": 0, "n_new": len(new),
                          "n_measured_total": len(samples),
                          "minutes": (time.monotonic() - t_start) / 60})
            past = [r for r in ds.rounds() if r.get("kernel_type") == t and r.get("round", 0) > 0]
            start_round = 1 + max((int(r["round"]) for r in past), default=0)
            logs = []
            if len(samples) >= 12 and start_round <= rounds:
                norm = work_feature(kt)

                def measure(cfgs: list[dict[str, Any]], origin: str, _t: str = t,
                            _d: float = type_deadline, _left: list = budget_left) -> list[Sample]:
                    got = profile_configs(_t, cfgs[:max(0, _left[0])], origin,
                                          profiler=profiler, dataset=ds, deadline=_d,
                                          protocol=proto, on_measured=tick)
                    _left[0] -= len(got)
                    return got

                def log_round(entry: Any) -> None:
                    d = entry.as_dict()
                    d["minutes"] = (time.monotonic() - t_start) / 60
                    ds.log_round(d)

                fresh = iter_initial(priors[t], seed=seed + 7919, accept=accept)

                def explore(n: int, exclude: set[str], _g: Any = fresh) -> list[dict[str, Any]]:
                    return list(itertools.islice(
                        (c for c in _g if config_key(c) not in exclude), n))

                res = run_adaptive(
                    t, samples, measure, _featurizer(t),
                    lambda _t=t, _n=norm: make_regressor(_t, "rf", norm_feature=_n,
                                                         random_state=seed,
                                                         **(regressor_params or {})),
                    channel_fields=priors[t].channel_fields, ties=priors[t].ties,
                    rounds=rounds, start_round=start_round, per_point=10,
                    max_new_per_round=max(50, len(samples) // 2), accept=accept, seed=seed,
                    explore=explore, explore_fraction=explore_fraction,
                    should_stop=lambda _d=type_deadline, _l=budget_left: (
                        time.monotonic() >= _d or _l[0] <= 0),
                    on_round=log_round)
                samples, logs = res.samples, res.logs
            summary = {
                "samples": len(samples),
                "test_acc10": logs[-1].test_acc10 if logs else None,
                "cv_acc10": logs[-1].cv_acc10 if logs else None,
                "rounds": len(logs), "minutes": (time.monotonic() - t0) / 60,
            }
            result.types[t] = summary
            if on_type_done is not None:
                on_type_done(t, summary)
        else:
            result.stopped_by_budget = time.monotonic() >= deadline
    finally:
        if bar is not None:
            bar.close()
        if own_profiler:
            profiler.close()
    result.minutes = (time.monotonic() - t_start) / 60
    ds.append_raw("builds.jsonl", {k: v for k, v in result.as_dict().items()})
    if own_profiler and ds.meta() is not None:
        calibrate(backend_id, ds.directory, [
            name for name, wanted in (
                ("edges", calibrate_boundary), ("weight_refetch", calibrate_weight_stream),
                ("reorders", calibrate_reorders), ("chain", calibrate_chain)) if wanted])
    if train:
        from nnmeter.predictors import load_predictor
        from nnmeter.predictors.train import choose_regressors

        choose_regressors(ds, seed=seed)
        load_predictor(backend_id, dataset=dataset, root=root)
    return result
