"""The xray report: verdict, cause, first divergent layer, slow kernels; text, JSON, HTML.

The HTML report is one self-contained file: a per-layer error plot and a latency bar
chart drawn with matplotlib (Agg) and embedded as base64 PNG, plus the tables.
"""

from __future__ import annotations

import base64
import html
import io
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any

from nnmeter.xray.checks import InputCheck
from nnmeter.xray.diff import LayerDiff
from nnmeter.xray.latency import LatencyCheck

__all__ = ["Finding", "XRayReport"]


@dataclass(frozen=True)
class Finding:
    """One named problem. ``kind`` is a stable label: ``channel_order``, ``normalization``,
    ``layout``, ``resize_method``, ``rotation``, ``preprocessing``, ``quantization``,
    ``layer_divergence``, ``slow_kernels``, ``output_mismatch``."""

    kind: str
    message: str
    layer: str | None = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "layer": self.layer}


@dataclass
class XRayReport:
    """Result of :func:`nnmeter.xray.xray`.

    ``verdict`` is ``"OK"`` or ``"FAULT"``; ``cause`` is the finding that best explains
    the fault (None when OK); ``findings`` lists all of them, most specific first.
    """

    deployed: str
    reference: str
    backend: str
    reference_backend: str
    samples: int
    findings: list[Finding]
    input_checks: list[InputCheck]
    step_check: InputCheck | None
    diffs: list[LayerDiff]
    first_divergent: LayerDiff | None
    divergent_detail: dict[str, Any]
    unaligned_deployed: list[str]
    unaligned_reference: list[str]
    top1_agreement: float | None
    latency: LatencyCheck | None
    warnings: list[str] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "FAULT" if self.findings else "OK"

    @property
    def cause(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @property
    def slow_kernels(self) -> list[str]:
        return [r.name for r in self.latency.slow] if self.latency else []

    # ------------------------------------------------------------------ output
    def as_dict(self) -> dict[str, Any]:
        """JSON-able dict of the whole report."""
        def num(v: Any) -> Any:
            return None if isinstance(v, float) and math.isnan(v) else v

        return {
            "verdict": self.verdict,
            "cause": self.cause.as_dict() if self.cause else None,
            "findings": [f.as_dict() for f in self.findings],
            "deployed": self.deployed, "reference": self.reference,
            "backend": self.backend, "reference_backend": self.reference_backend,
            "samples": self.samples,
            "first_divergent": self.first_divergent.deployed if self.first_divergent else None,
            "divergent_detail": self.divergent_detail,
            "input_checks": [c.as_dict() for c in self.input_checks],
            "preprocessing_step_check": self.step_check.as_dict() if self.step_check else None,
            "layers": [{k: num(v) for k, v in d.as_dict().items()} for d in self.diffs],
            "unaligned_deployed": self.unaligned_deployed,
            "unaligned_reference": self.unaligned_reference,
            "top1_agreement": self.top1_agreement,
            "latency": self.latency.as_dict() if self.latency else None,
            "warnings": list(self.warnings),
            "thresholds": dict(self.thresholds),
        }

    def summary(self) -> str:
        """A few lines for a terminal: verdict, cause, first divergent layer, slow kernels."""
        lines = [f"verdict: {self.verdict}   ({self.deployed} on {self.backend} vs "
                 f"{self.reference} on {self.reference_backend}, {self.samples} inputs)"]
        if self.cause:
            lines.append(f"cause: [{self.cause.kind}] {self.cause.message}")
        for f in self.findings[1:]:
            lines.append(f"also: [{f.kind}] {f.message}")
        fd = self.first_divergent
        if fd:
            q = f", quant scale={fd.deployed_quant[0]:.4g} zp={fd.deployed_quant[1]}" \
                if fd.deployed_quant else ""
            lines.append(f"first divergent layer: {_short(fd.deployed)} ({fd.source_op} -> "
                         f"{fd.op}; aligned to {_short(fd.reference)} by {fd.how}) "
                         f"nRMSE={fd.nrmse:.3g} vs {fd.input_nrmse:.3g} at its inputs{q}")
            attrs = self.divergent_detail.get("attrs")
            if attrs:
                lines.append("  attributes: " + ", ".join(f"{k}={v}" for k, v in attrs.items()))
        else:
            lines.append("first divergent layer: none")
        if self.top1_agreement is not None:
            lines.append(f"top-1 agreement: {self.top1_agreement:.0%} over {self.samples} inputs")
        if self.latency:
            alt = ", ".join(f"{b} {ms:.3g} ms" for b, ms in self.latency.alternatives_ms.items())
            lines.append(f"latency: {self.latency.model_ms:.3g} ms on {self.latency.backend}"
                         + (f" (vs {alt})" if alt else ""))
            slow = self.latency.slow
            lines.append("slow kernels: " + (", ".join(
                f"{r.name} {r.ratio:.1f}x" for r in slow) if slow else "none"))
        if self.unaligned_deployed or self.unaligned_reference:
            lines.append(f"unaligned: {len(self.unaligned_deployed)} deployed, "
                         f"{len(self.unaligned_reference)} reference layers")
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)

    def layer_table(self) -> tuple[list[str], list[list[Any]]]:
        """Headers and rows of the per-layer table."""
        headers = ["layer", "op", "aligned to", "how", "nRMSE", "cosine", "max abs",
                   "err/scale"]
        rows = [[_short(d.deployed, 28), d.op, _short(d.reference, 20), d.how, d.nrmse,
                 d.cosine, d.max_abs, d.rmse_scales] for d in self.diffs]
        return headers, rows

    def to_html(self, path: str | pathlib.Path | None = None) -> str:
        """Render the single-file HTML report; write it to ``path`` when given."""
        e = html.escape
        verdict_colour = "#b00020" if self.verdict == "FAULT" else "#1b7f3b"
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'><title>nnmeter xray</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
            "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
            "padding:3px 6px;text-align:left}tr.bad{background:#fde7e9}"
            "code{background:#f4f4f4;padding:1px 3px}</style></head><body>",
            "<h1>nnmeter xray</h1>",
            f"<p><b>Deployed</b> <code>{e(self.deployed)}</code> on <code>{e(self.backend)}"
            f"</code>; <b>reference</b> <code>{e(self.reference)}</code> on "
            f"<code>{e(self.reference_backend)}</code>; {self.samples} inputs.</p>",
            f"<h2 style='color:{verdict_colour}'>Verdict: {self.verdict}</h2>",
        ]
        if self.findings:
            parts.append("<ul>" + "".join(
                f"<li><b>{e(f.kind)}</b>: {e(f.message)}</li>" for f in self.findings) + "</ul>")
        parts.append(f"<pre>{e(self.summary())}</pre>")
        plot = _error_plot(self)
        if plot:
            parts.append("<h2>Error per layer</h2>")
            parts.append(f"<img alt='per-layer nRMSE' src='data:image/png;base64,{plot}'>")
        lplot = _latency_plot(self)
        if lplot:
            parts.append("<h2>Latency</h2>")
            parts.append(f"<img alt='latency' src='data:image/png;base64,{lplot}'>")
        headers, rows = self.layer_table()
        fd = self.first_divergent.deployed if self.first_divergent else None
        parts.append("<h2>Layers</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers)
                     + "</tr>")
        for d, row in zip(self.diffs, rows):
            cls = " class='bad'" if d.deployed == fd else ""
            parts.append(f"<tr{cls}>" + "".join(f"<td>{e(_cell(c))}</td>" for c in row)
                         + "</tr>")
        parts.append("</table>")
        if self.input_checks:
            parts.append("<h2>Input checks</h2><table><tr><th>step</th><th>check</th>"
                         "<th>residual nRMSE</th><th>detail</th></tr>")
            for chk in self.input_checks + ([self.step_check] if self.step_check else []):
                parts.append(f"<tr><td>{e(chk.step)}</td><td>plain difference</td><td>"
                             f"{_cell(chk.plain_nrmse)}</td><td></td></tr>")
                for c in chk.candidates:
                    parts.append(f"<tr><td>{e(chk.step)}</td><td>{e(c.name)}</td><td>"
                                 f"{_cell(c.residual)}</td><td>{e(c.detail)}</td></tr>")
            parts.append("</table>")
        if self.latency:
            parts.append("<h2>Latency rows</h2><table><tr><th>name</th><th>measured ms</th>"
                         "<th>predicted ms</th><th>other backend ms</th><th>ratio</th>"
                         "<th>slow</th></tr>")
            for r in self.latency.rows:
                other = f"{_cell(r.other_ms)} ({r.other_backend})" if r.other_backend else ""
                parts.append(f"<tr{' class=bad' if r.slow else ''}><td>{e(r.name)}</td><td>"
                             f"{_cell(r.measured_ms)}</td><td>{_cell(r.predicted_ms)}</td>"
                             f"<td>{e(other)}</td><td>{_cell(r.ratio)}</td><td>"
                             f"{'yes' if r.slow else ''}</td></tr>")
            parts.append("</table><p>" + "<br>".join(e(n) for n in self.latency.notes) + "</p>")
        if self.unaligned_deployed or self.unaligned_reference:
            parts.append("<h2>Not aligned</h2><p>deployed: " + e(", ".join(
                self.unaligned_deployed) or "none") + "<br>reference: " + e(", ".join(
                    self.unaligned_reference) or "none") + "</p>")
        parts.append("</body></html>")
        text = "\n".join(parts)
        if path is not None:
            pathlib.Path(path).write_text(text, encoding="utf-8")
        return text


