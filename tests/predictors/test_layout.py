"""Layout reorders: removed from single-kernel convolutions, added back per model."""

from __future__ import annotations

import numpy as np

from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.kernels import KERNEL_TYPES
from nnmeter.partition import partition
from nnmeter.predictors.layout import model_reorders, reorder_elements
from nnmeter.predictors.kernel_data import KernelData
from nnmeter.predictors.terms.reorders import fit_reorder_cost

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


def test_reorder_elements_follows_channel_alignment():
    conv = KERNEL_TYPES.get("conv-bn-relu")
    cfg = conv.config_cls(h=8, w=8, cin=16, cout=32, kernel=3, stride=2)
    assert reorder_elements(conv, cfg, 16) == (16 * 64, 32 * 16)
    # any output channel count is padded up to the block
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=16, cout=20), 16) == \
        (16 * 64, 20 * 64)
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=116, cout=58), 16) == \
        (116 * 64, 58 * 64)
    # input channels past the block need a multiple of 4: 58 runs a plain FusedConv
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=58, cout=64), 16) == (0, 0)
    # fewer input channels than the block (the stem's 3): read in NCHW, output only
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=3, cout=8), 16) == (0, 512)
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=12, cout=6), 16) == (0, 384)
    assert reorder_elements(conv, cfg, 0) == (0, 0)
    relu = KERNEL_TYPES.get("relu")
    assert reorder_elements(relu, relu.config_cls(h=8, w=8, cin=16), 16) == (0, 0)


def test_depthwise_and_grouped_convolutions():
    dw = KERNEL_TYPES.get("dwconv-bn")
    assert reorder_elements(dw, dw.config_cls(h=8, w=8, cin=116), 16) == (116 * 64,) * 2
    assert reorder_elements(dw, dw.config_cls(h=8, w=8, cin=20, stride=2), 16) == \
        (20 * 64, 20 * 16)
    assert reorder_elements(dw, dw.config_cls(h=8, w=8, cin=58), 16) == (0, 0)
    conv = KERNEL_TYPES.get("conv")
    # grouped: whole blocks per group in and out (64/2 and 64/4 yes; 48/2 and 24/3 no)
    for cin, g, blocked in ((64, 2, True), (64, 4, True), (48, 2, False), (24, 3, False)):
        cfg = conv.config_cls(h=8, w=8, cin=cin, cout=cin, groups=g)
        assert reorder_elements(conv, cfg, 16) == ((cin * 64,) * 2 if blocked else (0, 0))


def test_a_blocked_conv_that_reads_nchw_needs_its_producer_reordered_back():
    b = GraphBuilder("m", (1, 16, 8, 8))
    x = _chain(b, b.x, 16, 12, "a")  # blocked, 12 channels out
    x = _chain(b, x, 12, 32, "b")  # reads 12 < 16 channels in NCHW
    g = b.build([x])
    # into a, a's output back to NCHW for b, b's output out of the model
    assert sorted(model_reorders(g, partition(g, RULES), 16)) == [12 * 64, 16 * 64, 32 * 64]


def _chain(b, x, cin, cout, name):
    x = b.conv(x, cout, 1, name=f"{name}.conv")
    x = b.bn(x, name=f"{name}.bn")
    return b.relu(x, name=f"{name}.relu")


def test_model_reorders_only_at_layout_boundaries():
    b = GraphBuilder("m", (1, 16, 8, 8))
    x = b.x
    x = _chain(b, x, 16, 16, "a")
    x = _chain(b, x, 16, 32, "b")
    g = b.build([x])
    kernels = partition(g, RULES)
    # NCHW input reordered into a, a→b stays blocked, b's output reordered back
    assert sorted(model_reorders(g, kernels, 16)) == [16 * 64, 32 * 64]
    assert model_reorders(g, kernels, 0) == []


def test_fit_reorder_cost_is_relu_line():
    relu = KERNEL_TYPES.get("relu")
    cfgs = [relu.config_cls(h=h, w=h, cin=16) for h in (4, 8, 16, 32, 64)]
    y = np.array([0.001 + 1e-7 * c.cin * c.h * c.w for c in cfgs])
    d = KernelData("relu", cfgs, np.zeros((5, 1)), y, np.zeros((5, 2)), ["t"] * 5)
    fixed, slope = fit_reorder_cost({"relu": d})
    assert abs(fixed - 0.001) < 1e-9 and abs(slope - 1e-7) < 1e-12
    assert fit_reorder_cost({}) is None


def test_pooling_runs_blocked_only_over_whole_native_blocks():
    pool = KERNEL_TYPES.get("maxpool")
    cfg = pool.config_cls(h=8, w=8, cin=32, kernel=3, stride=2, pads=(1, 1, 1, 1))
    assert reorder_elements(pool, cfg, 16) == (32 * 64, 32 * 16)
    # 24 channels fill no 16-wide block: plain NCHW pooling, nothing reordered
    assert reorder_elements(pool, pool.config_cls(h=8, w=8, cin=24, kernel=3, stride=2,
                                                  pads=(1, 1, 1, 1)), 16) == (0, 0)


def test_pooling_between_blocked_convs_adds_no_reorder():
    def model(pool_channels):
        b = GraphBuilder("m", (1, 16, 8, 8))
        x = _chain(b, b.x, 16, pool_channels, "a")
        x = b.maxpool(x, 3, 1, pads=(1, 1, 1, 1), name="pool")
        return b.build([_chain(b, x, pool_channels, 32, "b")])

    g = model(32)
    # into a, out of b: the pool stays blocked in between
    assert sorted(model_reorders(g, partition(g, RULES), 16)) == [16 * 64, 32 * 64]
    g = model(24)
    # a 24-channel pool runs plain: a's output goes back to NCHW, and b reorders it in
    # (conv b reads 24 channels: a multiple of 4)
    assert sorted(model_reorders(g, partition(g, RULES), 16)) == [16 * 64, 24 * 64,
                                                                 24 * 64, 32 * 64]


def _act_between_convs(act):
    # the first convolution's output is read twice, so ORT cannot fold the activation
    b = GraphBuilder("m", (1, 16, 8, 8))
    t = b.conv(b.x, 16, 1, name="a")
    h = b.act(t, act, name="act")
    return b.build([b.conv(h, 16, 1, name="b"), b.conv(t, 16, 1, name="c")])


def test_activations_ort_runs_blocked_add_no_reorders():
    # ORT 1.32: HardSigmoid (and hswish's HardSigmoid + Mul) and Sigmoid stay blocked
    for act in ("hswish", "hsigmoid", "sigmoid", "relu"):
        g = _act_between_convs(act)
        assert sorted(model_reorders(g, partition(g, RULES), 16)) == [16 * 64] * 3, act


def test_clip_needs_plain_layout():
    # Clip (relu6) gets a ReorderOutput before it and the next conv a ReorderInput
    g = _act_between_convs("relu6")
    assert sorted(model_reorders(g, partition(g, RULES), 16)) == [16 * 64] * 5

