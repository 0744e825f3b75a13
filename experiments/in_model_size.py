"""How many whole models the in-model calibration needs: predictors that differ only in
their in-model record, scored on one device's development sets.

The in-model term (:mod:`nnmeter.predictors.in_model`) is fitted on whole zoo models
measured on the device: 36 in a ten-minute build (3 a family). To see whether more pin
it better, copy a predictor's dataset, give the copy the calibration models of 10 a
family (``experiments/in_model_pass.py --dataset <copy> --variants 10 --no-pass``), let
its training choose the transfer's correction strength again (delete ``strength`` from
the copy's ``transfer.json``), and score both here::

  python experiments/in_model_size.py --backend mnn-cpu --device xeon-f6m167-amx-2c \\
      --datasets mnn-cpu@xeon-f6m167-amx-2c,mnn-cpu@xeon-f6m167-amx-2c-cal10

Per predictor and development set (``experiments/protocol.json``; a reported set is
never read): within ±10 % as predicted; the median of predicted over measured (the
level, which on a shared host moves with the host's speed between the build and the
set); and the spread of the log errors about that median (rms), with the share within
±10 % once the level is removed. The last two are what a calibration's size can change;
the level is the host's as much as the predictor's (``experiments/speed_effect.py``).
Truth is a model's fastest pass. Writes
``experiments/results/in_model_size_<device>.txt`` (appending a section per run) and
``.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OUT = Path(__file__).resolve().parent / "results"
PROTOCOL = Path(__file__).resolve().parent / "protocol.json"


def development_seeds(device: str, backend: str) -> list[int]:
    """The development seeds ``experiments/protocol.json`` declares for ``backend`` on
    ``device`` (SystemExit naming the file when there are none)."""
    devices = json.loads(PROTOCOL.read_text())["devices"]
    seeds = devices.get(device, {}).get(backend, {}).get("development")
    if not seeds:
        raise SystemExit(f"error: {PROTOCOL} declares no development sets for {backend} on "
                         f"{device}")
    return [int(s) for s in seeds]


def score(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Within ±10 % as predicted, the level (median predicted/measured), the rms of the
    log errors about their median and the share within ±10 % about it.

    >>> s = score(np.array([1.2, 2.4, 3.6]), np.array([1.0, 2.0, 3.0]))
    >>> round(s["level"], 3), s["acc10"], round(s["spread"], 6), s["acc10_at_level"]
    (1.2, 0.0, 0.0, 1.0)
    """
    from nnmeter.evaluate import within

    r = np.log(pred / true)
    mid = float(np.median(r))
    return {"n": int(len(true)), "acc10": within(pred, true, 10),
            "level": float(np.exp(mid)), "spread": float(np.sqrt(np.mean((r - mid) ** 2))),
            "acc10_at_level": within(pred / np.exp(mid), true, 10)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--device", required=True, help="the device of the sets and datasets")
    ap.add_argument("--datasets", required=True, metavar="ID1,ID2",
                    help="kernel datasets of that device to compare")
    ap.add_argument("--seeds", default=None, metavar="S1,S2",
                    help="development sets to score (default: the protocol's for the "
                         "backend; a backend the protocol has no entry for, such as a "
                         "two-thread one, needs them named)")
    args = ap.parse_args(argv)

    from device_transfer import _truth
    from nnmeter import zoo
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.dataset import kernel_dataset_dir

    ids = [d for d in args.datasets.split(",") if d]
    for d in ids:
        if not kernel_dataset_dir(d).is_dir():
            ap.error(f"--datasets: no dataset {d!r} under datasets/kernels; `nnmeter devices` "
                     f"lists them")
    if args.seeds:
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x]
        except ValueError:
            ap.error(f"--seeds {args.seeds}: give comma-separated integers, e.g. 1000,2000")
    else:
        seeds = development_seeds(args.device, args.backend)
    sets = {}
    for seed in seeds:
        truth = _truth(args.backend, seed, args.device)[0]
        if truth:
            names = sorted(truth)
            sets[seed] = ([zoo.get_variant(n).build() for n in names],
                          np.array([truth[n] for n in names]))
    lines = [f"# {args.backend} on {args.device}: in-model calibration size "
             f"({time.strftime('%Y-%m-%d %H:%M')})",
             f"# command: python experiments/in_model_size.py --backend {args.backend} "
             f"--device {args.device} --datasets {args.datasets}"
             + (f" --seeds {args.seeds}" if args.seeds else ""),
             f"{'dataset':44s} {'models':>6s} {'strength':>8s} {'seed':>5s} {'n':>4s} "
             f"{'±10 %':>6s} {'level':>6s} {'spread':>6s} {'±10 % at level':>14s}"]
    report: dict[str, Any] = {"backend": args.backend, "device": args.device,
                              "seeds": list(sets), "datasets": {}}
    for d in ids:
        pred = load_predictor(args.backend, dataset=d)
        im = pred.meta.get("in_model") or {}
        strength = pred.meta.get("transfer", {}).get("summary", {}).get("strength")
        entry = {"in_model_models": im.get("models"), "loo_rms_log": im.get("loo_rms_log"),
                 "strength": strength, "sets": {}}
        for seed, (graphs, true) in sets.items():
            s = score(np.asarray(pred.predict_many(graphs), float), true)
            entry["sets"][str(seed)] = s
            lines.append(f"{d:44s} {im.get('models', 0) or 0:6d} "
                         f"{'-' if strength is None else format(strength, 'g'):>8s} "
                         f"{seed:5d} {s['n']:4d} {100 * s['acc10']:6.1f} {s['level']:6.3f} "
                         f"{s['spread']:6.3f} {100 * s['acc10_at_level']:14.1f}")
        report["datasets"][d] = entry
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"in_model_size_{args.device}.txt", "a") as fh:
        fh.write(text + "\n\n")
    path = OUT / f"in_model_size_{args.device}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old[args.backend] = report
    path.write_text(json.dumps(old, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
