"""A latency-constrained architecture search with nnmeter as the latency model.

An evolutionary loop (tournament selection, one-field mutations) over NAS-Bench-201
cells or a MobileNetV2-like space, for one device's predictor. Every generation's
children are built and predicted in one batch (``predict_many``); NAS-Bench-201 cells
are looked up in the predictor's table of the space instead (its latency and FLOPs per
cell, each network built and predicted the first time it is asked for;
``nnmeter space nasbench201 -b BACKEND`` fills it whole, about half a minute). A child is feasible
when the **upper end of its 90 % prediction interval** is within the latency budget, so
a candidate that only probably fits is rejected. Among feasible candidates the search
maximises **FLOPs, as a stand-in for capacity**: nnmeter ships no accuracy table, so
plug your own score (a trained supernet, a zero-cost proxy, a lookup in NAS-Bench-201's
accuracies) into ``score()``. A candidate seen before is not scored again.

Usage::

    python examples/nas_search.py [--space nasbench201|mobilenetv2] [--backend ort-cpu]
        [--budget-ms MS] [--seconds 60] [--population 128] [--plot pareto.png] [--json]

Without ``--budget-ms`` the budget is the median predicted latency of the first
population. It prints candidates scored per second, the feasible share, the best
candidate and the Pareto front of (upper-bound latency, FLOPs); ``--plot`` draws it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import sys
import time

import numpy as np

from nnmeter import zoo
from nnmeter.predictors import load_predictor


def mutate(config, family, rng):
    """One field of ``config`` replaced from a fresh sample: one element of a tuple
    field (a cell's edge, one block), else the whole field."""
    fresh = family.sample(rng)
    fields = [f.name for f in dataclasses.fields(config)
              if getattr(config, f.name) != getattr(fresh, f.name)]
    if not fields:
        return fresh
    name = fields[rng.integers(len(fields))]
    old, new = getattr(config, name), getattr(fresh, name)
    if isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new) and old:
        i = int(rng.integers(len(old)))
        new = old[:i] + (new[i],) + old[i + 1:]
    return dataclasses.replace(config, **{name: new})


