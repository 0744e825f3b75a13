"""The BRP-NAS latency predictor as its paper trains it: the learned graph baseline of
the benchmark tables.

BRP-NAS (Dudziak et al., NeurIPS 2020) predicts a model's latency with a graph
convolutional network over the model's graph. Its published setting for NAS-Bench-201
(the predictor configuration in its code release) is what :class:`BRPNASPredictor`
follows:

- **graph**: nodes carry a one-hot of their op; one extra *global* node is joined to
  every node, and the network reads its prediction off the global node's embedding;
- **layers**: 4 graph convolutions ``H' = dropout(relu(layernorm(Â H W)))`` of width
  600 (dropout 0.002), then one linear layer to the output;
- **training**: AdamW (learning rate 4e-4, weight decay 5e-4), an L1 loss, one graph
  per step, up to 250 epochs; after epoch 20 the learning rate halves when the
  validation loss has not improved by 1 % for 10 epochs, and training stops when it
  has not improved for 35 (the weights of the best validation epoch are kept);
- **data**: 900 training models, 100 validation models, the rest of the space tested.

Two encodings of a model: :func:`encode_nb201_cell` is BRP-NAS's own for NAS-Bench-201
(the cell's ops as nodes: 1x1 conv, 3x3 conv, 3x3 average pool, plus input, output and
global nodes; ``none`` edges deleted, skip connections rewired, dead nodes pruned: six
features), used for the paper check; :func:`encode_op_graph` is any model's op graph
(every node of a :class:`~nnmeter.ir.graph.ModelGraph` with the op one-hot and the
numeric features of :func:`nnmeter.predictors.gnn.node_feature_matrix`), used on the zoo,
whose families share no cell.

Where this differs from the paper, and why: the target is ``log(latency)``,
standardised, so the L1 loss is a relative error (the zoo spans three orders of
magnitude, and the ±10 % score is relative; on NAS-Bench-201 alone the range is narrow
and the two agree); the adjacency is the symmetric GCN normalisation of ``A + Aᵀ + I``;
width and minibatch are parameters, because op graphs of the zoo have up to a thousand
nodes and width 600 with one graph a step would train for hours on one core.

Needs torch (the ``torch`` extra). Training runs on one thread and is deterministic for
a fixed ``random_state``.

Examples
--------
>>> from nnmeter.zoo.nasbench201 import cell_from_index
>>> enc = [encode_nb201_cell(cell_from_index(i)) for i in range(0, 15625, 625)]
>>> enc[0].x.shape[1]
6
>>> lat = [0.5 + 0.1 * e.x[:, 1].sum() for e in enc]   # a toy target: 3x3 convs cost
>>> p = BRPNASPredictor(hidden=16, epochs=30, validation=5).fit(enc[:20], lat[:20])
>>> p.predict(enc[20:]).shape
(5,)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnmeter.errors import PredictorError

__all__ = ["GraphEncoding", "BRPNASPredictor", "encode_nb201_cell", "encode_op_graph",
           "PAPER_SETTING"]

#: BRP-NAS's NAS-Bench-201 latency predictor setting (its code release's configuration)
PAPER_SETTING: dict[str, Any] = {
    "layers": 4, "hidden": 600, "dropout": 0.002, "learning_rate": 4e-4,
    "weight_decay": 5e-4, "epochs": 250, "batch_size": 1, "lr_patience": 10,
    "stop_patience": 35, "warmup_epochs": 20,
}

#: the one-hot of :func:`encode_nb201_cell`, in BRP-NAS's order
NB201_FEATURES = ("nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3", "input", "output", "global")


@dataclass(frozen=True)
class GraphEncoding:
    """One model as the network reads it: node features and the symmetric normalised
    adjacency (COO) of ``A + Aᵀ + I``; the last node is the global node."""

    x: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray


def _with_global(x: np.ndarray, edges: set[tuple[int, int]], global_col: int | None
                 ) -> GraphEncoding:
    """Append the global node (joined to every node) and normalise the adjacency."""
    n = len(x)
    g = np.zeros((1, x.shape[1]))
    if global_col is not None:
        g[0, global_col] = 1.0
    x = np.vstack([x, g])
    pairs = {(i, i) for i in range(n + 1)}
    for a, b in edges:
        pairs |= {(a, b), (b, a)}
    for i in range(n):
        pairs |= {(i, n), (n, i)}
    rc = np.array(sorted(pairs), dtype=np.int64)
    deg = np.bincount(rc[:, 0], minlength=n + 1).astype(float)
    inv = 1.0 / np.sqrt(deg)
    return GraphEncoding(x, rc[:, 0], rc[:, 1], inv[rc[:, 0]] * inv[rc[:, 1]])


def encode_nb201_cell(cell: Sequence[str]) -> GraphEncoding:
    """BRP-NAS's graph of a NAS-Bench-201 cell: its ops as nodes, between an input and
    an output node, plus the global node; six one-hot features (:data:`NB201_FEATURES`).

    ``none`` edges are deleted and their dead ends pruned
    (:func:`nnmeter.zoo.nasbench201.live_cell`); a ``skip_connect`` is no node: its
    predecessors feed its successors directly. A cell with no live path keeps its input
    and output nodes unjoined.

    Raises
    ------
    ValueError
        If ``cell`` is not six ops of NAS-Bench-201.
    """
    from nnmeter.zoo.nasbench201 import EDGES, cell_index, live_cell

    cell_index(tuple(cell))  # raises on a malformed cell
    cell = live_cell(tuple(cell))
    # a vertex per op edge; "in"/"out" stand for the cell's input and output nodes.
    # preds(node j): what feeds cell node j (vertex ids); skip edges pass them through
    feeds: dict[int, set] = {0: {"in"}}
    verts: list[str] = []
    edges: set[tuple[Any, Any]] = set()
    for j in (1, 2, 3):
        into: set = set()
        for (to, frm), op in zip(EDGES, cell):
            if to != j or op == "none":
                continue
            if op == "skip_connect":
                into |= feeds.get(frm, set())
                continue
            v = len(verts)
            verts.append(op)
            edges |= {(p, v) for p in feeds.get(frm, set())}
            into.add(v)
        feeds[j] = into
    edges |= {(p, "out") for p in feeds[3]}
    n = len(verts)
    index = {"in": n, "out": n + 1}
    x = np.zeros((n + 2, len(NB201_FEATURES)))
    for v, op in enumerate(verts):
        x[v, NB201_FEATURES.index(op)] = 1.0
    x[n, NB201_FEATURES.index("input")] = 1.0
    x[n + 1, NB201_FEATURES.index("output")] = 1.0
    ids = {(index.get(a, a), index.get(b, b)) for a, b in edges}
    return _with_global(x, ids, NB201_FEATURES.index("global"))


def encode_op_graph(graph: Any) -> GraphEncoding:
    """Every node of a shape-inferred ModelGraph, with the op one-hot and the ``log1p``
    numeric features of :func:`nnmeter.predictors.gnn.node_feature_matrix`, plus the
    global node (all-zero features: it is the last row, and joined to every node)."""
    from nnmeter.predictors.gnn import node_feature_matrix

    x, names = node_feature_matrix(graph)
    index = {n: i for i, n in enumerate(names)}
    edges = {(index[r.node], index[node.name]) for node in graph.topological_nodes()
             for r in node.inputs}
    return _with_global(x, edges, None)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class BRPNASPredictor:
    """BRP-NAS's GCN latency predictor, with its paper's training schedule.

    Parameters
    ----------
    layers, hidden, dropout : int, int, float
        Graph convolutions, their width, and the dropout after each.
    learning_rate, weight_decay : float
        AdamW's.
    epochs, batch_size : int
        At most this many epochs; graphs per step.
    lr_patience, stop_patience, warmup_epochs : int
        The learning rate halves after ``lr_patience`` epochs without a 1 % better
        validation loss, training stops after ``stop_patience``; neither before
        ``warmup_epochs``.
    validation : int or float
        Models of ``fit``'s set held out for the schedule (a count, or a share).
    random_state : int
    progress : bool
        A bar over the epochs on stderr.

    Defaults are :data:`PAPER_SETTING`, with 100 validation models.

    Attributes
    ----------
    epochs_run_ : int
    best_epoch_ : int
    validation_mape_ : float
        Of the kept weights, in percent.
    """

    def __init__(self, *, layers: int = 4, hidden: int = 600, dropout: float = 0.002,
                 learning_rate: float = 4e-4, weight_decay: float = 5e-4,
                 epochs: int = 250, batch_size: int = 1, lr_patience: int = 10,
                 stop_patience: int = 35, warmup_epochs: int = 20,
                 validation: int | float = 100, random_state: int = 0,
                 progress: bool = False) -> None:
        self.layers, self.hidden, self.dropout = layers, hidden, dropout
        self.learning_rate, self.weight_decay = learning_rate, weight_decay
        self.epochs, self.batch_size = epochs, batch_size
        self.lr_patience, self.stop_patience = lr_patience, stop_patience
        self.warmup_epochs, self.validation = warmup_epochs, validation
        self.random_state, self.progress = random_state, progress

    def __repr__(self) -> str:
        return (f"BRPNASPredictor(layers={self.layers}, hidden={self.hidden}, "
                f"lr={self.learning_rate:g}, epochs={self.epochs}, "
                f"batch_size={self.batch_size})")

    # -- batching -------------------------------------------------------------------
    #: a batch with at most this many nodes multiplies by a dense adjacency (faster for
    #: the small graphs of NAS-Bench-201 cells than a sparse product)
    DENSE_NODES = 512

    def _batch(self, encs: Sequence[GraphEncoding]) -> tuple[Any, Any, Any]:
        """The block-diagonal adjacency, standardised features and global-node rows of
        ``encs``, as torch tensors."""
        import torch

        sizes = [len(e.x) for e in encs]
        off = np.concatenate([[0], np.cumsum(sizes)])
        n = int(off[-1])
        rows = np.concatenate([e.rows + o for e, o in zip(encs, off)])
        cols = np.concatenate([e.cols + o for e, o in zip(encs, off)])
        vals = np.concatenate([e.values for e in encs])
        if n <= self.DENSE_NODES:
            dense = np.zeros((n, n), dtype=np.float32)
            dense[rows, cols] = vals
            A = torch.from_numpy(dense)
        else:
            A = torch.sparse_coo_tensor(torch.from_numpy(np.vstack([rows, cols])),
                                        torch.from_numpy(vals).float(), (n, n),
                                        check_invariants=False).coalesce()
        X = (np.concatenate([e.x for e in encs]) - self.x_mean_) / self.x_scale_
        glob = torch.from_numpy(off[1:] - 1)
        return A, torch.from_numpy(X).float(), glob

    def _net(self, n_in: int) -> Any:
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(s) -> None:
                super().__init__()
                widths = [n_in] + [self.hidden] * self.layers
                s.lin = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
                s.norm = nn.ModuleList(nn.LayerNorm(self.hidden) for _ in range(self.layers))
                s.drop = nn.Dropout(self.dropout)
                s.out = nn.Linear(self.hidden, 1)

            def forward(s, A: Any, X: Any, glob: Any) -> Any:
                h = X
                for lin, norm in zip(s.lin, s.norm):
                    h = s.drop(torch.relu(norm(A @ lin(h) if not A.is_sparse
                                                  else torch.sparse.mm(A, lin(h)))))
                return s.out(h[glob]).squeeze(-1)

        return Net()

    # -- estimator API --------------------------------------------------------------
    def fit(self, encodings: Sequence[GraphEncoding], latency_ms: Sequence[float]
            ) -> "BRPNASPredictor":
        """Train on encoded models (:func:`encode_nb201_cell`, :func:`encode_op_graph`)
        and their measured latencies; returns ``self``.

        Raises
        ------
        ValueError
            If the lengths differ, a latency is not positive and finite, or fewer than
            two models would remain for training after the validation hold-out.
        """
        import torch
        from tqdm import tqdm

        y = np.asarray(latency_ms, dtype=float)
        if len(encodings) != len(y):
            raise ValueError(f"{len(encodings)} models but {len(y)} latencies")
        if not np.all(np.isfinite(y) & (y > 0)):
            raise ValueError("every latency must be a positive finite number of ms")
        n_val = int(self.validation) if self.validation >= 1 else \
            int(round(self.validation * len(y)))
        if len(y) - n_val < 2 or n_val < 1:
            raise ValueError(f"{len(y)} models: too few to hold out {self.validation} for "
                             f"validation and train on the rest (give fewer)")
        rng = np.random.default_rng(self.random_state)
        order = rng.permutation(len(y))
        val, fit = order[:n_val], order[n_val:]
        X_all = np.concatenate([encodings[i].x for i in fit])
        self.x_mean_ = X_all.mean(axis=0)
        spread = X_all.std(axis=0)
        self.x_scale_ = np.where(spread > 0, spread, 1.0)
        t = np.log(y)
        self.t_mean_, self.t_scale_ = float(t[fit].mean()), float(t[fit].std() or 1.0)
        z = torch.from_numpy((t - self.t_mean_) / self.t_scale_).float()
        with _one_thread():
            torch.manual_seed(self.random_state)
            net = self._net(encodings[0].x.shape[1])
            try:  # the fused step is twice as fast on one core (one graph a step)
                opt = torch.optim.AdamW(net.parameters(), lr=self.learning_rate,
                                        weight_decay=self.weight_decay, fused=True)
            except (RuntimeError, TypeError):
                opt = torch.optim.AdamW(net.parameters(), lr=self.learning_rate,
                                        weight_decay=self.weight_decay)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
                opt, factor=0.5, patience=self.lr_patience, threshold=0.01)
            val_batch = self._batch([encodings[i] for i in val])
            best, best_state, since_best = math.inf, None, 0
            single: dict[int, tuple] = {}
            bs = max(1, int(self.batch_size))
            bar = tqdm(range(int(self.epochs)), desc=f"BRP-NAS GCN on {len(fit)} graphs",
                       unit="epoch", disable=not self.progress)
            for epoch in bar:
                net.train()
                for k in range(0, len(fit), bs):
                    idx = fit[k:k + bs]
                    if bs == 1:  # one graph a step: its tensors are built once
                        if idx[0] not in single:
                            single[idx[0]] = self._batch([encodings[idx[0]]])
                        A, X, g = single[idx[0]]
                    else:
                        A, X, g = self._batch([encodings[i] for i in idx])
                    loss = torch.nn.functional.l1_loss(net(A, X, g), z[idx], reduction="sum")
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                fit = fit[rng.permutation(len(fit))]
                net.eval()
                with torch.no_grad():
                    v = float(torch.nn.functional.l1_loss(net(*val_batch), z[val]))
                if v < best:
                    best, since_best = v, 0
                    best_state = {k: w.detach().clone() for k, w in net.state_dict().items()}
                    self.best_epoch_ = epoch + 1
                else:
                    since_best += 1
                bar.set_postfix_str(f"validation L1 {v:.3f}, best {best:.3f} at epoch "
                                    f"{self.best_epoch_}")
                if epoch + 1 >= self.warmup_epochs:
                    sched.step(v)
                    if since_best >= self.stop_patience:
                        break
            bar.close()
            self.epochs_run_ = epoch + 1
            net.load_state_dict(best_state)
            net.eval()
            self.net_ = net
            pv = self.predict([encodings[i] for i in val])
        self.validation_mape_ = float(100 * np.mean(np.abs(pv - y[val]) / y[val]))
        return self

    def predict(self, encodings: Sequence[GraphEncoding]) -> np.ndarray:
        """Predicted latency in ms of each encoded model.

        Raises
        ------
        PredictorError
            If the predictor is not fitted.
        """
        import torch

        if not hasattr(self, "net_"):
            raise PredictorError("this BRPNASPredictor is not fitted: call fit() first")
        out = []
        with _one_thread(), torch.no_grad():
            for k in range(0, len(encodings), 64):
                out.append(self.net_(*self._batch(encodings[k:k + 64])).numpy())
        z = np.concatenate(out) if out else np.zeros(0)
        return np.exp(z.astype(float) * self.t_scale_ + self.t_mean_)
