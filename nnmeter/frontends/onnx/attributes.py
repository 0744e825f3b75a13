"""ONNX node attributes as Python values, and the ONNX conventions for reading them
(negative axes, Reshape's 0 and -1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["node_attrs", "jsonable", "f32", "norm_axis", "resolve_reshape"]


def node_attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def jsonable(value: Any) -> Any:
    """A JSON-able rendering of an ONNX attribute value (tensors and graphs summarised)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "dims") and hasattr(value, "data_type"):
        return {"tensor_shape": list(value.dims)}
    if hasattr(value, "node") and hasattr(value, "output"):
        return {"subgraph": getattr(value, "name", ""), "nodes": len(value.node)}
    return str(value)


def f32(value: Any) -> float:
    """A float attribute read back from float32 storage, as its shortest decimal
    (1e-5 stays 1e-05 rather than 9.99999974e-06)."""
    return float(str(np.float32(value)))


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def resolve_reshape(in_shape: Sequence[int], target: Sequence[int],
                    allowzero: int = 0) -> tuple[int, ...]:
    """ONNX Reshape target with 0 (copy) and -1 (infer) resolved."""
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            out.append(int(in_shape[i]))
        else:
            out.append(int(d))
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(in_shape) // known if known else 0
    return tuple(out)
