"""Winograd weights: what a convolution's weights weigh once a runtime has transformed them.

MNN runs a stride-1 convolution with a square k x k kernel (k > 1) by Winograd
F(u, k): it transforms the weights once, at load, into ``alpha x alpha`` tiles
(``alpha = u + k - 1``) of ``cin x cout`` each, ``(alpha / k)^2`` times the weights'
own bytes (7.1x for F(6, 3)). A kernel measured alone keeps those tiles in the core's
cache; inside a model the tiles of all its convolutions are read once per inference,
and a few dozen such layers overflow the cache. Measured on the 2-vCPU AMD EPYC
(Zen 4, 1 MiB L2, 32 MiB L3; epyc-zen4-avx512-2c; mnn-cpu, one thread;
``experiments/winograd_check.py``): a 10x10, 64 -> 64 3x3 convolution (1.05 MB of
tiles for 0.15 MB of weights) took 43 us a layer alone and in chains of 4 and 16, and
139 us in a chain of 64 (67 MB of tiles); a 1x1 convolution with as many weight bytes
(192 -> 192) took 71 us alone and 69 us in a chain of 64. How many layers fit varies:
the L3 is shared with the host's other tenants, and an earlier run the same evening had
the chain of 16 at 137 us a layer already.

:func:`winograd_tile` follows MNN 3.x's own choice (``bestWinogradUnit``): the output
tile ``u`` from 2 up to ``sqrt(output pixels / threads)`` (at most 8) whose tile size
``alpha`` is 4, 6 or 8 and whose transform-and-multiply operations are fewest
against the direct convolution's; none where no tile is cheaper. The weight bytes it
gives matched the session memory MNN reports for single convolutions on the Zen 4
(10x10 256 -> 256 3x3: tile 8, 16.8 MB of 20.9; 20x20: tile 6, 9.4 of 12.5; 5x5:
tile 4, 4.2 of 5.3; the rest is its work buffers, shared between layers).

Examples
--------
>>> winograd_tile(10, 10, 256, 256, 3)
8
>>> winograd_tile(20, 20, 256, 256, 3), winograd_tile(5, 5, 256, 256, 3)
(6, 4)
>>> winograd_tile(10, 10, 256, 256, 3, stride=2) is None
True
>>> winograd_weight_bytes(10, 10, 64, 64, 3)
1048576.0
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["TILES", "MAX_UNIT", "winograd_tile", "winograd_weight_bytes", "kernel_weight_bytes"]

#: the transform tile sizes (``alpha``) MNN's float kernels have
TILES = (4, 6, 8)
#: the largest output tile MNN tries (``CONVOLUTION_WINOGRAD_MAX_UNIT``)
MAX_UNIT = 8
MIN_UNIT = 2


def winograd_tile(oh: int, ow: int, cin: int, cout: int, kernel: int, *, stride: int = 1,
                  groups: int = 1, kernel_w: int | None = None, threads: int = 1) -> int | None:
    """The transform tile ``alpha`` MNN picks for a convolution with an ``oh x ow``
    output, or None where it runs it without Winograd (a stride, groups, a 1x1 or
    non-square kernel, or no tile cheaper than the direct convolution)."""
    if (stride != 1 or groups != 1 or kernel <= 1 or (kernel_w not in (None, kernel))
            or min(oh, ow, cin, cout) < 1):
        return None
    max_unit = max(MIN_UNIT, min(MAX_UNIT, int(math.sqrt(math.ceil(oh * ow / threads)))))
    direct = float(ow * oh) * 2.0 * cin * cout * kernel * kernel
    best, rate = None, 0.0
    for u in range(MIN_UNIT, max_unit + 1):
        a = u + kernel - 1
        if a not in TILES:
            continue
        cost = ((2 * a) * a * a * cin + 2 * a * a * cin * cout + (a + u) * u * (2 * a) * cout) \
            * math.ceil(ow / u) * math.ceil(oh / u)
        if direct / cost > rate:
            best, rate = a, direct / cost
    return best if rate >= 1.0 else None


def winograd_weight_bytes(oh: int, ow: int, cin: int, cout: int, kernel: int,
                          **kw: Any) -> float | None:
    """Bytes of a convolution's float weights after MNN's Winograd transform
    (``alpha^2 * cin * cout * 4``), None where it runs without Winograd."""
    a = winograd_tile(oh, ow, cin, cout, kernel, **kw)
    return None if a is None else float(a * a * cin * cout * 4)


def kernel_weight_bytes(config: Any, *, threads: int = 1) -> tuple[float, float] | None:
    """(the weights' own bytes, their bytes after the Winograd transform) of a
    convolution kernel's config (``nnmeter.kernels.conv.ConvConfig``: ``h``, ``w``,
    ``cin``, ``cout``, ``kernel``, ``stride``...), None where it is not a Winograd
    convolution (its output size as :func:`nnmeter.kernels.base.conv_output_hw` gives
    it); ``threads``: those the runtime runs on."""
    try:
        h, w, cin, cout, k = (int(config.h), int(config.w), int(config.cin),
                              int(config.cout), int(config.kernel))
    except (AttributeError, TypeError, ValueError):
        return None
    from nnmeter.kernels.base import conv_output_hw

    stride = int(getattr(config, "stride", 1) or 1)
    groups = int(getattr(config, "groups", 1) or 1)
    kw = getattr(config, "kernel_w", None)
    out = conv_output_hw(h, w, (k, k if kw is None else int(kw)), stride,
                         getattr(config, "pads", None))
    if out is None:
        return None
    oh, ow = out
    expanded = winograd_weight_bytes(oh, ow, cin, cout, k, stride=stride, groups=groups,
                                     kernel_w=kw, threads=threads)
    return None if expanded is None else (float(cin * cout * k * k * 4), expanded)
