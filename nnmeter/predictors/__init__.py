"""Latency predictors: per-kernel regressors, the model predictor, backend selection.

- :func:`load_predictor` — the predictor of a backend on a device: trained from the
  committed kernel data (``datasets/kernels/<backend>@<device>/``) and fusion rules on
  first use, then cached. Without ``device`` it is this machine's, or the nearest
  device's when this machine has none (the report then says so:
  ``device_mismatch``, ``device_differences``; :mod:`nnmeter.devices.datasets`);
- :func:`predict` — a :class:`LatencyReport` for a model on a backend;
- :func:`select_backend` — predicted latency on every backend with a predictor, ranked.

Cache
-----
Trained regressors are cached under ``$XDG_CACHE_HOME/nnmeter/predictors/<backend>/<key>/``
(``~/.cache/...`` by default; ``$NNMETER_CACHE`` overrides the root) as JSON + numpy
arrays (:mod:`nnmeter.predictors.store`; never pickle). ``key`` hashes the fusion-rules
file, every kernel data file and the settings, so new data or rules retrain
automatically; a cached predictor loads in well under a second.

Memo
----
Within a process, :func:`load_predictor` returns the same predictor object for the same
arguments (a NAS loop calling :func:`predict` pays for loading once). On every call the
memo entry is checked against the sizes and modification times of the files it was
trained from (the kernel data and its folder, the device and calibration records, the
rules): new data retrains without hashing every row on every call (a few dozen ``stat``
calls, tens of microseconds). :func:`clear_memo` empties it.

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
from typing import Any, Sequence

from nnmeter.errors import PredictorError
from nnmeter.predictors.composition import Composition
from nnmeter.predictors.terms import TERMS
from nnmeter.predictors.model import (
    KernelRow, LatencyPredictor, LatencyReport, PredictorSettings,
)

__all__ = ["load_predictor", "predict", "select_backend", "available_predictors",
           "LatencyPredictor", "LatencyReport", "KernelRow", "PredictorSettings",
           "cache_dir", "clear_memo", "CACHE_VERSION"]

logger = logging.getLogger(__name__)

#: bump when training changes in a way the cache key cannot see
CACHE_VERSION = 30


def cache_dir() -> Path:
    """Root of the predictor cache (see the module docstring)."""
    from nnmeter._cache import cache_root

    return cache_root() / "predictors"


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


#: (backend, dataset, device, root, settings, cache, env) -> (predictor, its files' stats)
_MEMO: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def clear_memo() -> None:
    """Forget every memoised predictor (the next load reads the cache or trains)."""
    _MEMO.clear()


def _stats(paths: Sequence[str | os.PathLike]) -> tuple[tuple[str, int, int], ...]:
    # os.stat on the path strings: the memo checks these on every warm call, and a Path
    # object per file cost more than the prediction of a small model
    out = []
    stat = os.stat
    for p in paths:
        try:
            st = stat(p)
            out.append((p, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((p, -1, -1))
    return tuple(out)


def load_predictor(backend_id: str, *, dataset: str | None = None,
                   device: str | None = None,
                   root: str | os.PathLike | None = None,
                   settings: PredictorSettings | None = None,
                   use_cache: bool = True) -> LatencyPredictor:
    """The predictor of ``backend_id``, memoised per process (see the module doc); the
    arguments are those of :func:`_load_predictor`."""
    memo_key = (backend_id, dataset, device, str(root) if root is not None else None,
                json.dumps((settings or PredictorSettings()).as_dict(), sort_keys=True),
                use_cache, os.environ.get("NNMETER_FUSION_RULES_DIR"),
                os.environ.get("NNMETER_DATA"), os.environ.get("NNMETER_CACHE"))
    hit = _MEMO.get(memo_key)
    if hit is not None and _files_of(hit[0]) == hit[1]:
        return hit[0]
    pred = _load_predictor(backend_id, dataset=dataset, device=device, root=root,
                           settings=settings, use_cache=use_cache)
    _MEMO[memo_key] = (pred, _files_of(pred))
    return pred


def _files_of(pred: LatencyPredictor) -> tuple[tuple[str, int, int], ...]:
    """The stats of the files a predictor was trained from (recorded at load)."""
    return _stats([str(p) for p in getattr(pred, "source_files", ())])


def _load_predictor(backend_id: str, *, dataset: str | None = None,
                    device: str | None = None,
                    root: str | os.PathLike | None = None,
                    settings: PredictorSettings | None = None,
                    use_cache: bool = True) -> LatencyPredictor:
    """The predictor of ``backend_id``: from the cache, or trained from the kernel data.

    Parameters
    ----------
    dataset : str, optional
        Dataset id under ``datasets/kernels`` (a folder name), bypassing the device
        choice.
    device : str, optional
        Predict for this device (a name from ``nnmeter devices``, a dataset id or a
        fingerprint id) wherever this runs. Default: this machine's data, else the
        nearest device's (:func:`nnmeter.devices.datasets.resolve`).
    root : path, optional
        Folder holding ``datasets/`` (default ``$NNMETER_DATA`` or the checkout).
    settings : PredictorSettings, optional
    use_cache : bool
        Read and write the cache (default True).

    Raises
    ------
    PredictorError
        If the backend has no kernel data (build it with ``nnmeter build``).
    DatasetError
        If ``device`` names no dataset of the backend (the message lists the known ones),
        or a dataset's device record is malformed.
    FusionRulesError
        If the backend has no fusion rules.
    """
    from nnmeter.fusion import load_rules
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
    from nnmeter.predictors.store import load_regressors
    from nnmeter.devices.datasets import resolve
    from nnmeter.predictors.train import train_predictor
    from nnmeter.predictors.transfer import TRANSFER_FILE, read_transfer, train_transfer
    from nnmeter.predictors.intervals import INTERVALS_FILE, read_intervals

    settings = settings or PredictorSettings()
    resolution = None
    if dataset is None:
        resolution = resolve(backend_id, device, root)
        dataset = resolution.dataset.dataset_id
    ds_dir = kernel_dataset_dir(dataset, root)
    ds = KernelDataset(ds_dir, backend_id)
    files = ds.files()
    if not files:
        raise PredictorError(
            f"no kernel measurements for backend {backend_id!r} in {ds_dir}; build a "
            f"predictor with `nnmeter build --backend {backend_id}` (predictors exist for: "
            f"{', '.join(available_predictors(root)) or 'none'})"
        )
    rules = load_rules(backend_id)
    key, rp, records = _dataset_key(backend_id, ds, settings, files)
    # what the memo checks: a new or changed row file, record or rules file
    sources = [str(p) for p in (rp, ds_dir, ds_dir / INTERVALS_FILE, *files, *records)]
    intervals = read_intervals(ds_dir)
    where = cache_dir() / dataset / key
    if use_cache and (where / "manifest.json").exists():
        try:
            regs, meta = load_regressors(where)
            pred = LatencyPredictor(backend_id, rules, regs, device=meta.get("device"),
                                    meta={**meta, "cache": str(where)},
                                    composition=Composition.from_records(meta.get("terms"),
                                                                         TERMS))
            return _loaded(pred, resolution, sources, ds_dir, intervals)
        except Exception as err:  # noqa: BLE001 - any broken cache is rebuilt, never fatal
            logger.warning("ignoring a broken predictor cache (%s: %s); retraining it",
                           type(err).__name__, err)
    logger.info("training the %s predictor from %s", backend_id, ds_dir)
    if (ds_dir / TRANSFER_FILE).exists():
        # a device built by transfer: the source device's data adapted to this one
        rec = read_transfer(ds_dir)
        source = load_predictor(rec["source_backend"], dataset=rec["source_dataset"],
                                root=root, settings=settings, use_cache=use_cache)
        pred = train_transfer(backend_id, ds, rules, settings, source)
    else:
        pred = train_predictor(backend_id, ds_dir, rules, settings)
    pred.resolution = resolution
    if use_cache:
        _save(pred, where, key)
    return _loaded(pred, resolution, sources, ds_dir, intervals)


def _loaded(pred: LatencyPredictor, resolution: Any, sources: list[str], ds_dir: Path,
            intervals: Any) -> LatencyPredictor:
    """``pred`` with what loading found out beside its regressors (how the dataset was
    chosen, the files the memo checks, the dataset's folder, its intervals), whether it
    came from the cache or was trained."""
    pred.resolution = resolution
    pred.source_files = sources
    pred.dataset_dir = str(ds_dir)
    pred.intervals = intervals
    return pred


def _save(pred: LatencyPredictor, where: Path, key: str) -> None:
    """``pred`` into the cache folder ``where`` (a failure is logged, never fatal)."""
    from nnmeter.predictors.store import save_regressors

    meta = {**pred.meta, "device": pred.device, "backend_id": pred.backend_id, "key": key,
            "terms": pred.composition.records()}
    try:
        save_regressors(where, pred.regressors, meta=meta)
        pred.meta["cache"] = str(where)
    except OSError as err:
        logger.warning("could not cache the predictor in %s: %s", where, err)


def cache_as_trained(pred: LatencyPredictor, dataset: str,
                     root: str | os.PathLike | None = None,
                     settings: PredictorSettings | None = None) -> None:
    """Cache ``pred`` under the key ``dataset``'s files have now: for a record written
    after training that training already followed (a transfer's chosen correction
    strength, :func:`nnmeter.predictors.transfer.record_strength`), so that the next
    load does not train again."""
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir

    ds = KernelDataset(kernel_dataset_dir(dataset, root), pred.backend_id)
    key = _dataset_key(pred.backend_id, ds, settings or PredictorSettings())[0]
    _save(pred, cache_dir() / dataset / key, key)


def _dataset_key(backend_id: str, ds: Any, settings: PredictorSettings,
                 files: list[Path] | None = None) -> tuple[str, Path, list[Path]]:
    """The cache key of ``ds``'s predictor (its rules, row files ``files``, by default
    listed here, and record files), with the rules path and the record files."""
    from nnmeter.fusion import rules_path

    rp = rules_path(backend_id)
    records = _record_files(ds)
    rows = ds.files() if files is None else files
    return _cache_key(rp if rp.exists() else None, rows + records, settings), rp, records


def _record_files(ds: Any) -> list[Path]:
    """The dataset's files besides the kernel rows that training reads: its device
    record, the regressor choice, every composition term's calibration record, and for
    a dataset built by transfer, its ``transfer.json`` and the source dataset's files."""
    from nnmeter.predictors.boundary import ROW_CONTEXT_FILE, ROW_EDGES_FILE
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.train import CHOICE_FILE
    from nnmeter.predictors.transfer import TRANSFER_FILE, source_chain

    # the rows' own profiled edges and in-context times too (read by the edges term)
    names = [ds.META, CHOICE_FILE, TRANSFER_FILE, ROW_EDGES_FILE, ROW_CONTEXT_FILE] + [
        n for t in TERMS.ordered() if (n := TERMS.get(t).record_file)]
    files = [ds.directory / n for n in names if (ds.directory / n).exists()]
    # a transferred predictor is trained from its source dataset too, and from the
    # datasets up its source's chain (nnmeter.predictors.transfer._with_ancestors)
    for backend, directory in source_chain(ds.directory):
        src = KernelDataset(directory, backend)
        files += src.files() + [src.directory / n for n in names
                                if (src.directory / n).exists()]
    return files


def available_predictors(root: str | os.PathLike | None = None) -> list[str]:
    """Backend ids with kernel data of some device under ``datasets/kernels``."""
    from nnmeter.devices.datasets import device_datasets

    return sorted({d.backend_id for d in device_datasets(None, root)})


def predict(model: Any, backend_id: str, *, input_shape: Any = None,
            input_shapes: Any = None, **kwargs: Any) -> LatencyReport:
    """Predict ``model`` on ``backend_id``: a ModelGraph, a model file, an
    ``onnx.ModelProto``, a ``torch.nn.Module`` or a ``keras.Model``
    (:func:`nnmeter.frontends.load_model`).

    ``input_shape`` (one input, NCHW, batch included) or ``input_shapes`` (``{name:
    shape}``) fix the input; a torch module needs one. ``kwargs`` go to
    :func:`load_predictor`.
    """
    if input_shape is not None:
        if input_shapes is not None:
            raise TypeError("pass input_shape or input_shapes, not both")
        input_shapes = {"": tuple(input_shape)}
    if input_shapes is not None or not hasattr(model, "nx"):
        from nnmeter.frontends import load_model

        model = load_model(model, input_shapes=input_shapes)
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
