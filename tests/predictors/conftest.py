"""Small kernel datasets shared by the predictor tests (built with a fake profiler)."""

from __future__ import annotations

import pytest

from nnmeter.builder import build_predictor
from nnmeter.fusion.rules import FusionRules
from nnmeter.predictors.dataset import kernel_dataset_dir


@pytest.fixture(scope="module")
def conv_bn_relu_dir(tmp_path_factory, linear_cost_profiler):
    """An ort-cpu dataset of 60 conv-bn-relu rows (3x3, channels 8-192, sizes 7-28)."""
    root = tmp_path_factory.mktemp("data")
    rules = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True,
                                                         ("bn", "relu"): True})
    convs = [{"h": h, "w": h, "cin": c, "cout": c, "kernel": 3, "stride": 1, "groups": 1,
              "pads": None} for h in (7, 14, 28) for c in range(8, 200, 8)]
    build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=root, profiler=linear_cost_profiler,
                    rules=rules, prior_configs={"conv-bn-relu": convs},
                    kernels=["conv-bn-relu"], progress=False, train=False,
                    max_samples_per_type=60, rounds=0, initial_fraction=1.0)
    return kernel_dataset_dir("ort-cpu", root)
