"""Kernel types: one feature function per type, lengths, hand-computed values, round trips."""

from __future__ import annotations

import numpy as np
import pytest

from nnmeter.errors import UnknownNameError
from nnmeter.ir import GraphBuilder
from nnmeter.kernels import KERNEL_TYPES, Kernel, kernel_from_nodes, kernel_type_of
from nnmeter.kernels.concat import ConcatConfig
from nnmeter.kernels.conv import ConvConfig

# one representative config per registered family
EXAMPLES = {
    "conv-bn-relu": dict(h=28, w=28, cin=64, cout=128, kernel=3, stride=1),
    "dwconv-bn-relu6": dict(h=14, w=14, cin=32, kernel=5, stride=2),
    "convtranspose-bn-relu": dict(h=8, w=8, cin=16, cout=8, kernel=3, stride=2),
    "fc-relu": dict(cin=428, cout=10),
    "bn-relu": dict(h=7, w=7, cin=8),
    "add-relu": dict(h=7, w=7, cin=8),
    "relu": dict(h=7, w=7, cin=8),
    "hswish": dict(h=7, w=7, cin=8),
    "maxpool": dict(h=28, w=28, cin=16, kernel=3, stride=2, pads=(1, 1, 1, 1)),
    "avgpool": dict(h=28, w=28, cin=16),
    "gap": dict(h=7, w=7, cin=512),
    "mul": dict(h=7, w=7, cin=8, operand="channel"),
    "mul-add-relu": dict(h=7, w=7, cin=8, operand="channel"),
    "mul-add": dict(h=7, w=7, cin=8, operand="same"),
    "concat": dict(h=7, w=7, cins=(8, 16, 24)),
    "split": dict(h=7, w=7, cin=8, sizes=(4, 4)),
    "lrn": dict(h=7, w=7, cin=8, size=5),
    "channelshuffle": dict(h=7, w=7, cin=8, groups=2),
    "se": dict(h=7, w=7, cin=64, mid=16),
    "reshape": dict(in_shape=(1, 8, 2, 2), out_shape=(1, 32)),
    "transpose": dict(in_shape=(1, 8, 2, 2), out_shape=(1, 2, 2, 8), perm=(0, 2, 3, 1)),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_type_builds_features_and_round_trips(name):
    kt = KERNEL_TYPES.get(name)
    cfg = kt.config_from_dict(EXAMPLES[name])
    g = kt.build_graph(cfg)
    g.validate()
    f = kt.features(cfg)
    assert f.shape == (len(kt.feature_names),) and f.dtype == np.float64
    assert np.all(np.isfinite(f))
    assert kt.config_from_dict(kt.config_to_dict(cfg)) == cfg
    # the graph the builder profiles partitions back into the same config
    names = [n.name for n in g.topological_nodes() if n.op != "input"]
    assert kt.config_from_nodes(g, names) == cfg


def test_conv_features_match_hand_computation():
    kt = KERNEL_TYPES.get("conv-bn-relu")
    cfg = ConvConfig(h=28, w=28, cin=64, cout=128, kernel=3, stride=1)
    f = dict(zip(kt.feature_names, kt.features(cfg)))
    macs = 28 * 28 * 128 * 64 * 9
    elems = 128 * 28 * 28
    # conv 2*MACs, bn 2/element, relu 1/element
    assert f["FLOPs"] == 2 * macs + 2 * elems + elems
    assert f["params"] == 64 * 128 * 9 + 128 + 2 * 128
    # fused: input + weights (bn stores 4C) + output only, no intermediate tensors
    assert f["bytes"] == 4 * (64 * 28 * 28 + 64 * 128 * 9 + 128 + 4 * 128 + elems)
    assert (f["H"], f["W"], f["CIN"], f["COUT"], f["K"], f["S"]) == (28, 28, 64, 128, 3, 1)
    assert f["tail_bn"] == 1 and f["act_relu"] == 1 and f["act_relu6"] == 0
    assert f["tail_add"] == 0


def test_gap_features_use_input_height_not_output():
    b = GraphBuilder("m", (1, 32, 14, 14))
    g = b.build([b.gap(b.x, name="g")])
    k = kernel_from_nodes(g, ["g"])
    f = dict(zip(k.kernel_type.feature_names, k.features()))
    assert k.type == "gap" and f["H"] == 14 and f["W"] == 14 and f["CIN"] == 32
    assert f["FLOPs"] == 32 * 14 * 14 + 32


def test_concat_has_fixed_length_features():
    kt = KERNEL_TYPES.get("concat")
    two = kt.features(ConcatConfig(h=7, w=7, cins=(16, 32)))
    six = kt.features(ConcatConfig(h=7, w=7, cins=(1, 2, 3, 4, 5, 6)))
    assert len(two) == len(six) == len(kt.feature_names) == 8
    assert list(two) == [7, 7, 2, 16, 32, 0, 0, 48]
    assert list(six) == [7, 7, 6, 1, 2, 3, 4 + 5 + 6, 21]


def test_kernel_type_of_names():
    assert kernel_type_of(("conv", "bn", "relu")) == "conv-bn-relu"
    assert kernel_type_of(("conv", "bn", "add", "relu")) == "conv-bn-add-relu"
    assert kernel_type_of(("dwconv", "identity", "bn")) == "dwconv-bn"
    assert kernel_type_of(("gap", "flatten")) == "gap"
    assert kernel_type_of(("gap", "conv", "relu", "conv", "hsigmoid", "mul")) == "se"
    assert kernel_type_of(("add", "relu6", "mul", "div")) == "hswish"
    assert kernel_type_of(("reshape", "transpose", "reshape")) == "channelshuffle"
    assert kernel_type_of(("relu", "maxpool")) == "other"
    assert kernel_type_of(("conv", "relu", "bn")) == "other"
    assert kernel_type_of(("softmax",)) == "softmax"
    assert kernel_type_of(("pad",)) == "other"
    assert kernel_type_of(("reshape",)) == "reshape"
    # a gate's multiply with the residual add after it (OpenVINO's element-wise chains);
    # a multiply and an activation alone stay apart
    assert kernel_type_of(("mul", "add", "relu")) == "mul-add-relu"
    assert kernel_type_of(("mul", "relu")) == "other"
    assert kernel_type_of(("mul", "add", "bn")) == "other"


def test_variants_resolve_and_unknown_names_fail():
    kt = KERNEL_TYPES.get("dwconv-bn-hswish-add-relu")
    assert kt.tail == ("bn", "hswish", "add", "relu") and "dwconv-bn-hswish-add-relu" in KERNEL_TYPES
    with pytest.raises(UnknownNameError, match="conv-bn-relu"):
        KERNEL_TYPES.get("conv-relu-bn")


def test_features_reject_a_config_of_another_type():
    with pytest.raises(TypeError, match="ConcatConfig"):
        KERNEL_TYPES.get("concat").features(ConvConfig(1, 1, 1, 1))


def test_kernel_as_dict_round_trip_and_other_rebuilds_its_op():
    b = GraphBuilder("m", (1, 4, 10))
    g = b.build([b.softmax(b.x, axis=1, name="sm")])  # not the last axis: ``other``
    k = kernel_from_nodes(g, ["sm"])
    assert k.type == "other" and k.config.op == "softmax"
    assert Kernel.from_dict(k.as_dict()) == k
    rebuilt = k.kernel_type.build_graph(k.config)
    assert rebuilt.op_counts()["softmax"] == 1


def test_a_split_of_a_spatial_axis_is_no_channel_split_kernel():
    from nnmeter.fusion.rules import FusionRules
    from nnmeter.partition import partition

    b = GraphBuilder("crop", (1, 8, 6, 6))
    _, kept = b.split(b.x, (1, 5), axis=2, name="crop")
    g = b.build([b.relu(kept, name="r")])
    ks = partition(g, FusionRules.from_decisions("toy", pairs={}))
    assert [k.type for k in ks] == ["other", "relu"]
    # a channel split (axis 1 or -3 of a 4-D tensor) is one
    for axis in (1, -3):
        b = GraphBuilder("halves", (1, 8, 6, 6))
        a, c = b.split(b.x, (4, 4), axis=axis, name="sp")
        ks = partition(b.build([b.relu(a, name="r"), c]), FusionRules.from_decisions("toy", pairs={}))
        assert ks[0].type == "split" and ks[0].config.sizes == (4, 4)
