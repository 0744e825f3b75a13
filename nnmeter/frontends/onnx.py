"""ONNX frontend: an ``.onnx`` file (or an ``onnx.ModelProto``) → :class:`ModelGraph`.

What it does, in order:

1. reads the model (``ModelLoadError`` when it is not a readable ONNX model);
2. fixes the input shapes (``input_shapes`` overrides; a dynamic dimension without
   one raises :class:`DynamicShapeError`) and runs ONNX shape inference;
3. walks the nodes in topological order. A node whose inputs are all constant
   (initializers, ``Constant``, ``ConstantOfShape``, ``Shape`` of a tensor whose shape
   is known, ...) is evaluated with numpy, so shape-computing chains such as
   Shape → Gather → Unsqueeze → Concat → Reshape fold away. Every other node maps onto
   the IR vocabulary (:mod:`nnmeter.ir.ops`), with multi-node patterns recognised
   (channel shuffle, swish, hswish, erf-GELU, MatMul + bias Add). Ops outside the
   vocabulary become ``unknown`` nodes with the output shapes from ONNX shape
   inference; nothing is dropped except Identity, inference-mode Dropout and the
   QuantizeLinear/DequantizeLinear pairs of QDQ models on activations (counted in
   ``graph.meta["qdq_nodes_removed"]``: the IR describes the float computation).
4. validates the graph.

ONNX is NCHW already, which is the IR's canonical layout. IR node names are the ONNX
node names (made unique, generated as ``<OpType>_<index>`` when empty); graph inputs keep
their ONNX names.

Examples
--------
>>> import onnx
>>> from onnx import helper, TensorProto
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> node = helper.make_node("Relu", ["x"], ["y"], name="act")
>>> model = helper.make_model(helper.make_graph([node], "g", [x], [y]))
>>> g = load_onnx(model)
>>> [(n.name, n.op, n.output_shape) for n in g.nodes()]
[('x', 'input', (1, 3, 8, 8)), ('act', 'relu', (1, 3, 8, 8))]
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import (
    DynamicShapeError,
    GraphValidationError,
    InputNameError,
    ModelLoadError,
    NNMeterError,
    ShapeInferenceError,
    UnsupportedOpError,
)
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.ir.ops import (
    BNAttrs, ChannelShuffleAttrs, ClipAttrs, ConcatAttrs, ConvAttrs, EltwiseAttrs,
    FCAttrs, FlattenAttrs, GapAttrs, LayerNormAttrs, LRNAttrs, MatMulAttrs, NoAttrs,
    PadAttrs, PoolAttrs, ReduceAttrs, ReshapeAttrs, ResizeAttrs, SoftmaxAttrs, SplitAttrs,
    TransposeAttrs, UnknownAttrs,
)
from nnmeter.ir.shapes import infer_node

__all__ = ["load_onnx", "read_onnx_model"]

log = logging.getLogger(__name__)

#: Constants larger than this many elements are kept as "shape only" (never evaluated).
_MAX_FOLD_ELEMENTS = 1 << 22

#: Ops that are never evaluated even when every input is constant (random or stateful).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
            "Multinomial", "Bernoulli"}


class _Fallback(Exception):
    """Internal: this node cannot map onto the vocabulary; keep it as ``unknown``."""


# ---------------------------------------------------------------------------- reading
def read_onnx_model(source: "str | os.PathLike | bytes | Any") -> Any:
    """Read ``source`` (path, serialized bytes or ``onnx.ModelProto``) into a ModelProto.

    A ModelProto passed in is copied, never modified.

    Raises
    ------
    ModelLoadError
        If the file is missing, or is not a readable, non-empty ONNX model.
    """
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        what = "the given ModelProto"
    elif isinstance(source, (bytes, bytearray)):
        what = "the given bytes"
        try:
            model = onnx.load_model_from_string(bytes(source))
        except (DecodeError, ValueError, RuntimeError) as err:
            raise ModelLoadError(f"{what} are not a serialized ONNX model: {err}") from err
    else:
        path = Path(source)
        what = str(path)
        if not path.is_file():
            raise ModelLoadError(
                f"ONNX model {path} does not exist or is not a file; pass the path of "
                f"an .onnx file"
            )
        try:
            model = onnx.load(str(path))
        except (DecodeError, ValueError, RuntimeError, OSError, TypeError) as err:
            raise ModelLoadError(
                f"{path} is not a readable ONNX model (truncated or corrupt?): {err}"
            ) from err
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelLoadError(
            f"{what} holds no ONNX graph (no nodes, no outputs); is it really an ONNX "
            f"model, and complete?"
        )
    return model


def _elem_np_dtype(elem_type: int) -> str:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return "float32"


def _static_shape(type_proto: Any) -> tuple[int, ...] | None:
    """The static shape of a tensor type, or None if unknown, dynamic or not a tensor."""
    if type_proto.WhichOneof("value") != "tensor_type":
        return None
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            return None
    return tuple(dims)


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _jsonable(value: Any) -> Any:
    """A JSON-able rendering of an ONNX attribute value (tensors and graphs summarised)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "dims") and hasattr(value, "data_type"):
        return {"tensor_shape": list(value.dims)}
    if hasattr(value, "node") and hasattr(value, "output"):
        return {"subgraph": getattr(value, "name", ""), "nodes": len(value.node)}
    return str(value)


