"""Convolutions the kernel data does not hold, on single-kernel models measured on the
backend: grouped ones (1 < groups < channels; the dense regressor against one group's
prediction times the groups) and, with ``--kind asymmetric``, kh x kw kernels (read as
their first dimension's square kernel, as before, against the square kernel of the same
area with exact FLOPs).

The zoo has neither, so this is the development check behind
``nnmeter.predictors.model._one_group``, the ``gconv-*`` kernel types and
``ConvConfig.kernel_w``: it uses kernels of its own, never the real-architecture set
that scores the change. (The gconv types are trained on configs drawn from the grid of
:mod:`nnmeter.sampling.synthetic`, which spans these shapes; a drawn config can land on
one of them.)

Run (under the measurement lock)::

    flock /tmp/nnmeter-measure.lock python experiments/grouped_conv_check.py --backend ort-cpu
    flock /tmp/nnmeter-measure.lock python experiments/grouped_conv_check.py --backend ort-cpu --kind asymmetric
    flock /tmp/nnmeter-measure.lock python experiments/grouped_conv_check.py --backend ort-cpu --kind lrn

Writes experiments/results/{grouped,asymmetric}_conv_check_<backend>.json and
lrn_check_<backend>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OUT = Path(__file__).resolve().parent / "results"

#: (h, cin=cout, kernel, stride, groups...) shapes of RegNet/ResNeXt/ShuffleNet stages
SHAPES = [(56, 64, 3, 1, (2, 4, 8, 32)), (56, 128, 3, 2, (4, 16, 32)),
          (28, 128, 3, 1, (4, 8, 32)), (28, 240, 1, 1, (3,)), (14, 256, 3, 1, (8, 16, 64)),
          (14, 480, 1, 1, (3,)), (7, 512, 3, 1, (16, 32, 64))]


def _graph(h: int, c: int, k: int, s: int, g: int):
    from nnmeter.ir.builder import GraphBuilder

    b = GraphBuilder(f"gconv_h{h}_c{c}_k{k}_s{s}_g{g}", (1, c, h, h))
    return b.build([b.relu(b.bn(b.conv(b.x, c, k, s, groups=g, name="conv"), name="bn"),
                           name="relu")])


#: (h, cin, cout, (kh, kw)) of Inception V3's factorised 7x7 and 3x3 stages
ASYM = [(17, 128, 128, (1, 7)), (17, 128, 128, (7, 1)), (17, 160, 192, (1, 7)),
        (17, 192, 192, (7, 1)), (8, 384, 384, (1, 3)), (8, 384, 384, (3, 1)),
        (8, 448, 384, (3, 1)), (35, 64, 64, (1, 7)), (35, 64, 96, (7, 1))]


def _asym_graph(h: int, cin: int, cout: int, k: tuple[int, int], square: bool = False):
    from nnmeter.ir.builder import GraphBuilder, same_pads

    b = GraphBuilder(f"aconv_h{h}_c{cin}_{cout}_k{k[0]}x{k[1]}", (1, cin, h, h))
    kk = (k[0], k[0]) if square else k
    y = b.conv(b.x, cout, kk, 1, pads=same_pads(k), name="conv")
    return b.build([b.relu(b.bn(y, name="bn"), name="relu")])


def _summary(rows: list[dict], keys: tuple[str, ...]) -> dict:
    """Per predicted column: within ±10 %, median error and MAPE against the measured
    time, printed and returned."""
    import numpy as np

    out = {}
    for key in keys:
        e = np.array([r[key] / r["measured_ms"] - 1 for r in rows])
        out[key] = {"within_10": float(np.mean(np.abs(e) <= .1)),
                    "median_error": float(np.median(e)), "mape": float(np.mean(np.abs(e)))}
        print(f"{key:20s} within ±10 % {100 * out[key]['within_10']:5.1f} %  median error "
              f"{100 * out[key]['median_error']:+6.1f} %  MAPE {100 * out[key]['mape']:5.1f} %")
    return out


def _measure(backend: str, cases: list[tuple]) -> list[dict]:
    """Measure each ``(graph, {column: predicted ms})`` case on the backend; one row per
    measured case (the measured time, its spread and the predicted columns), printed
    with each column's error."""
    from nnmeter.backends import Profiler

    rows = []
    with Profiler(backend) as prof:
        for g, predicted in cases:
            m = prof.measure(g, on_error="record")
            if not m.ok:
                print(f"{g.name}: {m.error}")
                continue
            rows.append({"model": g.name, "measured_ms": m.latency_ms, "spread": m.spread,
                         **predicted})
            cols = "  ".join(f"{k[:-3]} {v:8.3f} ({100 * (v / m.latency_ms - 1):+6.1f} %)"
                             for k, v in predicted.items())
            print(f"{g.name:32s} measured {m.latency_ms:8.3f}  {cols}", flush=True)
    return rows


