"""Per-layer error metrics between aligned tensors, and the first layer where error jumps.

Metrics (all over every recorded sample together):

- ``nrmse``: RMSE divided by the reference's value range (max − min), the ML-EXray metric;
- ``cosine``: cosine similarity of the flattened tensors;
- ``max_abs``: largest absolute difference;
- ``rmse_scales`` / ``max_abs_scales``: the same errors in units of the deployed tensor's
  quantization scale, for int8 tensors (their values were dequantized when recorded);
- ``saturated``: share of the deployed int8 values at the type's limits.

The *first divergent layer* is the first layer (in deployed topological order) whose
nRMSE exceeds a threshold **and** is more than ``k`` times the largest nRMSE of the layers
feeding it: that layer added the error itself rather than passing it on.

Examples
--------
>>> import numpy as np
>>> m = tensor_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
>>> round(m["nrmse"], 4), m["max_abs"]
(0.1925, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.xray.align import Alignment
from nnmeter.xray.instrument import Layer

__all__ = ["LayerDiff", "tensor_metrics", "diff_layers", "first_divergence",
           "top1_agreement", "DEFAULT_THRESHOLD", "DEFAULT_QUANT_THRESHOLD", "DEFAULT_K"]

DEFAULT_THRESHOLD = 1e-3        # nRMSE for float deployed tensors
DEFAULT_QUANT_THRESHOLD = 0.05  # nRMSE for int8 deployed tensors (quantization noise)
DEFAULT_K = 3.0


@dataclass(frozen=True)
class LayerDiff:
    """Error of one aligned layer. ``deployed_quant`` is (scale, zero_point) or None."""

    deployed: str
    reference: str
    op: str
    source_op: str
    how: str
    shape: tuple[int, ...]
    nrmse: float
    cosine: float
    max_abs: float
    rmse: float
    ref_range: float
    deployed_quant: tuple[float, int] | None = None
    rmse_scales: float | None = None
    max_abs_scales: float | None = None
    saturated: float | None = None   # share of reference values outside the int8 grid
    input_nrmse: float = 0.0
    note: str = ""

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in self.__dict__.items()}


def tensor_metrics(deployed: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """nRMSE, cosine, max abs error, RMSE and reference range of two same-size arrays."""
    d = np.asarray(deployed, np.float64).ravel()
    r = np.asarray(reference, np.float64).ravel()
    diff = d - r
    rmse = float(np.sqrt(np.mean(diff ** 2))) if diff.size else 0.0
    span = float(r.max() - r.min()) if r.size else 0.0
    scale = span if span > 0 else max(float(np.abs(r).max()) if r.size else 0.0, 1.0)
    nd, nr = float(np.linalg.norm(d)), float(np.linalg.norm(r))
    cos = float(d @ r / (nd * nr)) if nd > 0 and nr > 0 else (1.0 if nd == nr else 0.0)
    return {"nrmse": rmse / scale, "cosine": cos,
            "max_abs": float(np.abs(diff).max()) if diff.size else 0.0,
            "rmse": rmse, "ref_range": span}


def _match_shape(d: np.ndarray, r: np.ndarray) -> tuple[np.ndarray | None, str]:
    if d.shape == r.shape:
        return d, ""
    if d.size == r.size and tuple(x for x in d.shape if x != 1) == \
            tuple(x for x in r.shape if x != 1):
        return d.reshape(r.shape), ""
    if d.ndim == 4 and r.ndim == 4:
        for perm, text in (((0, 2, 3, 1), "transposed NCHW->NHWC"),
                           ((0, 3, 1, 2), "transposed NHWC->NCHW")):
            if tuple(d.shape[p] for p in perm) == r.shape:
                return np.transpose(d, perm), text
    return None, f"shapes differ: deployed {d.shape} vs reference {r.shape}"


def diff_layers(alignment: Alignment, deployed_layers: dict[str, Layer],
                deployed_values: list[dict[str, np.ndarray]],
                reference_values: list[dict[str, np.ndarray]]) -> list[LayerDiff]:
    """Metrics for every aligned pair, over all samples, in deployed topological order."""
    out: list[LayerDiff] = []
    by_out = {p.deployed: p for p in alignment.pairs}
    main_of = {b.out: b.main for b in alignment.deployed_blocks.values()}
    for p in alignment.pairs:
        ds, rs, note = [], [], ""
        for dv, rv in zip(deployed_values, reference_values):
            if p.deployed not in dv or p.reference not in rv:
                continue
            d, note = _match_shape(dv[p.deployed], rv[p.reference])
            if d is None:
                break
            ds.append(d)
            rs.append(rv[p.reference])
        layer = deployed_layers[p.deployed]
        source_op = deployed_layers[main_of.get(p.deployed, p.deployed)].source_op
        if not ds or len(ds) != len(deployed_values):
            out.append(LayerDiff(p.deployed, p.reference, p.deployed_op, source_op, p.how,
                                 layer.shape, float("nan"), float("nan"), float("nan"),
                                 float("nan"), float("nan"), layer.quant,
                                 note=note or "values not recorded"))
            continue
        d = np.stack(ds)
        r = np.stack(rs)
        m = tensor_metrics(d, r)
        rmse_s = max_s = sat = None
        if layer.quant and layer.quant[0] > 0:
            scale, zp = layer.quant
            rmse_s = m["rmse"] / scale
            max_s = m["max_abs"] / scale
            info = np.iinfo(np.dtype(layer.dtype)) if np.issubdtype(
                np.dtype(layer.dtype), np.integer) else np.iinfo(np.int8)
            lo, hi = (info.min - zp) * scale, (info.max - zp) * scale
            # values the int8 grid cannot hold: the reference lies outside [lo, hi]
            sat = float(np.mean((r > hi + scale / 2) | (r < lo - scale / 2)))
        out.append(LayerDiff(p.deployed, p.reference, p.deployed_op, source_op, p.how,
                             layer.shape, m["nrmse"], m["cosine"], m["max_abs"], m["rmse"],
                             m["ref_range"], layer.quant, rmse_s, max_s, sat, note=note))
    # input error: the largest error among the aligned layers feeding each block
    err = {x.deployed: x.nrmse for x in out}
    blocks = alignment.deployed_blocks
    out_of = {b.id: b.out for b in blocks.values()}

    def feeding_error(block_id: str, seen: set[str]) -> float:
        worst = 0.0
        for i in blocks[block_id].inputs:
            if i in seen:
                continue
            seen.add(i)
            o = out_of[i]
            if o in by_out and not np.isnan(err.get(o, np.nan)):
                worst = max(worst, err[o])
            else:
                worst = max(worst, feeding_error(i, seen))
        return worst

    block_by_out = {b.out: b.id for b in blocks.values()}
    final = []
    for x in out:
        bid = block_by_out.get(x.deployed)
        inp = feeding_error(bid, set()) if bid else 0.0
        final.append(LayerDiff(**{**x.__dict__, "input_nrmse": inp}))
    return final


def first_divergence(diffs: list[LayerDiff], *, threshold: float = DEFAULT_THRESHOLD,
                     quant_threshold: float = DEFAULT_QUANT_THRESHOLD,
                     k: float = DEFAULT_K) -> LayerDiff | None:
    """The first layer whose nRMSE exceeds the threshold and ``k`` times its inputs' error.

    Int8 layers use ``quant_threshold`` (quantization alone costs about 1 % nRMSE).
    Graph inputs count too: a diverging input means the preprocessing differs.
    """
    for x in diffs:
        if np.isnan(x.nrmse):
            continue
        thr = quant_threshold if x.deployed_quant else threshold
        if x.nrmse > thr and x.nrmse > k * x.input_nrmse:
            return x
    return None


def top1_agreement(deployed_outputs: list[np.ndarray],
                   reference_outputs: list[np.ndarray]) -> float | None:
    """Share of samples whose arg-max (over everything but the batch) agrees; None when
    the outputs cannot be compared (different sizes)."""
    if not deployed_outputs or len(deployed_outputs) != len(reference_outputs):
        return None
    agree = 0
    for d, r in zip(deployed_outputs, reference_outputs):
        d = np.asarray(d).reshape(len(d), -1) if np.ndim(d) > 1 else np.asarray(d)[None]
        r = np.asarray(r).reshape(len(r), -1) if np.ndim(r) > 1 else np.asarray(r)[None]
        if d.shape != r.shape:
            return None
        agree += int(np.all(d.argmax(-1) == r.argmax(-1)))
    return agree / len(deployed_outputs)


