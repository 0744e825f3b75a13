"""Which operand's kernel takes a residual add: the probe, the rules field, the
partitioner."""

from __future__ import annotations

import json


import pytest

from nnmeter.backends.base import ExecutedNode
from nnmeter.fusion.joins import (
    join_operand_from_runtime, last_reader_graphs, probe_graphs, update_rules_file,
    with_join_operand,
)
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir.builder import GraphBuilder
from nnmeter.partition import partition

RULES = FusionRules.from_decisions(
    "toy", pairs={("conv", "bn"): True, ("conv", "relu"): True},
    multi_input={("conv", "add"): True})


class _Runtime:
    """A profiler whose runtime fuses the add into the conv of operand ``pick``."""

    def __init__(self, pick, in_place=False):
        self.pick = pick
        self.in_place = in_place  # no fusion when the other operand is read after the add

    def profile(self, graph, runs=1):
        add = graph.node("add")
        host = {"first": add.inputs[0].node, "order": "convB"}.get(self.pick)
        if self.in_place and "cat" in graph:
            host = None
        out = []
        for n in graph.topological_nodes():
            if n.op == "input" or n.name == "add" or (host and n.name == host):
                continue
            out.append(ExecutedNode(n.name, n.op, (n.name,)))
        out.append(ExecutedNode("fused", "Conv", (host, "add") if host else ("add",)))
        return out


@pytest.mark.parametrize("pick,expected", [("first", "first"), ("order", "order"),
                                           (None, None)])
def test_probe_reads_the_runtime_choice(pick, expected):
    r = join_operand_from_runtime(_Runtime(pick))
    assert r["operand"] == expected
    assert {"add(A, B)", "add(B, A)"} <= set(r["evidence"])
    assert r["needs_last_reader"] is (False if pick == "first" else None)


def test_probe_reads_an_in_place_sum():
    r = join_operand_from_runtime(_Runtime("first", in_place=True))
    assert r["operand"] == "first" and r["needs_last_reader"] is True
    assert r["evidence"]["residual read again after the add"] == "alone"
    rules = with_join_operand(RULES, r)
    assert rules.join_needs_last_reader("add")
    assert not with_join_operand(RULES, {"operand": "first"}).join_needs_last_reader("add")


def test_last_reader_probes_differ_only_in_the_later_reader():
    g = last_reader_graphs()
    readers = {k: sorted(v.successors("src")) for k, v in g.items()}
    assert readers == {"control": ["add", "convB"], "after": ["add", "cat", "convB"]}


def _tree(read_after: bool):
    """DLA's tree: the residual ``src`` is summed with a convolution's output, and
    (``read_after``) concatenated with the sum afterwards."""
    b = GraphBuilder("tree", (1, 8, 8, 8))
    src = b.relu(b.conv(b.x, 8, name="c0"), name="src")
    s = b.relu(b.add_(b.conv(b.relu(b.conv(src, 8, name="c1"), name="r1"), 8, name="c2"),
                      src, name="add"), name="relu")
    return b.build([b.concat([s, src], name="cat") if read_after else s])


def test_partitioner_leaves_an_in_place_sum_apart_when_the_residual_is_read_later():
    rules = with_join_operand(RULES, {"operand": "first", "needs_last_reader": True})
    for read_after, host in ((False, "conv-add"), (True, "conv")):
        ks = {k.nodes[0]: k.type for k in partition(_tree(read_after), rules)}
        assert ks["c2"] == host
    plain = with_join_operand(RULES, {"operand": "first", "needs_last_reader": False})
    assert {k.nodes[0]: k.type for k in partition(_tree(True), plain)}["c2"] == "conv-add"


def test_probe_graphs_put_b_first_in_the_node_order():
    for order, g in probe_graphs().items():
        names = [n.name for n in g.topological_nodes()]
        assert names.index("convB") < names.index("convA")
        assert [r.node for r in g.node("add").inputs] == [f"conv{o}" for o in order]


def _residual(first_operand: str):
    b = GraphBuilder("res", (1, 8, 8, 8))
    short = b.bn(b.conv(b.x, 8, 1, name="short"), name="short_bn")  # computed first
    body = b.bn(b.conv(b.x, 8, name="body"), name="body_bn")
    ops = (body, short) if first_operand == "body" else (short, body)
    return b.build([b.relu(b.add_(*ops, name="add"), name="relu")])


def test_partitioner_gives_the_add_to_the_first_operand_when_the_rules_say_so():
    g = _residual("body")
    walk = {k.nodes[0]: k.type for k in partition(g, RULES)}
    assert walk["short"] == "conv-bn-add"  # the depth-first walk reaches it first
    first = with_join_operand(RULES, {"operand": "first", "evidence": {}})
    assert first.join_operand("add") == "first"
    ks = {k.nodes[0]: k for k in partition(g, first)}
    assert ks["short"].type == "conv-bn" and "add" in ks["body"].nodes
    # with the shortcut as the first operand it stays where the walk put it
    g2 = _residual("short")
    assert "add" in {k.nodes[0]: k for k in partition(g2, first)}["short"].nodes


def test_update_rules_file_keeps_other_fields(tmp_path):
    p = tmp_path / "r.json"
    data = RULES.to_dict()
    data["detection"] = {"cases": 3}
    p.write_text(json.dumps(data))
    rules = update_rules_file(p, {"operand": "first", "evidence": {"add(A, B)": "convA"}})
    saved = json.loads(p.read_text())
    assert saved["detection"] == {"cases": 3}
    assert rules.join_operand("add") == "first"
    assert FusionRules.from_json(p).join_operand("add") == "first"
    assert FusionRules.from_decisions("x").join_operand("add") is None

