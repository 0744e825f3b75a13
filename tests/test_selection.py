"""Backend choice: the analytic baselines, regret and the ranking."""

from __future__ import annotations

import pytest

from nnmeter.ir import GraphBuilder
from nnmeter.selection import AnalyticCost, op_class, probe_graphs, regret


def _dw_heavy():
    b = GraphBuilder("dw", (1, 64, 28, 28))
    return b.build([b.relu(b.dwconv(b.conv(b.x, 64, kernel=1), kernel=3))])


RATES = {"dense": {"conv": 200.0, "dwconv": 5.0, "fc": 100.0, "other": 5.0},
         "light": {"conv": 100.0, "dwconv": 50.0, "fc": 100.0, "other": 20.0}}


def test_one_flops_per_backend_always_picks_the_fastest_dense_backend():
    g = _dw_heavy()
    assert AnalyticCost(RATES).pick(g) == "dense"
    flops = g.cost().flops
    assert AnalyticCost(RATES).predict(g, "light") == pytest.approx(flops / 100.0)


def test_per_class_rates_see_a_depthwise_heavy_model():
    g = _dw_heavy()
    cost = AnalyticCost(RATES, per_class=True)
    by_class: dict[str, float] = {}
    from nnmeter.ir.cost import node_cost

    for n in g.nodes():
        by_class[op_class(n)] = by_class.get(op_class(n), 0) + node_cost(n).flops
    want = sum(f / RATES["dense"][c] for c, f in by_class.items())
    assert cost.predict(g, "dense") == pytest.approx(want)
    # 1x1 conv: 2*64*64*784 FLOPs; the dwconv's small FLOPs at 5/ms outweigh the gain
    assert cost.pick(g) == "light"


def test_probes_cover_every_class_with_real_work():
    probes = probe_graphs()
    assert set(probes) == {"conv", "dwconv", "fc", "other"}
    assert {op_class(n) for n in probes["dwconv"].nodes() if n.op != "input"} == {"dwconv"}
    assert all(g.cost().flops > 1e5 for g in probes.values())


def test_regret_is_the_time_lost_against_the_fastest():
    assert regret("a", {"a": 1.0, "b": 2.0}) == 0.0
    assert regret("b", {"a": 1.0, "b": 1.5, "c": float("nan")}) == pytest.approx(0.5)


def test_near_ties_are_the_backends_predicted_within_the_tolerance_of_the_pick():
    from nnmeter.selection import NEAR_TIE, Candidate, near_ties

    def c(b, ms):
        return Candidate(b, ms, None, None, "dev", False)

    ranked = [c("a", 10.0), c("b", 10.0 * (1 + NEAR_TIE) - 1e-9), c("c", 10.4), c("d", 20.0)]
    assert near_ties(ranked) == ["b"]
    assert near_ties(ranked, tol=0.05) == ["b", "c"]
    assert near_ties(ranked[:1]) == [] and near_ties([]) == []
