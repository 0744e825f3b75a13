"""Reading an ONNX model: the file itself, its opset, static input shapes, the shapes
ONNX shape inference gives, and its initializers."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.errors import (
    DynamicShapeError, InputNameError, ModelLoadError, ShapeInferenceError,
    UnsupportedOpError,
)

__all__ = ["read_onnx_model", "opset_of", "static_inputs", "inferred_shapes",
           "node_shapes", "initializers", "elem_np_dtype", "static_shape"]

log = logging.getLogger(__name__)


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


def elem_np_dtype(elem_type: int) -> str:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return "float32"


def static_shape(type_proto: Any) -> tuple[int, ...] | None:
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


def opset_of(model: Any) -> int:
    """The version of the default (``ai.onnx``) opset ``model`` imports; 1 if none."""
    opset = 1
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = int(imp.version)
    return opset


def static_inputs(model: Any, input_shapes: Mapping[str, Sequence[int]] | None,
                  name: str) -> list[tuple[str, tuple[int, ...], str]]:
    """The real (non-initializer) inputs of ``model`` as ``(name, static shape, dtype)``.

    ``input_shapes`` overrides declared shapes (the key ``""`` names the first input);
    the static shapes are written into ``model`` so that ONNX shape inference can use
    them. ``name`` is the model name used in messages.

    Raises
    ------
    InputNameError
        ``input_shapes`` names something that is not an input.
    DynamicShapeError
        An input has no declared shape or a dynamic dimension that
        ``input_shapes`` does not fix.
    ShapeInferenceError
        A given shape has another rank than the declared one.
    UnsupportedOpError
        An input is not a numeric tensor.
    """
    g = model.graph
    init_names = {i.name for i in g.initializer} | {
        s.values.name for s in g.sparse_initializer
    }
    real = [vi for vi in g.input if vi.name not in init_names]
    names = [vi.name for vi in real]
    given: dict[str, tuple[int, ...]] = {}
    for key, shape in dict(input_shapes or {}).items():
        if key in ("", None):
            if not names:
                raise InputNameError(
                    f"an input shape was given but model {name!r} has no inputs"
                )
            key = names[0]
        if key not in names:
            raise InputNameError(
                f"input shape given for {key!r}, which is not an input of "
                f"{name!r}; its inputs are {names}"
            )
        given[key] = tuple(int(d) for d in shape)
    out = []
    for vi in real:
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            raise UnsupportedOpError(
                f"input {vi.name!r} of {name!r} is a {kind or 'untyped value'}, "
                f"not a tensor; the IR holds tensor inputs only"
            )
        tt = vi.type.tensor_type
        dtype = elem_np_dtype(tt.elem_type)
        if dtype in ("object", "str") or tt.elem_type == 8:  # 8 = STRING
            raise UnsupportedOpError(
                f"input {vi.name!r} of {name!r} holds strings; the IR holds "
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
                    f"input {vi.name!r} of {name!r} has no declared shape; pass "
                    f"one, e.g. --input-shape {vi.name}=1,3,224,224 "
                    f"(input_shapes={{{vi.name!r}: (1, 3, 224, 224)}})"
                )
            dims = []
            for i, d in enumerate(declared):
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_value") and d.dim_value == 0:
                    raise ModelLoadError(
                        f"input {vi.name!r} of {name!r} declares dimension {i} as 0 (a "
                        f"static zero-size dimension, not a dynamic one): the tensor is "
                        f"empty; re-export the model with its real size, or pass one with "
                        f"--input-shape {vi.name}=...")
                else:
                    label = d.dim_param if d.HasField("dim_param") else "?"
                    example = ",".join(
                        str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0
                        else "1" for x in declared
                    )
                    raise DynamicShapeError(
                        f"input {vi.name!r} of {name!r} has a dynamic dimension "
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


def inferred_shapes(model: Any, name: str) -> dict[str, tuple[int, ...]]:
    """Static shapes of the tensors of ``model`` by ONNX shape inference; where inference
    fails (logged as a warning), the shapes the model itself declares. ``name`` is the
    model name used in the warning."""
    got = _infer(model)
    if isinstance(got, Exception):
        log.warning("ONNX shape inference failed on %s (%s); continuing without it",
                    name, got)
        return _static_shapes(model.graph)
    return _static_shapes(got.graph)


def _infer(model: Any) -> Any:
    """ONNX shape inference on ``model`` (values propagated, types unchecked); the
    exception instead when it fails."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as err:
        return err


def _static_shapes(graph: Any) -> dict[str, tuple[int, ...]]:
    """Every tensor of ``graph`` whose type carries a static shape, by name."""
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
        shape = static_shape(vi.type)
        if shape is not None:
            shapes[vi.name] = shape
    return shapes


def node_shapes(node: Any, opset_imports: Sequence[Any],
                inputs: Mapping[str, tuple[tuple[int, ...], np.ndarray | None]]
                ) -> dict[str, tuple[int, ...]]:
    """Static output shapes of one ONNX ``node`` by ONNX shape inference on the node
    alone, its inputs declared at the shapes (and, for constants, the values) the
    importer already knows: ``inputs`` maps each input tensor to ``(shape, value or
    None)``. Whole-model inference loses a shape where it cannot follow a value that
    the importer folds (for example a Pad whose pads are computed from constants, as
    torch writes ``local_response_norm``); the node alone then has static inputs.
    Empty where inference cannot say (a subgraph, a missing input, a custom domain)."""
    import onnx
    from onnx import TensorProto, helper

    if node.domain not in ("", "ai.onnx") or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in node.attribute):
        return {}
    g_inputs, inits = [], []
    for t in node.input:
        if not t:
            continue
        if t not in inputs:
            return {}
        shape, value = inputs[t]
        init = _initializer(t, value)
        if init is not None:
            inits.append(init)
        else:  # known by shape only (or a value ONNX cannot hold): a typed input
            g_inputs.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, list(shape)))
    outs = [helper.make_empty_tensor_value_info(t) for t in node.output if t]
    graph = helper.make_graph([node], "node", g_inputs, outs, initializer=inits)
    got = _infer(helper.make_model(graph, opset_imports=list(opset_imports)))
    if isinstance(got, Exception):
        log.debug("ONNX shape inference of %s alone failed: %s", node.op_type, got)
        return {}
    return {t: s for t, s in _static_shapes(got.graph).items() if t in node.output}


def _initializer(name: str, value: np.ndarray | None) -> Any:
    """``value`` as an ONNX initializer named ``name``; None for no value or one ONNX
    cannot hold."""
    from onnx import numpy_helper

    if value is None:
        return None
    try:
        return numpy_helper.from_array(np.asarray(value), name)
    except (TypeError, ValueError):
        return None


def initializers(model: Any) -> Iterator[tuple[str, np.ndarray | None, tuple[int, ...]]]:
    """``(name, value, shape)`` of every initializer of ``model``; the value is None for
    sparse initializers and for those numpy cannot read."""
    from onnx import numpy_helper

    g = model.graph
    for init in g.initializer:
        try:
            value = numpy_helper.to_array(init)
        except (ValueError, TypeError, OSError) as err:
            value = None
            log.debug("initializer %s not read: %s", init.name, err)
        yield init.name, value, tuple(init.dims)
    for sp in g.sparse_initializer:
        yield sp.values.name, None, tuple(sp.dims)
