"""Checks that name the cause of a preprocessing difference.

Each check takes the reference model input, applies one known mistake to it (swap
RGB/BGR, read an NCHW buffer as NHWC, rotate, resize with another method, rescale the
value range) and asks whether that explains the deployed model input. A check explains
the difference when, after the transform and the best affine fit ``a*x + b``, the
residual is about zero (normalised RMSE below ``explain_tol``) while the plain
difference was not. All tensors here are in the canonical NCHW layout.

Examples
--------
>>> import numpy as np
>>> ref = smooth_images(1, 16, 16, seed=0).transpose(0, 3, 1, 2) / 255.0
>>> dep = ref[:, ::-1]                     # a BGR bug
>>> check_inputs(dep, ref).cause.kind
'channel_order'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CheckResult", "InputCheck", "check_inputs", "resize_nearest", "resize_bilinear",
           "smooth_images", "describe_range", "affine_fit"]

EXPLAIN_TOL = 0.01   # residual nRMSE under which a transform "explains" a difference
SAME_TOL = 1e-3      # plain nRMSE under which two inputs count as the same


def smooth_images(n: int, h: int, w: int, *, channels: int = 3, seed: int = 0) -> np.ndarray:
    """``n`` smooth random uint8 images, shape (n, h, w, channels).

    Low-resolution noise upsampled bilinearly plus a gradient: realistic enough that a
    resize method, a rotation or a channel swap changes the pixels visibly.
    """
    rng = np.random.default_rng(seed)
    out = np.empty((n, h, w, channels), np.float64)
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    for i in range(n):
        coarse = rng.uniform(0, 1, (channels, max(2, h // 6), max(2, w // 6)))
        img = resize_bilinear(coarse, (h, w))
        grad = rng.uniform(-0.3, 0.3, (channels, 1, 1)) * (yy + xx)[None]
        img = img + grad + rng.uniform(-0.2, 0.2, (channels, 1, 1))
        lo, hi = img.min(), img.max()
        out[i] = np.transpose((img - lo) / max(hi - lo, 1e-9), (1, 2, 0))
    return np.round(out * 255).astype(np.uint8)


def _src_index(out_size: int, in_size: int) -> np.ndarray:
    # half-pixel centres, as in TF2 / OpenCV / ONNX Resize "half_pixel"
    return (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5


def resize_nearest(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of the last two axes of ``x`` to ``size`` = (H, W)."""
    h, w = x.shape[-2:]
    ys = np.clip(np.floor(_src_index(size[0], h) + 0.5), 0, h - 1).astype(int)
    xs = np.clip(np.floor(_src_index(size[1], w) + 0.5), 0, w - 1).astype(int)
    return x[..., ys[:, None], xs[None, :]]


