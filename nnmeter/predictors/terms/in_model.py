"""Kernels inside a whole model: a per-group cost per megabyte (and, where it predicts
better, per kernel) on kernel times, fitted on whole models measured on the device
(:mod:`nnmeter.predictors.in_model` says why and how)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnmeter.errors import BackendError, DatasetError, MeasurementError
from nnmeter.predictors.composition import Composition, FitContext, ModelView, Term
from nnmeter.predictors.facts import DeviceFacts

__all__ = ["InModelTerm", "fit_in_model", "kernel_mb", "fit_gemm_fetch", "charged_mb",
           "GEMM_FETCH_GRID", "MIN_GEMM_MODELS", "MAX_RATIO", "within_reach"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InModelTerm(Term):
    """``ms_per_mb``: (group, ms per MB) pairs: what a kernel of each group of
    :data:`~nnmeter.predictors.in_model.GROUPS` costs inside a model per megabyte it
    moves, on top of its time alone (never below half of it); ``models``: how many
    measured models they were fitted on; ``llc_bytes``: kernels that alone move more
    than the last-level cache pay nothing (see :func:`charged_mb`); ``ms_per_kernel``:
    (group, ms) pairs, what each kernel of a group costs more inside a model whatever
    it moves (empty where the per-megabyte form alone predicts the calibration models
    as well, :func:`fit_in_model`).

    It is fitted after the regressors (:func:`fit_in_model` needs the predictor's own
    estimates of the measured models), so :meth:`fit` in the composition's pass returns
    None and removes nothing from the kernel rows: a single-kernel row is the kernel
    alone, which is what the regressors learn.

    Examples
    --------
    >>> t = InModelTerm((("conv", 0.0), ("pointwise", 0.02), ("dwconv", 0.01)), 30)
    >>> t.per_mb("dwconv-bn-relu6", 3), t.per_mb("conv-bn", 3), t.per_mb("conv-bn", 1)
    (0.01, 0.0, 0.02)
    >>> t.in_model_ms(0.1, 2e6, 0.02), t.in_model_ms(0.1, 2e6, -0.2)
    (0.14, 0.05)
    >>> u = InModelTerm((("dwconv", 0.01),), 30, ms_per_kernel=(("dwconv", 0.005),))
    >>> round(u.in_model_ms(0.1, 2e6, 0.01, 0.005), 4)
    0.125
    """

    ms_per_mb: tuple[tuple[str, float], ...]
    models: int
    #: a kernel that alone moves more than this (the last-level cache, bytes; 0: no
    #: limit) was measured with its weights coming from memory already: it pays nothing
    #: more inside a model (AlexNet's and VGG's 100-MB classifier layers)
    llc_bytes: float = 0.0
    ms_per_kernel: tuple[tuple[str, float], ...] = ()
    #: the runtime keeps a Winograd convolution's weights transformed (MNN): such a
    #: kernel moves those bytes, not its weights' own (:func:`kernel_mb`)
    winograd: bool = False
    #: the threads the runtime runs on (MNN's Winograd tile depends on them)
    threads: int = 1

    name: ClassVar[str] = "in_model"
    label: ClassVar[str] = "kernels inside the model (fitted on measured models)"
    record_file: ClassVar[str | None] = "in_model.json"
    calibration: ClassVar[str] = "whole zoo models measured on the device"
    calibration_skips: ClassVar[tuple[type, ...]] = (DatasetError, BackendError,
                                                     MeasurementError)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_by_kernel", {})
        object.__setattr__(self, "_groups", _by_group(self.ms_per_mb))
        object.__setattr__(self, "_per_kernel", _by_group(self.ms_per_kernel))

    @classmethod
    def wanted(cls, facts: DeviceFacts) -> bool:
        return True

    @classmethod
    def planned_work(cls, backend_id: str, dataset_dir: Any) -> int:
        from nnmeter.predictors.in_model import planned_in_model_work

        return planned_in_model_work(backend_id, dataset_dir)

    @classmethod
    def measure(cls, backend_id: str, dataset_dir: Any, *, before: Any = None,
                deadline: float | None = None, progress: bool = False) -> dict[str, Any]:
        from nnmeter.predictors.in_model import measure_in_model

        return measure_in_model(backend_id, dataset_dir, deadline=deadline, progress=progress)

    @classmethod
    def fit(cls, ctx: FitContext) -> "InModelTerm | None":
        return None  # fitted after the regressors: fit_in_model

    def per_mb(self, kernel_type: str, kernel_size: int | None = None,
               rows: int | None = None) -> float:
        """The ms per MB of a kernel's group (0 for a group without one)."""
        from nnmeter.predictors.in_model import group_of

        return self._groups.get(group_of(kernel_type, kernel_size, rows), 0.0)  # type: ignore[attr-defined]

    @staticmethod
    def in_model_ms(ms: float, memory_bytes: float, per_mb: float,
                    per_kernel: float = 0.0) -> float:
        """A kernel's time inside a model: ``ms`` plus ``per_mb`` per MB it moves and
        ``per_kernel``, never below half of ``ms``."""
        return max(ms + per_mb * memory_bytes / 1e6 + per_kernel, 0.5 * ms)

    def _kernel(self, kernel: Any) -> tuple[bool, float]:
        """(whether its group has a coefficient, what it costs more inside a model than
        alone: its group's ms per MB times the MB it moves plus its group's ms per
        kernel), cached per config."""
        key = (kernel.type, id(kernel.config))
        hit = self._by_kernel.get(key)  # type: ignore[attr-defined]
        if hit is None or hit[0] is not kernel.config:
            from nnmeter.predictors.in_model import kernel_group

            by = self._by_kernel  # type: ignore[attr-defined]
            if len(by) > 100_000:
                by.clear()
            group = kernel_group(kernel)
            b = self._groups.get(group, 0.0)  # type: ignore[attr-defined]
            a = self._per_kernel.get(group, 0.0)  # type: ignore[attr-defined]
            mb = kernel_mb(kernel, self.llc_bytes, self.winograd, self.threads) if b else 0.0
            hit = by[key] = (kernel.config, bool(b or a), b * mb + a)
        return hit[1], hit[2]

    def adjust(self, view: ModelView) -> None:
        ms = view.ms
        for j, k in enumerate(view.kernels):
            if not ms[j]:
                continue
            live, more = self._kernel(k)
            if live:
                ms[j] = max(ms[j] + more, 0.5 * ms[j])
                view.mark(j, self.name)


