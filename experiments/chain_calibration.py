"""Chain calibration: how much more a kernel costs measured alone than inside a model.

A single-kernel measurement, after the per-inference overhead and (on ort-cpu) the
layout reorders are taken off, should be the kernel's time inside a model. This checks
that on the device with crafted models: chains of n identical shape-preserving kernels
(n = 1, 2, 4, 8; n = 1 is exactly the builder's single-kernel model; three rounds over
the lengths, each model keeping its median round). The slope of the
chain's time over n is the kernel's time inside a model; what the single-kernel model
costs beyond slope + overhead + reorders is the *excess* a training row still carries:

    excess = T(1) - overhead - reorders - edge conversions (boundary.json) - slope

The configs are conv-bn-relu (1x1 and 3x3) and dwconv-bn over channel counts that run
blocked and plain and over four sizes, plus large ones up to 2.4 M elements per tensor;
their excess is fitted as a constant plus a hinge in the single-kernel model's elements
(``nnmeter.predictors.chain.fit_size_excess``), which is the default. Channel
shuffle, max and average pooling, relu and hswish chains give their families' own
medians. Both are written to ``<dataset>/chain_excess.json``; training subtracts a
kernel's family excess, else the default, from every kernel row
(:func:`nnmeter.predictors.train.train_predictor`). ``nnmeter build`` measures it once
per dataset (:func:`nnmeter.predictors.chain.measure_chain`); this script measures it
again and prints every point.

Runs can be merged (``--out`` one, ``--merge-with`` it in the next): every config then
keeps its median time over all their rounds.

Usage (under the measurement lock; about six minutes on ort-cpu):
  flock /tmp/nnmeter-measure.lock python experiments/chain_calibration.py --backend ort-cpu
"""

from __future__ import annotations

import argparse
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--dry-run", action="store_true", help="print, write nothing")
    ap.add_argument("--out", default=None, metavar="JSON",
                    help="write the record here instead of the dataset's chain_excess.json "
                         "(to compare two calibrations)")
    ap.add_argument("--merge-with", nargs="+", default=(), metavar="JSON",
                    help="records of earlier runs (--out) on the same dataset: every config "
                         "keeps its median time over all their rounds and this run's")
    ap.add_argument("--only-merge", action="store_true",
                    help="measure nothing: merge the --merge-with records")
    args = ap.parse_args()

    import json
    from pathlib import Path

    from nnmeter.predictors.terms import ChainTerm, composition_before
    from nnmeter.predictors.chain import (COMPUTE_TYPES, merge_chain,
                                          write_chain)
    from nnmeter.devices.datasets import own_dataset_dir

    def show(p: dict) -> None:
        cfg = p["config"]
        print(f"{p['kernel_type']:14s} c={cfg['cin']:4d} hw={cfg['h']:3d} "
              f"k={cfg.get('kernel', 3)} T(n)=" + " ".join(f"{x:.4f}" for x in p["chain_ms"])
              + f"  in-model {p['slope_ms']:.4f}  reorders {p['reorders_ms']:.4f}  "
              f"edges {p['boundary_ms']:.4f}  "
              f"excess {1000 * p['excess_ms']:6.2f} µs", flush=True)

    earlier = [json.loads(Path(f).read_text()) for f in args.merge_with]
    if args.only_merge:
        if not earlier:
            ap.error("--only-merge needs --merge-with")
        rec = merge_chain(earlier)
        for p in rec["points"]:
            show(p)
    else:
        where = own_dataset_dir(args.backend)  # measured here: this machine's dataset
        rec = ChainTerm.measure(args.backend, where, on_point=show,
                                before=composition_before(args.backend, where, "chain"))
        if earlier:
            rec = merge_chain([*earlier, rec])
    pts = rec["points"]
    blocked = [p["excess_ms"] for p in pts
               if p["kernel_type"] in COMPUTE_TYPES and p["reorders_ms"] > 0]
    plain = [p["excess_ms"] for p in pts
             if p["kernel_type"] in COMPUTE_TYPES and p["reorders_ms"] == 0]
    print(f"compute kernels: excess {1000 * rec['excess_ms']:.2f} µs (below the knee) over "
          f"{len(blocked) + len(plain)} configs (blocked "
          f"{1000 * statistics.median(blocked) if blocked else float('nan'):.2f} µs, "
          f"n={len(blocked)}; plain "
          f"{1000 * statistics.median(plain) if plain else float('nan'):.2f} µs, "
          f"n={len(plain)}); overhead {1000 * rec['overhead_ms']:.2f} µs; "
          f"{rec['seconds']:.0f} s")
    size = rec.get("size")
    print("size term: " + (f"{size['ms_per_melem']:.3f} ms per million elements (inputs plus "
                           f"outputs) above {size['knee_elements'] / 1e6:.2f} M" if size
                           else "none (no excess growing with size)"))
    for f, v in rec["families"].items():
        line = (rec.get("family_lines") or {}).get(f)
        print(f"{f:14s} median excess {1000 * v:.2f} µs" + (
            f"; line {1000 * line['a_ms']:.2f} µs + {1000 * line['ms_per_melem']:.2f} µs "
            f"per million elements" if line else ""))
    if args.dry_run:
        return
    rec["command"] = ("flock /tmp/nnmeter-measure.lock python experiments/chain_calibration.py "
                      f"--backend {args.backend}"
                      + (" --merge-with <earlier --out records>" if earlier else ""))
    if args.out:
        Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")
        print("wrote", args.out)
        return
    print("wrote", write_chain(own_dataset_dir(args.backend), rec))


if __name__ == "__main__":
    main()