def resize_bilinear(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize (half-pixel centres) of the last two axes of ``x`` to ``size``."""
    x = np.asarray(x, np.float64)
    h, w = x.shape[-2:]

    def weights(out: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = np.clip(_src_index(out, n), 0, n - 1)
        lo = np.floor(s).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        return lo, hi, s - lo

    y0, y1, fy = weights(size[0], h)
    x0, x1, fx = weights(size[1], w)
    top = x[..., y0, :] * (1 - fy)[:, None] + x[..., y1, :] * fy[:, None]
    return top[..., x0] * (1 - fx) + top[..., x1] * fx


def _nrmse(a: np.ndarray, ref: np.ndarray) -> float:
    span = float(ref.max() - ref.min()) if ref.size else 0.0
    rmse = float(np.sqrt(np.mean((a.astype(np.float64) - ref) ** 2))) if ref.size else 0.0
    return rmse / span if span > 0 else rmse


def affine_fit(x: np.ndarray, y: np.ndarray, *, per_channel: bool = False
               ) -> tuple[np.ndarray, np.ndarray, float]:
    """Least-squares ``y ≈ a*x + b`` (globally or per channel, axis 1).

    Returns ``(a, b, residual nRMSE relative to y's range)``.
    """
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    groups = range(x.shape[1]) if per_channel and x.ndim >= 2 else [None]
    a_s, b_s, fitted = [], [], np.empty_like(y)
    for c in groups:
        xs = x if c is None else x[:, c]
        ys = y if c is None else y[:, c]
        xv, yv = xs.ravel(), ys.ravel()
        var = float(np.var(xv))
        a = float(np.cov(xv, yv, bias=True)[0, 1] / var) if var > 0 else 0.0
        b = float(yv.mean() - a * xv.mean())
        a_s.append(a)
        b_s.append(b)
        if c is None:
            fitted = a * x + b
        else:
            fitted[:, c] = a * xs + b
    return np.array(a_s), np.array(b_s), _nrmse(fitted, y)


def describe_range(x: np.ndarray) -> str:
    """Name the value range of an input: '[0,1]', '[-1,1]', '[0,255]' or 'lo..hi'."""
    lo, hi = float(np.min(x)), float(np.max(x))
    for name, (a, b) in {"[0,1]": (0, 1), "[-1,1]": (-1, 1), "[0,255]": (0, 255)}.items():
        span = b - a
        if lo >= a - 0.02 * span and hi <= b + 0.02 * span and hi - lo > 0.5 * span:
            return name
    return f"{lo:.3g}..{hi:.3g}"


@dataclass(frozen=True)
class CheckResult:
    """One candidate explanation and how well it fits.

    ``residual`` is the nRMSE between the deployed input and the transformed reference
    input after the best affine fit; ``scale``/``offset`` is that fit.
    """

    kind: str
    name: str
    residual: float
    scale: tuple[float, ...] = (1.0,)
    offset: tuple[float, ...] = (0.0,)
    detail: str = ""

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "residual": self.residual,
                "scale": list(self.scale), "offset": list(self.offset), "detail": self.detail}


@dataclass(frozen=True)
class InputCheck:
    """Outcome of comparing a deployed model input with the reference input.

    ``cause`` is the check that explains the difference, None when the inputs agree
    (``same``) or when no check explains it.
    """

    same: bool
    plain_nrmse: float
    cause: CheckResult | None
    candidates: tuple[CheckResult, ...] = field(default=())
    step: str = "input"

    def as_dict(self) -> dict:
        return {"same": self.same, "plain_nrmse": self.plain_nrmse, "step": self.step,
                "cause": self.cause.as_dict() if self.cause else None,
                "candidates": [c.as_dict() for c in self.candidates]}


def _layout_nchw_read_as_nhwc(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x).reshape(n, h, w, c).transpose(0, 3, 1, 2)


def _layout_nhwc_read_as_nchw(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).reshape(n, c, h, w)


def _geometric_candidates(ref: np.ndarray) -> list[tuple[str, str, Callable]]:
    cands: list[tuple[str, str, Callable]] = []
    if ref.ndim != 4:
        return cands
    n, c, h, w = ref.shape
    if c > 1:
        cands.append(("channel_order", "RGB<->BGR channel order swapped", lambda x: x[:, ::-1]))
    if c != h or h != w:
        cands.append(("layout", "NCHW data read as NHWC (reshape instead of transpose)",
                      _layout_nchw_read_as_nhwc))
        cands.append(("layout", "NHWC data read as NCHW (reshape instead of transpose)",
                      _layout_nhwc_read_as_nchw))
    for k in (1, 2, 3):
        if k == 2 or h == w:
            cands.append(("rotation", f"image rotated by {90 * k} degrees",
                          lambda x, k=k: np.rot90(x, k, axes=(2, 3))))
    return cands


def _normalisation_text(dep: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    return (f"value range differs: deployed {describe_range(dep)} vs reference "
            f"{describe_range(ref)} (deployed ≈ {_fmt(a)}·ref + {_fmt(b)})")


def _fmt(v: np.ndarray) -> str:
    v = np.atleast_1d(v)
    if np.allclose(v, v[0], rtol=1e-3, atol=1e-6):
        return f"{v[0]:.4g}"
    return "[" + ", ".join(f"{x:.3g}" for x in v) + "]"


def _is_identity(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> bool:
    span = float(ref.max() - ref.min()) or 1.0
    return bool(np.allclose(a, 1.0, atol=0.02) and np.allclose(b, 0.0, atol=0.02 * span))


def check_inputs(deployed: np.ndarray, reference: np.ndarray, *,
                 raw: np.ndarray | None = None, step: str = "input",
                 explain_tol: float = EXPLAIN_TOL) -> InputCheck:
    """Compare a deployed model input with the reference input and name the cause.

    Parameters
    ----------
    deployed, reference : ndarray
        The two inputs in canonical layout (NCHW for images), same shape, float.
    raw : ndarray, optional
        The raw input both were made from, canonical (N, C, H, W) with larger H, W:
        enables the resize-method check.
    explain_tol : float
        Residual nRMSE under which a transform explains the difference.

    Returns
    -------
    InputCheck
    """
    dep = np.asarray(deployed, np.float64)
    ref = np.asarray(reference, np.float64)
    plain = _nrmse(dep, ref)
    if dep.shape != ref.shape:
        return InputCheck(False, float("nan"), None, (), step)
    if plain < SAME_TOL:
        return InputCheck(True, plain, None, (), step)
    results: list[CheckResult] = []
    a, b, res = affine_fit(ref, dep)
    pa, pb, pres = affine_fit(ref, dep, per_channel=True)
    if pres < res - explain_tol:
        a, b, res = pa, pb, pres
    if not _is_identity(a, b, ref):
        results.append(CheckResult("normalization", _normalisation_text(dep, ref, a, b), res,
                                   tuple(a), tuple(b)))
    for kind, name, fn in _geometric_candidates(ref):
        t = fn(ref)
        if t.shape != dep.shape:
            continue
        a, b, res = affine_fit(t, dep)
        detail = "" if _is_identity(a, b, ref) else _normalisation_text(dep, ref, a, b)
        results.append(CheckResult(kind, name, res, tuple(a), tuple(b), detail))
    if raw is not None and raw.ndim == ref.ndim and raw.shape[:2] == ref.shape[:2] \
            and raw.shape[2:] != ref.shape[2:]:
        resized = {m: f(np.asarray(raw, np.float64), ref.shape[2:])
                   for m, f in (("nearest", resize_nearest), ("bilinear", resize_bilinear))}
        fit_dep = {m: affine_fit(v, dep) for m, v in resized.items()}
        fit_ref = {m: affine_fit(v, ref)[2] for m, v in resized.items()}
        m_dep = min(fit_dep, key=lambda m: fit_dep[m][2])
        m_ref = min(fit_ref, key=fit_ref.get)
        if m_dep != m_ref:
            a, b, res = fit_dep[m_dep]
            results.append(CheckResult(
                "resize_method", f"resize method differs: deployed {m_dep}, reference {m_ref}",
                max(res, fit_ref[m_ref]), tuple(a), tuple(b)))
    results.sort(key=lambda r: r.residual)
    cause = None
    if results and results[0].residual < explain_tol and results[0].residual < 0.2 * plain:
        cause = results[0]
    return InputCheck(False, plain, cause, tuple(results), step)
