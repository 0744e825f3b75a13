"""The ``.tflite`` frontend: a LiteRT flatbuffer becomes a ModelGraph.

The flatbuffer is read by a small hand-written reader
(:mod:`nnmeter.frontends._tflite_schema`); TensorFlow is never imported. Every rank-4
tensor is NHWC in TFLite and is converted to the canonical NCHW layout through
:mod:`nnmeter.ir.layout` (shapes, concat/split/softmax axes, mean axes, pads,
transpose permutations, broadcast constants).

Mapping decisions
-----------------
- **Fused activations.** ``CONV_2D`` (and every op with a ``fused_activation_function``)
  with RELU / RELU6 / TANH / RELU_N1_TO_1 becomes the op followed by the activation
  node. The op carries ``meta["fused_activation"]`` (e.g. ``"relu"``) and the
  activation carries ``meta["fused_into"]`` = the op's node name.
- **Constants are not nodes.** Weights, biases, axes, shapes are tensors with data;
  an op whose inputs are all constant (for example ``DEQUANTIZE`` of float16
  weights) is folded and listed in ``graph.meta["folded_ops"]``.
- **QUANTIZE / DEQUANTIZE** on activations stay visible as ``unknown`` nodes with
  ``original_type`` ``"tflite:QUANTIZE"`` / ``"tflite:DEQUANTIZE"``: they are real
  kernels that take time, and no vocabulary op describes them, so a predictor must
  report them as uncovered rather than count them as free.
- **Quantization parameters** of an op's output tensor are in ``meta["quant"]``
  (scale, zero_point, quantized_dimension, per_channel, dtype); those of the weights
  of conv/dwconv/convtranspose/fc in ``meta["weight_quant"]``. A model whose conv or
  fc weights are int8 gets ``graph.dtype == "int8"``.
- **Ops outside the vocabulary** become ``unknown`` with ``original_type``
  ``"tflite:OPNAME"``; custom ops ``"tflite:CUSTOM:<custom_code>"``. So does any op
  whose recorded shapes do not fit the IR op's shape rule (for example a rank-4
  ``BATCH_MATMUL`` over tensors that are not images): it is kept, with
  ``meta["ir_mismatch"]`` saying why, and a warning is logged.
- **Swish.** ``LOGISTIC`` whose only reader is a ``MUL`` by the logistic's own input
  (``x * sigmoid(x)``, as Keras writes swish and nnmeter's own export does) is one
  ``swish`` node named after the ``MUL``; a sigmoid gating another tensor (a
  squeeze-excite gate) stays ``sigmoid`` + ``mul``.
- **Reshape of a rank-4 tensor** keeps the file's element order (NHWC): it is recorded
  as ``reshape`` to the canonical target shape with ``meta["element_order"] = "NHWC"``
  rather than inventing a transpose the file does not contain.
- **FULLY_CONNECTED on a rank > 2 input** (the runtime flattens it) gets a ``reshape``
  node ``<fc name>/flatten`` in front, marked ``meta["inserted"] = True``.
- **Several subgraphs / signatures.** The subgraph of the first signature (or
  subgraph 0 when there are none) is loaded, with a warning naming the others; pass
  ``subgraph=`` to choose. Control-flow ops (WHILE, IF, CALL_ONCE) become ``unknown``.
- **Dynamic dimensions** (``shape_signature`` -1, e.g. a dynamic batch): without
  ``input_shapes`` the static shapes the file stores (1 for a dynamic batch) are
  used and a warning says so; with ``input_shapes`` (canonical NCHW) the LiteRT
  interpreter resizes the inputs and every tensor's shape is read back from it.
- **Shapes computed at run time.** A Keras ``Dense`` layer over an image is lowered as a
  Tensordot: ``SHAPE`` → ``GATHER`` / ``REDUCE_PROD`` / ``PACK`` → ``RESHAPE`` to rows →
  ``FULLY_CONNECTED`` → ``RESHAPE`` back, and the file stores placeholders (``1 x 1``)
  for the tensors in between. Such a model is run once by the LiteRT interpreter on
  zeros (without delegates); every tensor's shape is read back from the run, ``SHAPE``
  of a known shape is a constant and the shape arithmetic after it folds (listed in
  ``folded_ops``), so the dense layer is an ``fc`` over ``H * W`` rows between two
  reshapes.
- **Names.** Graph inputs and outputs take their signature names when the model has
  a signature (an exported IR graph keeps its input and output names); other nodes
  take the first ``;``-separated part of their output tensor's name, made unique.
  ``source`` is ``{"framework": "tflite", "op_type": ..., "name": <output tensor
  name>, "index": <operator index>}``.

Examples
--------
>>> from nnmeter.frontends.tflite import load_tflite
>>> g = load_tflite("model.tflite")            # doctest: +SKIP
>>> g.op_counts()                              # doctest: +SKIP
{'input': 1, 'conv': 2, 'relu': 2, 'gap': 1, 'fc': 1}
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import DynamicShapeError, InputNameError, ModelLoadError, NNMeterError
from nnmeter.frontends._tflite_schema import (
    FlatbufferError, TflModel, TflOperator, TflSubgraph, TflTensor, read_model,
)
from nnmeter.ir import layout
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.ir.ops import (
    ClipAttrs, ConcatAttrs, ConvAttrs, EltwiseAttrs, FCAttrs, GapAttrs, GatherAttrs,
    InputAttrs, LayerNormAttrs, LRNAttrs, MatMulAttrs, NoAttrs, PadAttrs, PoolAttrs,
    ReduceAttrs, ReshapeAttrs, ResizeAttrs, SoftmaxAttrs, SplitAttrs, TransposeAttrs,
    UnknownAttrs,
)
from nnmeter.ir.shapes import infer_node

__all__ = ["load_tflite", "tflite_inputs", "tf_same_pads", "FUSED_ACTIVATIONS", "OP_MAP"]

logger = logging.getLogger(__name__)

#: TFLite fused activation -> (IR op, clip bounds or None).
FUSED_ACTIVATIONS: dict[str, tuple[str, tuple[float, float] | None]] = {
    "relu": ("relu", None),
    "relu6": ("relu6", None),
    "tanh": ("tanh", None),
    "relu_n1_to_1": ("clip", (-1.0, 1.0)),
}

#: TFLite builtin op -> IR op, for the ops mapped one to one (others have handlers).
OP_MAP: dict[str, str] = {
    "RELU": "relu", "RELU6": "relu6", "LOGISTIC": "sigmoid", "TANH": "tanh",
    "HARD_SWISH": "hswish", "GELU": "gelu", "LEAKY_RELU": "leakyrelu",
}

_CONTROL_FLOW = {"WHILE", "IF", "CALL_ONCE", "CALL"}
_SEGMENT_NOISE = re.compile(r"^(Stateful)?PartitionedCall(_\d+)?(:\d+)?$")


def tf_same_pads(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """(begin, end) padding TensorFlow's ``SAME`` adds along one axis.

    >>> tf_same_pads(28, 3, 2)      # the extra row goes at the end
    (0, 1)
    >>> tf_same_pads(28, 3, 1)
    (1, 1)
    """
    effective = dilation * (kernel - 1) + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def _pads4(padding: str, h: int, w: int, kh: int, kw: int, sh: int, sw: int,
           dh: int = 1, dw: int = 1) -> tuple[int, int, int, int]:
    if padding != "SAME":
        return (0, 0, 0, 0)
    top, bottom = tf_same_pads(h, kh, sh, dh)
    left, right = tf_same_pads(w, kw, sw, dw)
    return (top, left, bottom, right)


#: ops whose rank-4 tensors are images (NHWC): they read or write pixels
_IMAGE_OPS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "L2_POOL_2D", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR",
    "LOCAL_RESPONSE_NORMALIZATION", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "SPACE_TO_BATCH_ND",
    "BATCH_TO_SPACE_ND"})
#: ops whose rank-4 tensors are plain arrays: a batched matrix product multiplies the
#: last two axes as the file holds them (attention's (1, heads, tokens, dh))
_PLAIN_OPS = frozenset({"BATCH_MATMUL"})
#: ops that hold their rank-4 inputs and outputs in one layout (per-element ops,
#: reductions kept in rank, joins, transposes): a tensor is an image or plain with the
#: tensors such an op joins it to
_JOIN_OPS = frozenset({
    "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW",
    "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "HARD_SWISH",
    "GELU", "LEAKY_RELU", "PRELU", "ELU", "EXP", "LOG", "SQRT", "RSQRT", "NEG", "ABS",
    "SQUARE", "SELECT", "SELECT_V2", "CAST", "QUANTIZE", "DEQUANTIZE", "SOFTMAX",
    "LOG_SOFTMAX", "CONCATENATION", "SPLIT", "SPLIT_V", "PAD", "PADV2", "MIRROR_PAD",
    "TRANSPOSE", "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "LESS",
    "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "LOGICAL_AND",
    "LOGICAL_OR", "LOGICAL_NOT", "FULLY_CONNECTED"})


def _plain_tensors(sg: TflSubgraph, shapes: Mapping[int, tuple[int, ...]]) -> frozenset[int]:
    """The rank-4 tensors that are not images: those joined (:data:`_JOIN_OPS`) to an
    operand of a batched matrix product and to no tensor an image op reads or writes.
    Every other rank-4 tensor is an image, NHWC (a model without batched products
    reads as before)."""
    parent: dict[int, int] = {}

    def find(t: int) -> int:
        root = t
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(t, t) != root:
            parent[t], t = root, parent[t]
        return root

    def rank4(t: int) -> bool:
        return t >= 0 and len(shapes.get(t, ())) == 4

    image: set[int] = set()
    plain: set[int] = set()
    for op in sg.operators:
        ts = [t for t in (*op.inputs, *op.outputs) if rank4(t)]
        if op.op_type in _IMAGE_OPS:
            image.update(ts)
        elif op.op_type in _PLAIN_OPS:
            plain.update(ts)
        if op.op_type in _JOIN_OPS and len(ts) > 1:
            for t in ts[1:]:
                a, b = find(ts[0]), find(t)
                if a != b:
                    parent[a] = b
    image_roots = {find(t) for t in image}
    plain_roots = {find(t) for t in plain} - image_roots
    if not plain_roots:
        return frozenset()
    return frozenset(t for t in shapes if rank4(t) and find(t) in plain_roots)


#: the ops a layer norm written out as TFLite ops is made of (see _Converter._layernorm)
_LAYERNORM_OPS = frozenset({"MEAN", "SUB", "MUL", "ADD", "DIV", "NEG", "SQUARED_DIFFERENCE",
                            "RSQRT", "SQRT"})


class _Converter:
    """Walks one subgraph's operators in order and adds IR nodes."""

    def __init__(self, model: TflModel, sg: TflSubgraph, shapes: dict[int, tuple[int, ...]],
                 graph: ModelGraph, signature_names: dict[int, str],
                 values: Mapping[int, np.ndarray] | None = None) -> None:
        self.model = model
        self.sg = sg
        self.shapes = shapes                  # tensor index -> NHWC-held shape
        self.graph = graph
        self.sig_names = signature_names      # tensor index -> signature name
        self.refs: dict[int, Ref] = {}        # activation tensors
        self.consts: dict[int, np.ndarray | None] = {}
        self.values = dict(values or {})      # shape computations' values, from one run
        self.readers: dict[int, list[TflOperator]] = {}   # tensor -> operators reading it
        for o in sg.operators:
            for i in set(o.inputs):
                if i >= 0:
                    self.readers.setdefault(i, []).append(o)
        self.done: set[int] = set()           # operators consumed by an earlier pattern
        self.folded: list[str] = []
        self.warnings: list[str] = []
        self.plain = _plain_tensors(sg, shapes)   # rank-4 tensors that are not images

    # -------------------------------------------------------------- helpers
    def tensor(self, i: int) -> TflTensor:
        return self.sg.tensors[i]

    def canon(self, i: int) -> tuple[int, ...]:
        if i in self.plain:
            return tuple(self.shapes[i])
        return layout.nhwc_to_nchw_shape(self.shapes[i])

    # layout conversions of tensor ``i``'s axes: images are NHWC in the file, every other
    # tensor is held in the canonical order (see _plain_tensors)
    def axis(self, i: int, axis: int) -> int:
        rank = len(self.shapes[i])
        if i in self.plain:
            return axis % rank
        return layout.nhwc_to_nchw_axis(axis, rank)

    def axes(self, i: int, axes: Sequence[int]) -> tuple[int, ...]:
        return tuple(sorted(self.axis(i, a) for a in axes))

    def perm(self, i: int, perm: Sequence[int]) -> tuple[int, ...]:
        if i in self.plain:
            return tuple(int(p) for p in perm)
        return layout.nhwc_to_nchw_perm(perm)

    def pads(self, i: int, paddings: Sequence[Sequence[int]]) -> tuple[int, ...]:
        if i in self.plain:
            return tuple(int(b) for b, _ in paddings) + tuple(int(e) for _, e in paddings)
        return layout.nhwc_to_nchw_pads(paddings)

    def broadcast(self, i: int, const_shape: Sequence[int]) -> tuple[int, ...]:
        """Canonical shape of a constant broadcast against activation tensor ``i``."""
        if i in self.plain:
            return tuple(int(d) for d in const_shape)
        return layout.broadcast_shape_nchw(const_shape, len(self.shapes[i]))

    def file_order(self, i: int) -> bool:
        """Whether tensor ``i`` lists its elements in the file's order canonically."""
        return i in self.plain or layout.same_element_order(self.canon(i))

    def is_const(self, i: int) -> bool:
        return i in self.consts

    def const(self, i: int) -> np.ndarray:
        data = self.consts.get(i)
        if data is None:
            raise _OpMismatch(f"needs the constant data of tensor {self.tensor(i).name!r}, "
                              f"which is not stored in the file")
        return data

    def act_inputs(self, op: TflOperator) -> list[int]:
        return [i for i in op.inputs if i >= 0 and not self.is_const(i)]

    def unique(self, base: str) -> str:
        base = base or "node"
        name, k = base, 1
        while name in self.graph:
            k += 1
            name = f"{base}_{k}"
        return name

    def candidates(self, op: TflOperator) -> list[str]:
        """Name candidates for the nodes of ``op``, best first."""
        out_t = op.outputs[0] if op.outputs else -1
        names: list[str] = []
        if out_t in self.sig_names:
            names.append(self.sig_names[out_t])
        if out_t >= 0:
            for seg in self.tensor(out_t).name.split(";"):
                seg = seg.strip()
                if seg and not _SEGMENT_NOISE.match(seg) and seg not in names:
                    names.append(seg)
        if not names:
            names.append(f"{op.op_type.lower()}_{op.index}")
        return names

    def source(self, op: TflOperator) -> dict[str, Any]:
        op_type = op.op_type if op.op_type != "CUSTOM" else f"CUSTOM:{op.custom_code}"
        name = self.tensor(op.outputs[0]).name if op.outputs else ""
        return {"framework": "tflite", "op_type": op_type, "name": name, "index": op.index}

    def quant_meta(self, i: int) -> dict[str, Any] | None:
        t = self.tensor(i)
        if t.quant is None:
            return None
        return {**t.quant.as_dict(), "dtype": t.dtype}

    # -------------------------------------------------------------- node creation
    def emit(self, op: TflOperator, ir_op: str, attrs: Any, inputs: Sequence[int | Ref],
             *, name: str | None = None, out_tensors: Sequence[int] | None = None,
             out_shapes: Sequence[tuple[int, ...]] | None = None,
             meta: dict[str, Any] | None = None, bind: bool = True) -> Node:
        """Add one IR node; fall back to ``unknown`` when shapes do not fit the IR op."""
        refs = [r if isinstance(r, Ref) else self.refs[r] for r in inputs]
        in_shapes = tuple(self.graph.shape_of(r) for r in refs)
        outs = list(op.outputs if out_tensors is None else out_tensors)
        shapes = (tuple(tuple(s) for s in out_shapes) if out_shapes is not None
                  else tuple(self.canon(t) for t in outs))
        meta = dict(meta or {})
        node_name = self.unique(name or self.candidates(op)[0])
        candidate = Node(node_name, ir_op, attrs, tuple(refs), in_shapes, shapes)
        if ir_op != "unknown":
            problem = None
            try:
                inferred = tuple(tuple(int(d) for d in s) for s in infer_node(candidate, in_shapes))
                if inferred != shapes:
                    problem = (f"IR rule gives {list(inferred)}, the file records {list(shapes)}")
            except (ValueError, IndexError, TypeError, ZeroDivisionError) as err:
                problem = str(err)
            if problem is not None:
                msg = (f"{op.op_type} {node_name!r} kept as unknown: as IR op {ir_op!r} its "
                       f"shapes do not fit ({problem})")
                logger.warning(msg)
                self.warnings.append(msg)
                meta["ir_mismatch"] = problem
                attrs = UnknownAttrs(original_type=f"tflite:{op.op_type}",
                                     fields={"would_be": ir_op})
                ir_op = "unknown"
        node = self.graph.add_node(node_name, ir_op, attrs, refs, input_shapes=in_shapes,
                                   output_shapes=shapes, source=self.source(op), meta=meta)
        if bind:
            for port, t in enumerate(outs):
                self.refs[t] = Ref(node_name, port)
        return node

    def emit_with_activation(self, op: TflOperator, ir_op: str, attrs: Any,
                             inputs: Sequence[int | Ref], meta: dict[str, Any] | None = None,
                             **kw: Any) -> Node:
        """Emit ``op`` and, when it has a fused activation, the activation node after it."""
        meta = dict(meta or {})
        act = op.options.get("fused_activation_function", "none")
        out = op.outputs[0]
        q = self.quant_meta(out)
        if act == "none":
            if q:
                meta["quant"] = q
            return self.emit(op, ir_op, attrs, inputs, meta=meta, **kw)
        if act not in FUSED_ACTIVATIONS:
            msg = f"{op.op_type} #{op.index}: fused activation {act!r} has no IR op; ignored"
            logger.warning(msg)
            self.warnings.append(msg)
            return self.emit(op, ir_op, attrs, inputs, meta=meta, **kw)
        act_op, bounds = FUSED_ACTIVATIONS[act]
        names = self.candidates(op)
        act_name = names[0]
        main_name = names[1] if len(names) > 1 else f"{act_name}/{ir_op}"
        act_name = self.unique(act_name)
        meta["fused_activation"] = act_op if bounds is None else act
        main = self.emit(op, ir_op, attrs, inputs, name=main_name, meta=meta, bind=False, **kw)
        act_attrs = ClipAttrs(*bounds) if bounds else NoAttrs()
        act_meta: dict[str, Any] = {"fused_into": main.name}
        if q:
            act_meta["quant"] = q
        return self.emit(op, act_op, act_attrs, [Ref(main.name, 0)], name=act_name,
                         meta=act_meta, out_tensors=[out], out_shapes=[self.canon(out)])

    # -------------------------------------------------------------- op handlers
    def convert(self, op: TflOperator) -> None:
        acts = self.act_inputs(op)
        if not acts and op.op_type not in ("CUSTOM",):
            # Only constants in: the result is a constant too (e.g. DEQUANTIZE of
            # float16 weights). Keep its data when it is a plain copy we can compute.
            for t in op.outputs:
                self.consts[t] = self._fold(op)
            self.folded.append(f"{op.op_type}#{op.index}")
            return
        handler = getattr(self, f"_op_{op.op_type.lower()}", None)
        try:
            if op.op_type in OP_MAP:
                self._simple(op, OP_MAP[op.op_type])
            elif handler is not None:
                handler(op)
            else:
                self._unknown(op)
        except _OpMismatch as err:
            msg = f"{op.op_type} #{op.index} kept as unknown: {err}"
            logger.warning(msg)
            self.warnings.append(msg)
            self._unknown(op, reason=str(err))

    def _fold(self, op: TflOperator) -> np.ndarray | None:
        if op.outputs and op.outputs[0] in self.values:
            # a shape computation (GATHER, PACK, REDUCE_PROD... of a SHAPE): its value
            return self.values[op.outputs[0]]
        if op.op_type == "DEQUANTIZE" and len(op.inputs) == 1:
            data = self.consts.get(op.inputs[0])
            t = self.tensor(op.inputs[0])
            if data is not None and t.quant is None:
                return data.astype(np.float32)
        return None

    def _op_shape(self, op: TflOperator) -> None:
        # The shape of a tensor whose shape is known here is a constant: the shape
        # computations after it fold, and the reshape they feed reads its target from
        # the output's (resolved) shape.
        x = op.inputs[0]
        self.consts[op.outputs[0]] = np.asarray(self.shapes[x], dtype=np.int64)
        self.folded.append(f"SHAPE#{op.index}")

    def _unknown(self, op: TflOperator, reason: str | None = None) -> None:
        original = (f"tflite:CUSTOM:{op.custom_code}" if op.op_type == "CUSTOM"
                    else f"tflite:{op.op_type}")
        fields: dict[str, Any] = {}
        if op.custom_code:
            fields["custom_code"] = op.custom_code
        consts = [list(self.shapes[i]) for i in op.inputs if i >= 0 and self.is_const(i)]
        if consts:
            fields["const_input_shapes"] = consts
        fields.update(self._known_cost(op))
        meta: dict[str, Any] = {}
        if reason:
            meta["ir_mismatch"] = reason
        q = self.quant_meta(op.outputs[0]) if op.outputs else None
        if q:
            meta["quant"] = q
        if op.op_type in ("QUANTIZE", "DEQUANTIZE") and op.outputs:
            fields["to_dtype"] = self.tensor(op.outputs[0]).dtype
        acts = self.act_inputs(op)
        if not acts:
            # A custom op reading only constants: nothing to hang it on; treat as constant.
            for t in op.outputs:
                self.consts[t] = None
            self.folded.append(f"{original}#{op.index}")
            return
        self.emit(op, "unknown", UnknownAttrs(original_type=original, fields=fields), acts,
                  meta=meta)

    def _known_cost(self, op: TflOperator) -> dict[str, int]:
        """What an op kept as unknown is known to cost (see :mod:`nnmeter.ir.cost`):
        the multiply-adds of a matrix product (``BATCH_MATMUL``, ``FULLY_CONNECTED``) from
        the file's shapes, and its constant operands' elements."""
        if op.op_type not in ("BATCH_MATMUL", "FULLY_CONNECTED") or not op.outputs or \
                len(op.inputs) < 2:
            return {}
        a, b = op.inputs[0], op.inputs[1]
        sa, sb = self.shapes.get(a), self.shapes.get(b)
        out = self.shapes.get(op.outputs[0])
        if not sa or not sb or not out:
            return {}
        if op.op_type == "FULLY_CONNECTED":
            k = int(sb[-1])                       # weights are (out, in)
        else:
            k = int(sa[-2] if op.options.get("adj_x") else sa[-1])
        weights = sum(int(np.prod(self.shapes[i])) for i in op.inputs[:3]
                      if i >= 0 and self.is_const(i))
        return {"macs": int(np.prod(out)) * k, "weights": weights}

    def _gated_by_input(self, op: TflOperator) -> TflOperator | None:
        """The MUL that is the sole reader of ``op``'s output and multiplies it by ``op``'s
        own input (``x * sigmoid(x)``: swish), without a fused activation; else None."""
        out, x = op.outputs[0], op.inputs[0]
        readers = self.readers.get(out, [])
        if len(readers) != 1 or out in self.sig_names:
            return None
        mul = readers[0]
        if (mul.op_type != "MUL" or sorted(mul.inputs) != sorted([x, out])
                or mul.options.get("fused_activation_function", "none") != "none"):
            return None
        return mul

    def _simple(self, op: TflOperator, ir_op: str) -> None:
        meta: dict[str, Any] = {}
        if op.op_type == "LOGISTIC" and (mul := self._gated_by_input(op)) is not None:
            # x * sigmoid(x) is one swish, as the ONNX frontend reads Sigmoid + Mul and as
            # nnmeter's own TFLite export writes swish
            self.done.add(mul.index)
            meta["absorbed"] = [self.tensor(op.outputs[0]).name]   # the LOGISTIC's output
            q = self.quant_meta(mul.outputs[0])
            if q:
                meta["quant"] = q
            self.emit(mul, "swish", NoAttrs(), [op.inputs[0]], meta=meta)
            return
        if op.op_type == "LEAKY_RELU":
            meta["alpha"] = op.options.get("alpha")
        if op.op_type == "GELU" and op.options.get("approximate"):
            meta["approximate"] = True
        q = self.quant_meta(op.outputs[0])
        if q:
            meta["quant"] = q
        self.emit(op, ir_op, NoAttrs(), self.act_inputs(op)[:1], meta=meta)

    def _weight_meta(self, w: int) -> dict[str, Any]:
        q = self.quant_meta(w)
        return {"weight_quant": q} if q else {}

    def _op_conv_2d(self, op: TflOperator) -> None:
        x, w = op.inputs[0], op.inputs[1]
        _, c, h, wd = self.canon(x)
        cout, kh, kw, cin_g = self.shapes[w]
        o = op.options
        sh, sw = o["stride_h"], o["stride_w"]
        dh, dw = o["dilation_h_factor"], o["dilation_w_factor"]
        groups = max(1, c // max(1, cin_g))
        attrs = ConvAttrs(out_channels=cout, kernel=(kh, kw), stride=(sh, sw),
                          pads=_pads4(o["padding"], h, wd, kh, kw, sh, sw, dh, dw),
                          dilation=(dh, dw), groups=groups, bias=_has(op, 2))
        ir_op = "dwconv" if groups > 1 and groups == c == cout else "conv"
        self.emit_with_activation(op, ir_op, attrs, [x], meta=self._weight_meta(w))

    def _op_depthwise_conv_2d(self, op: TflOperator) -> None:
        x, w = op.inputs[0], op.inputs[1]
        _, c, h, wd = self.canon(x)
        _, kh, kw, cout = self.shapes[w]
        o = op.options
        sh, sw = o["stride_h"], o["stride_w"]
        dh, dw = o["dilation_h_factor"], o["dilation_w_factor"]
        attrs = ConvAttrs(out_channels=cout, kernel=(kh, kw), stride=(sh, sw),
                          pads=_pads4(o["padding"], h, wd, kh, kw, sh, sw, dh, dw),
                          dilation=(dh, dw), groups=c, bias=_has(op, 2))
        meta = self._weight_meta(w)
        if cout != c:
            meta["depth_multiplier"] = cout // max(1, c)
        self.emit_with_activation(op, "dwconv" if cout == c else "conv", attrs, [x], meta=meta)

    def _op_transpose_conv(self, op: TflOperator) -> None:
        w, x = op.inputs[1], op.inputs[2]
        _, _, h, wd = self.canon(x)
        cout, kh, kw, _ = self.shapes[w]
        _, _, ho, wo = self.canon(op.outputs[0])
        sh, sw = op.options["stride_h"], op.options["stride_w"]

        def split(size: int, k: int, s: int, out: int) -> tuple[int, int, int]:
            diff = (size - 1) * s + k - out
            if diff >= 0:
                return diff // 2, diff - diff // 2, 0
            return 0, 0, -diff

        t, b, oph = split(h, kh, sh, ho)
        left, r, opw = split(wd, kw, sw, wo)
        attrs = ConvAttrs(out_channels=cout, kernel=(kh, kw), stride=(sh, sw),
                          pads=(t, left, b, r), bias=_has(op, 3), output_padding=(oph, opw))
        self.emit_with_activation(op, "convtranspose", attrs, [x], meta=self._weight_meta(w))

    def _op_fully_connected(self, op: TflOperator) -> None:
        x, w = op.inputs[0], op.inputs[1]
        if self.is_const(x) or not self.is_const(w):
            raise _OpMismatch("FULLY_CONNECTED with non-constant weights")
        out_features, in_features = self.shapes[w][:2]
        src: int | Ref = x
        xs = self.canon(x)
        if len(xs) == 4 and x not in self.plain and op.options.get("keep_num_dims"):
            self._fc_over_image(op, x, w, out_features, in_features)
            return
        if len(xs) != 2 and not op.options.get("keep_num_dims"):
            flat = (int(np.prod(xs)) // in_features, in_features)
            meta = {"inserted": True}
            if not self.file_order(x):
                meta["element_order"] = "NHWC"
            node = self.emit(op, "reshape", ReshapeAttrs(shape=flat), [x],
                             name=f"{self.candidates(op)[0]}/flatten", out_shapes=[flat],
                             meta=meta, bind=False)
            src = Ref(node.name, 0)
        self.emit_with_activation(op, "fc", FCAttrs(out_features=out_features, bias=_has(op, 2)),
                                  [src], meta=self._weight_meta(w))

    def _fc_over_image(self, op: TflOperator, x: int, w: int, out_features: int,
                       in_features: int) -> None:
        """A FULLY_CONNECTED that keeps an image's rank (a Keras ``Dense`` over NHWC
        pixels, Swin's patch merging): it reads the channels, which the IR's fc cannot
        (it reads the canonical last axis), so it is read as the runtime runs it: the
        pixels as rows (an inserted reshape), the fc, and the image back."""
        if op.options.get("fused_activation_function", "none") != "none":
            raise _OpMismatch("FULLY_CONNECTED over an image with a fused activation")
        xs, out = self.canon(x), op.outputs[0]
        rows = int(np.prod(xs)) // in_features
        name = self.candidates(op)[0]
        flat = self.emit(op, "reshape", ReshapeAttrs(shape=(rows, in_features)), [x],
                         name=f"{name}/rows", out_shapes=[(rows, in_features)],
                         meta={"inserted": True, "element_order": "NHWC"}, bind=False)
        fc = self.emit(op, "fc", FCAttrs(out_features=out_features, bias=_has(op, 2)),
                       [Ref(flat.name, 0)], name=name, out_shapes=[(rows, out_features)],
                       meta=self._weight_meta(w), bind=False)
        self.emit(op, "reshape", ReshapeAttrs(shape=self.canon(out)), [Ref(fc.name, 0)],
                  name=f"{name}/image", meta={"inserted": True, "element_order": "NHWC"})

    def _op_gather(self, op: TflOperator) -> None:
        x, idx = op.inputs[0], op.inputs[1]
        if not self.is_const(idx):
            raise _OpMismatch("GATHER by computed indices has no IR op")
        if len(self.shapes[x]) == 4 and x not in self.plain:
            raise _OpMismatch("GATHER of an image has no IR op")
        rank = len(self.shapes[x])
        attrs = GatherAttrs(axis=int(op.options.get("axis", 0)) % rank,
                            indices_shape=tuple(int(d) for d in self.shapes[idx]),
                            batch_dims=int(op.options.get("batch_dims", 0)))
        self.emit(op, "gather", attrs, [x])

    def _op_batch_matmul(self, op: TflOperator) -> None:
        a, b = op.inputs[0], op.inputs[1]
        if op.options.get("adj_x"):
            raise _OpMismatch("BATCH_MATMUL with an adjoint first input has no IR op")
        if self.is_const(a):
            if op.options.get("adj_y") or self.is_const(b):
                raise _OpMismatch("BATCH_MATMUL of a constant by an adjoint has no IR op")
            self.emit_with_activation(op, "matmul", MatMulAttrs(
                const_a=tuple(int(d) for d in self.shapes[a])), [b])
            return
        adj_y = bool(op.options.get("adj_y"))
        if self.is_const(b):
            if adj_y or len(self.shapes[b]) != 2:
                raise _OpMismatch("BATCH_MATMUL by a constant that is not one (k, n) matrix")
            attrs = FCAttrs(out_features=self.shapes[b][-1], bias=False)
            self.emit_with_activation(op, "fc", attrs, [a], meta={"from": "BATCH_MATMUL"})
            return
        src: int | Ref = b
        if adj_y:
            # a @ bᵀ: the runtime reads b transposed; the IR says so with a transpose
            # (marked inserted: the file has no such op)
            shape = self.canon(b)
            perm = (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2)
            node = self.emit(op, "transpose", TransposeAttrs(perm=perm), [b],
                             name=f"{self.candidates(op)[0]}/adj_y",
                             out_shapes=[tuple(shape[i] for i in perm)],
                             meta={"inserted": True}, bind=False)
            src = Ref(node.name, 0)
        self.emit_with_activation(op, "matmul", MatMulAttrs(), [a, src])

    def _binary(self, op: TflOperator, ir_op: str) -> None:
        ins = [i for i in op.inputs if i >= 0]
        acts = [i for i in ins if not self.is_const(i)]
        meta: dict[str, Any] = {}
        if len(acts) == 2:
            attrs = EltwiseAttrs()
        else:
            const = next(i for i in ins if self.is_const(i))
            attrs = EltwiseAttrs(const_shape=self.broadcast(acts[0], self.shapes[const]))
            if ins.index(const) == 0:
                meta["const_first"] = True
            data = self.consts.get(const)
            if data is not None and data.size == 1:
                value = float(data.reshape(-1)[0])
                q = self.tensor(const).quant
                if q is not None:
                    value = (value - (q.zero_point[0] if q.zero_point else 0)) * q.scale[0]
                meta["const_value"] = value
        self.emit_with_activation(op, ir_op, attrs, acts, meta=meta)

    def _op_add(self, op: TflOperator) -> None:
        self._binary(op, "add")

    def _op_sub(self, op: TflOperator) -> None:
        self._binary(op, "sub")

    def _op_mul(self, op: TflOperator) -> None:
        self._binary(op, "mul")

    def _op_div(self, op: TflOperator) -> None:
        self._binary(op, "div")

    def _op_concatenation(self, op: TflOperator) -> None:
        if any(self.is_const(i) for i in op.inputs):
            raise _OpMismatch("CONCATENATION with a constant operand")
        axis = self.axis(op.inputs[0], op.options["axis"])
        self.emit_with_activation(op, "concat", ConcatAttrs(axis=axis), list(op.inputs))

    def _pool(self, op: TflOperator, ir_op: str) -> None:
        x = op.inputs[0]
        _, _, h, w = self.canon(x)
        o = op.options
        kh, kw, sh, sw = o["filter_height"], o["filter_width"], o["stride_h"], o["stride_w"]
        attrs = PoolAttrs(kernel=(kh, kw), stride=(sh, sw),
                          pads=_pads4(o["padding"], h, w, kh, kw, sh, sw))
        self.emit_with_activation(op, ir_op, attrs, [x])

    def _op_average_pool_2d(self, op: TflOperator) -> None:
        self._pool(op, "avgpool")

    def _op_max_pool_2d(self, op: TflOperator) -> None:
        self._pool(op, "maxpool")

    def _layernorm(self, op: TflOperator) -> bool:
        """Read the layer norm that the MEAN ``op`` starts as one ``layernorm`` node.

        TFLite has no layer norm op; Keras writes one as ``MEAN`` → ``SQUARED_DIFFERENCE``
        → ``MEAN`` → ``ADD`` ε → ``RSQRT`` → ``MUL`` γ, then ``x * s - mean * s`` (+ β),
        and nnmeter's own export as ``x - mean``, its square, ``MEAN``, ``RSQRT``... The
        pattern is every per-element op (and the second MEAN) from ``op`` on whose
        activation inputs are ``x`` or the pattern's own results; it is one layer norm
        of ``x`` over its last axis when it has two MEANs over that axis (keeping it),
        one RSQRT, and exactly one result read outside it, of ``x``'s shape. The
        normalised axis must be the last one canonically too: a layer norm over an
        image's channels (ConvNeXt's) has no IR op and stays as its ops."""
        x = op.inputs[0]
        rank = len(self.shapes[x])
        if (not op.options.get("keep_dims") or not self.is_const(op.inputs[1])
                or self.is_const(x)):
            return False
        axes = {int(a) % rank for a in np.atleast_1d(self.const(op.inputs[1])).tolist()}
        if axes != {rank - 1} or self.axis(x, -1) != rank - 1:
            return False
        inside = {op.index: op}
        produced = set(op.outputs)
        grew = True
        while grew and len(inside) <= 16:
            grew = False
            for t in list(produced):
                for r in self.readers.get(t, []):
                    if r.index in inside or r.index in self.done or \
                            r.op_type not in _LAYERNORM_OPS:
                        continue
                    acts = [i for i in r.inputs if i >= 0 and not self.is_const(i)]
                    if all(a == x or a in produced for a in acts):
                        inside[r.index] = r
                        produced.update(r.outputs)
                        grew = True
        kinds = [o.op_type for o in inside.values()]
        if kinds.count("MEAN") != 2 or kinds.count("RSQRT") != 1 or len(inside) > 16:
            return False
        means = [o for o in inside.values() if o.op_type == "MEAN"]
        for m in means:
            if not (m.options.get("keep_dims") and self.is_const(m.inputs[1])) or \
                    {int(a) % rank for a in np.atleast_1d(self.const(m.inputs[1])).tolist()} \
                    != {rank - 1}:
                return False
        out = [t for t in produced
               if t in self.sig_names or any(r.index not in inside for r in self.readers.get(t, []))]
        if len(out) != 1 or tuple(self.shapes[out[0]]) != tuple(self.shapes[x]):
            return False
        eps = 1e-5
        var = means[1].outputs[0] if means[1].index > means[0].index else means[0].outputs[0]
        for r in self.readers.get(var, []):
            if r.index in inside and r.op_type == "ADD":
                c = [i for i in r.inputs if i >= 0 and self.is_const(i)]
                data = self.consts.get(c[0]) if c else None
                if data is not None and data.size == 1:
                    eps = float(np.asarray(data).reshape(-1)[0])
        last = max(inside.values(), key=lambda o: o.index)
        self.done.update(inside)
        meta: dict[str, Any] = {"from_ops": sorted(kinds)}
        if (q := self.quant_meta(out[0])):
            meta["quant"] = q
        self.emit(last, "layernorm", LayerNormAttrs(axis=-1, epsilon=eps), [x],
                  name=self.candidates(last)[0], out_tensors=out, meta=meta)
        return True

    def _op_mean(self, op: TflOperator) -> None:
        if self._layernorm(op):
            return
        x = op.inputs[0]
        rank = len(self.shapes[x])
        axes = self.axes(x, np.atleast_1d(self.const(op.inputs[1])).tolist())
        keep = bool(op.options.get("keep_dims"))
        meta = {"quant": q} if (q := self.quant_meta(op.outputs[0])) else {}
        if rank == 4 and axes == (2, 3):
            self.emit(op, "gap", GapAttrs(keepdims=keep), [x], meta=meta)
        else:
            self.emit(op, "reducemean", ReduceAttrs(axes=axes, keepdims=keep), [x], meta=meta)

    def _reshape(self, op: TflOperator) -> None:
        x = op.inputs[0]
        out = self.canon(op.outputs[0])
        meta: dict[str, Any] = {}
        if not (self.file_order(x) and self.file_order(op.outputs[0])):
            meta["element_order"] = "NHWC"
        self.emit(op, "reshape", ReshapeAttrs(shape=out), [x], meta=meta)

    _op_reshape = _reshape
    _op_squeeze = _reshape
    _op_expand_dims = _reshape

    def _op_softmax(self, op: TflOperator) -> None:
        x = op.inputs[0]
        rank = len(self.shapes[x])
        axis = self.axis(x, -1)
        meta: dict[str, Any] = {}
        beta = op.options.get("beta", 1.0)
        if beta not in (0.0, 1.0):
            meta["beta"] = beta
        self.emit(op, "softmax", SoftmaxAttrs(axis=axis if rank == 4 else -1), [x], meta=meta)

    def _op_local_response_normalization(self, op: TflOperator) -> None:
        o = op.options
        size = 2 * int(o["radius"]) + 1
        # TF scales the sum by alpha; the IR (like ONNX) by alpha / size.
        attrs = LRNAttrs(size=size, alpha=float(o["alpha"]) * size, beta=float(o["beta"]),
                         bias=float(o["bias"]))
        self.emit(op, "lrn", attrs, [op.inputs[0]])

    def _op_relu_n1_to_1(self, op: TflOperator) -> None:
        self.emit(op, "clip", ClipAttrs(-1.0, 1.0), [op.inputs[0]])

    def _op_relu_0_to_1(self, op: TflOperator) -> None:
        self.emit(op, "clip", ClipAttrs(0.0, 1.0), [op.inputs[0]])

    def _pad(self, op: TflOperator, mode: str) -> None:
        x = op.inputs[0]
        paddings = np.asarray(self.const(op.inputs[1])).reshape(-1, 2).tolist()
        value = 0.0
        if op.op_type == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            value = float(np.asarray(self.const(op.inputs[2])).reshape(-1)[0])
        attrs = PadAttrs(pads=self.pads(x, paddings), mode=mode, value=value)
        self.emit(op, "pad", attrs, [x])

    def _op_pad(self, op: TflOperator) -> None:
        self._pad(op, "constant")

    def _op_padv2(self, op: TflOperator) -> None:
        self._pad(op, "constant")

    def _op_mirror_pad(self, op: TflOperator) -> None:
        self._pad(op, "reflect" if op.options.get("mode", 0) == 0 else "symmetric")

    def _op_transpose(self, op: TflOperator) -> None:
        perm = np.asarray(self.const(op.inputs[1])).reshape(-1).tolist()
        self.emit(op, "transpose", TransposeAttrs(perm=self.perm(op.inputs[0], perm)),
                  [op.inputs[0]])

    def _split_common(self, op: TflOperator, x: int, axis_t: int) -> None:
        axis = self.axis(x, int(np.asarray(self.const(axis_t)).reshape(-1)[0]))
        sizes = tuple(self.canon(t)[axis] for t in op.outputs)
        self.emit(op, "split", SplitAttrs(axis=axis, sizes=sizes), [x])

    def _op_split(self, op: TflOperator) -> None:
        self._split_common(op, op.inputs[1], op.inputs[0])

    def _op_split_v(self, op: TflOperator) -> None:
        self._split_common(op, op.inputs[0], op.inputs[2])

    def _resize(self, op: TflOperator, mode: str) -> None:
        _, _, ho, wo = self.canon(op.outputs[0])
        meta = {k: v for k, v in op.options.items() if v}
        self.emit(op, "resize", ResizeAttrs(size=(ho, wo), mode=mode), [op.inputs[0]], meta=meta)

    def _op_resize_bilinear(self, op: TflOperator) -> None:
        self._resize(op, "linear")

    def _op_resize_nearest_neighbor(self, op: TflOperator) -> None:
        self._resize(op, "nearest")


class _OpMismatch(Exception):
    """Private: an op cannot be mapped onto its IR op; it is kept as unknown."""


def _has(op: TflOperator, i: int) -> bool:
    return len(op.inputs) > i and op.inputs[i] >= 0


# ------------------------------------------------------------------ shapes and loading
def _read_bytes(path: str | os.PathLike[str] | bytes) -> tuple[bytes, str]:
    if isinstance(path, (bytes, bytearray)):
        return bytes(path), "<bytes>"
    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(
            f"no .tflite file at {str(p)!r}; pass the path of an existing LiteRT/TFLite model"
        )
    try:
        return p.read_bytes(), str(p)
    except OSError as err:
        raise ModelLoadError(f"cannot read {str(p)!r}: {err}") from err


def _choose_subgraph(model: TflModel, subgraph: int | str | None,
                     where: str) -> tuple[int, dict[int, str], dict[int, str], str | None]:
    """Index of the subgraph to load and its signature input/output names."""
    if not model.subgraphs:
        raise ModelLoadError(f"{where} holds no subgraph; it is not a runnable model")
    sig = None
    if isinstance(subgraph, str):
        sig = next((s for s in model.signatures if s.key == subgraph), None)
        if sig is None:
            raise InputNameError(
                f"{where} has no signature {subgraph!r}; signatures: "
                f"{[s.key for s in model.signatures]}"
            )
        index = sig.subgraph_index
    elif subgraph is not None:
        index = int(subgraph)
        if not 0 <= index < len(model.subgraphs):
            raise InputNameError(
                f"{where} has {len(model.subgraphs)} subgraphs; subgraph={index} is out of range"
            )
        sig = next((s for s in model.signatures if s.subgraph_index == index), None)
    else:
        sig = model.signatures[0] if model.signatures else None
        index = sig.subgraph_index if sig is not None else 0
        if len(model.subgraphs) > 1 or len(model.signatures) > 1:
            logger.warning(
                "%s has %d subgraphs and %d signatures %s; loading subgraph %d%s. Pass "
                "subgraph=<index or signature key> to choose another.", where,
                len(model.subgraphs), len(model.signatures),
                [s.key for s in model.signatures], index,
                f" (signature {sig.key!r})" if sig else "",
            )
    if not 0 <= index < len(model.subgraphs):
        raise ModelLoadError(f"{where}: signature points at missing subgraph {index}")
    ins = {t: n for n, t in sig.inputs.items()} if sig else {}
    outs = {t: n for n, t in sig.outputs.items()} if sig else {}
    return index, ins, outs, sig.key if sig else None


def _clean(name: str) -> str:
    name = name.split(";")[0]
    name = re.sub(r":\d+$", "", name)
    return name.removeprefix("serving_default_") or "input"


#: the largest integer tensor read back as a shape computation's value
_SHAPE_VALUE_MAX = 64


def _computes_shapes(sg: TflSubgraph) -> bool:
    """Whether some tensor's shape is known only at run time: a ``SHAPE`` op, or a
    dynamic dimension past the batch. The file then stores placeholders (a reshape to
    ``1 x 1``, and every tensor after it until a reshape to constant dimensions)."""
    return (any(op.op_type == "SHAPE" for op in sg.operators)
            or any(-1 in tuple(t.shape_signature)[1:] for t in sg.tensors
                   if t.index not in sg.inputs))


def _resolve_shapes(buf: bytes, model: TflModel, index: int, input_names: list[str],
                    input_shapes: Mapping[str, Sequence[int]] | None,
                    where: str) -> tuple[dict[int, tuple[int, ...]], list[str],
                                         dict[int, np.ndarray]]:
    """NHWC-held shape of every tensor, resizing dynamic inputs when asked, and the values
    of the small integer tensors that compute shapes at run time.

    When shapes are computed at run time (:func:`_computes_shapes`) the model is run once
    by the LiteRT interpreter on zeros, without delegates, and every tensor's shape (and
    each shape computation's value) is read back from it; without ai-edge-litert the
    file's placeholders stay, with a note.
    """
    sg = model.subgraphs[index]
    shapes = {t.index: t.shape for t in sg.tensors}
    notes: list[str] = []
    wanted: dict[int, tuple[int, ...]] = {}
    by_name = dict(zip(input_names, sg.inputs))
    if input_shapes and "" in input_shapes and input_names:
        # load_model's convention: key "" names the first input.
        input_shapes = {(k or input_names[0]): v for k, v in input_shapes.items()}
    for name, shape in (input_shapes or {}).items():
        if name not in by_name:
            raise InputNameError(
                f"input_shapes names {name!r}, but the model's inputs are {input_names}; "
                f"use one of those names"
            )
        t = sg.tensors[by_name[name]]
        nhwc = layout.nchw_to_nhwc_shape(tuple(int(d) for d in shape))
        if len(nhwc) != len(t.shape_signature):
            raise DynamicShapeError(
                f"input {name!r} has rank {len(t.shape_signature)}, input_shapes gives "
                f"{tuple(shape)} (rank {len(nhwc)}); give the canonical NCHW shape"
            )
        for got, sig in zip(nhwc, t.shape_signature):
            if sig >= 0 and got != sig:
                raise DynamicShapeError(
                    f"input {name!r} has fixed shape "
                    f"{layout.nhwc_to_nchw_shape(t.shape_signature)} (NCHW); input_shapes "
                    f"gives {tuple(shape)}; only dynamic (-1) dimensions can change"
                )
        if nhwc != t.shape:
            wanted[t.index] = nhwc
    for name, t_index in by_name.items():
        t = sg.tensors[t_index]
        if any(d < 0 for d in t.shape_signature) and t_index not in wanted and name not in (
                input_shapes or {}):
            msg = (f"input {name!r} has dynamic dimensions "
                   f"{layout.nhwc_to_nchw_shape(t.shape_signature)} (NCHW, -1 = dynamic); "
                   f"using the stored shape {layout.nhwc_to_nchw_shape(t.shape)}. Pass "
                   f"input_shapes={{{name!r}: (...)}} to choose")
            logger.warning(msg)
            notes.append(msg)
    run = _computes_shapes(sg)
    if not wanted and not run:
        return shapes, notes, {}
    if index != 0:
        if wanted:
            raise DynamicShapeError(
                f"{where}: resizing inputs is only possible for the main subgraph (0), "
                f"not {index}")
        notes.append(f"subgraph {index} computes shapes at run time; its stored "
                     f"placeholder shapes are used")
        return shapes, notes, {}
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError as err:
        if wanted:
            raise DynamicShapeError(
                "resizing dynamic inputs needs ai-edge-litert (pip install ai-edge-litert)"
            ) from err
        msg = (f"{where} computes some shapes at run time and ai-edge-litert is not "
               f"installed to run it once; the file's placeholder shapes are used, and ops "
               f"whose shapes do not fit stay unknown (pip install ai-edge-litert)")
        logger.warning(msg)
        notes.append(msg)
        return shapes, notes, {}
    values: dict[int, np.ndarray] = {}
    try:
        # Without delegates: XNNPACK would hide the intermediate tensors' new shapes.
        interp = Interpreter(
            model_content=buf, experimental_preserve_all_tensors=run,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        for t_index, shape in wanted.items():
            interp.resize_tensor_input(t_index, list(shape), strict=True)
        interp.allocate_tensors()
        if run:
            for d in interp.get_input_details():
                interp.set_tensor(d["index"], np.zeros(d["shape"], dtype=d["dtype"]))
            interp.invoke()
        details = interp.get_tensor_details()
    except (RuntimeError, ValueError) as err:
        if wanted:
            raise DynamicShapeError(
                f"{where}: LiteRT could not resize the inputs to {wanted} (NHWC): {err}"
            ) from err
        msg = (f"{where}: LiteRT could not run the model to learn the shapes it computes at "
               f"run time ({err}); the file's placeholder shapes are used")
        logger.warning(msg)
        notes.append(msg)
        return shapes, notes, {}
    for d in details:
        i = int(d["index"])
        shapes[i] = tuple(int(x) for x in d["shape"])
        if (run and np.issubdtype(d["dtype"], np.integer) and d["quantization"] == (0.0, 0)
                and int(np.prod(d["shape"])) <= _SHAPE_VALUE_MAX):
            try:
                value = interp.get_tensor(i)
            except ValueError:  # a tensor the interpreter no longer holds: no value
                continue
            values[i] = np.array(value)
    if run:
        notes.append("shapes computed at run time read from one LiteRT run on zeros")
    return shapes, notes, values


def tflite_inputs(path: str | os.PathLike[str] | bytes,
                  subgraph: int | str | None = None) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, canonical shape signature, dtype) of each input; -1 marks a dynamic dimension.

    Names are those :func:`load_tflite` gives the input nodes (and accepts in
    ``input_shapes``).

    Raises
    ------
    ModelLoadError
        If the file is missing or not a valid .tflite model.
    """
    buf, where = _read_bytes(path)
    try:
        model = read_model(buf)
    except (FlatbufferError, ValueError, IndexError, OverflowError) as err:
        raise ModelLoadError(f"{where} is not a valid .tflite model: {err}") from err
    index, sig_in, _, _ = _choose_subgraph(model, subgraph, where)
    sg = model.subgraphs[index]
    return [(sig_in.get(t, _clean(sg.tensors[t].name)),
             layout.nhwc_to_nchw_shape(sg.tensors[t].shape_signature), sg.tensors[t].dtype)
            for t in sg.inputs]


def load_tflite(path: str | os.PathLike[str] | bytes, *,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                subgraph: int | str | None = None) -> ModelGraph:
    """Load a ``.tflite`` model as a validated ModelGraph in the canonical NCHW layout.

    Parameters
    ----------
    path : path-like or bytes
        The ``.tflite`` file (or its bytes).
    input_shapes : dict of str to shape, optional
        Canonical (NCHW) shapes for inputs with dynamic dimensions, by input name.
    subgraph : int or str, optional
        Subgraph index or signature key; default: the first signature's subgraph.

    Returns
    -------
    ModelGraph
        Validated; see the module docstring for how ops map.

    Raises
    ------
    ModelLoadError
        If the file is missing, truncated, not a flatbuffer or not a TFLite model.
    DynamicShapeError
        If ``input_shapes`` does not fit the model or the runtime cannot resize it.
    InputNameError
        If ``input_shapes`` or ``subgraph`` names something the model lacks.
    """
    buf, where = _read_bytes(path)
    try:
        model = read_model(buf)
    except (FlatbufferError, ValueError, IndexError, OverflowError) as err:
        raise ModelLoadError(
            f"{where} is not a valid .tflite model: {err}. Re-export it, or check that the "
            f"download is complete"
        ) from err
    index, sig_in, sig_out, sig_key = _choose_subgraph(model, subgraph, where)
    sg = model.subgraphs[index]
    input_names = [sig_in.get(t, _clean(sg.tensors[t].name)) for t in sg.inputs]
    shapes, notes, values = _resolve_shapes(buf, model, index, input_names,
                                            input_shapes, where)
    bad = [sg.tensors[t].name for t in sg.inputs if any(d <= 0 for d in shapes[t])]
    if bad:
        raise DynamicShapeError(
            f"{where}: inputs {bad} have no static shape; pass input_shapes={{name: shape}}"
        )

    name = Path(where).stem if where != "<bytes>" else "tflite_model"
    graph = ModelGraph(name)
    conv = _Converter(model, sg, shapes, graph, sig_out, values)
    conv.warnings.extend(notes)
    produced = {t for op in sg.operators for t in op.outputs}
    for t in sg.tensors:
        if t.index in sg.inputs:
            continue
        if t.index not in produced and not t.is_variable:
            conv.consts[t.index] = model.constant(t)
    for t_index, in_name in zip(sg.inputs, input_names):
        t = sg.tensors[t_index]
        node_name = conv.unique(in_name)
        graph.add_node(node_name, "input", InputAttrs(dtype=t.dtype),
                       output_shapes=[conv.canon(t_index)],
                       source={"framework": "tflite", "op_type": "input", "name": t.name},
                       meta={"quant": q} if (q := conv.quant_meta(t_index)) else {})
        conv.refs[t_index] = Ref(node_name, 0)
    for op in sg.operators:
        if op.index in conv.done:
            continue
        missing = [i for i in op.inputs if i >= 0 and i not in conv.refs and i not in conv.consts]
        if missing:
            raise ModelLoadError(
                f"{where}: operator {op.index} ({op.op_type}) reads tensors {missing} that no "
                f"earlier operator produces; the file is corrupt or not topologically sorted"
            )
        try:
            conv.convert(op)
        except NNMeterError:
            raise
        except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError,
                OverflowError) as err:
            raise ModelLoadError(
                f"{where}: operator {op.index} ({op.op_type}) could not be read ({err}); the "
                f"file is corrupt or uses a layout this reader does not know"
            ) from err
    outputs = []
    for t in sg.outputs:
        if t in conv.refs:
            outputs.append(conv.refs[t])
        else:
            msg = f"output tensor {sg.tensors[t].name!r} is a constant; not a graph output"
            logger.warning(msg)
            conv.warnings.append(msg)
    graph.set_outputs(outputs)
    _prune_unused_inputs(graph)
    int8 = any(
        n.meta.get("weight_quant", {}).get("dtype") in ("int8", "uint8")
        for n in graph.topological_nodes()
    )
    if int8:
        graph.dtype = "int8"
    graph.meta.update({
        "source": {"framework": "tflite", "path": where, "subgraph": index,
                   "signature": sig_key, "subgraphs": len(model.subgraphs)},
        "layout": "NCHW (converted from NHWC)",
        "quantized": int8,
        "folded_ops": conv.folded,
        "warnings": conv.warnings,
    })
    graph.validate()
    return graph


def _prune_unused_inputs(graph: ModelGraph) -> None:
    """Drop graph inputs that nothing reads (they would disconnect the graph)."""
    if len(graph) <= 1:
        return
    for name in list(graph.input_names):
        if not graph.successors(name) and not any(o.node == name for o in graph.outputs):
            logger.warning("input %r is not read by any op; dropped from the graph", name)
            graph.meta.setdefault("unused_inputs", []).append(name)
            graph.remove(name)