def _f32(value: Any) -> float:
    """A float attribute read back from float32 storage, as its shortest decimal
    (1e-5 stays 1e-05 rather than 9.99999974e-06)."""
    return float(str(np.float32(value)))


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ---------------------------------------------------------------------------- importer
class _Importer:
    """One ONNX → IR conversion (single use)."""

    def __init__(self, model: Any, input_shapes: Mapping[str, Sequence[int]] | None,
                 name: str) -> None:
        self.model = model
        self.name = name
        self.user_shapes = dict(input_shapes or {})
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        self.consts: dict[str, np.ndarray | None] = {}
        self.const_shapes: dict[str, tuple[int, ...]] = {}
        self.refs: dict[str, Ref] = {}
        self.vi_shapes: dict[str, tuple[int, ...]] = {}
        self.consumers: dict[str, list[int]] = {}
        self.graph_outputs: set[str] = set()
        self.done: set[int] = set()
        self.graph: ModelGraph | None = None
        self.added: list[str] = []

    # -- inputs and shape inference ------------------------------------------------
    def _prepare_inputs(self) -> list[tuple[str, tuple[int, ...], str]]:
        g = self.model.graph
        init_names = {i.name for i in g.initializer} | {
            s.values.name for s in g.sparse_initializer
        }
        real = [vi for vi in g.input if vi.name not in init_names]
        names = [vi.name for vi in real]
        given: dict[str, tuple[int, ...]] = {}
        for key, shape in self.user_shapes.items():
            if key in ("", None):
                if not names:
                    raise InputNameError(
                        f"an input shape was given but model {self.name!r} has no inputs"
                    )
                key = names[0]
            if key not in names:
                raise InputNameError(
                    f"input shape given for {key!r}, which is not an input of "
                    f"{self.name!r}; its inputs are {names}"
                )
            given[key] = tuple(int(d) for d in shape)
        out = []
        for vi in real:
            kind = vi.type.WhichOneof("value")
            if kind != "tensor_type":
                raise UnsupportedOpError(
                    f"input {vi.name!r} of {self.name!r} is a {kind or 'untyped value'}, "
                    f"not a tensor; the IR holds tensor inputs only"
                )
            tt = vi.type.tensor_type
            dtype = _elem_np_dtype(tt.elem_type)
            if dtype in ("object", "str") or tt.elem_type == 8:  # 8 = STRING
                raise UnsupportedOpError(
                    f"input {vi.name!r} of {self.name!r} holds strings; the IR holds "
                    f"numeric tensors only"
                )
            declared = list(tt.shape.dim) if tt.HasField("shape") else None
            if vi.name in given:
                shape = given[vi.name]
                if declared is not None and len(declared) != len(shape):
                    raise ShapeInferenceError(
                        f"input {vi.name!r} has rank {len(declared)} in the model but "
                        f"the given shape {shape} has rank {len(shape)}"
                    )
            else:
                if declared is None:
                    raise DynamicShapeError(
                        f"input {vi.name!r} of {self.name!r} has no declared shape; pass "
                        f"one, e.g. --input-shape {vi.name}=1,3,224,224 "
                        f"(input_shapes={{{vi.name!r}: (1, 3, 224, 224)}})"
                    )
                dims = []
                for i, d in enumerate(declared):
                    if d.HasField("dim_value") and d.dim_value > 0:
                        dims.append(int(d.dim_value))
                    else:
                        label = d.dim_param if d.HasField("dim_param") else "?"
                        example = ",".join(
                            str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0
                            else "1" for x in declared
                        )
                        raise DynamicShapeError(
                            f"input {vi.name!r} of {self.name!r} has a dynamic dimension "
                            f"{i} ({label!r}); give a static shape, e.g. --input-shape "
                            f"{vi.name}={example} (input_shapes={{{vi.name!r}: (...)}})"
                        )
                shape = tuple(dims)
            # Write the static shape into the model so that ONNX inference can use it.
            tt.shape.Clear()
            for d in shape:
                tt.shape.dim.add().dim_value = d
            out.append((vi.name, shape, dtype))
        return out

    def _run_shape_inference(self) -> None:
        import onnx

        try:
            inferred = onnx.shape_inference.infer_shapes(
                self.model, check_type=False, strict_mode=False, data_prop=True
            )
        except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as err:
            log.warning("ONNX shape inference failed on %s (%s); continuing without it",
                        self.name, err)
            inferred = self.model
        g = inferred.graph
        for vi in list(g.value_info) + list(g.output) + list(g.input):
            shape = _static_shape(vi.type)
            if shape is not None:
                self.vi_shapes[vi.name] = shape

    # -- helpers ---------------------------------------------------------------------
    def is_const(self, name: str) -> bool:
        return name in self.const_shapes

    def value(self, name: str) -> np.ndarray:
        """The value of a constant input; _Fallback if it is not a materialised constant."""
        v = self.consts.get(name)
        if v is None:
            raise _Fallback(f"{name!r} is not a known constant")
        return v

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.const_shapes:
            return self.const_shapes[name]
        if name in self.refs:
            return self.graph.shape_of(self.refs[name])
        raise _Fallback(f"shape of {name!r} is unknown")

    def set_const(self, name: str, value: np.ndarray | None,
                  shape: Sequence[int] | None = None) -> None:
        if value is not None:
            value = np.asarray(value)
            shape = value.shape
        self.consts[name] = value
        self.const_shapes[name] = tuple(int(d) for d in shape)

    def sole_consumer(self, tensor: str) -> Any | None:
        """The one node reading ``tensor`` (by index), None if several, none, or an output."""
        users = self.consumers.get(tensor, [])
        if len(users) != 1 or tensor in self.graph_outputs:
            return None
        idx = users[0]
        if idx in self.done:
            return None
        return idx

    def node_name(self, node: Any, idx: int) -> str:
        base = node.name or f"{node.op_type}_{idx}"
        name, k = base, 1
        while name in self.graph:
            name = f"{base}_{k}"
            k += 1
        return name

    # -- emission --------------------------------------------------------------------
    def emit(self, onnx_node: Any, idx: int, op: str, attrs: Any, inputs: Sequence[str],
             outputs: Sequence[str], *, name: str | None = None,
             meta: dict | None = None) -> str:
        """Add one IR node reading ONNX tensors ``inputs`` and defining ``outputs``.

        Raises _Fallback when the IR's shape rule disagrees with ONNX shape inference.
        """
        refs = []
        for t in inputs:
            if t not in self.refs:
                raise _Fallback(f"input {t!r} is not an activation")
            refs.append(self.refs[t])
        in_shapes = tuple(self.graph.shape_of(r) for r in refs)
        nm = name or self.node_name(onnx_node, idx)
        probe = Node(nm, op, attrs, tuple(refs), in_shapes)
        try:
            outs = [tuple(int(d) for d in s) for s in infer_node(probe, in_shapes)]
        except (ShapeInferenceError, IndexError, TypeError, ValueError,
                ZeroDivisionError) as err:
            raise _Fallback(f"IR shape rule of {op} fails: {err}") from err
        if len(outs) != len(outputs):
            raise _Fallback(f"{op} gives {len(outs)} outputs, ONNX node has {len(outputs)}")
        for t, s in zip(outputs, outs):
            expected = self.vi_shapes.get(t)
            if expected is not None and expected != s:
                raise _Fallback(f"{op} gives shape {s}, ONNX inference says {expected}")
        self.added.append(nm)
        self.graph.add_node(
            nm, op, attrs, refs, input_shapes=in_shapes, output_shapes=outs,
            source={"framework": "onnx", "op_type": onnx_node.op_type,
                    "name": onnx_node.name},
            meta=meta,
        )
        for port, t in enumerate(outputs):
            self.refs[t] = Ref(nm, port)
        return nm

    def emit_unknown(self, node: Any, idx: int, reason: str = "") -> None:
        act_inputs = [t for t in node.input if t and t in self.refs]
        outputs = [t for t in node.output if t]
        out_shapes = []
        for t in outputs:
            s = self.vi_shapes.get(t)
            if s is None:
                raise UnsupportedOpError(
                    f"ONNX op {node.op_type} {node.name or '#' + str(idx)!r} is outside the "
                    f"IR vocabulary and ONNX shape inference gives no static shape for its "
                    f"output {t!r}; nnmeter cannot represent it (tensor values only; "
                    f"sequences, maps and data-dependent shapes are not supported)"
                )
            out_shapes.append(s)
        fields: dict[str, Any] = {k: _jsonable(v) for k, v in _attrs(node).items()}
        if node.domain not in ("", "ai.onnx"):
            fields["domain"] = node.domain
        consts = {str(i): list(self.const_shapes[t]) for i, t in enumerate(node.input)
                  if t and t in self.const_shapes}
        if consts:
            fields["const_inputs"] = consts
        if reason:
            fields["reason"] = reason
        if not act_inputs:
            raise UnsupportedOpError(
                f"ONNX op {node.op_type} {node.name!r} reads no activation and could not "
                f"be evaluated as a constant"
            )
        refs = [self.refs[t] for t in act_inputs]
        nm = self.node_name(node, idx)
        self.graph.add_node(
            nm, "unknown",
            UnknownAttrs(original_type=f"onnx:{node.op_type}", fields=fields), refs,
            input_shapes=[self.graph.shape_of(r) for r in refs], output_shapes=out_shapes,
            source={"framework": "onnx", "op_type": node.op_type, "name": node.name},
        )
        for port, t in enumerate(outputs):
            self.refs[t] = Ref(nm, port)

    # -- constant folding --------------------------------------------------------------
    def try_fold(self, node: Any) -> bool:
        """Evaluate ``node`` if its inputs are constant; True when its outputs are now
        constants."""
        ins = [t for t in node.input if t]
        op = node.op_type
        if op in ("Shape", "Size") and ins and ins[0] in self.refs:
            shape = np.array(self.graph.shape_of(self.refs[ins[0]]), dtype=np.int64)
            if op == "Size":
                self.set_const(node.output[0], np.array(int(np.prod(shape)), dtype=np.int64))
                return True
            a = _attrs(node)
            start, end = a.get("start", 0), a.get("end", None)
            self.set_const(node.output[0], shape[start:end])
            return True
        if not all(self.is_const(t) for t in ins):
            return False
        if node.domain not in ("", "ai.onnx"):
            return False
        outputs = [t for t in node.output if t]
        if op in _NO_FOLD or any(self.consts[t] is None for t in ins) or any(
            math.prod(self.const_shapes[t]) > _MAX_FOLD_ELEMENTS for t in ins
        ):
            if op in ("Identity", "Dropout"):
                self.set_const(node.output[0], None, self.const_shapes[ins[0]])
                return True
            shapes = [self.vi_shapes.get(t) for t in outputs]
            if all(s is not None for s in shapes):
                for t, s in zip(outputs, shapes):
                    self.set_const(t, None, s)
                return True
            return False
        try:
            values = _evaluate(node, [self.consts[t] if t else None for t in node.input],
                               self.opset)
        except (NNMeterError, ValueError, TypeError, IndexError, KeyError, RuntimeError,
                NotImplementedError, AttributeError, OverflowError) as err:
            log.debug("could not fold %s %s: %s", op, node.name, err)
            shapes = [self.vi_shapes.get(t) for t in outputs]
            if all(s is not None for s in shapes):
                for t, s in zip(outputs, shapes):
                    self.set_const(t, None, s)
                return True
            return False
        for t, v in zip(node.output, values):
            if t:
                self.set_const(t, v)
        return True

    # -- main --------------------------------------------------------------------------
    def run(self) -> ModelGraph:
        from onnx import numpy_helper

        inputs = self._prepare_inputs()
        self._run_shape_inference()
        g = self.model.graph
        self.graph = ModelGraph(self.name, dtype=_graph_dtype(inputs))
        self.graph.meta = {
            "source_format": "onnx", "opset": self.opset,
            "producer": f"{self.model.producer_name} {self.model.producer_version}".strip(),
        }
        for init in g.initializer:
            try:
                self.set_const(init.name, numpy_helper.to_array(init))
            except (ValueError, TypeError, OSError) as err:
                self.set_const(init.name, None, tuple(init.dims))
                log.debug("initializer %s not read: %s", init.name, err)
        for sp in g.sparse_initializer:
            self.set_const(sp.values.name, None, tuple(sp.dims))
        for name, shape, dtype in inputs:
            self.graph.add_input(name, shape, dtype)
            self.graph.replace(name, source={"framework": "onnx", "op_type": "input",
                                             "name": name})
            self.refs[name] = Ref(name, 0)
        nodes = _topological(list(g.node), set(self.refs) | set(self.const_shapes))
        self.nodes = nodes
        for i, n in enumerate(nodes):
            for t in n.input:
                if t:
                    self.consumers.setdefault(t, []).append(i)
        self.graph_outputs = {o.name for o in g.output}
        for i, n in enumerate(nodes):
            if i in self.done:
                continue
            self.done.add(i)
            if self.try_fold(n):
                continue
            handler = _HANDLERS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
            if handler is None:
                self.emit_unknown(n, i)
                continue
            saved_done = set(self.done)
            mark = len(self.added)
            try:
                handler(self, n, i)
            except _Fallback as why:
                self.done = saved_done
                for name in reversed(self.added[mark:]):
                    self.graph.remove(name)
                del self.added[mark:]
                log.debug("keeping %s %s as unknown: %s", n.op_type, n.name, why)
                self.emit_unknown(n, i, str(why))
        outs = []
        for o in g.output:
            if o.name in self.refs:
                outs.append(self.refs[o.name])
            elif o.name in self.const_shapes:
                log.warning("output %r of %s is a constant; not kept as a graph output",
                            o.name, self.name)
            else:
                raise GraphValidationError(
                    f"output {o.name!r} of {self.name!r} is produced by no node"
                )
        if not outs:
            raise UnsupportedOpError(
                f"every output of {self.name!r} is a constant; the model computes nothing "
                f"from its inputs"
            )
        # A tensor listed twice as an output is one Ref; keep the order, drop repeats.
        seen: list[Ref] = []
        for r in outs:
            if r not in seen:
                seen.append(r)
        self.graph.set_outputs(seen)
        self.graph.validate()
        return self.graph


