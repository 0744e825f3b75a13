"""Tests of the PyTorch frontend (through ONNX export); skipped without torch."""

from __future__ import annotations

import importlib.util

import pytest

from nnmeter.errors import ModelLoadError
from nnmeter.frontends.torch import load_torch

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(HAS_TORCH, reason="checks the message shown when torch is missing")
def test_missing_torch_says_what_to_install():
    with pytest.raises(ModelLoadError, match="pip install torch"):
        load_torch(object(), None)


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
def test_small_cnn_loads():
    import torch
    from torch import nn

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    g = load_torch(model, torch.zeros(1, 3, 16, 16))
    assert {"conv", "relu6", "gap", "fc"} <= set(g.op_counts())
    assert g.unknown_ops() == []
    assert g.outputs and g.shape_of(g.outputs[0]) == (1, 4)
