from __future__ import annotations

import json

import numpy as np
import pytest

from nnmeter.errors import NNMeterError, PredictorError
from nnmeter.ir import GraphBuilder, ModelGraph
from nnmeter.ir.cost import node_cost
from nnmeter.predictors import gnn
from nnmeter.predictors.gnn import (
    NUMERIC_FEATURES, GCNBaseline, cross_val_predict_graphs, node_feature_matrix,
    normalized_adjacency, op_vocabulary,
)

SMALL = dict(hidden=(16, 16, 16), head_hidden=16, epochs=60, batch_size=8,
             learning_rate=1e-2)


def _net(channels: int, depth: int, kernel: int, stride: int, size: int = 16) -> ModelGraph:
    b = GraphBuilder(f"net_c{channels}_d{depth}_k{kernel}", (1, 3, size, size))
    y = b.relu(b.conv(b.x, channels, kernel=kernel, stride=stride))
    for _ in range(depth):
        r = b.relu(b.bn(b.conv(y, channels, kernel=kernel)))
        y = b.add_(y, r)
    y = b.gap(y)
    return b.build([b.fc(b.flatten(y), 10)])


def _synthetic(seed: int, n: int) -> tuple[list[ModelGraph], np.ndarray]:
    """Graphs of varying width/depth/kernel, latency = conv FLOPs · const + per-node cost."""
    rng = np.random.default_rng(seed)
    graphs, lat = [], []
    for _ in range(n):
        g = _net(int(rng.choice([4, 8, 16, 32, 48])), int(rng.integers(1, 5)),
                 int(rng.choice([1, 3, 5])), int(rng.choice([1, 2])))
        conv_flops = sum(node_cost(nd).flops for nd in g.topological_nodes() if nd.op == "conv")
        graphs.append(g)
        lat.append(0.02 * len(g) + 2e-6 * conv_flops)
    return graphs, np.array(lat)


@pytest.fixture(scope="module")
def data() -> tuple[list[ModelGraph], np.ndarray]:
    return _synthetic(0, 40)


@pytest.fixture(scope="module")
def fitted(data) -> GCNBaseline:
    graphs, lat = data
    return GCNBaseline(**SMALL, random_state=3).fit(graphs[:30], lat[:30])


# ------------------------------------------------------------------------- features
def test_node_features_follow_topological_order_and_costs():
    g = _net(8, 1, 3, 2)
    X, names = node_feature_matrix(g)
    vocab = op_vocabulary()
    assert names == [n.name for n in g.topological_nodes()]
    assert X.shape == (len(g), len(vocab) + len(NUMERIC_FEATURES))
    np.testing.assert_array_equal(X[:, :len(vocab)].sum(axis=1), np.ones(len(g)))
    conv = g.topological_nodes()[1]
    assert conv.op == "conv" and X[1, vocab.index("conv")] == 1.0
    c = node_cost(conv)
    expected = np.log1p([c.flops, c.params, c.memory_bytes, 8, 8, 3, 2])
    np.testing.assert_allclose(X[1, len(vocab):], expected)


def test_adjacency_is_symmetric_normalised_with_self_loops():
    g = _net(4, 1, 3, 1)
    rows, cols, vals = normalized_adjacency(g)
    n = len(g)
    A = np.zeros((n, n))
    A[rows, cols] = vals
    np.testing.assert_allclose(A, A.T)
    assert np.all(np.diag(A) > 0)
    # Â = D^-1/2 (A+Aᵀ+I) D^-1/2 → D^1/2 Â D^1/2 is binary
    deg = (A > 0).sum(axis=1)
    B = np.sqrt(deg)[:, None] * A * np.sqrt(deg)[None, :]
    np.testing.assert_allclose(B, (A > 0).astype(float), atol=1e-12)
    # the residual add reads two producers: its row holds both plus itself
    names = [nd.name for nd in g.topological_nodes()]
    add = names.index(next(x for x in names if x.startswith("add")))
    assert deg[add] == 4  # 2 inputs, 1 consumer, itself


def test_graph_without_shapes_is_refused():
    g = ModelGraph("noshape")
    g.add_input("x", (1, 3, 8, 8))
    g.add_node("r", "relu", inputs=["x"])
    with pytest.raises(PredictorError, match="infer_shapes"):
        node_feature_matrix(g)


# ------------------------------------------------------------------------- backward
def test_backward_matches_finite_differences():
    graphs = [_net(4, 1, 3, 1, size=8), _net(6, 2, 1, 2, size=8)]
    feats = []
    for g in graphs:
        X, _ = node_feature_matrix(g)
        k = len(op_vocabulary())
        X[:, k:] = (X[:, k:] - X[:, k:].mean(axis=0)) / (X[:, k:].std(axis=0) + 1.0)
        feats.append(X)
    for readout in ("mean", "sum"):
        batch = gnn._Batch(feats, [normalized_adjacency(g) for g in graphs], readout,
                           np.float64)
        rng = np.random.default_rng(1)
        w = gnn._init_weights([feats[0].shape[1], 5, 4], 3, rng)
        w = {k: v + (0.1 * rng.standard_normal(v.shape) if k.startswith("b") else 0.0)
             for k, v in w.items()}
        target = np.array([0.3, -0.7])

        def loss(weights):
            out, _ = gnn._forward(weights, batch, 2)
            return float(np.mean((out - target) ** 2))

        out, cache = gnn._forward(w, batch, 2)
        grads = gnn._backward(w, batch, 2, cache, 2.0 * (out - target) / len(target))
        assert set(grads) == set(w)
        eps = 1e-6
        for key, value in w.items():
            numeric = np.zeros_like(value)
            for idx in np.ndindex(value.shape):
                plus = {k: v.copy() for k, v in w.items()}
                minus = {k: v.copy() for k, v in w.items()}
                plus[key][idx] += eps
                minus[key][idx] -= eps
                numeric[idx] = (loss(plus) - loss(minus)) / (2 * eps)
            np.testing.assert_allclose(grads[key], numeric, rtol=1e-4, atol=1e-7,
                                       err_msg=f"{readout} readout, gradient of {key}")


