"""PyTorch frontend: a ``torch.nn.Module`` → ModelGraph, through ``torch.onnx.export``.

PyTorch is optional; without it :func:`load_torch` raises :class:`ModelLoadError`
naming the package to install.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

from nnmeter.errors import ModelLoadError

__all__ = ["load_torch"]


def load_torch(module: Any, example_inputs: Any, input_names: Sequence[str] | None = None,
               *, opset: int = 17) -> Any:
    """Export ``module`` to ONNX with ``torch.onnx.export`` and load it.

    Parameters
    ----------
    module : torch.nn.Module
        The model, put in eval mode for the export.
    example_inputs : torch.Tensor or tuple of tensors
        Inputs that fix the shapes (NCHW, batch included).
    input_names : sequence of str, optional
        Names of the graph inputs (default ``input``, ``input_1``, ...).
    opset : int
        ONNX opset of the export.

    Raises
    ------
    ModelLoadError
        If PyTorch is not installed (install ``torch``) or the export fails.
    UnsupportedOpError
        If the exported model holds ops the IR cannot represent.
    """
    try:
        import torch
    except ImportError as err:
        raise ModelLoadError(
            "load_torch needs PyTorch, which is not installed; install it with "
            "`pip install torch`, or export the model to .onnx yourself and use load_onnx"
        ) from err
    from nnmeter.frontends.onnx import load_onnx

    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    names = list(input_names or [
        "input" if i == 0 else f"input_{i}" for i in range(len(inputs))
    ])
    was_training = module.training
    module.eval()
    with tempfile.TemporaryDirectory(prefix="nnmeter-torch-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        try:
            with torch.no_grad():
                torch.onnx.export(module, inputs, path, input_names=names,
                                  opset_version=opset, dynamo=False)
        except (RuntimeError, TypeError, ValueError) as err:
            raise ModelLoadError(f"torch.onnx.export failed for {type(module).__name__}: "
                                 f"{err}") from err
        finally:
            module.train(was_training)
        graph = load_onnx(path)
    graph.name = type(module).__name__
    return graph
