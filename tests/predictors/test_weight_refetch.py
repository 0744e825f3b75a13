"""Weight refetch: streaming kernels take the floor, re-reading kernels add the fetch."""

from __future__ import annotations

import numpy as np
import pytest

from nnmeter.predictors.weight_refetch import STREAMING_FAMILIES, refetch_many_ms, refetch_ms

LLC = 32e6


def test_a_convolution_measured_hot_adds_its_fetch():
    assert refetch_ms(1.0, 0.25, kernel_bytes=2e6, llc_bytes=LLC, streams=False) == 1.25


def test_a_streaming_kernel_takes_the_larger_of_hot_and_stream():
    assert refetch_ms(0.1, 0.25, kernel_bytes=2e6, llc_bytes=LLC, streams=True) == 0.25
    assert refetch_ms(0.4, 0.25, kernel_bytes=2e6, llc_bytes=LLC, streams=True) == 0.4


def test_a_kernel_measured_cold_gets_only_the_floor():
    # its single-kernel model overflowed the cache: the fetch is already in its time
    assert refetch_ms(3.0, 0.25, kernel_bytes=64e6, llc_bytes=LLC, streams=False) == 3.0
    assert refetch_ms(0.1, 0.25, kernel_bytes=64e6, llc_bytes=LLC, streams=False) == 0.25


def test_kernels_without_weights_are_unchanged():
    hot = np.array([0.3, 0.02])
    out = refetch_many_ms(hot, np.zeros(2), kernel_bytes=np.array([1e5, 1e5]),
                          llc_bytes=LLC, streams=np.array([False, True]))
    np.testing.assert_array_equal(out, hot)


def test_arrays_match_one_by_one():
    hot = np.array([1.0, 0.1, 3.0])
    stream = np.array([0.25, 0.25, 0.25])
    kbytes = np.array([2e6, 2e6, 64e6])
    flags = np.array([False, True, False])
    many = refetch_many_ms(hot, stream, kernel_bytes=kbytes, llc_bytes=LLC, streams=flags)
    one = [refetch_ms(h, s, kernel_bytes=b, llc_bytes=LLC, streams=f)
           for h, s, b, f in zip(hot, stream, kbytes, flags)]
    np.testing.assert_allclose(many, one)


def test_negative_inputs_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        refetch_ms(-1.0, 0.25, kernel_bytes=1e6, llc_bytes=LLC, streams=False)


def test_fc_is_the_streaming_family():
    assert "fc" in STREAMING_FAMILIES and "conv" not in STREAMING_FAMILIES


def test_a_fully_connected_layer_over_many_rows_pays_its_fetch_on_top():
    """A batch-1 fc streams (only the floor); with ``gemm_refetch`` an fc over many rows
    is a matrix product whose fetch adds to its hot time, whatever the device's refetch
    flag; other kernels follow the flag. The term turns it on for ort-cpu only."""
    from nnmeter.predictors.terms.refetch import GEMM_REFETCH_BACKENDS, _streams

    def row(family, feats):
        return ((), (), feats, 1e6, family, 1)

    for flag in (False, True):
        assert _streams(row("fc", [512.0, 1000.0, 1.0]), flag, True)
        assert not _streams(row("fc", [384.0, 1536.0, 37.0]), flag, True)
        assert _streams(row("fc", [384.0, 1536.0, 37.0]), flag, False)
    assert _streams(row("conv", [56.0, 56.0, 64.0]), False, True)
    assert not _streams(row("conv", [56.0, 56.0, 64.0]), True, True)
    assert GEMM_REFETCH_BACKENDS == {"ort"}


def test_a_share_of_the_fetch_is_added_to_kernels_that_pay_it_on_top():
    hot, stream = np.array([1.0, 1.0, 0.1]), np.array([0.5, 0.5, 0.5])
    kbytes = np.array([1e6, 1e6, 1e6])
    out = refetch_many_ms(hot, stream, kernel_bytes=kbytes, llc_bytes=32e6,
                          streams=np.array([False, False, True]),
                          fetched=np.array([0.4, 1.0, 0.4]))
    # on top: 1 + 0.4 * 0.5 and 1 + 0.5; a streaming kernel keeps its floor
    assert out.tolist() == pytest.approx([1.2, 1.5, 0.5])
