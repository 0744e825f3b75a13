"""The closed op vocabulary of the IR and the typed attribute record of every op.

Canonical layout
----------------
Every tensor shape in the IR includes the batch dimension. Rank-4 activations are
**NCHW** (batch, channels, height, width) whatever layout the source model used;
frontends convert NHWC in one place (``nnmeter.ir.layout``). Rank-2 activations are
(N, features). A 1-D convolution is represented as a 2-D one with H = 1.

Every op name is a lowercase string from :data:`OPS`. An op that the vocabulary
does not cover is kept as ``"unknown"`` with :class:`UnknownAttrs` holding the
original type, never dropped.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from nnmeter.errors import GraphValidationError

__all__ = [
    "OPS",
    "ACTIVATIONS",
    "ELEMENTWISE_BINARY",
    "ATTRS_BY_OP",
    "NoAttrs",
    "InputAttrs",
    "ConvAttrs",
    "FCAttrs",
    "MatMulAttrs",
    "BNAttrs",
    "ClipAttrs",
    "EltwiseAttrs",
    "ConcatAttrs",
    "SplitAttrs",
    "ChannelShuffleAttrs",
    "PoolAttrs",
    "GapAttrs",
    "ReshapeAttrs",
    "FlattenAttrs",
    "TransposeAttrs",
    "PadAttrs",
    "ResizeAttrs",
    "SoftmaxAttrs",
    "LayerNormAttrs",
    "ReduceAttrs",
    "LRNAttrs",
    "UnknownAttrs",
    "attrs_class",
    "attrs_to_dict",
    "attrs_from_dict",
]


@dataclass(frozen=True)
class NoAttrs:
    """Attributes of ops that have none (relu, sigmoid, hswish, ...)."""


@dataclass(frozen=True)
class InputAttrs:
    """A graph input. ``dtype`` is a numpy dtype name."""

    dtype: str = "float32"


@dataclass(frozen=True)
class ConvAttrs:
    """conv, dwconv and convtranspose.

    ``pads`` is (top, left, bottom, right). ``groups == in_channels`` for dwconv.
    ``output_padding`` is used by convtranspose only.
    """

    out_channels: int
    kernel: tuple[int, int] = (3, 3)
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (1, 1, 1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    bias: bool = True
    output_padding: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class FCAttrs:
    """fc: y = x·Wᵀ + b over the last axis, weights constant."""

    out_features: int
    bias: bool = True


@dataclass(frozen=True)
class MatMulAttrs:
    """matmul between two activations (no constant weights); or, with ``const_a``, a
    constant first operand of that shape times the one input (DeBERTa's relative
    positions as the TFLite converter folds them: ``BATCH_MATMUL(const, x)``)."""

    const_a: tuple[int, ...] | None = None


@dataclass(frozen=True)
class GatherAttrs:
    """gather along ``axis`` with constant indices of ``indices_shape`` (their values
    are not kept); the first ``batch_dims`` axes of the indices index the data's too
    (``take_along_axis``): out = data[:axis] + indices[batch_dims:] + data[axis + 1:]."""

    axis: int = 0
    indices_shape: tuple[int, ...] = ()
    batch_dims: int = 0


@dataclass(frozen=True)
class BNAttrs:
    """bn: per-channel affine normalisation over axis 1 (inference form)."""

    epsilon: float = 1e-5


@dataclass(frozen=True)
class ClipAttrs:
    """clip to [min_value, max_value]; Clip(0, 6) is canonicalised to relu6."""

    min_value: float = float("-inf")
    max_value: float = float("inf")


@dataclass(frozen=True)
class EltwiseAttrs:
    """add, sub, mul, div.

    With two activation inputs ``const_shape`` is None. With one activation input and a
    constant operand, ``const_shape`` is the constant's shape (broadcast, canonical layout).
    """

    const_shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ConcatAttrs:
    axis: int = 1


@dataclass(frozen=True)
class SplitAttrs:
    axis: int = 1
    sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ChannelShuffleAttrs:
    groups: int = 2


@dataclass(frozen=True)
class PoolAttrs:
    """maxpool and avgpool. ``pads`` is (top, left, bottom, right)."""

    kernel: tuple[int, int] = (2, 2)
    stride: tuple[int, int] = (2, 2)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    ceil_mode: bool = False
    count_include_pad: bool = False


@dataclass(frozen=True)
class GapAttrs:
    """gap: mean over H and W. ``keepdims`` keeps (N, C, 1, 1), else (N, C)."""

    keepdims: bool = True


@dataclass(frozen=True)
class ReshapeAttrs:
    """reshape to ``shape`` (fully resolved, batch included, no -1)."""

    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class FlattenAttrs:
    axis: int = 1


@dataclass(frozen=True)
class TransposeAttrs:
    perm: tuple[int, ...] = ()


@dataclass(frozen=True)
class PadAttrs:
    """pad: ``pads`` is ONNX-style (begin of every axis, then end of every axis)."""

    pads: tuple[int, ...] = ()
    mode: str = "constant"
    value: float = 0.0


@dataclass(frozen=True)
class ResizeAttrs:
    """resize of H and W to ``size`` = (H_out, W_out); mode nearest or linear."""

    size: tuple[int, int] = (1, 1)
    mode: str = "nearest"


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1


@dataclass(frozen=True)
class LayerNormAttrs:
    axis: int = -1
    epsilon: float = 1e-5


@dataclass(frozen=True)
class ReduceAttrs:
    """reducemean / reducemax over ``axes`` (not the H,W mean, which is gap)."""

    axes: tuple[int, ...] = ()
    keepdims: bool = True


@dataclass(frozen=True)
class LRNAttrs:
    """lrn: local response normalisation across ``size`` neighbouring channels
    (AlexNet, GoogLeNet): y = x / (bias + alpha / size * sum(x^2)) ** beta."""

    size: int = 5
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0


@dataclass(frozen=True)
class UnknownAttrs:
    """An op outside the vocabulary. ``original_type`` is the source op type
    (for example ``"onnx:NonMaxSuppression"``); ``fields`` keeps its JSON-able attributes.
    """

    original_type: str = ""
    fields: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)


ACTIVATIONS = frozenset(
    {"relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish", "gelu", "tanh", "leakyrelu"}
)
ELEMENTWISE_BINARY = frozenset({"add", "sub", "mul", "div"})

ATTRS_BY_OP: dict[str, type] = {
    "input": InputAttrs,
    "conv": ConvAttrs,
    "dwconv": ConvAttrs,
    "convtranspose": ConvAttrs,
    "fc": FCAttrs,
    "matmul": MatMulAttrs,
    "gather": GatherAttrs,
    "bn": BNAttrs,
    **{a: NoAttrs for a in ACTIVATIONS},
    "clip": ClipAttrs,
    **{e: EltwiseAttrs for e in ELEMENTWISE_BINARY},
    "concat": ConcatAttrs,
    "split": SplitAttrs,
    "channelshuffle": ChannelShuffleAttrs,
    "maxpool": PoolAttrs,
    "avgpool": PoolAttrs,
    "gap": GapAttrs,
    "reshape": ReshapeAttrs,
    "flatten": FlattenAttrs,
    "transpose": TransposeAttrs,
    "pad": PadAttrs,
    "resize": ResizeAttrs,
    "softmax": SoftmaxAttrs,
    "layernorm": LayerNormAttrs,
    "reducemean": ReduceAttrs,
    "lrn": LRNAttrs,
    "identity": NoAttrs,
    "unknown": UnknownAttrs,
}

#: The closed op vocabulary.
OPS: frozenset[str] = frozenset(ATTRS_BY_OP)


def attrs_class(op: str) -> type:
    """Return the attribute record class of ``op``.

    Raises
    ------
    KeyError
        If ``op`` is not in :data:`OPS`.
    """
    return ATTRS_BY_OP[op]


def attrs_to_dict(attrs: Any) -> dict[str, Any]:
    """JSON-able dict of an attribute record (tuples become lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(attrs):
        value = getattr(attrs, f.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, float) and value in (float("inf"), float("-inf")):
            value = "inf" if value > 0 else "-inf"
        out[f.name] = value
    return out


def attrs_from_dict(op: str, data: dict[str, Any], *, where: str = "",
                    strict: bool = False) -> Any:
    """Rebuild the attribute record of ``op`` from :func:`attrs_to_dict` output.

    Every value is checked against the field's type (an int field takes a whole number,
    not a bool or a string; a pair takes two of them). ``strict`` also refuses keys the
    record does not have. ``where`` names the node in error messages.

    Raises
    ------
    GraphValidationError
        If ``op`` is outside the vocabulary or a value has the wrong type.
    """
    label = f"{where}: " if where else ""
    if op not in ATTRS_BY_OP:
        raise GraphValidationError(
            f"{label}op {op!r} is not in the vocabulary (known: {', '.join(sorted(OPS))}); "
            f"use 'unknown' with attrs {{\"original_type\": ...}} for ops outside it")
    cls = attrs_class(op)
    if not isinstance(data, dict):
        raise GraphValidationError(
            f"{label}attrs must be a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    if strict:
        extra = sorted(set(data) - names)
        if extra:
            raise GraphValidationError(
                f"{label}{op} has no attribute {', '.join(map(repr, extra))} (it takes "
                f"{', '.join(sorted(names)) or 'none'}); remove it")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        kwargs[f.name] = _typed(data[f.name], hints[f.name], f"{label}{op} attribute {f.name!r}")
    try:
        return cls(**kwargs)
    except TypeError as err:  # a required field is missing
        raise GraphValidationError(f"{label}{op} attributes are incomplete: {err}") from err


def _typed(value: Any, hint: Any, what: str) -> Any:
    """``value`` as the type ``hint`` names, or a GraphValidationError saying why not."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _typed(value, inner[0], what)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise GraphValidationError(f"{what} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()):
            raise GraphValidationError(f"{what} must be a whole number, got {value!r}")
        return int(value)
    if hint is float:
        if value in ("inf", "-inf"):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise GraphValidationError(f"{what} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise GraphValidationError(f"{what} must be a string, got {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise GraphValidationError(f"{what} must be a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(v, args[0], what) for v in value)
        if len(value) != len(args):
            raise GraphValidationError(
                f"{what} must be a list of {len(args)} values, got {list(value)!r}")
        return tuple(_typed(v, a, what) for v, a in zip(value, args))
    if origin is dict or hint is dict:
        if isinstance(value, dict):
            return dict(value)
        raise GraphValidationError(f"{what} must be an object, got {value!r}")
    return value
