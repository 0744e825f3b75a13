"""build_mobile reuses the nodes of inverted bottlenecks built before (same name, input
and parameters): the graphs are the ones built afresh, node for node and in order."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nnmeter import zoo
from nnmeter.zoo import _blocks


@pytest.mark.parametrize("family", ["mobilenetv2", "mobilenetv3", "mnasnet", "proxylessnas"])
def test_reused_blocks_build_the_fresh_graph(family):
    fam = zoo.get_family(family)
    rng = np.random.default_rng(4)
    configs = [fam.sample(rng) for _ in range(6)] + [fam.base_config()]
    # a one-block mutation, as a search makes: the other blocks come back unchanged
    first = configs[0]
    blocks = list(first.blocks)
    k, e, o, s, se, act = blocks[-1]
    blocks[-1] = (k, e + 8, o, s, se, act)
    configs.append(dataclasses.replace(first, blocks=tuple(blocks)))
    _blocks._BLOCKS.clear()
    fresh = [fam.build(c) for c in configs]
    again = [fam.build(c) for c in configs]  # every block from the memo
    _blocks._BLOCKS.clear()
    for a, b in zip(fresh, again):
        assert a.structurally_equal(b) and list(a.nx) == list(b.nx)
        assert a.cost() == b.cost()
    # the mutated network shares the nodes of its unchanged blocks with its parent
    parent, child = again[0], again[-1]
    shared = [n for n in parent.nx if n.startswith("features.1.")]
    assert shared and all(parent.node(n) is child.node(n) for n in shared)
    last = f"features.{len(first.blocks)}.project.conv"
    assert parent.node(last) is not child.node(last)


def test_memo_is_bounded(monkeypatch):
    fam = zoo.get_family("mobilenetv2")
    monkeypatch.setattr(_blocks, "BLOCKS_LIMIT", 5)
    _blocks._BLOCKS.clear()
    fam.build(fam.base_config())
    assert 0 < len(_blocks._BLOCKS) <= 5
    _blocks._BLOCKS.clear()
