"""The adaptive sampler's accuracy per round, per kernel type, from a dataset's round log.

Every build appends one line per sampling round to
``datasets/kernels/<dataset>/rounds.jsonl``: the rows measured so far and the
cross-validated share within ±10 % after the round. This prints that curve per kernel
type (first and last round) and draws it (``nnmeter.plots.sampling_curves``).

Usage::

  python experiments/sampling_curves.py --dataset ort-cpu@epyc-zen4-avx512-2c \\
      [--plot experiments/results/sampling_curves_ort-cpu.png] [--json]

No measurement: it reads what the builds wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from nnmeter.plots import sampling_points
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
    from nnmeter.predictors.facts import split_dataset_id

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="dataset id, e.g. ort-cpu@epyc-zen4-avx512-2c")
    ap.add_argument("--plot", default=None, help="write the curves to this PNG")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ds = KernelDataset(kernel_dataset_dir(args.dataset), split_dataset_id(args.dataset)[0])
    path = ds.directory / ds.ROUNDS
    if not path.exists():
        sys.exit(f"error: {path} does not exist; a build writes it (nnmeter build)")
    rounds = [r for r in ds.rounds() if "kernel_type" in r]
    by = sampling_points(rounds)
    if not by:
        sys.exit(f"error: {path} holds no round with a cross-validated accuracy")
    if args.json:
        print(json.dumps({t: [{"rows": n, "cv_acc10": a} for n, a in pts]
                          for t, pts in sorted(by.items())}, indent=1))
    else:
        print(f"# {args.dataset}: cross-validated ±10 % share after each adaptive round")
        print(f"{'kernel type':18s} {'rounds':>6s} {'rows first':>10s} {'acc first':>9s} "
              f"{'rows last':>9s} {'acc last':>8s}")
        for t, pts in sorted(by.items()):
            print(f"{t:18s} {len(pts):6d} {pts[0][0]:10d} {100 * pts[0][1]:8.1f}% "
                  f"{pts[-1][0]:9d} {100 * pts[-1][1]:7.1f}%")
    if args.plot:
        from nnmeter import plots

        print(f"wrote {plots.sampling_curves(rounds, args.plot)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
