"""Figures with matplotlib (the Agg backend: files, no screen).

- :func:`kernel_type_bars` — one model's predicted time per kernel type, with the
  interval of each type's rows when the report has intervals (``nnmeter predict --plot``);
- :func:`predicted_vs_measured` — predicted against measured per family, log axes, the
  ±10 % band (``experiments/intervals.py report --plot``);
- :func:`method_panels` — one predicted-against-measured panel per method on one set
  (``experiments/gcn_paper_check.py``);
- :func:`accuracy_curve` — model-level accuracy against the measurements each
  predictor of a device was built from (``experiments/benchmark.py``);
- :func:`sampling_curves` — the adaptive sampler's cross-validated ±10 % accuracy per
  round, per kernel type, from a dataset's ``rounds.jsonl``
  (``nnmeter build`` records it; ``experiments/intervals.py`` has no part in it).

Each function writes ``path`` (the format from its suffix: .png, .svg, .pdf) and returns
it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Mapping

__all__ = ["kernel_type_bars", "predicted_vs_measured", "sampling_curves", "sampling_points",
           "family_bars", "method_panels", "accuracy_curve"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    _plt().close(fig)
    return path


def kernel_type_bars(report: Any, path: str | os.PathLike, *, top: int = 15) -> Path:
    """Horizontal bars of a :class:`~nnmeter.predictors.LatencyReport`'s time per kernel
    type (the ``top`` largest; the rest as one bar), and the composition terms as one."""
    plt = _plt()
    by = sorted(report.by_type().items(), key=lambda kv: -kv[1][1])
    bands: dict[str, list[float]] = {}
    for r in report.rows:
        if r.interval_ms:
            lo, hi = bands.setdefault(r.type, [0.0, 0.0])
            bands[r.type] = [lo + r.interval_ms[0], hi + r.interval_ms[1]]
    labels, ms, err = [], [], []
    for t, (n, t_ms) in by[:top]:
        labels.append(f"{t} ×{n}")
        ms.append(t_ms)
        b = bands.get(t)
        err.append((t_ms - b[0], b[1] - t_ms) if b else (0.0, 0.0))
    rest = sum(t_ms for _, (_, t_ms) in by[top:])
    if rest:
        labels.append(f"{len(by) - top} other types")
        ms.append(rest)
        err.append((0.0, 0.0))
    terms = sum(t.ms for t in report.terms)
    if terms:
        labels.append("composition terms")
        ms.append(terms)
        err.append((0.0, 0.0))
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(labels) + 1.6))
    y = range(len(labels))[::-1]
    ax.barh(list(y), ms, xerr=list(zip(*err)) if any(e != (0, 0) for e in err) else None,
            color="#4878a8", ecolor="#333333", capsize=2)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.set_xlabel("predicted ms")
    band = ""
    if report.interval_ms:
        band = (f", {100 * report.interval_level:.0f} % interval "
                f"{report.interval_ms[0]:.2f}–{report.interval_ms[1]:.2f} ms")
    ax.set_title(f"{report.model or 'model'} on {report.backend_id}"
                 f"{'@' + report.device_name if report.device_name else ''}: "
                 f"{report.total_ms:.2f} ms{band}", fontsize=9)
    return _save(fig, path)


def predicted_vs_measured(predicted: Sequence[float], measured: Sequence[float],
                          families: Sequence[str], path: str | os.PathLike, *,
                          title: str = "") -> Path:
    """Scatter of predicted against measured ms per family on log axes, with y = x and
    the ±10 % band."""
    import numpy as np

    plt = _plt()
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    fams = np.asarray(families)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo, hi = float(min(p.min(), m.min())) * 0.8, float(max(p.max(), m.max())) * 1.25
    x = np.geomspace(lo, hi, 50)
    ax.fill_between(x, x * 0.9, x * 1.1, color="#cccccc", alpha=0.6, label="±10 %")
    ax.plot(x, x, color="#555555", lw=0.8)
    cmap = plt.get_cmap("tab20")
    for i, f in enumerate(sorted(set(fams))):
        sel = fams == f
        ax.scatter(m[sel], p[sel], s=14, color=cmap(i % 20), label=f)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured ms")
    ax.set_ylabel("predicted ms")
    within = float(np.mean(np.abs(p / m - 1) <= 0.10))
    ax.set_title(f"{title + ': ' if title else ''}{100 * within:.1f} % within ±10 % "
                 f"(n={len(p)})", fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    return _save(fig, path)


def sampling_points(rounds: Sequence[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """kernel type -> [(rows measured, cross-validated ±10 % share)] of the rounds that
    report both, in the log's order (a dataset's ``rounds.jsonl`` rows)."""
    by: dict[str, list[tuple[int, float]]] = {}
    for r in rounds:
        if r.get("cv_acc10") is None or r.get("n_measured_total") is None:
            continue
        by.setdefault(r["kernel_type"], []).append((int(r["n_measured_total"]),
                                                    float(r["cv_acc10"])))
    return by


def sampling_curves(rounds: Sequence[dict[str, Any]], path: str | os.PathLike, *,
                    top: int = 12) -> Path:
    """Cross-validated ±10 % accuracy after each sampling round, per kernel type (the
    ``top`` types with the most rounds), against the rows measured so far."""
    plt = _plt()
    by = sampling_points(rounds)
    if not by:
        raise ValueError("no sampling rounds with cv_acc10 to plot")
    types = sorted(by, key=lambda t: -len(by[t]))[:top]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in sorted(types):
        pts = sorted(by[t])
        ax.plot([a for a, _ in pts], [100 * b for _, b in pts], marker="o", ms=3, lw=1,
                label=t)
    ax.set_xlabel("rows measured")
    ax.set_ylabel("cross-validated ±10 % accuracy (%)")
    ax.set_ylim(0, 101)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("adaptive sampling: accuracy per round", fontsize=9)
    return _save(fig, path)


def family_bars(scores: Mapping[str, Mapping[str, float]], path: str | os.PathLike, *,
                title: str = "", ylabel: str = "within ±10 % (%)") -> Path:
    """Grouped bars: per family (the outer keys), one bar per method (the inner keys,
    e.g. nnmeter and each baseline), values as fractions in [0, 1]; a missing or NaN
    value draws no bar."""
    import math

    import numpy as np

    plt = _plt()
    fams = list(scores)
    if not fams:
        raise ValueError("no families to plot")
    methods = list(dict.fromkeys(m for f in fams for m in scores[f]))
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(fams) + 2), 4.2))
    x = np.arange(len(fams))
    cmap = plt.get_cmap("tab10")
    for i, m in enumerate(methods):
        vals = [scores[f].get(m, math.nan) for f in fams]
        ax.bar(x + (i - (len(methods) - 1) / 2) * width,
               [100 * v if v is not None and math.isfinite(v) else 0.0 for v in vals],
               width, label=m, color=cmap(i % 10))
    ax.set_xticks(x)
    ax.set_xticklabels(fams, rotation=35, ha="right", fontsize=8)
    ax.set_ylim(0, 125)  # the legend sits above the 100 % line
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=min(len(methods), 6), loc="upper center")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def method_panels(measured: Sequence[float], predictions: Mapping[str, Sequence[float]],
                  path: str | os.PathLike, *, title: str = "") -> Path:
    """One panel per method: its predicted against the same measured ms, log axes, y = x
    and the ±10 % band; each panel's title gives its share within ±10 % and Spearman."""
    import numpy as np
    from matplotlib.ticker import NullFormatter
    from scipy.stats import spearmanr

    plt = _plt()
    if not predictions:
        raise ValueError("no predictions to plot")
    m = np.asarray(measured, float)
    k = len(predictions)
    fig, axes = plt.subplots(1, k, figsize=(3.6 * k, 3.8), squeeze=False)
    allp = np.concatenate([np.asarray(p, float) for p in predictions.values()])
    lo = float(min(allp.min(), m.min())) * 0.8
    hi = float(max(allp.max(), m.max())) * 1.25
    x = np.geomspace(lo, hi, 50)
    for ax, (label, p) in zip(axes[0], predictions.items()):
        p = np.asarray(p, float)
        if p.shape != m.shape:
            raise ValueError(f"{label}: {p.size} predictions for {m.size} measurements")
        ax.fill_between(x, x * 0.9, x * 1.1, color="#cccccc", alpha=0.6)
        ax.plot(x, x, color="#555555", lw=0.8)
        ax.scatter(m, p, s=6, alpha=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        # a narrow log range labels its minor ticks too, and they overprint
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("measured ms")
        within = float(np.mean(np.abs(p / m - 1) <= 0.10))
        rho = float(spearmanr(p, m).statistic)
        ax.set_title(f"{label}\n{100 * within:.1f} % within ±10 %, Spearman {rho:.3f}",
                     fontsize=8)
    axes[0][0].set_ylabel("predicted ms")
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def accuracy_curve(points: Mapping[str, Sequence[tuple[float, float, str]]],
                   path: str | os.PathLike, *, title: str = "",
                   ylabel: str = "within ±10 % (%)") -> Path:
    """Model-level accuracy against the kernel measurements a predictor was built from
    (log x): per series (e.g. a test set), points ``(measurements, fraction, label)``,
    each point labelled (e.g. the predictor's name)."""
    plt = _plt()
    if not points:
        raise ValueError("no points to plot")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for series, pts in points.items():
        pts = sorted(pts)
        ax.plot([a for a, _, _ in pts], [100 * b for _, b, _ in pts], marker="o", lw=1,
                label=series)
        for a, b, lab in pts:
            ax.annotate(lab, (a, 100 * b), fontsize=6, xytext=(3, -9),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("kernel measurements in the predictor's dataset")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 101)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return _save(fig, path)