def _short(name: str, n: int = 40) -> str:
    first = name.split(";")[0]
    return first if len(first) <= n else first[: n - 1] + "…"


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _error_plot(rep: XRayReport) -> str | None:
    pts = [(i, d) for i, d in enumerate(rep.diffs) if not math.isnan(d.nrmse)]
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.4))
    xs = [i for i, _ in pts]
    ys = [max(d.nrmse, 1e-9) for _, d in pts]
    ax.semilogy(xs, ys, "o-", color="#3366aa", label="nRMSE")
    thr = rep.thresholds.get("threshold")
    if thr:
        ax.axhline(thr, color="#999", ls="--", lw=1, label="float threshold")
    qthr = rep.thresholds.get("quant_threshold")
    if qthr and any(d.deployed_quant for _, d in pts):
        ax.axhline(qthr, color="#c80", ls=":", lw=1, label="int8 threshold")
    if rep.first_divergent:
        for i, d in pts:
            if d.deployed == rep.first_divergent.deployed:
                ax.plot([i], [max(d.nrmse, 1e-9)], "o", ms=12, mfc="none", mec="#b00020",
                        mew=2, label="first divergent")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{_short(d.deployed, 14)}\n{d.op}" for _, d in pts], rotation=60,
                       fontsize=7, ha="right")
    ax.set_ylabel("nRMSE vs reference")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def _latency_plot(rep: XRayReport) -> str | None:
    lat = rep.latency
    if lat is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{lat.backend} (deployed)"] + [b for b in lat.alternatives_ms]
    values = [lat.model_ms] + list(lat.alternatives_ms.values())
    model_row = next((r for r in lat.rows if r.name == "model"), None)
    if model_row and model_row.predicted_ms:
        labels.append("predicted")
        values.append(model_row.predicted_ms)
    op_rows = [r for r in lat.rows if r.name != "model"][:20]
    fig, axes = plt.subplots(1, 2 if op_rows else 1, figsize=(9 if op_rows else 5, 3))
    ax = axes[0] if op_rows else axes
    colours = ["#b00020" if model_row and model_row.slow else "#3366aa"] + \
        ["#888"] * (len(values) - 1)
    ax.barh(labels, values, color=colours)
    ax.set_xlabel("ms per inference (min of runs)")
    ax.set_title("whole model", fontsize=9)
    if op_rows:
        ax2 = axes[1]
        ax2.barh([_short(r.name, 18) for r in op_rows], [r.measured_ms for r in op_rows],
                 color=["#b00020" if r.slow else "#3366aa" for r in op_rows])
        ax2.set_xlabel("ms per op (runtime profiler)")
        ax2.set_title("per executed op", fontsize=9)
        ax2.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return _png(fig)
