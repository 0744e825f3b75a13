"""Fusion test cases: which exist, their shapes, and shared models."""

from __future__ import annotations

from nnmeter.fusion.testcases import (
    PAIR_OPS, TestShapes, build_testcases, graph_signature, pair_skip_reason,
)


def test_pairs_cover_every_sensible_ordered_pair():
    cases = build_testcases(kinds=["pair"])
    names = {c.name for c in cases}
    expected = {f"{a}->{b}" for a in PAIR_OPS for b in PAIR_OPS if pair_skip_reason(a, b) is None}
    assert names == expected
    assert {"conv->relu", "conv->bn", "dwconv->bn", "gap->fc", "fc->relu", "conv->add",
            "add->relu", "conv->reshape", "reshape->fc", "gap->conv"} <= names
    assert "fc->conv" not in names and pair_skip_reason("fc", "conv").startswith("C")
    assert "relu->relu6" not in names


def test_pair_models_share_the_input_and_chain_shapes():
    s = TestShapes(hw=14, cin=8, cout=16, balanced=False)
    c = build_testcases(s, only=["conv->maxpool"])[0]
    one, two, blk = c.models["op1"], c.models["op2"], c.models["block"]
    assert one.node("input").output_shape == blk.node("input").output_shape == (1, 8, 14, 14)
    assert two.node("op2").input_shape == one.node("op1").output_shape == (1, 16, 14, 14)
    assert blk.node("op2").output_shape == (1, 16, 7, 7)  # pool kernel 3 stride 2 pad 1
    # op1 alone is the same model as in any other pair starting with conv
    other = build_testcases(s, only=["conv->relu"])[0]
    assert graph_signature(other.models["op1"]) == graph_signature(one)


def test_fc_pairs_use_vectors_and_gap_fc_flattens():
    c = build_testcases(TestShapes(balanced=False), only=["relu->fc"])[0]
    assert c.models["block"].node("input").output_shape == (1, 428)
    g = build_testcases(only=["gap->fc"])[0].models["block"]
    assert g.node("op1").output_shape == (1, 64) and g.node("op2").output_shape == (1, 428)


def test_balanced_shapes_shrink_the_heavy_op_of_heavy_light_pairs():
    s = TestShapes()  # balanced by default
    cases = {c.name: c for c in build_testcases(
        s, only=["conv->relu", "relu->conv", "conv->conv", "fc->relu", "relu->fc",
                 "maxpool->relu", "conv->{relu,add}"])}
    blk = cases["conv->relu"].models["block"]
    assert blk.node("input").output_shape == (1, s.light_channels, s.hw, s.hw)
    assert blk.node("op1").attrs.kernel == (1, 1) and blk.node("op1").output_shape[1] == s.cout
    # op2 alone reads exactly what op1 writes
    assert cases["conv->relu"].models["op2"].node("op2").input_shape == \
        blk.node("op1").output_shape
    blk = cases["relu->conv"].models["block"]
    assert blk.node("op2").attrs.kernel == (1, 1)
    assert blk.node("op2").output_shape == (1, s.light_channels, s.hw, s.hw)
    # two heavy ops keep nn-Meter's shapes
    assert cases["conv->conv"].models["block"].node("op1").attrs.kernel == (3, 3)
    assert cases["fc->relu"].models["block"].node("input").output_shape == \
        (s.vector_batch, s.light_channels)
    assert cases["fc->relu"].models["block"].node("op1").output_shape == \
        (s.vector_batch, s.fc_width)
    assert cases["relu->fc"].models["block"].node("op2").output_shape == \
        (s.vector_batch, s.light_channels)
    # after a stride-2 pool the second op sees the default plane
    assert cases["maxpool->relu"].models["block"].node("op2").input_shape == \
        (1, s.cin, s.hw, s.hw)
    mo = cases["conv->{relu,add}"]
    assert mo.models["block"].node("op1").attrs.kernel == (1, 1)
    assert mo.models["p+c1"].node("op1").attrs.kernel == (1, 1)


def test_shapes_for_backend_and_round_trip():
    assert TestShapes.for_backend("ort-cpu") == TestShapes.tiny()
    assert TestShapes.for_backend("mnn-cpu") == TestShapes()
    assert not TestShapes.tiny().balanced and TestShapes.tiny().hw == 7
    assert TestShapes(**TestShapes.tiny().as_dict()) == TestShapes.tiny()


def test_multi_output_multi_input_and_blocks():
    cases = {c.name: c for c in build_testcases(kinds=["multi_output", "multi_input", "block"])}
    mo = cases["conv->{relu,add}"]
    assert sorted(mo.models) == ["block", "c1", "c2", "p", "p+c1", "p+c2"]
    assert len(mo.models["block"].outputs) == 2
    assert set(mo.models["block"].successors("op1")) == {"op2", "op3"}
    mi = cases["{conv,conv}->concat"]
    assert mi.models["block"].node("op3").output_shape == (1, 256, 28, 28)
    se = cases["block:se"]
    assert se.block == "se" and len([r for r in se.models if r.startswith("part:")]) == 6
    assert {"block:hswish", "block:hsigmoid", "block:channelshuffle", "block:gap"} <= set(cases)
