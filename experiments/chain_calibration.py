"""Chain calibration: how much more a kernel costs measured alone than inside a model.

A single-kernel measurement, after the per-inference overhead and (on ort-cpu) the
layout reorders are taken off, should be the kernel's time inside a model. This checks
that on the device with crafted models: chains of n identical shape-preserving kernels
(n = 1, 2, 4, 8; n = 1 is exactly the builder's single-kernel model). The slope of the
chain's time over n is the kernel's time inside a model; what the single-kernel model
costs beyond slope + overhead + reorders is the *excess* a training row still carries:

    excess = T(1) - overhead - reorders(T(1)'s model) - slope

The configs are conv-bn-relu (1x1 and 3x3) and dwconv-bn over channel counts that run
blocked and plain and over four sizes; their median excess is the default. Channel
shuffle, max and average pooling, relu and hswish chains give their families' own
medians. Both are written to ``<dataset>/chain_excess.json``; training subtracts a
kernel's family excess, else the default, from every kernel row
(:func:`nnmeter.predictors.train.train_predictor`).

Usage (under the measurement lock; about three minutes):
  flock /tmp/nnmeter-measure.lock python experiments/chain_calibration.py --backend ort-cpu
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

LENGTHS = (1, 2, 4, 8)


#: kernel type → (config of a shape-preserving kernel, one link of its chain)
def _link(name: str, b, y, c: int, k: int, i: int):
    if name == "conv-bn-relu":
        return b.relu(b.bn(b.conv(y, c, k, 1, name=f"c{i}"), name=f"b{i}"), name=f"r{i}")
    if name == "dwconv-bn":
        return b.bn(b.dwconv(y, k, 1, name=f"d{i}"), name=f"b{i}")
    if name == "channelshuffle":
        return b.channelshuffle(y, 2, name=f"s{i}")
    if name in ("maxpool", "avgpool"):
        pool = b.maxpool if name == "maxpool" else b.avgpool
        return pool(y, k, 1, pads=(k // 2,) * 4, name=f"p{i}")
    return b.act(y, name, name=f"a{i}")


def _config(kt, c: int, hw: int, k: int):
    name = kt.name
    if name == "conv-bn-relu":
        return kt.config_cls(h=hw, w=hw, cin=c, cout=c, kernel=k, stride=1)
    if name == "dwconv-bn":
        return kt.config_cls(h=hw, w=hw, cin=c, kernel=k, stride=1)
    if name == "channelshuffle":
        return kt.config_cls(h=hw, w=hw, cin=c, groups=2)
    if name in ("maxpool", "avgpool"):
        return kt.config_cls(h=hw, w=hw, cin=c, kernel=k, stride=1, pads=(k // 2,) * 4)
    return kt.config_cls(h=hw, w=hw, cin=c)


def _chain(name: str, c: int, hw: int, k: int, n: int):
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder(f"chain-{name}", (1, c, hw, hw))
    y = b.x
    for i in range(n):
        y = _link(name, b, y, c, k, i)
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

    # compute kernels: these set the default excess; the others get one each
    compute = ("conv-bn-relu", "dwconv-bn")
    cases = [(name, c, hw, k) for name, k in (("conv-bn-relu", 1), ("conv-bn-relu", 3),
                                              ("dwconv-bn", 3))
             for c in (24, 58, 64, 116) for hw in (7, 14, 28, 56)
             if not (name == "conv-bn-relu" and k == 3 and c * hw > 116 * 28)]
    cases += [(name, c, hw, 3) for name in ("channelshuffle", "maxpool", "avgpool", "relu",
                                            "hswish")
              for c in (24, 58, 64, 116) for hw in (7, 14, 28)]
    points = []
    t0 = time.time()
    with Profiler(args.backend) as prof:
        for name, c, hw, k in cases:
            kt = KERNEL_TYPES.get(name)
            cfg = _config(kt, c, hw, k)
            times = []
            for n in LENGTHS:
                g = kt.build_graph(cfg) if n == 1 else _chain(name, c, hw, k, n)
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
    ex = [p["excess_ms"] for p in points if p["kernel_type"] in compute]
    blocked = [p["excess_ms"] for p in points
               if p["kernel_type"] in compute and p["reorders_ms"] > 0]
    plain = [p["excess_ms"] for p in points
             if p["kernel_type"] in compute and p["reorders_ms"] == 0]
    med = statistics.median(ex)
    print(f"compute kernels: median excess {1000 * med:.2f} µs over {len(ex)} configs "
          f"(blocked {1000 * statistics.median(blocked) if blocked else float('nan'):.2f} µs, "
          f"n={len(blocked)}; plain "
          f"{1000 * statistics.median(plain) if plain else float('nan'):.2f} µs, "
          f"n={len(plain)}); overhead {1000 * overhead:.2f} µs; {time.time() - t0:.0f} s")
    families = {}
    for kt_name in sorted({p["kernel_type"] for p in points} - set(compute)):
        fam = KERNEL_TYPES.get(kt_name).family
        families.setdefault(fam, []).extend(
            p["excess_ms"] for p in points if p["kernel_type"] == kt_name)
    families = {f: statistics.median(v) for f, v in families.items()}
    for f, v in families.items():
        print(f"{f:14s} median excess {1000 * v:.2f} µs")
    if args.dry_run:
        return
    path = write_calibration(ds.directory, CHAIN_FILE, {
        "backend_id": args.backend, "fingerprint_id": ds.fingerprint_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": f"flock /tmp/nnmeter-measure.lock python experiments/chain_calibration.py "
                   f"--backend {args.backend}",
        "excess_ms": med, "families": families, "overhead_ms": overhead,
        "lengths": list(LENGTHS),
        "points": points})
    print("wrote", path)


if __name__ == "__main__":
    main()
