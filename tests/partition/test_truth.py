"""Kernels against the nodes a runtime reports executing."""

from __future__ import annotations

from types import SimpleNamespace as K

from nnmeter.backends.base import ExecutedNode
from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.canonical import for_backend
from nnmeter.partition.truth import compare_with_runtime, ir_name_map, merge_absorbed


def _graph():
    b = GraphBuilder("t", (1, 8, 8, 8))
    y = b.conv(b.x, 8, name="c1")
    y = b.eltwise_const("mul", y, (1, 8, 1, 1), name="scale")  # folded into c1
    y = b.relu(y, name="r1")
    z = b.conv(y, 8, name="c2")
    s = b.add_(z, y, name="add")
    return for_backend(b.build([b.relu(s, name="r2")]), "ort-cpu")


def test_name_map_follows_absorbed_ops():
    g = _graph()
    names = ir_name_map(g)
    assert names["scale"] == "c1" and names["c1"] == "c1" and "input" not in names


def test_equal_groups_extra_kernels_and_first_difference():
    g = _graph()
    kernels = [K(type="conv-relu", nodes=("c1", "r1")), K(type="conv-add", nodes=("c2", "add")),
               K(type="relu", nodes=("r2",))]
    executed = [ExecutedNode("n1", "Conv", ("w_c1", "c1", "scale", "r1")),
                ExecutedNode("reorder", "ReorderOutput", ()),
                ExecutedNode("n2", "Conv", ("c2", "add", "r2"))]
    c = compare_with_runtime(g, kernels, executed)
    assert (c.kernels, c.runtime_nodes, c.runtime_compute, c.runtime_equal) == (3, 3, 2, 1)
    assert c.share_equal == 0.5
    assert c.extra_kernels == ("conv-add:c2", "relu:r2")
    assert "Conv['add', 'c2', 'r2']" in c.first_difference
    # the predictor runs r2 inside conv-add: with that, every runtime node is matched
    cp = compare_with_runtime(g, kernels, executed, {2: 1})
    assert cp.runtime_equal == 2 and cp.first_difference is None and cp.kernels == 3
    assert cp.as_dict()["share_equal"] == 1.0


def test_merge_absorbed_follows_chains():
    ks = [K(type="a", nodes=("x",)), K(type="b", nodes=("y",)), K(type="c", nodes=("z",))]
    groups = merge_absorbed(ks, {2: 1, 1: 0})
    assert [(g.type, g.nodes) for g in groups] == [("a+b+c", ("x", "y", "z"))]


def test_an_op_run_in_several_passes_is_one_runtime_group():
    g = _graph()
    kernels = [K(type="conv-relu", nodes=("c1", "r1")), K(type="conv-add-relu",
                                                          nodes=("c2", "add", "r2"))]
    # MNN runs a grouped convolution as one convolution per group, each covering it
    executed = [ExecutedNode("c1__group__0", "Convolution", ("c1", "r1")),
                ExecutedNode("c1__group__1", "Convolution", ("c1", "r1")),
                ExecutedNode("c2", "Convolution", ("c2", "add", "r2"))]
    c = compare_with_runtime(g, kernels, executed)
    assert (c.runtime_nodes, c.runtime_compute, c.runtime_equal) == (3, 2, 2)
