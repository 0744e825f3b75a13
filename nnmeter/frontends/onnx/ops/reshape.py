"""Ops that change only a tensor's shape or axis order: Reshape (a channel shuffle when
Transpose and Reshape follow), Squeeze, Unsqueeze, Flatten and Transpose."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis, resolve_reshape
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import ChannelShuffleAttrs, FlattenAttrs, ReshapeAttrs, TransposeAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["reshape", "squeeze", "flatten", "transpose"]


def _channel_shuffle(imp: Importer, node: Any, idx: int, x: str,
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
    if list(node_attrs(tr).get("perm", [])) != [0, 2, 1, 3, 4]:
        return False
    r_idx = imp.sole_consumer(tr.output[0])
    if r_idx is None or imp.nodes[r_idx].op_type != "Reshape":
        return False
    r2 = imp.nodes[r_idx]
    expected = imp.vi_shapes.get(r2.output[0])
    if expected is None:
        try:
            t2 = [int(v) for v in imp.value(r2.input[1])]
        except Fallback:
            return False
        expected = resolve_reshape((n, c // g, g, h, w), t2)
    if tuple(expected) != (n, c, h, w):
        return False
    imp.done.update((t_idx, r_idx))
    imp.emit(node, idx, "channelshuffle", ChannelShuffleAttrs(groups=g), [x],
             [r2.output[0]])
    return True


@register("Reshape")
def reshape(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    xs = imp.shape(x)
    if "shape" in a:
        target = resolve_reshape(xs, [int(v) for v in a["shape"]])
    elif len(node.input) > 1 and node.input[1] in imp.consts and \
            imp.consts[node.input[1]] is not None:
        target = resolve_reshape(xs, [int(v) for v in imp.value(node.input[1])],
                                 a.get("allowzero", 0))
    elif node.output[0] in imp.vi_shapes:
        target = imp.vi_shapes[node.output[0]]
    else:
        raise Fallback("reshape target is not constant")
    if _channel_shuffle(imp, node, idx, x, tuple(target)):
        return
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=tuple(target)), [x],
             [node.output[0]])


@register("Squeeze", "Unsqueeze")
def squeeze(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    xs = list(imp.shape(x))
    a = node_attrs(node)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.value(node.input[1])]
    if node.op_type == "Squeeze":
        if axes is None:
            shape = [d for d in xs if d != 1]
        else:
            drop = {norm_axis(int(v), len(xs)) for v in axes}
            shape = [d for i, d in enumerate(xs) if i not in drop]
    else:
        if axes is None:
            raise Fallback("Unsqueeze without axes")
        rank = len(xs) + len(axes)
        shape = list(xs)
        for ax in sorted(norm_axis(int(v), rank) for v in axes):
            shape.insert(ax, 1)
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=tuple(shape)), [x], [node.output[0]])


@register("Flatten")
def flatten(imp: Importer, node: Any, idx: int) -> None:
    imp.emit(node, idx, "flatten", FlattenAttrs(axis=int(node_attrs(node).get("axis", 1))),
             [act_input(imp, node)], [node.output[0]])


@register("Transpose")
def transpose(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    perm = node_attrs(node).get("perm") or list(reversed(range(len(imp.shape(x)))))
    imp.emit(node, idx, "transpose", TransposeAttrs(perm=tuple(int(p) for p in perm)), [x],
             [node.output[0]])