def _by_group(pairs: Any) -> dict[str, float]:
    """(group, coefficient) pairs as a dict. A term fitted before fully connected layers
    over many rows had a group of their own (``gemm``) gives them the ``fc`` one."""
    out = {str(g): float(c) for g, c in pairs}
    out.setdefault("gemm", out.get("fc", 0.0))
    return out


def charged_mb(memory_bytes: float, llc_bytes: float) -> float:
    """The megabytes of a kernel that the in-model term charges: all it moves, or none
    when that is more than ``llc_bytes`` (> 0): measured alone, such a kernel already
    read its weights from memory.

    >>> charged_mb(2e6, 32e6), charged_mb(150e6, 32e6), charged_mb(150e6, 0)
    (2.0, 0.0, 150.0)
    """
    if llc_bytes and memory_bytes > llc_bytes:
        return 0.0
    return memory_bytes / 1e6


def kernel_mb(kernel: Any, llc_bytes: float, winograd: bool = False, threads: int = 1) -> float:
    """:func:`charged_mb` of a partitioned kernel: what it moves
    (``KernelCost.memory_bytes``), its weights counted as the runtime keeps them:
    transformed into Winograd tiles where ``winograd``
    (:func:`nnmeter.predictors.winograd.kernel_weight_bytes`, on ``threads``)."""
    moved = float(kernel.kernel_type.cost(kernel.config).memory_bytes)
    if winograd and _dense_conv(kernel):
        from nnmeter.predictors.winograd import kernel_weight_bytes

        w = kernel_weight_bytes(kernel.config, threads=threads)
        if w is not None:
            moved += w[1] - w[0]
    return charged_mb(moved, llc_bytes)


