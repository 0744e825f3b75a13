"""NHWC <-> NCHW conversion of shapes, axes, permutations and pads, in ONE place.

The IR's canonical layout is NCHW (see :mod:`nnmeter.ir.ops`). TensorFlow and LiteRT
hold rank-4 activations as NHWC. Every frontend or exporter that crosses between the
two converts through the functions here, so that a shape, a concat axis, a mean axis,
a transpose permutation or a pad list is converted the same way everywhere.

Only rank-4 tensors change layout. Tensors of any other rank are the same in both
layouts (rank-2 is (N, features); rank-3 sequences keep their order).

Examples
--------
>>> nhwc_to_nchw_shape((1, 28, 28, 16))
(1, 16, 28, 28)
>>> nchw_to_nhwc_shape((1, 16, 28, 28))
(1, 28, 28, 16)
>>> nhwc_to_nchw_axis(3, rank=4)
1
>>> nhwc_to_nchw_axes((1, 2), rank=4)
(2, 3)
>>> nhwc_to_nchw_perm((0, 2, 1, 3))   # swapping H and W reads the same in both layouts
(0, 1, 3, 2)
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "NHWC_TO_NCHW",
    "NCHW_TO_NHWC",
    "compose_perms",
    "nhwc_to_nchw_shape",
    "nchw_to_nhwc_shape",
    "nhwc_to_nchw_axis",
    "nchw_to_nhwc_axis",
    "nhwc_to_nchw_axes",
    "nchw_to_nhwc_axes",
    "nhwc_to_nchw_perm",
    "nchw_to_nhwc_perm",
    "nhwc_to_nchw_pads",
    "nchw_to_nhwc_pads",
    "broadcast_shape_nchw",
    "broadcast_shape_nhwc",
    "same_element_order",
]

#: ``x_nhwc.transpose(NHWC_TO_NCHW)`` is the NCHW tensor.
NHWC_TO_NCHW: tuple[int, int, int, int] = (0, 3, 1, 2)
#: ``x_nchw.transpose(NCHW_TO_NHWC)`` is the NHWC tensor.
NCHW_TO_NHWC: tuple[int, int, int, int] = (0, 2, 3, 1)


def compose_perms(first: Sequence[int], second: Sequence[int]) -> tuple[int, ...]:
    """The single permutation equal to transposing by ``first`` and then by ``second``.

    ``x.transpose(first).transpose(second) == x.transpose(compose_perms(first, second))``.

    >>> compose_perms(NCHW_TO_NHWC, NHWC_TO_NCHW)
    (0, 1, 2, 3)
    """
    return tuple(int(first[j]) for j in second)


def nhwc_to_nchw_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Canonical shape of a tensor held as NHWC; shapes of other ranks pass unchanged."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4:
        return shape
    return tuple(shape[i] for i in NHWC_TO_NCHW)


def nchw_to_nhwc_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """NHWC shape of a canonical (NCHW) shape; shapes of other ranks pass unchanged."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4:
        return shape
    return tuple(shape[i] for i in NCHW_TO_NHWC)


def _norm_axis(axis: int, rank: int) -> int:
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for a rank-{rank} tensor; "
                         f"allowed: {-rank}..{rank - 1}")
    return axis + rank if axis < 0 else axis


def nhwc_to_nchw_axis(axis: int, rank: int) -> int:
    """The canonical axis of an NHWC axis (negative axes allowed; result non-negative)."""
    axis = _norm_axis(axis, rank)
    # canonical axis j is NHWC axis NHWC_TO_NCHW[j]
    return NHWC_TO_NCHW.index(axis) if rank == 4 else axis


def nchw_to_nhwc_axis(axis: int, rank: int) -> int:
    """The NHWC axis of a canonical axis (negative axes allowed; result non-negative)."""
    axis = _norm_axis(axis, rank)
    return NHWC_TO_NCHW[axis] if rank == 4 else axis


