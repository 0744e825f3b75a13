"""GraphView and the kernel order: the shortcuts taken when the insertion order (or the
order of kernels' first nodes) is already topological, and the full passes otherwise."""

from __future__ import annotations

from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.partition import GraphView, partition
from nnmeter.partition import _kernel_order

from .reference_partition import partition as reference_partition


def _diamond():
    b = GraphBuilder("m", (1, 4, 8, 8))
    left = b.relu(b.x, name="left")
    right = b.relu6(b.x, name="right")
    return b.build([b.add_(left, right, name="join")])


def test_view_matches_graph_order_on_a_built_graph():
    g = _diamond()
    view = GraphView(g)
    assert view.order == list(g.topological_order())
    assert view.pos == {n: i for i, n in enumerate(view.order)}
    assert view.preds["join"] == ["left", "right"]
    assert view.succs["input"] == ["left", "right"]
    assert view.shapes_known and not view.multi_output


def test_view_sorts_when_insertion_order_is_not_topological():
    g = _diamond()
    # re-adding an existing node keeps its place in the node dict but gives it a later
    # rank, so the insertion order no longer gives the ranks in order
    left = g.node("left")
    g.nx.add_node("left", node=left, order=10_000)
    g._topo = None
    view = GraphView(g)
    assert view.order == list(g.topological_order())
    assert view.order.index("right") < view.order.index("left")
    assert view.succs["input"] == ["right", "left"]
    rules = FusionRules.from_decisions("toy", pairs={("relu", "add"): True})
    assert [(k.type, k.nodes) for k in partition(g, rules)] == \
        [(k.type, k.nodes) for k in reference_partition(g, rules)]


def test_kernel_order_falls_back_to_kahn_when_first_nodes_are_not_topological():
    g = _diamond()
    view = GraphView(g)
    # kernel 0 starts before kernel 1 but reads its output
    members = [["left", "join"], ["right"]]
    kernel_of = {"left": 0, "join": 0, "right": 1}
    assert _kernel_order(view, members, kernel_of, g.name) == [1, 0]
    # the shortcut: first nodes in topological order
    members = [["left"], ["right", "join"]]
    kernel_of = {"left": 0, "right": 1, "join": 1}
    assert _kernel_order(view, members, kernel_of, g.name) == [0, 1]
