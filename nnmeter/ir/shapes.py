"""Shape inference over a ModelGraph, one small rule per op.

Shapes are in the canonical layout (see :mod:`nnmeter.ir.ops`). Ops kept as
``unknown`` keep the output shapes their frontend recorded; without them inference
fails with a message that says so.

Examples
--------
>>> from nnmeter.ir.graph import ModelGraph
>>> from nnmeter.ir.ops import ConvAttrs
>>> g = ModelGraph()
>>> x = g.add_input("x", (1, 3, 32, 32))
>>> _ = g.add_node("c", "conv", ConvAttrs(out_channels=8, stride=(2, 2)), [x])
>>> g.set_outputs(["c"])
>>> infer_shapes(g)["c"].output_shape
(1, 8, 16, 16)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from nnmeter.errors import ShapeInferenceError
from nnmeter.ir.graph import ModelGraph, Node, Shape
from nnmeter.ir.ops import ACTIVATIONS, ELEMENTWISE_BINARY

__all__ = ["infer_shapes", "infer_node", "conv_out_size", "pool_out_size", "broadcast"]


def conv_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                  dilation: int = 1) -> int:
    """Output length of a convolution along one axis."""
    effective = dilation * (kernel - 1) + 1
    return (size + pad_begin + pad_end - effective) // stride + 1


def pool_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                  ceil_mode: bool = False) -> int:
    """Output length of a pooling window along one axis (ONNX semantics)."""
    span = size + pad_begin + pad_end - kernel
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    # ONNX/PyTorch rule: the last window must start inside the input or left padding.
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def broadcast(a: Shape, b: Shape) -> Shape:
    """Numpy broadcast of two shapes.

    Raises
    ------
    ShapeInferenceError
        If the shapes do not broadcast.
    """
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ShapeInferenceError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def _need_rank(node: Node, shape: Shape, rank: int) -> None:
    if len(shape) != rank:
        raise ShapeInferenceError(
            f"{node.op} {node.name!r} needs a rank-{rank} input in the canonical layout, "
            f"got {shape}"
        )


def _conv(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    _need_rank(node, x, 4)
    a = node.attrs
    n, c, h, w = x
    if c % a.groups:
        raise ShapeInferenceError(
            f"{node.op} {node.name!r}: {c} input channels are not divisible by groups={a.groups}"
        )
    if node.op == "dwconv" and a.groups != c:
        raise ShapeInferenceError(
            f"dwconv {node.name!r}: groups={a.groups} must equal input channels {c}; "
            f"use op 'conv' with groups for grouped convolution"
        )
    if node.op == "convtranspose":
        ho = (h - 1) * a.stride[0] - a.pads[0] - a.pads[2] + a.dilation[0] * (a.kernel[0] - 1) + 1 + a.output_padding[0]
        wo = (w - 1) * a.stride[1] - a.pads[1] - a.pads[3] + a.dilation[1] * (a.kernel[1] - 1) + 1 + a.output_padding[1]
    else:
        ho = conv_out_size(h, a.kernel[0], a.stride[0], a.pads[0], a.pads[2], a.dilation[0])
        wo = conv_out_size(w, a.kernel[1], a.stride[1], a.pads[1], a.pads[3], a.dilation[1])
    if ho <= 0 or wo <= 0:
        raise ShapeInferenceError(
            f"{node.op} {node.name!r}: input {x} with kernel {a.kernel}, stride {a.stride} "
            f"and pads {a.pads} gives an empty output"
        )
    return [(n, a.out_channels, ho, wo)]


def _pool(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    _need_rank(node, x, 4)
    a = node.attrs
    n, c, h, w = x
    ho = pool_out_size(h, a.kernel[0], a.stride[0], a.pads[0], a.pads[2], a.ceil_mode)
    wo = pool_out_size(w, a.kernel[1], a.stride[1], a.pads[1], a.pads[3], a.ceil_mode)
    if ho <= 0 or wo <= 0:
        raise ShapeInferenceError(f"{node.op} {node.name!r}: input {x} too small for {a}")
    return [(n, c, ho, wo)]


def _same(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    return [tuple(ins[0])]


def _eltwise(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    shapes = list(ins)
    if node.attrs.const_shape is not None:
        shapes.append(tuple(node.attrs.const_shape))
    if len(shapes) != 2:
        raise ShapeInferenceError(
            f"{node.op} {node.name!r} needs two operands (two inputs, or one input and "
            f"const_shape), got {len(shapes)}"
        )
    return [broadcast(shapes[0], shapes[1])]


def _fc(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    if len(x) < 2:
        raise ShapeInferenceError(f"fc {node.name!r} needs rank >= 2, got {x}")
    return [tuple(x[:-1]) + (node.attrs.out_features,)]


def _matmul(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    const_a = getattr(node.attrs, "const_a", None)
    if const_a is not None:
        if len(ins) != 1:
            raise ShapeInferenceError(
                f"matmul {node.name!r}: a constant first operand takes one input, got {len(ins)}")
        a, b = tuple(const_a), ins[0]
    elif len(ins) != 2:
        raise ShapeInferenceError(f"matmul {node.name!r}: needs two inputs, got {len(ins)}")
    else:
        a, b = ins[0], ins[1]
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise ShapeInferenceError(f"matmul {node.name!r}: {a} @ {b} does not fit")
    batch = broadcast(a[:-2], b[:-2])
    return [tuple(batch) + (a[-2], b[-1])]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _gather(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    a = node.attrs
    axis = _axis(a.axis, len(x))
    idx = tuple(a.indices_shape)
    bd = a.batch_dims
    if not 0 <= axis < len(x) or not 0 <= bd <= min(axis, len(idx)) or \
            tuple(idx[:bd]) != tuple(x[:bd]):
        raise ShapeInferenceError(
            f"gather {node.name!r}: indices {idx} (batch_dims {bd}) do not index {x} on "
            f"axis {a.axis}")
    return [tuple(x[:axis]) + idx[bd:] + tuple(x[axis + 1:])]


def _concat(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    rank = len(ins[0])
    axis = _axis(node.attrs.axis, rank)
    out = list(ins[0])
    for s in ins[1:]:
        if len(s) != rank or any(s[i] != out[i] for i in range(rank) if i != axis):
            raise ShapeInferenceError(
                f"concat {node.name!r}: shapes {list(ins)} differ outside axis {axis}"
            )
        out[axis] += s[axis]
    return [tuple(out)]


def _split(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    axis = _axis(node.attrs.axis, len(x))
    sizes = node.attrs.sizes
    if sum(sizes) != x[axis]:
        raise ShapeInferenceError(
            f"split {node.name!r}: sizes {sizes} do not add up to {x[axis]} on axis {axis}"
        )
    return [tuple(x[:axis]) + (s,) + tuple(x[axis + 1:]) for s in sizes]


def _channelshuffle(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    if x[1] % node.attrs.groups:
        raise ShapeInferenceError(
            f"channelshuffle {node.name!r}: {x[1]} channels not divisible by {node.attrs.groups}"
        )
    return [tuple(x)]


def _gap(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    _need_rank(node, x, 4)
    return [(x[0], x[1], 1, 1) if node.attrs.keepdims else (x[0], x[1])]


def _reshape(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    target = tuple(node.attrs.shape)
    if math.prod(target) != math.prod(ins[0]):
        raise ShapeInferenceError(
            f"reshape {node.name!r}: cannot reshape {ins[0]} ({math.prod(ins[0])} elements) "
            f"to {target}"
        )
    return [target]


def _flatten(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    axis = _axis(node.attrs.axis, len(x))
    return [(math.prod(x[:axis]), math.prod(x[axis:]))]


def _transpose(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    perm = node.attrs.perm or tuple(reversed(range(len(x))))
    if sorted(perm) != list(range(len(x))):
        raise ShapeInferenceError(f"transpose {node.name!r}: perm {perm} does not fit {x}")
    return [tuple(x[p] for p in perm)]


def _pad(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    pads = node.attrs.pads
    if len(pads) != 2 * len(x):
        raise ShapeInferenceError(
            f"pad {node.name!r}: {len(pads)} pads for a rank-{len(x)} input; need {2 * len(x)}"
        )
    r = len(x)
    return [tuple(x[i] + pads[i] + pads[i + r] for i in range(r))]


def _resize(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    _need_rank(node, x, 4)
    return [(x[0], x[1], node.attrs.size[0], node.attrs.size[1])]


def _reduce(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    x = ins[0]
    axes = {_axis(a, len(x)) for a in node.attrs.axes} or set(range(len(x)))
    if node.attrs.keepdims:
        return [tuple(1 if i in axes else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in axes)]


def _input(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    if not node.output_shapes:
        raise ShapeInferenceError(f"input {node.name!r} has no shape; give one")
    return list(node.output_shapes)


def _unknown(node: Node, ins: Sequence[Shape]) -> list[Shape]:
    if not node.output_shapes:
        raise ShapeInferenceError(
            f"unknown op {node.name!r} ({node.attrs.original_type}) has no recorded output "
            f"shape; the frontend must record it"
        )
    return list(node.output_shapes)


_RULES: dict[str, Callable[[Node, Sequence[Shape]], list[Shape]]] = {
    "input": _input,
    "conv": _conv,
    "dwconv": _conv,
    "convtranspose": _conv,
    "fc": _fc,
    "matmul": _matmul,
    "gather": _gather,
    "bn": _same,
    "clip": _same,
    "softmax": _same,
    "layernorm": _same,
    "lrn": _same,
    "identity": _same,
    **{a: _same for a in ACTIVATIONS},
    **{e: _eltwise for e in ELEMENTWISE_BINARY},
    "concat": _concat,
    "split": _split,
    "channelshuffle": _channelshuffle,
    "maxpool": _pool,
    "avgpool": _pool,
    "gap": _gap,
    "reshape": _reshape,
    "flatten": _flatten,
    "transpose": _transpose,
    "pad": _pad,
    "resize": _resize,
    "reducemean": _reduce,
    "unknown": _unknown,
}


def infer_node(node: Node, input_shapes: Sequence[Shape]) -> list[Shape]:
    """Output shapes of ``node`` given its input shapes.

    Raises
    ------
    ShapeInferenceError
        If the shapes do not fit the op's attributes.
    """
    return _RULES[node.op](node, input_shapes)


def infer_shapes(graph: ModelGraph) -> ModelGraph:
    """Fill ``input_shapes`` and ``output_shapes`` of every node, in place.

    Returns the same graph, for chaining.

    Raises
    ------
    ShapeInferenceError
        Naming the first node whose input shapes do not fit.
    """
    for node in graph.topological_nodes():
        ins = tuple(graph.shape_of(r) for r in node.inputs)
        try:
            outs = infer_node(node, ins)
        except ShapeInferenceError:
            raise
        except (IndexError, TypeError, ValueError, ZeroDivisionError) as err:
            raise ShapeInferenceError(
                f"shape inference failed at {node.op} {node.name!r} with inputs {ins}: {err}"
            ) from err
        outs_t = tuple(tuple(int(d) for d in s) for s in outs)
        if ins != node.input_shapes or outs_t != node.output_shapes:
            graph.replace(node.name, input_shapes=ins, output_shapes=outs_t)
    return graph
