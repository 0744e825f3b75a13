"""Kernels inside a whole model: how much slower (or faster) a device runs its kernels
in a model than alone, fitted on whole models measured on that device.

A single-kernel measurement runs one kernel hundreds of times with its weights and
input hot in the core's own caches. Inside a model the rest of the model runs in
between, and how much that costs depends on the device's cache hierarchy, not on the
kernel alone. On the AMD EPYC (Zen 4, 1 MiB L2, 32 MiB L3) where nnmeter's first data
was measured the two agree: a zoo MobileNetV2 takes what its kernels' sum says. On a
2-vCPU Intel Xeon with AMX (2 MiB L2 per core and a large, slow shared L3), the same
variants took 1.24-1.27x the sum of their kernels measured alone on that machine
(``experiments/kernel_sum_check.py``; 5.75 ms against 4.55 ms for one), while dense
ResNet-style convolutions, which hide the refetch under their compute, stay near 1x.
The composition terms calibrated on kernels (overhead, reorders, chain) cannot see
this: it shows only in whole models.

So the builder measures a few whole models (:func:`calibration_models`: up to
:data:`VARIANTS` zoo variants of every family with the kernel sampler's seed 0, never
one of the reported model sets, seeds 1000 and 2000; the heavy ones skipped: 36
models, about two minutes on one core), and after the regressors are trained
:func:`~nnmeter.predictors.terms.in_model.fit_in_model` fits, per kernel group
(:data:`GROUPS`: spatial dense convolutions, pointwise (1x1) convolutions, depthwise
convolutions, fully connected, the rest, and a transformer's attention kernels), what a
kernel costs inside a model per
megabyte it moves (its inputs, weights and outputs): ``ms += b_g * MB``. The fit
minimises the squared log error of the measured models' totals with a ridge pull of
every ``b_g`` towards 0 (:data:`RIDGE`, in units of :data:`SCALE_MS_PER_MB`), within
:data:`BOUNDS`. A kernel pays for its bytes, not in proportion to its time, because
that is what the Xeon showed: a multiplicative factor per group (tried first) fitted
the light calibration models but over-predicted large compute-bound convolutions by
10-17 % (44 % of the seed-1000 design set within ±10 % for the full build, 44 % for the
transfer), where the per-byte form put 54 % and 71 % within ±10 %. A device where
kernels behave alike in and out of a model gets coefficients near 0. Where it predicts
the models left out one by one clearly better (:data:`FORM_TOLERANCE`), a fixed cost per
kernel of each group joins the cost per megabyte (:func:`per_kernel_columns`); the fit
floors every kernel at half its time, as the prediction does (:class:`KernelTable`).

A runtime that keeps a convolution's weights transformed moves those bytes, not the
weights' own: MNN's Winograd convolutions hold ``(alpha / k)^2`` times their weights
(7.1x for a 3x3 kernel in 8x8 tiles; :mod:`nnmeter.predictors.winograd`), and a 10x10
64 -> 64 3x3 layer ran 3.2x its time alone once a chain of them overflowed the cache
while a 1x1 layer of as many weight bytes did not slow down
(``experiments/winograd_check.py``, epyc-zen4-avx512-2c). On such a runtime (``winograd_weights`` in
:data:`~nnmeter.predictors.facts.RUNTIME_FACTS`) the fit tries both: a convolution
charged its own bytes, and its transformed ones; it keeps the transformed bytes only
where they predict the calibration models left out one by one better by more than
:data:`FORM_TOLERANCE` (as the per-kernel form below). The tiles cost only where a
model's tiles overflow the cache, which a per-megabyte charge cannot say: charged
everywhere, they put NAS-Bench-201 cells, whose tiles stay in the cache, further over
their time. mnn-cpu, leave-one-out rms log error own -> transformed bytes, and the
development sets (within ±10 %, then MAPE) each form gives:

- epyc-zen4-avx512-2c: 0.0695 -> 0.0676 (2.7 %: own bytes kept); seeds 1000 / 2000 /
  4000 84.6 / 86.5 / 79.5 % against 84.6 / 84.6 / 83.3 %, MAPE 5.7 / 7.6 / 6.4
  against 5.1 / 7.3 / 5.8 %; its 17.5-minute build 0.0723 -> 0.0715 (kept own);
- xeon-f6m167-amx-2c: 0.1154 -> 0.1082 (6.2 %: transformed bytes); seeds 1000 / 2000
  68.3 / 75.0 -> 72.1 / 78.8 %, MAPE 7.9 / 7.4 -> 7.3 / 6.5 %.

The same models first fit the share of a matrix product's weight fetch that shows
inside a model (:func:`~nnmeter.predictors.terms.in_model.fit_gemm_fetch`), and the
pull towards 0 is chosen by leaving one model out (:func:`choose_ridge`), so that a
device whose kernels run in a model as they do alone keeps coefficients near 0.

Records: ``<dataset>/in_model.json`` (``points``: variant name and measured ms;
``fingerprint_id``); its points go to ``in_model.points.jsonl`` as they are measured
(:class:`~nnmeter.predictors.calibration_points.CalibrationPoints`), so a stopped
calibration resumes. The term itself is :class:`nnmeter.predictors.terms.in_model.InModelTerm`.

Examples
--------
>>> group_of("conv-bn-relu", 3), group_of("conv-bn", 1), group_of("dwconv-bn-relu6", 3)
('conv', 'pointwise', 'dwconv')
>>> group_of("gap"), group_of("fc", rows=1), group_of("fc", rows=197)
('other', 'fc', 'gemm')
>>> import numpy as np
>>> B = np.array([[10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])  # MB per group, 3 models
>>> b = fit_per_mb(B, np.ones(3), np.array([1.5, 1.0, 1.5]), ridge=0.0)
>>> [round(x, 3) for x in b]
[0.05, 0.0]
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DatasetError

__all__ = ["IN_MODEL_FILE", "GROUPS", "ATTENTION_FAMILIES", "VARIANTS", "SEED", "MAX_GFLOPS", "RIDGE", "RIDGES",
           "RIDGE_TOLERANCE", "choose_ridge", "group_of",
           "kernel_group",
           "calibration_models", "extend_in_model", "ATTENTION_TYPES", "wants_transformers", "planned_in_model_work",
           "measure_in_model",
           "read_in_model", "add_in_model_pass", "passes_taken", "KernelTable", "fit_per_mb", "SCALE_MS_PER_MB", "BOUNDS",
           "per_kernel_columns", "SCALE_MS_PER_KERNEL", "BOUNDS_PER_KERNEL", "FORM_TOLERANCE"]

logger = logging.getLogger(__name__)

#: the calibration record under the dataset
IN_MODEL_FILE = "in_model.json"
#: the kernel groups that get a coefficient each
#: (pointwise convolutions move many bytes per FLOP and behave unlike the spatial ones:
#: on the Xeon above, MobileNets' 1x1 convolutions ran slower in a model, ResNets' 3x3
#: ones did not)
#: (the attention group, a transformer's batched products, row normalisations and head
#: transposes, moves its activations only: their reuse across a model is unlike a
#: convolution's weights)
#: (``gemm``: a fully connected layer over many rows, a transformer's token projections,
#: is a matrix product that reuses each weight once per row; a CNN classifier's batch-1
#: ``fc`` reads each weight once: a calibration pass that changed the one by 8 % moved
#: the other's shared coefficient by 40 %)
GROUPS: tuple[str, ...] = ("conv", "pointwise", "dwconv", "fc", "other", "attention", "gemm")
#: the kernel families of the attention group
ATTENTION_FAMILIES = frozenset(("matmul", "softmax", "layernorm", "add-layernorm",
                                "transpose", "split-last"))
#: zoo variants per family measured (the first of :data:`DRAWN` drawn under the cap),
#: and their sampler seed (the kernel builder's). More pin a large term better: on the
#: 2-vCPU Xeon (xeon-f6m167-amx-2c) 10 a family (117 models) instead of 3 narrowed the
#: development sets' errors about their median for openvino-cpu-f32 (rms log
#: 0.145-0.155 -> 0.086-0.115), mnn-cpu (0.109-0.137 -> 0.096-0.117) and litert-cpu
#: (0.076-0.081 -> 0.074-0.078) and widened ort-cpu's (0.067-0.075 -> 0.080-0.085,
#: against the 8 models of its shipped transfer; a second pass over the 117 did not
#: help), though its kernels' sum is as far from its whole models as LiteRT's (median
#: 10 %; OpenVINO's and MNN's 21-22 %) (``experiments/results/in_model_size_<device>``);
#: so a build keeps 3 and ``--in-model-variants`` asks for more
VARIANTS = 3
DRAWN = 6
SEED = 0
#: variants above this many FLOPs (1e9) are not measured: a 57 GFLOPs VGG variant takes
#: 0.45 s a run, and every family but VGG has light variants
MAX_GFLOPS = 8.0
#: weight of the pull of every coefficient towards 0 (in units of SCALE_MS_PER_MB),
#: against the sum of squared log errors of the models
RIDGE = 0.01
#: the pulls :func:`choose_ridge` tries, weakest first: the fit keeps the strongest whose
#: leave-one-out error is within :data:`RIDGE_TOLERANCE` of the best. A device whose
#: kernels run in a model as they do alone gets coefficients near 0 instead of noise:
#: on epyc-zen4-avx512-2c (ort-cpu, 54 models) the leave-one-out rms log error was
#: 0.0423 at 0.01 and 0.0420 at every pull from 1 up, and the weak pull's coefficients
#: moved the zoo design set (seed 1000) from 97.3 to 96.2 % within ±10 %; on the Xeon
#: and the Zen 5 the weakest pull is best by far (0.087 against 0.13-0.40)
RIDGES = (RIDGE, 0.1, 1.0, 10.0, 100.0)
#: relative slack on the best leave-one-out rms log error
RIDGE_TOLERANCE = 0.01
#: the scale of a coefficient: 0.02 ms per MB is 50 GB/s
SCALE_MS_PER_MB = 0.02
#: the coefficients are kept within (ms per MB); a kernel keeps at least half its time
BOUNDS = (-0.02, 0.2)
#: the per-kernel cost of :func:`per_kernel_columns`: its scale (ms; 10 us) and bounds
SCALE_MS_PER_KERNEL = 0.01
BOUNDS_PER_KERNEL = (-0.01, 0.05)
#: the per-kernel form (twice the coefficients) is kept only where its leave-one-out rms
#: log error is below the per-megabyte form's by more than this share. On
#: epyc-zen4-avx512-2c, 71 calibration models each: openvino-cpu-f32 0.067 against
#: 0.079 (development sets within ±10 %: seed 1000 73.1 -> 82.7 %, seed 2000
#: 76.9 -> 90.4 %); mnn-cpu 0.0711 against 0.0723, where it moved seed 1000 from 80.8 to
#: 76.9 % (MAPE 6.4 -> 7.1 %) and left seed 2000 at 75.0 %
FORM_TOLERANCE = 0.05


def per_kernel_columns(groups: int) -> dict[str, Any]:
    """:func:`fit_per_mb`'s ``scale`` and ``bounds`` for a matrix of ``groups`` columns of
    megabytes followed by ``groups`` columns of kernel counts: the per-kernel form of
    the term, ``ms += b_g * MB + a_g`` per kernel.

    OpenVINO runs every node of a model through its executor: on epyc-zen4-avx512-2c
    openvino-cpu-f32's kernels summed to 0.6-0.8x the measured time of a MobileNet
    while a VGG's summed to 1.0x, which a cost per megabyte alone cannot give both
    (:func:`~nnmeter.predictors.terms.in_model.fit_in_model` keeps this form only where
    it predicts the calibration models better, left out one by one).

    >>> per_kernel_columns(2)["scale"].tolist()
    [0.02, 0.02, 0.01, 0.01]
    """
    return {"scale": np.r_[np.full(groups, SCALE_MS_PER_MB), np.full(groups, SCALE_MS_PER_KERNEL)],
            "bounds": (np.r_[np.full(groups, BOUNDS[0]), np.full(groups, BOUNDS_PER_KERNEL[0])],
                       np.r_[np.full(groups, BOUNDS[1]), np.full(groups, BOUNDS_PER_KERNEL[1])])}


def group_of(kernel_type: str, kernel_size: int | None = None, rows: int | None = None) -> str:
    """The group of :data:`GROUPS` a kernel's in-model coefficient comes from: its type's
    family, a dense convolution with ``kernel_size`` 1 (its config's ``kernel``) being
    ``pointwise`` and a fully connected layer over ``rows`` > 1 vectors ``gemm``."""
    from nnmeter.predictors.kernel_data import family_of
    from nnmeter.predictors.weight_refetch import matrix_product

    fam = family_of(kernel_type)
    if matrix_product(fam, rows):
        return "gemm"
    if fam in ATTENTION_FAMILIES:
        return "attention"
    if fam in ("conv", "gconv", "convtranspose"):
        return "pointwise" if kernel_size == 1 and fam == "conv" else "conv"
    return fam if fam in ("dwconv", "fc") else "other"


def kernel_group(kernel: Any) -> str:
    """:func:`group_of` a partitioned kernel (its type and config)."""
    size = getattr(kernel.config, "kernel", None)
    if size == 1 and getattr(kernel.config, "kernel_w", None) not in (None, 1):
        size = None  # a 1x7 convolution is not pointwise
    return group_of(kernel.type, size, getattr(kernel.config, "rows", None))


def calibration_models(*, transformers: bool = True, variants: int = VARIANTS) -> list[Any]:
    """The zoo variants the calibration measures, round-robin over the families (so a
    calibration cut short still covers every family it reached): per family the first
    ``variants`` (:data:`VARIANTS` in a build) of :data:`DRAWN` (at least twice
    ``variants``) drawn with seed :data:`SEED` that are under :data:`MAX_GFLOPS`; the
    transformer families only with ``transformers``. The draw is the same sequence for
    every ``variants``, so a larger set holds the build's (:func:`extend_in_model`)."""
    if variants < 1:
        raise ValueError(f"calibration_models: variants must be at least 1, not {variants}")
    from nnmeter import zoo
    from nnmeter.ir.cost import graph_cost

    per_family = []
    # the transformer families too: their fc kernels stream weights and their attention
    # kernels move activations in ways no CNN shows (a device without transformer
    # points keeps 0 for the attention group)
    for fam in (*zoo.FAMILY_NAMES, *(zoo.TRANSFORMER_FAMILIES if transformers else ())):
        # three families whose kernels all share two groups (fc, attention) get twice the
        # models of a CNN family, drawn from twice as many
        drawn = max(DRAWN, 2 * variants)
        n, drawn = ((2 * variants, 2 * drawn) if fam in zoo.TRANSFORMER_FAMILIES
                    else (variants, drawn))
        keep = []
        for v in zoo.sample_variants(fam, drawn, seed=SEED):
            if len(keep) < n and graph_cost(v.build()).flops <= MAX_GFLOPS * 1e9:
                keep.append(v)
        per_family.append(keep)
    out = []
    for i in range(max(len(vs) for vs in per_family)):
        out += [vs[i] for vs in per_family if i < len(vs)]
    return out


#: kernel types without which a dataset's predictor cannot estimate a transformer
ATTENTION_TYPES = ("matmul", "matmul-scale")


def wants_transformers(dataset: Any) -> bool:
    """Whether the calibration should measure the transformer models for ``dataset``: only
    when it holds attention kernels (:data:`ATTENTION_TYPES`). A transfer from a device
    measured on CNNs alone predicted ViT and BERT calibration models at 3-6x their time
    on the Zen 4 (13 of 54 models, all transformers), which the fit then leaves out
    (:func:`~nnmeter.predictors.terms.in_model.within_reach`): time the budget lacked for
    the CNN models."""
    types = set(dataset.kernel_types())
    return any(t in types for t in ATTENTION_TYPES)


def planned_in_model_work(backend_id: str, dataset_dir: str | os.PathLike) -> int:
    """Measurements :func:`measure_in_model` still has to make (each a whole model,
    counted as 5 kernel measurements for the builder's split of its time)."""
    from nnmeter.predictors.calibration_points import CalibrationPoints
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    done = CalibrationPoints.of(ds, IN_MODEL_FILE).load()
    return 5 * sum(1 for v in calibration_models(transformers=wants_transformers(ds))
                   if v.name not in done)


def _model_point(variant: Any, m: Any) -> dict[str, Any]:
    """A calibration model's point of the record from its measurement ``m``."""
    return {"variant": variant.name, "family": variant.family, "latency_ms": float(m.latency_ms),
            "spread": float(m.spread) if m.spread is not None else None}


def measure_in_model(backend_id: str, dataset_dir: str | os.PathLike, *,
                     core: int | str | None = "auto", profiler: Any = None,
                     deadline: float | None = None, progress: bool = False) -> dict[str, Any]:
    """Measure the :func:`calibration_models` whole on this device.

    Every measured model is appended to ``in_model.points.jsonl`` at once; one already
    there is not measured again. From ``deadline`` (a ``time.monotonic()`` time) on no
    model is started once there are points, and the record is marked ``partial``.

    Raises
    ------
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    DatasetError
        If no model could be measured.
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.predictors.calibration_points import CalibrationPoints, mark_partial, \
        refuse_other_device
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    log = CalibrationPoints.of(ds, IN_MODEL_FILE)
    stored = log.load()
    models = calibration_models(transformers=wants_transformers(ds))
    points: list[dict[str, Any]] = []
    missing = 0
    fid = None
    prof = profiler
    bar = tqdm(total=len(models), unit="model", disable=not progress,
               initial=sum(1 for v in models if v.name in stored),
               desc=f"calibrate kernels inside models ({backend_id})")
    try:
        for v in models:
            if v.name in stored:
                points.append(dict(stored[v.name]))
                continue
            if deadline is not None and time.monotonic() >= deadline and (points or stored):
                missing += 1
                continue
            if prof is None:
                prof = Profiler(backend_id, core=core)
            m = prof.measure(v.build())
            bar.update(1)
            if not m.ok:
                logger.warning("in-model calibration: %s failed: %s", v.name, m.error)
                continue
            fid = m.device.fingerprint_id if m.device is not None else fid
            refuse_other_device(ds, fid)
            point = _model_point(v, m)
            points.append(point)
            log.append(v.name, point)
    finally:
        bar.close()
        if prof is not None and profiler is None:
            prof.close()
    if not points:
        raise DatasetError(f"no model of the in-model calibration could be measured on "
                           f"{backend_id}; nothing to fit")
    rec = {"backend_id": backend_id, "fingerprint_id": fid or ds.fingerprint_id,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "seed": SEED,
           "variants_per_family": VARIANTS, "max_gflops": MAX_GFLOPS, "points": points}
    if missing:
        mark_partial(rec, planned=len(models), measured=len(points))
    return rec


def passes_taken(backend_id: str, dataset_dir: str | os.PathLike) -> int:
    """The fewest passes a model of the dataset's in-model record has (0 without one)."""
    from nnmeter.predictors.dataset import KernelDataset

    rec = read_in_model(KernelDataset(Path(dataset_dir), backend_id))
    if rec is None:
        return 0
    return min(len(_passes(p)) for p in rec["points"])


def _passes(point: dict[str, Any]) -> list[float]:
    """Every pass's ms of an in-model point; a point measured before passes were kept
    has its ``latency_ms`` as its only pass."""
    return [float(x) for x in point.get("passes") or [point["latency_ms"]]]


def _existing_record(backend_id: str, dataset_dir: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """The dataset in ``dataset_dir`` and its applied in-model record, which a further
    pass or more models need (:class:`DatasetError` naming the file when there is none)."""
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(Path(dataset_dir), backend_id)
    rec = read_in_model(ds)
    if rec is None:
        raise DatasetError(f"{Path(dataset_dir) / IN_MODEL_FILE} does not exist or is not "
                           f"applied; measure it with `nnmeter build -b {backend_id}` first")
    return ds, rec


def add_in_model_pass(backend_id: str, dataset_dir: str | os.PathLike, *,
                      core: int | str | None = "auto", profiler: Any = None,
                      progress: bool = False, deadline: float | None = None,
                      below: int | None = None) -> dict[str, Any]:
    """Measure every model of the dataset's in-model record once more, now, and keep
    each model's time as the fastest of its passes (interference on a shared machine
    only ever adds time, and one pass caught at a slow moment pulls the fit its way).

    Each point gets ``passes`` (every pass's ms, in order; a point measured before this
    existed counts its ``latency_ms`` as its first pass) and ``passed_at`` (when each
    was taken); ``latency_ms`` becomes their minimum. The record is rewritten in place
    after every model, so a stopped run keeps the passes it took; past ``deadline``
    (``time.monotonic()`` seconds) it stops between two models. With ``below``, only
    the models that have fewer passes than that are measured (a build's second pass
    after it added models). Returns the record.

    Raises
    ------
    DatasetError
        If the dataset has no in-model record.
    FingerprintMismatchError
        If this device's fingerprint differs from the dataset's.
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.predictors.calibration_points import refuse_other_device, write_record
    from nnmeter.zoo import get_variant

    ds, rec = _existing_record(backend_id, dataset_dir)
    prof = profiler or Profiler(backend_id, core=core)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    try:
        for point in tqdm(rec["points"], unit="model", disable=not progress,
                          desc=f"another pass over the in-model models ({backend_id})"):
            if deadline is not None and time.monotonic() >= deadline:
                break
            if below is not None and len(_passes(point)) >= below:
                continue
            m = prof.measure(get_variant(str(point["variant"])).build())
            if not m.ok:
                logger.warning("in-model pass: %s failed: %s", point["variant"], m.error)
                continue
            refuse_other_device(ds, m.device.fingerprint_id if m.device else None)
            passes = _passes(point)
            at = list(point.get("passed_at") or [rec.get("created")])
            passes.append(float(m.latency_ms))
            at.append(stamp)
            point.update(passes=passes, passed_at=at, latency_ms=min(passes))
            write_record(ds.directory, IN_MODEL_FILE, rec)
    finally:
        if profiler is None:
            prof.close()
    return rec


def extend_in_model(backend_id: str, dataset_dir: str | os.PathLike, *, variants: int,
                    core: int | str | None = "auto", profiler: Any = None,
                    progress: bool = False, deadline: float | None = None
                    ) -> dict[str, Any]:
    """Measure, now, the :func:`calibration_models` of ``variants`` per family that the
    dataset's in-model record lacks, and add them to it (a build measures
    :data:`VARIANTS`; ``nnmeter build --transfer-from ... --in-model-variants N`` and
    ``experiments/in_model_pass.py --variants N`` add more). The record is rewritten
    after every model, so a stopped run keeps what it measured;
    past ``deadline`` (``time.monotonic()`` seconds) it stops between two models, and
    ``variants_per_family`` says the larger set only once it is complete (the models
    come round-robin over the families, so a set cut short still covers them evenly).
    Returns the record; raises as :func:`add_in_model_pass` does (no record, or
    another device's).
    """
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.predictors.calibration_points import refuse_other_device, write_record

    ds, rec = _existing_record(backend_id, dataset_dir)
    have = {str(p["variant"]) for p in rec["points"]}
    todo = [v for v in calibration_models(transformers=wants_transformers(ds), variants=variants)
            if v.name not in have]
    prof = None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    try:
        for v in tqdm(todo, unit="model", disable=not progress,
                      desc=f"more in-model models ({backend_id}, {variants} a family)"):
            if deadline is not None and time.monotonic() >= deadline:
                return rec
            prof = prof or profiler or Profiler(backend_id, core=core)
            m = prof.measure(v.build())
            if not m.ok:
                logger.warning("in-model extension: %s failed: %s", v.name, m.error)
                continue
            refuse_other_device(ds, m.device.fingerprint_id if m.device else None)
            rec["points"].append({**_model_point(v, m), "passes": [float(m.latency_ms)],
                                  "passed_at": [stamp]})
            write_record(ds.directory, IN_MODEL_FILE, rec)
    finally:
        if prof is not None and profiler is None:
            prof.close()
    rec["variants_per_family"] = max(int(rec.get("variants_per_family") or VARIANTS), variants)
    write_record(ds.directory, IN_MODEL_FILE, rec)
    return rec


def read_in_model(dataset: Any) -> dict[str, Any] | None:
    """The dataset's in-model record, or None when it has none (or says
    ``"apply": false``).

    Raises
    ------
    FingerprintMismatchError
        If the record was measured on another fingerprint than the dataset.
    DatasetError
        If the file is not valid JSON or holds no points.
    """
    from nnmeter.predictors.dataset import read_calibration

    record = read_calibration(dataset, IN_MODEL_FILE, remedy="measure it again (rerun "
                              "`nnmeter build` on the device, or delete the file)")
    if record is None:
        return None
    points = record.get("points")
    if not isinstance(points, list) or not points:
        raise DatasetError(f"{Path(dataset.directory) / IN_MODEL_FILE} holds no 'points'; "
                           f"measure it again or delete it")
    if record.get("apply", True) is False:
        return None
    return record


class KernelTable:
    """The calibration models as the in-model fit sees them: every kernel's time before
    the term (``ms``, > 0), its row of ``X`` (the columns the coefficients multiply: the
    MB it moves in its group's column, and a 1 in its group's count column for the
    per-kernel form) and its model's index (``model``); ``rest``: per model, what its
    total holds beyond its kernels (the once-per-model terms). A model's total under
    coefficients ``c`` is what the term predicts: ``rest + sum max(ms + X @ c, ms / 2)``.

    >>> t = KernelTable(np.array([[1.0], [2.0], [4.0]]), np.array([1.0, 1.0, 2.0]),
    ...                 np.array([0, 0, 1]), np.array([0.5, 0.0]))
    >>> t.totals(np.array([0.5])).tolist(), t.totals(np.array([-1.0])).tolist()
    ([4.0, 4.0], [1.5, 1.0])
    """

    def __init__(self, X: np.ndarray, ms: np.ndarray, model: np.ndarray,
                 rest: np.ndarray) -> None:
        self.X = np.asarray(X, float)
        self.ms = np.asarray(ms, float)
        self.model = np.asarray(model, int)
        self.rest = np.asarray(rest, float)
        if self.X.ndim != 2 or len(self.X) != len(self.ms) or len(self.model) != len(self.ms):
            raise ValueError(f"KernelTable: X {self.X.shape}, ms {self.ms.shape}, model "
                             f"{self.model.shape} disagree")
        if (self.ms <= 0).any():
            raise ValueError("KernelTable: every kernel time must be positive")

    @classmethod
    def from_matrix(cls, B: np.ndarray, base: np.ndarray) -> "KernelTable":
        """Each model as one kernel: its prediction without the term (``base``) and its
        row of ``B`` (models x columns)."""
        B = np.asarray(B, float)
        base = np.asarray(base, float)
        if B.ndim != 2 or len(B) != len(base):
            raise ValueError(f"fit_per_mb: B {B.shape}, base {base.shape} disagree")
        if (base <= 0).any():
            raise ValueError("fit_per_mb: every measured and base time must be positive")
        return cls(B, base, np.arange(len(base)), np.zeros(len(base)))

    @property
    def models(self) -> int:
        return len(self.rest)

    def columns(self, cols: Any) -> "KernelTable":
        """The same kernels with only the columns ``cols`` of ``X``."""
        return KernelTable(self.X[:, cols], self.ms, self.model, self.rest)

    def take(self, keep: np.ndarray) -> "KernelTable":
        """The models where ``keep`` (a boolean mask over the models) holds, renumbered."""
        keep = np.asarray(keep, bool)
        new = np.cumsum(keep) - 1
        rows = keep[self.model]
        return KernelTable(self.X[rows], self.ms[rows], new[self.model[rows]], self.rest[keep])

    def totals(self, coef: np.ndarray) -> np.ndarray:
        t = np.maximum(self.ms + self.X @ np.asarray(coef, float), 0.5 * self.ms)
        return self.rest + np.bincount(self.model, t, minlength=self.models)


def fit_per_mb(B: Any, base: np.ndarray | None, measured: np.ndarray, *,
               ridge: float = RIDGE, scale: Any = SCALE_MS_PER_MB,
               bounds: tuple[Any, Any] = BOUNDS) -> list[float]:
    """One coefficient (ms per MB) per column of ``B`` (models x groups: the MB each
    group's kernels move in each model) minimising ``sum_m log((base_m + B_m . b) /
    measured_m)^2 + ridge * sum_g (b_g / scale)^2`` within ``bounds``; a group that moves
    nothing in any model gets 0. ``base`` is each model's prediction without the term.
    ``B`` may instead be a :class:`KernelTable` (``base`` None): each kernel is then
    floored at half its time, as the term does when it predicts. ``scale`` and either
    bound may be one value per column (a column of kernel counts beside the megabytes:
    :func:`per_kernel_columns`).

    Raises
    ------
    ValueError
        If the shapes disagree or a measured or base time is not positive.
    """
    from scipy.optimize import least_squares

    table = B if isinstance(B, KernelTable) else KernelTable.from_matrix(B, base)
    measured = np.asarray(measured, float)
    if len(measured) != table.models:
        raise ValueError(f"fit_per_mb: {table.models} models, measured {measured.shape} "
                         f"disagree")
    if (measured <= 0).any():
        raise ValueError("fit_per_mb: every measured and base time must be positive")
    cols = table.X.shape[1]
    live = table.X.sum(axis=0) > 0
    out = np.zeros(cols)
    if live.any():
        sc = np.broadcast_to(np.asarray(scale, float), (cols,))[live]
        lo = np.broadcast_to(np.asarray(bounds[0], float), (cols,))[live]
        hi = np.broadcast_to(np.asarray(bounds[1], float), (cols,))[live]
        full = np.zeros(cols)

        def residuals(b: np.ndarray) -> np.ndarray:
            full[live] = b
            pred = table.totals(full)
            return np.concatenate([np.log(pred / measured), math.sqrt(ridge) * b / sc])

        sol = least_squares(residuals, np.zeros(int(live.sum())), bounds=(lo, hi))
        out[live] = sol.x
    return [float(x) for x in out]


def choose_ridge(B: Any, base: np.ndarray | None, measured: np.ndarray,
                 ridges: tuple[float, ...] = RIDGES,
                 tolerance: float = RIDGE_TOLERANCE,
                 **fit: Any) -> tuple[float, dict[float, float]]:
    """The pull of :func:`fit_per_mb` for these models: each of ``ridges`` is scored by
    the rms log error of every model predicted by a fit on the others (leave-one-out),
    and the strongest within ``tolerance`` (relative) of the best is kept. Returns it
    and every pull's score. Fewer than 3 models: :data:`RIDGE`, no scores. ``B`` and
    ``base`` as :func:`fit_per_mb` takes them; ``fit``: its ``scale`` and ``bounds``.

    >>> import numpy as np
    >>> B = np.array([[10.0], [20.0], [5.0], [8.0]])
    >>> base = np.ones(4)
    >>> choose_ridge(B, base, base * (1 + 0.02 * B[:, 0]))[0]   # a real per-MB cost
    0.01
    >>> choose_ridge(B, base, base * np.array([1.01, 0.99, 1.0, 1.0]))[0]   # noise
    100.0
    """
    table = B if isinstance(B, KernelTable) else KernelTable.from_matrix(B, base)
    measured = np.asarray(measured, float)
    n = len(measured)
    if n < 3:
        return RIDGE, {}
    scores: dict[float, float] = {}
    for ridge in ridges:
        sq = []
        for i in range(n):
            keep = np.arange(n) != i
            coef = fit_per_mb(table.take(keep), None, measured[keep], ridge=ridge, **fit)
            pred = table.take(~keep).totals(np.array(coef))[0]
            sq.append(math.log(pred / measured[i]) ** 2)
        scores[ridge] = math.sqrt(sum(sq) / n)
    best = min(scores.values())
    return max(r for r, s in scores.items() if s <= best * (1 + tolerance)), scores