def score(graph) -> float:
    """What the search maximises among candidates within the budget: FLOPs (a capacity
    proxy; replace with an accuracy estimate of your own)."""
    return float(graph.cost().flops)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both (lower ms, higher score)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", default="nasbench201", choices=["nasbench201", "mobilenetv2"])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--device", default=None, help="predict for this device (default: here)")
    ap.add_argument("--budget-ms", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--population", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=None, metavar="FILE")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    pred = load_predictor(args.backend, device=args.device)
    if pred.intervals is None:
        print(f"warning: {args.backend}@{pred.device_name} has no calibrated intervals; the "
              f"budget is checked on the prediction itself", file=sys.stderr)
    family = zoo.get_family(args.space)
    rng = np.random.default_rng(args.seed)
    seen: dict = {}  # config -> (ms, upper ms, score)
    t0 = time.perf_counter()
    t_build = t_pred = 0.0

    def evaluate(configs):
        nonlocal t_build, t_pred
        new = [c for c in dict.fromkeys(configs) if c not in seen]
        if args.space == "nasbench201":
            # the predictor's table of the space: each network is built and predicted
            # once (the first search on a predictor fills it), then looked up, FLOPs too
            from nnmeter.predictors.space_table import cell_indices, table_for

            t = time.perf_counter()
            rows = (table_for(pred, new[0]).rows(cell_indices(new)) if new
                    else np.zeros((3, 0)))
            t_pred += time.perf_counter() - t
            for c, m, flops in zip(new, rows[0], rows[1]):
                band = pred.interval(float(m))
                seen[c] = (float(m), band[1] if band else float(m), float(flops))
            return
        t = time.perf_counter()
        graphs, kept = [], []
        for c in new:
            try:
                graphs.append(family.build(c))
                kept.append(c)
            except ValueError:
                seen[c] = None  # a mutation the space does not allow
        t_build += time.perf_counter() - t
        t = time.perf_counter()
        ms = pred.predict_many(graphs) if graphs else []
        t_pred += time.perf_counter() - t
        for c, g, m in zip(kept, graphs, ms):
            band = pred.interval(m)
            seen[c] = (m, band[1] if band else m, score(g))

    population = [family.sample(rng) for _ in range(args.population)]
    evaluate(population)
    # Building graphs allocates many small objects, and Python's cyclic collector runs
    # every 700 of them, walking ever more of the predictor's growing memos: half of a
    # search's time. Graphs are freed by reference counting, so this process collects
    # rarely (a choice for a search loop; nnmeter itself never changes the collector).
    gc.freeze()
    gc.set_threshold(200_000, 50, 100)
    budget = args.budget_ms or float(np.median([seen[c][1] for c in population if seen[c]]))

    def fitness(c) -> float:
        v = seen.get(c)
        return -math.inf if v is None or v[1] > budget else v[2]

    generations = 0
    while time.perf_counter() - t0 < args.seconds:
        generations += 1
        children: dict = {}
        for _ in range(8 * args.population):  # new candidates only: a seen one is not news
            if len(children) >= args.population:
                break
            a, b = (population[i] for i in rng.integers(len(population), size=2))
            child = mutate(a if fitness(a) >= fitness(b) else b, family, rng)
            if child not in seen:
                children[child] = None
        for _ in range(8 * args.population):
            # a population stuck among seen neighbours takes random immigrants
            if len(children) >= args.population:
                break
            fresh = family.sample(rng)
            if fresh not in seen:
                children[fresh] = None
        if not children:
            break  # nothing new left to score
        evaluate(list(children))
        children = list(children)
        pool = list(dict.fromkeys(population + children))
        pool.sort(key=fitness, reverse=True)
        population = pool[:args.population]
    wall = time.perf_counter() - t0

    scored = [(c, v) for c, v in seen.items() if v is not None]
    feasible = [(c, v) for c, v in scored if v[1] <= budget]
    points = [(v[1], v[2]) for _, v in scored]
    front = [scored[i] for i in pareto(points)]
    best = max(feasible, key=lambda cv: cv[1][2]) if feasible else None
    out = {"space": args.space, "backend": args.backend, "device": pred.device_name,
           "budget_ms": budget, "interval_level": pred.intervals.level if pred.intervals
           else None, "seconds": round(wall, 1), "generations": generations,
           "candidates_scored": len(scored), "per_second": round(len(scored) / wall, 1),
           "build_share": round(t_build / wall, 3), "predict_share": round(t_pred / wall, 3),
           "feasible": len(feasible),
           "best": {"config": repr(best[0]), "ms": best[1][0], "upper_ms": best[1][1],
                    "flops": best[1][2]} if best else None,
           "pareto": [{"upper_ms": v[1], "flops": v[2]} for _, v in front]}
    if args.plot:
        import nnmeter.plots as plots

        plt = plots._plt()
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        ax.scatter([p[0] for p in points], [p[1] / 1e6 for p in points], s=4, alpha=0.3,
                   color="#999999", label="scored")
        ax.plot([v[1] for _, v in front], [v[2] / 1e6 for _, v in front], marker="o", ms=3,
                color="#c03030", label="Pareto front")
        ax.axvline(budget, color="#3060c0", ls="--", lw=1, label=f"budget {budget:.2f} ms")
        ax.set_xlabel("upper end of the 90 % interval (ms)" if pred.intervals
                      else "predicted ms")
        ax.set_ylabel("MFLOPs (capacity proxy)")
        ax.set_title(f"{args.space} on {args.backend}@{pred.device_name}: "
                     f"{len(scored)} candidates in {wall:.0f} s", fontsize=9)
        ax.legend(fontsize=8)
        out["plot"] = str(plots._save(fig, args.plot))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{args.space} on {args.backend}@{pred.device_name}, budget {budget:.3f} ms "
          f"(upper end of the interval): {len(scored)} candidates scored in {wall:.1f} s "
          f"({out['per_second']:.0f}/s; build {100 * out['build_share']:.0f} %, predict "
          f"{100 * out['predict_share']:.0f} %), {len(feasible)} feasible, "
          f"{generations} generations")
    if best:
        print(f"best within budget: {best[1][0]:.3f} ms (upper {best[1][1]:.3f}), "
              f"{best[1][2] / 1e6:.1f} MFLOPs: {best[0]!r}"[:400])
    print(f"Pareto front: {len(front)} candidates")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
