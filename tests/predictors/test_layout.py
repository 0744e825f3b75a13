"""Layout reorders: removed from single-kernel convolutions, added back per model."""

from __future__ import annotations

import numpy as np

from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.kernels import KERNEL_TYPES
from nnmeter.partition import partition
from nnmeter.predictors.layout import model_reorders, reorder_elements
from nnmeter.predictors.train import KernelData, fit_reorder_cost

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


def test_reorder_elements_follows_channel_alignment():
    conv = KERNEL_TYPES.get("conv-bn-relu")
    cfg = conv.config_cls(h=8, w=8, cin=16, cout=32, kernel=3, stride=2)
    assert reorder_elements(conv, cfg, 8) == (16 * 64, 32 * 16)
    # unaligned output: plain NCHW convolution, no reorder; stem (3 ch): output only
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=16, cout=20), 8) == (0, 0)
    assert reorder_elements(conv, conv.config_cls(h=8, w=8, cin=3, cout=8), 8) == (0, 512)
    assert reorder_elements(conv, cfg, 0) == (0, 0)
    relu = KERNEL_TYPES.get("relu")
    assert reorder_elements(relu, relu.config_cls(h=8, w=8, cin=16), 8) == (0, 0)


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
    assert sorted(model_reorders(g, kernels, 8)) == [16 * 64, 32 * 64]
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
    assert reorder_elements(pool, cfg, 8) == (32 * 64, 32 * 16)
    # 24 channels fill no 16-wide block: plain NCHW pooling, nothing reordered
    assert reorder_elements(pool, pool.config_cls(h=8, w=8, cin=24, kernel=3, stride=2,
                                                  pads=(1, 1, 1, 1)), 8) == (0, 0)


def test_pooling_between_blocked_convs_adds_no_reorder():
    def model(pool_channels):
        b = GraphBuilder("m", (1, 16, 8, 8))
        x = _chain(b, b.x, 16, pool_channels, "a")
        x = b.maxpool(x, 3, 1, pads=(1, 1, 1, 1), name="pool")
        return b.build([_chain(b, x, pool_channels, 32, "b")])

    g = model(32)
    # into a, out of b: the pool stays blocked in between
    assert sorted(model_reorders(g, partition(g, RULES), 8)) == [16 * 64, 32 * 64]
    g = model(24)
    # a 24-channel pool runs plain: a's output goes back to NCHW, and b reorders it in
    # (conv b reads 24 channels: a multiple of 8)
    assert sorted(model_reorders(g, partition(g, RULES), 8)) == [16 * 64, 24 * 64,
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
        assert sorted(model_reorders(g, partition(g, RULES), 8)) == [16 * 64] * 3, act


def test_clip_needs_plain_layout():
    # Clip (relu6) gets a ReorderOutput before it and the next conv a ReorderInput
    g = _act_between_convs("relu6")
    assert sorted(model_reorders(g, partition(g, RULES), 8)) == [16 * 64] * 5

