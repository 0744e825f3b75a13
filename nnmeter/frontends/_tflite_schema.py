"""A small, bounds-checked reader of the parts of the TFLite flatbuffer schema we need.

The layout follows the public ``tensorflow/lite/schema/schema.fbs``: a table starts
with a signed offset to its vtable; vtable slot ``i`` (at byte ``4 + 2*i``) holds the
field's offset inside the table, or 0 when the field takes its default. Every read
is checked against the buffer size, so a truncated or corrupt file raises
:class:`FlatbufferError` instead of reading garbage. TensorFlow is not imported.

Only plain data comes out (:class:`TflModel` and friends); the mapping onto the IR
lives in :mod:`nnmeter.frontends.tflite`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "FlatbufferError",
    "BUILTIN_OPS",
    "TENSOR_TYPES",
    "ACTIVATIONS",
    "TflQuant",
    "TflTensor",
    "TflOperator",
    "TflSubgraph",
    "TflSignature",
    "TflModel",
    "read_model",
    "builtin_name",
]


class FlatbufferError(ValueError):
    """The bytes are not a well-formed TFLite flatbuffer (private; wrapped by callers)."""


# BuiltinOperator enum of schema.fbs, codes 0..161 in order.
BUILTIN_OPS: tuple[str, ...] = tuple("""
ADD AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE
EMBEDDING_LOOKUP FLOOR FULLY_CONNECTED HASHTABLE_LOOKUP L2_NORMALIZATION L2_POOL_2D
LOCAL_RESPONSE_NORMALIZATION LOGISTIC LSH_PROJECTION LSTM MAX_POOL_2D MUL RELU RELU_N1_TO_1
RELU6 RESHAPE RESIZE_BILINEAR RNN SOFTMAX SPACE_TO_DEPTH SVDF TANH CONCAT_EMBEDDINGS
SKIP_GRAM CALL CUSTOM EMBEDDING_LOOKUP_SPARSE PAD UNIDIRECTIONAL_SEQUENCE_RNN GATHER
BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND TRANSPOSE MEAN SUB DIV SQUEEZE
UNIDIRECTIONAL_SEQUENCE_LSTM STRIDED_SLICE BIDIRECTIONAL_SEQUENCE_RNN EXP TOPK_V2 SPLIT
LOG_SOFTMAX DELEGATE BIDIRECTIONAL_SEQUENCE_LSTM CAST PRELU MAXIMUM ARG_MAX MINIMUM LESS
NEG PADV2 GREATER GREATER_EQUAL LESS_EQUAL SELECT SLICE SIN TRANSPOSE_CONV SPARSE_TO_DENSE
TILE EXPAND_DIMS EQUAL NOT_EQUAL LOG SUM SQRT RSQRT SHAPE POW ARG_MIN FAKE_QUANT
REDUCE_PROD REDUCE_MAX PACK LOGICAL_OR ONE_HOT LOGICAL_AND LOGICAL_NOT UNPACK REDUCE_MIN
FLOOR_DIV REDUCE_ANY SQUARE ZEROS_LIKE FILL FLOOR_MOD RANGE RESIZE_NEAREST_NEIGHBOR
LEAKY_RELU SQUARED_DIFFERENCE MIRROR_PAD ABS SPLIT_V UNIQUE CEIL REVERSE_V2 ADD_N
GATHER_ND COS WHERE RANK ELU REVERSE_SEQUENCE MATRIX_DIAG QUANTIZE MATRIX_SET_DIAG ROUND
HARD_SWISH IF WHILE NON_MAX_SUPPRESSION_V4 NON_MAX_SUPPRESSION_V5 SCATTER_ND SELECT_V2
DENSIFY SEGMENT_SUM BATCH_MATMUL PLACEHOLDER_FOR_GREATER_OP_CODES CUMSUM CALL_ONCE
BROADCAST_TO RFFT2D CONV_3D IMAG REAL COMPLEX_ABS HASHTABLE HASHTABLE_FIND
HASHTABLE_IMPORT HASHTABLE_SIZE REDUCE_ALL CONV_3D_TRANSPOSE VAR_HANDLE READ_VARIABLE
ASSIGN_VARIABLE BROADCAST_ARGS RANDOM_STANDARD_NORMAL BUCKETIZE RANDOM_UNIFORM MULTINOMIAL
GELU DYNAMIC_UPDATE_SLICE RELU_0_TO_1 UNSORTED_SEGMENT_PROD UNSORTED_SEGMENT_MAX
UNSORTED_SEGMENT_SUM ATAN2 UNSORTED_SEGMENT_MIN SIGN BITCAST BITWISE_XOR RIGHT_SHIFT
""".split())

# TensorType enum -> numpy dtype name ("" where numpy has no match).
TENSOR_TYPES: tuple[str, ...] = (
    "float32", "float16", "int32", "uint8", "int64", "string", "bool", "int16",
    "complex64", "int8", "float64", "complex128", "uint64", "resource", "variant",
    "uint32", "uint16", "int4", "bfloat16",
)

# ActivationFunctionType enum.
ACTIVATIONS: tuple[str, ...] = ("none", "relu", "relu_n1_to_1", "relu6", "tanh", "sign_bit")

_NP_DTYPES = {"float32", "float16", "int32", "uint8", "int64", "bool", "int16", "int8",
              "float64", "uint64", "uint32", "uint16"}


def builtin_name(code: int) -> str:
    """Name of a BuiltinOperator code (``BUILTIN_<code>`` beyond the known range)."""
    return BUILTIN_OPS[code] if 0 <= code < len(BUILTIN_OPS) else f"BUILTIN_{code}"


# ---------------------------------------------------------------- raw flatbuffer access
class _Table:
    """One flatbuffer table at absolute position ``pos`` of ``buf``."""

    __slots__ = ("buf", "pos", "vt", "vt_len")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        soffset = _unpack(buf, "<i", pos)
        self.vt = pos - soffset
        self.vt_len = _unpack(buf, "<H", self.vt)
        if self.vt_len < 4 or self.vt + self.vt_len > len(buf):
            raise FlatbufferError(f"vtable at byte {self.vt} runs past the end of the file")

    def _field(self, slot: int) -> int:
        off = 4 + 2 * slot
        if off + 2 > self.vt_len:
            return 0
        rel = _unpack(self.buf, "<H", self.vt + off)
        return self.pos + rel if rel else 0

    def scalar(self, slot: int, fmt: str, default: Any) -> Any:
        p = self._field(slot)
        return _unpack(self.buf, "<" + fmt, p) if p else default

    def _indirect(self, p: int) -> int:
        return p + _unpack(self.buf, "<I", p)

    def table(self, slot: int) -> "_Table | None":
        p = self._field(slot)
        return _Table(self.buf, self._indirect(p)) if p else None

    def _vector(self, slot: int, elem_size: int) -> tuple[int, int]:
        p = self._field(slot)
        if not p:
            return 0, 0
        v = self._indirect(p)
        n = _unpack(self.buf, "<I", v)
        start = v + 4
        if start + n * elem_size > len(self.buf):
            raise FlatbufferError(
                f"vector of {n} elements at byte {v} runs past the end of the file "
                f"({len(self.buf)} bytes)"
            )
        return start, n

    def array(self, slot: int, dtype: str) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        start, n = self._vector(slot, dt.itemsize)
        if not n:
            return np.zeros(0, dtype=dt)
        return np.frombuffer(self.buf, dtype=dt, count=n, offset=start)

    def string(self, slot: int) -> str:
        start, n = self._vector(slot, 1)
        return self.buf[start:start + n].decode("utf-8", errors="replace") if n else ""

    def tables(self, slot: int) -> list["_Table"]:
        start, n = self._vector(slot, 4)
        return [_Table(self.buf, self._indirect(start + 4 * i)) for i in range(n)]


def _unpack(buf: bytes, fmt: str, pos: int) -> Any:
    size = struct.calcsize(fmt)
    if pos < 0 or pos + size > len(buf):
        raise FlatbufferError(
            f"read of {size} bytes at byte {pos} is outside the file ({len(buf)} bytes); "
            f"the file is truncated or not a flatbuffer"
        )
    return struct.unpack_from(fmt, buf, pos)[0]


# ---------------------------------------------------------------- plain records
@dataclass(frozen=True)
class TflQuant:
    """Quantization parameters of a tensor; per-channel when ``scale`` has >1 entries."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1

    def as_dict(self) -> dict[str, Any]:
        return {"scale": list(self.scale), "zero_point": list(self.zero_point),
                "quantized_dimension": self.quantized_dimension,
                "per_channel": self.per_channel}


