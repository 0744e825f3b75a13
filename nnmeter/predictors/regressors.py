"""Kernel latency regressors: one per kernel type, in the scikit-learn estimator style.

Every regressor follows the scikit-learn contract: ``__init__`` stores its keyword-only
parameters and nothing else, ``fit(X, y)`` returns ``self``, learned state ends in ``_``,
and ``predict`` raises :class:`~nnmeter.errors.PredictorError` when called before
``fit``. ``get_params``/``set_params`` work as in scikit-learn. Training is
deterministic (fixed ``random_state``, one thread).

Target transform
----------------
All regressors learn ``log(latency_ms)`` by default (``log_target=True``) and predict
``exp`` of the learned value. Kernel latencies span four orders of magnitude and the
accuracy we are judged on is *relative* (±10 %); a squared loss in log space weights a
10 % miss on a 0.01 ms kernel like a 10 % miss on a 10 ms one, which raises ±10 %
accuracy on small kernels. Tree splits are invariant to monotone feature transforms,
so features stay as the kernel type's single feature function gives them.

With ``norm_feature`` set to the column of the kernel's work (FLOPs, or bytes for
memory-bound kernels), the trees learn ``log(latency) − log(1 + work)``: log time per
unit of work. A forest cannot extrapolate its target beyond the values it saw; time per
FLOP stays in a narrow band beyond the sampled range, where raw latency does not, so
kernels larger than any measured one (VGG's first convolutions) are still predicted
sensibly. The predictor's trainer sets it from the feature names.

Default hyper-parameters per kernel type (random forest, ``RandomForestKernelRegressor``)
-----------------------------------------------------------------------------------------

====================  ============  =========  ============  ================
kernel type prefix     n_estimators  max_depth  max_features  min_samples_leaf
====================  ============  =========  ============  ================
conv*, convtranspose*  300           40         0.8           1
dwconv*                300           40         0.8           1
fc*, matmul*           200           30         1.0           1
*pool*, gap*           200           25         1.0           1
everything else        150           25         1.0           1
====================  ============  =========  ============  ================

Many trees and deep trees matter for conv/dwconv, whose latency has step points in
the channel counts; the other kernels are smooth in their few features.

Examples
--------
>>> import numpy as np
>>> X = np.array([[1.0], [2.0], [3.0], [4.0]]); y = np.array([1.0, 2.0, 3.0, 4.0])
>>> reg = RandomForestKernelRegressor(n_estimators=10).fit(X, y)
>>> reg.predict(X).shape
(4,)
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import numpy as np

from nnmeter.errors import PredictorError
from nnmeter.predictors.forest import ForestArrays
from nnmeter.registry import Registry

__all__ = [
    "KernelRegressor",
    "RandomForestKernelRegressor",
    "LightGBMKernelRegressor",
    "LinearKernelRegressor",
    "REGRESSORS",
    "default_params",
    "make_regressor",
]

logger = logging.getLogger(__name__)

#: name → regressor class; "rf" is the default.
REGRESSORS: Registry[type] = Registry("regressors", entry_point_group="nnmeter.regressors")

_RF_TABLE: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("dwconv",), dict(n_estimators=300, max_depth=40, max_features=0.8)),
    (("conv", "gconv", "convtranspose"), dict(n_estimators=300, max_depth=40, max_features=0.8)),
    (("fc", "matmul"), dict(n_estimators=200, max_depth=30, max_features=1.0)),
    (("maxpool", "avgpool", "pool", "gap"), dict(n_estimators=200, max_depth=25,
                                                  max_features=1.0)),
]
_RF_DEFAULT = dict(n_estimators=150, max_depth=25, max_features=1.0)


def default_params(kernel_type: str, regressor: str = "rf") -> dict[str, Any]:
    """Default hyper-parameters of ``regressor`` for ``kernel_type`` (see module table)."""
    if regressor != "rf":
        return {}
    for prefixes, params in _RF_TABLE:
        if any(kernel_type.startswith(p) for p in prefixes) or (
                "pool" in kernel_type and "pool" in prefixes):
            return dict(params)
    return dict(_RF_DEFAULT)


def make_regressor(kernel_type: str, regressor: str = "rf", **overrides: Any) -> "KernelRegressor":
    """A fresh regressor of kind ``regressor`` with the defaults for ``kernel_type``.

    Raises
    ------
    UnknownNameError
        If ``regressor`` is not a registered name (``rf``, ``lgbm``, ``linear``).
    """
    cls = REGRESSORS.get(regressor)
    params = default_params(kernel_type, regressor)
    params.update(overrides)
    return cls(**params)


def _check_Xy(X: Any, y: Any | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X holds NaN or infinite values; check the feature function")
    if y is None:
        return X, None
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} values")
    if X.shape[0] == 0:
        raise ValueError("cannot fit on 0 samples; measure some kernels first")
    if not np.all(np.isfinite(y)):
        raise ValueError("y holds NaN or infinite latencies")
    return X, y


class KernelRegressor:
    """Base class: parameter handling, target transform and the fitted check.

    Subclasses implement ``_fit(X, t)`` and ``_predict(X) -> t`` on the transformed
    target, plus ``_get_state``/``_set_state`` for safe serialisation
    (:mod:`nnmeter.predictors.store`).
    """

    log_target: bool = True
    norm_feature: int | None = None

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind == p.KEYWORD_ONLY]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> "KernelRegressor":
        valid = set(self._param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"{type(self).__name__} has no parameter {key!r}; "
                                 f"valid: {sorted(valid)}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_features_in_"):
            raise PredictorError(
                f"this {type(self).__name__} is not fitted yet; call fit(X, y) with "
                f"measured kernel features and latencies first"
            )

    def fit(self, X: Any, y: Any) -> "KernelRegressor":
        """Learn latency (ms, > 0) from feature rows ``X``; returns ``self``."""
        X, y = _check_Xy(X, y)
        if self.log_target and np.any(y <= 0):
            raise ValueError("log_target needs positive latencies; got a value <= 0 ms")
        t = np.log(y) if self.log_target else y
        t = t - self._offset(X)
        self._fit(X, t)
        self.n_features_in_ = X.shape[1]
        # the range each feature was trained on: a tree cannot extrapolate past it, so
        # the predictor warns about inputs far outside (far_outside)
        self.feature_lo_, self.feature_hi_ = X.min(axis=0), X.max(axis=0)
        return self

    def far_outside(self, X: Any) -> np.ndarray:
        """Per row and feature, True where ``X`` is far outside the training range:
        over twice the largest value seen (for a positive maximum, else one unit over)
        or under half the smallest (for a positive minimum, else one unit under); a 0/1
        indicator never is. All False for a regressor fitted before ranges were
        recorded."""
        X = np.asarray(X, dtype=np.float64)
        lo, hi = getattr(self, "feature_lo_", None), getattr(self, "feature_hi_", None)
        if lo is None or hi is None or X.ndim != 2 or X.shape[1] != lo.shape[0]:
            return np.zeros(X.shape if X.ndim == 2 else (0, 0), dtype=bool)
        top = np.where(hi > 0, 2.0 * hi, hi + 1.0)
        bottom = np.where(lo > 0, 0.5 * lo, lo - 1.0)
        # an indicator (trained within [0, 1], given 0 or 1) is a category, not a size
        flag = (lo >= 0) & (hi <= 1) & (X >= 0) & (X <= 1)
        return ((X > top) | (X < bottom)) & ~flag

    def _offset(self, X: np.ndarray) -> np.ndarray | float:
        """log1p of the normalising feature (work), subtracted from the log target."""
        norm = getattr(self, "norm_feature", None)
        if norm is None or not self.log_target:
            return 0.0
        if not 0 <= norm < X.shape[1]:
            raise ValueError(f"norm_feature={norm} but X has {X.shape[1]} features")
        return np.log1p(np.maximum(X[:, norm], 0.0))

    def predict(self, X: Any) -> np.ndarray:
        """Predicted latency in ms for each row of ``X``."""
        self._check_fitted()
        X, _ = _check_Xy(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features but {type(self).__name__} was "
                             f"fitted with {self.n_features_in_}")
        t = self._predict(X) + self._offset(X)
        return np.exp(t) if self.log_target else t

    # -- subclass hooks --------------------------------------------------------
    def _fit(self, X: np.ndarray, t: np.ndarray) -> None:  # pragma: no cover
        raise NotImplementedError

    def _predict(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:  # pragma: no cover
        raise NotImplementedError

    def _set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:  # pragma: no cover
        raise NotImplementedError


@REGRESSORS.register("rf")
class RandomForestKernelRegressor(KernelRegressor):
    """nn-Meter's random forest, trained with scikit-learn and kept as numpy arrays.

    After ``fit`` the forest lives in ``forest_`` (:class:`ForestArrays`); prediction
    is a vectorised numpy traversal, identical to scikit-learn's own prediction.

    Parameters
    ----------
    n_estimators, max_depth, max_features, min_samples_leaf
        As in :class:`sklearn.ensemble.RandomForestRegressor`.
    log_target : bool
        Learn log latency (see the module docstring).
    norm_feature : int, optional
        Column of the work feature (FLOPs or bytes) to learn ``log(latency /
        (1 + work))`` instead (see the module docstring).
    random_state : int
        Seed; training is deterministic for a seed.
    """

    def __init__(self, *, n_estimators: int = 200, max_depth: int | None = 30,
                 max_features: float | str | None = 1.0, min_samples_leaf: int = 1,
                 log_target: bool = True, norm_feature: int | None = None,
                 random_state: int = 0) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.log_target = log_target
        self.norm_feature = norm_feature
        self.random_state = random_state

    def _fit(self, X: np.ndarray, t: np.ndarray) -> None:
        from sklearn.ensemble import RandomForestRegressor

        rf = RandomForestRegressor(
            n_estimators=self.n_estimators, max_depth=self.max_depth,
            max_features=self.max_features, min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state, n_jobs=1,
        ).fit(X, t)
        self.forest_ = ForestArrays.from_sklearn(rf)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self.forest_.predict(X)

    def _get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {}, self.forest_.to_arrays()

    def _set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.forest_ = ForestArrays.from_arrays(arrays)


@REGRESSORS.register("lgbm")
class LightGBMKernelRegressor(KernelRegressor):
    """Gradient-boosted trees (LightGBM), kept as LightGBM's text model format.

    Parameters
    ----------
    n_estimators, num_leaves, learning_rate, min_child_samples
        As in LightGBM.
    log_target : bool
        Learn log latency.
    random_state : int
        Seed; LightGBM runs with ``deterministic=True`` and one thread.
    """

    def __init__(self, *, n_estimators: int = 400, num_leaves: int = 31,
                 learning_rate: float = 0.05, min_child_samples: int = 3,
                 log_target: bool = True, norm_feature: int | None = None,
                 random_state: int = 0) -> None:
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_child_samples = min_child_samples
        self.log_target = log_target
        self.norm_feature = norm_feature
        self.random_state = random_state

    def _fit(self, X: np.ndarray, t: np.ndarray) -> None:
        import lightgbm as lgb

        params = {
            "objective": "regression", "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_child_samples": min(self.min_child_samples, max(1, len(t) // 2)),
            "min_data_in_bin": 1, "seed": self.random_state, "deterministic": True,
            "force_row_wise": True, "num_threads": 1, "verbose": -1,
        }
        data = lgb.Dataset(X, t, params={"min_data_in_bin": 1, "verbose": -1})
        booster = lgb.train(params, data, num_boost_round=self.n_estimators)
        self._load_text(booster.model_to_string())

    def _load_text(self, text: str) -> None:
        """Keep the model text and its trees as arrays: prediction walks the arrays in
        numpy (the same sums as LightGBM's, without importing it, which takes a second
        and scikit-learn with it, on every CLI start); a model with splits the arrays do
        not read is predicted by LightGBM itself."""
        self.model_text_ = text
        try:
            self.trees_: ForestArrays | None = ForestArrays.from_lightgbm_text(text)
        except ValueError:
            self.trees_ = None

    def _predict(self, X: np.ndarray) -> np.ndarray:
        if self.trees_ is not None:
            return self.trees_.predict(X) * self.trees_.n_trees
        return np.asarray(self.booster().predict(X, num_threads=1), dtype=np.float64)

    def booster(self) -> Any:
        """The LightGBM Booster of the model text (loaded on first use)."""
        if getattr(self, "booster_", None) is None:
            import lightgbm as lgb

            self.booster_ = lgb.Booster(model_str=self.model_text_)
        return self.booster_

    def _get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {}, {"model_text": np.frombuffer(self.model_text_.encode(), dtype=np.uint8)}

    def _set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._load_text(bytes(np.asarray(arrays["model_text"], dtype=np.uint8)).decode())


@REGRESSORS.register("linear")
class LinearKernelRegressor(KernelRegressor):
    """Least-squares linear regression, optionally on log features (``log1p``).

    Used for the FLOPs and FLOPs+MAC baselines (``log_features=False``,
    ``log_target=False``: latency = a·FLOPs + b·bytes + c) and for the fallback that
    estimates kernels without a regressor (log-log, always positive).

    Parameters
    ----------
    log_features : bool
        Regress on ``log1p(X)`` instead of ``X``.
    log_target : bool
        Learn log latency.
    ridge : float
        L2 penalty on the coefficients (not the intercept), for stability.
    """

    def __init__(self, *, log_features: bool = True, log_target: bool = True,
                 ridge: float = 1e-6) -> None:
        self.log_features = log_features
        self.log_target = log_target
        self.ridge = ridge

    def _design(self, X: np.ndarray) -> np.ndarray:
        Z = np.log1p(np.maximum(X, 0.0)) if self.log_features else X
        return Z

    def _fit(self, X: np.ndarray, t: np.ndarray) -> None:
        Z = self._design(X)
        self.scale_ = np.where(Z.std(axis=0) > 0, Z.std(axis=0), 1.0)
        Zs = Z / self.scale_
        mean = Zs.mean(axis=0)
        Zc = Zs - mean
        A = Zc.T @ Zc + self.ridge * len(t) * np.eye(Z.shape[1])
        coef = np.linalg.solve(A, Zc.T @ (t - t.mean())) if Z.shape[1] else np.zeros(0)
        self.coef_ = coef / self.scale_
        self.intercept_ = float(t.mean() - mean @ coef)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self._design(X) @ self.coef_ + self.intercept_

    def _get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"intercept": self.intercept_}, {"coef": self.coef_, "scale": self.scale_}

    def _set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.intercept_ = float(meta["intercept"])
        self.coef_ = np.asarray(arrays["coef"], dtype=np.float64)
        self.scale_ = np.asarray(arrays["scale"], dtype=np.float64)