def asymmetric(args) -> int:
    from nnmeter.predictors import load_predictor

    pred = load_predictor(args.backend)
    cases = []
    for h, cin, cout, k in ASYM:
        g = _asym_graph(h, cin, cout, k)
        cases.append((g, {"first_dim_square_ms":
                          pred.predict(_asym_graph(h, cin, cout, k, square=True)).total_ms,
                          "same_area_ms": pred.predict(g).total_ms}))
    rows = _measure(args.backend, cases)
    summary = {"backend": args.backend, "n": len(rows),
               **_summary(rows, ("first_dim_square_ms", "same_area_ms"))}
    (OUT / f"asymmetric_conv_check_{args.backend}.json").write_text(
        json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


#: (h, channels, size) of LRN kernels off the synthetic grid (nnmeter.sampling.synthetic)
LRN = [(24, 80, 5), (40, 144, 5), (20, 320, 3), (33, 64, 5), (60, 48, 5), (10, 500, 5),
       (17, 200, 3), (48, 100, 5)]


def lrn(args) -> int:
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors import load_predictor

    pred = load_predictor(args.backend)
    regs = {k: v for k, v in pred.regressors.items() if k not in ("type:lrn", "family:lrn")}
    fallback = pred.__class__(pred.backend_id, pred.rules, regs, device=pred.device,
                              meta=pred.meta, composition=pred.composition)
    kt = KERNEL_TYPES.get("lrn")
    cases = []
    for h, c, size in LRN:
        g = kt.build_graph(kt.config_cls(h=h, w=h, cin=c, size=size))
        g.name = f"lrn_h{h}_c{c}_s{size}"
        cases.append((g, {"lrn_type_ms": pred.predict(g).total_ms,
                          "fallback_ms": fallback.predict(g).total_ms}))
    rows = _measure(args.backend, cases)
    summary = {"backend": args.backend, "n": len(rows), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
               **_summary(rows, ("lrn_type_ms", "fallback_ms"))}
    (OUT / f"lrn_check_{args.backend}.json").write_text(
        json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


def main() -> int:
    import nnmeter.predictors.model as model_mod
    from nnmeter.predictors import load_predictor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--kind", choices=("grouped", "asymmetric", "lrn"), default="grouped")
    args = ap.parse_args()
    if args.kind == "asymmetric":
        return asymmetric(args)
    if args.kind == "lrn":
        return lrn(args)
    graphs = [_graph(h, c, k, s, g) for h, c, k, s, gs in SHAPES for g in gs]
    pred = load_predictor(args.backend)

    def clone(grouped: bool):
        p = pred.__class__(pred.backend_id, pred.rules, pred.regressors, device=pred.device,
                           meta=pred.meta, composition=pred.composition)
        p.grouped = grouped and pred.grouped
        return p

    # the predictor as shipped: gconv-* types where its data has grouped rows
    own = [clone(True).predict(g).total_ms for g in graphs]
    per_group = [clone(False).predict(g).total_ms for g in graphs]  # one group, per group
    one_group = model_mod._one_group
    model_mod._one_group = lambda kt, config: (None, 1)
    try:
        dense = [clone(False).predict(g).total_ms for g in graphs]  # the dense regressor
    finally:
        model_mod._one_group = one_group
    rows = _measure(args.backend, [
        (g, {"dense_ms": a, "per_group_ms": b, "grouped_type_ms": c})
        for g, a, b, c in zip(graphs, dense, per_group, own)])
    summary = {"backend": args.backend, "n": len(rows), "grouped_data": pred.grouped,
               "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
               **_summary(rows, ("dense_ms", "per_group_ms", "grouped_type_ms"))}
    OUT.mkdir(exist_ok=True)
    (OUT / f"grouped_conv_check_{args.backend}.json").write_text(
        json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
