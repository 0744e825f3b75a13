"""The fast partitioner gives exactly the kernels of the reference implementation."""

from __future__ import annotations

import dataclasses

import pytest

from nnmeter import zoo
from nnmeter.fusion.rules import FusionRules, load_rules, rules_dir
from nnmeter.partition import partition

from .reference_partition import partition as reference_partition

ACTS = ("relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish")
# generous rules: every fusion the kernel grammar can name, multi-consumer fusion on,
# all blocks fused; exercises the cycle check at every residual join
GENEROUS = FusionRules.from_decisions(
    "generous",
    pairs={**{(h, t): True for h in ("conv", "dwconv", "fc", "bn", "add")
              for t in ("bn", "add", *ACTS)},
           **{(a, "add"): True for a in ACTS}, ("gap", "reshape"): True},
    multi_consumer={op: True for op in ("conv", "dwconv", "bn", *ACTS)},
    blocks={b: True for b in ("se", "hswish", "hsigmoid", "channelshuffle", "gap")},
)


def _rule_sets():
    sets = [GENEROUS, FusionRules.from_decisions("none")]
    for path in sorted(rules_dir().glob("*.json")):
        # detected rules without their two-branch tests: the reference predates
        # multi_input_decision, which lets those tests override pair rules at joins
        rules = load_rules(path)
        sets.append(dataclasses.replace(rules, patterns=tuple(
            p for p in rules.patterns if p.kind != "multi_input")))
    return sets


@pytest.mark.parametrize("family", zoo.FAMILY_NAMES)
def test_partition_matches_reference_on_zoo_base_models(family):
    fam = zoo.get_family(family)
    g = fam.build(fam.base_config())
    for rules in _rule_sets():
        fast = partition(g, rules)
        ref = reference_partition(g, rules)
        assert [(k.type, k.nodes) for k in fast] == [(k.type, k.nodes) for k in ref], \
            (family, rules.backend_id)
        assert [k.config for k in fast] == [k.config for k in ref]


@pytest.mark.parametrize("seed", range(40))
def test_partition_matches_reference_on_random_graphs(seed):
    from .test_partition import PERMISSIVE, _random_dag

    g = _random_dag(seed)
    for rules in (PERMISSIVE, GENEROUS):
        assert [(k.type, k.nodes) for k in partition(g, rules)] == \
            [(k.type, k.nodes) for k in reference_partition(g, rules)]
