"""A graph-convolutional baseline for model-level latency (BRP-NAS style), numpy only.

The nn-Meter paper compares its kernel-level predictor with BRP-NAS, a graph
convolutional network (GCN) that reads the whole model graph and predicts its latency.
:class:`GCNBaseline` is that baseline, written with a hand-made forward and backward
pass and an Adam optimiser so that it needs nothing beyond numpy and scipy.sparse.

Model
-----
Every node of a shape-inferred :class:`~nnmeter.ir.graph.ModelGraph` becomes a feature
row (:func:`node_feature_matrix`): a one-hot of its op type over the op vocabulary
(:data:`nnmeter.ir.ops.OPS`), then ``log1p`` of its FLOPs, parameters, memory traffic
(bytes), output height, output channels, kernel size and stride. The numeric columns
are standardised with the mean and spread learned in ``fit``. The adjacency is the
GCN one, ``D^-1/2 (A + Aᵀ + I) D^-1/2`` (:func:`normalized_adjacency`). Each GCN layer
computes ``H' = relu(Â H W + b)``; a readout (mean, or sum, over the nodes) gives one
vector per graph, which a one-hidden-layer MLP head maps to the standardised
``log(latency_ms)``. The loss is the mean squared error in that space, so predictions
are ``exp`` of the head's output. Minibatches of graphs are stacked as one
block-diagonal sparse adjacency.

Training is deterministic for a fixed ``random_state`` (initialisation and batch
order come from one ``numpy.random.Generator``). Models are saved as JSON (parameters,
feature statistics, vocabulary) plus ``.npz`` weights loaded with
``allow_pickle=False``: loading never executes code.

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> graphs = []
>>> for c in (8, 16, 32, 64):
...     b = GraphBuilder("m", (1, 3, 16, 16))
...     graphs.append(b.build([b.relu(b.conv(b.x, c))]))
>>> lat = [0.1, 0.2, 0.4, 0.8]
>>> gcn = GCNBaseline(hidden=(16, 16), head_hidden=8, epochs=20).fit(graphs, lat)
>>> gcn.predict(graphs).shape
(4,)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import PredictorError

__all__ = [
    "GCNBaseline",
    "NUMERIC_FEATURES",
    "op_vocabulary",
    "node_feature_matrix",
    "normalized_adjacency",
    "cross_val_predict_graphs",
]

logger = logging.getLogger(__name__)

#: the numeric node features, each ``log1p`` of the value, after the op one-hot
NUMERIC_FEATURES = ("flops", "params", "memory_bytes", "out_h", "out_channels",
                    "kernel", "stride")

#: format tag of a saved model; bump when the saved layout changes
_FORMAT = "nnmeter-gcn-baseline"
_FORMAT_VERSION = 1
_PARAMS_FILE = "gcn.json"
_WEIGHTS_FILE = "gcn_weights.npz"


def op_vocabulary() -> tuple[str, ...]:
    """The op types of the one-hot, sorted: :data:`nnmeter.ir.ops.OPS`."""
    from nnmeter.ir.ops import OPS

    return tuple(sorted(OPS))


def _first(value: Any) -> int:
    """First entry of a (kernel/stride) pair, or the int itself; 0 when absent."""
    if value is None:
        return 0
    if isinstance(value, (tuple, list)):
        return int(value[0]) if value else 0
    return int(value)


def _numeric(node: Any, dtype: str) -> list[float]:
    from nnmeter.ir.cost import node_cost

    if not node.output_shapes:
        raise PredictorError(
            f"node {node.name!r} ({node.op}) has no output shape; the GCN baseline needs "
            f"shape-inferred graphs: call graph.infer_shapes() first"
        )
    c = node_cost(node, dtype)
    shape = node.output_shapes[0]
    if len(shape) == 4:
        out_c, out_h = shape[1], shape[2]
    elif len(shape) >= 2:
        out_c, out_h = shape[-1], math.prod(shape[1:-1])
    else:
        out_c, out_h = (shape[0] if shape else 1), 1
    kernel = _first(getattr(node.attrs, "kernel", None))
    stride = _first(getattr(node.attrs, "stride", None))
    return [c.flops, c.params, c.memory_bytes, out_h, out_c, kernel, stride]


def node_feature_matrix(graph: Any, vocabulary: Sequence[str] | None = None
                        ) -> tuple[np.ndarray, list[str]]:
    """Raw node features of a shape-inferred graph, in topological order.

    Parameters
    ----------
    graph : ModelGraph
        Shape-inferred.
    vocabulary : sequence of str, optional
        Op types of the one-hot (default :func:`op_vocabulary`). An op outside it is
        counted as ``"unknown"`` when the vocabulary has it, else gets an all-zero one-hot.

    Returns
    -------
    X : ndarray of shape (n_nodes, len(vocabulary) + len(NUMERIC_FEATURES))
        One-hot op type, then ``log1p`` of :data:`NUMERIC_FEATURES` (not standardised).
    names : list of str
        Node names, the row order of ``X``.

    Raises
    ------
    PredictorError
        If a node has no inferred shape.

    Examples
    --------
    >>> from nnmeter.ir import GraphBuilder
    >>> b = GraphBuilder("m", (1, 3, 8, 8))
    >>> X, names = node_feature_matrix(b.build([b.relu(b.conv(b.x, 4))]))
    >>> X.shape, names
    ((3, 45), ['input', 'conv_1', 'relu_1'])
    """
    vocab = tuple(vocabulary) if vocabulary is not None else op_vocabulary()
    col = {op: i for i, op in enumerate(vocab)}
    nodes = graph.topological_nodes()
    X = np.zeros((len(nodes), len(vocab) + len(NUMERIC_FEATURES)), dtype=np.float64)
    for i, node in enumerate(nodes):
        j = col.get(node.op, col.get("unknown"))
        if j is not None:
            X[i, j] = 1.0
        X[i, len(vocab):] = np.log1p(np.maximum(np.asarray(_numeric(node, graph.dtype),
                                                           dtype=np.float64), 0.0))
    return X, [n.name for n in nodes]


def normalized_adjacency(graph: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GCN adjacency ``D^-1/2 (A + Aᵀ + I) D^-1/2`` of a graph, in COO form.

    Node indices follow ``graph.topological_nodes()`` (the row order of
    :func:`node_feature_matrix`). Parallel edges (a node read twice) count once.

    Returns
    -------
    rows, cols : ndarray of int64
    values : ndarray of float64
        The symmetric normalised matrix's non-zero entries.

    Examples
    --------
    >>> from nnmeter.ir import GraphBuilder
    >>> b = GraphBuilder("m", (1, 3, 8, 8))
    >>> r, c, v = normalized_adjacency(b.build([b.relu(b.x)]))
    >>> len(v), round(float(v.sum()), 3)
    (4, 2.0)
    """
    nodes = graph.topological_nodes()
    index = {n.name: i for i, n in enumerate(nodes)}
    pairs = {(i, i) for i in range(len(nodes))}
    for node in nodes:
        j = index[node.name]
        for ref in node.inputs:
            i = index[ref.node]
            pairs.add((i, j))
            pairs.add((j, i))
    rc = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    rows, cols = rc[:, 0], rc[:, 1]
    degree = np.bincount(rows, minlength=len(nodes)).astype(np.float64)
    inv_sqrt = 1.0 / np.sqrt(degree)
    return rows, cols, inv_sqrt[rows] * inv_sqrt[cols]


