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
