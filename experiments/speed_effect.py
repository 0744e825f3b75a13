"""How much of a predictor's miss on one device is the host's speed between two runs.

A shared host does not hold one speed (``nnmeter/devices/reference.py``): a predictor's
kernels and calibrations are measured at one moment, its development sets at another.
Every build and every model set records probes of the same half-millisecond reference
model beside its data. For every predictor of one device whose build has finished and
every development set of its backend (``experiments/protocol.json``: ``development``;
the reported sets are never read), this prints

- the median of predicted over measured time on the set,
- how much slower the set ran than the build (the median probe of the set over the
  build's, :func:`nnmeter.devices.reference.set_against_builds`),
- the share within ±10 % as predicted, and with every prediction times that ratio.

The second share is a diagnostic, never an accuracy figure: the ratio is known only
after the set was measured. Where the two medians move together, the error is the
host's and no predictor can remove it; where the scaled share stays low, the error is
the predictor's. Writes ``experiments/results/speed_effect_<device>.txt``/``.json`` and a
scatter plot (``.png``): log median error against log speed ratio, one point per
predictor and set, with the line a pure speed change would fall on.

Usage::

  python experiments/speed_effect.py --device xeon-f6m167-amx-2c [--backends B1,B2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "experiments" / "results"
PROTOCOL = ROOT / "experiments" / "protocol.json"


def _protocol(device: str) -> dict[str, Any]:
    devices = json.loads(PROTOCOL.read_text())["devices"]
    if device not in devices:
        raise SystemExit(f"error: experiments/protocol.json declares no sets for device "
                         f"{device!r}; declared: {', '.join(devices)}")
    return devices[device]


def rows_for(device: str, backends: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per (finished predictor of ``device``, development set of its backend)."""
    from device_transfer import _truth

    from nnmeter import zoo
    from nnmeter.commands.devices import device_table
    from nnmeter.devices.datasets import model_set_path
    from nnmeter.devices.reference import set_against_builds
    from nnmeter.evaluate import evaluate
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.dataset import kernel_dataset_dir

    protocol = _protocol(device)
    out = []
    table = device_table()["backends"]
    for backend, entry in sorted(protocol.items()):
        if backends and backend not in backends:
            continue
        sets = []
        for seed in entry.get("development", []):
            path = model_set_path(backend, seed, device)
            truth = _truth(backend, seed, device)[0]  # variant -> its fastest pass
            if truth:
                names = sorted(truth)
                sets.append((seed, path, names, [zoo.get_variant(n).build() for n in names],
                             np.array([truth[n] for n in names])))
        for d in table.get(backend, []):
            if not d["dataset"].startswith(f"{backend}@{device}") or not d["finished"]:
                continue
            pred = load_predictor(backend, dataset=d["dataset"])
            for seed, path, names, graphs, true in sets:
                got = np.asarray(pred.predict_many(graphs), float)
                speed = set_against_builds(path, {"b": kernel_dataset_dir(d["dataset"])})["b"]
                row = {"backend": backend, "dataset": d["dataset"], "seed": seed,
                       "models": len(names), "median_ratio": float(np.median(got / true)),
                       "set_over_build": speed, "acc10": evaluate(got, true).acc10}
                if speed:
                    row.update(median_ratio_at_set_speed=float(np.median(got * speed / true)),
                               acc10_at_set_speed=evaluate(got * speed, true).acc10)
                out.append(row)
                print(_line(row), flush=True)
    return out


