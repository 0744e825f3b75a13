"""Chain calibration: how much more a kernel costs measured alone than inside a model.

A single-kernel measurement, after the per-inference overhead and (on ort-cpu) the
layout reorders are taken off, should be the kernel's time inside a model. This checks
that on the device with crafted models: chains of n identical shape-preserving kernels
(n = 1, 2, 4, 8; n = 1 is exactly the builder's single-kernel model). The slope of the
chain's time over n is the kernel's time inside a model; what the single-kernel model
costs beyond slope + overhead + reorders is the *excess* a training row still carries:

    excess = T(1) - overhead - reorders(T(1)'s model) - slope

The configs are conv-bn-relu (1x1 and 3x3) and dwconv-bn over channel counts that run
blocked and plain and over four sizes. The median excess is written to
``<dataset>/chain_excess.json``; training subtracts it from every kernel row
(:func:`nnmeter.predictors.train.train_predictor`).

Usage (under the measurement lock; about two minutes):
  flock /tmp/nnmeter-measure.lock python experiments/chain_calibration.py --backend ort-cpu
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

LENGTHS = (1, 2, 4, 8)


def _chain(family: str, c: int, hw: int, k: int, n: int):
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder(f"chain-{family}", (1, c, hw, hw))
    y = b.x
    for i in range(n):
        if family == "conv":
            y = b.relu(b.bn(b.conv(y, c, k, 1, name=f"c{i}"), name=f"b{i}"), name=f"r{i}")
        else:
            y = b.bn(b.dwconv(y, k, 1, name=f"d{i}"), name=f"b{i}")
    return b.build([y])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = ap.parse_args()

    from nnmeter.backends import Profiler
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors import PredictorSettings, load_predictor
    from nnmeter.predictors.chain import CHAIN_FILE
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir, write_calibration
    from nnmeter.predictors.layout import LAYOUT_BLOCK, reorder_elements
    from nnmeter.predictors.reorder import reorder_ms

    ds = KernelDataset(kernel_dataset_dir(args.backend), args.backend)
    # the overhead and reorder costs training removes, without any chain correction
    pred = load_predictor(args.backend, settings=PredictorSettings(chain_correction=False))
    overhead = pred.overhead_ms
    block = LAYOUT_BLOCK.get(args.backend.split("@")[0], 0)
    line = pred.meta.get("reorder_cost")
    curve = pred.meta.get("reorder_curve")

    def reorders(kt, cfg) -> float:
        if not block or not line:
            return 0.0
        moved = reorder_elements(kt, cfg, block)
        if curve:
            return sum(reorder_ms(curve, n, tuple(line)) for n in moved if n)
        return sum(line[0] + line[1] * n for n in moved if n)

    cases = [(fam, c, hw, k) for fam, k in (("conv", 1), ("conv", 3), ("dwconv", 3))
             for c in (24, 58, 64, 116) for hw in (7, 14, 28, 56)
             if not (fam == "conv" and k == 3 and c * hw > 116 * 28)]
    points = []
    t0 = time.time()
    with Profiler(args.backend) as prof:
        for fam, c, hw, k in cases:
            if fam == "conv":
                kt = KERNEL_TYPES.get("conv-bn-relu")
                cfg = kt.config_cls(h=hw, w=hw, cin=c, cout=c, kernel=k, stride=1)
            else:
                kt = KERNEL_TYPES.get("dwconv-bn")
                cfg = kt.config_cls(h=hw, w=hw, cin=c, kernel=k, stride=1)
            times = []
            for n in LENGTHS:
                g = kt.build_graph(cfg) if n == 1 else _chain(fam, c, hw, k, n)
                times.append(prof.measure(g).latency_ms)
            slope, _ = np.polyfit(LENGTHS, times, 1)
            r = reorders(kt, cfg)
            excess = times[0] - overhead - r - slope
            points.append({"kernel_type": kt.name, "config": kt.config_to_dict(cfg),
                           "chain_ms": times, "slope_ms": float(slope),
                           "reorders_ms": r, "excess_ms": float(excess)})
            print(f"{kt.name:14s} c={c:4d} hw={hw:3d} k={k} T(n)="
                  + " ".join(f"{x:.4f}" for x in times)
                  + f"  in-model {slope:.4f}  reorders {r:.4f}  excess {1000 * excess:6.2f} µs",
                  flush=True)
    ex = [p["excess_ms"] for p in points]
    blocked = [p["excess_ms"] for p in points if p["reorders_ms"] > 0]
    plain = [p["excess_ms"] for p in points if p["reorders_ms"] == 0]
    med = statistics.median(ex)
    print(f"median excess {1000 * med:.2f} µs over {len(ex)} configs (blocked "
          f"{1000 * statistics.median(blocked) if blocked else float('nan'):.2f} µs, n={len(blocked)}; "
          f"plain {1000 * statistics.median(plain) if plain else float('nan'):.2f} µs, n={len(plain)}); "
          f"overhead {1000 * overhead:.2f} µs; {time.time() - t0:.0f} s")
    if args.dry_run:
        return
    path = write_calibration(ds.directory, CHAIN_FILE, {
        "backend_id": args.backend, "fingerprint_id": ds.fingerprint_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": f"flock /tmp/nnmeter-measure.lock python experiments/chain_calibration.py "
                   f"--backend {args.backend}",
        "excess_ms": med, "overhead_ms": overhead, "lengths": list(LENGTHS),
        "points": points})
    print("wrote", path)


if __name__ == "__main__":
    main()
