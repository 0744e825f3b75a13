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
4. the calibrations of the composition terms (:func:`calibrate`);
5. training (and caching) the predictor (:func:`train_and_cache`).

One budget bounds steps 3 to 5: profiling leaves the calibrations
``BuildSettings.calibration_share`` of it while one is missing or partial, and training
a reserve. A calibration cut short by its deadline keeps its points and a partial
record, and the next build continues it.

The knobs of a build are one :class:`BuildSettings` record; :func:`build_predictor` also
takes them as keywords. Each stage is its own function: :func:`collect_prior` (step 2),
:func:`profile_kernel_types` and, per type, :func:`sample_kernel_type` (step 3).

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

import contextlib
import dataclasses
import json
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from nnmeter.devices.reference import (
    REFERENCE_FILE, SpeedReference, compare_records, describe, drift_warning,
    speed_change_warning, summarize,
)
from nnmeter.errors import (BackendError, DatasetError, FusionRulesError, MeasurementError,
                            SettingsError, UnknownSettingError, UnsupportedOpError)
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
from nnmeter.predictors.features import model_input
from nnmeter.sampling.adaptive import Sample, run_adaptive
from nnmeter.sampling.initial import iter_initial
from nnmeter.sampling.prior import KernelPrior, config_key

__all__ = ["calibrate", "pending_calibrations", "build_predictor", "BuildSettings",
           "BuildResult", "SamplingPlan", "collect_prior", "disturbed_rows",
           "remeasure_disturbed", "sample_kernel_type",
           "profile_kernel_types", "train_and_cache", "kernel_prior_from_zoo",
           "importance_weights", "profile_configs", "measured_keys", "build_by_transfer",
           "TransferResult"]

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
#: share of a build's budget kept for training at its end (choosing the regressors by
#: cross-validation and fitting them), and its floor in seconds
TRAIN_RESERVE_SHARE = 0.05
TRAIN_RESERVE_MIN_S = 20.0
#: the reserve never takes more than this share of a (tiny) budget
TRAIN_RESERVE_MAX_SHARE = 0.25


@dataclass
class BuildResult:
    """Outcome of a build: per kernel type the samples, held-out accuracy and minutes.

    ``minutes`` is the whole build's wall time, ``phases`` its minutes per phase
    (``profile``: from the start to the end of profiling, ``calibrate``, ``train``; 0
    for a phase that did not run).
    """

    backend_id: str
    dataset_dir: str
    types: dict[str, dict[str, Any]] = field(default_factory=dict)
    minutes: float = 0.0
    measurements: int = 0
    stopped_by_budget: bool = False
    phases: dict[str, float] = field(
        default_factory=lambda: {"profile": 0.0, "calibrate": 0.0, "train": 0.0})
    #: the speed reference's probes during this build
    #: (:func:`nnmeter.devices.reference.summarize`)
    speed_reference: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    #: what :func:`remeasure_disturbed` did before sampling ({} when it did not run)
    remeasured: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {"backend_id": self.backend_id, "dataset_dir": self.dataset_dir,
               "types": self.types, "minutes": self.minutes,
               "measurements": self.measurements, "stopped_by_budget": self.stopped_by_budget,
               "phases": dict(self.phases), "speed_reference": self.speed_reference,
               "warnings": list(self.warnings)}
        if self.remeasured:
            out["remeasured"] = dict(self.remeasured)
        return out


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
        "memory_ratio": (m.extra or {}).get("memory_ratio") if m.ok else None,
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


#: the origin of a row measured again because its first measurement was disturbed
REMEASURE_ORIGIN = "remeasure"


def disturbed_rows(dataset: KernelDataset, *, kernels: Sequence[str] | None = None
                   ) -> list[tuple[float, str, dict[str, Any]]]:
    """The configurations whose every usable row was measured while the device ran slow
    (a span of :func:`nnmeter.devices.reference.disturbed_windows` over the dataset's
    speed record), most disturbed first, as ``(ratio, kernel_type, config)``.

    A configuration measured again at a quiet moment drops out: the loader keeps each
    configuration's fastest row (:func:`nnmeter.predictors.kernel_data.load_kernel_data`),
    and interference only adds time."""
    from nnmeter.devices.reference import disturbed_windows, read_reference

    spans = disturbed_windows(read_reference(dataset.directory))
    if not spans:
        return []

    def ratio_at(ts: str) -> float | None:
        for first, last, ratio in spans:
            if first <= ts <= last:
                return ratio
        return None

    out: list[tuple[float, str, dict[str, Any]]] = []
    for t in kernels if kernels is not None else dataset.kernel_types():
        worst: dict[str, tuple[float | None, dict[str, Any]]] = {}
        for row in dataset.rows(t):
            lat, ts, cfg = row.get("latency_ms"), row.get("timestamp"), row.get("config")
            if not isinstance(lat, (int, float)) or lat <= 0 or not isinstance(cfg, dict):
                continue
            r = ratio_at(ts) if isinstance(ts, str) else None
            key = config_key(cfg)
            before = worst.get(key, (0.0, cfg))[0]
            if before is None:
                continue  # already has a row measured at a quiet moment
            worst[key] = (None if r is None else max(r, before), cfg)
        out.extend((r, t, cfg) for r, cfg in worst.values() if r is not None)
    out.sort(key=lambda x: -x[0])
    return out


