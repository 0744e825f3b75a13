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

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import PredictorError
from nnmeter.predictors.regressors import REGRESSORS, KernelRegressor

__all__ = ["STORE_SCHEMA_VERSION", "save_regressors", "load_regressors"]

STORE_SCHEMA_VERSION = 1
_SEP = "::"


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
        for name, arr in state_arrays.items():
            arr = np.asarray(arr)
            if arr.dtype == object:
                raise PredictorError(f"regressor {key!r} state {name!r} is an object array; "
                                     f"only numeric arrays can be stored")
            arrays[f"{key}{_SEP}{name}"] = arr
    manifest = {"schema_version": STORE_SCHEMA_VERSION, "regressors": entries,
                "meta": meta or {}}
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".npz.tmp")
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, directory / "arrays.npz")
    tmp_json = directory / "manifest.json.tmp"
    tmp_json.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp_json, directory / "manifest.json")  # last: marks the cache complete
    return directory


def load_regressors(directory: str | os.PathLike) -> tuple[dict[str, KernelRegressor], dict]:
    """Load what :func:`save_regressors` wrote; returns (regressors, meta).

    Raises
    ------
    PredictorError
        If the directory is missing files, of another schema version, or names a
        regressor class that is not registered.
    """
    directory = Path(directory)
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        npz = np.load(directory / "arrays.npz", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise PredictorError(
            f"cannot load stored regressors from {directory}: {err}; delete the folder "
            f"to retrain from the datasets"
        ) from err
    if manifest.get("schema_version") != STORE_SCHEMA_VERSION:
        raise PredictorError(
            f"stored regressors in {directory} have schema version "
            f"{manifest.get('schema_version')!r}, this nnmeter reads "
            f"{STORE_SCHEMA_VERSION}; delete the folder to retrain"
        )
    out: dict[str, KernelRegressor] = {}
    with npz:
        for key, entry in manifest["regressors"].items():
            cls = REGRESSORS.get(entry["class"])
            reg = cls(**entry["params"])
            arrays = {name: npz[f"{key}{_SEP}{name}"] for name in entry["arrays"]}
            reg._set_state(entry["state"], arrays)
            reg.n_features_in_ = int(entry["n_features_in"])
            out[key] = reg
    return out, manifest.get("meta", {})
