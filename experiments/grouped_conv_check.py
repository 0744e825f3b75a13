"""Convolutions the kernel data does not hold, on single-kernel models measured on the
backend: grouped ones (1 < groups < channels; the dense regressor against one group's
prediction times the groups) and, with ``--kind asymmetric``, kh x kw kernels (read as
their first dimension's square kernel, as before, against the square kernel of the same
area with exact FLOPs).

The zoo has neither, so this is the development check behind
``nnmeter.predictors.model._one_group`` and ``ConvConfig.kernel_w``: it uses kernels of
its own, never the real-architecture set that scores the change.

Run (under the measurement lock)::

    flock /tmp/nnmeter-measure.lock python experiments/grouped_conv_check.py --backend ort-cpu
    flock /tmp/nnmeter-measure.lock python experiments/grouped_conv_check.py --backend ort-cpu --kind asymmetric

Writes experiments/results/{grouped,asymmetric}_conv_check_<backend>.json.
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


def asymmetric(args) -> int:
    from nnmeter.backends import Profiler
    from nnmeter.predictors import load_predictor

    pred = load_predictor(args.backend)
    rows = []
    with Profiler(args.backend) as prof:
        for h, cin, cout, k in ASYM:
            g = _asym_graph(h, cin, cout, k)
            after = pred.predict(g).total_ms
            before = pred.predict(_asym_graph(h, cin, cout, k, square=True)).total_ms
            m = prof.measure(g, on_error="record")
            if not m.ok:
                print(f"{g.name}: {m.error}")
                continue
            rows.append({"model": g.name, "measured_ms": m.latency_ms, "spread": m.spread,
                         "first_dim_square_ms": before, "same_area_ms": after})
            print(f"{g.name:30s} measured {m.latency_ms:7.3f}  as {k[0]}x{k[0]} {before:7.3f} "
                  f"({100 * (before / m.latency_ms - 1):+6.1f} %)  same area {after:7.3f} "
                  f"({100 * (after / m.latency_ms - 1):+6.1f} %)", flush=True)
    summary = {"backend": args.backend, "n": len(rows),
               **_summary(rows, ("first_dim_square_ms", "same_area_ms"))}
    (OUT / f"asymmetric_conv_check_{args.backend}.json").write_text(
        json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


def main() -> int:
    import nnmeter.predictors.model as model_mod
    from nnmeter.backends import Profiler
    from nnmeter.predictors import load_predictor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--kind", choices=("grouped", "asymmetric"), default="grouped")
    args = ap.parse_args()
    if args.kind == "asymmetric":
        return asymmetric(args)
    graphs = [_graph(h, c, k, s, g) for h, c, k, s, gs in SHAPES for g in gs]
    pred = load_predictor(args.backend)
    grouped = [pred.predict(g).total_ms for g in graphs]
    one_group = model_mod._one_group
    model_mod._one_group = lambda kt, config: (None, 1)
    try:
        dense = [load_predictor(args.backend).__class__(
            pred.backend_id, pred.rules, pred.regressors, device=pred.device, meta=pred.meta,
            composition=pred.composition).predict(g).total_ms for g in graphs]
    finally:
        model_mod._one_group = one_group
    rows = []
    with Profiler(args.backend) as prof:
        for g, a, b in zip(graphs, dense, grouped):
            m = prof.measure(g, on_error="record")
            if not m.ok:
                print(f"{g.name}: {m.error}")
                continue
            rows.append({"model": g.name, "measured_ms": m.latency_ms, "spread": m.spread,
                         "dense_ms": a, "per_group_ms": b})
            print(f"{g.name:32s} measured {m.latency_ms:8.3f}  dense {a:8.3f} "
                  f"({100 * (a / m.latency_ms - 1):+6.1f} %)  per group {b:8.3f} "
                  f"({100 * (b / m.latency_ms - 1):+6.1f} %)", flush=True)
    summary = {"backend": args.backend, "n": len(rows),
               "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
               **_summary(rows, ("dense_ms", "per_group_ms"))}
    OUT.mkdir(exist_ok=True)
    (OUT / f"grouped_conv_check_{args.backend}.json").write_text(
        json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