# ---------------------------------------------------------------------------- network
def _one_blas_thread() -> contextlib.AbstractContextManager:
    """Run BLAS on one thread: these matrices are small, and on a shared machine a
    second BLAS thread mostly waits (measured here: 4x slower per step under load)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # threadpoolctl comes with scikit-learn; without it, go on as is
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


class _Batch:
    """Graphs stacked as one block-diagonal adjacency and one pooling matrix."""

    def __init__(self, feats: Sequence[np.ndarray], adjs: Sequence[tuple], readout: str,
                 dtype: Any) -> None:
        import scipy.sparse as sp

        sizes = [len(f) for f in feats]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        n = int(offsets[-1])
        rows = np.concatenate([a[0] + o for a, o in zip(adjs, offsets)])
        cols = np.concatenate([a[1] + o for a, o in zip(adjs, offsets)])
        vals = np.concatenate([a[2] for a in adjs]).astype(dtype)
        self.A = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
        self.X = np.concatenate(feats).astype(dtype)
        graph_of = np.repeat(np.arange(len(sizes)), sizes)
        weight = (1.0 / np.repeat(sizes, sizes) if readout == "mean"
                  else np.ones(n)).astype(dtype)
        self.P = sp.csr_matrix((weight, (graph_of, np.arange(n))), shape=(len(sizes), n))


def _forward(weights: dict[str, np.ndarray], batch: _Batch, n_layers: int
             ) -> tuple[np.ndarray, dict[str, Any]]:
    """Standardised log-latency per graph, and the cache the backward pass needs."""
    cache: dict[str, Any] = {"AH": [], "Z": []}
    H = batch.X
    for layer in range(n_layers):
        AH = batch.A @ H
        Z = AH @ weights[f"W{layer}"] + weights[f"b{layer}"]
        cache["AH"].append(AH)
        cache["Z"].append(Z)
        H = np.maximum(Z, 0.0)
    g = batch.P @ H
    U = g @ weights["W_head"] + weights["b_head"]
    V = np.maximum(U, 0.0)
    out = (V @ weights["W_out"] + weights["b_out"])[:, 0]
    cache.update(g=g, U=U, V=V)
    return out, cache


def _backward(weights: dict[str, np.ndarray], batch: _Batch, n_layers: int,
              cache: dict[str, Any], d_out: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of a loss with ``dloss/dout = d_out`` with respect to every weight."""
    grads: dict[str, np.ndarray] = {}
    d = d_out[:, None]
    grads["W_out"] = cache["V"].T @ d
    grads["b_out"] = d.sum(axis=0)
    dU = (d @ weights["W_out"].T) * (cache["U"] > 0)
    grads["W_head"] = cache["g"].T @ dU
    grads["b_head"] = dU.sum(axis=0)
    dH = batch.P.T @ (dU @ weights["W_head"].T)
    for layer in reversed(range(n_layers)):
        dZ = dH * (cache["Z"][layer] > 0)
        grads[f"W{layer}"] = cache["AH"][layer].T @ dZ
        grads[f"b{layer}"] = dZ.sum(axis=0)
        if layer:
            # Â is symmetric, so Âᵀ·x = Â·x
            dH = batch.A @ (dZ @ weights[f"W{layer}"].T)
    return grads