def remeasure_disturbed(dataset: KernelDataset, *, profiler: Any, deadline: float,
                        kernels: Sequence[str] | None = None, progress: bool = True,
                        protocol: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure again, until ``deadline`` (``time.monotonic()`` seconds), each
    configuration of :func:`disturbed_rows`, most disturbed first, appending the new
    rows (``origin: "remeasure"``) beside the old ones; nothing is deleted.

    On a shared host a build's rows are only as good as the moment they were measured:
    on the 2-vCPU Zen 4, analysis run on the other vCPU while mnn-cpu's build profiled
    slowed its speed reference by up to 40 % (0.479 ms fastest, 0.669 ms at worst),
    and the build's rows of those minutes with it. The build's probes say when; this
    measures those rows again instead of training on them.

    Returns ``{"pending": n before, "measured": rows measured now, "left": n still
    pending}``."""
    todo = disturbed_rows(dataset, kernels=kernels)
    done = 0
    if todo:
        logger.info("%d configurations were measured while the device ran slow; measuring "
                    "them again", len(todo))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), unit="kernel",
                       desc="build: measuring disturbed rows again")
        try:
            for _ratio, t, cfg in todo:
                if time.monotonic() >= deadline:
                    break
                got = profile_configs(t, [cfg], REMEASURE_ORIGIN, profiler=profiler,
                                      dataset=dataset, deadline=deadline, protocol=protocol)
                done += 1 if got else 0
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
    # a row measured now counts as quiet until a later probe says otherwise; the build
    # that called this checks its own probes at its end
    return {"pending": len(todo), "measured": done, "left": len(todo) - done}


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
    from nnmeter.predictors.store import write_atomic

    write_atomic(path, json.dumps(record, default=str).encode())


def _record_state(path: Path) -> str:
    """``"missing"``, ``"partial"`` (cut short by its deadline) or ``"complete"``: the
    state of one calibration record (a file that does not parse counts as complete:
    reading it says what is wrong)."""
    import json

    if not path.exists():
        return "missing"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return "complete"
    return "partial" if isinstance(record, dict) and record.get("partial") else "complete"


def pending_calibrations(backend_id: str, dataset_dir: Path,
                         names: Sequence[str] | None = None) -> list[str]:
    """The composition terms (in their order) whose calibration :func:`calibrate` would
    run now: those the device needs (``Term.wanted`` on the dataset's device facts; the
    defaults before the dataset has a device), that ``names`` selects (None: all) and
    whose record is missing or ``partial``, or complete but ``Term.unfinished`` (rows
    added since that the term measures one by one)."""
    from nnmeter.predictors.facts import device_facts
    from nnmeter.predictors.terms import TERMS

    facts = device_facts((KernelDataset(dataset_dir, backend_id).meta() or {}).get("device"))
    out = []
    for name in TERMS.ordered():
        term = TERMS.get(name)
        if term.record_file is None or (names is not None and name not in names) \
                or not term.wanted(facts):
            continue
        if _record_state(Path(dataset_dir) / term.record_file) != "complete" or \
                term.unfinished(backend_id, dataset_dir, facts):
            out.append(name)
    return out


def _planned_work(term: Any, backend_id: str, dataset_dir: Path) -> float | None:
    """What ``term``'s calibration still has to measure (``planned_work``), or None
    when the term does not say."""
    planned = getattr(term, "planned_work", None)
    if planned is None:
        return None
    try:
        return max(float(planned(backend_id, dataset_dir)), 0.0)
    except (DatasetError, ValueError, KeyError) as err:  # the measure call will say why
        logger.debug("%s: no planned work (%s)", term.name, err)
        return None


#: calibrations measured before the others, each with all the time left: the in-model
#: record is cheap (its 36 CNN models took 46 s on the Zen 4) and the one a new device's
#: predictor needs most. A ten-minute transfer from the Xeon to the Zen 4 whose
#: calibrations split their time in proportion to their work measured 17 of its 54
#: models and put 83.8 % of the seed-1000 zoo set within ±10 % (45.0 % without the
#: term); the same transfer with this order, 96.2 %
CALIBRATE_FIRST = ("in_model",)


def calibrate(backend_id: str, dataset_dir: Path, names: Sequence[str] | None = None, *,
              deadline: float | None = None, progress: bool = False) -> list[str]:
    """Measure and write the calibration record of every composition term
    (:mod:`nnmeter.predictors.terms`, in their order; those of :data:`CALIBRATE_FIRST`
    first, with all the time left) that the device needs
    (``Term.wanted`` on the dataset's device facts), that ``names`` selects (None: all)
    and that the dataset does not hold yet or holds ``partial``
    (:func:`pending_calibrations`). Returns the terms calibrated (whose record was
    written, complete or partial); the partial ones are logged as warnings.

    Parameters
    ----------
    deadline : float, optional
        A ``time.monotonic()`` time that bounds all calibrations together. The time
        left is split among the pending terms in proportion to the work each still
        has (its ``planned_work(backend_id, dataset_dir)``: measurements times rounds;
        a term that does not say counts as the mean of the others), each in turn
        getting its share of what is left then, so time one does not use passes to the
        next. A term cut short writes a ``partial`` record, which a later call
        continues from the term's points file; a term with no time left is not
        started. None: every calibration runs to completion.
    progress : bool
        Show each calibration's progress bar.

    A term's ``calibration_skips`` errors skip it with a warning instead of failing.
    Once a complete record is written, the term's points file
    (``<record stem>.points.jsonl``) is removed.
    """
    from nnmeter.predictors.chain import points_path
    from nnmeter.predictors.terms import TERMS, composition_before

    dataset_dir = Path(dataset_dir)
    todo = pending_calibrations(backend_id, dataset_dir, names)
    todo = [n for n in todo if n in CALIBRATE_FIRST] + \
        [n for n in todo if n not in CALIBRATE_FIRST]
    for name in TERMS.ordered():  # points a complete record has made obsolete
        term = TERMS.get(name)
        if term.record_file is not None and name not in todo and \
                _record_state(dataset_dir / term.record_file) == "complete":
            points_path(dataset_dir, term.record_file).unlink(missing_ok=True)
    work: dict[str, float] = {}
    if deadline is not None and todo:
        said = {n: _planned_work(TERMS.get(n), backend_id, dataset_dir) for n in todo}
        known = [w for w in said.values() if w is not None]
        default = sum(known) / len(known) if known else 1.0
        work = {n: default if w is None else w for n, w in said.items()}
    done = []
    for i, name in enumerate(todo):
        term = TERMS.get(name)
        own_deadline = None
        if deadline is not None:
            now = time.monotonic()
            if now >= deadline:
                logger.warning("no calibration time left for %s; the next build measures "
                               "it (give it more --budget-minutes)", term.calibration or name)
                continue
            rest = sum(work[n] for n in todo[i:])
            own_deadline = deadline if name in CALIBRATE_FIRST else \
                now + (work[name] / rest if rest > 0 else 1.0) * (deadline - now)
        logger.info("measuring %s", term.calibration or name)
        try:
            before = composition_before(backend_id, dataset_dir, name) \
                if term.measures_after else None
            record = term.measure(backend_id, dataset_dir, before=before,
                                  deadline=own_deadline, progress=progress)
            term.write(dataset_dir, record)
            done.append(name)
        except term.calibration_skips as err:
            logger.warning("%s calibration skipped: %s", name, err)
            continue
        if record.get("partial"):
            logger.warning("%s calibration stopped at its deadline with %s of %s points; "
                           "its record is partial and the next build continues it",
                           name, record.get("points_measured"), record.get("points_planned"))
        else:
            points_path(dataset_dir, term.record_file).unlink(missing_ok=True)
    return done


@dataclass(frozen=True)
class BuildSettings:
    """The sampling and measurement knobs of one build (see :func:`build_predictor`).

    Attributes
    ----------
    budget_minutes : float
        Wall-clock budget of the whole run, in minutes (>= 0): profiling, the
        calibrations and training together (see ``calibration_share``). Profiling time
        is split across kernel types by importance; time a type does not use passes to
        the next. 0 profiles nothing; the calibrations then run to completion, and
        training runs.
    calibration_share : float
        Share of the budget, in [0, 1), for the calibrations when the build runs them
        (with its own profiler) and one of them is missing or partial: profiling then
        stops at ``budget × (1 − calibration_share)`` less the training reserve
        (:data:`TRAIN_RESERVE_SHARE` of the budget, at least
        :data:`TRAIN_RESERVE_MIN_S` seconds, never more than
        :data:`TRAIN_RESERVE_MAX_SHARE` of the budget; none when
        ``train`` is False), and the calibrations take the time from there up to the
        budget less the reserve (split among them by their planned work, see
        :func:`calibrate`). A calibration cut short keeps a partial record that the
        next build continues. With every calibration done, profiling keeps the budget
        less the reserve.
    resume : bool
        Continue an existing dataset (default). ``False`` refuses to touch a dataset
        that already has rows.
    kernels : tuple of str, optional
        Only these kernel types (or families: ``conv`` selects every ``conv-*`` type).
        Any sequence of names is accepted and stored as a tuple; a bare string is not.
    dataset : str, optional
        Dataset id (folder under ``datasets/kernels``); default the backend id.
    rounds : int
        Adaptive sampling rounds per kernel type (>= 0).
    initial_fraction : float
        Share of a type's budget, in [0, 1], for the initial (prior) sample.
    explore_fraction : float
        Share, in [0, 1], of each adaptive round's new configurations drawn fresh from
        the prior (the rest go around high-error points). On synthetic 2-D step
        functions, pure neighbourhood sampling fell behind uniform sampling of equal
        size over the whole space; mixing in prior draws closed most of that gap.
    prior_families : tuple of str, optional
        Zoo families whose variants make the kernel prior; default the CNN zoo
        (``zoo.FAMILY_NAMES``). The transformer families (``vit``, ``bert``,
        ``mobilevit``; ``zoo.TRANSFORMER_FAMILIES``) give the prior of matmul, softmax,
        layer-norm and token-shaped fc kernels.
    n_per_family : int
        Zoo variants sampled per model family for the kernel prior (>= 0), besides the
        family's base variant.
    seed : int
        Seed (>= 0) of every random choice: prior draws, adaptive rounds, regressors.
    protocol : mapping, optional
        Measurement protocol overrides (default :data:`DEFAULT_PROTOCOL`: 4 rounds of
        20 ms). Stored as a read-only copy.
    train : bool
        Choose each kernel type's regressor by cross-validation (rf or lgbm, written to
        ``predictor.json``), then train and cache the predictor.
    max_samples_per_type : int, optional
        Cap (>= 0) on the measurements per kernel type in this run (small test builds).
    regressor_params : mapping, optional
        Overrides of the sampling-time regressors' hyper-parameters (read-only copy).
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
        the other calibrations (the longest: 5 to 19 minutes unbounded, so most builds
        spread it over several runs).
    calibrate_in_model : bool
        Measure a few whole zoo models (``in_model.json``,
        :mod:`nnmeter.predictors.in_model`), for what kernels cost inside a model on
        this device beyond their time alone; about two minutes, within the budget.
    remeasure_disturbed : bool
        Before sampling anything new, measure again the rows the dataset's earlier
        builds made while the device ran slow (:func:`remeasure_disturbed`), within the
        profiling time; the loader keeps each configuration's fastest row.

    Raises
    ------
    SettingsError
        On construction, if a field is out of its range; the message names the field,
        the value received and what is allowed.

    Examples
    --------
    >>> BuildSettings(budget_minutes=5, kernels=["relu"]).kernels
    ('relu',)
    >>> BuildSettings(rounds=-1)
    Traceback (most recent call last):
    ...
    nnmeter.errors.SettingsError: BuildSettings.rounds=-1: expected an integer >= 0
    """

    budget_minutes: float = 20.0
    resume: bool = True
    kernels: tuple[str, ...] | None = None
    prior_families: tuple[str, ...] | None = None
    dataset: str | None = None
    rounds: int = 3
    initial_fraction: float = 0.6
    explore_fraction: float = 0.3
    n_per_family: int = 5
    seed: int = 0
    protocol: Mapping[str, Any] | None = None
    train: bool = True
    max_samples_per_type: int | None = None
    regressor_params: Mapping[str, Any] | None = None
    calibrate_boundary: bool = True
    calibrate_weight_stream: bool = True
    calibrate_reorders: bool = True
    calibrate_chain: bool = True
    calibrate_in_model: bool = True
    remeasure_disturbed: bool = True
    calibration_share: float = 0.35

    def __post_init__(self) -> None:
        def fail(name: str, allowed: str) -> None:
            raise SettingsError(f"BuildSettings.{name}={getattr(self, name)!r}: expected {allowed}")

        def is_int(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        def is_real(v: Any) -> bool:
            return (isinstance(v, (int, float, np.integer, np.floating))
                    and not isinstance(v, bool) and math.isfinite(v))

        if not is_real(self.budget_minutes) or self.budget_minutes < 0:
            fail("budget_minutes", "a finite number of minutes >= 0")
        for name in ("rounds", "n_per_family", "seed"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 0:
                fail(name, "an integer >= 0")
        if self.max_samples_per_type is not None and (
                not is_int(self.max_samples_per_type) or self.max_samples_per_type < 0):
            fail("max_samples_per_type", "None or an integer >= 0")
        for name in ("initial_fraction", "explore_fraction"):
            v = getattr(self, name)
            if not is_real(v) or not 0.0 <= v <= 1.0:
                fail(name, "a number in [0, 1]")
        if not is_real(self.calibration_share) or not 0.0 <= self.calibration_share < 1.0:
            fail("calibration_share", "a number in [0, 1) (the budget's share for calibrations)")
        for name in ("resume", "train", "calibrate_boundary", "calibrate_weight_stream",
                     "calibrate_reorders", "calibrate_chain", "calibrate_in_model",
                     "remeasure_disturbed"):
            if not isinstance(getattr(self, name), bool):
                fail(name, "True or False")
        if self.dataset is not None and (not isinstance(self.dataset, str) or not self.dataset):
            fail("dataset", "None or a non-empty dataset id")
        if self.kernels is not None:
            if isinstance(self.kernels, str) or not isinstance(self.kernels, Iterable):
                fail("kernels", "None or a sequence of kernel type or family names, "
                     "e.g. ['conv', 'relu'] (not one string)")
            names = tuple(self.kernels)
            if not all(isinstance(k, str) and k for k in names):
                fail("kernels", "None or a sequence of non-empty kernel type or family names")
            object.__setattr__(self, "kernels", names)
        if self.prior_families is not None:
            if isinstance(self.prior_families, str) or not isinstance(self.prior_families,
                                                                       Iterable):
                fail("prior_families", "None or a sequence of zoo family names, "
                     "e.g. ['vit', 'bert'] (not one string)")
            from nnmeter import zoo

            names = tuple(self.prior_families)
            for name in names:
                zoo.get_family(name)  # an unknown name lists the known ones
            object.__setattr__(self, "prior_families", names)
        for name in ("protocol", "regressor_params"):
            v = getattr(self, name)
            if v is not None:
                if not isinstance(v, Mapping):
                    fail(name, "None or a mapping of keyword overrides")
                # a read-only copy: the record stays what it was when built
                object.__setattr__(self, name, MappingProxyType(dict(v)))


#: keywords of :func:`build_predictor` that are not :class:`BuildSettings` fields
_CALL_KEYWORDS = ("profiler", "progress", "rules", "prior_configs", "on_type_done", "root")


def _resolve_settings(settings: BuildSettings | None, overrides: dict[str, Any]) -> BuildSettings:
    """``settings`` (default: all defaults) with ``overrides`` applied.

    Raises
    ------
    UnknownSettingError
        If an override names no field of :class:`BuildSettings`, or ``settings`` is
        not a BuildSettings.
    SettingsError
        If an override is out of its field's range.
    """
    if settings is not None and not isinstance(settings, BuildSettings):
        raise UnknownSettingError(
            f"build_predictor(settings=...) got a {type(settings).__name__}; pass a "
            f"BuildSettings, or the settings as keywords")
    valid = [f.name for f in dataclasses.fields(BuildSettings)]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise UnknownSettingError(
            f"build_predictor() got unknown keyword(s) {', '.join(unknown)}; valid ones are "
            f"the BuildSettings fields {', '.join(valid)} and {', '.join(_CALL_KEYWORDS)}")
    base = settings if settings is not None else BuildSettings()
    return dataclasses.replace(base, **overrides) if overrides else base


@dataclass(frozen=True)
class SamplingPlan:
    """What a build samples: per kernel type its budget share and its prior.

    ``weights`` is in sampling order (most important first) and sums to 1;
    ``priors`` has one :class:`KernelPrior` per key of ``weights``.
    """

    weights: dict[str, float]
    priors: dict[str, KernelPrior]


def collect_prior(rules: Any, *, settings: BuildSettings,
                  prior_configs: dict[str, list[dict[str, Any]]] | None = None) -> SamplingPlan:
    """The kernel types to sample, their budget shares and priors.

    Configurations come from ``prior_configs`` (kernel type → configurations) or, by
    default, from zoo variants partitioned with ``rules``
    (:func:`kernel_prior_from_zoo`) and, for the kernel types the zoo lacks, from
    :func:`nnmeter.sampling.synthetic.synthetic_prior_configs`. ``settings.kernels`` keeps only the named types
    or families, renormalising their weights.
    """
    from nnmeter.kernels import KERNEL_TYPES

    if prior_configs is None:
        from nnmeter.sampling.synthetic import synthetic_prior_configs

        logger.info("collecting the kernel prior from the zoo")
        zoo_configs = kernel_prior_from_zoo(rules, n_per_family=settings.n_per_family,
                                            seed=settings.seed,
                                            families=settings.prior_families)
        # kernel kinds real models carry and the zoo does not (grouped convolutions, LRN)
        for t, cfgs in synthetic_prior_configs().items():
            zoo_configs.setdefault(t, cfgs)
    else:
        zoo_configs = {t: list(c) for t, c in prior_configs.items()}
    weights = importance_weights(zoo_configs)
    if settings.kernels:
        wanted = set(settings.kernels)
        weights = {t: w for t, w in weights.items()
                   if t in wanted or getattr(KERNEL_TYPES.get(t), "family", "") in wanted}
        norm = sum(weights.values()) or 1.0
        weights = {t: w / norm for t, w in weights.items()}
    # a type may name its size fields (a matmul's m, k, n; a layer norm's rows and d);
    # otherwise they are guessed from their names (cin, cout...)
    priors = {t: KernelPrior.from_configs(
        t, zoo_configs[t], channel_fields=getattr(KERNEL_TYPES.get(t), "size_fields", None))
        for t in weights}
    return SamplingPlan(weights=weights, priors=priors)


class _TypeMeasurer:
    """Profiles configurations of one kernel type into the dataset and counts what it
    measured against the type's quota (``left``, measurements this run may still take)."""

    def __init__(self, kernel_type: str, *, profiler: Any, dataset: KernelDataset,
                 protocol: dict[str, Any], on_measured: Callable[[int], None] | None,
                 left: int) -> None:
        self.kernel_type = kernel_type
        self.profiler = profiler
        self.dataset = dataset
        self.protocol = protocol
        self.on_measured = on_measured
        self.left = left

    def __call__(self, configs: Iterable[dict[str, Any]], origin: str,
                 deadline: float) -> list[Sample]:
        got = profile_configs(self.kernel_type, configs, origin, profiler=self.profiler,
                              dataset=self.dataset, deadline=deadline,
                              protocol=self.protocol, on_measured=self.on_measured)
        self.left -= len(got)
        return got


def _measurement_protocol(settings: BuildSettings) -> dict[str, Any]:
    """The measurement protocol of a build's kernel rows: the settings' overrides, or
    :data:`DEFAULT_PROTOCOL`."""
    return dict(DEFAULT_PROTOCOL if settings.protocol is None else settings.protocol)


def sample_kernel_type(kernel_type: str, *, prior: KernelPrior, settings: BuildSettings,
                       profiler: Any, dataset: KernelDataset, deadline: float,
                       t_start: float, max_params: float | None = None,
                       on_measured: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Sample and profile one kernel type until ``deadline`` (``time.monotonic()``
    seconds): power-of-two channel configurations (types with an alignment feature),
    then the initial sample from ``prior``, then adaptive rounds.

    Rows already in ``dataset`` count: measured configurations are not repeated and
    adaptive rounds continue from the round log. ``t_start`` (monotonic seconds) is
    the build's start, for the ``minutes`` of round logs.

    Returns
    -------
    dict
        ``samples`` (usable measurements of the type, old and new), ``test_acc10`` and
        ``cv_acc10`` of the last adaptive round (None without one), ``rounds`` (run
        now) and ``minutes`` (spent on this type).

    Raises
    ------
    FingerprintMismatchError
        If the device measured differs from the dataset's.
    """
    t0 = time.monotonic()
    done_rows = dataset.rows(kernel_type)
    samples = [Sample(r["config"], float(r["latency_ms"]), r.get("origin", "initial"))
               for r in done_rows if r.get("ok", True) and r.get("latency_ms")]
    accept = _accept(kernel_type, max_params)
    measure = _TypeMeasurer(
        kernel_type, profiler=profiler, dataset=dataset,
        protocol=_measurement_protocol(settings),
        on_measured=on_measured,
        left=settings.max_samples_per_type if settings.max_samples_per_type is not None
        else 10**9)
    measured = {config_key(r["config"]) for r in done_rows}
    got = _profile_aligned(kernel_type, prior=prior, done_rows=done_rows, accept=accept,
                           seed=settings.seed, measure=measure, deadline=deadline)
    samples += got
    measured |= {config_key(x.config) for x in got}
    new = _profile_initial(kernel_type, prior=prior, done_rows=done_rows,
                           measured=measured, accept=accept, settings=settings,
                           measure=measure,
                           deadline=t0 + settings.initial_fraction * (deadline - t0))
    samples += new
    dataset.log_round({"kernel_type": kernel_type, "round": 0, "n_new": len(new),
                       "n_measured_total": len(samples),
                       "minutes": (time.monotonic() - t_start) / 60})
    samples, logs = _adaptive_rounds(kernel_type, samples, prior=prior, accept=accept,
                                     settings=settings, dataset=dataset, measure=measure,
                                     deadline=deadline, t_start=t_start)
    return {
        "samples": len(samples),
        "test_acc10": logs[-1].test_acc10 if logs else None,
        "cv_acc10": logs[-1].cv_acc10 if logs else None,
        "rounds": len(logs), "minutes": (time.monotonic() - t0) / 60,
    }


def _profile_aligned(kernel_type: str, *, prior: KernelPrior, done_rows: list[dict[str, Any]],
                     accept: Callable[[dict[str, Any]], bool], seed: int,
                     measure: _TypeMeasurer, deadline: float) -> list[Sample]:
    """Top the type's power-of-two channel samples up to :data:`N_ALIGNED`, if its
    features can tell them apart; returns the new usable samples."""
    from nnmeter.kernels import KERNEL_TYPES

    kt = KERNEL_TYPES.get(kernel_type)
    if not ALIGNMENT_FEATURES & set(getattr(kt, "feature_names", ())):
        return []
    # these first, and a few: a resumed build's initial list would otherwise take all
    # the time before them
    have = sum(1 for r in done_rows if r.get("origin") == "aligned")
    todo = aligned_configs(prior, max(0, min(N_ALIGNED - have, measure.left)), seed=seed,
                           exclude=[r["config"] for r in done_rows], accept=accept)
    got = measure(todo, "aligned", deadline)
    logger.info("%s: %d power-of-two channel samples (%d new)", kernel_type,
                have + len(got), len(got))
    return got


def _profile_initial(kernel_type: str, *, prior: KernelPrior, done_rows: list[dict[str, Any]],
                     measured: set[str], accept: Callable[[dict[str, Any]], bool],
                     settings: BuildSettings, measure: _TypeMeasurer,
                     deadline: float) -> list[Sample]:
    """Measure the type's initial sample: a deterministic list from ``prior``, skipping
    what is measured already, ``initial_fraction`` of the quota at most; returns the
    new usable samples."""
    todo = itertools.islice(
        (c for c in iter_initial(prior, seed=settings.seed, accept=accept)
         if config_key(c) not in measured),
        int(math.ceil(measure.left * settings.initial_fraction)))
    n_done = sum(1 for r in done_rows if r.get("origin", "initial") == "initial")
    new = measure(todo, "initial", deadline)
    logger.info("%s: %d initial samples (%d new)", kernel_type, n_done + len(new), len(new))
    return new


def _adaptive_rounds(kernel_type: str, samples: list[Sample], *, prior: KernelPrior,
                     accept: Callable[[dict[str, Any]], bool], settings: BuildSettings,
                     dataset: KernelDataset, measure: _TypeMeasurer, deadline: float,
                     t_start: float) -> tuple[list[Sample], list[Any]]:
    """Run the type's remaining adaptive step-point rounds (continuing the round log)
    while the deadline and quota last; returns all samples and this run's round logs.

    Needs at least 12 samples to fit a regressor; with fewer, nothing runs."""
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.regressors import make_regressor
    from nnmeter.predictors.train import work_feature

    past = [r for r in dataset.rounds()
            if r.get("kernel_type") == kernel_type and r.get("round", 0) > 0]
    start_round = 1 + max((int(r["round"]) for r in past), default=0)
    if len(samples) < 12 or start_round > settings.rounds:
        return samples, []
    norm = work_feature(KERNEL_TYPES.get(kernel_type))
    seed = settings.seed

    def measure_round(cfgs: list[dict[str, Any]], origin: str) -> list[Sample]:
        return measure(cfgs[:max(0, measure.left)], origin, deadline)

    def log_round(entry: Any) -> None:
        d = entry.as_dict()
        d["minutes"] = (time.monotonic() - t_start) / 60
        dataset.log_round(d)

    fresh = iter_initial(prior, seed=seed + 7919, accept=accept)

    def explore(n: int, exclude: set[str]) -> list[dict[str, Any]]:
        return list(itertools.islice((c for c in fresh if config_key(c) not in exclude), n))

    res = run_adaptive(
        kernel_type, samples, measure_round, _featurizer(kernel_type),
        lambda: make_regressor(kernel_type, "rf", norm_feature=norm, random_state=seed,
                               **(settings.regressor_params or {})),
        channel_fields=prior.channel_fields, ties=prior.ties,
        rounds=settings.rounds, start_round=start_round, per_point=10,
        max_new_per_round=max(50, len(samples) // 2), accept=accept, seed=seed,
        explore=explore, explore_fraction=settings.explore_fraction,
        should_stop=lambda: time.monotonic() >= deadline or measure.left <= 0,
        on_round=log_round)
    return res.samples, res.logs


def profile_kernel_types(plan: SamplingPlan, result: BuildResult, *, settings: BuildSettings,
                         profiler: Any, dataset: KernelDataset, t_start: float,
                         deadline: float, max_params: float | None = None,
                         progress: bool = True,
                         on_type_done: Callable[[str, dict[str, Any]], None] | None = None
                         ) -> None:
    """Sample every kernel type of ``plan`` in order (:func:`sample_kernel_type`),
    giving each its weight's share of the time left before ``deadline``.

    Fills ``result.types``, ``result.measurements`` and ``result.stopped_by_budget``;
    calls ``on_type_done(type, summary)`` after each type.
    """
    current = {"type": ""}
    bar = None
    if progress:
        from tqdm import tqdm

        # the profiling phase's own span (the calibrations and training have theirs)
        bar = tqdm(total=max(1, int(deadline - t_start)), unit="s",
                   desc=f"build {result.backend_id}: profiling kernels",
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}s [{elapsed}<{remaining}] {postfix}")

    def tick(_: int = 1) -> None:
        result.measurements += 1
        if bar is not None:
            bar.n = min(bar.total, int(time.monotonic() - t_start))
            bar.set_postfix_str(f"{current['type']} n={result.measurements}", refresh=True)

    try:
        remaining_weight = 1.0
        for t, w in plan.weights.items():
            now = time.monotonic()
            if now >= deadline:
                result.stopped_by_budget = True
                break
            share = w / remaining_weight if remaining_weight > 0 else 1.0
            remaining_weight -= w
            current["type"] = t
            summary = sample_kernel_type(
                t, prior=plan.priors[t], settings=settings, profiler=profiler,
                dataset=dataset, deadline=now + share * (deadline - now), t_start=t_start,
                max_params=max_params, on_measured=tick)
            result.types[t] = summary
            if on_type_done is not None:
                on_type_done(t, summary)
        else:
            result.stopped_by_budget = time.monotonic() >= deadline
    finally:
        if bar is not None:
            bar.close()


def _default_dataset(backend_id: str, root: Any, profiler: Any) -> str:
    """The dataset a build writes without ``--dataset``: the measured device's own,
    ``<backend>@<device name>`` (through a remote runner, :mod:`nnmeter.farm`, the
    remote device's; with a caller's profiler, this machine's)."""
    from nnmeter.devices.datasets import default_dataset_id
    from nnmeter.farm import runner_device

    return default_dataset_id(backend_id, root,
                              device=runner_device(backend_id) if profiler is None else None)


def _open_dataset(ds_dir: Path, backend_id: str, *, resume: bool) -> KernelDataset:
    """The build's kernel dataset. Raises DatasetError if it has rows and not resume."""
    ds = KernelDataset(ds_dir, backend_id)
    if not resume and ds.kernel_types():
        raise DatasetError(f"dataset {ds_dir} already has measurements and resume=False; "
                           f"pass --resume to continue it or --dataset NEW_ID to start anew")
    return ds


def _backend_rules(backend_id: str, *, progress: bool) -> Any:
    """The backend's fusion rules, detected first if none are stored."""
    from nnmeter.fusion import load_rules

    try:
        return load_rules(backend_id)
    except FusionRulesError:
        from nnmeter.fusion import detect_fusion

        logger.warning("no fusion rules for %s; detecting them first", backend_id)
        return detect_fusion(backend_id, progress=progress)


def _param_cap(backend_id: str) -> float | None:
    """The largest kernel (in parameters) worth sampling on ``backend_id``; None: no cap."""
    try:
        from nnmeter.backends import get_backend
        from nnmeter.predictors.facts import split_dataset_id

        if get_backend(split_dataset_id(backend_id)[0]).model_format == "tflite":
            return MAX_TFLITE_KERNEL_PARAMS
    except Exception as err:  # an unknown backend id (test doubles): no cap
        logger.debug("no parameter cap for %s: %s", backend_id, err)
    return None


def _wanted_calibrations(settings: BuildSettings) -> list[str]:
    """Names of the composition terms whose calibration ``settings`` asks for."""
    return [name for name, wanted in (
        ("edges", settings.calibrate_boundary), ("weight_refetch", settings.calibrate_weight_stream),
        ("reorders", settings.calibrate_reorders), ("chain", settings.calibrate_chain),
        ("in_model", settings.calibrate_in_model)) if wanted]


def train_and_cache(backend_id: str, dataset: KernelDataset, *, settings: BuildSettings,
                    root: str | Path | None = None) -> None:
    """Choose each kernel type's regressor by cross-validation (``predictor.json``),
    then train and cache the predictor of ``dataset``."""
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.train import choose_regressors

    logger.info("training: choosing each kernel type's regressor, then fitting")
    choose_regressors(dataset, seed=settings.seed)
    load_predictor(backend_id, dataset=settings.dataset, root=root)


def build_predictor(
    backend_id: str,
    settings: BuildSettings | None = None,
    *,
    profiler: Any = None,
    progress: bool = True,
    rules: Any = None,
    prior_configs: dict[str, list[dict[str, Any]]] | None = None,
    on_type_done: Callable[[str, dict[str, Any]], None] | None = None,
    root: str | Path | None = None,
    **overrides: Any,
) -> BuildResult:
    """Sample, profile and train kernel regressors for ``backend_id`` within a budget.

    Stages: open the dataset, load (or detect) the fusion rules, :func:`collect_prior`,
    :func:`profile_kernel_types`, :func:`calibrate` (only with the build's own
    profiler), :func:`train_and_cache`. ``budget_minutes`` bounds them together:
    profiling stops early enough to leave the calibrations their share when one is
    missing or partial, and training its reserve (``BuildSettings.calibration_share``).
    The run is logged to the dataset's ``builds.jsonl`` (:meth:`BuildResult.as_dict`,
    with its minutes per phase), even when calibrating or training fails.

    Parameters
    ----------
    settings : BuildSettings, optional
        The sampling and measurement knobs (default: all defaults).
    profiler : Profiler-like, optional
        Anything with ``measure(graph, on_error=..., **protocol) -> Measurement``; by
        default one :class:`~nnmeter.backends.Profiler` for the whole build (and then
        the calibrations run too).
    progress : bool
        Show a progress bar (and fusion detection's).
    rules : FusionRules, optional
        Use these rules instead of loading (or detecting) the backend's.
    prior_configs : dict, optional
        Kernel type → real configurations (dicts), instead of walking the zoo.
    on_type_done : callable, optional
        Called as ``on_type_done(kernel_type, summary)`` after each kernel type.
    root : path, optional
        Data root of ``datasets/kernels`` (default: the configured one).
    **overrides
        Fields of :class:`BuildSettings` (``budget_minutes=5``, ``kernels=["relu"]``...),
        replacing those of ``settings``.

    Returns
    -------
    BuildResult

    Raises
    ------
    UnknownSettingError
        If an override names no field of :class:`BuildSettings`.
    SettingsError
        If an override is out of its field's range.
    DatasetError
        If the dataset has rows and ``resume`` is False.
    FingerprintMismatchError
        If the device measured differs from the dataset's.
    """
    settings = _resolve_settings(settings, overrides)
    t_start = time.monotonic()
    deadline = t_start + settings.budget_minutes * 60.0
    if not settings.dataset:
        from dataclasses import replace

        settings = replace(settings, dataset=_default_dataset(backend_id, root, profiler))
    ds_dir = kernel_dataset_dir(settings.dataset, root)
    ds = _open_dataset(ds_dir, backend_id, resume=settings.resume)
    with ds.writer_lock("build"):  # one build per dataset at a time
        if rules is None:
            rules = _backend_rules(backend_id, progress=progress)
        max_params = _param_cap(backend_id)
        plan = collect_prior(rules, settings=settings, prior_configs=prior_configs)
        ds.directory.mkdir(parents=True, exist_ok=True)
        _record_prior(ds.directory / "prior.json", plan.weights, plan.priors, settings.kernels)

        result = BuildResult(backend_id=backend_id, dataset_dir=str(ds_dir))
        own_profiler = profiler is None
        # one budget for profiling, calibrations and training (BuildSettings.calibration_share)
        budget_s = settings.budget_minutes * 60.0
        reserve_s = min(TRAIN_RESERVE_MAX_SHARE * budget_s,
                        max(TRAIN_RESERVE_SHARE * budget_s, TRAIN_RESERVE_MIN_S)) \
            if settings.train else 0.0
        calibrations = _wanted_calibrations(settings) if own_profiler else []
        share = settings.calibration_share if calibrations and pending_calibrations(
            backend_id, ds.directory, calibrations) else 0.0
        profile_deadline = t_start + max(0.0, budget_s * (1.0 - share) - reserve_s)
        calibrate_deadline = deadline - reserve_s if budget_s > 0 else None
        reference = SpeedReference(ds.directory) if own_profiler else None
        if own_profiler:
            from nnmeter.backends import Profiler

            profiler = reference.watch(Profiler(backend_id), "profile")
        try:
            if own_profiler and settings.remeasure_disturbed:
                t_phase = time.monotonic()
                result.remeasured = remeasure_disturbed(
                    ds, profiler=profiler, deadline=profile_deadline,
                    kernels=None if settings.kernels is None else list(plan.weights),
                    progress=progress, protocol=_measurement_protocol(settings))
                result.measurements += result.remeasured["measured"]
                if result.remeasured["pending"]:
                    result.phases["remeasure"] = (time.monotonic() - t_phase) / 60
            profile_kernel_types(plan, result, settings=settings, profiler=profiler, dataset=ds,
                                 t_start=t_start, deadline=profile_deadline,
                                 max_params=max_params, progress=progress,
                                 on_type_done=on_type_done)
        finally:
            if own_profiler:
                profiler.close()
        result.phases["profile"] = (time.monotonic() - t_start) / 60
        try:
            if own_profiler and ds.meta() is not None:
                t_phase = time.monotonic()
                with reference.around(backend_id) if calibrations else contextlib.nullcontext():
                    calibrate(backend_id, ds.directory, calibrations,
                              deadline=calibrate_deadline, progress=progress)
                result.phases["calibrate"] = (time.monotonic() - t_phase) / 60
            if settings.train:
                t_phase = time.monotonic()
                train_and_cache(backend_id, ds, settings=settings, root=root)
                result.phases["train"] = (time.monotonic() - t_phase) / 60
        finally:
            result.minutes = (time.monotonic() - t_start) / 60
            _note_speed(result, reference, "this build")
            if own_profiler and settings.remeasure_disturbed:
                slow = len(disturbed_rows(ds))
                if slow:
                    result.warnings.append(
                        f"{slow} kernel configurations of {ds.directory.name} were measured "
                        f"only while the device ran slow (its speed reference, "
                        f"{REFERENCE_FILE}); rerun the build on a quiet machine to measure "
                        f"them again first")
            ds.append_raw("builds.jsonl", result.as_dict())
        return result


def _note_speed(result: Any, reference: SpeedReference | None, what: str) -> None:
    """The build's speed-reference summary into ``result``, and a warning (logged too)
    when the device's speed moved during it, or when it ran at another speed than the
    dataset's earlier builds, whose rows it joins (``reference.earlier``,
    :mod:`nnmeter.devices.reference`)."""
    if reference is None or not reference.points:
        return
    result.speed_reference = summarize(reference.points)
    ratio = compare_records(reference.earlier, reference.points)
    if ratio is not None:
        result.speed_reference["against_earlier"] = ratio
    for warning in (drift_warning(result.speed_reference, what),
                    speed_change_warning(ratio, what, "this dataset's earlier builds")):
        if warning:
            result.warnings.append(warning)
            logger.warning(warning)


@dataclass
class TransferResult:
    """What a transfer build did. ``phases`` holds minutes per phase (``plan``,
    ``measure``, ``calibrate``, ``train``)."""

    backend_id: str
    dataset_dir: str
    source: str
    measurements: int = 0
    planned: int = 0
    minutes: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    calibrated: list[str] = field(default_factory=list)
    stopped_by_budget: bool = False
    types: dict[str, int] = field(default_factory=dict)
    correction: dict[str, Any] = field(default_factory=dict)
    speed_reference: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"backend_id": self.backend_id, "dataset_dir": self.dataset_dir,
                "source": self.source, "measurements": self.measurements,
                "planned": self.planned, "minutes": self.minutes, "phases": self.phases,
                "calibrated": self.calibrated, "stopped_by_budget": self.stopped_by_budget,
                "types": self.types, "correction": self.correction,
                "speed_reference": self.speed_reference, "warnings": list(self.warnings)}

    def summary(self) -> str:
        lines = [f"transfer {self.source} -> {Path(self.dataset_dir).name}: "
                 f"{self.measurements} kernel measurements here ({self.planned} planned), "
                 f"{self.minutes:.1f} min in all "
                 f"({', '.join(f'{k} {v:.1f}' for k, v in self.phases.items())})"]
        if self.calibrated:
            lines.append(f"calibrated: {', '.join(self.calibrated)}")
        if self.correction:
            med = self.correction.get("median_ratio")
            if med:
                lines.append(f"this device runs the source's kernels at a median "
                             f"{med:.2f}x their time ({self.correction.get('rows', 0)} rows)")
            strength = self.correction.get("strength")
            scores = self.correction.get("strength_scores") or {}
            if strength is not None and scores:
                lines.append(
                    f"correction strength {strength:g} (1: per kernel, 0: one factor), "
                    f"chosen on {max(v['models'] for v in scores.values())} whole models "
                    f"left out one by one (rms log error " + ", ".join(
                        f"{k}: {v['loo_rms_log']:.3f}" for k, v in scores.items()) + ")")
        if self.speed_reference:
            lines.append(describe(self.speed_reference))
        if self.stopped_by_budget:
            lines.append("stopped by the budget; rerun the same command to continue")
        lines.extend(f"warning: {w}" for w in self.warnings)
        lines.append(f"data in {self.dataset_dir}")
        return "\n".join(lines)


def _has_own_build(ds_dir: Path, backend_id: str) -> bool:
    """Whether ``ds_dir`` holds kernel rows of a build that was not a transfer (no
    ``transfer.json``)."""
    from nnmeter.predictors.transfer import TRANSFER_FILE

    if not ds_dir.is_dir() or (ds_dir / TRANSFER_FILE).exists():
        return False
    ds = KernelDataset(ds_dir, backend_id)
    return any(True for t in ds.kernel_types() for _ in ds.rows(t))


def measured_keys(ds: KernelDataset) -> set[tuple[str, str]]:
    """``(kernel type, config key)`` of every row the dataset holds, measured or failed
    (a failed row is not retried)."""
    from nnmeter.sampling.prior import config_key

    return {(t, config_key(r["config"])) for t in ds.kernel_types() for r in ds.rows(t)
            if isinstance(r.get("config"), dict)}


#: seconds the calibrations must leave of their share for a transfer to measure kernels
#: again before it trains (a worker starts in seconds; a shorter pass is not worth it)
LEFTOVER_MIN_S = 60.0


def build_by_transfer(backend_id: str, source: str, *, budget_minutes: float = 10.0,
                   dataset: str | None = None, profiler: Any = None, progress: bool = True,
                   root: Any = None, limit: int | None = None,
                   in_model_variants: int | None = None) -> TransferResult:
    """Build this machine's predictor for ``backend_id`` by adapting ``source``'s
    (:mod:`nnmeter.predictors.transfer`) within ``budget_minutes`` of wall time, all
    phases included: plan, measure the planned kernels, calibrate, train.

    Resumable: configurations already in the dataset are not measured again, and the
    calibrations continue where they stopped. Without ``dataset``, a machine whose own
    dataset holds a full build gets the transfer beside it (``<dataset>-transfer``),
    never mixed into it. ``limit`` caps the configurations planned; by default it grows
    with the budget (:func:`~nnmeter.predictors.transfer.plan_size`), as does the number
    of zoo variants the plan partitions. ``in_model_variants`` (more than
    :data:`~nnmeter.predictors.in_model.VARIANTS`) adds the in-model calibration's
    models of that many a family with the time the calibrations leave, before their
    second pass (:func:`~nnmeter.predictors.in_model.extend_in_model`).

    Raises
    ------
    DatasetError
        If ``source`` names no usable dataset, or the target dataset belongs to
        another device, or holds the rows of a build that was not a transfer.
    SettingsError
        If ``budget_minutes`` is not a positive number.
    """
    from nnmeter.errors import SettingsError
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.dataset import write_calibration
    from nnmeter.predictors.transfer import (
        CALIBRATION_SHARE, MIN_PER_TYPE, PLAN_SEED, SAMPLE_SHARE, TRANSFER_FILE,
        find_source, plan_configs, plan_size,
    )
    from nnmeter.sampling.prior import config_key

    if not (isinstance(budget_minutes, (int, float)) and math.isfinite(budget_minutes)
            and budget_minutes > 0):
        raise SettingsError(f"--budget-minutes must be a positive number of minutes, got "
                            f"{budget_minutes!r}")
    t0 = time.monotonic()
    budget = budget_minutes * 60.0
    planned_limit, variants = plan_size(budget_minutes)
    limit = planned_limit if limit is None else limit
    src = find_source(backend_id, source, root)
    named = dataset is not None
    if dataset is None:
        dataset = _default_dataset(backend_id, root, profiler)
    if not named and _has_own_build(kernel_dataset_dir(dataset, root), backend_id):
        # this machine already has a full build: the transfer goes beside it, never into it
        dataset = f"{dataset}-transfer"
        logger.info("this device's %s holds a full build; the transfer writes %s",
                    dataset[:-len("-transfer")], dataset)
    if dataset == src.dataset_id:
        raise DatasetError(f"--transfer-from {source!r} is this machine's own dataset "
                           f"({dataset}); a transfer adapts another device's predictor")
    ds_dir = kernel_dataset_dir(dataset, root)
    ds = KernelDataset(ds_dir, backend_id)
    ds_dir.mkdir(parents=True, exist_ok=True)
    rec_path = ds_dir / TRANSFER_FILE
    if rec_path.exists():
        old = json.loads(rec_path.read_text())
        if old.get("source_dataset") != src.dataset_id:
            raise DatasetError(f"{ds_dir} was transferred from {old.get('source_dataset')!r}, "
                               f"not {src.dataset_id!r}; delete {rec_path} to change the "
                               f"source, or pass another --dataset")
    else:
        if _has_own_build(ds_dir, backend_id):
            n = sum(1 for t in ds.kernel_types() for _ in ds.rows(t))
            raise DatasetError(
                f"{ds_dir} holds {n} measurements of a build that was not a transfer; a "
                f"transfer into it would train them as the adapted device's own rows. Pass "
                f"another --dataset (e.g. {ds_dir.name}-transfer), or run `nnmeter build -b "
                f"{backend_id} --dataset {ds_dir.name}` to continue that build")
        write_calibration(ds_dir, TRANSFER_FILE, {
            "source_dataset": src.dataset_id, "source_backend": src.backend_id,
            "source": src.device_name or src.dataset_id,
            "source_fingerprint_id": src.fingerprint_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "plan": {"variants_per_family": variants, "seed": PLAN_SEED,
                     "limit": limit, "min_per_type": MIN_PER_TYPE}})
    result = TransferResult(backend_id, str(ds_dir), src.dataset_id)
    with ds.writer_lock("transfer build"):

        src_pred = load_predictor(src.backend_id, dataset=src.dataset_id, root=root)
        plan = plan_configs(src_pred, src.directory, backend_id, limit=limit,
                            n_per_family=variants)
        result.planned = len(plan)
        done = measured_keys(ds)
        todo = [(t, c, w) for t, c, w in plan if (t, config_key(c)) not in done]
        result.phases["plan"] = (time.monotonic() - t0) / 60
        measure_deadline = t0 + SAMPLE_SHARE * budget
        late_deadline = t0 + (SAMPLE_SHARE + CALIBRATION_SHARE) * budget

        own = profiler is None
        reference = SpeedReference(ds_dir) if own else None
        queue = iter(todo)

        def measure_until(deadline: float, desc: str, start: str) -> None:
            """Measure the plan's next configurations until ``deadline`` or its end."""
            prof = profiler
            if own:
                from nnmeter.backends import Profiler

                prof = reference.watch(Profiler(backend_id), "measure", start)
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=len(todo), initial=result.measurements, desc=desc,
                           unit="cfg", leave=True)
            t1 = time.monotonic()
            try:
                for t, cfg, _why in queue:
                    got = profile_configs(t, [cfg], "transfer", profiler=prof, dataset=ds,
                                          deadline=deadline)
                    result.measurements += 1
                    result.types[t] = result.types.get(t, 0) + len(got)
                    if bar is not None:
                        bar.update(1)
                    if time.monotonic() >= deadline:
                        break
            finally:
                if bar is not None:
                    bar.close()
                if own:
                    prof.close()
                result.phases["measure"] += (time.monotonic() - t1) / 60

        result.phases["measure"] = 0.0
        if todo and time.monotonic() < measure_deadline:
            measure_until(measure_deadline, "transfer: measuring kernels", "start")

        t2 = time.monotonic()
        if own and ds.meta() is not None:
            with reference.around(backend_id):
                result.calibrated = list(calibrate(backend_id, ds_dir, None,
                                                   deadline=late_deadline, progress=progress))
        result.phases["calibrate"] = (time.monotonic() - t2) / 60
        # what the calibrations left: more in-model models first where asked
        # (in_model_variants: on the Xeon 117 pinned OpenVINO's, MNN's and LiteRT's term
        # better than 36); then a second pass over the models (they set the level of
        # every prediction, and one pass caught at a slow moment of a shared host pulls
        # all of it: each model keeps its fastest pass); then kernels
        if own and late_deadline - time.monotonic() >= LEFTOVER_MIN_S:
            from nnmeter.predictors.in_model import (
                VARIANTS, add_in_model_pass, extend_in_model, passes_taken, read_in_model,
            )

            if in_model_variants is not None and in_model_variants > VARIANTS and \
                    read_in_model(ds) is not None:
                t4 = time.monotonic()
                with reference.around(backend_id, "more in-model models"):
                    extend_in_model(backend_id, ds_dir, variants=in_model_variants,
                                    deadline=late_deadline, progress=progress)
                result.calibrated.append(f"in_model ({in_model_variants} a family)")
                result.phases["calibrate"] += (time.monotonic() - t4) / 60
            if passes_taken(backend_id, ds_dir) == 1 and \
                    late_deadline - time.monotonic() >= LEFTOVER_MIN_S:
                t4 = time.monotonic()
                with reference.around(backend_id, "in-model pass"):
                    add_in_model_pass(backend_id, ds_dir, deadline=late_deadline,
                                      progress=progress, below=2)
                result.calibrated.append("in_model (second pass)")
                result.phases["calibrate"] += (time.monotonic() - t4) / 60
        if result.measurements < len(todo) and \
                late_deadline - time.monotonic() >= LEFTOVER_MIN_S:
            measure_until(late_deadline, "transfer: measuring kernels (time the "
                          "calibrations left)", "measure")
        result.stopped_by_budget = result.measurements < len(todo)

        t3 = time.monotonic()
        pred = load_predictor(backend_id, dataset=dataset, root=root)
        result.correction = dict(pred.meta.get("transfer", {}).get("summary", {}))
        from nnmeter.predictors import cache_as_trained
        from nnmeter.predictors.transfer import record_strength

        if record_strength(ds_dir, pred):
            cache_as_trained(pred, dataset, root)
        result.phases["train"] = (time.monotonic() - t3) / 60
        result.minutes = (time.monotonic() - t0) / 60
        _note_speed(result, reference, "this transfer build")
        ds.append_raw("builds.jsonl", {"kind": "transfer", **result.as_dict()})
        return result