# ------------------------------------------------------------------------ estimator
def test_estimator_contract(data):
    graphs, lat = data
    est = GCNBaseline(hidden=(8, 8), head_hidden=4, epochs=2, random_state=7)
    assert est.get_params() == {"hidden": (8, 8), "head_hidden": 4, "readout": "mean",
                                "epochs": 2, "batch_size": 16, "learning_rate": 3e-3,
                                "weight_decay": 1e-4, "random_state": 7}
    assert not [k for k in vars(est) if k.endswith("_")]
    with pytest.raises(PredictorError, match="not fitted"):
        est.predict(graphs[:2])
    assert isinstance(PredictorError("x"), NNMeterError)
    assert est.fit(graphs[:5], lat[:5]) is est
    assert len(est.loss_curve_) == 2 and est.n_graphs_fitted_ == 5
    pred = est.predict(graphs[:3])
    assert pred.shape == (3,) and np.all(np.isfinite(pred)) and np.all(pred > 0)
    assert est.set_params(epochs=3) is est and est.epochs == 3
    assert "GCNBaseline(hidden=(8, 8)" in repr(est)
    with pytest.raises(ValueError, match="no parameter"):
        est.set_params(layers=3)


@pytest.mark.parametrize("bad", [dict(readout="max"), dict(hidden=()), dict(epochs=0)])
def test_bad_parameters_are_refused(data, bad):
    graphs, lat = data
    with pytest.raises(ValueError):
        GCNBaseline(**bad).fit(graphs[:2], lat[:2])


def test_bad_targets_are_refused(data):
    graphs, lat = data
    with pytest.raises(ValueError, match="one"):
        GCNBaseline(epochs=1).fit(graphs[:3], lat[:2])
    with pytest.raises(ValueError, match="positive"):
        GCNBaseline(epochs=1).fit(graphs[:2], [1.0, 0.0])


def test_same_seed_same_predictions_other_seed_differs(data):
    graphs, lat = data
    kw = dict(hidden=(8, 8), head_hidden=8, epochs=5, batch_size=4)
    a = GCNBaseline(**kw, random_state=11).fit(graphs[:12], lat[:12]).predict(graphs[12:20])
    b = GCNBaseline(**kw, random_state=11).fit(graphs[:12], lat[:12]).predict(graphs[12:20])
    c = GCNBaseline(**kw, random_state=12).fit(graphs[:12], lat[:12]).predict(graphs[12:20])
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_learns_synthetic_latency_better_than_a_constant(data, fitted):
    graphs, lat = data
    train, test = slice(0, 30), slice(30, 40)
    assert fitted.loss_curve_[-1] < 0.2 * fitted.loss_curve_[0]
    pred = fitted.predict(graphs[test])
    t = np.log(lat[test])
    mse_gcn = np.mean((np.log(pred) - t) ** 2)
    mse_const = np.mean((np.log(lat[train]).mean() - t) ** 2)
    assert mse_gcn < 0.25 * mse_const
    # rank agreement on unseen graphs
    assert np.corrcoef(np.argsort(np.argsort(pred)), np.argsort(np.argsort(lat[test])))[0, 1] > 0.8


def test_save_load_round_trip_predicts_identically(tmp_path, data, fitted):
    graphs, _ = data
    where = fitted.save(tmp_path / "gcn")
    doc = json.loads((where / "gcn.json").read_text())
    assert doc["params"]["hidden"] == [16, 16, 16]
    assert doc["vocabulary"] == list(op_vocabulary())
    with np.load(where / "gcn_weights.npz", allow_pickle=False) as npz:
        assert "w_W0" in npz.files
    loaded = GCNBaseline.load(where)
    assert loaded.get_params() == fitted.get_params()
    np.testing.assert_array_equal(loaded.predict(graphs), fitted.predict(graphs))


def test_load_refuses_missing_or_foreign_files(tmp_path, fitted):
    with pytest.raises(PredictorError, match="cannot read"):
        GCNBaseline.load(tmp_path / "nothing")
    where = fitted.save(tmp_path / "m")
    doc = json.loads((where / "gcn.json").read_text())
    doc["format_version"] = 999
    (where / "gcn.json").write_text(json.dumps(doc))
    with pytest.raises(PredictorError, match="version"):
        GCNBaseline.load(where)
    with pytest.raises(PredictorError, match="not fitted"):
        GCNBaseline().save(tmp_path / "unfitted")


def test_cross_val_predict_graphs_gives_out_of_fold_predictions(data):
    graphs, lat = data
    calls = []

    class Mean:
        def fit(self, gs, y):
            calls.append(len(gs))
            self.v = float(np.mean(y))
            return self

        def predict(self, gs):
            return np.full(len(gs), self.v)

    out = cross_val_predict_graphs(Mean, graphs[:10], lat[:10], folds=5, seed=0)
    assert calls == [8] * 5 and out.shape == (10,)
    fold = np.random.default_rng(0).permutation(10) % 5
    for k in range(5):
        np.testing.assert_allclose(out[fold == k], lat[:10][fold != k].mean())