def _init_weights(sizes: Sequence[int], head_hidden: int, rng: np.random.Generator
                  ) -> dict[str, np.ndarray]:
    """Glorot-uniform weights, zero biases."""
    def glorot(fan_in: int, fan_out: int) -> np.ndarray:
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-bound, bound, size=(fan_in, fan_out))

    w: dict[str, np.ndarray] = {}
    for layer, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w[f"W{layer}"] = glorot(a, b)
        w[f"b{layer}"] = np.zeros(b)
    w["W_head"] = glorot(sizes[-1], head_hidden)
    w["b_head"] = np.zeros(head_hidden)
    w["W_out"] = glorot(head_hidden, 1)
    w["b_out"] = np.zeros(1)
    return w


# -------------------------------------------------------------------------- estimator
class GCNBaseline:
    """BRP-NAS-style GCN predicting a model's latency from its whole graph.

    Parameters
    ----------
    hidden : tuple of int
        Width of each GCN layer; its length is the number of layers (BRP-NAS uses 4).
    head_hidden : int
        Width of the MLP head's hidden layer after the readout.
    readout : {"mean", "sum"}
        How node embeddings become one graph embedding.
    epochs : int
        Passes over the training graphs.
    batch_size : int
        Graphs per minibatch.
    learning_rate : float
        Adam step size at the start; it decays to 5 % of it along a cosine.
    weight_decay : float
        Decoupled (AdamW) weight decay on the weight matrices, per step, times the rate.
    random_state : int
        Seed of initialisation and batch order; equal seeds give equal models.
    progress : bool
        A bar over the epochs, with its ETA, on stderr.

    Attributes
    ----------
    weights_ : dict of str to ndarray
        Learned layers (``W0``, ``b0``, ..., ``W_head``, ``b_head``, ``W_out``, ``b_out``).
    feature_mean_, feature_scale_ : ndarray
        Standardisation of the numeric node features.
    target_mean_, target_scale_ : float
        Standardisation of ``log(latency_ms)``.
    vocabulary_ : tuple of str
        The op types of the one-hot when fitted.
    loss_curve_ : list of float
        Training MSE (standardised log space) per epoch.

    Examples
    --------
    See the module docstring.
    """

    def __init__(self, *, hidden: tuple[int, ...] = (64, 64, 64, 64), head_hidden: int = 64,
                 readout: str = "mean", epochs: int = 150, batch_size: int = 16,
                 learning_rate: float = 3e-3, weight_decay: float = 1e-4,
                 random_state: int = 0, progress: bool = False) -> None:
        #: a bar over the epochs on stderr (not a model parameter: not saved)
        self.progress = progress
        self.hidden = hidden
        self.head_hidden = head_hidden
        self.readout = readout
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.random_state = random_state

    # -- scikit-learn style parameters ---------------------------------------
    _PARAMS = ("hidden", "head_hidden", "readout", "epochs", "batch_size", "learning_rate",
               "weight_decay", "random_state")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters, by name."""
        return {name: getattr(self, name) for name in self._PARAMS}

    def set_params(self, **params: Any) -> "GCNBaseline":
        """Set constructor parameters; unknown names raise ``ValueError``."""
        for key, value in params.items():
            if key not in self._PARAMS:
                raise ValueError(f"GCNBaseline has no parameter {key!r}; valid: "
                                 f"{list(self._PARAMS)}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"GCNBaseline({args})"

    # -- helpers ---------------------------------------------------------------
    def _check_params(self) -> None:
        if self.readout not in ("mean", "sum"):
            raise ValueError(f"readout={self.readout!r}; allowed: 'mean', 'sum'")
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise ValueError(f"hidden={self.hidden!r}; give one or more positive widths, "
                             f"e.g. (64, 64, 64, 64)")
        if int(self.epochs) < 1 or int(self.batch_size) < 1 or int(self.head_hidden) < 1:
            raise ValueError(f"epochs={self.epochs}, batch_size={self.batch_size} and "
                             f"head_hidden={self.head_hidden} must all be >= 1")

    def _check_fitted(self) -> None:
        if not hasattr(self, "weights_"):
            raise PredictorError(
                "this GCNBaseline is not fitted yet; call fit(graphs, latency_ms) with "
                "measured models first, or GCNBaseline.load(directory)"
            )

    def _encode(self, graph: Any) -> tuple[np.ndarray, tuple]:
        X, _ = node_feature_matrix(graph, self.vocabulary_)
        k = len(self.vocabulary_)
        X[:, k:] = (X[:, k:] - self.feature_mean_) / self.feature_scale_
        return X, normalized_adjacency(graph)

    # -- estimator API -----------------------------------------------------------
    def fit(self, graphs: Sequence[Any], latency_ms: Sequence[float]) -> "GCNBaseline":
        """Learn ``log(latency_ms)`` of shape-inferred ModelGraphs; returns ``self``.

        Raises
        ------
        ValueError
            If the lengths differ, a latency is not a positive finite number, or a
            parameter is out of range.
        PredictorError
            If a graph is not shape-inferred.
        """
        self._check_params()
        with _one_blas_thread():
            return self._fit(list(graphs), latency_ms)

    def _fit(self, graphs: list[Any], latency_ms: Sequence[float]) -> "GCNBaseline":
        y = np.asarray(latency_ms, dtype=np.float64).ravel()
        if len(graphs) != len(y) or not len(y):
            raise ValueError(f"got {len(graphs)} graphs and {len(y)} latencies; pass one "
                             f"positive latency (ms) per graph, at least one")
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise ValueError("latency_ms must be positive finite milliseconds; got "
                             f"min {np.min(y)!r}")
        self.vocabulary_ = op_vocabulary()
        k = len(self.vocabulary_)
        raw = [node_feature_matrix(g, self.vocabulary_)[0] for g in graphs]
        stacked = np.concatenate(raw)[:, k:]
        self.feature_mean_ = stacked.mean(axis=0)
        scale = stacked.std(axis=0)
        self.feature_scale_ = np.where(scale > 1e-12, scale, 1.0)
        feats = []
        for X in raw:
            X = X.copy()
            X[:, k:] = (X[:, k:] - self.feature_mean_) / self.feature_scale_
            feats.append(X)
        adjs = [normalized_adjacency(g) for g in graphs]
        t = np.log(y)
        self.target_mean_ = float(t.mean())
        self.target_scale_ = float(t.std()) if t.std() > 1e-12 else 1.0
        target = (t - self.target_mean_) / self.target_scale_

        rng = np.random.default_rng(self.random_state)
        sizes = [feats[0].shape[1], *(int(h) for h in self.hidden)]
        w = _init_weights(sizes, int(self.head_hidden), rng)
        w = {key: v.astype(np.float32) for key, v in w.items()}
        m = {key: np.zeros_like(v) for key, v in w.items()}
        v2 = {key: np.zeros_like(v) for key, v in w.items()}
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        n_layers = len(self.hidden)
        bs = int(self.batch_size)
        step = 0
        total_steps = int(self.epochs) * math.ceil(len(graphs) / bs)
        self.loss_curve_: list[float] = []
        from tqdm import tqdm

        for _epoch in tqdm(range(int(self.epochs)), desc=f"GCN on {len(graphs)} graphs",
                           unit="epoch", disable=not self.progress):
            order = rng.permutation(len(graphs))
            epoch_loss = 0.0
            for start in range(0, len(order), bs):
                idx = order[start:start + bs]
                batch = _Batch([feats[i] for i in idx], [adjs[i] for i in idx],
                               self.readout, np.float32)
                out, cache = _forward(w, batch, n_layers)
                err = out - target[idx].astype(np.float32)
                epoch_loss += float(np.sum(err.astype(np.float64) ** 2))
                grads = _backward(w, batch, n_layers, cache, 2.0 * err / len(idx))
                step += 1
                lr = self.learning_rate * (0.05 + 0.95 * 0.5 * (
                    1.0 + math.cos(math.pi * (step - 1) / max(total_steps, 1))))
                for key in w:
                    g = grads[key]
                    m[key] = beta1 * m[key] + (1 - beta1) * g
                    v2[key] = beta2 * v2[key] + (1 - beta2) * g * g
                    m_hat = m[key] / (1 - beta1 ** step)
                    v_hat = v2[key] / (1 - beta2 ** step)
                    if key.startswith("W"):
                        w[key] = w[key] * np.float32(1 - lr * self.weight_decay)
                    w[key] = (w[key] - lr * m_hat / (np.sqrt(v_hat) + eps)).astype(np.float32)
            self.loss_curve_.append(epoch_loss / len(graphs))
        self.weights_ = w
        self.n_graphs_fitted_ = len(graphs)
        logger.debug("GCN baseline fitted on %d graphs, final loss %.4f", len(graphs),
                     self.loss_curve_[-1])
        return self

    def predict(self, graphs: Sequence[Any]) -> np.ndarray:
        """Predicted latency (ms, > 0) of each shape-inferred ModelGraph.

        Raises
        ------
        PredictorError
            If the estimator is not fitted, or a graph is not shape-inferred.
        """
        self._check_fitted()
        graphs = list(graphs)
        if not graphs:
            return np.zeros(0)
        out = []
        n_layers = len(self.weights_) // 2 - 2
        bs = max(int(self.batch_size), 1)
        with _one_blas_thread():
            for start in range(0, len(graphs), bs):
                enc = [self._encode(g) for g in graphs[start:start + bs]]
                batch = _Batch([e[0] for e in enc], [e[1] for e in enc], self.readout,
                               np.float32)
                out.append(_forward(self.weights_, batch, n_layers)[0].astype(np.float64))
        t = np.concatenate(out) * self.target_scale_ + self.target_mean_
        return np.exp(t)

    # -- persistence (no pickle) ------------------------------------------------
    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``gcn.json`` (parameters, statistics) and ``gcn_weights.npz`` to a folder.

        Returns the folder. Raises :class:`PredictorError` if not fitted.
        """
        self._check_fitted()
        where = Path(directory)
        where.mkdir(parents=True, exist_ok=True)
        params = self.get_params()
        params["hidden"] = [int(h) for h in params["hidden"]]
        doc = {
            "format": _FORMAT, "format_version": _FORMAT_VERSION, "params": params,
            "vocabulary": list(self.vocabulary_), "numeric_features": list(NUMERIC_FEATURES),
            "target_mean": self.target_mean_, "target_scale": self.target_scale_,
            "n_graphs_fitted": self.n_graphs_fitted_,
        }
        arrays = {f"w_{k}": v for k, v in self.weights_.items()}
        arrays["feature_mean"] = self.feature_mean_
        arrays["feature_scale"] = self.feature_scale_
        np.savez(where / _WEIGHTS_FILE, **arrays)
        (where / _PARAMS_FILE).write_text(json.dumps(doc, indent=1))
        return where

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "GCNBaseline":
        """Read a model written by :meth:`save` (JSON + ``.npz``, never a pickle).

        Raises
        ------
        PredictorError
            If the files are missing, of another format or version, or inconsistent.
        """
        where = Path(directory)
        try:
            doc = json.loads((where / _PARAMS_FILE).read_text())
            with np.load(where / _WEIGHTS_FILE, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as err:
            raise PredictorError(
                f"cannot read a GCN baseline from {where}: {err}; expected {_PARAMS_FILE} "
                f"and {_WEIGHTS_FILE} written by GCNBaseline.save"
            ) from err
        if doc.get("format") != _FORMAT or doc.get("format_version") != _FORMAT_VERSION:
            raise PredictorError(
                f"{where / _PARAMS_FILE} is format {doc.get('format')!r} version "
                f"{doc.get('format_version')!r}; this nnmeter reads {_FORMAT!r} version "
                f"{_FORMAT_VERSION}; retrain and save the baseline again"
            )
        params = dict(doc["params"])
        params["hidden"] = tuple(params["hidden"])
        model = cls(**params)
        model.vocabulary_ = tuple(doc["vocabulary"])
        model.target_mean_ = float(doc["target_mean"])
        model.target_scale_ = float(doc["target_scale"])
        model.n_graphs_fitted_ = int(doc.get("n_graphs_fitted", 0))
        model.feature_mean_ = arrays["feature_mean"]
        model.feature_scale_ = arrays["feature_scale"]
        model.weights_ = {k[2:]: v for k, v in arrays.items() if k.startswith("w_")}
        expected = {f"{p}{i}" for i in range(len(params["hidden"])) for p in "Wb"}
        expected |= {"W_head", "b_head", "W_out", "b_out"}
        if set(model.weights_) != expected:
            raise PredictorError(
                f"{where / _WEIGHTS_FILE} holds weights {sorted(model.weights_)}; a GCN "
                f"with hidden={params['hidden']} needs {sorted(expected)}"
            )
        return model


def cross_val_predict_graphs(make: Callable[[], Any], graphs: Sequence[Any],
                             latency_ms: Sequence[float], *, folds: int = 5,
                             seed: int = 0, progress: bool = False) -> np.ndarray:
    """Out-of-fold predictions of a graph-input baseline (``make()`` returns a fresh one).

    Uses the same fold assignment as
    :func:`nnmeter.predictors.baselines.cross_val_predict` for equal ``seed``,
    ``folds`` and length, so the columns of a comparison table share their folds.
    ``progress``: a bar over the folds, with its ETA, on stderr (a GCN fold over a few
    hundred graphs trains for tens of seconds).
    """
    from tqdm import tqdm

    graphs = list(graphs)
    y = np.asarray(latency_ms, dtype=np.float64)
    fold = np.random.default_rng(seed).permutation(len(y)) % folds
    out = np.empty(len(y))
    for k in tqdm(range(folds), desc=f"cross-validating {len(graphs)} graphs", unit="fold",
                  disable=not progress):
        test = fold == k
        train_idx = np.flatnonzero(~test)
        test_idx = np.flatnonzero(test)
        model = make().fit([graphs[i] for i in train_idx], y[train_idx])
        out[test_idx] = model.predict([graphs[i] for i in test_idx])
    return out
