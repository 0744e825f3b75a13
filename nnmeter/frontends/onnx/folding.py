"""Constant folding: evaluating, with numpy, the ONNX nodes whose inputs are all known
constants, so that shape-computing chains fold away before the graph is mapped."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from nnmeter.errors import NNMeterError
from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis, resolve_reshape

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["try_fold", "evaluate"]

log = logging.getLogger(__name__)

#: Constants larger than this many elements are kept as "shape only" (never evaluated).
_MAX_FOLD_ELEMENTS = 1 << 22

#: Ops that are never evaluated even when every input is constant (random or stateful).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
            "Multinomial", "Bernoulli"}


def try_fold(imp: Importer, node: Any) -> bool:
    """Evaluate ``node`` if its inputs are constant; True when its outputs are now
    constants."""
    ins = [t for t in node.input if t]
    op = node.op_type
    if op in ("Shape", "Size") and ins and (ins[0] in imp.refs or ins[0] in imp.const_shapes):
        shape = np.array(imp.shape(ins[0]), dtype=np.int64)
        if op == "Size":
            imp.set_const(node.output[0], np.array(int(np.prod(shape)), dtype=np.int64))
            return True
        a = node_attrs(node)
        start, end = a.get("start", 0), a.get("end", None)
        imp.set_const(node.output[0], shape[start:end])
        return True
    if not all(imp.is_const(t) for t in ins):
        return False
    if node.domain not in ("", "ai.onnx"):
        return False
    outputs = [t for t in node.output if t]
    if op in _NO_FOLD or any(imp.consts[t] is None for t in ins) or any(
        math.prod(imp.const_shapes[t]) > _MAX_FOLD_ELEMENTS for t in ins
    ):
        if op in ("Identity", "Dropout"):
            imp.set_const(node.output[0], None, imp.const_shapes[ins[0]])
            return True
        return _shapes_only(imp, outputs)
    try:
        values = evaluate(node, [imp.consts[t] if t else None for t in node.input],
                          imp.opset)
    except (NNMeterError, ValueError, TypeError, IndexError, KeyError, RuntimeError,
            NotImplementedError, AttributeError, OverflowError) as err:
        log.debug("could not fold %s %s: %s", op, node.name, err)
        return _shapes_only(imp, outputs)
    for t, v in zip(node.output, values):
        if t:
            imp.set_const(t, v)
    return True


def _shapes_only(imp: Importer, outputs: list[str]) -> bool:
    """Record ``outputs`` as constants known by shape only, when ONNX shape inference
    knows every one of their shapes; True if it did."""
    shapes = [imp.vi_shapes.get(t) for t in outputs]
    if all(s is not None for s in shapes):
        for t, s in zip(outputs, shapes):
            imp.set_const(t, None, s)
        return True
    return False


def evaluate(node: Any, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Evaluate one node on constant inputs: numpy fast paths, onnx.reference otherwise."""
    op = node.op_type
    a = node_attrs(node)
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
        for ax in sorted(norm_axis(int(v), rank) for v in axes):
            shape.insert(ax, 1)
        return [x.reshape(shape)]
    elif op == "Squeeze":
        axes = a.get("axes", None)
        if axes is None and len(inputs) > 1 and inputs[1] is not None:
            axes = [int(v) for v in inputs[1]]
        if axes is None:
            return [np.squeeze(x)]
        return [np.squeeze(x, axis=tuple(norm_axis(int(v), x.ndim) for v in axes))]
    elif op == "Concat":
        return [np.concatenate([v for v in inputs if v is not None], axis=a["axis"])]
    elif op == "Gather":
        return [np.take(x, inputs[1].astype(np.int64), axis=a.get("axis", 0))]
    elif op == "Cast":
        from onnx import helper

        return [x.astype(helper.tensor_dtype_to_np_dtype(a["to"]))]
    elif op == "Reshape":
        target = [int(v) for v in (a["shape"] if "shape" in a else inputs[1])]
        return [x.reshape(resolve_reshape(x.shape, target, a.get("allowzero", 0)))]
    elif op in ("Add", "Sub", "Mul", "Div") and "broadcast" not in a:
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
        if op == "Div" and np.issubdtype(x.dtype, np.integer):
            return [(x // inputs[1]).astype(x.dtype)]
        return [fn(x, inputs[1]).astype(np.result_type(x, inputs[1]))]
    elif op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    elif op == "GatherElements":
        # onnx.reference's GatherElements mis-shapes broadcast (read-only) inputs
        return [np.take_along_axis(np.ascontiguousarray(x), inputs[1].astype(np.int64),
                                   axis=norm_axis(a.get("axis", 0), x.ndim))]
    elif op == "Expand":
        shape = np.broadcast_shapes(x.shape, tuple(int(d) for d in inputs[1]))
        return [np.array(np.broadcast_to(x, shape))]
    elif op == "Where":
        return [np.where(x, inputs[1], inputs[2])]
    elif op == "Equal":
        return [np.equal(x, inputs[1])]
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
