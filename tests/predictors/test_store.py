"""Safe storage: numpy arrays and text only, no pickle, exact round trip."""

from __future__ import annotations

import pathlib
import zipfile

import numpy as np
import pytest
from sklearn.ensemble import RandomForestRegressor

from nnmeter.errors import PredictorError
from nnmeter.predictors import store
from nnmeter.predictors.forest import ForestArrays
from nnmeter.predictors.regressors import (
    LightGBMKernelRegressor, LinearKernelRegressor, RandomForestKernelRegressor,
)


def _data(n=120, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 100, size=(n, 4))
    y = np.where(X[:, 0] > 50, 2.0, 1.0) * X[:, 1] / 10 + 0.1
    return X, y


def test_forest_arrays_match_sklearn():
    X, y = _data()
    rf = RandomForestRegressor(n_estimators=25, max_depth=12, random_state=0).fit(X, y)
    fa = ForestArrays.from_sklearn(rf)
    Xq = np.random.default_rng(5).uniform(0, 110, size=(300, 4))
    np.testing.assert_allclose(fa.predict(Xq), rf.predict(Xq), rtol=1e-12)


@pytest.mark.parametrize("cls,kw", [
    (RandomForestKernelRegressor, dict(n_estimators=15)),
    (LightGBMKernelRegressor, dict(n_estimators=30)),
    (LinearKernelRegressor, {}),
])
def test_round_trip_predicts_identically(tmp_path, cls, kw):
    X, y = _data()
    reg = cls(**kw).fit(X, y)
    store.save_regressors(tmp_path / "p", {"conv-bn-relu": reg}, meta={"k": [1, 2]})
    loaded, meta = store.load_regressors(tmp_path / "p")
    assert meta == {"k": [1, 2]}
    np.testing.assert_array_equal(loaded["conv-bn-relu"].predict(X), reg.predict(X))
    assert loaded["conv-bn-relu"].get_params() == reg.get_params()


def test_saved_arrays_load_without_pickle(tmp_path):
    X, y = _data()
    store.save_regressors(tmp_path, {"a": RandomForestKernelRegressor(n_estimators=5).fit(X, y)})
    with np.load(tmp_path / "arrays.npz", allow_pickle=False) as npz:
        for key in npz.files:
            assert npz[key].dtype != object
    with zipfile.ZipFile(tmp_path / "arrays.npz") as zf:
        assert all(name.endswith(".npy") for name in zf.namelist())


def test_no_pickle_in_predictor_code():
    import ast

    root = pathlib.Path(store.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not {"pickle", "joblib", "cloudpickle", "dill"} & set(names), path
        assert "allow_pickle=True" not in path.read_text(), path


def test_unfitted_and_foreign_regressors_are_refused(tmp_path):
    with pytest.raises(PredictorError):
        store.save_regressors(tmp_path, {"a": RandomForestKernelRegressor()})

    class Foreign(LinearKernelRegressor):
        pass

    X, y = _data()
    with pytest.raises(PredictorError, match="registered"):
        store.save_regressors(tmp_path, {"a": Foreign().fit(X, y)})


def test_corrupt_or_missing_store_raises(tmp_path):
    with pytest.raises(PredictorError, match="cannot load"):
        store.load_regressors(tmp_path / "nothing")


def _saved_lgbm(tmp_path):
    X, y = _data()
    reg = LightGBMKernelRegressor(n_estimators=5).fit(X, y)
    store.save_regressors(tmp_path, {"type:conv": reg})
    return X, reg


def _rewrite_model_text(tmp_path, edit):
    """Write arrays.npz again with the LightGBM text changed by ``edit`` (the checksum in
    the manifest is left as it was, as a torn or hand-edited file would leave it)."""
    with np.load(tmp_path / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    key = "type:conv::model_text"
    text = bytes(arrays[key]).decode()
    arrays[key] = np.frombuffer(edit(text).encode(), dtype=np.uint8)
    np.savez(tmp_path / "arrays.npz", **arrays)


@pytest.mark.parametrize("edit", [
    lambda t: t.replace("num_leaves=", "num_leaves=abc", 1),  # aborted the C++ library
    lambda t: t[: len(t) // 2],  # loaded silently with half the trees
    lambda t: "garbage",
], ids=["bad-number", "truncated", "garbage"])
def test_corrupt_lightgbm_text_is_refused_before_lightgbm_sees_it(tmp_path, edit):
    _saved_lgbm(tmp_path)
    _rewrite_model_text(tmp_path, edit)
    with pytest.raises(PredictorError, match="checksum"):
        store.load_regressors(tmp_path)


@pytest.mark.parametrize("edit", [
    lambda m: m["regressors"]["type:conv"].pop("class"),
    lambda m: m["regressors"]["type:conv"].update(params={"nosuch": 1}),
    lambda m: m["regressors"]["type:conv"].update(arrays=["missing"]),
    lambda m: m["regressors"]["type:conv"].update(n_features_in="four"),
    lambda m: m.update(regressors=[1, 2]),
    lambda m: m.update(meta="text"),
], ids=["no-class", "bad-param", "missing-array", "bad-count", "list", "meta"])
def test_edited_manifest_is_a_predictor_error(tmp_path, edit):
    import json

    _saved_lgbm(tmp_path)
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(PredictorError, match="malformed|checksum"):
        store.load_regressors(tmp_path)


def test_feature_ranges_survive_the_store(tmp_path):
    X, reg = _saved_lgbm(tmp_path)
    back, _ = store.load_regressors(tmp_path)
    r = back["type:conv"]
    assert np.array_equal(r.feature_lo_, X.min(axis=0))
    assert np.array_equal(r.feature_hi_, X.max(axis=0))
    far = r.far_outside(np.array([X[0], X[0] * [1, 1, 1, 10], X[0] * [0.01, 1, 1, 1]]))
    assert not far[0].any() and far[1].tolist() == [False, False, False, True]
    assert far[2].tolist() == [True, False, False, False]


def test_write_atomic_leaves_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    store.write_atomic(path, b"old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(store.os, "replace", boom)
    with pytest.raises(OSError):
        store.write_atomic(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
