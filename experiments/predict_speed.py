"""Prediction speed: one MobileNetV2 (ModelGraph), a NASBench201 batch, cached load.

Usage: python experiments/predict_speed.py [--backend ort-cpu] [--n 1000] [--json out.json]
Prints figures and writes JSON. No assertion on time: this is a benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--n", type=int, default=1000, help="NASBench201 cells in the batch")
    ap.add_argument("--json", default="experiments/results/predict_speed.json")
    args = ap.parse_args()

    from nnmeter import zoo
    from nnmeter.ir.graph import ModelGraph
    from nnmeter.predictors import load_predictor

    load_predictor(args.backend)  # make sure the cache exists
    t = time.perf_counter()
    pred = load_predictor(args.backend)
    load_s = time.perf_counter() - t

    g = ModelGraph.from_json("examples/mobilenetv2.json")
    t = time.perf_counter()
    pred.predict(g, check_device=False)
    first_ms = 1000 * (time.perf_counter() - t)
    times = []
    for _ in range(20):
        fresh = ModelGraph.from_json("examples/mobilenetv2.json")
        t = time.perf_counter()
        pred.predict(fresh, check_device=False)
        times.append(1000 * (time.perf_counter() - t))

    # MobileNetV2 variants the predictor has never seen (other widths, depths, sizes)
    distinct = []
    for v in zoo.sample_variants("mobilenetv2", 20, seed=7):
        fresh = v.build()
        t = time.perf_counter()
        pred.predict(fresh, check_device=False)
        distinct.append(1000 * (time.perf_counter() - t))

    graphs = [v.build() for v in zoo.sample_variants("nasbench201", args.n, seed=0)]
    t = time.perf_counter()
    totals = pred.predict_many(graphs)
    cold_s = time.perf_counter() - t
    t = time.perf_counter()
    pred.predict_many(graphs)
    warm_s = time.perf_counter() - t
    out = {
        "backend": args.backend, "cached_load_s": load_s,
        "mobilenetv2_first_ms": first_ms, "mobilenetv2_repeat_median_ms": statistics.median(times),
        "mobilenetv2_distinct_variants_median_ms": statistics.median(distinct),
        "mobilenetv2_distinct_variants_max_ms": max(distinct),
        "nasbench201_n": len(graphs), "nasbench201_distinct_models_per_s": len(graphs) / cold_s,
        "nasbench201_repeat_models_per_s": len(graphs) / warm_s,
        "nasbench201_mean_predicted_ms": sum(totals) / len(totals),
    }
    for k, v in out.items():
        print(f"{k:40s} {v:.4g}" if isinstance(v, float) else f"{k:40s} {v}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
