"""Prediction speed: one MobileNetV2 (ModelGraph), a NASBench201 batch, cached load.

``nasbench201_build_ms_per_graph``: building the batch's graphs (``Variant.build``, into
one list), per graph, to set beside the prediction rate.

``api_predict_*``: the public ``nnmeter.predict(graph, backend)`` on a warm process (the
predictor memo's check of its data files included), on one graph object again and on a
fresh copy of the graph each call.

Usage: python experiments/predict_speed.py [--backend ort-cpu] [--n 1000] [--variants 20]
       [--rounds 3] [--table-n 10000] [--table-fill 500] [--gc-freeze] [--json out.json]
Prints figures and writes JSON. No assertion on time: this is a benchmark.

``predict_many`` works segment by segment (:mod:`nnmeter.predictors.segments`). The
NASBench-201 batch is also timed side by side against the whole-model path
(``use_segments = False``), alternately in ``--rounds`` rounds of fresh distinct cells
with both paths' memos emptied before each batch, and the medians are reported with the
largest difference between the two paths' totals (they are meant to be equal).

NAS-Bench-201 cells given as configs go through the predictor's table of the space
(:mod:`nnmeter.predictors.space_table`): ``nasbench201_table_fill_networks_per_s`` is a
table's first fill (networks built and predicted, in memory), ``..._whole_fill_s`` the
time to fill the stored table whole when it was not (None when it already was), and
``nasbench201_table_*_models_per_s`` the rate of ``predict_many`` over ``--table-n``
distinct cells with the table read afresh from the predictor's cache folder each round.

Each distinct MobileNetV2 variant is timed twice: wall clock (``perf_counter``) and the
process's CPU time (``process_time``). On a machine shared with other work the wall
figure also holds the time the core spent on other processes; the CPU figure does not.

Python's cyclic garbage collector runs when allocations call for it, so now and then a
full (generation 2) collection lands inside one ``predict`` call and costs time in
proportion to every object the process holds. The figures count those collections and
the longest. ``--gc-freeze`` moves everything alive after loading into the collector's
permanent generation (``gc.freeze()``), as a long-running NAS process may choose to do
for itself; nnmeter never does it, since it changes the whole process. The default
figures are with the collector as Python sets it.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--n", type=int, default=1000, help="NASBench201 cells in the batch")
    ap.add_argument("--variants", type=int, default=20,
                    help="distinct MobileNetV2 variants predicted one at a time")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds of the segment and whole-model paths")
    ap.add_argument("--table-n", type=int, default=10_000,
                    help="distinct NAS-Bench-201 cells per lookup round (at most 15,625)")
    ap.add_argument("--table-fill", type=int, default=500,
                    help="networks in the timed fill of a table in memory")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() after loading (see the module docstring)")
    ap.add_argument("--json", default="experiments/results/predict_speed.json")
    args = ap.parse_args()

    from nnmeter import zoo
    from nnmeter.ir.graph import ModelGraph
    from nnmeter.predictors import load_predictor

    load_predictor(args.backend)  # make sure the cache exists
    t = time.perf_counter()
    pred = load_predictor(args.backend)
    load_s = time.perf_counter() - t
    if args.gc_freeze:
        gc.collect()
        gc.freeze()

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

    # the public call a NAS loop makes: nnmeter.predict (the process-wide predictor memo,
    # its check of the data files' stats, then the prediction), on the same graph object
    # and on a fresh copy of it each time
    import nnmeter

    api_same, api_fresh = [], []
    nnmeter.predict(g, args.backend)
    for _ in range(50):
        t = time.perf_counter()
        nnmeter.predict(g, args.backend)
        api_same.append(1000 * (time.perf_counter() - t))
        fresh = ModelGraph.from_json("examples/mobilenetv2.json")
        t = time.perf_counter()
        nnmeter.predict(fresh, args.backend)
        api_fresh.append(1000 * (time.perf_counter() - t))
    t = time.perf_counter()
    for _ in range(50):
        load_predictor(args.backend)
    memo_ms = 1000 * (time.perf_counter() - t) / 50

    # full collections that start and end inside a timed predict call
    full_gc_ms: list[float] = []
    in_predict = False
    started = 0.0

    def on_gc(phase: str, info: dict) -> None:
        nonlocal started
        if not in_predict or info["generation"] != 2:
            return
        if phase == "start":
            started = time.perf_counter()
        else:
            full_gc_ms.append(1000 * (time.perf_counter() - started))

    # MobileNetV2 variants the predictor has never seen (other widths, depths, sizes)
    distinct, distinct_cpu = [], []
    gc.callbacks.append(on_gc)
    try:
        for v in zoo.sample_variants("mobilenetv2", args.variants, seed=7):
            fresh = v.build()
            in_predict = True
            t, c = time.perf_counter(), time.process_time()
            pred.predict(fresh, check_device=False)
            distinct.append(1000 * (time.perf_counter() - t))
            distinct_cpu.append(1000 * (time.process_time() - c))
            in_predict = False
    finally:
        gc.callbacks.remove(on_gc)

    cells = zoo.sample_variants("nasbench201", args.n, seed=0)
    t = time.perf_counter()
    graphs = [v.build() for v in cells]
    build_ms = 1000 * (time.perf_counter() - t) / len(graphs)
    t = time.perf_counter()
    totals = pred.predict_many(graphs)
    cold_s = time.perf_counter() - t
    t = time.perf_counter()
    pred.predict_many(graphs)
    warm_s = time.perf_counter() - t
    # side by side: both paths over the same fresh distinct cells, memos emptied
    def empty_memos() -> None:
        pred._segments = None
        pred._totals = None
        pred._partition_cache.clear()

    rates: dict[bool, list[float]] = {True: [], False: []}
    worst = 0.0
    for r in range(args.rounds):
        batch = [v.build() for v in zoo.sample_variants("nasbench201", args.n, seed=100 + r)]
        got = {}
        for mode in ((True, False) if r % 2 else (False, True)):
            pred.use_segments = mode
            empty_memos()
            t = time.perf_counter()
            got[mode] = pred.predict_many(batch)
            rates[mode].append(len(batch) / (time.perf_counter() - t))
        worst = max(worst, max(abs(a - b) for a, b in zip(got[True], got[False])))
    pred.use_segments = True

    # The NAS-Bench-201 table (nnmeter.predictors.space_table): cells given as configs.
    # Filling: networks built and predicted into a table in memory only, per network
    # (the figure of a table's first fill). Lookups: rounds of --table-n distinct cells
    # (drawn without replacement from the 15,625) through predict_many, each round on a
    # table object read afresh from the predictor's cache folder (filled there first,
    # once, if it is not yet), checked against the built graphs for a sample.
    import numpy as np

    from nnmeter.predictors.space_table import NASBench201Table, live_classes, table_for
    from nnmeter.zoo.nasbench201 import NUM_CELLS, NASBench201Config, cell_from_index

    net = NASBench201Config()
    reps = np.unique(live_classes())
    mem = NASBench201Table(pred, net, None)
    t = time.perf_counter()
    mem.fill(reps[:args.table_fill])
    fill_rate = args.table_fill / (time.perf_counter() - t)
    on_disk = table_for(pred, net)
    t = time.perf_counter()
    filled_now = on_disk.fill(progress=True)
    fill_s = time.perf_counter() - t
    table_rates = []
    rng = np.random.default_rng(0)
    for r in range(args.rounds):
        cells = rng.choice(NUM_CELLS, args.table_n, replace=False)
        configs = [NASBench201Config(cell=cell_from_index(int(i))) for i in cells]
        pred._space_tables.clear()  # read from disk again
        t = time.perf_counter()
        got_ms = pred.predict_many(configs)
        table_rates.append(len(configs) / (time.perf_counter() - t))
    sample = [NASBench201Config(cell=cell_from_index(int(i)))
              for i in rng.choice(NUM_CELLS, 50, replace=False)]
    from nnmeter.zoo.nasbench201 import NASBench201Family

    built = pred.predict_many([NASBench201Family().build(c) for c in sample])
    table_worst = max(abs(a - b) for a, b in zip(pred.predict_many(sample), built))
    del got_ms
    out = {
        "backend": args.backend, "device": pred.device_name, "cached_load_s": load_s, "gc_freeze": args.gc_freeze,
        "mobilenetv2_first_ms": first_ms, "mobilenetv2_repeat_median_ms": statistics.median(times),
        "memo_check_ms": memo_ms,
        "api_predict_same_graph_median_ms": statistics.median(api_same),
        "api_predict_fresh_graph_median_ms": statistics.median(api_fresh),
        "mobilenetv2_distinct_variants": len(distinct),
        "mobilenetv2_distinct_variants_median_ms": statistics.median(distinct),
        "mobilenetv2_distinct_variants_max_ms": max(distinct),
        "mobilenetv2_distinct_variants_cpu_median_ms": statistics.median(distinct_cpu),
        "mobilenetv2_distinct_variants_cpu_max_ms": max(distinct_cpu),
        "mobilenetv2_distinct_full_gc_count": len(full_gc_ms),
        "mobilenetv2_distinct_full_gc_max_ms": max(full_gc_ms, default=0.0),
        "nasbench201_n": len(graphs), "nasbench201_distinct_models_per_s": len(graphs) / cold_s,
        "nasbench201_build_ms_per_graph": build_ms,
        "nasbench201_repeat_models_per_s": len(graphs) / warm_s,
        "nasbench201_mean_predicted_ms": sum(totals) / len(totals),
        "nasbench201_rounds": args.rounds,
        "nasbench201_segments_median_models_per_s": statistics.median(rates[True]),
        "nasbench201_whole_models_median_models_per_s": statistics.median(rates[False]),
        "nasbench201_segments_vs_whole_max_abs_diff_ms": worst,
        "nasbench201_table_fill_networks": args.table_fill,
        "nasbench201_table_fill_networks_per_s": fill_rate,
        "nasbench201_table_whole_fill_s": fill_s if filled_now else None,
        "nasbench201_table_n": args.table_n,
        "nasbench201_table_median_models_per_s": statistics.median(table_rates),
        "nasbench201_table_min_models_per_s": min(table_rates),
        "nasbench201_table_vs_built_max_abs_diff_ms": table_worst,
    }
    for k, v in out.items():
        print(f"{k:46s} {v:.4g}" if isinstance(v, float) else f"{k:46s} {v}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