def _line(r: dict[str, Any]) -> str:
    speed = r["set_over_build"]
    tail = (f"{speed:8.3f} {100 * r['acc10']:6.1f} {100 * r['acc10_at_set_speed']:8.1f} "
            f"{r['median_ratio_at_set_speed']:8.3f}" if speed else
            f"{'no probes':>8s} {100 * r['acc10']:6.1f}")
    return f"{r['dataset']:46s} {r['seed']:5d} {r['models']:4d} {r['median_ratio']:8.3f} {tail}"


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The correlation of the two logs, and how far the sets that ran more than 5 %
    away from their build's speed moved when scaled."""
    k = [r for r in rows if r["set_over_build"]]
    if len(k) < 3:
        return ["too few predictor-set pairs with probes for a correlation"]
    x = np.log([r["set_over_build"] for r in k])
    y = np.log([r["median_ratio"] for r in k])
    far = [r for r in k if abs(r["set_over_build"] - 1) > 0.05]
    near = [r for r in k if abs(r["set_over_build"] - 1) <= 0.05]
    lines = [f"{len(k)} predictor-set pairs with probes; correlation of log median "
             f"predicted/measured with log set/build speed: {np.corrcoef(x, y)[0, 1]:+.2f}"]
    for label, grp in (("set more than 5 % away from its build's speed", far),
                       ("set within 5 % of its build's speed", near)):
        if grp:
            lines.append(
                f"{label}: {len(grp)} pairs, median |log error| "
                f"{np.median([abs(np.log(r['median_ratio'])) for r in grp]):.3f} as predicted, "
                f"{np.median([abs(np.log(r['median_ratio_at_set_speed'])) for r in grp]):.3f} "
                f"at the set's speed; within ±10 % (mean over pairs) "
                f"{100 * np.mean([r['acc10'] for r in grp]):.1f} -> "
                f"{100 * np.mean([r['acc10_at_set_speed'] for r in grp]):.1f} %")
    return lines


def plot(rows: list[dict[str, Any]], path: Path, device: str) -> Path | None:
    from nnmeter.plots import _plt, _save

    k = [r for r in rows if r["set_over_build"]]
    if not k:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 5.0))
    for b in sorted({r["backend"] for r in k}):
        g = [r for r in k if r["backend"] == b]
        ax.scatter([r["set_over_build"] for r in g], [r["median_ratio"] for r in g],
                   label=b, s=28)
    lo = min(min(r["set_over_build"] for r in k), 1 / max(r["median_ratio"] for r in k))
    hi = max(max(r["set_over_build"] for r in k), 1 / min(r["median_ratio"] for r in k))
    xs = np.geomspace(lo * 0.97, hi * 1.03, 50)
    ax.plot(xs, 1 / xs, "k--", lw=1, label="a pure speed change")
    ax.axhspan(0.9, 1.1, color="0.9", zorder=0)
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain ratios (0.8, 0.9, 1, 1.2), not 8 x 10^-1
        axis.set_major_locator(LogLocator(base=10, subs=(0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.4)))
        axis.set_minor_locator(LogLocator(base=10, subs=()))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
    ax.set_xlabel("how much slower the set ran than the build (speed reference)")
    ax.set_ylabel("median predicted / measured on the set")
    ax.set_title(f"{device}: host speed against prediction level", fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="a device of experiments/protocol.json")
    ap.add_argument("--backends", default=None, help="only these backends (comma-separated)")
    args = ap.parse_args(argv)
    _protocol(args.device)
    header = [f"# {args.device}: host speed against prediction level on the development "
              f"sets ({time.strftime('%Y-%m-%d %H:%M')})",
              f"# command: python experiments/speed_effect.py --device {args.device}"
              + (f" --backends {args.backends}" if args.backends else ""),
              f"{'predictor dataset':46s} {'seed':>5s} {'n':>4s} {'pred/meas':>8s} "
              f"{'set/build':>8s} {'±10 %':>6s} {'scaled ±10':>8s} {'scaled p/m':>8s}"]
    print("\n".join(header), flush=True)
    rows = rows_for(args.device, args.backends.split(",") if args.backends else None)
    if not rows:
        print(f"no finished predictor of {args.device} has a development set measured here",
              file=sys.stderr)
        return 1
    tail = summary(rows)
    print("\n".join(tail))
    OUT.mkdir(parents=True, exist_ok=True)
    stem = OUT / f"speed_effect_{args.device}"
    stem.with_suffix(".txt").write_text("\n".join(header + [_line(r) for r in rows] + [""]
                                                  + tail) + "\n")
    stem.with_suffix(".json").write_text(json.dumps({"device": args.device, "rows": rows,
                                                     "summary": tail}, indent=1) + "\n")
    png = plot(rows, stem.with_suffix(".png"), args.device)
    print(f"written: {stem.with_suffix('.txt')}" + (f", {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
