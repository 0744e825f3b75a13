"""Kernel configs the partitioner memoises equal those read off the graph afresh."""

from __future__ import annotations

import pytest

from nnmeter import zoo
from nnmeter.fusion.rules import load_rules
from nnmeter.ir import GraphBuilder
from nnmeter.kernels import KERNEL_TYPES
from nnmeter.partition import partition

from .test_reference import GENEROUS


@pytest.mark.parametrize("family", zoo.FAMILY_NAMES)
def test_memoised_configs_equal_fresh_ones_on_zoo_variants(family):
    graphs = [v.build() for v in zoo.sample_variants(family, 2, seed=5)]
    for rules in (load_rules("ort-cpu"), GENEROUS):
        for g in graphs + graphs:  # the second pass reads every config from the memo
            for k in partition(g, rules):
                assert k.config == KERNEL_TYPES.get(k.type).config_from_nodes(g, k.nodes), \
                    (family, k.type, k.nodes)


def test_repeated_layers_share_one_config_object():
    b = GraphBuilder("rep", (1, 8, 8, 8))
    y = b.relu(b.conv(b.x, 8, name="c0"), name="r0")
    y = b.relu(b.conv(y, 8, name="c1"), name="r1")
    g = b.build([b.maxpool(y, name="p")])
    kernels = partition(g, load_rules("ort-cpu"))
    convs = [k for k in kernels if k.type.startswith("conv")]
    assert len(convs) == 2 and convs[0].config == convs[1].config
    assert convs[0].config is convs[1].config


def test_head_config_memo_matches_head_config():
    kt = KERNEL_TYPES.get("conv-bn-relu")
    b = GraphBuilder("h", (1, 4, 6, 6))
    g = b.build([b.conv(b.x, 8, 3, 2, name="c")])
    node = g["c"]
    assert kt.config_of_head(node) == kt.head_config(node)
    assert kt.config_of_head(node) is kt.config_of_head(node)
