"""Prior extraction walks real zoo graphs and records per-op configurations."""

from __future__ import annotations

import numpy as np
import pytest

from nnmeter.zoo import PRIOR_FIELDS, extract_prior, prior_histograms
from nnmeter.zoo.prior import graph_prior
from nnmeter.zoo import base_variant


@pytest.fixture(scope="module")
def prior():
    return extract_prior(n_per_family=3, seed=0)


def test_prior_fields_per_op(prior):
    for op in ("conv", "dwconv", "fc", "maxpool", "avgpool", "gap", "add", "mul", "concat",
               "bn", "relu", "relu6", "hswish", "hsigmoid", "channelshuffle", "split"):
        assert prior[op], op
        for rec in prior[op][:50]:
            assert set(rec) == set(PRIOR_FIELDS[op]), (op, rec)
    assert all(isinstance(r["C"], list) and len(r["C"]) >= 2 for r in prior["concat"])


def test_prior_is_computed_from_graphs():
    g = base_variant("mobilenetv2").build()
    p = graph_prior(g)
    assert len(p["dwconv"]) == 17
    assert p["dwconv"][0] == {"H": 112, "C": 32, "K": 3, "S": 1}
    assert p["conv"][0] == {"H": 224, "W": 224, "CIN": 3, "COUT": 32, "K": 3, "S": 2,
                            "groups": 1}
    assert p["fc"] == [{"CIN": 1280, "COUT": 1000}]
    assert p["gap"] == [{"H": 7, "C": 1280}]


def test_prior_is_deterministic_and_covers_kernel_sizes(prior):
    again = extract_prior(n_per_family=3, seed=0)
    assert again == prior
    ks = {r["K"] for r in prior["conv"]}
    assert {1, 3, 5, 7, 11} <= ks
    assert {3, 5, 7} <= {r["K"] for r in prior["dwconv"]}


def test_histograms(prior):
    hists = prior_histograms(prior, bins=40)
    h = hists["conv"]["CIN"]
    assert len(h.counts) == 40 and len(h.edges) == 41
    assert h.total == len(prior["conv"])
    assert hists["concat"]["C"].total == sum(len(r["C"]) for r in prior["concat"])
    draws = h.sample(np.random.default_rng(0), 500)
    assert draws.min() >= h.edges[0] and draws.max() <= h.edges[-1]