@dataclass(frozen=True)
class TflTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...]
    dtype: str
    buffer: int
    quant: TflQuant | None
    is_variable: bool = False


@dataclass(frozen=True)
class TflOperator:
    index: int
    op_type: str                 # builtin name, or "CUSTOM"
    custom_code: str
    inputs: tuple[int, ...]      # tensor indices; -1 marks an omitted optional input
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class TflSubgraph:
    index: int
    name: str
    tensors: tuple[TflTensor, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: tuple[TflOperator, ...]


@dataclass(frozen=True)
class TflSignature:
    key: str
    subgraph_index: int
    inputs: dict[str, int]       # signature name -> tensor index
    outputs: dict[str, int]


@dataclass(frozen=True)
class TflModel:
    version: int
    description: str
    subgraphs: tuple[TflSubgraph, ...]
    signatures: tuple[TflSignature, ...]
    buffers: tuple[bytes, ...]   # raw data per buffer index (b"" when empty)

    def constant(self, tensor: TflTensor) -> np.ndarray | None:
        """The tensor's constant data reshaped to its shape, or None when it has none."""
        if tensor.buffer <= 0 or tensor.buffer >= len(self.buffers):
            return None
        raw = self.buffers[tensor.buffer]
        if not raw or tensor.dtype not in _NP_DTYPES:
            return None
        dt = np.dtype(tensor.dtype).newbyteorder("<")
        count = int(np.prod(tensor.shape)) if tensor.shape else 1
        if count * dt.itemsize > len(raw):
            return None
        return np.frombuffer(raw, dtype=dt, count=count).reshape(tensor.shape)


# ---------------------------------------------------------------- builtin options
# op -> (field, vtable slot, struct format, default), per the *Options tables of schema.fbs.
_POOL = [("padding", 0, "b", 0), ("stride_w", 1, "i", 1), ("stride_h", 2, "i", 1),
         ("filter_width", 3, "i", 1), ("filter_height", 4, "i", 1),
         ("fused_activation_function", 5, "b", 0)]
_FUSED_ONLY = [("fused_activation_function", 0, "b", 0)]
_REDUCER = [("keep_dims", 0, "?", False)]
_OPTION_FIELDS: dict[str, list[tuple[str, int, str, Any]]] = {
    "CONV_2D": [("padding", 0, "b", 0), ("stride_w", 1, "i", 1), ("stride_h", 2, "i", 1),
                ("fused_activation_function", 3, "b", 0), ("dilation_w_factor", 4, "i", 1),
                ("dilation_h_factor", 5, "i", 1)],
    "DEPTHWISE_CONV_2D": [("padding", 0, "b", 0), ("stride_w", 1, "i", 1),
                          ("stride_h", 2, "i", 1), ("depth_multiplier", 3, "i", 0),
                          ("fused_activation_function", 4, "b", 0),
                          ("dilation_w_factor", 5, "i", 1), ("dilation_h_factor", 6, "i", 1)],
    "TRANSPOSE_CONV": [("padding", 0, "b", 0), ("stride_w", 1, "i", 1),
                       ("stride_h", 2, "i", 1), ("fused_activation_function", 3, "b", 0)],
    "AVERAGE_POOL_2D": _POOL,
    "MAX_POOL_2D": _POOL,
    "L2_POOL_2D": _POOL,
    "FULLY_CONNECTED": [("fused_activation_function", 0, "b", 0), ("weights_format", 1, "b", 0),
                        ("keep_num_dims", 2, "?", False)],
    "ADD": _FUSED_ONLY,
    "SUB": _FUSED_ONLY,
    "MUL": _FUSED_ONLY,
    "DIV": _FUSED_ONLY,
    "CONCATENATION": [("axis", 0, "i", 0), ("fused_activation_function", 1, "b", 0)],
    "SOFTMAX": [("beta", 0, "f", 0.0)],
    "MEAN": _REDUCER,
    "SUM": _REDUCER,
    "REDUCE_MAX": _REDUCER,
    "REDUCE_MIN": _REDUCER,
    "REDUCE_PROD": _REDUCER,
    "RESIZE_BILINEAR": [("align_corners", 2, "?", False), ("half_pixel_centers", 3, "?", False)],
    "RESIZE_NEAREST_NEIGHBOR": [("align_corners", 0, "?", False),
                                ("half_pixel_centers", 1, "?", False)],
    "LEAKY_RELU": [("alpha", 0, "f", 0.0)],
    "SPLIT": [("num_splits", 0, "i", 0)],
    "SPLIT_V": [("num_splits", 0, "i", 0)],
    "MIRROR_PAD": [("mode", 0, "b", 0)],
    "BATCH_MATMUL": [("adj_x", 0, "?", False), ("adj_y", 1, "?", False)],
    "GATHER": [("axis", 0, "i", 0), ("batch_dims", 1, "i", 0)],
    "GELU": [("approximate", 0, "?", False)],
    "LOCAL_RESPONSE_NORMALIZATION": [("radius", 0, "i", 0), ("bias", 1, "f", 0.0),
                                     ("alpha", 2, "f", 0.0), ("beta", 3, "f", 0.0)],
}
_ACTIVATION_FIELD = "fused_activation_function"


def _options(op_type: str, table: "_Table | None") -> dict[str, Any]:
    spec = _OPTION_FIELDS.get(op_type)
    if not spec:
        return {}
    out: dict[str, Any] = {}
    for name, slot, fmt, default in spec:
        out[name] = table.scalar(slot, fmt, default) if table is not None else default
    if _ACTIVATION_FIELD in out:
        code = out[_ACTIVATION_FIELD]
        known = 0 <= code < len(ACTIVATIONS)
        out[_ACTIVATION_FIELD] = ACTIVATIONS[code] if known else f"code{code}"
    if "padding" in out:
        out["padding"] = "SAME" if out["padding"] == 0 else "VALID"
    return out


# ---------------------------------------------------------------- model reader
def _tensor(t: _Table, index: int) -> TflTensor:
    shape = tuple(int(d) for d in t.array(0, "int32"))
    signature = tuple(int(d) for d in t.array(7, "int32")) or shape
    type_code = t.scalar(1, "b", 0)
    dtype = TENSOR_TYPES[type_code] if 0 <= type_code < len(TENSOR_TYPES) else f"type{type_code}"
    quant = None
    q = t.table(4)
    if q is not None:
        scale = tuple(float(s) for s in q.array(2, "float32"))
        zero = tuple(int(z) for z in q.array(3, "int64"))
        if scale:
            quant = TflQuant(scale, zero, int(q.scalar(6, "i", 0)))
    return TflTensor(index=index, name=t.string(3), shape=shape, shape_signature=signature,
                     dtype=dtype, buffer=int(t.scalar(2, "I", 0)), quant=quant,
                     is_variable=bool(t.scalar(5, "?", False)))


def _subgraph(sg: _Table, index: int, opcodes: list[tuple[str, str]]) -> TflSubgraph:
    tensors = tuple(_tensor(t, i) for i, t in enumerate(sg.tables(0)))
    operators = []
    for i, op in enumerate(sg.tables(3)):
        code_index = int(op.scalar(0, "I", 0))
        if code_index >= len(opcodes):
            raise FlatbufferError(
                f"operator {i} uses opcode {code_index}, but the model lists {len(opcodes)}"
            )
        op_type, custom = opcodes[code_index]
        ins = tuple(int(x) for x in op.array(1, "int32"))
        outs = tuple(int(x) for x in op.array(2, "int32"))
        for x in ins + outs:
            if x >= len(tensors):
                raise FlatbufferError(f"operator {i} ({op_type}) names tensor {x}, "
                                      f"but the subgraph has {len(tensors)}")
        operators.append(TflOperator(i, op_type, custom, ins, outs, _options(op_type, op.table(4))))
    return TflSubgraph(
        index=index, name=sg.string(4), tensors=tensors,
        inputs=tuple(int(x) for x in sg.array(1, "int32")),
        outputs=tuple(int(x) for x in sg.array(2, "int32")),
        operators=tuple(operators),
    )


def read_model(buf: bytes) -> TflModel:
    """Parse a whole ``.tflite`` flatbuffer.

    Raises
    ------
    FlatbufferError
        If the bytes are too short, lack the ``TFL3`` identifier, or any offset points
        outside the buffer.
    """
    if len(buf) < 8:
        raise FlatbufferError(f"{len(buf)} bytes is too short for a TFLite flatbuffer")
    ident = bytes(buf[4:8])
    if ident != b"TFL3":
        raise FlatbufferError(
            f"file identifier is {ident!r}, expected b'TFL3'; this is not a .tflite model"
        )
    root = _Table(buf, _unpack(buf, "<I", 0))
    opcodes: list[tuple[str, str]] = []
    for oc in root.tables(1):
        code = max(int(oc.scalar(0, "b", 0)), int(oc.scalar(3, "i", 0)))
        opcodes.append((builtin_name(code), oc.string(1)))
    buffers: list[bytes] = []
    for b in root.tables(4):
        offset = int(b.scalar(1, "Q", 0))
        size = int(b.scalar(2, "Q", 0))
        if offset > 1:  # data stored after the flatbuffer (models over 2 GB)
            if offset + size > len(buf):
                raise FlatbufferError(f"buffer data at byte {offset} runs past the end of the file")
            buffers.append(bytes(buf[offset:offset + size]))
        else:
            start, n = b._vector(0, 1)
            buffers.append(bytes(buf[start:start + n]) if n else b"")
    subgraphs = tuple(_subgraph(sg, i, opcodes) for i, sg in enumerate(root.tables(2)))
    signatures = []
    for sd in root.tables(7):
        signatures.append(TflSignature(
            key=sd.string(2),
            subgraph_index=int(sd.scalar(4, "I", 0)),
            inputs={m.string(0): int(m.scalar(1, "I", 0)) for m in sd.tables(0)},
            outputs={m.string(0): int(m.scalar(1, "I", 0)) for m in sd.tables(1)},
        ))
    return TflModel(version=int(root.scalar(0, "I", 0)), description=root.string(3),
                    subgraphs=subgraphs, signatures=tuple(signatures), buffers=tuple(buffers))
