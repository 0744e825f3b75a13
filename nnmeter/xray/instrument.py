"""Instrumented runs: every intermediate tensor of a model, in the canonical layout.

A :class:`Runner` wraps one model file on one backend. ``Runner.record(feeds)`` runs it
and returns every intermediate tensor, dequantized to float and transposed to the
canonical NCHW layout, keyed by the tensor name; ``Runner.layers`` describes the op that
produced each tensor (canonical op type, runtime op type, activation inputs, canonical
shape, quantization parameters, attributes).

The runtime sessions come from the backend adapters
(:meth:`nnmeter.backends.Backend.prepare_recording`), so outputs, model times and per-op
times are taken with exactly the settings every measurement uses, and the intermediate
tensors under the same threads:

- LiteRT: a second interpreter keeps every tensor; tensors inside a delegate cannot be
  observed, so it uses the built-in kernels without XNNPACK (``litert-cpu``), or the
  reference kernels (``litert-cpu-ref``).
- ONNX: a copy of the graph with every node output added as a graph output, run by
  onnxruntime with graph optimisations off (so no value is fused away).

This module turns what the runtime records into canonical layers and tensors.

Examples
--------
>>> r = open_runner("model.tflite", "litert-cpu")              # doctest: +SKIP
>>> values = r.record(r.feeds_from_canonical([x_nchw]))         # doctest: +SKIP
>>> [l.op for l in r.layers.values()][:3]                       # doctest: +SKIP
['input', 'quantize', 'pad']
"""

from __future__ import annotations

import logging
import pathlib
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnmeter.backends import Recording, get_backend
from nnmeter.errors import BackendError, BackendUnavailableError, InputMismatchError, \
    ModelLoadError, XRayError

__all__ = ["Layer", "InputSpec", "Runner", "OnnxRunner", "LiteRTRunner", "open_runner",
           "default_backend"]

logger = logging.getLogger(__name__)

_TFLITE_OPS = {
    "CONV_2D": "conv", "DEPTHWISE_CONV_2D": "dwconv", "TRANSPOSE_CONV": "convtranspose",
    "FULLY_CONNECTED": "fc", "BATCH_MATMUL": "matmul", "ADD": "add", "SUB": "sub",
    "MUL": "mul", "DIV": "div", "CONCATENATION": "concat", "MAX_POOL_2D": "maxpool",
    "AVERAGE_POOL_2D": "avgpool", "MEAN": "gap", "SOFTMAX": "softmax", "RESHAPE": "reshape",
    "SQUEEZE": "reshape", "EXPAND_DIMS": "reshape", "TRANSPOSE": "transpose", "PAD": "pad",
    "PADV2": "pad", "MIRROR_PAD": "pad", "QUANTIZE": "quantize", "DEQUANTIZE": "dequantize",
    "RELU": "relu", "RELU6": "relu6", "LOGISTIC": "sigmoid", "HARD_SWISH": "hswish",
    "TANH": "tanh", "LEAKY_RELU": "leakyrelu", "GELU": "gelu", "SPLIT": "split",
    "SPLIT_V": "split", "RESIZE_BILINEAR": "resize", "RESIZE_NEAREST_NEIGHBOR": "resize",
    "CAST": "identity",
}
_ONNX_OPS = {
    "Conv": "conv", "ConvTranspose": "convtranspose", "Gemm": "fc", "MatMul": "matmul",
    "BatchNormalization": "bn", "Relu": "relu", "Clip": "clip", "Sigmoid": "sigmoid",
    "HardSigmoid": "hsigmoid", "HardSwish": "hswish", "Tanh": "tanh",
    "LeakyRelu": "leakyrelu", "Gelu": "gelu", "Add": "add", "Sub": "sub", "Mul": "mul",
    "Div": "div", "Concat": "concat", "MaxPool": "maxpool", "AveragePool": "avgpool",
    "GlobalAveragePool": "gap", "ReduceMean": "reducemean", "Softmax": "softmax",
    "Reshape": "reshape", "Flatten": "flatten", "Squeeze": "reshape",
    "Unsqueeze": "reshape", "Transpose": "transpose", "Pad": "pad", "Resize": "resize",
    "QuantizeLinear": "quantize", "DequantizeLinear": "dequantize", "Identity": "identity",
    "Split": "split", "LayerNormalization": "layernorm", "Cast": "identity",
}
_FUSED_ACT = {0: None, 1: "relu", 2: "relu_n1_to_1", 3: "relu6", 4: "tanh",
              5: "sign_bit", 6: "sigmoid"}