def _graph_dtype(inputs: list[tuple[str, tuple[int, ...], str]]) -> str:
    for _, _, dtype in inputs:
        if dtype in ("float16", "float32", "float64", "bfloat16"):
            return dtype
    return "float32"


def _topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """ONNX nodes in a valid topological order (the file's order when it is one).

    Raises
    ------
    GraphValidationError
        If the nodes form a cycle or read tensors nothing defines.
    """
    have = set(available)
    ok = True
    for n in nodes:
        if any(t and t not in have for t in n.input):
            ok = False
            break
        have.update(t for t in n.output if t)
    if ok:
        return nodes
    have = set(available)
    pending = list(nodes)
    ordered: list[Any] = []
    while pending:
        rest = []
        for n in pending:
            if all(not t or t in have for t in n.input):
                ordered.append(n)
                have.update(t for t in n.output if t)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            missing = sorted({t for n in rest for t in n.input if t and t not in have})[:5]
            raise GraphValidationError(
                f"ONNX graph has a cycle or reads undefined tensors {missing} "
                f"({len(rest)} nodes cannot be ordered); a model graph must be a DAG"
            )
        pending = rest
    return ordered


# ---------------------------------------------------------------------------- folding
def _evaluate(node: Any, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Evaluate one node on constant inputs: numpy fast paths, onnx.reference otherwise."""
    op = node.op_type
    a = _attrs(node)
    x = inputs[0] if inputs else None
    if op == "Constant":
        from onnx import numpy_helper

        if "value" in a:
            return [numpy_helper.to_array(a["value"])]
        for key, dt in (("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):
            if key in a:
                return [np.array(a[key], dtype=dt)]
    elif op == "ConstantOfShape":
        from onnx import numpy_helper

        fill = numpy_helper.to_array(a["value"]).reshape(()) if "value" in a else \
            np.array(0, dtype=np.float32)
        return [np.broadcast_to(fill, tuple(int(d) for d in x))]
    elif op in ("Identity", "Dropout"):
        return [x] + ([np.ones(x.shape, dtype=bool)] if len(node.output) > 1 else [])
    elif op == "Unsqueeze":
        axes = a.get("axes", None)
        if axes is None:
            axes = [int(v) for v in inputs[1]]
        rank = x.ndim + len(axes)
        shape = list(x.shape)
        for ax in sorted(_axis(int(v), rank) for v in axes):
            shape.insert(ax, 1)
        return [x.reshape(shape)]
    elif op == "Squeeze":
        axes = a.get("axes", None)
        if axes is None and len(inputs) > 1 and inputs[1] is not None:
            axes = [int(v) for v in inputs[1]]
        if axes is None:
            return [np.squeeze(x)]
        return [np.squeeze(x, axis=tuple(_axis(int(v), x.ndim) for v in axes))]
    elif op == "Concat":
        return [np.concatenate([v for v in inputs if v is not None], axis=a["axis"])]
    elif op == "Gather":
        return [np.take(x, inputs[1].astype(np.int64), axis=a.get("axis", 0))]
    elif op == "Cast":
        from onnx import helper

        return [x.astype(helper.tensor_dtype_to_np_dtype(a["to"]))]
    elif op == "Reshape":
        target = [int(v) for v in (a["shape"] if "shape" in a else inputs[1])]
        return [x.reshape(_resolve_reshape(x.shape, target, a.get("allowzero", 0)))]
    elif op in ("Add", "Sub", "Mul", "Div") and "broadcast" not in a:
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
        if op == "Div" and np.issubdtype(x.dtype, np.integer):
            return [(x // inputs[1]).astype(x.dtype)]
        return [fn(x, inputs[1]).astype(np.result_type(x, inputs[1]))]
    elif op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    # Anything else: the reference implementation on a one-node model.
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if t else "" for i, t in enumerate(node.input)]
    feeds = {n: v for n, v in zip(names, inputs) if n}
    new = helper.make_node(op, names, [f"out{i}" for i in range(len(node.output))],
                           domain=node.domain)
    new.attribute.extend(node.attribute)
    ev = ReferenceEvaluator(new)
    return [np.asarray(v) for v in ev.run(None, feeds)]


def _resolve_reshape(in_shape: Sequence[int], target: Sequence[int],
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


# ---------------------------------------------------------------------------- handlers
def _pair_pads(pads: Sequence[int] | None) -> tuple[int, int, int, int]:
    if not pads:
        return (0, 0, 0, 0)
    if len(pads) != 4:
        raise _Fallback(f"pads {list(pads)} are not 2-D")
    return (int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3]))


def _auto_pads(auto_pad: str, in_hw: Sequence[int], kernel: Sequence[int],
               stride: Sequence[int], dilation: Sequence[int],
               pads: Sequence[int] | None) -> tuple[int, int, int, int]:
    """Resolve ONNX auto_pad into explicit (top, left, bottom, right) pads."""
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else (auto_pad or "NOTSET")
    if auto_pad in ("NOTSET", ""):
        return _pair_pads(pads)
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, stride, dilation):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(small)
            end.append(big)
        elif auto_pad == "SAME_LOWER":
            begin.append(big)
            end.append(small)
        else:
            raise _Fallback(f"auto_pad {auto_pad!r}")
    return (begin[0], begin[1], end[0], end[1])


def _act_input(imp: _Importer, node: Any, k: int = 0) -> str:
    if len(node.input) <= k or node.input[k] not in imp.refs:
        raise _Fallback(f"input {k} is not an activation")
    return node.input[k]


def _as_2d(a: dict, rank: int) -> dict:
    """Spatial attributes of a 1-D op rewritten for the 2-D op with H = 1."""
    if rank != 3:
        return a
    a = dict(a)
    for key in ("kernel_shape", "strides", "dilations", "output_padding"):
        if key in a:
            a[key] = [1 if key != "output_padding" else 0] + list(a[key])
    if "pads" in a:
        a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    return a


def _emit_spatial(imp: _Importer, node: Any, idx: int, op: str, attrs: Any, x: str) -> None:
    """Emit a 2-D op; a rank-3 (N, C, L) input is reshaped to (N, C, 1, L) around it,
    as the canonical layout asks (nodes ``<name>/to2d``, ``<name>``, ``<name>/to1d``)."""
    xs = imp.shape(x)
    if len(xs) == 4:
        imp.emit(node, idx, op, attrs, [x], [node.output[0]])
        return
    n, c, length = xs
    base = imp.node_name(node, idx)
    t2d, t_op = f"{node.output[0]}#2d", f"{node.output[0]}#op"
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=(n, c, 1, length)), [x], [t2d],
             name=f"{base}/to2d")
    imp.emit(node, idx, op, attrs, [t2d], [t_op], name=base)
    n2, c2, _, l2 = imp.shape(t_op)
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=(n2, c2, l2)), [t_op],
             [node.output[0]], name=f"{base}/to1d")


def _h_conv(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    w = node.input[1]
    if not imp.is_const(w):
        raise _Fallback("weights are not constant")
    xs, ws = imp.shape(x), imp.const_shapes[w]
    if len(xs) not in (3, 4) or len(ws) != len(xs):
        raise _Fallback(f"only 1-D and 2-D convolution map onto the IR (input {xs})")
    a = _as_2d(_attrs(node), len(xs))
    if len(xs) == 3:
        xs, ws = (xs[0], xs[1], 1, xs[2]), (ws[0], ws[1], 1, ws[2])
    kernel = tuple(a.get("kernel_shape", ws[2:]))
    stride = tuple(a.get("strides", (1, 1)))
    dilation = tuple(a.get("dilations", (1, 1)))
    group = int(a.get("group", 1))
    bias = len(node.input) > 2 and bool(node.input[2])
    if bias and not imp.is_const(node.input[2]):
        raise _Fallback("bias is not constant")
    if node.op_type == "ConvTranspose":
        if imp.shape(x) != xs:
            raise _Fallback("1-D ConvTranspose")
        _conv_transpose(imp, node, idx, x, xs, ws, a, kernel, stride, dilation, group, bias)
        return
    pads = _auto_pads(a.get("auto_pad", "NOTSET"), xs[2:], kernel, stride, dilation,
                      a.get("pads"))
    attrs = ConvAttrs(out_channels=int(ws[0]), kernel=kernel, stride=stride, pads=pads,
                      dilation=dilation, groups=group, bias=bias)
    op = "dwconv" if group == xs[1] and group > 1 else "conv"
    _emit_spatial(imp, node, idx, op, attrs, x)


def _conv_transpose(imp: _Importer, node: Any, idx: int, x: str, xs: tuple, ws: tuple,
                    a: dict, kernel: tuple, stride: tuple, dilation: tuple, group: int,
                    bias: bool) -> None:
    out_pad = tuple(a.get("output_padding", (0, 0)))
    auto_pad = a.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    target = a.get("output_shape")
    if target is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [xs[2] * stride[0], xs[3] * stride[1]]
    if target is not None:
        target = list(target)[-2:]
        begin, end = [], []
        for i in range(2):
            total = stride[i] * (xs[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilation[i] \
                + 1 - target[i]
            if total < 0:
                raise _Fallback("output_shape needs negative padding")
            if auto_pad == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        pads = (begin[0], begin[1], end[0], end[1])
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        pads = _pair_pads(a.get("pads"))
    attrs = ConvAttrs(out_channels=int(ws[1]) * group, kernel=kernel, stride=stride,
                      pads=pads, dilation=dilation, groups=group, bias=bias,
                      output_padding=out_pad)
    imp.emit(node, idx, "convtranspose", attrs, [x], [node.output[0]])


def _h_gemm(imp: _Importer, node: Any, idx: int) -> None:
    a = _attrs(node)
    x = _act_input(imp, node)
    w = node.input[1]
    if a.get("transA", 0):
        raise _Fallback("transA=1")
    # With beta == 0 the C operand does not contribute.
    bias = len(node.input) > 2 and bool(node.input[2]) and float(a.get("beta", 1.0)) != 0.0
    if not imp.is_const(w):
        if a.get("transB", 0):
            raise _Fallback("Gemm of two activations with transB=1")
        if not bias:
            imp.emit(node, idx, "matmul", MatMulAttrs(), [x, w], [node.output[0]])
            return
        base = imp.node_name(node, idx)
        imp.emit(node, idx, "matmul", MatMulAttrs(), [x, w], [f"{node.output[0]}#mm"],
                 name=base)
        _emit_add(imp, node, idx, f"{node.output[0]}#mm", node.input[2], node.output[0],
                  f"{base}/bias")
        return
    ws = imp.const_shapes[w]
    if len(ws) != 2 or len(imp.shape(x)) != 2:
        raise _Fallback("Gemm needs 2-D operands")
    n_out = ws[0] if a.get("transB", 0) else ws[1]
    if bias and not imp.is_const(node.input[2]):
        raise _Fallback("bias is not constant")
    imp.emit(node, idx, "fc", FCAttrs(out_features=int(n_out), bias=bias), [x],
             [node.output[0]])


def _emit_add(imp: _Importer, node: Any, idx: int, a: str, b: str, out: str,
              name: str) -> None:
    """Add tensor ``a`` (an activation) and ``b`` (activation or constant)."""
    if b in imp.refs:
        imp.emit(node, idx, "add", EltwiseAttrs(), [a, b], [out], name=name)
    else:
        imp.emit(node, idx, "add", EltwiseAttrs(const_shape=imp.const_shapes[b]), [a], [out],
                 name=name)


def _h_matmul(imp: _Importer, node: Any, idx: int) -> None:
    a_in, b_in = node.input[0], node.input[1]
    if a_in in imp.refs and b_in in imp.refs:
        imp.emit(node, idx, "matmul", MatMulAttrs(), [a_in, b_in], [node.output[0]])
        return
    if a_in not in imp.refs or not imp.is_const(b_in):
        raise _Fallback("MatMul with a constant first operand")
    ws = imp.const_shapes[b_in]
    if len(ws) != 2 or len(imp.shape(a_in)) < 2:
        raise _Fallback(f"MatMul weight of shape {ws} is not 2-D")
    n_out = int(ws[1])
    out = node.output[0]
    bias = False
    nxt = imp.sole_consumer(out)
    if nxt is not None:
        add = imp.nodes[nxt]
        other = [t for t in add.input if t != out]
        if (add.op_type == "Add" and len(add.input) == 2 and len(other) == 1
                and imp.is_const(other[0])
                and math.prod(imp.const_shapes[other[0]]) == n_out
                and imp.const_shapes[other[0]][-1:] == (n_out,)):
            bias = True
            imp.done.add(nxt)
            out = add.output[0]
    imp.emit(node, idx, "fc", FCAttrs(out_features=n_out, bias=bias), [a_in], [out])


def _h_bn(imp: _Importer, node: Any, idx: int) -> None:
    a = _attrs(node)
    x = _act_input(imp, node)
    if a.get("training_mode", 0) or any(t and imp.consumers.get(t) or t in imp.graph_outputs
                                        for t in node.output[1:]):
        raise _Fallback("training-mode BatchNormalization")
    if a.get("spatial", 1) != 1:
        raise _Fallback("BatchNormalization with spatial=0")
    if not all(imp.is_const(t) for t in node.input[1:5]):
        raise _Fallback("BatchNormalization statistics are not constant")
    imp.emit(node, idx, "bn", BNAttrs(epsilon=_f32(a.get("epsilon", 1e-5))), [x],
             [node.output[0]])


def _simple(op: str) -> Callable[[_Importer, Any, int], None]:
    def handler(imp: _Importer, node: Any, idx: int) -> None:
        meta = None
        if node.op_type in ("LeakyRelu",):
            meta = {"alpha": _f32(_attrs(node).get("alpha", 0.01))}
        imp.emit(node, idx, op, NoAttrs(), [_act_input(imp, node)], [node.output[0]],
                 meta=meta)
    return handler


def _mul_with(imp: _Importer, tensor: str, x: str) -> int | None:
    """Index of the sole Mul reading ``tensor`` and ``x`` (in either order)."""
    nxt = imp.sole_consumer(tensor)
    if nxt is None:
        return None
    mul = imp.nodes[nxt]
    if mul.op_type == "Mul" and sorted(mul.input) == sorted([tensor, x]) and tensor != x:
        return nxt
    return None


def _h_sigmoid(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    m = _mul_with(imp, node.output[0], x)
    if m is not None:
        imp.done.add(m)
        imp.emit(node, idx, "swish", NoAttrs(), [x], [imp.nodes[m].output[0]])
        return
    imp.emit(node, idx, "sigmoid", NoAttrs(), [x], [node.output[0]])


def _h_hardsigmoid(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    a = _attrs(node)
    if not (abs(a.get("alpha", 0.2) - 1 / 6) < 1e-4 and abs(a.get("beta", 0.5) - 0.5) < 1e-6):
        raise _Fallback("HardSigmoid with alpha != 1/6 or beta != 0.5 is not hsigmoid")
    m = _mul_with(imp, node.output[0], x)
    if m is not None:
        imp.done.add(m)
        imp.emit(node, idx, "hswish", NoAttrs(), [x], [imp.nodes[m].output[0]])
        return
    imp.emit(node, idx, "hsigmoid", NoAttrs(), [x], [node.output[0]])


def _scalar(imp: _Importer, name: str) -> float | None:
    if not name:
        return None
    v = imp.value(name)
    if v.size != 1:
        raise _Fallback(f"{name!r} is not a scalar")
    return float(v.reshape(()))


def _h_clip(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    a = _attrs(node)
    if imp.opset < 11 or "min" in a or "max" in a:
        lo, hi = a.get("min", float("-inf")), a.get("max", float("inf"))
    else:
        lo = _scalar(imp, node.input[1]) if len(node.input) > 1 else None
        hi = _scalar(imp, node.input[2]) if len(node.input) > 2 else None
        lo = float("-inf") if lo is None else lo
        hi = float("inf") if hi is None else hi
    if lo == 0.0 and hi == 6.0:
        imp.emit(node, idx, "relu6", NoAttrs(), [x], [node.output[0]])
    else:
        imp.emit(node, idx, "clip", ClipAttrs(_f32(lo), _f32(hi)), [x], [node.output[0]])


def _gelu_chain(imp: _Importer, node: Any) -> tuple[list[int], str] | None:
    """Match x/√2 → Erf → +1 → ·x → ·0.5 (or x·(1/√2) first); returns (indices, output)."""
    x = node.input[0] if node.input[0] in imp.refs else None
    if x is None or len(node.input) != 2 or not imp.is_const(node.input[1]):
        return None
    try:
        c = _scalar(imp, node.input[1])
    except _Fallback:
        return None
    if not ((node.op_type == "Div" and abs(c - math.sqrt(2)) < 1e-3)
            or (node.op_type == "Mul" and abs(c - 1 / math.sqrt(2)) < 1e-3)):
        return None
    chain: list[int] = []
    t = node.output[0]
    steps = [("Erf", None), ("Add", 1.0), ("Mul", "x"), ("Mul", 0.5)]
    for op, arg in steps:
        nxt = imp.sole_consumer(t)
        if nxt is None or imp.nodes[nxt].op_type != op:
            return None
        n = imp.nodes[nxt]
        others = [u for u in n.input if u != t]
        if arg == "x":
            if others != [x]:
                return None
        elif arg is not None:
            if len(others) != 1 or not imp.is_const(others[0]):
                return None
            try:
                if abs(_scalar(imp, others[0]) - arg) > 1e-6:
                    return None
            except _Fallback:
                return None
        chain.append(nxt)
        t = n.output[0]
    return chain, t


def _eltwise_op(op_type: str) -> str:
    return {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Sum": "add"}[op_type]


def _h_eltwise(imp: _Importer, node: Any, idx: int) -> None:
    if node.op_type in ("Div", "Mul"):
        gelu = _gelu_chain(imp, node)
        if gelu is not None:
            chain, out = gelu
            imp.done.update(chain)
            imp.emit(node, idx, "gelu", NoAttrs(), [node.input[0]], [out])
            return
    op = _eltwise_op(node.op_type)
    ins = [t for t in node.input if t]
    if node.op_type == "Sum":
        if len(ins) == 1:
            _h_identity(imp, node, idx)
            return
        if any(t not in imp.refs for t in ins):
            raise _Fallback("Sum of constants and activations")
        if len(ins) > 2:
            cur = ins[0]
            base = imp.node_name(node, idx)
            for k, t in enumerate(ins[1:]):
                last = k == len(ins) - 2
                out = node.output[0] if last else f"{base}/sum{k}"
                imp.emit(node, idx, "add", EltwiseAttrs(), [cur, t], [out],
                         name=base if k == 0 else f"{base}/{k}")
                cur = out
            return
    if len(ins) != 2:
        raise _Fallback(f"{len(ins)} operands")
    acts = [t for t in ins if t in imp.refs]
    if len(acts) == 2:
        imp.emit(node, idx, op, EltwiseAttrs(), ins, [node.output[0]])
        return
    if len(acts) != 1:
        raise _Fallback("no activation operand")
    const = ins[1] if ins[0] in imp.refs else ins[0]
    cshape = imp.const_shapes[const]
    a = _attrs(node)
    if a.get("broadcast", 0) and "axis" in a:
        rank = len(imp.shape(acts[0]))
        axis = _axis(int(a["axis"]), rank)
        cshape = tuple(cshape) + (1,) * (rank - axis - len(cshape))
    meta = {"const_first": True} if const == ins[0] and op in ("sub", "div") else None
    imp.emit(node, idx, op, EltwiseAttrs(const_shape=tuple(cshape)), [acts[0]],
             [node.output[0]], meta=meta)


def _h_identity(imp: _Importer, node: Any, idx: int) -> None:
    src = node.input[0]
    if node.op_type == "Dropout":
        extra = [t for t in node.output[1:] if t and (imp.consumers.get(t)
                                                     or t in imp.graph_outputs)]
        if extra:
            raise _Fallback("Dropout mask is used")
    if src not in imp.refs:
        raise _Fallback("input is not an activation")
    imp.refs[node.output[0]] = imp.refs[src]


def _h_quantize(imp: _Importer, node: Any, idx: int) -> None:
    """QuantizeLinear / DequantizeLinear on an activation (QDQ models): the IR keeps the
    float computation, so the pair is removed and counted in ``graph.meta``."""
    src = node.input[0]
    if src not in imp.refs:
        raise _Fallback("input is not an activation")
    imp.refs[node.output[0]] = imp.refs[src]
    imp.graph.meta["qdq_nodes_removed"] = imp.graph.meta.get("qdq_nodes_removed", 0) + 1


def _h_concat(imp: _Importer, node: Any, idx: int) -> None:
    ins = [t for t in node.input if t]
    if any(t not in imp.refs for t in ins):
        raise _Fallback("Concat with a constant operand")
    axis = int(_attrs(node).get("axis", 1))
    imp.emit(node, idx, "concat", ConcatAttrs(axis=axis), ins, [node.output[0]])


def _h_split(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    a = _attrs(node)
    xs = imp.shape(x)
    axis = int(a.get("axis", 0))
    ax = _axis(axis, len(xs))
    outs = list(node.output)
    if "split" in a:
        sizes = [int(v) for v in a["split"]]
    elif len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in imp.value(node.input[1])]
    else:
        n = len(outs)
        chunk = -(-xs[ax] // n)
        sizes = [chunk] * (n - 1) + [xs[ax] - chunk * (n - 1)]
    if any(not t for t in outs):
        raise _Fallback("Split with unnamed outputs")
    imp.emit(node, idx, "split", SplitAttrs(axis=axis, sizes=tuple(sizes)), [x], outs)


def _h_pool(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    xs = imp.shape(x)
    if len(xs) not in (3, 4):
        raise _Fallback("only 1-D and 2-D pooling map onto the IR")
    a = _as_2d(_attrs(node), len(xs))
    if len(xs) == 3:
        xs = (xs[0], xs[1], 1, xs[2])
    if any(d != 1 for d in a.get("dilations", (1, 1))):
        raise _Fallback("dilated pooling")
    if len(node.output) > 1 and node.output[1] and (
            imp.consumers.get(node.output[1]) or node.output[1] in imp.graph_outputs):
        raise _Fallback("MaxPool indices are used")
    kernel = tuple(a["kernel_shape"])
    stride = tuple(a.get("strides", (1, 1)))
    pads = _auto_pads(a.get("auto_pad", "NOTSET"), xs[2:], kernel, stride, (1, 1),
                      a.get("pads"))
    attrs = PoolAttrs(kernel=kernel, stride=stride, pads=pads,
                      ceil_mode=bool(a.get("ceil_mode", 0)),
                      count_include_pad=bool(a.get("count_include_pad", 0)))
    op = "maxpool" if node.op_type == "MaxPool" else "avgpool"
    _emit_spatial(imp, node, idx, op, attrs, x)


def _h_gap(imp: _Importer, node: Any, idx: int) -> None:
    imp.emit(node, idx, "gap", GapAttrs(keepdims=True), [_act_input(imp, node)],
             [node.output[0]])


def _h_reducemean(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    a = _attrs(node)
    rank = len(imp.shape(x))
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.value(node.input[1])]
    axes = tuple(int(v) for v in (axes or ()))
    keep = bool(a.get("keepdims", 1))
    if rank == 4 and sorted(_axis(v, rank) for v in axes) == [2, 3]:
        imp.emit(node, idx, "gap", GapAttrs(keepdims=keep), [x], [node.output[0]])
        return
    imp.emit(node, idx, "reducemean", ReduceAttrs(axes=axes, keepdims=keep), [x],
             [node.output[0]])


def _channel_shuffle(imp: _Importer, node: Any, idx: int, x: str,
                     target: tuple[int, ...]) -> bool:
    xs = imp.shape(x)
    if len(xs) != 4 or len(target) != 5:
        return False
    n, c, h, w = xs
    g = target[1]
    if target != (n, g, c // g, h, w) or g <= 1 or c % g:
        return False
    t_idx = imp.sole_consumer(node.output[0])
    if t_idx is None or imp.nodes[t_idx].op_type != "Transpose":
        return False
    tr = imp.nodes[t_idx]
    if list(_attrs(tr).get("perm", [])) != [0, 2, 1, 3, 4]:
        return False
    r_idx = imp.sole_consumer(tr.output[0])
    if r_idx is None or imp.nodes[r_idx].op_type != "Reshape":
        return False
    r2 = imp.nodes[r_idx]
    expected = imp.vi_shapes.get(r2.output[0])
    if expected is None:
        try:
            t2 = [int(v) for v in imp.value(r2.input[1])]
        except _Fallback:
            return False
        expected = _resolve_reshape((n, c // g, g, h, w), t2)
    if tuple(expected) != (n, c, h, w):
        return False
    imp.done.update((t_idx, r_idx))
    imp.emit(node, idx, "channelshuffle", ChannelShuffleAttrs(groups=g), [x],
             [r2.output[0]])
    return True


def _h_reshape(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    a = _attrs(node)
    xs = imp.shape(x)
    if "shape" in a:
        target = _resolve_reshape(xs, [int(v) for v in a["shape"]])
    elif len(node.input) > 1 and node.input[1] in imp.consts and \
            imp.consts[node.input[1]] is not None:
        target = _resolve_reshape(xs, [int(v) for v in imp.value(node.input[1])],
                                  a.get("allowzero", 0))
    elif node.output[0] in imp.vi_shapes:
        target = imp.vi_shapes[node.output[0]]
    else:
        raise _Fallback("reshape target is not constant")
    if _channel_shuffle(imp, node, idx, x, tuple(target)):
        return
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=tuple(target)), [x],
             [node.output[0]])


def _h_squeeze(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    xs = list(imp.shape(x))
    a = _attrs(node)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.value(node.input[1])]
    if node.op_type == "Squeeze":
        if axes is None:
            shape = [d for d in xs if d != 1]
        else:
            drop = {_axis(int(v), len(xs)) for v in axes}
            shape = [d for i, d in enumerate(xs) if i not in drop]
    else:
        if axes is None:
            raise _Fallback("Unsqueeze without axes")
        rank = len(xs) + len(axes)
        shape = list(xs)
        for ax in sorted(_axis(int(v), rank) for v in axes):
            shape.insert(ax, 1)
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=tuple(shape)), [x], [node.output[0]])


def _h_flatten(imp: _Importer, node: Any, idx: int) -> None:
    imp.emit(node, idx, "flatten", FlattenAttrs(axis=int(_attrs(node).get("axis", 1))),
             [_act_input(imp, node)], [node.output[0]])


def _h_transpose(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    perm = _attrs(node).get("perm") or list(reversed(range(len(imp.shape(x)))))
    imp.emit(node, idx, "transpose", TransposeAttrs(perm=tuple(int(p) for p in perm)), [x],
             [node.output[0]])


def _h_pad(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    a = _attrs(node)
    rank = len(imp.shape(x))
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if "pads" in a or "paddings" in a:
        pads = [int(v) for v in a.get("pads", a.get("paddings"))]
        value = float(a.get("value", 0.0))
    else:
        pads = [int(v) for v in imp.value(node.input[1])]
        value = _scalar(imp, node.input[2]) if len(node.input) > 2 and node.input[2] else 0.0
        if len(node.input) > 3 and node.input[3]:
            axes = [_axis(int(v), rank) for v in imp.value(node.input[3])]
            full = [0] * (2 * rank)
            for k, ax in enumerate(axes):
                full[ax] = pads[k]
                full[ax + rank] = pads[k + len(axes)]
            pads = full
    if any(p < 0 for p in pads):
        raise _Fallback("negative pads (cropping)")
    imp.emit(node, idx, "pad", PadAttrs(pads=tuple(pads), mode=mode, value=_f32(value)),
             [x], [node.output[0]])


def _h_resize(imp: _Importer, node: Any, idx: int) -> None:
    x = _act_input(imp, node)
    xs = imp.shape(x)
    if len(xs) != 4:
        raise _Fallback("only 2-D resize maps onto the IR")
    a = _attrs(node)
    mode = a.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"bilinear": "linear"}.get(mode, mode)
    out: tuple[int, ...] | None = None
    ins = list(node.input) + [""] * 4
    if node.op_type == "Resize" and imp.opset >= 11 and ins[3]:
        out = tuple(int(v) for v in imp.value(ins[3]))[-4:]
    else:
        if "scales" in a:
            scales = [float(v) for v in a["scales"]]
        else:
            k = 2 if node.op_type == "Resize" and imp.opset >= 11 else 1
            scales = [float(v) for v in imp.value(ins[k])] if ins[k] else []
        if len(scales) == 4:
            out = tuple(int(math.floor(d * s)) for d, s in zip(xs, scales))
    if out is None:
        out = imp.vi_shapes.get(node.output[0])
    if out is None or len(out) != 4 or tuple(out[:2]) != tuple(xs[:2]):
        raise _Fallback("resize changes N or C, or its size is unknown")
    meta = {k: _jsonable(v) for k, v in a.items() if k != "mode"} or None
    imp.emit(node, idx, "resize", ResizeAttrs(size=(int(out[2]), int(out[3])), mode=mode),
             [x], [node.output[0]], meta=meta)


def _h_softmax(imp: _Importer, node: Any, idx: int) -> None:
    default = -1 if imp.opset >= 13 else 1
    axis = int(_attrs(node).get("axis", default))
    imp.emit(node, idx, "softmax", SoftmaxAttrs(axis=axis), [_act_input(imp, node)],
             [node.output[0]])


def _h_layernorm(imp: _Importer, node: Any, idx: int) -> None:
    a = _attrs(node)
    if any(t and (imp.consumers.get(t) or t in imp.graph_outputs) for t in node.output[1:]):
        raise _Fallback("LayerNormalization statistics outputs are used")
    if not all(imp.is_const(t) for t in node.input[1:] if t):
        raise _Fallback("scale or bias is not constant")
    imp.emit(node, idx, "layernorm",
             LayerNormAttrs(axis=int(a.get("axis", -1)), epsilon=_f32(a.get("epsilon", 1e-5))),
             [_act_input(imp, node)], [node.output[0]])


def _h_lrn(imp: _Importer, node: Any, idx: int) -> None:
    a = _attrs(node)
    attrs = LRNAttrs(size=int(a["size"]), alpha=_f32(a.get("alpha", 1e-4)),
                     beta=_f32(a.get("beta", 0.75)), bias=_f32(a.get("bias", 1.0)))
    imp.emit(node, idx, "lrn", attrs, [_act_input(imp, node)], [node.output[0]])


_HANDLERS: dict[str, Callable[[_Importer, Any, int], None]] = {
    "Conv": _h_conv,
    "ConvTranspose": _h_conv,
    "Gemm": _h_gemm,
    "MatMul": _h_matmul,
    "BatchNormalization": _h_bn,
    "Relu": _simple("relu"),
    "Tanh": _simple("tanh"),
    "LeakyRelu": _simple("leakyrelu"),
    "Gelu": _simple("gelu"),
    "HardSwish": _simple("hswish"),
    "Sigmoid": _h_sigmoid,
    "HardSigmoid": _h_hardsigmoid,
    "Clip": _h_clip,
    "Add": _h_eltwise,
    "Sub": _h_eltwise,
    "Mul": _h_eltwise,
    "Div": _h_eltwise,
    "Sum": _h_eltwise,
    "Identity": _h_identity,
    "Dropout": _h_identity,
    "QuantizeLinear": _h_quantize,
    "DequantizeLinear": _h_quantize,
    "Concat": _h_concat,
    "Split": _h_split,
    "MaxPool": _h_pool,
    "AveragePool": _h_pool,
    "GlobalAveragePool": _h_gap,
    "ReduceMean": _h_reducemean,
    "Reshape": _h_reshape,
    "Squeeze": _h_squeeze,
    "Unsqueeze": _h_squeeze,
    "Flatten": _h_flatten,
    "Transpose": _h_transpose,
    "Pad": _h_pad,
    "Resize": _h_resize,
    "Upsample": _h_resize,
    "Softmax": _h_softmax,
    "LayerNormalization": _h_layernorm,
    "LRN": _h_lrn,
}


# ---------------------------------------------------------------------------- public
def load_onnx(source: "str | os.PathLike | bytes | Any",
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
    """Load an ONNX model into a validated :class:`ModelGraph`.

    Parameters
    ----------
    source : path, bytes or onnx.ModelProto
        The model. A ModelProto is not modified.
    input_shapes : dict, optional
        ``{input name: shape}`` (NCHW, batch included) for inputs with dynamic
        dimensions, or to override declared shapes. The key ``""`` names the first input.

    Returns
    -------
    ModelGraph
        Shape-annotated and validated. Ops outside the vocabulary are ``unknown``
        nodes (see ``graph.unknown_ops()``).

    Raises
    ------
    ModelLoadError
        Missing, truncated or corrupt file.
    DynamicShapeError
        An input has a dynamic dimension and ``input_shapes`` does not fix it.
    InputNameError
        ``input_shapes`` names something that is not a model input.
    UnsupportedOpError
        An op the IR cannot represent even as ``unknown`` (no static output shape,
        non-tensor values such as sequences or strings).
    GraphValidationError
        Cyclic or disconnected graphs.
    """
    model = read_onnx_model(source)
    if isinstance(source, (str, os.PathLike)):
        default_name = Path(source).stem
    else:
        default_name = "model"
    name = model.graph.name or default_name
    return _Importer(model, input_shapes, name).run()
