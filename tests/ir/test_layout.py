"""Tests of nnmeter.ir.layout: every conversion agrees with numpy on real arrays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from nnmeter.ir import layout as L


@pytest.fixture()
def x_nchw() -> np.ndarray:
    return np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)


def test_shape_round_trip_and_other_ranks():
    assert L.nhwc_to_nchw_shape((1, 28, 27, 16)) == (1, 16, 28, 27)
    assert L.nchw_to_nhwc_shape((1, 16, 28, 27)) == (1, 28, 27, 16)
    for shape in [(1, 10), (2, 3, 4), (1, 2, 3, 4, 5), ()]:
        assert L.nhwc_to_nchw_shape(shape) == shape
        assert L.nchw_to_nhwc_shape(shape) == shape


def test_shape_matches_numpy_transpose(x_nchw):
    x_nhwc = x_nchw.transpose(L.NCHW_TO_NHWC)
    assert L.nchw_to_nhwc_shape(x_nchw.shape) == x_nhwc.shape
    assert L.nhwc_to_nchw_shape(x_nhwc.shape) == x_nchw.shape
    assert np.array_equal(x_nhwc.transpose(L.NHWC_TO_NCHW), x_nchw)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -4])
def test_axis_conversion_matches_numpy(x_nchw, axis):
    x_nhwc = x_nchw.transpose(L.NCHW_TO_NHWC)
    a_nhwc = L.nchw_to_nhwc_axis(axis, 4)
    assert x_nhwc.shape[a_nhwc] == x_nchw.shape[axis]
    assert L.nhwc_to_nchw_axis(a_nhwc, 4) == axis % 4
    # Summing over the converted axis gives the same tensor, up to layout.
    s_nchw = x_nchw.sum(axis=axis, keepdims=True)
    s_nhwc = x_nhwc.sum(axis=a_nhwc, keepdims=True)
    assert np.array_equal(s_nhwc.transpose(L.NHWC_TO_NCHW), s_nchw)


def test_axis_out_of_range_says_what_is_allowed():
    with pytest.raises(ValueError, match="allowed: -4..3"):
        L.nhwc_to_nchw_axis(4, 4)


def test_mean_over_hw_is_axes_2_3():
    assert L.nhwc_to_nchw_axes((1, 2), 4) == (2, 3)
    assert L.nchw_to_nhwc_axes((2, 3), 4) == (1, 2)
    assert L.nhwc_to_nchw_axes((1,), 3) == (1,)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_perm_conversion_matches_numpy(x_nchw, perm):
    x_nhwc = x_nchw.transpose(L.NCHW_TO_NHWC)
    # The NHWC-held model transposes by `perm`; its canonical reading is nhwc_to_nchw_perm.
    y_nhwc = x_nhwc.transpose(perm)
    y_canon = y_nhwc.transpose(L.NHWC_TO_NCHW)
    assert np.array_equal(x_nchw.transpose(L.nhwc_to_nchw_perm(perm)), y_canon)
    # And back: a canonical transpose exported to NHWC.
    y2_nchw = x_nchw.transpose(perm)
    y2_nhwc = x_nhwc.transpose(L.nchw_to_nhwc_perm(perm))
    assert np.array_equal(y2_nhwc.transpose(L.NHWC_TO_NCHW), y2_nchw)
    assert L.nhwc_to_nchw_perm(L.nchw_to_nhwc_perm(perm)) == perm


def test_compose_perms(x_nchw):
    a, b = (0, 2, 3, 1), (3, 1, 0, 2)
    assert np.array_equal(x_nchw.transpose(a).transpose(b),
                          x_nchw.transpose(L.compose_perms(a, b)))


def test_pads_round_trip_matches_numpy_pad(x_nchw):
    pads = (0, 0, 1, 2, 0, 0, 3, 4)  # N, C, H, W begins then ends
    tf_pads = L.nchw_to_nhwc_pads(pads)
    assert tf_pads == [[0, 0], [1, 3], [2, 4], [0, 0]]
    assert L.nhwc_to_nchw_pads(tf_pads) == pads
    x_nhwc = x_nchw.transpose(L.NCHW_TO_NHWC)
    ref = np.pad(x_nchw, [(pads[i], pads[i + 4]) for i in range(4)])
    got = np.pad(x_nhwc, tf_pads).transpose(L.NHWC_TO_NCHW)
    assert np.array_equal(got, ref)
    with pytest.raises(ValueError, match="begin and an end"):
        L.nchw_to_nhwc_pads((1, 2, 3))


def test_broadcast_constant_shapes(x_nchw):
    x_nhwc = x_nchw.transpose(L.NCHW_TO_NHWC).astype(float)
    c = np.arange(3.0)                          # per-channel vector, as TF holds it
    canon = L.broadcast_shape_nchw(c.shape, 4)
    assert canon == (1, 3, 1, 1)
    ref = (x_nhwc + c).transpose(L.NHWC_TO_NCHW)
    assert np.array_equal(x_nchw + c.reshape(canon), ref)
    assert L.broadcast_shape_nhwc((3, 1, 1), 4) == (1, 1, 1, 3)
    assert L.broadcast_shape_nchw((), 4) == ()
    assert L.broadcast_shape_nchw((5,), 2) == (5,)