@dataclass(frozen=True)
class Layer:
    """The op that produced one recorded tensor.

    Attributes
    ----------
    name : str
        Name of the output tensor (unique within a model); the key of recorded values.
    op : str
        Canonical op type (``conv``, ``dwconv``, ``bn``, ``relu``, ``quantize``, ...;
        ``input`` for graph inputs, ``unknown`` for the rest).
    source_op : str
        The runtime's op type (``CONV_2D``, ``Conv``).
    node : str
        The runtime's node name (ONNX) or the tensor name (LiteRT).
    inputs : tuple of str
        Activation inputs (tensor names), constants excluded, in order.
    shape : tuple of int
        Canonical shape (NCHW for rank 4), batch included.
    layout : str
        Layout of the tensor inside the runtime: ``NCHW``, ``NHWC`` or ``""``.
    dtype : str
        Element type inside the runtime (``int8`` for quantized tensors).
    quant : (scale, zero_point) or None
        Per-tensor quantization parameters of the tensor.
    attrs : dict
        The op's attributes (strides, pads, fused activation, kernel shape, ...).
    """

    name: str
    op: str
    source_op: str
    node: str
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    layout: str
    dtype: str
    quant: tuple[float, int] | None = None
    attrs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "source_op": self.source_op,
                "node": self.node, "inputs": list(self.inputs), "shape": list(self.shape),
                "layout": self.layout, "dtype": self.dtype,
                "quant": list(self.quant) if self.quant else None,
                "attrs": {k: _jsonable(v) for k, v in self.attrs.items()}}


@dataclass(frozen=True)
class InputSpec:
    """One model input: native shape and dtype, canonical shape, quantization."""

    name: str
    native_shape: tuple[int, ...]
    shape: tuple[int, ...]
    layout: str
    dtype: str
    quant: tuple[float, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "native_shape": list(self.native_shape),
                "shape": list(self.shape), "layout": self.layout, "dtype": self.dtype,
                "quant": list(self.quant) if self.quant else None}


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return v


def to_canonical(x: np.ndarray, layout: str) -> np.ndarray:
    """NHWC → NCHW for rank-4 arrays whose runtime layout is NHWC; others unchanged."""
    if layout == "NHWC" and x.ndim == 4:
        return np.transpose(x, (0, 3, 1, 2))
    return x


def from_canonical(x: np.ndarray, layout: str) -> np.ndarray:
    """NCHW → NHWC for rank-4 arrays when the runtime wants NHWC; others unchanged."""
    if layout == "NHWC" and x.ndim == 4:
        return np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))
    return x


def _dequantize(x: np.ndarray, quant: tuple[float, int] | None) -> np.ndarray:
    if quant and quant[0] and np.issubdtype(x.dtype, np.integer):
        return (x.astype(np.float32) - quant[1]) * np.float32(quant[0])
    return x.astype(np.float32) if x.dtype != np.float32 else x


def _quantize(x: np.ndarray, quant: tuple[float, int], dtype: str) -> np.ndarray:
    info = np.iinfo(np.dtype(dtype))
    q = np.round(np.asarray(x, np.float64) / quant[0]) + quant[1]
    return np.clip(q, info.min, info.max).astype(dtype)


def default_backend(path: str | pathlib.Path) -> str:
    """The backend a model file runs on when none is given."""
    suffix = pathlib.Path(str(path)).suffix.lower()
    if suffix == ".tflite":
        return "litert-cpu"
    if suffix == ".onnx":
        return "ort-cpu"
    if suffix in (".keras", ".h5"):
        return "litert-cpu"  # converted to a float .tflite
    raise ModelLoadError(
        f"cannot tell the runtime of {str(path)!r}: xray runs .onnx (ort-cpu) and .tflite "
        f"(litert-cpu, litert-cpu-ref) models; convert the model or pass one of those")


def _prepare_recording(path: pathlib.Path, backend: str) -> Recording:
    """``path`` prepared for recording on ``backend``, by the backend adapter."""
    try:
        return get_backend(backend).prepare_recording(path)
    except BackendUnavailableError:
        raise
    except BackendError as err:
        raise ModelLoadError(f"cannot load {path} on {backend}: {err}") from err


