"""Grouped convolutions: their own gconv-* types where the dataset has grouped rows,
one group's dense prediction per group where it has none."""

from __future__ import annotations

import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.builder import build_predictor
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.kernels import KERNEL_TYPES
from nnmeter.kernels.conv import GroupedConvConfig, is_grouped
from nnmeter.predictors.dataset import kernel_dataset_dir
from nnmeter.predictors.train import train_predictor
from nnmeter.sampling.synthetic import synthetic_prior_configs

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


class _PerGroup:
    """A runtime whose grouped convolution costs a fixed 20 µs per group on top of its
    FLOPs (a dense one does not pay it)."""

    device = DeviceInfo(cpu_model="fake cpu", cores=2, runtime="onnxruntime", runtime_version="1",
                        settings={"threads": 1})

    def measure(self, graph, on_error="record", **protocol):
        c = graph.cost()
        ms = 0.01 + 2e-8 * c.flops
        for n in graph.nodes():
            if n.op == "conv" and 1 < n.attrs.groups:
                ms += 0.02 * n.attrs.groups
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=self.device)


def _dense_prior():
    return [{"h": h, "w": h, "cin": c, "cout": c, "kernel": 3, "stride": 1, "groups": 1,
             "pads": None} for h in (14, 28, 56) for c in range(8, 136, 8)]


@pytest.fixture(scope="module")
def predictors(tmp_path_factory):
    out = {}
    for with_grouped in (False, True):
        root = tmp_path_factory.mktemp("grouped")
        prior = {"conv-bn-relu": _dense_prior()}
        if with_grouped:
            prior["gconv-bn-relu"] = synthetic_prior_configs()["gconv-bn-relu"]
        build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=root,
                        profiler=_PerGroup(), rules=RULES, prior_configs=prior, progress=False,
                        train=False, max_samples_per_type=120, rounds=0, initial_fraction=1.0,
                        regressor_params={"n_estimators": 30})
        out[with_grouped] = train_predictor("ort-cpu", kernel_dataset_dir("ort-cpu", root), RULES)
    return out


def _regnet_block(groups: int):
    b = GraphBuilder("block", (1, 64, 28, 28))
    y = b.relu(b.bn(b.conv(b.x, 64, 3, 1, groups=groups, name="gconv"), name="bn"), name="r")
    return b.build([y])


def test_the_grouped_config_is_always_valid_and_round_trips():
    kt = KERNEL_TYPES.get("gconv-bn-relu")
    c = GroupedConvConfig(h=28, w=28, groups=8, cin_g=8, cout_g=8)
    assert (c.cin, c.cout) == (64, 64) and is_grouped(c.dense())
    assert kt.config_from_dict(kt.config_to_dict(c)) == c
    assert kt.features(c)[list(kt.feature_names).index("G")] == 8
    # FLOPs and params are those of the grouped convolution
    dense = KERNEL_TYPES.get("conv-bn-relu")
    assert kt.cost(c).flops == dense.cost(c.dense()).flops
    g = kt.build_graph(c)
    assert g["conv"].attrs.groups == 8 and g["conv"].output_shape == (1, 64, 28, 28)
    assert not is_grouped(GroupedConvConfig(h=7, w=7, groups=4, cin_g=1, cout_g=1).dense())


def test_grouped_kernels_get_their_own_type_only_where_the_data_has_it(predictors):
    g = _regnet_block(8)
    without, with_ = predictors[False], predictors[True]
    assert [k.type for k in without.kernels(g)] == ["conv-bn-relu"]
    assert [k.type for k in with_.kernels(g)] == ["gconv-bn-relu"]
    # a dense convolution stays a conv on both
    assert [k.type for k in with_.kernels(_regnet_block(1))] == ["conv-bn-relu"]


def test_the_grouped_regressor_sees_the_per_group_cost(predictors):
    g = _regnet_block(16)
    truth = _PerGroup().measure(KERNEL_TYPES.get("gconv-bn-relu").build_graph(
        GroupedConvConfig(h=28, w=28, groups=16, cin_g=4, cout_g=4))).latency_ms
    own = predictors[True].predict(g, check_device=False)
    per_group = predictors[False].predict(g, check_device=False)
    assert own.rows[0].estimated_by == "regressor"
    assert abs(own.total_ms / truth - 1) < 0.25  # 120 rows, 30 trees
    # one group's dense time per group misses the per-group cost
    assert per_group.total_ms < 0.7 * truth
