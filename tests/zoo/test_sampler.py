"""Seeded sampling: determinism, dedupe, stable names, records that rebuild the graph."""

from __future__ import annotations

import json

import pytest

from nnmeter.errors import UnknownNameError
from nnmeter.zoo import (
    base_variant, get_variant, sample_variants, variant_from_record,
)
from nnmeter.zoo.base import config_hash, make_divisible, sample_scales


def test_same_seed_same_variants_and_prefix_stable():
    a = sample_variants("mobilenetv3", 8, seed=42)
    b = sample_variants("mobilenetv3", 8, seed=42)
    assert a == b
    assert sample_variants("mobilenetv3", 3, seed=42) == a[:3]
    c = sample_variants("mobilenetv3", 8, seed=43)
    assert [v.config for v in c] != [v.config for v in a]


def test_name_format():
    v = sample_variants("mobilenetv2", 8, seed=42)[7]
    fam, s, i, h = v.name.split("-")
    assert (fam, s, i) == ("mobilenetv2", "s42", "i007")
    assert h == config_hash("mobilenetv2", v.config) and len(h) == 8
    int(h, 16)


def test_dedupe_in_a_small_space():
    # NAS-Bench-201 has 15,625 cells; ask for many from one seed: all distinct.
    vs = sample_variants("nasbench201", 300, seed=0)
    assert len({v.config.cell for v in vs}) == 300


def test_record_round_trip_through_json():
    for fam in ("googlenet", "shufflenetv2", "nasbench201"):
        v = sample_variants(fam, 2, seed=9)[1]
        rec = json.loads(json.dumps(v.to_record()))
        again = variant_from_record(rec)
        assert again == v
        assert again.build().structurally_equal(v.build())


def test_record_with_wrong_hash_or_fields_is_refused():
    rec = sample_variants("resnet", 1, seed=0)[0].to_record()
    bad = dict(rec, config_hash="00000000")
    with pytest.raises(ValueError, match="config_hash"):
        variant_from_record(bad)
    with pytest.raises(ValueError, match="lacks field"):
        variant_from_record({"family": "resnet"})
    with pytest.raises(ValueError, match="no fields"):
        variant_from_record(dict(rec, config={**rec["config"], "bogus": 1}, config_hash=None))


def test_get_variant_by_name_family_preset_and_record():
    v = sample_variants("squeezenet", 5, seed=7)[4]
    assert get_variant(v.name) == v
    assert get_variant(v.to_record()) == v
    assert get_variant("squeezenet") == base_variant("squeezenet")
    r50 = get_variant("resnet50")
    assert r50.name == "resnet50" and r50.config.block == "bottleneck"
    assert r50.build().name == "resnet50"


def test_get_variant_unknown_names_explain():
    with pytest.raises(UnknownNameError, match="not a zoo family"):
        get_variant("lenet")
    name = sample_variants("squeezenet", 1, seed=7)[0].name
    with pytest.raises(UnknownNameError, match="hash"):
        get_variant(name[:-8] + "00000000")
    with pytest.raises(UnknownNameError, match="known zoo families"):
        sample_variants("lenet", 1)


def test_graph_carries_its_record():
    v = sample_variants("mnasnet", 1, seed=1)[0]
    g = v.build()
    assert g.meta["zoo_variant"]["name"] == v.name
    assert variant_from_record(g.meta["zoo_variant"]) == v


def test_helpers():
    assert make_divisible(37.5, 8) == 40
    assert make_divisible(3, 8) == 8
    assert make_divisible(100 * 0.2, 8) == 24  # never more than 10 % below
    import numpy as np
    scales = sample_scales(np.random.default_rng(0), 200)
    assert min(scales) >= 0.2 and max(scales) <= 1.8
    assert all(round(s * 10) == s * 10 for s in np.round(scales, 6))
