"""Joining and cutting tensors along an axis: Concat and Split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnmeter.frontends.onnx.attributes import node_attrs, norm_axis
from nnmeter.frontends.onnx.ops.base import Fallback, act_input, register
from nnmeter.ir.ops import ConcatAttrs, GatherAttrs, PadAttrs, ReshapeAttrs, SplitAttrs

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["concat", "split", "slice_", "gather"]


@register("Concat")
def concat(imp: Importer, node: Any, idx: int) -> None:
    """Concat of activations; with constant operands at either end (ViT's class token,
    DeiT's class and distillation tokens: ``concat(cls, x)``), a pad of that axis."""
    ins = [t for t in node.input if t]
    axis = int(node_attrs(node).get("axis", 1))
    if any(t not in imp.refs for t in ins):
        _concat_constants(imp, node, idx, ins, axis)
        return
    imp.emit(node, idx, "concat", ConcatAttrs(axis=axis), ins, [node.output[0]])


def _concat_constants(imp: Importer, node: Any, idx: int, ins: list[str], axis: int) -> None:
    """Concat whose constant operands sit before and after its activations: the
    activations' concat (when more than one), then a ``pad`` of the concat axis by the
    constants' sizes. A pad with constant values is what the runtime does: it copies the
    activation into a larger buffer that also holds the constant rows. The constants'
    values are not kept (``meta["const_concat"]`` records their shapes)."""
    acts = [k for k, t in enumerate(ins) if t in imp.refs]
    if not acts or any(not imp.is_const(t) for t in ins if t not in imp.refs):
        raise Fallback("Concat operand is neither an activation nor a constant")
    if acts != list(range(acts[0], acts[-1] + 1)):
        raise Fallback("Concat with a constant between activations")
    rank = len(imp.shape(ins[acts[0]]))
    ax = norm_axis(axis, rank)
    before = sum(imp.shape(t)[ax] for t in ins[:acts[0]])
    after = sum(imp.shape(t)[ax] for t in ins[acts[-1] + 1:])
    src = ins[acts[0]]
    base = imp.node_name(node, idx)
    if len(acts) > 1:
        src = f"{node.output[0]}#acts"
        imp.emit(node, idx, "concat", ConcatAttrs(axis=axis), [ins[k] for k in acts], [src],
                 name=f"{base}/acts")
    pads = [0] * (2 * rank)
    pads[ax], pads[ax + rank] = before, after
    meta = {"const_concat": {"axis": ax, "shapes": [list(imp.shape(t)) for t in ins
                                                    if t not in imp.refs]}}
    imp.emit(node, idx, "pad", PadAttrs(pads=tuple(pads)), [src], [node.output[0]],
             name=base, meta=meta)


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


def _slice_cuts(imp: Importer, node: Any, rank: int,
                dims: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) of every axis a Slice cuts, bounds clamped as ONNX
    clamps them (positive steps only; Fallback otherwise)."""
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
        if st < 1:
            raise Fallback("Slice with a negative or zero step")
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        if (s, e) == (0, n) and st == 1:
            continue  # this axis is kept whole
        cut.append((ax, s, e, st))
    return sorted(cut)


def _slice_range(imp: Importer, node: Any, rank: int, dims: tuple[int, ...]) -> tuple[int, int, int]:
    """(axis, start, end) of a Slice that cuts one axis with step 1, its bounds clamped
    as ONNX clamps them; Fallback for any other Slice."""
    cut = _slice_cuts(imp, node, rank, dims)
    if any(st != 1 for *_, st in cut):
        raise Fallback("Slice with a step other than 1")
    if len(cut) != 1 or cut[0][2] <= cut[0][1]:
        raise Fallback("Slice that cuts other than one axis, or nothing")
    return cut[0][:3]


def _parts(n: int, keep: list[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """The axis [0, n) cut into consecutive (start, end, kept) parts around the sorted,
    disjoint ranges ``keep``."""
    parts, at = [], 0
    for s, e in keep:
        if s > at:
            parts.append((at, s, False))
        parts.append((s, e, True))
        at = e
    if at < n:
        parts.append((at, n, False))
    return parts


def _strided_slice(imp: Importer, node: Any, idx: int, x: str,
                   xs: tuple[int, ...]) -> None:
    """A Slice that cuts several axes or steps over one (Swin's patch merging
    ``x[:, 0::2, 1::2]``, LeViT's subsampling) as splits and reshapes: a step ``k`` over
    an axis is a reshape of it into (count, k), a split that keeps one of the ``k``, and
    a reshape back (consecutive reshapes merged). Only the splits move data, once per
    cut axis, as the runtime's strided copy does."""
    cuts = _slice_cuts(imp, node, len(xs), xs)
    if not cuts:
        raise Fallback("Slice that keeps the whole tensor")
    out = node.output[0]
    base = imp.node_name(node, idx)
    shape = list(xs)
    cur = x
    pending: list[int] | None = None  # a reshape still to emit before the next split
    k = 0

    def split(axis: int, n: int, keep: tuple[int, int]) -> None:
        nonlocal cur
        parts = _parts(n, [keep])
        if len(parts) == 1:
            return
        tensors = [f"{out}#{k}:{j}" for j in range(len(parts))]
        imp.emit(node, idx, "split",
                 SplitAttrs(axis=axis, sizes=tuple(e - s for s, e, _ in parts)), [cur],
                 tensors, name=base if k == 0 else f"{base}/{k}")
        cur = tensors[[p[2] for p in parts].index(True)]

    for ax, s, e, st in cuts:
        count = len(range(s, e, st))
        if count == 0:
            raise Fallback("Slice that keeps nothing")
        n = shape[ax]
        if st == 1:
            if pending is not None:
                cur = _reshape(imp, node, idx, cur, pending, f"{out}#{k}",
                               base if k == 0 else f"{base}/{k}")
                k += 1
                pending = None
            split(ax, n, (s, e))
            k += 1
            shape[ax] = count
            continue
        a0 = max(0, min(s, n - st * count))
        off = s - a0
        if not 0 <= off < st:
            raise Fallback("strided Slice whose steps do not tile the axis")
        if a0 + st * count > n:
            # x[::2] of an odd axis: its last step runs past the end; pad it to whole
            # steps (LeViT's subsampling of 7 × 7 to 4 × 4)
            if pending is not None:
                cur = _reshape(imp, node, idx, cur, pending, f"{out}#{k}",
                               base if k == 0 else f"{base}/{k}")
                k += 1
                pending = None
            pads = [0] * (2 * len(shape))
            pads[len(shape) + ax] = a0 + st * count - n
            imp.emit(node, idx, "pad", PadAttrs(pads=tuple(pads)), [cur], [f"{out}#{k}"],
                     name=base if k == 0 else f"{base}/{k}",
                     meta={"strided_slice_tail": True})
            cur = f"{out}#{k}"
            k += 1
            n = shape[ax] = a0 + st * count
        if (a0, a0 + st * count) != (0, n):
            if pending is not None:
                cur = _reshape(imp, node, idx, cur, pending, f"{out}#{k}",
                               base if k == 0 else f"{base}/{k}")
                k += 1
            split(ax, n, (a0, a0 + st * count))
            k += 1
        pending = shape[:ax] + [count, st] + shape[ax + 1:]
        cur = _reshape(imp, node, idx, cur, pending, f"{out}#{k}",
                       base if k == 0 else f"{base}/{k}")
        k += 1
        split(ax + 1, st, (off, off + 1))
        k += 1
        shape[ax] = count
        pending = list(shape)
    final = tuple(shape)
    if pending is not None or cur == x:
        cur = _reshape(imp, node, idx, cur, list(final), out,
                       base if k == 0 else f"{base}/{k}")
    else:
        # the last split's kept part is the Slice's output
        imp.refs[out] = imp.refs[cur]
    if imp.shape(out) != final:
        raise Fallback("strided Slice decomposition gives another shape")


def _reshape(imp: Importer, node: Any, idx: int, src: str, shape: list[int], out: str,
             name: str) -> str:
    imp.emit(node, idx, "reshape", ReshapeAttrs(shape=tuple(shape)), [src], [out], name=name)
    return out


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
    try:
        ax, s, e = _slice_range(imp, node, len(xs), xs)
    except Fallback:
        _strided_slice(imp, node, idx, x, xs)
        return
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


@register("Gather")
def gather(imp: Importer, node: Any, idx: int) -> None:
    """Gather of an activation by a constant scalar index (``x[:, 0]``, the query, key
    and value of a packed projection: ``qkv[0]``, ``qkv[1]``, ``qkv[2]``) as a split of
    that axis and a reshape that drops it. Sibling Gathers of one tensor along one axis
    share the split, as the runtime reads the tensor once."""
    x = act_input(imp, node)
    xs = imp.shape(x)
    axis = norm_axis(int(node_attrs(node).get("axis", 0)), len(xs))

    def index_of(n: Any) -> int | None:
        _fold_now(imp, n.input[1])
        v = imp.consts.get(n.input[1])
        if v is None or v.ndim != 0:
            return None
        k = int(v)
        return k + xs[axis] if k < 0 else k

    first = index_of(node)
    if first is None:
        if imp.is_const(node.input[1]) and node.input[1] in imp.const_shapes:
            # a lookup by constant indices: a gather kernel
            shape = tuple(int(d) for d in imp.const_shapes[node.input[1]])
            imp.emit(node, idx, "gather", GatherAttrs(axis=axis, indices_shape=shape),
                     [x], [node.output[0]])
            return
        raise Fallback("Gather of an activation by computed indices")
    taken = {first: (idx, node)}
    for j in imp.consumers.get(x, []):
        other = imp.nodes[j]
        if (j == idx or j in imp.done or other.op_type != "Gather" or other.input[0] != x
                or norm_axis(int(node_attrs(other).get("axis", 0)), len(xs)) != axis
                or not other.output or not other.output[0]):
            continue
        k = index_of(other)
        if k is not None and k not in taken:
            taken[k] = (j, other)
    parts = _parts(xs[axis], [(k, k + 1) for k in sorted(taken)])
    base = imp.node_name(node, idx)
    tensors = [f"{node.output[0]}#part{p}" for p in range(len(parts))]
    imp.emit(node, idx, "split", SplitAttrs(axis=axis, sizes=tuple(e - s for s, e, _ in parts)),
             [x], tensors, name=f"{base}/split")
    dropped = tuple(d for i, d in enumerate(xs) if i != axis)
    for p, (s, _, kept) in enumerate(parts):
        if not kept:
            continue
        j, n = taken[s]
        imp.done.add(j)
        imp.emit(n, j, "reshape", ReshapeAttrs(shape=dropped), [tensors[p]], [n.output[0]])


@register("GatherElements")
def gather_elements(imp: Importer, node: Any, idx: int) -> None:
    """``take_along_axis`` by constant indices whose every axis but the gathered one is
    the data's: a gather kernel with per-row indices (DeBERTa's relative positions).
    Indices that differ along the axes after the gathered one stay unknown."""
    x = act_input(imp, node)
    xs = imp.shape(x)
    axis = norm_axis(int(node_attrs(node).get("axis", 0)), len(xs))
    if not imp.is_const(node.input[1]) or node.input[1] not in imp.const_shapes:
        raise Fallback("GatherElements by computed indices")
    shape = tuple(int(d) for d in imp.const_shapes[node.input[1]])
    if len(shape) != len(xs) or shape[:axis] != tuple(xs[:axis]) or \
            shape[axis + 1:] != tuple(xs[axis + 1:]):
        raise Fallback("GatherElements whose indices do not follow the data's other axes")
    if axis + 1 < len(xs):
        _fold_now(imp, node.input[1])
        v = imp.consts.get(node.input[1])
        if v is None or not (v == v[(slice(None),) * (axis + 1) + (slice(0, 1),)
                                  * (len(xs) - axis - 1)]).all():
            raise Fallback("GatherElements whose indices differ along the copied axes")
    imp.emit(node, idx, "gather",
             GatherAttrs(axis=axis, indices_shape=shape[:axis + 1], batch_dims=axis),
             [x], [node.output[0]])
