"""Tests of the PyTorch frontend (through ONNX export); skipped without torch."""

from __future__ import annotations

import importlib.util

import pytest

from nnmeter.errors import ModelLoadError
from nnmeter.frontends.torch import load_torch

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_missing_torch_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
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


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
def test_a_module_object_is_predicted_with_its_input_shape():
    from torch import nn

    import nnmeter
    from nnmeter.frontends import load_model

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 4))
    g = load_model(model, input_shapes={"": (1, 3, 32, 32)})
    assert g["input"].output_shape == (1, 3, 32, 32) and "conv" in g.op_counts()
    report = nnmeter.predict(model, "ort-cpu", input_shape=(1, 3, 32, 32))
    assert report.total_ms > 0 and any(r.type.startswith("conv") for r in report.rows)
    with pytest.raises(ModelLoadError, match="input_shape="):
        load_model(model)
