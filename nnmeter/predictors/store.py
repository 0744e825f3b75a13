"""Safe serialisation of trained regressors: JSON manifest + numpy arrays, no pickle.

A saved set of regressors is a directory with ``manifest.json`` (schema version,
regressor classes and parameters, free metadata) and ``arrays.npz`` (every learned
array; LightGBM models as their text format stored as bytes). Loading uses
``np.load(..., allow_pickle=False)`` and instantiates only classes registered in
:data:`~nnmeter.predictors.regressors.REGRESSORS`, so loading a cache can never run
code from the file. Nothing here uses pickle or joblib.

Examples
--------
>>> import numpy as np, tempfile
>>> from nnmeter.predictors.regressors import LinearKernelRegressor
>>> reg = LinearKernelRegressor().fit(np.array([[1.0], [10.0]]), np.array([1.0, 5.0]))
>>> d = tempfile.mkdtemp()
>>> _ = save_regressors(d, {"fc": reg}, meta={"backend_id": "ort-cpu"})
>>> regs, meta = load_regressors(d)
>>> bool(np.allclose(regs["fc"].predict([[3.0]]), reg.predict([[3.0]]))), meta["backend_id"]
(True, 'ort-cpu')
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import PredictorError
from nnmeter.predictors.regressors import REGRESSORS, KernelRegressor

__all__ = ["STORE_SCHEMA_VERSION", "save_regressors", "load_regressors", "write_atomic"]

STORE_SCHEMA_VERSION = 2
_SEP = "::"
#: array names of a regressor's training range of each feature (KernelRegressor.far_outside)
_LO, _HI = "__feature_lo", "__feature_hi"


def _class_name(reg: KernelRegressor) -> str:
    for name in REGRESSORS.names():
        if type(reg) is REGRESSORS.get(name):
            return name
    raise PredictorError(
        f"cannot save a {type(reg).__name__}: only registered regressors "
        f"({', '.join(REGRESSORS.names())}) can be stored; register it in REGRESSORS"
    )


def save_regressors(directory: str | os.PathLike, regressors: dict[str, KernelRegressor],
                    *, meta: dict[str, Any] | None = None) -> Path:
    """Write fitted ``regressors`` (name → regressor) and JSON-able ``meta`` to ``directory``.

    Files are written to temporary names and renamed, so a crash never leaves a
    half-written cache that looks complete.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for key, reg in regressors.items():
        reg._check_fitted()
        state_meta, state_arrays = reg._get_state()
        entries[key] = {
            "class": _class_name(reg), "params": reg.get_params(),
            "n_features_in": int(reg.n_features_in_), "state": state_meta,
            "arrays": sorted(state_arrays),
        }
        if getattr(reg, "feature_lo_", None) is not None:
            state_arrays = {**state_arrays, _LO: reg.feature_lo_, _HI: reg.feature_hi_}
            entries[key]["arrays"] = sorted(state_arrays)
        for name, arr in state_arrays.items():
            arr = np.asarray(arr)
            if arr.dtype == object:
                raise PredictorError(f"regressor {key!r} state {name!r} is an object array; "
                                     f"only numeric arrays can be stored")
            arrays[f"{key}{_SEP}{name}"] = arr
    manifest = {"schema_version": STORE_SCHEMA_VERSION, "regressors": entries,
                "meta": meta or {}}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    blob = buf.getvalue()
    # the arrays' checksum: a corrupt LightGBM text would abort the process inside the
    # C++ library (no exception to catch), so nothing unverified reaches it
    manifest["arrays_sha256"] = hashlib.sha256(blob).hexdigest()
    write_atomic(directory / "arrays.npz", blob)
    # last: marks the cache complete
    write_atomic(directory / "manifest.json",
                 json.dumps(manifest, indent=1, sort_keys=True).encode())
    return directory


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one:
    a temporary file in the same folder, flushed to disk, then renamed over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_regressors(directory: str | os.PathLike) -> tuple[dict[str, KernelRegressor], dict]:
    """Load what :func:`save_regressors` wrote; returns (regressors, meta).

    Raises
    ------
    PredictorError
        If the directory is missing files, of another schema version, or names a
        regressor class that is not registered.
    """
    directory = Path(directory)
    fix = "delete the folder to retrain from the datasets (nnmeter does so by itself)"
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        blob = (directory / "arrays.npz").read_bytes()
    except (OSError, ValueError) as err:
        raise PredictorError(f"cannot load stored regressors from {directory}: {err}; "
                             f"{fix}") from err
    if not isinstance(manifest, dict) or manifest.get("schema_version") != STORE_SCHEMA_VERSION:
        version = manifest.get("schema_version") if isinstance(manifest, dict) else None
        raise PredictorError(
            f"stored regressors in {directory} have schema version {version!r}, this "
            f"nnmeter reads {STORE_SCHEMA_VERSION}; {fix}")
    if hashlib.sha256(blob).hexdigest() != manifest.get("arrays_sha256"):
        raise PredictorError(f"stored regressors in {directory}: arrays.npz does not match "
                             f"its checksum in manifest.json (a torn or edited file); {fix}")
    out: dict[str, KernelRegressor] = {}
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            for key, entry in manifest["regressors"].items():
                cls = REGRESSORS.get(entry["class"])
                reg = cls(**entry["params"])
                arrays = {name: npz[f"{key}{_SEP}{name}"] for name in entry["arrays"]}
                lo, hi = arrays.pop(_LO, None), arrays.pop(_HI, None)
                reg._set_state(entry["state"], arrays)
                reg.n_features_in_ = int(entry["n_features_in"])
                if lo is not None and hi is not None:
                    reg.feature_lo_, reg.feature_hi_ = lo, hi
                out[key] = reg
        meta = manifest.get("meta", {})
        if not isinstance(meta, dict):
            raise TypeError(f"meta is a {type(meta).__name__}, not an object")
    except PredictorError:
        raise
    except Exception as err:  # an edited manifest: any field may be wrong
        raise PredictorError(f"stored regressors in {directory} are malformed "
                             f"({type(err).__name__}: {err}); {fix}") from err
    return out, meta