class Runner:
    """Base class: one model on one backend, recorded tensor by tensor."""

    fmt = ""

    def __init__(self, path: str | pathlib.Path, backend: str) -> None:
        self.path = pathlib.Path(path)
        self.backend = backend
        self.input_specs: list[InputSpec] = []
        self.output_names: list[str] = []
        self.layers: dict[str, Layer] = {}
        self._prepared: Recording | None = None

    # -- feeds ---------------------------------------------------------------
    def feeds_from_canonical(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Model feeds from float arrays in the canonical layout (one per input)."""
        if len(arrays) != len(self.input_specs):
            return self._feeds(list(arrays), arrays)  # raises with the counts
        return self._feeds([from_canonical(np.asarray(a), s.layout)
                            for a, s in zip(arrays, self.input_specs)], arrays)

    def feeds_from_native(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Model feeds from arrays already in the model's own layout (one per input)."""
        return self._feeds([np.asarray(a) for a in arrays], arrays)

    def _feeds(self, native: list[np.ndarray], given: list[np.ndarray]) -> dict[str, np.ndarray]:
        if len(native) != len(self.input_specs):
            raise InputMismatchError(
                f"{self.path.name} has {len(self.input_specs)} input(s) "
                f"{[s.name for s in self.input_specs]}, got {len(native)} array(s); pass one "
                f"array per model input")
        feeds = {}
        for arr, spec, orig in zip(native, self.input_specs, given):
            if tuple(arr.shape) != spec.native_shape:
                raise InputMismatchError(
                    f"input {spec.name!r} of {self.path.name} has shape {spec.native_shape} "
                    f"({spec.layout or 'as is'}), got an array of shape "
                    f"{tuple(np.shape(orig))}; fix the preprocessing or pass --input-shape")
            if not np.all(np.isfinite(np.asarray(arr, np.float64))):
                raise InputMismatchError(
                    f"input {spec.name!r} holds NaN or infinite values; check the "
                    f"preprocessing")
            if spec.quant and np.issubdtype(np.dtype(spec.dtype), np.integer) \
                    and np.issubdtype(arr.dtype, np.floating):
                arr = _quantize(arr, spec.quant, spec.dtype)
            elif np.issubdtype(np.dtype(spec.dtype), np.floating):
                arr = arr.astype(spec.dtype)
            elif np.issubdtype(arr.dtype, np.floating) and not spec.quant:
                raise InputMismatchError(
                    f"input {spec.name!r} of {self.path.name} is {spec.dtype} without "
                    f"quantization parameters, got float data; pass {spec.dtype} arrays")
            else:
                arr = arr.astype(spec.dtype)
            feeds[spec.name] = arr
        return feeds

    # -- running -------------------------------------------------------------
    def record(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; every tensor by name, dequantized, canonical layout."""
        raise NotImplementedError

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run once with the backend's real settings; outputs as float, canonical."""
        raise NotImplementedError

    def time_ms(self, feeds: dict[str, np.ndarray], *, repeats: int = 20,
                warmup: int = 3) -> float:
        """Minimum wall time of one inference in ms over ``repeats`` runs (in process,
        on the backend's measurement session).

        The minimum is used because interference on a shared machine only adds time.
        """
        self._prepared.bind(self._native(feeds))
        for _ in range(warmup):
            self._prepared.time_once()
        return min(self._prepared.time_once() for _ in range(max(1, repeats)))

    def op_times_ms(self, feeds: dict[str, np.ndarray], *, repeats: int = 10) -> dict[str, float]:
        """Time per runtime node in ms where the runtime can tell, else {} (the backend's
        :meth:`~nnmeter.backends.Recording.op_times_ms`)."""
        return self._prepared.op_times_ms(self._native(feeds), runs=repeats)

    def _native(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds`` keyed by the runtime's input names."""
        return feeds


class LiteRTRunner(Runner):
    """A .tflite model on ``litert-cpu`` (XNNPACK) or ``litert-cpu-ref`` (reference kernels)."""

    fmt = "tflite"

    def __init__(self, path: str | pathlib.Path, backend: str = "litert-cpu") -> None:
        super().__init__(path, backend)
        try:
            import ai_edge_litert.interpreter  # noqa: F401  (only: is it installed?)
        except ImportError as err:
            raise BackendUnavailableError(
                "ai_edge_litert is not installed; pip install ai-edge-litert") from err
        if not backend.startswith("litert-cpu"):
            raise XRayError(f"backend {backend!r} cannot run .tflite models; use litert-cpu "
                            f"or litert-cpu-ref")
        self.reference_kernels = backend.startswith("litert-cpu-ref")
        self._prepared = _prepare_recording(self.path, backend)
        self._describe()

    def _describe(self) -> None:
        it = self._prepared.recorder
        details = {d["index"]: d for d in it.get_tensor_details()}
        ops = it._get_ops_details()
        produced = {int(o): op for op in ops for o in op["outputs"]}
        inputs = it.get_input_details()
        input_idx = {d["index"] for d in inputs}
        options = self._op_options()
        names: dict[int, str] = {}
        self._runtime_names: dict[str, str] = {}
        seen: set[str] = set()

        def name_of(i: int) -> str:
            if i not in names:
                n = details[i]["name"] or f"tensor{i}"
                if n in seen:
                    n = f"{n}#{i}"
                seen.add(n)
                names[i] = n
            return names[i]

        consumers: dict[int, list[dict]] = {}
        for op in ops:
            for i in op["inputs"]:
                consumers.setdefault(int(i), []).append(op)
        layout: dict[int, str] = {}

        def perm_of(op: dict) -> tuple[int, ...] | None:
            if len(op["inputs"]) < 2:
                return None
            try:
                return tuple(int(v) for v in it.get_tensor(int(op["inputs"][1])))
            except ValueError:
                return None

        for d in inputs:
            i = d["index"]
            rank4 = len(d["shape"]) == 4
            nchw = any(c["op_name"] == "TRANSPOSE" and perm_of(c) == (0, 2, 3, 1)
                       for c in consumers.get(i, []))
            layout[i] = ("NCHW" if nchw else "NHWC") if rank4 else ""
            self.layers[name_of(i)] = Layer(
                name_of(i), "input", "input", name_of(i), (),
                tuple(int(v) for v in to_canonical(np.empty(d["shape"]), layout[i]).shape),
                layout[i], np.dtype(d["dtype"]).name, self._quant(details[i]))
            self.input_specs.append(InputSpec(
                name_of(i), tuple(int(v) for v in d["shape"]),
                self.layers[name_of(i)].shape, layout[i], np.dtype(d["dtype"]).name,
                self._quant(details[i])))
            self._runtime_names[name_of(i)] = d["name"]
        for op in ops:
            act_in = [int(i) for i in op["inputs"] if int(i) in produced or int(i) in input_idx]
            for k, o in enumerate(int(v) for v in op["outputs"]):
                d = details[o]
                rank4 = len(d["shape"]) == 4
                kind = op["op_name"]
                if not rank4:
                    lay = ""
                elif kind == "TRANSPOSE":
                    lay = "NCHW" if perm_of(op) == (0, 3, 1, 2) else "NHWC"
                elif kind in ("QUANTIZE", "DEQUANTIZE", "RELU", "RELU6", "LOGISTIC", "TANH",
                              "HARD_SWISH", "LEAKY_RELU", "CAST") and act_in:
                    lay = layout.get(act_in[0], "NHWC")
                else:
                    lay = "NHWC"
                layout[o] = lay
                attrs = dict(options.get(int(op["index"]), {}))
                if kind in ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV") and \
                        len(op["inputs"]) > 1:
                    wshape = details[int(op["inputs"][1])]["shape"]
                    attrs["kernel"] = [int(wshape[1]), int(wshape[2])]
                canon = _TFLITE_OPS.get(kind, "unknown")
                if canon == "gap":
                    axes = perm_of(op)
                    if axes is not None and tuple(sorted(axes)) != (1, 2):
                        canon = "reducemean"
                shape = tuple(int(v) for v in to_canonical(np.empty(d["shape"]), lay).shape)
                self.layers[name_of(o)] = Layer(
                    name_of(o), canon, kind, name_of(o), tuple(name_of(i) for i in act_in),
                    shape, lay, np.dtype(d["dtype"]).name, self._quant(d), attrs)
        self.output_names = [name_of(d["index"]) for d in it.get_output_details()]
        self._index = {n: i for i, n in names.items()}

    @staticmethod
    def _quant(d: dict) -> tuple[float, int] | None:
        scale, zp = d.get("quantization", (0.0, 0))
        if scale:
            return (float(scale), int(zp))
        qp = d.get("quantization_parameters") or {}
        scales = qp.get("scales")
        if scales is not None and len(scales):
            return (float(scales[0]), int(qp["zero_points"][0]))
        return None

    def _op_options(self) -> dict[int, dict[str, Any]]:
        """Builtin options of every operator (stride, padding, fused activation...)."""
        try:
            from ai_edge_litert import schema_py_generated as schema

            buf = self.path.read_bytes()
            model = schema.Model.GetRootAsModel(buf, 0)
            sub = model.Subgraphs(0)
            out: dict[int, dict[str, Any]] = {}
            for i in range(sub.OperatorsLength()):
                op = schema.OperatorT.InitFromObj(sub.Operators(i))
                opts = vars(op.builtinOptions) if op.builtinOptions is not None else {}
                clean = {k: _jsonable(v) for k, v in opts.items()
                         if isinstance(v, (int, float, bool, str, list, tuple, np.ndarray))}
                if "fusedActivationFunction" in clean:
                    clean["fusedActivationFunction"] = _FUSED_ACT.get(
                        clean["fusedActivationFunction"], clean["fusedActivationFunction"])
                out[i] = clean
            return out
        except Exception as err:  # options are decoration; never fail a run over them
            logger.debug("could not read builtin options of %s: %s", self.path, err)
            return {}

    def _native(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {self._runtime_names[s.name]: feeds[s.name] for s in self.input_specs}

    def record(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._prepared.record(self._native(feeds),
                                       [self._index[name] for name in self.layers])
        out = {}
        for name, layer in self.layers.items():
            value = values.get(self._index[name])
            if value is not None:  # tensors freed by the runtime cannot be read
                out[name] = to_canonical(_dequantize(value, layer.quant), layer.layout)
        return out

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        # the measurement interpreter's outputs come in the recorder's output order
        outs = []
        for name, value in zip(self.output_names, self._prepared.run(self._native(feeds))):
            layer = self.layers[name]
            outs.append(to_canonical(_dequantize(value, layer.quant), layer.layout))
        return outs


class OnnxRunner(Runner):
    """An .onnx model on onnxruntime (``ort-cpu``)."""

    fmt = "onnx"

    def __init__(self, path: str | pathlib.Path, backend: str = "ort-cpu") -> None:
        super().__init__(path, backend)
        if not backend.startswith("ort-cpu"):
            raise XRayError(f"backend {backend!r} cannot run .onnx models in xray; use "
                            f"ort-cpu")
        try:
            import onnx
            import onnxruntime  # noqa: F401  (only: is it installed?)
        except ImportError as err:
            raise BackendUnavailableError("onnx and onnxruntime are needed for .onnx models; "
                                          "pip install onnx onnxruntime") from err
        try:
            model = onnx.load(str(self.path))
        except Exception as err:  # onnx raises DecodeError and friends
            raise ModelLoadError(f"cannot read ONNX model {self.path}: {err}") from err
        self._describe(model)
        self._prepared = _prepare_recording(self.path, backend)

    def _describe(self, model) -> None:
        from onnx import numpy_helper, shape_inference

        try:
            model = shape_inference.infer_shapes(model)
        except Exception as err:  # shapes are optional here; values come from the run
            logger.debug("ONNX shape inference failed: %s", err)
        g = model.graph
        consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        for node in g.node:
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        consts[node.output[0]] = numpy_helper.to_array(a.t)
        shapes = {}
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            dims = tuple(d.dim_value if d.dim_value > 0 else -1
                         for d in vi.type.tensor_type.shape.dim)
            shapes[vi.name] = dims
        from onnx import helper

        for inp in g.input:
            if inp.name in consts:
                continue
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)).name
            shape = shapes.get(inp.name, ())
            self.layers[inp.name] = Layer(inp.name, "input", "input", inp.name, (), shape,
                                          "NCHW" if len(shape) == 4 else "", dt)
            self.input_specs.append(InputSpec(inp.name, shape, shape,
                                              "NCHW" if len(shape) == 4 else "", dt))
        for node in g.node:
            if node.op_type == "Constant":
                continue
            attrs = {a.name: _jsonable(helper.get_attribute_value(a)) for a in node.attribute}
            canon = _ONNX_OPS.get(node.op_type, "unknown")
            w = consts.get(node.input[1]) if len(node.input) > 1 else None
            if canon == "conv" and w is not None and attrs.get("group", 1) > 1 \
                    and attrs.get("group") == w.shape[0] and w.shape[1] == 1:
                canon = "dwconv"
            if canon == "conv" and w is not None:
                attrs.setdefault("kernel_shape", list(w.shape[2:]))
            if canon == "matmul" and w is not None:
                canon = "fc"
            if canon == "clip":
                lo = consts.get(node.input[1]) if len(node.input) > 1 else attrs.get("min")
                hi = consts.get(node.input[2]) if len(node.input) > 2 else attrs.get("max")
                if lo is not None and hi is not None and float(lo) == 0 and float(hi) == 6:
                    canon = "relu6"
            if canon == "reducemean":
                axes = attrs.get("axes") or (consts.get(node.input[1]).tolist()
                                             if len(node.input) > 1 and node.input[1] in consts
                                             else None)
                if axes is not None and sorted(int(a) % 4 for a in axes) == [2, 3]:
                    canon = "gap"
            act_in = tuple(i for i in node.input if i and i not in consts)
            quant = None
            if canon == "quantize" and len(node.input) > 1 and node.input[1] in consts:
                zp = consts.get(node.input[2]) if len(node.input) > 2 else None
                quant = (float(np.ravel(consts[node.input[1]])[0]),
                         int(np.ravel(zp)[0]) if zp is not None else 0)
            for out in node.output:
                if not out:
                    continue
                shape = shapes.get(out, ())
                self.layers[out] = Layer(out, canon, node.op_type, node.name or out, act_in,
                                         shape, "NCHW" if len(shape) == 4 else "",
                                         "int8" if quant else "float32", quant, attrs)
        self.output_names = [o.name for o in g.output]
        self._consts = consts

    def record(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._prepared.record(feeds)
        out = {spec.name: feeds[spec.name].astype(np.float32) for spec in self.input_specs}
        for name, v in values.items():
            if name not in self.layers and name not in self.output_names:
                continue  # outputs of Constant nodes are no layers
            v = np.asarray(v)
            layer = self.layers.get(name)
            if layer is not None:
                v = _dequantize(v, layer.quant)
            if np.issubdtype(v.dtype, np.number):
                out[name] = v.astype(np.float32)
        # shapes unknown before a run are filled in from the values
        for name, v in out.items():
            layer = self.layers.get(name)
            if layer is not None and (not layer.shape or -1 in layer.shape):
                self.layers[name] = Layer(layer.name, layer.op, layer.source_op, layer.node,
                                          layer.inputs, tuple(v.shape),
                                          "NCHW" if v.ndim == 4 else "", layer.dtype,
                                          layer.quant, layer.attrs)
        return out

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(v, np.float32) for v in self._prepared.run(feeds)]


def open_runner(path: str | pathlib.Path, backend: str | None = None) -> Runner:
    """Open ``path`` on ``backend`` (default: by file type) for instrumented runs.

    Raises
    ------
    ModelLoadError
        If the file is missing or no runner handles its type.
    XRayError
        If the backend cannot run that file type.
    """
    p = pathlib.Path(str(path))
    if not p.exists():
        raise ModelLoadError(f"model file {str(p)!r} does not exist")
    backend = backend or default_backend(p)
    if p.suffix.lower() == ".tflite":
        return LiteRTRunner(p, backend)
    if p.suffix.lower() == ".onnx":
        return OnnxRunner(p, backend)
    if p.suffix.lower() in (".keras", ".h5"):
        return LiteRTRunner(_keras_to_float_tflite(p), "litert-cpu")
    raise ModelLoadError(
        f"xray cannot instrument {p.name!r}: supported model files are .onnx, .tflite and "
        f".keras/.h5 (float references)")


def _keras_to_float_tflite(path: pathlib.Path) -> pathlib.Path:
    """Convert a Keras model to a float .tflite in a temp dir (float math is kept, so it
    serves as the reference). Imports TensorFlow."""
    try:
        import tensorflow as tf
    except ImportError as err:
        raise BackendUnavailableError("a Keras reference needs TensorFlow; pip install "
                                      "tensorflow-cpu") from err
    try:
        model = tf.keras.models.load_model(str(path), compile=False)
        data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    except (ValueError, OSError, TypeError) as err:
        raise ModelLoadError(f"cannot load or convert the Keras model {path}: {err}") from err
    out = pathlib.Path(tempfile.mkdtemp(prefix="nnmeter-xray-keras-")) / (path.stem + ".tflite")
    out.write_bytes(data)
    logger.info("Keras reference %s converted to float %s", path, out)
    return out
