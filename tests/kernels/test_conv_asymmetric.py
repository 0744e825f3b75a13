"""A kh x kw convolution kernel: config, closed-form cost, features, rebuilt graph."""

from __future__ import annotations

import math

from nnmeter.ir.builder import GraphBuilder, same_pads
from nnmeter.partition import partition
from nnmeter.fusion.rules import FusionRules


def test_asymmetric_kernel_keeps_both_dimensions():
    b = GraphBuilder("m", (1, 16, 17, 17))
    g = b.build([b.conv(b.x, 32, (1, 7), pads=same_pads((1, 7)), name="c")])
    (k,) = partition(g, FusionRules.from_decisions("toy"))
    cfg = k.config
    assert (cfg.kernel, cfg.kernel_w, cfg.kernel_hw) == (1, 7, (1, 7))
    kt = k.kernel_type
    cost = kt.cost(cfg)
    assert cost.flops == g.cost().flops == 2 * 32 * 16 * 7 * 17 * 17
    feats = dict(zip(kt.feature_names, kt.features(cfg)))
    assert math.isclose(feats["K"], math.sqrt(7))
    rebuilt = kt.build_graph(cfg)
    conv = [n for n in rebuilt.topological_nodes() if n.op == "conv"][0]
    assert conv.attrs.kernel == (1, 7) and conv.output_shape == (1, 32, 17, 17)


def test_square_kernel_config_is_unchanged():
    b = GraphBuilder("m", (1, 16, 14, 14))
    g = b.build([b.conv(b.x, 16, 3, name="c")])
    (k,) = partition(g, FusionRules.from_decisions("toy"))
    assert k.config.kernel_w is None and k.config.kernel_hw == (3, 3)


def test_a_2x1_pooling_is_not_a_2x2_one_and_works_on_a_one_column_input():
    b = GraphBuilder("m", (1, 8, 4, 1))
    g = b.build([b.maxpool(b.x, (2, 1), (2, 1), name="p")])
    (k,) = partition(g, FusionRules.from_decisions("toy"))
    cfg = k.config
    assert cfg.kernel_hw == (2, 1) and cfg.stride_hw == (2, 1)
    kt = k.kernel_type
    assert kt.cost(cfg).flops == g.cost().flops == 8 * 2 * 1 * 2
    rebuilt = kt.build_graph(cfg)
    assert rebuilt.node("maxpool").output_shape == (1, 8, 2, 1)
    feats = dict(zip(kt.feature_names, kt.features(cfg)))
    assert math.isclose(feats["K"], math.sqrt(2)) and math.isclose(feats["S"], math.sqrt(2))
