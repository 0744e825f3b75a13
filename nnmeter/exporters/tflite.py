"""IR -> ``.tflite``: a ModelGraph becomes a runnable LiteRT model with random weights.

The fast path the builder needs (thousands of small models): every IR op is written
with plain ``tf.nn`` / ``tf.math`` ops on **constant numpy weights**, in NHWC, inside
one ``tf.function``; its concrete function goes through
``tf.lite.TFLiteConverter.from_concrete_functions``. No Keras model is built (Keras is
~5x slower to convert, and a Keras 3 model through concrete functions keeps its
weights as variables and outputs NaN). TensorFlow is imported lazily, once.

Layout: each rank-4 tensor is held in the layout a native model would use (see
:func:`tensor_layouts`). Images (tensors that conv, pooling, bn, resize, lrn,
channelshuffle or a pad of H/W read or write, and tensors joined to them through
per-element ops, concat, split, softmax) are NHWC, TFLite's native layout for images,
converted through :mod:`nnmeter.ir.layout`. Every other rank-4 tensor (attention
tensors (1, heads, L, dh), rank-4 views of tokens) keeps the canonical (NCHW) order,
so a transformer's reshapes, transposes, batched matmuls and softmax export as
written, with no added TRANSPOSE. Conversions are added only where an op needs the
other order: a reshape or flatten whose element order differs between the layouts
(an image becoming tokens, or back), and an fc / matmul / layernorm reading an image.
An IR transpose is always one TRANSPOSE (or none), its permutation composed with the
layout change on either side. Graph inputs and outputs of rank 4 are held the same
way: an image input is fed as NHWC, a rank-4 input that is not an image as NCHW.

Padding: a conv or pool whose IR pads give the same output size as TensorFlow's
``SAME`` is exported with ``SAME`` (as TFLite models from Keras are); TF puts the odd
padding row at the bottom/right, where the IR's symmetric pads may put it at the top.
Other pads are an explicit ``PAD`` op before a ``VALID`` op.

Names: graph inputs keep their IR names (signature input names, and tensor names
``serving_default_<name>:0``); graph outputs are signature outputs named after the IR
node (``<node>`` or ``<node>_<port>``); the final TF op of each node is named after
the IR node so that intermediate tensor names carry it. LiteRT orders signature
inputs and outputs by name.

Quantization: ``quantize="int8"`` runs post-training full-integer quantization with
``representative_samples`` random inputs drawn uniformly from [-1, 1] (the range of
normalised images); every op is int8 (``TFLITE_BUILTINS_INT8``) while the model's
inputs and outputs stay float32 (a QUANTIZE op after each input and a DEQUANTIZE op
before each output).

Weights are random, deterministic for a ``seed``: He-normal conv/fc weights, batch
norm statistics near identity, so activations stay finite.

Examples
--------
>>> from nnmeter.ir.builder import GraphBuilder
>>> from nnmeter.exporters.tflite import export_tflite
>>> b = GraphBuilder("block", input_shape=(1, 16, 28, 28))
>>> g = b.build([b.relu(b.bn(b.conv(b.x, 32)))])
>>> export_tflite(g, "/tmp/block.tflite")          # doctest: +SKIP
PosixPath('/tmp/block.tflite')
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import ExportError, UnsupportedOpError
from nnmeter.ir import layout
from nnmeter.ir.graph import ModelGraph, Node, Ref

__all__ = ["export_tflite", "SUPPORTED_OPS", "tensor_layouts", "tf_name", "NHWC", "NCHW"]

logger = logging.getLogger(__name__)

QUANTIZE_MODES = (None, "int8")


@functools.cache
def _tf() -> Any:
    """Import TensorFlow once, quietly."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError as err:
        raise ExportError(
            "exporting to .tflite needs TensorFlow; install it with "
            "`pip install tensorflow-cpu` (or the nnmeter[tensorflow] extra)"
        ) from err
    tf.get_logger().setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass
    return tf


def tf_name(name: str) -> str:
    """A TensorFlow-legal op / signature name for an IR name (illegal characters -> _).

    >>> tf_name("layer1.0/conv:0")
    'layer1.0/conv_0'
    >>> tf_name("_x")
    'n_x'
    """
    clean = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)
    if not clean or not re.match(r"[A-Za-z0-9.]", clean[0]):
        clean = "n" + clean
    return clean


# ------------------------------------------------------------------ random weights
def _he(rng: np.random.Generator, shape: Sequence[int], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * math.sqrt(2.0 / max(1, fan_in))).astype(np.float32)


