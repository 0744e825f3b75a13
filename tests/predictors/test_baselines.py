from __future__ import annotations

import numpy as np

from nnmeter.evaluate import mape
from nnmeter.ir import GraphBuilder
from nnmeter.predictors.baselines import (
    FlopsBaseline, FlopsMacBaseline, GraphMLPBaseline, cross_val_predict, graph_cost_features,
    graph_op_features,
)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    F = np.column_stack([rng.uniform(1e8, 5e9, 60), rng.uniform(1e6, 1e8, 60)])
    y = 2e-9 * F[:, 0] + 5e-8 * F[:, 1] + 0.3
    return F, y


def test_flops_mac_beats_flops_when_memory_matters():
    F, y = _data()
    e_flops = mape(cross_val_predict(FlopsBaseline, F, y), y)
    e_mac = mape(cross_val_predict(FlopsMacBaseline, F, y), y)
    assert e_mac < 1.0 < e_flops


def test_predictions_positive_even_below_the_line():
    F, y = _data()
    b = FlopsBaseline().fit(F, y)
    assert np.all(b.predict(np.array([[0.0, 0.0]])) > 0)


def test_graph_features_and_mlp():
    graphs, lat = [], []
    for c in (8, 16, 24, 32, 48, 64, 96, 128, 160, 192):
        b = GraphBuilder("m", (1, 3, 32, 32))
        y = b.relu(b.bn(b.conv(b.x, c)))
        g = b.build([b.gap(b.dwconv(y))])
        graphs.append(g)
        lat.append(0.1 + 1e-7 * g.cost().flops)
    G = np.vstack([graph_op_features(g) for g in graphs])
    assert G.shape[0] == 10 and np.all(np.isfinite(G))
    assert graph_cost_features(graphs[0])[0] == graphs[0].cost().flops
    pred = GraphMLPBaseline().fit(G, lat).predict(G)
    assert pred.shape == (10,) and np.all(pred > 0) and mape(pred, lat) < 50
