"""Weight refetch: what a kernel's weights add inside a model that overflows the cache.

A single-kernel measurement times a kernel with its weights hot in the cache. In a
model whose kernels move more bytes per inference than the last-level cache holds,
every kernel's weights come from DRAM once per inference
(:mod:`nnmeter.predictors.weight_stream` measures the streaming rate). How that read
shows up depends on the kernel:

- a batch-1 fully connected layer is a matrix-vector product that reads each weight
  once: it streams, so its time is the larger of its hot time and the streaming time
  (the floor of :func:`~nnmeter.predictors.weight_stream.stream_floor_ms`);
- a fully connected layer over many rows (a transformer's projections) is a matrix
  product that uses each weight once per row: like a convolution, its fetch adds to its
  hot time where that was chosen
  (:data:`nnmeter.predictors.terms.refetch.GEMM_REFETCH_BACKENDS`; on ort-cpu on a Zen 5 a 384 -> 1536 projection over 37 tokens took 0.194 ms alone and
  0.35 ms inside an 85-MB ViT, and the additive fetch took the transformer design set
  from 75 to 85 % within ±10 %, the CNNs unchanged);
- a convolution re-reads its weights for every tile of output pixels; the first read
  misses to DRAM and the rest hit, so the fetch adds to the hot time instead of
  hiding under it;
- a kernel whose own bytes overflow the last-level cache was already measured with
  its weights cold, so nothing is added beyond the floor.

Measured on litert-cpu (XNNPACK, 1 thread; ``experiments/kernel_sum_check_litert.py``):
inverted-residual models took 6-11 % longer than the sum of their kernels measured
alone, the extra time sat in the late, weight-heavy blocks (prefix cuts: early blocks
0.99-1.04 of their kernels' sum, late blocks 1.1-1.5), and it came to roughly the
models' weight bytes over the streaming rate.

Examples
--------
>>> refetch_ms(1.0, 0.25, kernel_bytes=1e6, llc_bytes=32e6, streams=False)
1.25
>>> refetch_ms(0.1, 0.25, kernel_bytes=1e6, llc_bytes=32e6, streams=True)
0.25
>>> refetch_ms(3.0, 0.25, kernel_bytes=64e6, llc_bytes=32e6, streams=False)
3.0
"""

from __future__ import annotations

import numpy as np

__all__ = ["STREAMING_FAMILIES", "matrix_product", "refetch_ms", "refetch_many_ms"]

#: kernel families whose work is one pass over their weights (matrix-vector at batch 1)
STREAMING_FAMILIES = frozenset({"fc"})


def matrix_product(family: str, rows: float | None) -> bool:
    """Whether a kernel of ``family`` over ``rows`` vectors is a matrix product that uses
    each weight once per row (a transformer's projection) rather than a matrix-vector
    product that reads each weight once (a batch-1 classifier).

    >>> matrix_product("fc", 197), matrix_product("fc", 1), matrix_product("conv", 197)
    (True, False, False)
    """
    return family in STREAMING_FAMILIES and rows is not None and rows > 1


def refetch_ms(hot_ms: float, stream_ms: float, *, kernel_bytes: float, llc_bytes: float,
               streams: bool) -> float:
    """A kernel's time inside a model that overflows the last-level cache, in ms.

    Parameters
    ----------
    hot_ms : float
        The kernel's time with hot weights (its regressor's estimate).
    stream_ms : float
        Time to stream its weights once from DRAM (``stream_floor_ms``; 0 without
        weights or without a measured rate).
    kernel_bytes : float
        Bytes the single-kernel model moves (inputs, weights, outputs).
    llc_bytes : float
        Last-level cache size in bytes.
    streams : bool
        True for kernels that read each weight once (see :data:`STREAMING_FAMILIES`).

    Raises
    ------
    ValueError
        If a time or size is negative.
    """
    return float(refetch_many_ms(np.array([hot_ms], float), np.array([stream_ms], float),
                                 kernel_bytes=np.array([kernel_bytes], float),
                                 llc_bytes=llc_bytes, streams=np.array([streams]))[0])


def refetch_many_ms(hot_ms: np.ndarray, stream_ms: np.ndarray, *, kernel_bytes: np.ndarray,
                    llc_bytes: float, streams: np.ndarray,
                    fetched: np.ndarray | float = 1.0) -> np.ndarray:
    """:func:`refetch_ms` over arrays of kernels (one element per kernel).

    ``fetched`` (per kernel, or one for all) is the share of the fetch that a kernel
    paying it on top of its hot time really adds: 1 for a convolution; a device's
    fitted share for a matrix product, whose weight fetch the runtime partly overlaps
    with its arithmetic (:func:`nnmeter.predictors.terms.in_model.fit_gemm_fetch`).
    """
    hot = np.asarray(hot_ms, float)
    stream = np.asarray(stream_ms, float)
    kbytes = np.asarray(kernel_bytes, float)
    flags = np.asarray(streams, bool)
    if (hot < 0).any() or (stream < 0).any() or (kbytes < 0).any() or llc_bytes < 0:
        raise ValueError(
            f"refetch needs non-negative times and sizes; got hot_ms min {hot.min()}, "
            f"stream_ms min {stream.min()}, kernel_bytes min {kbytes.min()}, "
            f"llc_bytes {llc_bytes}")
    floor = np.maximum(hot, stream)
    # measured hot (fits the cache) and re-reads its weights: the DRAM fetch adds
    added = hot + np.asarray(fetched, float) * stream
    return np.where(flags | (kbytes > llc_bytes), floor, added)
