"""Profile ORT's layout reorders on this device and store the cost curve.

Profiles single-kernel convolutions and poolings of the dataset (12 per kernel type,
spread over their sizes), keeps each ``ReorderInput`` / ``ReorderOutput`` node's time
with the elements it moved, fits :func:`nnmeter.predictors.reorder.fit_reorder_curve`
and writes ``datasets/kernels/<backend>@<device>/reorders.json``. Prints the curve next
to the relu line that training used before.

Run under the measurement lock::

    flock /tmp/nnmeter-measure.lock python experiments/reorder_calibration.py --backend ort-cpu
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter.predictors import load_predictor  # noqa: E402
from nnmeter.devices.datasets import own_dataset_dir  # noqa: E402
from nnmeter.predictors.reorder import (measure_reorders, reorder_ms,  # noqa: E402
                                        write_reorders)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--per-type", type=int, default=12)
    args = ap.parse_args()
    line = load_predictor(args.backend).meta.get("reorder_cost") or [0.0, 0.0]
    rec = measure_reorders(args.backend, own_dataset_dir(args.backend),
                           per_type=args.per_type)
    rec["command"] = (f"flock /tmp/nnmeter-measure.lock python "
                      f"experiments/reorder_calibration.py --backend {args.backend}")
    path = write_reorders(own_dataset_dir(args.backend), rec)
    curve = rec["curve"]
    print(f"{len(rec['points'])} reorders profiled -> {path}")
    print(f"{'elements':>10s} {'curve ms':>9s} {'ns/elem':>8s} {'relu line ms':>12s}")
    for x in curve["log_elements"]:
        n = int(round(math.exp(x)))
        c = reorder_ms(curve, n)
        print(f"{n:10d} {c:9.4f} {c / n * 1e6:8.3f} {line[0] + line[1] * n:12.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
