"""The estimator contract, checked once over every registered regressor."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from nnmeter.errors import PredictorError
from nnmeter.predictors.regressors import REGRESSORS, default_params, make_regressor


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.integers(1, 64, size=(n, 3)).astype(float)
    y = 0.01 * X[:, 0] * X[:, 1] + 0.05 * X[:, 2] + 0.1
    return X, y


def _small(name):
    cls = REGRESSORS.get(name)
    small = {"rf": dict(n_estimators=20), "lgbm": dict(n_estimators=50)}.get(name, {})
    return cls(**small)


@pytest.mark.parametrize("name", REGRESSORS.names())
def test_init_stores_keyword_only_params(name):
    cls = REGRESSORS.get(name)
    sig = inspect.signature(cls.__init__)
    params = [p for p in sig.parameters.values() if p.name != "self"]
    assert params and all(p.kind == p.KEYWORD_ONLY for p in params)
    reg = cls()
    assert set(reg.get_params()) == {p.name for p in params}
    assert not [k for k in vars(reg) if k.endswith("_")]  # nothing learned yet


@pytest.mark.parametrize("name", REGRESSORS.names())
def test_predict_before_fit_raises(name):
    with pytest.raises(PredictorError, match="not fitted"):
        _small(name).predict(np.ones((1, 3)))


@pytest.mark.parametrize("name", REGRESSORS.names())
def test_fit_returns_self_and_learns(name):
    X, y = _data()
    reg = _small(name)
    assert reg.fit(X, y) is reg
    assert reg.n_features_in_ == 3
    pred = reg.predict(X)
    assert pred.shape == (len(y),) and np.all(pred > 0)
    # learns something: much better than predicting the mean
    assert np.mean(np.abs(pred - y)) < 0.5 * np.mean(np.abs(y - y.mean()))


@pytest.mark.parametrize("name", REGRESSORS.names())
def test_deterministic(name):
    X, y = _data()
    a = _small(name).fit(X, y).predict(X[:10])
    b = _small(name).fit(X, y).predict(X[:10])
    assert np.array_equal(a, b)


@pytest.mark.parametrize("name", REGRESSORS.names())
def test_clone_and_set_params(name):
    from sklearn.base import clone

    reg = _small(name)
    twin = clone(reg)
    assert twin.get_params() == reg.get_params() and twin is not reg
    with pytest.raises(ValueError, match="no parameter"):
        reg.set_params(not_a_param=1)


@pytest.mark.parametrize("name", REGRESSORS.names())
def test_rejects_wrong_feature_count(name):
    X, y = _data()
    reg = _small(name).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        reg.predict(np.ones((2, 5)))


def test_default_params_table():
    assert default_params("conv-bn-relu")["n_estimators"] >= default_params("relu")["n_estimators"]
    assert default_params("maxpool")["max_depth"] == 25
    reg = make_regressor("dwconv-bn-relu", n_estimators=7)
    assert reg.n_estimators == 7 and reg.max_depth == 40


def test_lightgbm_trees_as_arrays_match_lightgbm_itself():
    import lightgbm as lgb

    from nnmeter.predictors.regressors import LightGBMKernelRegressor

    rng = np.random.default_rng(3)
    X = rng.uniform(1, 300, (300, 5))
    X[:, 2] = rng.integers(0, 2, 300)  # a flag column, as kernel features have
    y = X[:, 0] * X[:, 1] / 1e3 + 0.01
    reg = LightGBMKernelRegressor(n_estimators=200).fit(X, y)
    assert reg.trees_ is not None and reg.trees_.n_trees == 200
    Xt = rng.uniform(0, 400, (400, 5))
    Xt[:, 2] = rng.integers(0, 2, 400)
    raw = lgb.Booster(model_str=reg.model_text_).predict(Xt)
    expect = np.exp(raw + reg._offset(Xt))
    assert np.allclose(reg.predict(Xt), expect, rtol=1e-12)


def test_lightgbm_text_the_arrays_cannot_read_falls_back_to_lightgbm():
    from nnmeter.predictors.forest import ForestArrays

    with pytest.raises(ValueError):
        ForestArrays.from_lightgbm_text("tree\nobjective=binary\n\nTree=0\n")
    with pytest.raises(ValueError, match="categorical"):
        ForestArrays.from_lightgbm_text(
            "tree\nobjective=regression\n\nTree=0\nnum_leaves=2\nnum_cat=1\n"
            "split_feature=0\nthreshold=1\ndecision_type=1\nleft_child=-1\n"
            "right_child=-2\nleaf_value=1 2\n")
