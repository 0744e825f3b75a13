"""Another pass over a dataset's in-model calibration models, now, on this machine.

The in-model term (:mod:`nnmeter.predictors.in_model`) is fitted on a few dozen whole
zoo models measured once, in one build. On a shared machine one pass caught at a slow
moment pulls the fit its way; this script measures every calibration model again and
keeps each model's fastest pass (``add_in_model_pass``). Run it in a later session, then
predict as usual: the predictor cache key covers the record, so the next prediction
refits the term.

``--variants N`` first measures the calibration models of N a family (a build measures 3)
that the record lacks and adds them (``extend_in_model``); the pass then covers them
too. A term with more coefficients than a few dozen models pin down needs them.

Usage::

  flock /tmp/nnmeter-measure.lock python experiments/in_model_pass.py --backend ort-cpu
  flock /tmp/nnmeter-measure.lock python experiments/in_model_pass.py --backend mnn-cpu --variants 6
  flock /tmp/nnmeter-measure.lock python experiments/in_model_pass.py --backend ort-cpu \
      --dataset ort-cpu@xeon-f6m167-amx-2c-full

``--dataset`` names another of this machine's datasets (a transfer or full build kept
beside the shipped one); one of another device is refused, as a build refuses it.

Prints each model's passes and how far the new pass is from the earlier fastest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--variants", type=int, default=None, metavar="N",
                    help="first add the calibration models of N a family the record lacks")
    ap.add_argument("--dataset", default=None, metavar="ID",
                    help="a dataset of this machine under datasets/kernels (default: "
                         "<backend>@<this device>)")
    ap.add_argument("--no-pass", action="store_true",
                    help="with --variants: add the models, without another pass over all")
    args = ap.parse_args()
    if args.variants is not None and args.variants < 1:
        ap.error(f"--variants must be at least 1, not {args.variants}")
    if args.no_pass and args.variants is None:
        ap.error("--no-pass only goes with --variants")

    from nnmeter.devices.datasets import own_dataset_dir
    from nnmeter.devices.reference import SpeedReference
    from nnmeter.predictors.dataset import kernel_dataset_dir
    from nnmeter.predictors.in_model import add_in_model_pass, extend_in_model

    # this machine's datasets only: a pass measured here belongs to no other device (each
    # measurement's fingerprint is checked against the dataset's before it is stored)
    if args.dataset is None:
        directory = own_dataset_dir(args.backend)
    else:
        directory = kernel_dataset_dir(args.dataset)
        if not directory.is_dir():
            ap.error(f"--dataset {args.dataset}: no such dataset under "
                     f"{directory.parent}; `nnmeter devices` lists them")
    # the speed reference before and after (tag ``in_model``): models added sessions
    # after the build ran at the host's speed of that day, which the report can compare
    reference = SpeedReference(directory, tag="in_model")
    with reference.around(args.backend, "in-model models"):
        if args.variants is not None:
            rec = extend_in_model(args.backend, directory, variants=args.variants,
                                  progress=True)
            print(f"{directory.name}: {len(rec['points'])} in-model calibration models")
        if not args.no_pass:
            rec = add_in_model_pass(args.backend, directory, progress=True)
    for point in reference.points:
        print(f"speed reference {point['phase']}: {point['latency_ms']:.4f} ms")
    ratios = []
    for p in rec["points"]:
        passes = p.get("passes") or [p["latency_ms"]]
        if len(passes) >= 2:
            ratios.append(passes[-1] / min(passes[:-1]))
        print(f"{p['variant']:36s} " + " ".join(f"{x:9.3f}" for x in passes))
    if ratios:
        ratios.sort()
        print(f"{directory.name}: {len(ratios)} models, the new pass / the earlier fastest: "
              f"median {ratios[len(ratios) // 2]:.3f}, min {ratios[0]:.3f}, "
              f"max {ratios[-1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
