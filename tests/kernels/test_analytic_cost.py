"""Closed-form kernel costs equal the cost of the built single-kernel graph, bit for bit.

Trained regressors read FLOPs, params and bytes as features, so ``KernelType.cost``
must give exactly what ``kernel_cost(build_graph(config))`` gives, whichever way it
computes them: on every config of the committed kernel data, on every kernel of the
zoo's base models under every shipped rules file, and over every fused tail.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from nnmeter import zoo
from nnmeter.errors import ShapeInferenceError
from nnmeter.fusion import load_rules, rules_dir
from nnmeter.ir import GraphBuilder
from nnmeter.ir.ops import ACTIVATIONS
from nnmeter.kernels import KERNEL_TYPES, kernel_cost, kernel_from_nodes
from nnmeter.kernels._tail import parse_tail
from nnmeter.kernels.conv import ConvConfig
from nnmeter.partition import partition

DATASETS = Path(__file__).resolve().parents[2] / "datasets" / "kernels"

#: kernel types that build their graph for the cost (no closed form)
GRAPH_ONLY = {"other"}


def assert_same_cost(kt, config):
    """The closed form exists for ``config`` and equals the built graph's cost."""
    closed = kt.analytic_cost(config)
    assert closed is not None, f"{kt.name}: no closed form for {config}"
    built = kernel_cost(kt.build_graph(config, validate=False))
    assert closed == built, f"{kt.name} {config}: closed form {closed}, graph {built}"
    # exact ints, not merely equal numbers: the features are float() of them
    assert all(type(v) is int for v in (closed.flops, closed.params, closed.memory_bytes))
    assert kt.cost(config) == built


def test_every_stored_config_costs_the_same_in_closed_form():
    files = sorted(DATASETS.glob("*/*.jsonl"))
    if not files:
        pytest.skip(f"no kernel data under {DATASETS}")
    seen = set()
    for path in files:
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if "kernel_type" not in row or "config" not in row:
                continue  # build logs and other records
            kt = KERNEL_TYPES.get(row["kernel_type"])
            config = kt.config_from_dict(row["config"])
            if (kt.name, config) in seen:
                continue
            seen.add((kt.name, config))
            if kt.name in GRAPH_ONLY:
                continue
            assert_same_cost(kt, config)
    assert len(seen) > 1000  # the data is there: the check is not empty


@pytest.mark.parametrize("rules_file", sorted(p.name for p in rules_dir().glob("*.json")))
def test_zoo_kernels_cost_the_same_in_closed_form(rules_file):
    rules = load_rules(rules_dir() / rules_file)
    seen = set()
    for name in zoo.FAMILY_NAMES:
        family = zoo.get_family(name)
        for k in partition(family.build(family.base_config()), rules):
            if (k.type, k.config) in seen:
                continue
            seen.add((k.type, k.config))
            kt = KERNEL_TYPES.get(k.type)
            if kt.name in GRAPH_ONLY:
                assert kt.analytic_cost(k.config) is None
                continue
            assert_same_cost(kt, k.config)
    assert len(seen) > 20
    if rules.fuses("conv", "bn"):
        # fused tails were met (conv-bn-relu...), not only single ops
        assert any(t.count("-") >= 2 for t, _ in seen)


def test_some_committed_rules_fuse_conv_tails():
    """The closed-form check above meets fused kernels on at least one backend (openvino-cpu's
    rules fuse nothing into a conv: its kernels are single ops)."""
    fusing = [f.name for f in rules_dir().glob("*.json")
              if load_rules(f).fuses("conv", "bn")]
    assert fusing


def _tails(allow_bn: bool, allow_add: bool):
    acts = [()] + [(a,) for a in sorted(ACTIVATIONS)]
    for bn, act, add, post in itertools.product(((), ("bn",)), acts, ((), ("add",)), acts):
        tail = bn + act + add + (post if add else ())
        if (not add and post) or parse_tail(tail, allow_bn=allow_bn, allow_add=allow_add) is None:
            continue
        yield tail


TAIL_CONFIGS = {
    "conv": [dict(h=7, w=9, cin=12, cout=20, kernel=3, stride=2, groups=4),
             dict(h=5, w=6, cin=3, cout=8, kernel=1, stride=1, pads=(0, 1, 0, 1)),
             dict(h=8, w=8, cin=16, cout=16, kernel=5, stride=3, groups=16, pads=(2, 2, 1, 1)),
             dict(h=6, w=4, cin=5, cout=7, kernel=2, stride=1)],  # even kernel, 'same'
    "dwconv": [dict(h=14, w=10, cin=32, kernel=3, stride=1),
               dict(h=9, w=9, cin=7, kernel=5, stride=2, pads=(1, 2, 2, 1)),
               dict(h=8, w=6, cin=3, kernel=4, stride=3)],
    "convtranspose": [dict(h=8, w=6, cin=16, cout=8, kernel=3, stride=2),
                      dict(h=5, w=5, cin=3, cout=4, kernel=4, stride=2),
                      dict(h=3, w=7, cin=2, cout=5, kernel=2, stride=1),
                      dict(h=4, w=4, cin=6, cout=6, kernel=5, stride=3)],
    "fc": [dict(cin=428, cout=10), dict(cin=7, cout=13, rows=12)],
    "bn": [dict(h=7, w=5, cin=8), dict(h=1, w=1, cin=3)],
    "add": [dict(h=7, w=5, cin=8), dict(h=3, w=4, cin=5, const=True)],
}


