"""Sampling priors for kernel types that the zoo does not hold.

The builder's prior comes from zoo variants partitioned with the backend's rules
(:func:`nnmeter.builder.kernel_prior_from_zoo`). Two kinds of kernel that real models
from other code carry are not in the zoo: grouped convolutions (RegNet, ResNeXt,
ShuffleNet V1, Caffe's AlexNet; ``gconv-*`` types) and local response normalisation
(AlexNet, ZFNet, GoogLeNet as Caffe wrote them; ``lrn``), and gathers (DeBERTa's
relative positions, embedding lookups; ``gather``). Their configurations here are
a generic grid over the ranges CNNs use (resolution, channels tied to resolution as in
real networks, channels per group, kernel and stride), not taken from any one model;
the adaptive rounds then refine where the regressor errs.

Examples
--------
>>> cfgs = synthetic_prior_configs()
>>> sorted(cfgs)
['gather', 'gconv-bn', 'gconv-bn-relu', 'lrn']
>>> all(c["groups"] > 1 for c in cfgs["gconv-bn-relu"])
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["synthetic_prior_configs"]

#: input resolution -> the widest layer at it (channels grow as resolution falls)
_MAX_CHANNELS = {112: 128, 56: 256, 28: 512, 14: 1024, 7: 2048}
_CHANNELS = (24, 32, 48, 64, 96, 128, 192, 240, 256, 384, 448, 512, 768, 1024, 1536, 2048)
_PER_GROUP = (2, 4, 8, 16, 24, 32, 48, 64, 128)


def _grouped(kernel: int, ratios: tuple[float, ...]) -> list[dict[str, Any]]:
    out = []
    for h, widest in _MAX_CHANNELS.items():
        for c in _CHANNELS:
            if c > widest or c < 16:
                continue
            for cpg in _PER_GROUP:
                g = c // cpg
                if c % cpg or not 1 < g < c:
                    continue
                for stride in (1, 2) if kernel == 3 and h >= 14 else (1,):
                    for r in ratios:
                        cout_g = max(1, int(round(cpg * r)))
                        out.append({"h": h, "w": h, "groups": g, "cin_g": cpg,
                                    "cout_g": cout_g, "kernel": kernel, "stride": stride,
                                    "pads": None, "kernel_w": None})
    return out


def _lrn() -> list[dict[str, Any]]:
    out = []
    for h in (7, 13, 14, 27, 28, 55, 56, 112):
        for c in (16, 32, 48, 64, 96, 128, 192, 256, 384, 512):
            if c * h * h > 2_000_000:
                continue
            for size in (3, 5):
                out.append({"h": h, "w": h, "cin": c, "size": size})
    return out


#: data elements a sampled gather may hold (16 MiB of floats)
_GATHER_MAX = 4_000_000


def _gather() -> list[dict[str, Any]]:
    """Gathers as transformers write them: ``take_along_axis`` over attention-shaped
    tensors (DeBERTa's relative positions: each of heads x sequence rows picks its
    sequence's worth of 2k relative scores), row lookups in a table (embeddings), and
    shared picks along a last axis."""
    out = []
    for heads in (1, 2, 4, 6, 8, 12, 16):
        for seq in (32, 64, 128, 256, 384, 512):
            for span in (seq // 2, seq, 2 * seq, 4 * seq):
                if heads * seq * span <= _GATHER_MAX:
                    out.append({"outer": heads * seq, "axis_len": span, "n": seq, "inner": 1,
                                "shared": False})
    for rows in (512, 2048, 8192, 32000):
        for width in (64, 128, 256, 384, 512, 768, 1024):
            for n in (16, 64, 128, 256, 512):
                if rows * width <= _GATHER_MAX:
                    out.append({"outer": 1, "axis_len": rows, "n": n, "inner": width,
                                "shared": True})
    for outer in (1, 8, 64, 512):
        for span in (64, 256, 1024):
            for n in (1, 16, 64):
                if n <= span:
                    out.append({"outer": outer, "axis_len": span, "n": n, "inner": 1,
                                "shared": True})
    return out


def synthetic_prior_configs() -> dict[str, list[dict[str, Any]]]:
    """Kernel type -> configurations for the types the zoo lacks (see the module
    docstring); deterministic."""
    return {
        # a grouped 3x3 with its norm and activation (RegNet, ResNeXt, AlexNet)
        "gconv-bn-relu": _grouped(3, (1.0,)),
        # a grouped 1x1 without activation, widening or narrowing (ShuffleNet V1)
        "gconv-bn": _grouped(1, (0.25, 1.0, 4.0)),
        "lrn": _lrn(),
        # DeBERTa's relative-position gathers, embedding lookups
        "gather": _gather(),
    }
