"""predict_many segment by segment (nnmeter.predictors.segments) gives the figures of
the whole-model path and of predict(), to the last bit, on NASBench-201 cells and on
every zoo family."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnmeter import zoo
from nnmeter.predictors import load_predictor

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pred():
    from nnmeter.devices.datasets import device_datasets

    ids = [d.dataset_id for d in device_datasets(None, ROOT) if d.backend_id == "ort-cpu"]
    if not ids:
        pytest.skip("no committed ort-cpu dataset")
    return load_predictor("ort-cpu", dataset=sorted(ids)[0], root=ROOT)


def _whole(pred, graphs):
    """The whole-model path's totals, computed afresh (not from the totals memo)."""
    pred.use_segments = False
    pred._totals = None
    try:
        return pred.predict_many(graphs)
    finally:
        pred.use_segments = True
        pred._totals = None


def _graphs():
    out = [v.build() for v in zoo.sample_variants("nasbench201", 150, seed=11)]
    for fam in zoo.FAMILY_NAMES:
        out += [v.build() for v in zoo.sample_variants(fam, 3, seed=5)]
    return out


def test_segments_equal_whole_models_and_predict(pred):
    from nnmeter.predictors.segments import SegmentTotals

    assert SegmentTotals.supports(pred.composition)
    graphs = _graphs()
    pred._segments = None  # a fresh memo
    pred._totals = None
    seg = pred.predict_many(graphs)
    assert pred._segments[1] is not None and pred._segments[1].parts  # it was used
    assert seg == _whole(pred, graphs)
    pred._totals = None
    again = pred.predict_many(graphs[::-1])[::-1]  # every segment from the memo
    assert again == seg
    # a repeated graph comes from the totals memo, equal to the last bit
    assert pred.predict_many(graphs) == seg and pred._totals is not None
    # a sample against predict() (each graph alone)
    for g, total in list(zip(graphs, seg))[::7]:
        assert total == pred.predict(g, check_device=False).total_ms


def test_a_full_memo_is_cleared_and_the_figures_stay(pred, monkeypatch):
    import nnmeter.predictors.segments as segments

    graphs = [v.build() for v in zoo.sample_variants("nasbench201", 40, seed=12)]
    want = _whole(pred, graphs)
    monkeypatch.setattr(segments, "LIMIT", 10)
    pred._segments = None
    pred._totals = None
    assert pred.predict_many(graphs) == want
    assert len(pred._segments[1].parts) <= 10 + 40  # cleared between graphs


def test_segment_kernels_are_the_whole_graphs(pred):
    pred._segments = None
    for fam in zoo.FAMILY_NAMES:
        for v in zoo.sample_variants(fam, 2, seed=6):
            g = v.build()
            plan = pred._segment_totals()._plan(g)
            if plan is None:
                continue
            got = [(k.type, k.nodes, k.ops, k.config) for p in plan for k in p.kernels]
            want = [(k.type, k.nodes, k.ops, k.config) for k in pred.kernels(g)]
            if got != want:  # a segment met before in another graph has its names
                got = [x[:1] + x[2:] for x in got]
                want = [x[:1] + x[2:] for x in want]
            assert got == want, fam


def test_graphs_the_backend_rewrites_take_the_whole_model_path(pred):
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("affine", (1, 16, 8, 8))
    y = b.conv(b.x, 16, 3, name="c")
    y = b.eltwise_const("mul", y, (1, 16, 1, 1), name="scale")
    g = b.build([b.relu(y, name="r")])
    pred._segments = None
    assert pred._segment_totals()._plan(g) is None
    assert pred.predict_many([g]) == [pred.predict(g, check_device=False).total_ms]


def test_the_totals_memo_follows_the_composition(pred):
    graphs = [v.build() for v in zoo.sample_variants("nasbench201", 5, seed=21)]
    pred._totals = None
    first = pred.predict_many(graphs)
    rebuilt = [v.build() for v in zoo.sample_variants("nasbench201", 5, seed=21)]
    assert pred.predict_many(rebuilt) == first  # equal graphs, other objects: memo hits
    memo = pred._totals
    old = pred.composition
    try:
        pred.composition = type(old)(list(old.terms))  # another composition object
        assert pred.predict_many(graphs) == first
        assert pred._totals is not memo  # a new memo for it
    finally:
        pred.composition = old