def nhwc_to_nchw_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Canonical axes of several NHWC axes, sorted."""
    return tuple(sorted(nhwc_to_nchw_axis(a, rank) for a in axes))


def nchw_to_nhwc_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """NHWC axes of several canonical axes, sorted."""
    return tuple(sorted(nchw_to_nhwc_axis(a, rank) for a in axes))


def nhwc_to_nchw_perm(perm: Sequence[int], out_rank: int | None = None) -> tuple[int, ...]:
    """The canonical permutation of a transpose written for NHWC tensors.

    A transpose of a rank-4 tensor held as NHWC by ``perm`` is, seen from the
    canonical layout, convert-to-NHWC, ``perm``, convert-back. Ranks other than 4 pass
    unchanged (input and output rank of a transpose are equal).
    """
    perm = tuple(int(p) for p in perm)
    if len(perm) != 4:
        return perm
    return compose_perms(compose_perms(NCHW_TO_NHWC, perm), NHWC_TO_NCHW)


def nchw_to_nhwc_perm(perm: Sequence[int]) -> tuple[int, ...]:
    """The permutation to apply to NHWC-held tensors for a canonical transpose ``perm``."""
    perm = tuple(int(p) for p in perm)
    if len(perm) != 4:
        return perm
    return compose_perms(compose_perms(NHWC_TO_NCHW, perm), NCHW_TO_NHWC)


def nhwc_to_nchw_pads(paddings: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """ONNX-style canonical pads (all begins, then all ends) of TF ``[[begin, end], ...]``.

    >>> nhwc_to_nchw_pads([[0, 0], [1, 2], [3, 4], [0, 0]])
    (0, 0, 1, 3, 0, 0, 2, 4)
    """
    pairs = [(int(b), int(e)) for b, e in paddings]
    if len(pairs) == 4:
        pairs = [pairs[i] for i in NHWC_TO_NCHW]
    return tuple(b for b, _ in pairs) + tuple(e for _, e in pairs)


def nchw_to_nhwc_pads(pads: Sequence[int]) -> list[list[int]]:
    """TF ``[[begin, end], ...]`` paddings of ONNX-style canonical pads.

    >>> nchw_to_nhwc_pads((0, 0, 1, 3, 0, 0, 2, 4))
    [[0, 0], [1, 2], [3, 4], [0, 0]]
    """
    pads = [int(p) for p in pads]
    if len(pads) % 2:
        raise ValueError(f"pads must hold a begin and an end per axis, got {len(pads)} values")
    rank = len(pads) // 2
    pairs = [[pads[i], pads[i + rank]] for i in range(rank)]
    if rank == 4:
        pairs = [pairs[i] for i in NCHW_TO_NHWC]
    return pairs


def broadcast_shape_nchw(const_shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """Canonical shape of a constant broadcast against a rank-``rank`` NHWC activation.

    Numpy broadcasting aligns trailing axes, so a per-channel vector ``(C,)`` broadcast
    against NHWC data is ``(1, C, 1, 1)`` in the canonical layout. Constants of rank 0
    stay scalars.

    >>> broadcast_shape_nchw((16,), rank=4)
    (1, 16, 1, 1)
    >>> broadcast_shape_nchw((), rank=4)
    ()
    """
    const_shape = tuple(int(d) for d in const_shape)
    if rank != 4 or not const_shape or len(const_shape) > 4:
        return const_shape
    padded = (1,) * (4 - len(const_shape)) + const_shape
    return nhwc_to_nchw_shape(padded)


def broadcast_shape_nhwc(const_shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """NHWC shape of a canonical constant broadcast against a rank-``rank`` activation.

    >>> broadcast_shape_nhwc((16, 1, 1), rank=4)
    (1, 1, 1, 16)
    """
    const_shape = tuple(int(d) for d in const_shape)
    if rank != 4 or not const_shape or len(const_shape) > 4:
        return const_shape
    padded = (1,) * (4 - len(const_shape)) + const_shape
    return nchw_to_nhwc_shape(padded)


def same_element_order(shape: Sequence[int]) -> bool:
    """True when a canonical shape lists its elements in the same order in NCHW and NHWC.

    That holds for every rank other than 4, and for rank-4 tensors with one channel or
    a 1x1 spatial extent. A reshape or flatten of such a tensor needs no transpose when
    crossing layouts.

    >>> same_element_order((8, 16, 1, 1)), same_element_order((1, 1, 7, 7))
    (True, True)
    >>> same_element_order((1, 16, 7, 7))
    False
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4:
        return True
    return shape[1] == 1 or shape[2] * shape[3] == 1