def _threads(device: Any) -> int:
    """The thread count of a device record's settings (1 where it names none)."""
    try:
        return max(1, int(((device or {}).get("settings") or {}).get("threads", 1)))
    except (AttributeError, TypeError, ValueError):
        return 1


def _dense_conv(kernel: Any) -> bool:
    """Whether a partitioned kernel is a dense convolution (family ``conv``; whether
    the runtime runs it by Winograd is :func:`~nnmeter.predictors.winograd.winograd_tile`'s
    to say)."""
    from nnmeter.predictors.kernel_data import family_of

    return family_of(kernel.type) == "conv"


def fit_in_model(pred: Any, dataset: Any) -> Any:
    """``pred`` with the in-model term appended to its composition when ``dataset``
    holds an in-model record (fitted on its models' predictions by ``pred`` itself);
    else ``pred`` unchanged."""
    from nnmeter.predictors.in_model import FORM_TOLERANCE, GROUPS, KernelTable, \
        choose_ridge, fit_per_mb, kernel_group, per_kernel_columns, read_in_model
    from nnmeter.zoo import get_variant

    rec = read_in_model(dataset)
    if rec is None:
        return pred
    rows = []
    for p in rec["points"]:
        try:
            graph = get_variant(str(p["variant"])).build()
            ms = float(p["latency_ms"])
        except Exception as err:  # noqa: BLE001 - a stale point is skipped, never fatal
            logger.warning("in-model calibration: skipping point %r (%s)", p, err)
            continue
        if ms > 0:
            rows.append((graph, ms))
    if not rows:
        return pred
    first = np.array([pred.predict(g, check_device=False).total_ms for g, _ in rows])
    keep = within_reach(first, np.array([ms for _, ms in rows]))
    if not keep.all():
        logger.warning(
            "in-model calibration: %d of %d models left out of the fit, predicted at %s "
            "their measured time (beyond %gx either way: a kernel the predictor cannot "
            "estimate, not how kernels run inside a model): %s", int((~keep).sum()),
            len(rows), ", ".join(f"{b / ms:.2f}x" for (_, ms), b, k
                                 in zip(rows, first, keep) if not k), MAX_RATIO,
            ", ".join(str(g.name) for (g, _), k in zip(rows, keep) if not k))
        rows = [r for r, k in zip(rows, keep) if k]
        if not rows:
            return pred
    pred = fit_gemm_fetch(pred, rows)
    from nnmeter.predictors.facts import device_facts

    facts = device_facts(pred.device)
    llc = float(facts.llc_bytes or 0)
    wino = bool(facts.winograd_weights)
    threads = _threads(pred.device)
    g = len(GROUPS)
    cols, kernel_ms, model = [], [], []
    base = np.zeros(len(rows))
    rest = np.zeros(len(rows))
    for i, (graph, _) in enumerate(rows):
        report = pred.predict(graph, check_device=False)
        base[i] = report.total_ms
        rest[i] = report.total_ms
        for k, row in zip(pred.kernels(pred._for_backend(graph)), report.rows):
            if not row.predicted_ms > 0:
                continue  # a kernel run inside another: the term leaves it at 0
            cols.append((GROUPS.index(kernel_group(k)), kernel_mb(k, llc),
                         kernel_mb(k, llc, True, threads) if wino else 0.0))
            kernel_ms.append(row.predicted_ms)
            model.append(i)
            rest[i] -= row.predicted_ms

    def table_of(transformed: bool) -> KernelTable:
        X = np.zeros((len(cols), 2 * g))
        for r, (j, mb, mb_w) in enumerate(cols):
            X[r, j] = mb_w if transformed else mb
            X[r, g + j] = 1.0
        return KernelTable(X, np.array(kernel_ms), np.array(model), np.maximum(rest, 0.0))

    measured = np.array([ms for _, ms in rows])
    per_kernel = per_kernel_columns(g)

    def form(table: KernelTable) -> tuple[Any, ...]:
        """The pull and form the models left out one by one choose for ``table``: the
        per-kernel form only where it predicts them clearly better (FORM_TOLERANCE): it
        has twice the coefficients, and a few dozen models pin down few."""
        ridge, scores = choose_ridge(table.columns(slice(0, g)), None, measured)
        ridge_k, scores_k = choose_ridge(table, None, measured, **per_kernel)
        use_k = bool(scores and scores_k
                     and scores_k[ridge_k] < scores[ridge] * (1 - FORM_TOLERANCE))
        loo = scores_k.get(ridge_k) if use_k else scores.get(ridge)
        return use_k, ridge, scores, ridge_k, scores_k, loo

    table = table_of(False)
    use_k, ridge, scores, ridge_k, scores_k, loo = form(table)
    loo_w = None
    if wino:
        # transformed weights only where they, too, predict the models left out clearly
        # better: on epyc-zen4-avx512-2c their charge moved mnn-cpu's development sets
        # little, and on the backend-selection set it put NAS-Bench-201 cells, whose
        # tiles stay in the cache, further over their time
        table_w = table_of(True)
        chosen = form(table_w)
        loo_w = chosen[-1]
        wino = bool(loo is not None and loo_w is not None
                    and loo_w < loo * (1 - FORM_TOLERANCE))
        if wino:
            table = table_w
            use_k, ridge, scores, ridge_k, scores_k, loo = chosen
    mb_only = table.columns(slice(0, g))
    if use_k:
        ridge, coef_all = ridge_k, fit_per_mb(table, None, measured, ridge=ridge_k,
                                              **per_kernel)
        coef, coef_k = coef_all[:g], coef_all[g:]
        after = table.totals(np.array(coef_all))
    else:
        coef, coef_k = fit_per_mb(mb_only, None, measured, ridge=ridge), []
        after = mb_only.totals(np.array(coef))
    before_err = float(np.median(np.abs(base - measured) / measured))
    after_err = float(np.median(np.abs(after - measured) / measured))
    logger.info("in-model ms per MB %s%s from %d models, pull %g (median error %.1f%% -> "
                "%.1f%%)", dict(zip(GROUPS, np.round(coef, 4))),
                f", ms per kernel {dict(zip(GROUPS, np.round(coef_k, 4)))}" if use_k else "",
                len(rows), ridge, 100 * before_err, 100 * after_err)
    term = InModelTerm(tuple(zip(GROUPS, coef)), len(rows), llc,
                       tuple(zip(GROUPS, coef_k)), winograd=wino, threads=threads)
    pred.composition = Composition(tuple(pred.composition.terms) + (term,))
    pred.meta["in_model"] = {"ms_per_mb": dict(zip(GROUPS, coef)), "models": len(rows),
                             "ms_per_kernel": dict(zip(GROUPS, coef_k)),
                             "ridge": ridge, "ridge_loo_rms_log": {str(k): v for k, v in scores.items()},
                             "per_kernel_loo_rms_log": {str(k): v for k, v in scores_k.items()},
                             "loo_rms_log": loo,
                             "median_error_before": before_err,
                             "median_error_after": after_err,
                             "winograd": wino,
                             "winograd_loo_rms_log": loo_w}
    return pred