def _weights(node: Node, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random constants of one node, in TF layouts, drawn in a fixed order."""
    a = node.attrs
    op = node.op
    if op in ("conv", "dwconv", "convtranspose"):
        kh, kw = a.kernel
        cin = node.input_shapes[0][1]
        if op == "dwconv":
            w = _he(rng, (kh, kw, cin, a.out_channels // cin), kh * kw)
        elif op == "convtranspose":
            w = _he(rng, (kh, kw, a.out_channels, cin), kh * kw * cin)
        else:
            cin_g = cin // a.groups
            w = _he(rng, (kh, kw, cin_g, a.out_channels), kh * kw * cin_g)
        out = {"w": w}
        if a.bias:
            out["b"] = (rng.standard_normal(a.out_channels) * 0.01).astype(np.float32)
        return out
    if op == "fc":
        cin = node.input_shapes[0][-1]
        out = {"w": _he(rng, (cin, a.out_features), cin)}
        if a.bias:
            out["b"] = (rng.standard_normal(a.out_features) * 0.01).astype(np.float32)
        return out
    if op == "bn":
        c = node.input_shapes[0][1] if len(node.input_shapes[0]) > 1 else node.input_shapes[0][0]
        gamma = rng.uniform(0.5, 1.5, c)
        beta = rng.standard_normal(c) * 0.1
        mean = rng.standard_normal(c) * 0.1
        var = rng.uniform(0.5, 1.5, c)
        scale = gamma / np.sqrt(var + a.epsilon)
        shift = beta - mean * scale
        return {"scale": scale.astype(np.float32), "shift": shift.astype(np.float32)}
    if op == "layernorm":
        shape = node.input_shapes[0]
        axis = a.axis % len(shape)
        norm_shape = tuple(shape[axis:])
        return {"gamma": rng.uniform(0.5, 1.5, norm_shape).astype(np.float32),
                "beta": (rng.standard_normal(norm_shape) * 0.1).astype(np.float32)}
    if op == "matmul" and a.const_a is not None:
        k = a.const_a[-1]
        return {"a": _he(rng, tuple(a.const_a), k)}
    if op == "gather":
        data = node.input_shapes[0]
        n = data[a.axis % len(data)]
        return {"indices": rng.integers(0, n, size=tuple(a.indices_shape)).astype(np.int64)}
    if op in ("add", "sub", "mul", "div") and a.const_shape is not None:
        if op in ("mul", "div"):
            c = rng.uniform(0.5, 1.5, a.const_shape)
        else:
            c = rng.standard_normal(a.const_shape) * 0.1
        return {"c": np.asarray(c, dtype=np.float32)}
    return {}


# ------------------------------------------------------------------ layout decision
#: held layouts of a rank-4 tensor, as ``tensor_layouts`` reports them
NHWC, NCHW = "NHWC", "NCHW"

#: Ops whose rank-4 operands are image planes, computed by TFLite's NHWC kernels.
_SPATIAL_OPS = frozenset({"conv", "dwconv", "convtranspose", "maxpool", "avgpool", "gap",
                          "lrn", "resize", "channelshuffle", "bn"})
#: Ops computed on the canonical element order: a rank-4 operand held as NHWC is
#: converted, and so is the output when the tensor is held as NHWC.
_CANONICAL_OPS = frozenset({"fc", "matmul", "layernorm", "gather"})
#: Ops that read one layout and write another at no extra cost (a transpose composes
#: the layout change into its permutation; a reshape needs the canonical element order
#: only on a side whose element order differs between the layouts).
_REORDER_OPS = frozenset({"reshape", "flatten", "transpose"})


def _role(node: Node) -> str:
    """How ``node`` constrains the layout of its rank-4 operands.

    ``"spatial"`` (NHWC), ``"canonical"`` (NCHW), ``"reorder"`` (input and output
    layouts independent) or ``"same"``: computed in whichever layout its rank-4 operands
    share (activations, arithmetic, concat, split, softmax, a pad of N/C, a reducemean
    that keeps rank 4, identity).
    """
    op = node.op
    in_rank = len(node.input_shapes[0]) if node.input_shapes else 0
    if op in _SPATIAL_OPS:
        return "spatial" if in_rank == 4 else "same"
    if op == "pad" and in_rank == 4:
        pads = node.attrs.pads
        return "spatial" if any(pads[i] or pads[i + 4] for i in (2, 3)) else "same"
    if op == "reducemean" and in_rank == 4 and len(node.output_shapes[0]) != 4:
        return "canonical"           # dropping axes changes rank: reduce in canonical order
    if op in _CANONICAL_OPS:
        return "canonical"
    if op in _REORDER_OPS:
        return "reorder"
    return "same"


def _decide(graph: ModelGraph) -> dict[Ref, tuple[int, ...]]:
    """Held permutation of every tensor that is not held in canonical order.

    A tensor ``t`` is held in the file as ``t_canonical.transpose(perm)``. Rank-4
    tensors are NHWC (:data:`layout.NCHW_TO_NHWC`) when they belong, through ``same``
    ops, to a group that a spatial op reads or writes; all other tensors stay
    canonical. A group that no spatial op touches costs no conversion when
    canonical: its canonical ops need that order, reshapes keep it, and transposes
    absorb any layout change. So a CNN holds every activation as NHWC (as TFLite
    models do), while attention tensors (1, heads, L, dh) keep their own order.

    One more case: a reshape of an NHWC image (N, C, H, W) to (N, C, H*W) whose only
    reader is a transpose (0, 2, 1) to tokens (N, H*W, C) (a ViT patch embedding) holds
    its output as (N, H*W, C): the reshape then reads the NHWC image directly and the
    transpose is free, as in a natively written model.
    """
    nodes = graph.topological_nodes()
    parent: dict[Ref, Ref] = {}

    def find(r: Ref) -> Ref:
        root = r
        while parent.get(root, root) != root:
            root = parent[root]
        while r != root:
            parent[r], r = root, parent.get(r, r)
        return root

    def rank4(refs: Sequence[Ref], shapes: Sequence[Sequence[int]]) -> list[Ref]:
        return [r for r, s in zip(refs, shapes) if len(s) == 4]

    spatial: set[Ref] = set()
    for node in nodes:
        if node.op == "input":
            continue
        outs = [Ref(node.name, i) for i in range(len(node.output_shapes))]
        refs = (rank4(node.inputs, node.input_shapes)
                + rank4(outs, node.output_shapes))
        role = _role(node)
        if role == "same":
            roots = [find(r) for r in refs]
            for other in roots[1:]:
                if other != roots[0]:
                    parent[other] = roots[0]
        elif role == "spatial":
            spatial.update(refs)
    spatial_roots = {find(r) for r in spatial}
    held: dict[Ref, tuple[int, ...]] = {}
    for node in nodes:
        for i, shape in enumerate(node.output_shapes):
            ref = Ref(node.name, i)
            if len(shape) == 4 and find(ref) in spatial_roots:
                held[ref] = layout.NCHW_TO_NHWC
    for node in nodes:
        if _is_patch_tokens(graph, node, held):
            held[Ref(node.name, 0)] = (0, 2, 1)
    return held


def _is_patch_tokens(graph: ModelGraph, node: Node, held: dict[Ref, tuple[int, ...]]) -> bool:
    """A reshape of an NHWC image to (N, C, H*W) read only by a transpose to tokens."""
    if node.op not in ("reshape", "flatten") or held.get(node.inputs[0]) != layout.NCHW_TO_NHWC:
        return False
    n, c, h, w = node.input_shapes[0]
    ref = Ref(node.name, 0)
    readers = graph.consumers(ref)
    if tuple(node.output_shapes[0]) != (n, c, h * w) or ref in graph.outputs or len(readers) != 1:
        return False
    reader = graph[readers[0]]
    return reader.op == "transpose" and tuple(reader.attrs.perm) == (0, 2, 1)


def tensor_layouts(graph: ModelGraph) -> dict[Ref, str]:
    """The layout, ``"NHWC"`` or ``"NCHW"``, in which the exported model holds each
    rank-4 tensor of ``graph`` (graph inputs and outputs included: that is the shape a
    caller feeds and reads).

    Rank-4 tensors that image ops (conv, pooling, bn, resize, ...) read or write, and
    those joined to them through per-element ops, are NHWC; the others (attention
    tensors, rank-4 views of token tensors) keep the canonical NCHW order.

    Raises
    ------
    UnsupportedOpError
        If the graph holds an op that has no TFLite export.

    Examples
    --------
    >>> from nnmeter.ir.builder import GraphBuilder
    >>> b = GraphBuilder("g", (1, 4, 8, 8))
    >>> tokens = b.transpose(b.reshape(b.conv(b.x, 8), (1, 8, 64)), (0, 2, 1))  # (1, 64, 8)
    >>> heads = b.transpose(b.reshape(tokens, (1, 64, 2, 4)), (0, 2, 1, 3))    # (1, 2, 64, 4)
    >>> g = b.build([b.softmax(heads, -1)])
    >>> {ref.node: held for ref, held in tensor_layouts(g).items()}
    {'input': 'NHWC', 'conv_1': 'NHWC', 'reshape_2': 'NCHW', 'transpose_2': 'NCHW', \
'softmax_1': 'NCHW'}
    """
    graph = _check(graph)
    held = _decide(graph)
    return {Ref(n.name, i): NHWC if held.get(Ref(n.name, i)) == layout.NCHW_TO_NHWC else NCHW
            for n in graph.topological_nodes()
            for i, s in enumerate(n.output_shapes) if len(s) == 4}


# ------------------------------------------------------------------ layout helpers
def _identity_perm(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _reorder(tf: Any, x: Any, src: Sequence[int], dst: Sequence[int],
             name: str | None = None) -> Any:
    """``x`` held as ``canonical.transpose(src)``, re-held as ``canonical.transpose(dst)``."""
    perm = layout.compose_perms(_inverse(src), dst)
    if perm == _identity_perm(len(perm)):
        return x if name is None else tf.identity(x, name=name)
    return tf.transpose(x, list(perm), name=name)


def _nhwc_const(c: np.ndarray, act_rank: int) -> np.ndarray:
    """A canonical constant rearranged to broadcast against NHWC data of ``act_rank``."""
    if act_rank != 4 or c.ndim == 0 or c.ndim > 4:
        return c
    padded = c.reshape((1,) * (4 - c.ndim) + c.shape)
    return np.ascontiguousarray(padded.transpose(layout.NCHW_TO_NHWC))


def _align_rank(tf: Any, x: Any, shape: Sequence[int], rank: int) -> Any:
    """Make an activation of canonical ``shape`` broadcast against rank-``rank`` NHWC data."""
    if rank != 4 or len(shape) == 4 or len(shape) > 4:
        return x
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    x = tf.reshape(x, padded)
    return tf.transpose(x, layout.NCHW_TO_NHWC)


def _spatial_padding(h: int, w: int, kernel: Sequence[int], stride: Sequence[int],
                     dilation: Sequence[int], pads: Sequence[int],
                     out_hw: Sequence[int]) -> tuple[str, list[list[int]] | None]:
    """("VALID" | "SAME", explicit NHWC paddings or None) reproducing ``out_hw``."""
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    valid = [(s_ - e) // st + 1 for s_, e, st in zip((h, w), eff, stride)]
    same = [-(-s_ // st) for s_, st in zip((h, w), stride)]
    if not any(pads) and list(out_hw) == valid:
        return "VALID", None
    if list(out_hw) == same:
        return "SAME", None
    t, left, b, r = pads
    # Extra end padding reproduces ceil_mode outputs.
    need_h = (out_hw[0] - 1) * stride[0] + eff[0] - (h + t + b)
    need_w = (out_hw[1] - 1) * stride[1] + eff[1] - (w + left + r)
    b += max(0, need_h)
    r += max(0, need_w)
    return "VALID", [[0, 0], [t, b], [left, r], [0, 0]]


# ------------------------------------------------------------------ op emitters
@dataclass(frozen=True)
class _IO:
    """Held permutations of an emitter's inputs (as given to it) and of its outputs (as
    it must write them): a tensor is held as ``canonical.transpose(perm)``."""

    ins: tuple[tuple[int, ...], ...]
    outs: tuple[tuple[int, ...], ...]

    @property
    def nhwc(self) -> bool:
        """Whether the (first) output is a rank-4 tensor held as NHWC."""
        return self.outs[0] == layout.NCHW_TO_NHWC


# Each emitter gets (tf, node, inputs, weights, name, io) and returns a list of outputs.
# The driver converts the inputs of spatial and canonical ops to the layout they compute
# in and converts their outputs to the held layout; "same" and "reorder" emitters read
# ``io`` themselves.
Emitter = Callable[[Any, Node, list, dict, "str | None", _IO], list]


def _conv(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    a = node.attrs
    x = xs[0]
    _, _, h, w = node.input_shapes[0]
    out_hw = node.output_shapes[0][2:]
    if node.op == "convtranspose":
        return [_convtranspose(tf, node, x, wts, name)]
    padding, explicit = _spatial_padding(h, w, a.kernel, a.stride, a.dilation, a.pads, out_hw)
    if explicit is not None:
        x = tf.pad(x, explicit)
    strides = [1, a.stride[0], a.stride[1], 1]
    dil = list(a.dilation)
    has_bias = "b" in wts
    if node.op == "dwconv":
        if a.stride[0] != a.stride[1] and dil != [1, 1]:
            raise UnsupportedOpError(
                f"dwconv {node.name!r}: unequal strides {a.stride} with dilation {a.dilation} "
                f"cannot be exported to TFLite; use equal strides or no dilation"
            )
        y = tf.nn.depthwise_conv2d(x, tf.constant(wts["w"]), strides, padding,
                                   dilations=dil, name=None if has_bias else name)
    else:
        y = tf.nn.conv2d(x, tf.constant(wts["w"]), strides, padding, dilations=dil,
                         name=None if has_bias else name)
    if has_bias:
        y = tf.nn.bias_add(y, tf.constant(wts["b"]), name=name)
    return [y]


def _convtranspose(tf: Any, node: Node, x: Any, wts: dict, name: str) -> Any:
    a = node.attrs
    n, _, h, w = node.input_shapes[0]
    _, cout, ho, wo = node.output_shapes[0]
    if a.groups != 1 or tuple(a.dilation) != (1, 1):
        raise UnsupportedOpError(
            f"convtranspose {node.name!r}: groups={a.groups}, dilation={a.dilation}; TFLite's "
            f"TRANSPOSE_CONV supports groups=1 and dilation 1 only"
        )
    sh, sw = a.stride
    kh, kw = a.kernel
    strides = [1, sh, sw, 1]
    filt = tf.constant(wts["w"])
    if (ho, wo) == (h * sh, w * sw) and kh >= sh and kw >= sw:
        y = tf.nn.conv2d_transpose(x, filt, [n, ho, wo, cout], strides, "SAME")
    else:
        fh, fw = (h - 1) * sh + kh, (w - 1) * sw + kw
        y = tf.nn.conv2d_transpose(x, filt, [n, fh, fw, cout], strides, "VALID")
        if (fh, fw) != (ho, wo):
            top, left = a.pads[0], a.pads[1]
            if fh < top + ho or fw < left + wo:
                y = tf.pad(y, [[0, 0], [0, max(0, top + ho - fh)],
                               [0, max(0, left + wo - fw)], [0, 0]])
            y = y[:, top:top + ho, left:left + wo, :]
    if "b" in wts:
        y = tf.nn.bias_add(y, tf.constant(wts["b"]))
    return tf.identity(y, name=name)


def _fc(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    shape = node.input_shapes[0]
    x = xs[0]
    wt = tf.constant(wts["w"])
    if len(shape) == 2:
        y = tf.matmul(x, wt)
    else:
        y = tf.reshape(x, [-1, shape[-1]])
        y = tf.matmul(y, wt)
        y = tf.reshape(y, list(shape[:-1]) + [node.attrs.out_features])
    if "b" in wts:
        y = tf.nn.bias_add(y, tf.constant(wts["b"]), name=name)
    return [y]


def _bn(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    shape = node.input_shapes[0]
    scale, shift = wts["scale"], wts["shift"]
    if len(shape) == 3:           # (N, C, L): channel axis 1
        scale, shift = scale.reshape(-1, 1), shift.reshape(-1, 1)
    y = xs[0] * tf.constant(scale)
    return [tf.add(y, tf.constant(shift), name=name)]


def _activation(kind: str) -> Emitter:
    def emit(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
        x = xs[0]
        if kind == "relu":
            return [tf.nn.relu(x, name=name)]
        if kind == "relu6":
            return [tf.nn.relu6(x, name=name)]
        if kind == "sigmoid":
            return [tf.math.sigmoid(x, name=name)]
        if kind == "tanh":
            return [tf.math.tanh(x, name=name)]
        if kind == "swish":
            return [tf.multiply(x, tf.math.sigmoid(x), name=name)]
        if kind == "hswish":
            return [tf.multiply(x * tf.nn.relu6(x + 3.0), 1.0 / 6.0, name=name)]
        if kind == "hsigmoid":
            return [tf.multiply(tf.nn.relu6(x + 3.0), 1.0 / 6.0, name=name)]
        if kind == "gelu":
            return [tf.nn.gelu(x, approximate=False, name=name)]
        if kind == "leakyrelu":
            return [tf.nn.leaky_relu(x, alpha=0.01, name=name)]
        raise UnsupportedOpError(f"activation {kind!r} has no TFLite export")

    return emit


def _clip(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    lo, hi = node.attrs.min_value, node.attrs.max_value
    x = xs[0]
    if (lo, hi) == (0.0, 6.0):
        return [tf.nn.relu6(x, name=name)]
    if lo == 0.0 and math.isinf(hi):
        return [tf.nn.relu(x, name=name)]
    if not math.isinf(lo):
        x = tf.maximum(x, lo)
    if not math.isinf(hi):
        x = tf.minimum(x, hi)
    return [tf.identity(x, name=name)]


def _binary(kind: str) -> Emitter:
    fns = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}

    def emit(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
        fn = getattr(tf.math, fns[kind])
        if not io.nhwc:             # canonical order: numpy broadcasting as in the IR
            operands = [xs[0], tf.constant(wts["c"])] if "c" in wts else xs[:2]
            return [fn(*operands, name=name)]
        out_rank = len(node.output_shapes[0])
        if "c" in wts:
            c = tf.constant(_nhwc_const(wts["c"], out_rank))
            return [fn(_align_rank(tf, xs[0], node.input_shapes[0], out_rank), c, name=name)]
        a = _align_rank(tf, xs[0], node.input_shapes[0], out_rank)
        b = _align_rank(tf, xs[1], node.input_shapes[1], out_rank)
        return [fn(a, b, name=name)]

    return emit


def _matmul(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    if node.attrs.const_a is not None:
        return [tf.matmul(tf.constant(wts["a"]), xs[0], name=name)]
    return [tf.matmul(xs[0], xs[1], name=name)]


def _gather(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    a = node.attrs
    return [tf.gather(xs[0], tf.constant(wts["indices"]), axis=a.axis % len(node.input_shapes[0]),
                      batch_dims=a.batch_dims, name=name)]


def _concat(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    rank = len(node.output_shapes[0])
    return [tf.concat(xs, axis=_held_axis(node.attrs.axis, rank, io), name=name)]


def _split(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    rank = len(node.input_shapes[0])
    axis = _held_axis(node.attrs.axis, rank, io)
    return list(tf.split(xs[0], list(node.attrs.sizes), axis=axis, name=name))


def _held_axis(axis: int, rank: int, io: _IO) -> int:
    """The file's axis of a canonical ``axis`` of a rank-``rank`` operand of ``io``'s layout."""
    return layout.nchw_to_nhwc_axis(axis, rank) if io.nhwc else axis % rank


def _channelshuffle(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    n, c, h, w = node.input_shapes[0]
    g = node.attrs.groups
    y = tf.reshape(xs[0], [n, h, w, g, c // g])
    y = tf.transpose(y, [0, 1, 2, 4, 3])
    return [tf.reshape(y, [n, h, w, c], name=name)]


def _pool(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    a = node.attrs
    _, _, h, w = node.input_shapes[0]
    padding, explicit = _spatial_padding(h, w, a.kernel, a.stride, (1, 1), a.pads,
                                         node.output_shapes[0][2:])
    x = xs[0]
    if explicit is not None:
        fill = -3.0e38 if node.op == "maxpool" else 0.0
        x = tf.pad(x, explicit, constant_values=fill)
    fn = tf.nn.max_pool2d if node.op == "maxpool" else tf.nn.avg_pool2d
    return [fn(x, list(a.kernel), list(a.stride), padding, name=name)]


def _gap(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    return [tf.reduce_mean(xs[0], axis=[1, 2], keepdims=node.attrs.keepdims, name=name)]


def _reduce(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    rank = len(node.input_shapes[0])
    axes = list(node.attrs.axes) or list(range(rank))
    if io.nhwc:
        axes = list(layout.nchw_to_nhwc_axes(axes, rank))
    # A reducemean that drops axes of a rank-4 input is a canonical op (see _role).
    return [tf.reduce_mean(xs[0], axis=axes, keepdims=node.attrs.keepdims, name=name)]


def _held_shape(shape: Sequence[int], perm: Sequence[int]) -> list[int]:
    return [int(shape[i]) for i in perm]


def _reshape(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    """A reshape works on the canonical element order: a side held in another order is
    transposed, unless its elements lie in the same order either way."""
    in_shape, out_shape = node.input_shapes[0], node.output_shapes[0]
    src, dst = io.ins[0], io.outs[0]
    canon_in, canon_out = _identity_perm(len(src)), _identity_perm(len(dst))
    in_ok = src == canon_in or layout.same_element_order(in_shape)
    out_ok = dst == canon_out or layout.same_element_order(out_shape)
    if (in_ok and out_ok) or dst == (0, 2, 1):
        # (0, 2, 1): a ViT patch embedding, the NHWC image read straight as tokens
        return [tf.reshape(xs[0], _held_shape(out_shape, dst), name=name)]
    x = xs[0] if src == canon_in else _reorder(tf, xs[0], src, canon_in)
    if dst == canon_out:
        return [tf.reshape(x, list(out_shape), name=name)]
    return [_reorder(tf, tf.reshape(x, list(out_shape)), canon_out, dst, name=name)]


def _transpose(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    """One TRANSPOSE whose permutation composes the layout change of both sides (none
    at all when that composition is the identity)."""
    shape = node.input_shapes[0]
    perm = tuple(node.attrs.perm) or tuple(reversed(range(len(shape))))
    total = layout.compose_perms(layout.compose_perms(_inverse(io.ins[0]), perm), io.outs[0])
    if total == _identity_perm(len(total)):
        return [tf.identity(xs[0], name=name)]
    return [tf.transpose(xs[0], list(total), name=name)]


def _pad(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    a = node.attrs
    modes = {"constant": "CONSTANT", "reflect": "REFLECT", "symmetric": "SYMMETRIC"}
    if a.mode not in modes:
        raise UnsupportedOpError(
            f"pad {node.name!r}: mode {a.mode!r} has no TFLite op; allowed: {sorted(modes)}"
        )
    pads = [int(v) for v in a.pads]
    rank = len(pads) // 2
    paddings = (layout.nchw_to_nhwc_pads(pads) if io.nhwc
                else [[pads[i], pads[i + rank]] for i in range(rank)])
    return [tf.pad(xs[0], paddings, mode=modes[a.mode], constant_values=a.value, name=name)]


def _resize(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    method = {"nearest": "nearest", "linear": "bilinear", "bilinear": "bilinear"}.get(
        node.attrs.mode)
    if method is None:
        raise UnsupportedOpError(
            f"resize {node.name!r}: mode {node.attrs.mode!r}; TFLite exports nearest and linear"
        )
    y = tf.image.resize(xs[0], list(node.attrs.size), method=method)
    return [tf.identity(y, name=name)]


def _softmax(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    rank = len(node.input_shapes[0])
    return [tf.nn.softmax(xs[0], axis=_held_axis(node.attrs.axis, rank, io), name=name)]


def _layernorm(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    shape = node.input_shapes[0]
    x = xs[0]
    axis = node.attrs.axis % len(shape)
    axes = list(range(axis, len(shape)))
    mean = tf.reduce_mean(x, axis=axes, keepdims=True)
    centred = x - mean
    var = tf.reduce_mean(tf.square(centred), axis=axes, keepdims=True)
    y = centred * tf.math.rsqrt(var + node.attrs.epsilon)
    y = y * tf.constant(wts["gamma"])
    return [tf.add(y, tf.constant(wts["beta"]), name=name)]


def _lrn(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    a = node.attrs
    if a.size % 2 == 0:
        raise UnsupportedOpError(
            f"lrn {node.name!r}: size={a.size}; TFLite's LRN window is 2*radius+1, so the size "
            f"must be odd"
        )
    # The IR (like ONNX) scales the sum by alpha / size; TF by alpha.
    return [tf.nn.local_response_normalization(
        xs[0], depth_radius=a.size // 2, bias=a.bias, alpha=a.alpha / a.size, beta=a.beta,
        name=name)]


def _identity(tf: Any, node: Node, xs: list, wts: dict, name: str | None, io: _IO) -> list:
    return [xs[0]]


_EMITTERS: dict[str, Emitter] = {
    "conv": _conv, "dwconv": _conv, "convtranspose": _conv,
    "fc": _fc, "matmul": _matmul, "gather": _gather, "bn": _bn,
    **{k: _activation(k) for k in ("relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish",
                                   "gelu", "tanh", "leakyrelu")},
    "clip": _clip,
    **{k: _binary(k) for k in ("add", "sub", "mul", "div")},
    "concat": _concat, "split": _split, "channelshuffle": _channelshuffle,
    "maxpool": _pool, "avgpool": _pool, "gap": _gap, "reducemean": _reduce,
    "reshape": _reshape, "flatten": _reshape, "transpose": _transpose, "pad": _pad,
    "resize": _resize, "softmax": _softmax, "layernorm": _layernorm, "lrn": _lrn,
    "identity": _identity,
}

#: IR ops this exporter writes (``input`` aside); ``unknown`` never exports.
SUPPORTED_OPS: frozenset[str] = frozenset(_EMITTERS)


# ------------------------------------------------------------------ the exporter
def _output_key(ref: Ref) -> str:
    return tf_name(ref.node if ref.port == 0 else f"{ref.node}_{ref.port}")


def _check(graph: ModelGraph) -> ModelGraph:
    unsupported = [(n.name, n.op if n.op != "unknown" else f"unknown({n.attrs.original_type})")
                   for n in graph.topological_nodes()
                   if n.op != "input" and n.op not in SUPPORTED_OPS]
    if unsupported:
        ops = sorted({op for _, op in unsupported})
        raise UnsupportedOpError(
            f"graph {graph.name!r}: ops {ops} (nodes {[n for n, _ in unsupported][:5]}) cannot "
            f"be exported to .tflite; supported: {sorted(SUPPORTED_OPS)}. Replace or remove "
            f"those nodes"
        )
    if any(not n.output_shapes for n in graph.topological_nodes()):
        graph = graph.copy().infer_shapes()
    return graph


def _emit_node(tf: Any, node: Node, xs: list, held_in: list[tuple[int, ...]],
               held_out: list[tuple[int, ...]], wts: dict,
               convert: Callable[[int, tuple[int, ...]], Any]) -> list:
    """Emit one node: convert its inputs to the layout its op computes in, run the
    emitter, convert its outputs to their held layouts; the last op of port 0 is
    named after the node."""
    role = _role(node)
    name = tf_name(node.name)
    if role in ("spatial", "canonical"):
        want = layout.NCHW_TO_NHWC if role == "spatial" else (0, 1, 2, 3)
        want_in = [want if len(p) == 4 else p for p in held_in]
        made = [want if len(p) == 4 else p for p in held_out]
    else:
        # "same": every rank-4 operand shares its group's layout (see _decide);
        # "reorder": the emitter reads and writes the held layouts itself
        want_in, made = list(held_in), list(held_out)
    xs = [x if w == h else convert(i, w) for i, (x, h, w) in enumerate(zip(xs, held_in, want_in))]
    last_name = name if made[0] == held_out[0] else None
    outs = _EMITTERS[node.op](tf, node, xs, wts, last_name, _IO(tuple(want_in), tuple(made)))
    return [y if m == h else _reorder(tf, y, m, h, name=name if port == 0 else None)
            for port, (y, m, h) in enumerate(zip(outs, made, held_out))]


#: Weight arrays of at least this many elements enter the traced function as variables
#: (the converter freezes them into the same constants); smaller ones as constants.
VARIABLE_ELEMENTS = 16384


class _WeightHolder:
    """The ``tf`` module as the emitters see it, except that ``constant`` of a large
    numpy array returns a variable made outside the trace and held in ``module``.

    A large constant in the traced graph makes the converter slow and memory-hungry
    (a 4096x8192 float matrix: 21 s and 4.8 GB peak as a constant; 4 s and 2.1 GB as a
    variable; a 392 MB VGG-sized one needed 4.5 GB as a variable and more than the
    machine's 24 GB in a whole model as constants). The written model is the same:
    the converter freezes each variable into the constant it holds.
    """

    def __init__(self, tf: Any, module: Any) -> None:
        self._tf = tf
        self._module = module
        self._module.weights = []
        self._next = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tf, name)

    def start_trace(self) -> None:
        """TensorFlow may trace the function twice; the n-th large constant of a trace
        is the n-th variable (a trace is deterministic), made on the first."""
        self._next = 0

    def constant(self, value: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(value, np.ndarray) and value.size >= VARIABLE_ELEMENTS \
                and not args and not kwargs:
            held = self._module.weights
            if self._next < len(held):
                var = held[self._next]
                if tuple(var.shape) != value.shape:
                    raise ExportError(f"a second trace asked for a {value.shape} weight "
                                      f"where the first made {tuple(var.shape)}")
            else:
                with self._tf.init_scope():
                    var = self._tf.Variable(value, trainable=False)
                held.append(var)
            self._next += 1
            return var
        return self._tf.constant(value, *args, **kwargs)


def _build_function(graph: ModelGraph, seed: int) -> tuple[Callable, list, list[Node], Any]:
    tf = _tf()
    rng = np.random.default_rng(seed)
    nodes = graph.topological_nodes()
    inputs = [n for n in nodes if n.op == "input"]
    weights = {n.name: _weights(n, rng) for n in nodes if n.op != "input"}
    held = _decide(graph)

    def held_perm(ref: Ref) -> tuple[int, ...]:
        return held.get(ref, _identity_perm(len(graph.shape_of(ref))))

    specs = [
        tf.TensorSpec(_held_shape(n.output_shape, held_perm(Ref(n.name, 0))),
                      tf.as_dtype(n.attrs.dtype), name=tf_name(n.name))
        for n in inputs
    ]

    module = tf.Module()
    tfw = _WeightHolder(tf, module)

    def model_fn(*args: Any) -> dict[str, Any]:
        tfw.start_trace()
        values: dict[Ref, Any] = {Ref(n.name, 0): a for n, a in zip(inputs, args)}
        # A tensor converted once serves every op that needs it in that layout.
        converted: dict[tuple[Ref, tuple[int, ...]], Any] = {}
        for node in nodes:
            if node.op == "input":
                continue
            held_in = [held_perm(r) for r in node.inputs]
            held_out = [held_perm(Ref(node.name, i)) for i in range(len(node.output_shapes))]

            def convert(i: int, want: tuple[int, ...], node: Node = node,
                        held_in: list = held_in) -> Any:
                key = (node.inputs[i], want)
                if key not in converted:
                    converted[key] = _reorder(tf, values[node.inputs[i]], held_in[i], want)
                return converted[key]

            xs = [values[r] for r in node.inputs]
            outs = _emit_node(tfw, node, xs, held_in, held_out, weights[node.name], convert)
            for port, y in enumerate(outs):
                values[Ref(node.name, port)] = y
        return {_output_key(ref): values[ref] for ref in graph.outputs}

    return model_fn, specs, inputs, module


def export_tflite(graph: ModelGraph, path: str | os.PathLike[str], *,
                  quantize: str | None = None, seed: int = 0,
                  representative_samples: int = 8) -> Path:
    """Write ``graph`` as a runnable ``.tflite`` model with random weights.

    Parameters
    ----------
    graph : ModelGraph
        A graph whose ops are all in :data:`SUPPORTED_OPS` (shapes inferred if missing).
    path : path-like
        Where to write; parent folders are created.
    quantize : None or "int8"
        ``"int8"``: full-integer post-training quantization (float32 inputs/outputs).
    seed : int
        Seed of the random weights (and of the representative data); same seed, same file.
    representative_samples : int
        Random input batches used to calibrate int8 quantization.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    UnsupportedOpError
        If the graph holds an op (or op setting) that has no TFLite export.
    ExportError
        If TensorFlow is missing, ``quantize`` is not allowed, or the converter fails.
    """
    if quantize not in QUANTIZE_MODES:
        raise ExportError(
            f"quantize={quantize!r} is not supported; allowed: {list(QUANTIZE_MODES)}"
        )
    if representative_samples < 1:
        raise ExportError(f"representative_samples={representative_samples}; need at least 1")
    graph = _check(graph)
    tf = _tf()
    with _collected_after():
        return _convert(tf, graph, path, quantize, seed, representative_samples)


@contextmanager
def _collected_after() -> Iterator[None]:
    """Collect the reference cycles the block made, and only those, when it ends.

    The traced function, its graph and the converter's copies of the weights sit in
    reference cycles: without a collection they stay until the collector's next full
    pass, and a run exporting many models grew by gigabytes per AlexNet (8-17 GB RSS
    after 1-4 exports, 2-3.5 GB with a collection) until the kernel killed it for
    memory. A full collection walks every object of the process, though (0.18 s in a
    builder's heap of 400k objects, against a 0.07 s kernel export), so the objects
    that existed before the block are frozen out of it; a caller that froze objects
    itself gets a full collection instead, its freeze left alone.
    """
    own_freeze = gc.get_freeze_count() == 0
    if own_freeze:
        gc.freeze()
    try:
        yield
    finally:
        gc.collect()
        if own_freeze:
            gc.unfreeze()


def _convert(tf: Any, graph: ModelGraph, path: str | os.PathLike[str], quantize: str | None,
             seed: int, representative_samples: int) -> Path:
    model_fn, specs, inputs, module = _build_function(graph, seed)
    try:
        concrete = tf.function(model_fn, input_signature=specs,
                               autograph=False).get_concrete_function()
    except UnsupportedOpError:
        raise
    except (ValueError, TypeError, tf.errors.OpError) as err:
        raise ExportError(
            f"graph {graph.name!r}: TensorFlow could not trace the model: {err}"
        ) from err
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    if quantize == "int8":
        rng = np.random.default_rng(seed + 1)

        def representative() -> Any:
            for _ in range(representative_samples):
                yield [rng.uniform(-1.0, 1.0, s.shape).astype(s.dtype.as_numpy_dtype)
                       for s in specs]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = converter.convert()
    except Exception as err:  # the converter raises ConverterError and bare RuntimeErrors
        lines = [ln for ln in str(err).splitlines() if "error" in ln.lower()][:3]
        raise ExportError(
            f"graph {graph.name!r}: the TFLite converter failed"
            f"{' for int8' if quantize else ''}: {' | '.join(lines) or err}. Check that every "
            f"op has a TFLite kernel{' with int8 support' if quantize else ''}"
        ) from err
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    logger.debug("exported %s (%d nodes) to %s, %d bytes", graph.name, len(graph), out, len(data))
    return out
