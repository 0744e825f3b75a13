"""ONNX exporter: a :class:`ModelGraph` → a runnable ``.onnx`` file with random weights.

Weights are drawn from ``numpy.random.default_rng(seed)`` in topological order
(normal × 0.1; batch-norm variances uniform in [0.5, 1.5]; divisors uniform in
[0.5, 1.5]), so a seed gives the same file every time. ONNX node names equal IR node
names, graph input names equal IR input names, and graph outputs are declared with
their shapes.

Ops without a single ONNX counterpart export as small patterns that the ONNX frontend
recognises again, named after the IR node so that IR → ONNX → IR is exact:

- ``channelshuffle`` ``cs``: Reshape ``cs`` → Transpose ``cs/transpose`` → Reshape
  ``cs/reshape2``;
- ``swish`` ``s``: Sigmoid ``s`` → Mul ``s/mul``;
- ``gelu`` ``g`` (opset < 20): Div ``g`` (by √2) → Erf → Add 1 → Mul x → Mul 0.5;
- ``fc`` on rank > 2 inputs: MatMul ``f`` → Add ``f/bias``;
- ``gap`` without keepdims: ReduceMean over H, W.

Examples
--------
>>> import os, tempfile
>>> from nnmeter.ir import GraphBuilder
>>> b = GraphBuilder("t", (1, 3, 8, 8))
>>> g = b.build([b.relu(b.conv(b.x, 4))])
>>> path = export_onnx(g, os.path.join(tempfile.mkdtemp(), "t.onnx"))
>>> path.suffix
'.onnx'
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import ExportError, UnsupportedOpError
from nnmeter.ir.graph import ModelGraph, Node, Ref

__all__ = ["export_onnx", "to_onnx_model", "MIN_OPSET"]

#: Oldest opset the exporter writes (Split sizes and Softmax semantics of opset 13).
MIN_OPSET = 13


def _tensor(ref: Ref) -> str:
    """ONNX tensor name of an IR tensor."""
    return ref.node if ref.port == 0 else f"{ref.node}:{ref.port}"


class _Writer:
    def __init__(self, graph: ModelGraph, seed: int, opset: int) -> None:
        from onnx import helper

        self.helper = helper
        self.graph = graph
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    # -- helpers ---------------------------------------------------------------
    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weights(self, name: str, shape: tuple[int, ...], *, low: float | None = None,
                high: float | None = None) -> str:
        if low is not None:
            value = self.rng.uniform(low, high, size=shape)
        else:
            value = self.rng.standard_normal(size=shape) * 0.1
        return self.const(name, value.astype(np.float32))

    def ints(self, name: str, values: Any) -> str:
        return self.const(name, np.asarray(list(values), dtype=np.int64))

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.asarray(value, dtype=np.float32))

    def add(self, op_type: str, inputs: list[str], outputs: list[str], name: str,
            **attrs: Any) -> None:
        self.nodes.append(self.helper.make_node(op_type, inputs, outputs, name=name, **attrs))

    # -- ops ---------------------------------------------------------------------
    def node(self, n: Node) -> None:
        op, a, name = n.op, n.attrs, n.name
        x = [_tensor(r) for r in n.inputs]
        out = [_tensor(Ref(name, p)) for p in range(max(1, len(n.output_shapes)))]
        y = out[0]
        if op in ("conv", "dwconv"):
            cin = n.input_shapes[0][1]
            ins = [x[0], self.weights(f"{name}/weight",
                                      (a.out_channels, cin // a.groups) + tuple(a.kernel))]
            if a.bias:
                ins.append(self.weights(f"{name}/bias", (a.out_channels,)))
            self.add("Conv", ins, [y], name, kernel_shape=list(a.kernel),
                     strides=list(a.stride), pads=list(a.pads), dilations=list(a.dilation),
                     group=a.groups)
        elif op == "convtranspose":
            cin = n.input_shapes[0][1]
            ins = [x[0], self.weights(f"{name}/weight",
                                      (cin, a.out_channels // a.groups) + tuple(a.kernel))]
            if a.bias:
                ins.append(self.weights(f"{name}/bias", (a.out_channels,)))
            self.add("ConvTranspose", ins, [y], name, kernel_shape=list(a.kernel),
                     strides=list(a.stride), pads=list(a.pads), dilations=list(a.dilation),
                     group=a.groups, output_padding=list(a.output_padding))
        elif op == "fc":
            k = n.input_shapes[0][-1]
            if len(n.input_shapes[0]) == 2:
                ins = [x[0], self.weights(f"{name}/weight", (a.out_features, k))]
                if a.bias:
                    ins.append(self.weights(f"{name}/bias", (a.out_features,)))
                self.add("Gemm", ins, [y], name, transB=1)
            else:
                w = self.weights(f"{name}/weight", (k, a.out_features))
                if a.bias:
                    self.add("MatMul", [x[0], w], [f"{name}/matmul"], name)
                    b = self.weights(f"{name}/bias", (a.out_features,))
                    self.add("Add", [f"{name}/matmul", b], [y], f"{name}/bias")
                else:
                    self.add("MatMul", [x[0], w], [y], name)
        elif op == "matmul":
            if a.const_a is not None:
                x = [self.weights(f"{name}/a", tuple(a.const_a)), *x]
            self.add("MatMul", x, [y], name)
        elif op == "gather":
            data = n.input_shapes[0]
            axis = a.axis % len(data)
            if a.batch_dims == 0:
                idx = self.rng.integers(0, data[axis], size=tuple(a.indices_shape))
                self.add("Gather", [x[0], self.const(f"{name}/indices", idx.astype(np.int64))],
                         [y], name, axis=axis)
            elif a.batch_dims == axis and len(a.indices_shape) == axis + 1:
                # per-row indices (take_along_axis): GatherElements with each index
                # repeated over the axes after the gathered one
                shape = tuple(a.indices_shape) + tuple(data[axis + 1:])
                idx = np.broadcast_to(self.rng.integers(0, data[axis], size=tuple(
                    a.indices_shape) + (1,) * (len(data) - axis - 1)), shape)
                self.add("GatherElements",
                         [x[0], self.const(f"{name}/indices", np.ascontiguousarray(idx, np.int64))],
                         [y], name, axis=axis)
            else:
                raise UnsupportedOpError(
                    f"gather {name!r}: {a.batch_dims} batch axes with indices "
                    f"{a.indices_shape} have no ONNX op")
        elif op == "bn":
            c = n.input_shapes[0][1]
            ins = [x[0], self.weights(f"{name}/scale", (c,)), self.weights(f"{name}/bias", (c,)),
                   self.weights(f"{name}/mean", (c,)),
                   self.weights(f"{name}/var", (c,), low=0.5, high=1.5)]
            self.add("BatchNormalization", ins, [y], name, epsilon=a.epsilon)
        elif op in ("relu", "sigmoid", "tanh"):
            self.add({"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}[op], x, [y], name)
        elif op == "leakyrelu":
            self.add("LeakyRelu", x, [y], name, alpha=float(n.meta.get("alpha", 0.01)))
        elif op in ("relu6", "clip"):
            lo, hi = (0.0, 6.0) if op == "relu6" else (a.min_value, a.max_value)
            ins = [x[0], self.scalar(f"{name}/min", lo) if math.isfinite(lo) else "",
                   self.scalar(f"{name}/max", hi) if math.isfinite(hi) else ""]
            while ins[-1] == "":
                ins.pop()
            self.add("Clip", ins, [y], name)
        elif op == "hswish":
            if self.opset >= 14:
                self.add("HardSwish", x, [y], name)
            else:
                self.add("HardSigmoid", x, [f"{name}/hsig"], name, alpha=1 / 6, beta=0.5)
                self.add("Mul", [x[0], f"{name}/hsig"], [y], f"{name}/mul")
        elif op == "hsigmoid":
            self.add("HardSigmoid", x, [y], name, alpha=1 / 6, beta=0.5)
        elif op == "swish":
            self.add("Sigmoid", x, [f"{name}/sigmoid"], name)
            self.add("Mul", [x[0], f"{name}/sigmoid"], [y], f"{name}/mul")
        elif op == "gelu":
            if self.opset >= 20:
                self.add("Gelu", x, [y], name)
            else:
                self.add("Div", [x[0], self.scalar(f"{name}/sqrt2", math.sqrt(2))],
                         [f"{name}/div"], name)
                self.add("Erf", [f"{name}/div"], [f"{name}/erf"], f"{name}/erf")
                self.add("Add", [f"{name}/erf", self.scalar(f"{name}/one", 1.0)],
                         [f"{name}/add"], f"{name}/add")
                self.add("Mul", [x[0], f"{name}/add"], [f"{name}/mul"], f"{name}/mul")
                self.add("Mul", [f"{name}/mul", self.scalar(f"{name}/half", 0.5)], [y],
                         f"{name}/mul2")
        elif op in ("add", "sub", "mul", "div"):
            onnx_op = op.capitalize()
            if a.const_shape is None:
                self.add(onnx_op, x, [y], name)
            else:
                shape = tuple(a.const_shape)
                c = (self.weights(f"{name}/const", shape, low=0.5, high=1.5) if op == "div"
                     else self.weights(f"{name}/const", shape))
                ins = [c, x[0]] if n.meta.get("const_first") else [x[0], c]
                self.add(onnx_op, ins, [y], name)
        elif op == "concat":
            self.add("Concat", x, [y], name, axis=a.axis)
        elif op == "split":
            self.add("Split", [x[0], self.ints(f"{name}/split", a.sizes)], out, name,
                     axis=a.axis)
        elif op == "channelshuffle":
            nb, c, h, w = n.input_shapes[0]
            g = a.groups
            self.add("Reshape", [x[0], self.ints(f"{name}/shape1", (nb, g, c // g, h, w))],
                     [f"{name}/grouped"], name)
            self.add("Transpose", [f"{name}/grouped"], [f"{name}/transposed"],
                     f"{name}/transpose", perm=[0, 2, 1, 3, 4])
            self.add("Reshape", [f"{name}/transposed",
                                 self.ints(f"{name}/shape2", (nb, c, h, w))], [y],
                     f"{name}/reshape2")
        elif op in ("maxpool", "avgpool"):
            kw: dict[str, Any] = dict(kernel_shape=list(a.kernel), strides=list(a.stride),
                                      pads=list(a.pads), ceil_mode=int(a.ceil_mode))
            if op == "avgpool":
                kw["count_include_pad"] = int(a.count_include_pad)
            self.add("MaxPool" if op == "maxpool" else "AveragePool", x, [y], name, **kw)
        elif op == "gap":
            if a.keepdims:
                self.add("GlobalAveragePool", x, [y], name)
            else:
                self._reduce_mean(name, x[0], y, (2, 3), False)
        elif op == "reducemean":
            self._reduce_mean(name, x[0], y, a.axes, a.keepdims)
        elif op == "reshape":
            self.add("Reshape", [x[0], self.ints(f"{name}/shape", a.shape)], [y], name)
        elif op == "flatten":
            self.add("Flatten", x, [y], name, axis=a.axis)
        elif op == "transpose":
            perm = list(a.perm) or list(reversed(range(len(n.input_shapes[0]))))
            self.add("Transpose", x, [y], name, perm=perm)
        elif op == "pad":
            ins = [x[0], self.ints(f"{name}/pads", a.pads)]
            if a.mode == "constant":
                ins.append(self.scalar(f"{name}/value", a.value))
            self.add("Pad", ins, [y], name, mode=a.mode)
        elif op == "resize":
            nb, c = n.input_shapes[0][:2]
            sizes = self.ints(f"{name}/sizes", (nb, c) + tuple(a.size))
            self.add("Resize", [x[0], "", "", sizes], [y], name, mode=a.mode)
        elif op == "softmax":
            self.add("Softmax", x, [y], name, axis=a.axis)
        elif op == "layernorm":
            shape = n.input_shapes[0]
            norm = tuple(shape[a.axis:] if a.axis >= 0 else shape[len(shape) + a.axis:])
            if self.opset < 17:
                raise UnsupportedOpError(
                    f"layernorm {name!r} needs opset >= 17 (LayerNormalization); got "
                    f"opset {self.opset}"
                )
            ins = [x[0], self.weights(f"{name}/scale", norm), self.weights(f"{name}/bias", norm)]
            self.add("LayerNormalization", ins, [y], name, axis=a.axis, epsilon=a.epsilon)
        elif op == "lrn":
            self.add("LRN", x, [y], name, size=a.size, alpha=a.alpha, beta=a.beta, bias=a.bias)
        elif op == "identity":
            self.add("Identity", x, [y], name)
        elif op == "unknown":
            raise UnsupportedOpError(
                f"node {name!r} is an unknown op ({a.original_type or 'no original type'}); "
                f"the exporter writes vocabulary ops only. Replace it or export the "
                f"original model instead"
            )
        else:
            raise UnsupportedOpError(f"the ONNX exporter has no rule for op {op!r} ({name!r})")

    def _reduce_mean(self, name: str, x: str, y: str, axes: Any, keepdims: bool) -> None:
        if self.opset >= 18:
            self.add("ReduceMean", [x, self.ints(f"{name}/axes", axes)], [y], name,
                     keepdims=int(keepdims))
        else:
            self.add("ReduceMean", [x], [y], name, axes=list(axes), keepdims=int(keepdims))


def to_onnx_model(graph: ModelGraph, *, seed: int = 0, opset: int = 17) -> Any:
    """Build the ``onnx.ModelProto`` of ``graph`` (see :func:`export_onnx`)."""
    import onnx
    from onnx import TensorProto, helper

    if opset < MIN_OPSET:
        raise ExportError(f"opset {opset} is too old; the ONNX exporter writes opset >= "
                          f"{MIN_OPSET}")
    if any(not n.output_shapes for n in graph.topological_nodes()):
        graph = graph.copy().infer_shapes()
    writer = _Writer(graph, seed, opset)
    inputs = []
    for n in graph.topological_nodes():
        if n.op == "input":
            dtype = np.dtype(n.attrs.dtype)
            # Weights are float32, so float inputs are too (float16 graphs included).
            elem = (TensorProto.FLOAT if dtype.kind == "f"
                    else helper.np_dtype_to_tensor_dtype(dtype))
            inputs.append(helper.make_tensor_value_info(n.name, elem, list(n.output_shape)))
        else:
            writer.node(n)
    outputs = []
    for ref in graph.outputs:
        node = graph.node(ref.node)
        if node.op == "input":
            raise ExportError(f"graph output {ref} is a graph input; ONNX needs an op there")
        outputs.append(helper.make_tensor_value_info(
            _tensor(ref), TensorProto.FLOAT, list(graph.shape_of(ref))))
    onnx_graph = helper.make_graph(writer.nodes, graph.name, inputs, outputs,
                                   initializer=writer.inits)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="nnmeter")
    model.ir_version = helper.find_min_ir_version_for(opsets)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise ExportError(f"exported ONNX model of {graph.name!r} is invalid: {err}") from err
    return model


def export_onnx(graph: ModelGraph, path: "str | os.PathLike", *, seed: int = 0,
                opset: int = 17) -> Path:
    """Write ``graph`` as a runnable ONNX model with random weights.

    Parameters
    ----------
    graph : ModelGraph
        A graph of vocabulary ops (shapes are inferred if missing).
    path : path
        Where to write the ``.onnx`` file (parent folders are created).
    seed : int
        Seed of the weights; the same seed gives the same file.
    opset : int
        ONNX opset (>= 13; layernorm needs 17; gelu exports as one ``Gelu`` from 20).

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    UnsupportedOpError
        If the graph holds an ``unknown`` op (the message names it).
    ExportError
        If the opset is too old or the ONNX checker rejects the result.
    """
    import onnx

    model = to_onnx_model(graph, seed=seed, opset=opset)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
