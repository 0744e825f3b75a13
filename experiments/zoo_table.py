"""The zoo table: per family, the variant ranges, FLOPs min/median/max over 50 variants,
and the time to generate and export 100 variants to ONNX.

Timing is wall-clock on whatever machine runs it; on a shared machine run it under the
measurement lock so that no two measurements overlap::

    flock /tmp/nnmeter-measure.lock .venv/bin/python experiments/zoo_table.py

Options: ``--n`` variants for the FLOPs statistics (50), ``--n-export`` variants to
generate and export (100), ``--families`` to restrict, ``--json PATH`` to save the rows.
Exported files go to a temporary folder and are deleted one by one (VGG variants with
random weights reach 1 GB each).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter.zoo import FAMILY_NAMES, get_family, sample_variants  # noqa: E402


def family_row(family: str, n: int, n_export: int, seed: int, tmp: str) -> dict:
    fam = get_family(family)
    flops, macs, params = [], [], []
    sampled = sample_variants(family, n, seed)
    for v in sampled:
        g = v.build(validate=True)
        c = g.cost()
        flops.append(c.flops)
        macs.append(c.macs)
        params.append(c.params)
    distinct = len({v.config_hash for v in sampled})
    row = {
        "family": family, "ranges": dict(fam.ranges), "n": n, "distinct": distinct,
        "flops_min": min(flops), "flops_median": statistics.median(flops),
        "flops_max": max(flops), "flops_spread": max(flops) / min(flops),
        "params_min": min(params), "params_max": max(params),
    }
    if n_export > 0:
        from nnmeter.exporters.onnx import export_onnx

        t0 = time.perf_counter()
        variants = sample_variants(family, n_export, seed)
        graphs = [v.build() for v in variants]
        t_gen = time.perf_counter() - t0
        t0 = time.perf_counter()
        for v, g in zip(variants, graphs):
            path = export_onnx(g, os.path.join(tmp, f"{v.name}.onnx"), seed=0)
            os.remove(path)
        t_exp = time.perf_counter() - t0
        row.update({"n_export": n_export, "generate_s": t_gen, "export_s": t_exp,
                    "ms_per_model": 1000 * (t_gen + t_exp) / n_export})
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--n-export", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", nargs="*", default=list(FAMILY_NAMES))
    ap.add_argument("--n-export-for", nargs="*", default=[], metavar="FAMILY=N",
                    help="override --n-export for some families, e.g. vgg=10")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    overrides = {k: int(v) for k, v in (s.split("=") for s in args.n_export_for)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo-table-") as tmp:
        for fam in args.families:
            rows.append(family_row(fam, args.n, overrides.get(fam, args.n_export),
                                   args.seed, tmp))
            r = rows[-1]
            print(f"{fam:13s} FLOPs min/median/max {r['flops_min'] / 1e6:9.1f} "
                  f"{r['flops_median'] / 1e6:9.1f} {r['flops_max'] / 1e6:9.1f} M "
                  f"(x{r['flops_spread']:.1f}, {r['distinct']}/{r['n']} distinct)"
                  + (f"; {r['n_export']} generated in {r['generate_s']:.2f} s, exported in "
                     f"{r['export_s']:.1f} s ({r['ms_per_model']:.0f} ms/model)"
                     if "n_export" in r else ""), flush=True)
    print()
    for r in rows:
        print(f"{r['family']}: " + "; ".join(f"{k} {v}" for k, v in r["ranges"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
