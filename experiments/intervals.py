"""Calibrate a device's prediction intervals, and check their coverage on held-out sets.

Usage::

  python experiments/intervals.py calibrate --backend ort-cpu [--seed 1000] [--level 0.9]
  python experiments/intervals.py report --backend ort-cpu [--seed 2000] [--json] [--plot F]

``calibrate`` writes ``intervals.json`` into this machine's kernel dataset of the backend
(``datasets/kernels/<backend>@<device>/``): per kernel type, split-conformal bounds of the
out-of-fold kernel rows; for whole models, those of the zoo models measured on the
device in the calibration set (seed 1000 by default: the design set; the reported
seed-2000 set and the real-architecture set are never used). ``report`` prints the share
of held-out models inside their interval (target: 85-95 % for a 90 % interval), per
family, with the interval's median width. Truth is each model's fastest pass, as in
``experiments/model_accuracy.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _truth(backend: str, seed: int, device: str | None) -> dict[str, tuple[str, float]]:
    from nnmeter.devices.datasets import model_set_path

    path = model_set_path(backend, seed, device)
    if not path.exists():
        sys.exit(f"error: {path} does not exist; measure it with "
                 f"experiments/model_accuracy.py measure --backend {backend} --seed {seed}")
    best: dict[str, tuple[str, float]] = {}
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("ok") and r.get("latency_ms"):
            old = best.get(r["variant"])
            if old is None or r["latency_ms"] < old[1]:
                best[r["variant"]] = (r["family"], float(r["latency_ms"]))
    return best


def _predicted(pred, names: list[str]) -> np.ndarray:
    from nnmeter import zoo

    return np.array(pred.predict_many([zoo.get_variant(n).build() for n in names]))


def calibrate(args: argparse.Namespace) -> int:
    from nnmeter.predictors import clear_memo, load_predictor
    from nnmeter.predictors.intervals import calibrate as write

    pred = load_predictor(args.backend, device=args.device)
    truth = _truth(args.backend, args.seed, args.device)
    names = sorted(truth)
    p = _predicted(pred, names)
    ratios = np.log(np.array([truth[n][1] for n in names]) / p)
    ds_dir = pred.source_files[1]

    def progress(i: int, n: int, t: str) -> None:
        print(f"\r  kernel types {i + 1}/{n} ({t})        ", end="", file=sys.stderr)

    rec = write(ds_dir, args.backend, model_ratios=ratios.tolist(),
                model_source=f"seed{args.seed} zoo models ({len(names)})", level=args.level,
                progress=progress)
    print(file=sys.stderr)
    clear_memo()
    m = rec["model"]
    print(f"{ds_dir}/intervals.json: level {rec['level']}, model bounds "
          f"x{np.exp(m['lo']):.3f}..x{np.exp(m['hi']):.3f} from {m['n']} models; "
          f"{len(rec['types']) - 1} kernel types with bounds of their own")
    return 0


def report(args: argparse.Namespace) -> int:
    from nnmeter.predictors import load_predictor

    pred = load_predictor(args.backend, device=args.device)
    if pred.intervals is None:
        sys.exit(f"error: {args.backend} on {pred.device_name} has no intervals.json; run "
                 f"the calibrate step first")
    truth = _truth(args.backend, args.seed, args.device)
    names = sorted(truth)
    p = _predicted(pred, names)
    t = np.array([truth[n][1] for n in names])
    bands = np.array([pred.interval(x) for x in p])
    inside = (bands[:, 0] <= t) & (t <= bands[:, 1])
    width = (bands[:, 1] - bands[:, 0]) / p
    fams = np.array([truth[n][0] for n in names])
    out = {"backend": args.backend, "device": pred.device_name, "seed": args.seed,
           "level": pred.intervals.level, "calibrated_on": pred.intervals.model_source,
           "n": len(names), "coverage": float(inside.mean()),
           "median_relative_width": float(np.median(width)),
           "families": {f: {"n": int((fams == f).sum()),
                            "coverage": float(inside[fams == f].mean())}
                        for f in sorted(set(fams))}}
    if args.plot:
        from nnmeter.plots import predicted_vs_measured

        out["plot"] = str(predicted_vs_measured(
            p, t, fams, args.plot, title=f"{args.backend}@{pred.device_name} seed {args.seed}"))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{args.backend} on {pred.device_name}, seed {args.seed} ({len(names)} models), "
          f"{100 * out['level']:.0f} % interval calibrated on {out['calibrated_on']}")
    for f, v in out["families"].items():
        print(f"  {f:14s} n={v['n']:3d}  covered {100 * v['coverage']:5.1f} %")
    print(f"coverage {100 * out['coverage']:.1f} %, median width "
          f"{100 * out['median_relative_width']:.1f} % of the prediction")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, seed in (("calibrate", 1000), ("report", 2000)):
        p = sub.add_parser(name)
        p.add_argument("--backend", default="ort-cpu")
        p.add_argument("--device", default=None)
        p.add_argument("--seed", type=int, default=seed)
        p.add_argument("--level", type=float, default=0.9)
        p.add_argument("--json", action="store_true")
        p.add_argument("--plot", default=None, metavar="FILE",
                       help="report: predicted against measured per family to FILE")
    args = ap.parse_args()
    return calibrate(args) if args.cmd == "calibrate" else report(args)


if __name__ == "__main__":
    raise SystemExit(main())
