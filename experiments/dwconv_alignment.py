"""Depthwise convs over power-of-two channel counts: is there a spike the features miss?

For each spatial size, window and a centre channel count that is a multiple of 256, the
single-kernel ``dwconv-bn-relu6`` model is measured at the centre and at the centre
± 8 channels, in rounds that alternate the three (the builder's protocol; the least of
``--repeats`` rounds is kept, since interference only ever adds time). Printed per
row: each time, its time per million multiply-adds, and the centre's ratio to the mean
of its two neighbours (1.0: no spike). With ``--predict`` the shipped predictor's
single-kernel prediction of each centre is printed next to it.

Run under the measurement lock::

    flock /tmp/nnmeter-measure.lock python experiments/dwconv_alignment.py \\
        --backend litert-cpu --json experiments/results/dwconv_alignment_litert-cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter.backends import Profiler  # noqa: E402
from nnmeter.builder import DEFAULT_PROTOCOL  # noqa: E402
from nnmeter.kernels import KERNEL_TYPES  # noqa: E402

#: (spatial size, centre channels): the sizes at which the zoo's MobileNetV2 variants
#: run 512- and 1024-channel depthwise convs, and two smaller ones
CASES = ((10, 1024), (12, 512), (20, 256), (28, 128))
WINDOWS = (3, 5, 7)
STEP = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="litert-cpu")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--predict", action="store_true",
                    help="also print the shipped predictor's single-kernel prediction")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    kt = KERNEL_TYPES.get("dwconv-bn-relu6")
    pred = None
    if args.predict:
        from nnmeter.predictors import load_predictor

        pred = load_predictor(args.backend)
    rows = []
    print(f"{'H':>3s} {'K':>2s} {'CIN':>5s} {'ms (CIN-8 / CIN / CIN+8)':>30s} "
          f"{'ms per M MAC (CIN-8 / CIN / CIN+8)':>36s} {'spike':>6s}"
          + ("  predicted centre" if pred else ""))
    with Profiler(args.backend) as prof:
        for h, centre in CASES:
            for k in WINDOWS:
                cins = (centre - STEP, centre, centre + STEP)
                graphs = [kt.build_graph(kt.config_cls(h=h, w=h, cin=c, kernel=k, stride=1))
                          for c in cins]
                best = [float("inf")] * 3
                for _ in range(args.repeats):
                    for i, g in enumerate(graphs):
                        m = prof.measure(g, **DEFAULT_PROTOCOL)
                        if m.ok:
                            best[i] = min(best[i], m.latency_ms)
                rate = [b / (h * h * c * k * k / 1e6) for b, c in zip(best, cins)]
                spike = rate[1] / ((rate[0] + rate[2]) / 2)
                row = {"h": h, "kernel": k, "cin": list(cins), "ms": best,
                       "ms_per_mmac": rate, "spike": spike}
                line = (f"{h:3d} {k:2d} {centre:5d} "
                        f"{' / '.join(f'{b:8.4f}' for b in best):>30s} "
                        f"{' / '.join(f'{r:.4f}' for r in rate):>36s} {spike:6.2f}")
                if pred is not None:
                    p = pred.predict(graphs[1], check_device=False).total_ms
                    row["predicted_centre_ms"] = p
                    line += f"  {p:8.4f} ({p / best[1]:.2f})"
                print(line, flush=True)
                rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
