"""Fusion rules read off a runtime's executed graph (a fake runtime that fuses
conv -> relu only)."""

from __future__ import annotations

from nnmeter.backends.base import ExecutedNode
from nnmeter.fusion.rules import FusionRules
from nnmeter.fusion.runtime import case_truth, edges_in_models, kernel_count, runtime_rules
from nnmeter.fusion.testcases import TestShapes, build_testcases
from nnmeter.ir.builder import GraphBuilder


def fake_profile(graph):
    """One executed node per op, except that a relu reading a conv runs inside it."""
    out, host = [], {}
    for n in graph.topological_nodes():
        if n.op == "input":
            continue
        src = graph.node(n.inputs[0].node)
        if n.op == "relu" and src.op == "conv" and len(graph.successors(src.name)) == 1:
            host[n.name] = host.get(src.name, src.name)
            continue
        host[n.name] = n.name
    groups: dict[str, list[str]] = {}
    for n, h in host.items():
        groups.setdefault(h, []).append(n)
    for h, members in groups.items():
        out.append(ExecutedNode(h, "Node", tuple(members), time_ms=0.01))
    out.append(ExecutedNode("reorder", "ReorderOutput", (), time_ms=0.001))
    return out


def _model():
    b = GraphBuilder("m", (1, 8, 8, 8))
    y = b.relu(b.conv(b.x, 8, name="c1"), name="r1")
    y = b.relu(b.bn(b.conv(y, 8, name="c2"), name="bn2"), name="r2")
    y = b.maxpool(y, 2, name="p")
    return b.build([b.add_(b.conv(y, 8, name="c3"), y, name="add")])


def test_edges_count_pairs_whose_producer_heads_its_node():
    seen = edges_in_models(fake_profile, [_model()])
    assert seen[("conv", "relu")] == [1, 1]
    assert seen[("conv", "bn")] == [0, 1]
    assert seen[("bn", "relu")] == [0, 1]
    assert seen[("relu", "maxpool")] == [0, 1]
    assert ("conv", "add") not in seen  # a join of two computed tensors


def test_kernel_count_skips_layout_nodes():
    assert kernel_count(fake_profile(_model())) == 7


def test_case_truth_and_runtime_rules():
    cases = {c.name: c for c in build_testcases(TestShapes())}
    assert case_truth(fake_profile, cases["conv->relu"])["fused"] is True
    assert case_truth(fake_profile, cases["conv->bn"])["fused"] is False
    timed = FusionRules.from_decisions("toy", pairs={("conv", "bn"): True,
                                                     ("conv", "relu"): False,
                                                     ("relu", "conv"): True})
    rules, report = runtime_rules(timed, fake_profile, [_model()])
    assert rules.fuses("conv", "relu") and not rules.fuses("conv", "bn")
    assert not rules.fuses("relu", "conv")
    assert report["conv->relu"]["source"] == "models"
    assert report["relu->conv"]["source"] in ("models", "test case")
    assert report["conv->bn"]["timed_fused"] is True and report["conv->bn"]["fused"] is False
    p = rules.pattern("pair", ("conv", "relu"))
    assert p.extra["runtime"]["fused_edges"] == 1
    # read from the runtime again, a rules file keeps the timing detector's decisions
    again, report2 = runtime_rules(rules, fake_profile, [_model()])
    assert report2["conv->bn"]["timed_fused"] is True
    assert again.pattern("pair", ("conv", "bn")).extra["runtime"]["timed_fused"] is True


def test_a_block_that_still_runs_as_several_kernels_is_partial_not_fused():
    cases = {c.name: c for c in build_testcases(TestShapes())}

    def merges_two(graph):
        """Every op its own node, except the first two non-input ops, which share one."""
        ops = [n for n in graph.topological_nodes() if n.op != "input"]
        out = [ExecutedNode(ops[0].name, "Node", tuple(n.name for n in ops[:2]), time_ms=0.01)]
        out += [ExecutedNode(n.name, "Node", (n.name,), time_ms=0.01) for n in ops[2:]]
        return out

    t = case_truth(merges_two, cases["block:se"])
    assert t["covers"] and t["kernels"]["block"] > 1
    assert t["fused"] is False and t["partial"] is True

    def one_node(graph):
        ops = [n.name for n in graph.topological_nodes() if n.op != "input"]
        return [ExecutedNode("all", "Node", tuple(ops), time_ms=0.01)]

    t = case_truth(one_node, cases["block:se"])
    assert t["fused"] is True and "partial" not in t


def test_new_pairs_are_added_from_models_and_old_decisions_kept():
    from nnmeter.fusion.runtime import new_pairs_from_models

    def model(i):
        b = GraphBuilder(f"m{i}", (1, 8, 8, 8))
        y = b.relu(b.conv(b.x, 8, name="c1"), name="r1")
        y = b.sigmoid(b.maxpool(y, 2, name="p"), name="s")
        return b.build([y])

    base = FusionRules.from_decisions("toy", pairs={("conv", "relu"): False})
    rules, report = new_pairs_from_models(base, fake_profile, [model(0), model(1)])
    # the existing pair keeps its (timed) decision although the runtime fuses it
    assert not rules.fuses("conv", "relu") and "conv->relu" not in report
    assert report["maxpool->sigmoid"] == {"source": "models (new pair)", "fused_edges": 0,
                                          "edges": 2, "fused": False, "timed_fused": None}
    assert rules.pattern("pair", ("maxpool", "sigmoid")).fused is False
    # the relu runs inside the conv's node: relu -> maxpool is not its question
    assert "relu->maxpool" not in report
    # one edge is not a rule
    _, once = new_pairs_from_models(base, fake_profile, [model(0)])
    assert once == {}
