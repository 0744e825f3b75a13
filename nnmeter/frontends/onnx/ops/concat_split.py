"""Joining and cutting tensors along an axis: Concat and Split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import ConcatAttrs, SplitAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["concat", "split", "slice_"]


@register("Concat")
def concat(imp: Importer, node: Any, idx: int) -> None:
    ins = [t for t in node.input if t]
    if any(t not in imp.refs for t in ins):
        raise Fallback("Concat with a constant operand")
    axis = int(node_attrs(node).get("axis", 1))
    imp.emit(node, idx, "concat", ConcatAttrs(axis=axis), ins, [node.output[0]])


@register("Split")
def split(imp: Importer, node: Any, idx: int) -> None:
    x = act_input(imp, node)
    a = node_attrs(node)
    xs = imp.shape(x)
    axis = int(a.get("axis", 0))
    ax = norm_axis(axis, len(xs))
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
        raise Fallback("Split with unnamed outputs")
    imp.emit(node, idx, "split", SplitAttrs(axis=axis, sizes=tuple(sizes)), [x], outs)


def _fold_now(imp: Importer, tensor: str, depth: int = 0) -> None:
    """Fold the constant subgraph that computes ``tensor`` ahead of the node order (a
    sibling Slice's bounds come from Shape -> Gather -> Div -> Mul nodes that may come
    after the Slice being mapped); leaves it unfolded when that is not possible."""
    from nnmeter.frontends.onnx.folding import try_fold

    if not tensor or imp.consts.get(tensor) is not None or depth > 32:
        return
    j = imp.producer(tensor)
    if j is None or j in imp.done:
        return
    n = imp.nodes[j]
    for t in n.input:
        _fold_now(imp, t, depth + 1)
    if try_fold(imp, n):
        imp.done.add(j)


def _slice_range(imp: Importer, node: Any, rank: int, dims: tuple[int, ...]) -> tuple[int, int, int]:
    """(axis, start, end) of a Slice that cuts one axis with step 1, its bounds clamped
    as ONNX clamps them; Fallback for any other Slice."""
    a = node_attrs(node)
    if len(node.input) > 1:  # opset >= 10: starts, ends, axes, steps as inputs
        starts = [int(v) for v in imp.value(node.input[1]).reshape(-1)]
        ends = [int(v) for v in imp.value(node.input[2]).reshape(-1)]
        axes = ([int(v) for v in imp.value(node.input[3]).reshape(-1)]
                if len(node.input) > 3 and node.input[3] else list(range(len(starts))))
        steps = ([int(v) for v in imp.value(node.input[4]).reshape(-1)]
                 if len(node.input) > 4 and node.input[4] else [1] * len(starts))
    else:
        starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
        axes = [int(v) for v in a.get("axes", range(len(starts)))]
        steps = [1] * len(starts)
    cut = []
    for ax, s, e, st in zip(axes, starts, ends, steps):
        ax = norm_axis(ax, rank)
        n = dims[ax]
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        if (s, e) == (0, n) and st == 1:
            continue  # this axis is kept whole
        if st != 1:
            raise Fallback("Slice with a step other than 1")
        cut.append((ax, s, e))
    if len(cut) != 1 or cut[0][2] <= cut[0][1]:
        raise Fallback("Slice that cuts other than one axis, or nothing")
    return cut[0]


@register("Slice")
def slice_(imp: Importer, node: Any, idx: int) -> None:
    """A Slice that cuts one axis is a Split of that axis. Sibling Slices of one tensor
    whose ranges tile the axis (ShuffleNet V2's channel halves written as ``x[:, :c]``,
    ``x[:, c:]``) become one Split with one output each, as the runtime copies each part
    once; a lone Slice is a Split whose other parts nobody reads."""
    x = act_input(imp, node)
    if not node.output or not node.output[0]:
        raise Fallback("Slice without an output")
    xs = imp.shape(x)
    ax, s, e = _slice_range(imp, node, len(xs), xs)
    parts = {(s, e): (idx, node.output[0])}
    for j in imp.consumers.get(x, []):
        other = imp.nodes[j]
        if j == idx or j in imp.done or other.op_type != "Slice" or other.input[0] != x:
            continue
        try:
            for t in other.input[1:]:
                _fold_now(imp, t)
            oax, os_, oe = _slice_range(imp, other, len(xs), xs)
        except Fallback:
            continue
        if oax == ax and (os_, oe) not in parts and other.output and other.output[0]:
            parts[(os_, oe)] = (j, other.output[0])
    bounds = sorted(parts)
    tiles = bounds[0][0] == 0 and bounds[-1][1] == xs[ax] and all(
        a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    if tiles and len(bounds) > 1:
        for j, _ in parts.values():
            imp.done.add(j)
        sizes = [b - a for a, b in bounds]
        outs = [parts[r][1] for r in bounds]
    else:
        sizes, outs = [], []
        if s > 0:
            sizes.append(s)
            outs.append(f"{node.output[0]}::before")
        sizes.append(e - s)
        outs.append(node.output[0])
        if e < xs[ax]:
            sizes.append(xs[ax] - e)
            outs.append(f"{node.output[0]}::after")
    if len(sizes) == 1:
        raise Fallback("Slice that keeps the whole tensor")
    imp.emit(node, idx, "split", SplitAttrs(axis=ax, sizes=tuple(sizes)), [x], outs)
