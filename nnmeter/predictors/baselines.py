"""Model-level baselines of the nn-Meter paper: FLOPs and FLOPs+MAC linear regressions.

Both map whole-model cost figures to latency with a least-squares line
(``latency = a·FLOPs + c`` and ``latency = a·FLOPs + b·bytes + c``, bytes being the
memory access cost from :mod:`nnmeter.ir.cost`). They are trained on measured models
(the kernel predictor is not), so compare them by cross-validation
(:func:`cross_val_predict`).

Examples
--------
>>> import numpy as np
>>> F = np.array([[1e9, 1e7], [2e9, 2e7], [3e9, 2e7], [4e9, 5e7]])
>>> y = np.array([10.0, 20.0, 30.0, 40.0])
>>> b = FlopsBaseline().fit(F, y)
>>> [round(float(v), 3) for v in b.predict(F)]
[10.0, 20.0, 30.0, 40.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnmeter.predictors.regressors import LinearKernelRegressor

__all__ = ["graph_cost_features", "graph_op_features", "FlopsBaseline", "FlopsMacBaseline",
           "GraphMLPBaseline", "cross_val_predict", "OP_GROUPS"]

#: op groups whose count, FLOPs and bytes make the graph-level features of the MLP
OP_GROUPS = (("conv",), ("dwconv",), ("fc", "matmul"), ("bn",),
             ("relu", "relu6", "clip", "hswish", "hsigmoid", "sigmoid", "swish", "gelu"),
             ("add", "mul", "sub", "div"), ("maxpool", "avgpool", "gap"),
             ("concat", "split", "channelshuffle", "reshape", "flatten", "transpose"))


def graph_cost_features(graph: Any) -> np.ndarray:
    """[FLOPs, memory bytes] of a shape-inferred ModelGraph."""
    c = graph.cost()
    return np.array([float(c.flops), float(c.memory_bytes)])


def graph_op_features(graph: Any) -> np.ndarray:
    """Graph-level aggregated node features: per op group (count, log FLOPs, log bytes),
    plus log total FLOPs and bytes. The input of :class:`GraphMLPBaseline`."""
    from nnmeter.ir.cost import node_cost

    group_of = {op: i for i, ops in enumerate(OP_GROUPS) for op in ops}
    agg = np.zeros((len(OP_GROUPS) + 1, 3))
    for node in graph.topological_nodes():
        if node.op == "input":
            continue
        c = node_cost(node, graph.dtype)
        i = group_of.get(node.op, len(OP_GROUPS))
        agg[i] += (1.0, c.flops, c.memory_bytes)
    agg[:, 1:] = np.log1p(agg[:, 1:])
    total = graph_cost_features(graph)
    return np.concatenate([agg.ravel(), np.log1p(total)])


class GraphMLPBaseline:
    """A small MLP (scikit-learn) on aggregated node features, learning log latency:
    a cheap stand-in for BRP-NAS's GCN over the whole graph (graph-level pooling of
    node features, no message passing)."""

    def __init__(self, *, hidden: tuple[int, ...] = (64, 32), random_state: int = 0) -> None:
        self.hidden = hidden
        self.random_state = random_state

    def fit(self, F: np.ndarray, y: np.ndarray) -> "GraphMLPBaseline":
        from sklearn.neural_network import MLPRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.model_ = make_pipeline(StandardScaler(), MLPRegressor(
            hidden_layer_sizes=self.hidden, max_iter=3000, random_state=self.random_state,
            alpha=1e-3)).fit(np.asarray(F), np.log(np.asarray(y)))
        return self

    def predict(self, F: np.ndarray) -> np.ndarray:
        return np.exp(self.model_.predict(np.asarray(F)))


class FlopsBaseline:
    """Latency ∝ FLOPs (+ intercept). ``fit(F, y)`` takes rows of [FLOPs, bytes]."""

    columns = (0,)

    def __init__(self) -> None:
        self.reg_ = None

    def fit(self, F: np.ndarray, y: np.ndarray) -> "FlopsBaseline":
        F = np.asarray(F, dtype=np.float64)
        self.reg_ = LinearKernelRegressor(log_features=False, log_target=False, ridge=0.0).fit(
            F[:, list(self.columns)], y)
        return self

    def predict(self, F: np.ndarray) -> np.ndarray:
        F = np.asarray(F, dtype=np.float64)
        # a line can go below 0 for tiny models; latency cannot
        return np.maximum(self.reg_.predict(F[:, list(self.columns)]), 1e-6)


class FlopsMacBaseline(FlopsBaseline):
    """Latency = a·FLOPs + b·memory bytes + c."""

    columns = (0, 1)


def cross_val_predict(make: Any, F: np.ndarray, y: np.ndarray, *, folds: int = 5,
                      seed: int = 0) -> np.ndarray:
    """Out-of-fold predictions of a baseline (``make()`` returns a fresh one)."""
    F = np.asarray(F, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    fold = np.random.default_rng(seed).permutation(len(y)) % folds
    out = np.empty(len(y))
    for k in range(folds):
        test = fold == k
        out[test] = make().fit(F[~test], y[~test]).predict(F[test])
    return out
