"""The DFS kernel partitioner on tiny graphs with synthetic rules."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.kernels import KERNEL_TYPES
from nnmeter.partition import kernel_graph, match_blocks, partition

CONV_RULES = FusionRules.from_decisions(
    "toy",
    pairs={("conv", "bn"): True, ("bn", "relu"): True, ("conv", "relu"): True,
           ("relu", "add"): True, ("bn", "add"): True, ("add", "relu"): True,
           ("dwconv", "bn"): True, ("bn", "relu6"): True, ("gap", "reshape"): True,
           ("reshape", "fc"): True},
    multi_consumer={"relu": False, "conv": False},
)


def _resnet_block():
    b = GraphBuilder("res", (1, 16, 8, 8))
    x = b.relu(b.bn(b.conv(b.x, 16, name="c0"), name="b0"), name="r0")
    y = b.relu(b.bn(b.conv(x, 16, name="c1"), name="b1"), name="r1")
    y = b.bn(b.conv(y, 16, name="c2"), name="b2")
    y = b.relu(b.add_(y, x, name="add"), name="r2")
    y = b.flatten(b.gap(y, name="gap"), name="flat")
    return b.build([b.fc(y, 10, name="fc")])


def test_resnet_block_kernels():
    kernels = partition(_resnet_block(), CONV_RULES)
    assert [k.type for k in kernels] == [
        "conv-bn-relu", "conv-bn-relu", "conv-bn-add-relu", "gap", "fc"]
    assert kernels[2].nodes == ("c2", "b2", "add", "r2")
    assert kernels[3].nodes == ("gap", "flat")  # the elided flatten joins its producer


def test_input_nodes_are_not_kernels_and_every_op_is_covered():
    g = _resnet_block()
    kernels = partition(g, CONV_RULES)
    covered = [n for k in kernels for n in k.nodes]
    assert "input" not in covered
    assert sorted(covered) == sorted(n.name for n in g.topological_nodes() if n.op != "input")


def test_multi_consumer_rule():
    b = GraphBuilder("mc", (1, 8, 8, 8))
    c = b.conv(b.x, 8, name="c")
    g = b.build([b.relu(c, name="r"), b.add_(c, b.x, name="a")])
    no = partition(g, FusionRules.from_decisions("t", pairs={("conv", "relu"): True},
                                                 multi_consumer={"conv": False}))
    assert [k.nodes for k in no] == [("c",), ("r",), ("a",)]
    yes = partition(g, FusionRules.from_decisions("t", pairs={("conv", "relu"): True},
                                                  multi_consumer={"conv": True}))
    assert [k.nodes for k in yes] == [("c", "r"), ("a",)]


def test_no_rules_means_one_kernel_per_op():
    g = _resnet_block()
    kernels = partition(g, FusionRules.from_decisions("none"))
    assert len(kernels) == len(g) - 1
    assert all(k.type in KERNEL_TYPES for k in kernels)


def test_fusion_that_would_form_an_unnamed_type_is_refused():
    b = GraphBuilder("m", (1, 8, 8, 8))
    g = b.build([b.maxpool(b.relu(b.x, name="r"), name="p")])
    kernels = partition(g, FusionRules.from_decisions("t", pairs={("relu", "maxpool"): True}))
    assert [k.type for k in kernels] == ["relu", "maxpool"]


def test_blocks_are_grouped_before_pairwise_fusion():
    b = GraphBuilder("se", (1, 16, 8, 8))
    y = b.conv(b.x, 16, name="c")
    g = b.build([b.se(y, name="se")])
    assert [m[0] for m in match_blocks(g)] == ["se"]
    with_block = partition(g, FusionRules.from_decisions("t", blocks={"se": True}))
    assert [k.type for k in with_block] == ["conv", "se"]
    without = partition(g, FusionRules.from_decisions("t", blocks={"se": False}))
    assert "se" not in [k.type for k in without] and len(without) == 7


def test_decomposed_hswish_block():
    b = GraphBuilder("hs", (1, 8, 4, 4))
    t = b.relu6(b.eltwise_const("add", b.x, (1,), name="a"), name="r6")
    g = b.build([b.eltwise_const("div", b.mul(b.x, t, name="m"), (1,), name="d")])
    kernels = partition(g, FusionRules.from_decisions("t", blocks={"hswish": True}))
    assert [(k.type, k.nodes) for k in kernels] == [("hswish", ("a", "r6", "m", "d"))]
    assert kernels[0].config.cin == 8


def _random_dag(seed: int):
    rng = random.Random(seed)
    b = GraphBuilder(f"rand{seed}", (1, 8, 8, 8))
    refs = [b.x]
    for i in range(25):
        kind = rng.choice(["conv", "bn", "relu", "add", "add", "concat", "dwconv"])
        x = rng.choice(refs[-4:])
        if kind == "conv":
            y = b.conv(x, 8, name=f"n{i}")
        elif kind == "dwconv":
            y = b.dwconv(x, name=f"n{i}")
        elif kind == "bn":
            y = b.bn(x, name=f"n{i}")
        elif kind == "relu":
            y = b.relu(x, name=f"n{i}")
        elif kind == "add":
            y = b.add_(x, rng.choice(refs), name=f"n{i}")
        else:
            y = b.conv(b.concat([x, rng.choice(refs)], name=f"n{i}"), 8, 1, name=f"n{i}c")
        refs.append(y)
    return b.build([refs[-1]] + [r for r in refs[1:-1] if rng.random() < 0.1])


PERMISSIVE = FusionRules.from_decisions(
    "all", pairs={(a, c): True for a in ("conv", "dwconv", "bn", "relu", "add", "concat")
                  for c in ("conv", "dwconv", "bn", "relu", "add", "concat")},
    multi_consumer={o: True for o in ("conv", "dwconv", "bn", "relu", "add", "concat")},
)


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_acyclic_deterministic_typed(seed):
    g = _random_dag(seed)
    first = partition(g, PERMISSIVE)
    again = partition(g.copy(), PERMISSIVE)
    assert first == again  # deterministic
    kg = kernel_graph(g, first)
    assert nx.is_directed_acyclic_graph(kg)
    # returned in a topological order of the kernel graph
    index = {i: i for i in range(len(first))}
    assert all(index[u] < index[v] for u, v in kg.edges)
    for k in first:
        assert k.type != "other" and k.type in KERNEL_TYPES
        assert len(k.features()) == len(k.kernel_type.feature_names)


def test_diamond_never_forms_a_cycle():
    # a -> b -> d and a -> c -> d: merging d into b's kernel must not need c first
    b = GraphBuilder("diamond", (1, 8, 8, 8))
    a = b.conv(b.x, 8, name="a")
    left = b.relu(a, name="l")
    right = b.conv(a, 8, name="r")
    g = b.build([b.add_(left, right, name="d")])
    kernels = partition(g, PERMISSIVE)
    assert nx.is_directed_acyclic_graph(kernel_graph(g, kernels))
    assert [k.nodes for k in kernels][0] == ("a", "l")


def test_two_branch_test_decides_residual_joins():
    g = _resnet_block()
    pairs = {("conv", "bn"): True, ("conv", "relu"): True, ("bn", "relu"): True,
             ("add", "relu"): True, ("gap", "reshape"): True}
    # the pair tests say add does not fuse, the two-branch test says it does
    yes = FusionRules.from_decisions("t", pairs=pairs, multi_input={("conv", "add"): True})
    assert [k.type for k in partition(g, yes)][2] == "conv-bn-add-relu"
    assert yes.multi_input_decision("conv", "add") is True
    assert yes.multi_input_decision("dwconv", "add") is None
    # and the other way round: a tested "no" vetoes even a fusing pair rule
    no = FusionRules.from_decisions("t", pairs={**pairs, ("bn", "add"): True},
                                    multi_input={("conv", "add"): False})
    kernels = partition(g, no)
    assert [k.type for k in kernels][2:4] == ["conv-bn", "add-relu"]
