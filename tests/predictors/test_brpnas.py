from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from nnmeter.errors import PredictorError  # noqa: E402
from nnmeter.ir import GraphBuilder  # noqa: E402
from nnmeter.predictors.brpnas import (  # noqa: E402
    NB201_FEATURES, BRPNASPredictor, encode_nb201_cell, encode_op_graph,
)
from nnmeter.zoo.nasbench201 import cell_from_index  # noqa: E402

FAST = dict(hidden=16, epochs=40, validation=4, warmup_epochs=5, stop_patience=10)


def _edges(enc) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in zip(enc.rows, enc.cols) if a < b}


def _ops(enc) -> list[str]:
    return [NB201_FEATURES[i] for i in enc.x.argmax(axis=1)]


def test_full_conv_cell_has_six_op_nodes_between_input_output_and_global():
    enc = encode_nb201_cell(("nor_conv_3x3",) * 6)
    assert _ops(enc) == ["nor_conv_3x3"] * 6 + ["input", "output", "global"]
    # vertices follow EDGES: (1,0) (2,0) (2,1) (3,0) (3,1) (3,2); 6 input, 7 output, 8 global
    dag = {e for e in _edges(enc) if 8 not in e}
    assert dag == {(0, 6), (1, 6), (3, 6), (0, 2), (0, 4), (1, 5), (2, 5),
                   (3, 7), (4, 7), (5, 7)}
    assert {e for e in _edges(enc) if 8 in e} == {(i, 8) for i in range(8)}


def test_none_edges_vanish_and_skip_connections_are_rewired():
    cell = ("nor_conv_1x1", "none", "skip_connect", "avg_pool_3x3", "none", "nor_conv_3x3")
    enc = encode_nb201_cell(cell)
    assert _ops(enc) == ["nor_conv_1x1", "avg_pool_3x3", "nor_conv_3x3", "input", "output",
                         "global"]
    # the skip (2 <- 1) joins the 1x1 conv straight to the 3x3 conv on (3 <- 2)
    assert {e for e in _edges(enc) if 5 not in e} == {(0, 3), (1, 3), (0, 2), (1, 4), (2, 4)}


def test_a_cell_of_skips_joins_input_to_output_and_one_of_nones_leaves_them_apart():
    skips = encode_nb201_cell(("skip_connect",) * 6)
    assert _ops(skips) == ["input", "output", "global"] and (0, 1) in _edges(skips)
    nones = encode_nb201_cell(("none",) * 6)
    assert (0, 1) not in _edges(nones)


def test_malformed_cell_is_refused():
    with pytest.raises(ValueError, match="6 ops"):
        encode_nb201_cell(("nor_conv_3x3",) * 5)
    with pytest.raises(ValueError, match="sep_conv"):
        encode_nb201_cell(("sep_conv",) * 6)


def test_adjacency_is_symmetric_normalised():
    enc = encode_nb201_cell(cell_from_index(1234))
    n = len(enc.x)
    A = np.zeros((n, n))
    A[enc.rows, enc.cols] = enc.values
    assert np.allclose(A, A.T)
    assert np.all(np.diag(A) > 0)


def test_op_graph_encoding_has_a_row_per_node_plus_the_global_node():
    b = GraphBuilder("m", (1, 3, 8, 8))
    g = b.build([b.relu(b.conv(b.x, 4))])
    enc = encode_op_graph(g)
    assert enc.x.shape[0] == len(g.topological_nodes()) + 1
    assert not enc.x[-1].any()
    assert {(0, 1), (1, 2)} <= _edges(enc)


def _toy(n: int, seed: int) -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(seed)
    cells = [cell_from_index(int(i)) for i in rng.choice(15625, n, replace=False)]
    encs = [encode_nb201_cell(c) for c in cells]
    # a latency the graph determines: 3x3 convs cost most, then 1x1, pools little
    lat = np.array([0.3 + 0.4 * e.x[:, 1].sum() + 0.1 * e.x[:, 0].sum() + 0.02 * e.x[:, 2].sum()
                    for e in encs])
    return encs, lat


def test_learns_the_ranking_of_a_graph_determined_latency():
    from scipy.stats import spearmanr

    encs, lat = _toy(60, 0)
    p = BRPNASPredictor(**FAST, random_state=1).fit(encs[:40], lat[:40])
    pred = p.predict(encs[40:])
    assert pred.shape == (20,) and np.all(pred > 0)
    assert spearmanr(pred, lat[40:]).statistic > 0.8
    assert 1 <= p.best_epoch_ <= p.epochs_run_ <= FAST["epochs"]
    assert np.isfinite(p.validation_mape_)


def test_same_seed_same_model():
    encs, lat = _toy(20, 1)
    a = BRPNASPredictor(**{**FAST, "epochs": 5}, random_state=3).fit(encs, lat).predict(encs)
    b = BRPNASPredictor(**{**FAST, "epochs": 5}, random_state=3).fit(encs, lat).predict(encs)
    assert np.array_equal(a, b)


def test_bad_input_is_refused_with_a_reason():
    encs, lat = _toy(10, 2)
    with pytest.raises(ValueError, match="10 models but 9"):
        BRPNASPredictor(**FAST).fit(encs, lat[:9])
    with pytest.raises(ValueError, match="positive finite"):
        BRPNASPredictor(**FAST).fit(encs, np.r_[lat[:9], 0.0])
    with pytest.raises(ValueError, match="too few"):
        BRPNASPredictor(**{**FAST, "validation": 9}).fit(encs, lat)
    with pytest.raises(PredictorError, match="not fitted"):
        BRPNASPredictor().predict(encs)
