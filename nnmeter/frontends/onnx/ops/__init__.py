"""The op handlers: one module per op family, all registered on :data:`HANDLERS`
(see :mod:`~nnmeter.frontends.onnx.ops.base` for the handler contract).

Examples
--------
>>> from nnmeter.frontends.onnx.ops import HANDLERS, handler_for
>>> "Conv" in HANDLERS, handler_for("NonZero") is None
(True, True)
"""

from __future__ import annotations

from nnmeter.frontends.onnx.ops import (  # noqa: F401 - importing a family registers it
    activations, concat_split, conv, elementwise, linear, normalization, pad,
    passthrough, pooling, reshape, resize, softmax,
)
from nnmeter.frontends.onnx.ops.base import HANDLERS, Fallback, Handler, handler_for

__all__ = ["HANDLERS", "Fallback", "Handler", "handler_for"]