def test_mul_add_tails_cost_the_same_in_closed_form():
    for name in ("mul-add", "mul-add-relu", "mul-add-sigmoid"):
        kt = KERNEL_TYPES.get(name)
        for o in ("same", "channel", "const"):
            assert_same_cost(kt, kt.config_from_dict(dict(h=7, w=5, cin=8, operand=o)))


@pytest.mark.parametrize("family", sorted(TAIL_CONFIGS))
def test_every_tail_costs_the_same_in_closed_form(family):
    cls = type(KERNEL_TYPES.get(family))
    tails = list(_tails(cls.allow_bn, cls.allow_add))
    assert len(tails) >= 10
    for tail in tails:
        kt = KERNEL_TYPES.get("-".join((family,) + tail))
        for fields in TAIL_CONFIGS[family]:
            assert_same_cost(kt, kt.config_from_dict(fields))


OTHER_CONFIGS = {
    **{act: [dict(h=7, w=5, cin=8)] for act in sorted(ACTIVATIONS)},
    "maxpool": [dict(h=28, w=28, cin=16, kernel=3, stride=2, pads=[1, 1, 1, 1]),
                dict(h=7, w=9, cin=3, kernel=2, stride=2, ceil_mode=True),
                dict(h=10, w=11, cin=4, kernel=3, stride=3, pads=[0, 1, 1, 0], ceil_mode=True)],
    "avgpool": [dict(h=28, w=28, cin=16),
                dict(h=9, w=7, cin=5, kernel=3, stride=1, pads=[1, 1, 1, 1]),
                dict(h=7, w=7, cin=2, kernel=3, stride=2, ceil_mode=True)],
    "gap": [dict(h=7, w=7, cin=512), dict(h=1, w=3, cin=2)],
    "se": [dict(h=7, w=7, cin=64, mid=16), dict(h=5, w=3, cin=10, mid=3, inner_act="swish",
                                               gate="sigmoid")],
    "mul": [dict(h=7, w=5, cin=8, operand=o) for o in ("same", "channel", "const")],
    "concat": [dict(h=7, w=5, cins=list(range(1, n + 1))) for n in (1, 2, 4, 6)],
    "split": [dict(h=7, w=5, cin=8, sizes=[4, 4]), dict(h=2, w=3, cin=9, sizes=[1, 3, 5])],
    "channelshuffle": [dict(h=7, w=5, cin=8, groups=2), dict(h=3, w=3, cin=12, groups=3)],
    "reshape": [dict(in_shape=[1, 8, 2, 2], out_shape=[1, 32]),
                dict(in_shape=[2, 6], out_shape=[3, 2, 2])],
    "flatten": [dict(in_shape=[1, 8, 2, 3], out_shape=[1, 48]),
                dict(in_shape=[2, 4, 3], out_shape=[8, 3], axis=2),
                dict(in_shape=[2, 4, 3], out_shape=[2, 12], axis=-2)],
    "transpose": [dict(in_shape=[1, 8, 2, 3], out_shape=[1, 2, 3, 8], perm=[0, 2, 3, 1]),
                  dict(in_shape=[2, 3], out_shape=[3, 2])],  # no perm: reversed axes
    "identity": [dict(in_shape=[1, 4, 3, 3], out_shape=[1, 4, 3, 3])],
}


@pytest.mark.parametrize("name", sorted(OTHER_CONFIGS))
def test_other_kernel_types_cost_the_same_in_closed_form(name):
    kt = KERNEL_TYPES.get(name)
    for fields in OTHER_CONFIGS[name]:
        assert_same_cost(kt, kt.config_from_dict(fields))


def test_configs_without_a_closed_form_build_the_graph():
    kt = KERNEL_TYPES.get("conv-bn-relu")
    plain = ConvConfig(h=8, w=8, cin=4, cout=6, kernel=3, stride=1)
    # numpy integers (a config made by hand from arrays) take the graph path, same figures
    numpy_ints = ConvConfig(h=np.int64(8), w=np.int64(8), cin=4, cout=6, kernel=3, stride=1)
    assert kt.analytic_cost(numpy_ints) is None
    assert kt.cost(numpy_ints) == kt.analytic_cost(plain)
    # a config the graph cannot hold still raises the graph's own error
    too_small = ConvConfig(h=2, w=2, cin=4, cout=6, kernel=5, stride=1, pads=(0, 0, 0, 0))
    assert kt.analytic_cost(too_small) is None
    with pytest.raises(ShapeInferenceError):
        kt.cost(too_small)
    split = KERNEL_TYPES.get("split")
    bad_split = split.config_from_dict(dict(h=2, w=2, cin=8, sizes=[3, 3]))
    assert split.analytic_cost(bad_split) is None
    with pytest.raises(ShapeInferenceError):
        split.cost(bad_split)


def test_other_kernels_keep_the_graph_path():
    b = GraphBuilder("t", (1, 4, 10))
    g = b.build([b.softmax(b.x, axis=1, name="sm")])  # not the last axis: ``other``
    k = kernel_from_nodes(g, ["sm"])
    kt = k.kernel_type
    assert k.type == "other" and kt.analytic_cost(k.config) is None
    assert kt.cost(k.config) == kernel_cost(kt.build_graph(k.config, validate=False))
