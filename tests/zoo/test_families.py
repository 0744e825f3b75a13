"""Every family: the base config reproduces the published figures; 50 variants are valid,
distinct and spread over more than 10x in FLOPs."""

from __future__ import annotations

import numpy as np
import pytest

from nnmeter.zoo import (
    FAMILIES, FAMILY_NAMES, TRANSFORMER_FAMILIES, default_family_names, get_family,
    sample_variants,
)
from nnmeter.zoo.nasbench201 import (
    CANDIDATE_OPS, NUM_CELLS, NASBench201Config, arch_str, cell_from_index, cell_index,
)

# (family, preset or None for the base config, params, multiply-adds) as published:
# torchvision's model tables, the MobileNetV1 paper (Table 8), the ProxylessNAS paper
# (Mobile: 4.1 M, 320 M) and NAS-Bench-201 (largest cell: 1.53 M, 220.11 M).
PUBLISHED = [
    ("alexnet", None, 61.10e6, 0.71e9),
    ("vgg", None, 138.36e6, 15.47e9),
    ("resnet", None, 11.69e6, 1.82e9),
    ("resnet", "resnet50", 25.56e6, 4.11e9),
    ("densenet", None, 7.98e6, 2.87e9),
    ("squeezenet", None, 1.24e6, 0.35e9),
    ("googlenet", None, 6.62e6, 1.50e9),
    ("mobilenetv1", None, 4.23e6, 0.57e9),
    ("mobilenetv2", None, 3.50e6, 0.30e9),
    ("mobilenetv3", None, 5.48e6, 0.22e9),
    ("shufflenetv2", None, 2.28e6, 0.15e9),
    ("mnasnet", None, 4.38e6, 0.31e9),
    ("proxylessnas", None, 4.1e6, 0.32e9),
    ("nasbench201", None, 1.53e6, 220.11e6),
]


def test_registry_holds_the_13_families():
    assert sorted(FAMILY_NAMES) == default_family_names()
    assert len(FAMILY_NAMES) == 13
    # plus the opt-in transformer families (tests/zoo/test_transformers.py)
    assert FAMILIES.names() == sorted(FAMILY_NAMES + TRANSFORMER_FAMILIES)


@pytest.mark.parametrize("family,preset,params,macs", PUBLISHED,
                         ids=[p[1] or p[0] for p in PUBLISHED])
def test_base_config_matches_published_figures(family, preset, params, macs):
    fam = get_family(family)
    config = fam.presets()[preset] if preset else fam.base_config()
    graph = fam.build(config)
    graph.validate()
    cost = graph.cost()
    assert cost.params == pytest.approx(params, rel=0.005)
    assert cost.macs == pytest.approx(macs, rel=0.05)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_reference_record_is_consistent_with_the_build(family):
    fam = get_family(family)
    assert fam.reference["source"]
    assert fam.ranges
    cost = fam.build(fam.base_config()).cost()
    assert cost.params == pytest.approx(fam.reference["params"], rel=0.005)
    assert cost.macs == pytest.approx(fam.reference["macs"], rel=0.05)


def test_exact_torchvision_parameter_counts():
    exact = {"alexnet": 61_100_840, "vgg": 138_357_544, "resnet": 11_689_512,
             "densenet": 7_978_856, "squeezenet": 1_235_496, "googlenet": 6_624_904,
             "mobilenetv2": 3_504_872, "mobilenetv3": 5_483_032,
             "shufflenetv2": 2_278_604, "mnasnet": 4_383_312}
    for family, params in exact.items():
        fam = get_family(family)
        assert fam.build(fam.base_config()).cost().params == params, family
    assert get_family("resnet").build(
        get_family("resnet").presets()["resnet50"]).cost().params == 25_557_032


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_fifty_variants_valid_distinct_and_spread(family):
    variants = sample_variants(family, 50, seed=0)
    assert len(variants) == 50
    assert len({v.config for v in variants}) == 50
    assert len({v.name for v in variants}) == 50
    flops = []
    for v in variants:
        g = v.build(validate=True)
        assert g.name == v.name
        flops.append(g.cost().flops)
    assert min(flops) > 0
    assert max(flops) / min(flops) >= 10, (family, min(flops), max(flops))


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_sampled_configs_stay_in_documented_ranges(family):
    rng = np.random.default_rng(3)
    fam = get_family(family)
    for _ in range(20):
        cfg = fam.sample(rng)
        res = getattr(cfg, "resolution")
        if family in ("alexnet", "vgg"):
            assert res == 224
        elif family == "nasbench201":
            assert res == 32
        else:
            assert res in (160, 192, 224, 256)
        blocks = getattr(cfg, "blocks", ())
        for blk in blocks:
            if family == "mobilenetv1":
                k, out, stride = blk
                assert k in (3, 5, 7) and out % 8 == 0
            else:  # inverted bottlenecks
                k, expanded, out, stride, se, act = blk
                assert k in (3, 5, 7)
                assert out % 8 == 0


def test_mobile_expansion_ratio_within_1_to_8():
    rng = np.random.default_rng(5)
    fam = get_family("mobilenetv2")
    ratios = []
    for _ in range(20):
        cfg = fam.sample(rng)
        cin = cfg.stem_channels
        for k, expanded, out, stride, se, act in cfg.blocks:
            ratios.append(expanded / cin)
            cin = out
    # snapping to multiples of 8 moves a ratio by at most 8 channels
    assert min(ratios) >= 1.0
    assert max(ratios) <= 8.0 + 8 / 8
    assert len({round(r) for r in ratios}) >= 6


def test_node_names_are_readable():
    g = get_family("resnet").build(get_family("resnet").base_config())
    assert "layer1.0.conv1.conv" in g
    assert "layer2.0.downsample.conv" in g
    g = get_family("mobilenetv2").build(get_family("mobilenetv2").base_config())
    assert "features.2.dw.conv" in g and g["features.2.dw.conv"].op == "dwconv"


def test_nasbench201_cell_space():
    assert NUM_CELLS == 15_625 == len(CANDIDATE_OPS) ** 6
    cells = {cell_from_index(i) for i in range(NUM_CELLS)}
    assert len(cells) == NUM_CELLS
    assert all(cell_index(cell_from_index(i)) == i for i in range(0, NUM_CELLS, 97))
    assert arch_str(("nor_conv_3x3", "none", "skip_connect", "avg_pool_3x3",
                     "nor_conv_1x1", "none")) == (
        "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|")
    with pytest.raises(ValueError):
        cell_from_index(NUM_CELLS)


def test_nasbench201_smallest_cells_and_zero_output():
    fam = get_family("nasbench201")
    # No conv on any edge: only the stem, reductions and classifier compute (7.78 M MACs).
    g = fam.build(NASBench201Config(cell=("skip_connect", "avg_pool_3x3", "none",
                                          "skip_connect", "none", "avg_pool_3x3")))
    g.validate()
    assert g.cost().macs == pytest.approx(7.78e6, rel=0.01)
    # A cell that always outputs zeros stays a connected graph.
    g = fam.build(NASBench201Config(cell=("nor_conv_3x3",) + ("none",) * 5))
    g.validate()
    assert g.op_counts().get("mul", 0) == 15
    # Dead branches are pruned: node 1 feeds nothing alive here.
    g = fam.build(NASBench201Config(cell=("nor_conv_3x3", "skip_connect", "none",
                                          "none", "none", "nor_conv_1x1")))
    g.validate()
    assert "cells.0.edge1_0.conv" not in g
    assert "cells.0.edge3_2.conv" in g
