"""nnmeter: kernel-level latency prediction for DNN inference on real backends.

The public API is imported lazily so that ``import nnmeter`` stays fast; heavy
runtimes (TensorFlow, OpenVINO, MNN) load only inside the code that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> "module:attribute"
_LAZY = {
    "ModelGraph": "nnmeter.ir.graph:ModelGraph",
    "GraphBuilder": "nnmeter.ir.builder:GraphBuilder",
    "load_model": "nnmeter.frontends:load_model",
    "export_onnx": "nnmeter.exporters.onnx:export_onnx",
    "export_tflite": "nnmeter.exporters.tflite:export_tflite",
    "get_backend": "nnmeter.backends:get_backend",
    "measure": "nnmeter.backends:measure",
    "load_predictor": "nnmeter.predictors:load_predictor",
    "predict": "nnmeter.predictors:predict",
    "select_backend": "nnmeter.predictors:select_backend",
    "build_predictor": "nnmeter.builder:build_predictor",
    "partition": "nnmeter.partition:partition",
    "load_rules": "nnmeter.fusion:load_rules",
    "detect_fusion": "nnmeter.fusion:detect_fusion",
    "xray": "nnmeter.xray:xray",
    "zoo": "nnmeter.zoo",
    "errors": "nnmeter.errors",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'nnmeter' has no attribute {name!r}")
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attr) if attr else module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