#: a calibration model predicted further off than this factor (either way) before the
#: term is left out of its fit (:func:`within_reach`)
MAX_RATIO = 2.0


def within_reach(base: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Which calibration models the in-model fit may use: those whose prediction
    before the term is within :data:`MAX_RATIO` of their measured time.

    The term moves a model by what its kernels' bytes cost inside it, a few tens of
    percent. A model predicted at several times its time has a kernel the predictor
    cannot estimate (a transfer from a device without transformer kernels put ViT and
    BERT calibration models at 5.6x and 3.8x), and fitting it drags every group's
    coefficient (there: "other" to its lower bound, every CNN family 5 % under).

    >>> within_reach(np.array([1.0, 5.6, 0.9, 0.4]), np.ones(4)).tolist()
    [True, False, True, False]
    """
    ratio = np.asarray(base, dtype=np.float64) / np.asarray(measured, dtype=np.float64)
    return np.abs(np.log(ratio)) <= np.log(MAX_RATIO)


#: the shares of a matrix product's weight fetch :func:`fit_gemm_fetch` tries
GEMM_FETCH_GRID = tuple(round(0.05 * i, 2) for i in range(21))
#: whole models whose prediction the share moves (by more than 1 %) that the fit needs
MIN_GEMM_MODELS = 4


def fit_gemm_fetch(pred: Any, rows: list[tuple[Any, float]]) -> Any:
    """``pred`` with the share of a matrix product's weight fetch that it adds inside a
    model (``RefetchTerm.gemm_fetch``) fitted on whole models measured on its device.

    A transformer's projection (a fully connected layer over many tokens) measured alone
    has its weights in the cache; inside a model that overflows the cache they come from
    memory, and how much of that fetch the runtime hides under its arithmetic is the
    device's (and runtime's) own: on epyc-zen4-avx512-2c, ort-cpu, a 768 -> 768
    projection over 32 tokens took 0.345 ms alone, 0.39 ms inside a BERT and 0.456 ms
    with the whole fetch added at the streaming rate (0.117 ms, 2.4 MB at 20 GB/s):
    about 0.4 of it showed. The share is the one of :data:`GEMM_FETCH_GRID` whose
    predictions of ``rows`` (``(graph, measured ms)``) have the least squared log error;
    only models the share moves count. With fewer than :data:`MIN_GEMM_MODELS` of those,
    or without a refetch term, ``pred`` is returned unchanged (the whole fetch where
    :data:`~nnmeter.predictors.terms.refetch.GEMM_REFETCH_BACKENDS` says so). Where the
    fit runs, every matrix product pays its share on top of its hot time, whatever the
    backend: a share of 0 is the hot time alone.
    """
    import dataclasses

    term = pred.composition.get("weight_refetch")
    if term is None:
        return pred
    terms = tuple(pred.composition.terms)

    def with_share(share: float) -> Composition:
        new = dataclasses.replace(term, gemm_refetch=True, gemm_fetch=float(share))
        return Composition(tuple(new if t is term else t for t in terms))

    def totals(share: float) -> np.ndarray:
        pred.composition = with_share(share)
        return np.array([pred.predict(g, check_device=False).total_ms for g, _ in rows])

    measured = np.array([ms for _, ms in rows])
    pred.composition = Composition(terms)
    before = np.array([pred.predict(g, check_device=False).total_ms for g, _ in rows])
    lo, hi = totals(0.0), totals(1.0)
    moved = np.abs(np.log(hi / lo)) > 0.01
    if int(moved.sum()) < MIN_GEMM_MODELS:
        pred.composition = Composition(terms)
        return pred
    errors = []
    for share in GEMM_FETCH_GRID:
        t = totals(share)[moved]
        errors.append(float(np.sum(np.log(t / measured[moved]) ** 2)))
    best = GEMM_FETCH_GRID[int(np.argmin(errors))]
    pred.composition = with_share(best)
    after = totals(best)

    def median_error(t: np.ndarray) -> float:
        return float(np.median(np.abs(t - measured)[moved] / measured[moved]))

    logger.info("matrix products add %.2f of their weight fetch inside a model (%d models; "
                "median error %.1f%% -> %.1f%%)", best, int(moved.sum()),
                100 * median_error(before), 100 * median_error(after))
    pred.meta["gemm_fetch"] = {"share": best, "models": int(moved.sum()),
                               "median_error_before": median_error(before),
                               "median_error_after": median_error(after)}
    return pred
