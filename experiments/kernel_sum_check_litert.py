"""Composition check on litert-cpu: is a model's error the regressors' or the kernel sum's?

For model-level test variants (datasets/models/litert-cpu@<device>/seed1000.jsonl) this
measures the whole model twice (the least is kept, as the model-level report does) and
then every distinct kernel of it *alone* (its single-kernel .tflite model, the protocol
of the builder), removes the per-inference overhead as training does, and prints three
totals: the measured model, the sum of the kernels' own measured times and the
prediction, then the same split per kernel type. When the prediction tracks the kernel
sum but the model differs, the kernels behave differently inside the model
(composition); when the prediction differs from the kernel sum, the regressors are off
(regression error).

LiteRT has no blocked layout, so unlike ``kernel_sum_check.py`` (ort-cpu) there are no
reorders to remove.

Usage (under the measurement lock)::

  flock /tmp/nnmeter-measure.lock python experiments/kernel_sum_check_litert.py \\
      mobilenetv2 3,8 proxylessnas 16 --json experiments/results/kernel_sum_check_litert-cpu.json

Arguments come in pairs: a zoo family and comma-separated indices into that family's
measured variants (sorted by name). ``--json`` writes every kernel's row (type, config,
measured alone, predicted) for a closer look at the regressors.

Two cuts say *where* a model's extra time goes:

* ``--cut-dw``: the model and the model without its stride-1 depthwise kernels (each
  bypassed; they keep the shape) are measured alternately three times; the difference
  of the least times is what those kernels cost inside the model, printed next to
  their summed single-kernel times.
* ``--prefix K``: the model's kernels (in topological order) are split into K runs of
  about equal predicted time; the prefix ending with each run is measured (least of
  two), and each run's increment is printed next to its kernels' single-kernel sum.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter import zoo  # noqa: E402
from nnmeter.backends import Profiler  # noqa: E402
from nnmeter.partition import partition  # noqa: E402
from nnmeter.predictors import load_predictor  # noqa: E402
from model_accuracy import SEED, _rows  # noqa: E402  (this folder)

BACKEND = "litert-cpu"


def measured_variants(family: str, seed: int = SEED) -> list[str]:
    return sorted({r["variant"] for r in _rows(BACKEND, seed)
                   if r["family"] == family and r.get("ok")})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="family indices [family indices ...]")
    ap.add_argument("--json", metavar="FILE", help="also write the rows to FILE")
    ap.add_argument("--seed", type=int, default=1000,
                    help="the model-level set the indices refer to (default 1000, the test "
                         "set; 2000: datasets/models/litert-cpu@<device>/seed2000.jsonl)")
    ap.add_argument("--cut-dw", action="store_true",
                    help="also measure the model without its stride-1 depthwise kernels")
    ap.add_argument("--cut-kernel", default="", metavar="SIZES",
                    help="with --cut-dw, bypass only depthwise kernels of these comma-"
                         "separated window sizes (default: every size)")
    ap.add_argument("--prefix", type=int, default=0, metavar="K",
                    help="also measure K prefixes of the model")
    args = ap.parse_args()
    if len(args.pairs) % 2:
        ap.error("arguments come in pairs: family and comma-separated indices")
    pred = load_predictor(BACKEND)
    ov = pred.overhead_ms
    out = []
    cache: dict[tuple[str, object], float] = {}  # kernels shared across models: once
    with Profiler(BACKEND) as prof:
        for fam, idx in zip(args.pairs[::2], args.pairs[1::2]):
            names = measured_variants(fam, args.seed)
            for i in (int(x) for x in idx.split(",")):
                name = names[i]
                g = zoo.get_variant(name).build()
                rep = pred.predict(g, check_device=False)
                ks = partition(g, pred.rules)
                model_ms = min(prof.measure(g).latency_ms for _ in range(2))
                by = collections.defaultdict(lambda: [0, 0.0, 0.0])
                kernels = []
                for k, row in zip(ks, rep.rows):
                    key = (k.type, k.config)
                    if key not in cache:
                        kg = k.kernel_type.build_graph(k.config)
                        cache[key] = prof.measure(kg).latency_ms - ov
                    alone = cache[key]
                    by[k.type][0] += 1
                    by[k.type][1] += alone
                    by[k.type][2] += row.predicted_ms
                    kernels.append({"type": k.type, "nodes": list(k.nodes),
                                    "features": list(row.features),
                                    "alone_ms": round(alone, 5),
                                    "predicted_ms": round(row.predicted_ms, 5),
                                    "estimated_by": row.estimated_by})
                ksum = sum(v[1] for v in by.values()) + ov
                alone_of = [cache[(k.type, k.config)] for k in ks]
                if args.cut_dw:
                    sizes = {int(x) for x in args.cut_kernel.split(",") if x}
                    cut_rec = cut_depthwise(prof, g, ks, alone_of, sizes)
                if args.prefix:
                    prefix_rec = prefixes(prof, g, ks, alone_of, rep, args.prefix)
                rec = {"variant": name, "family": fam, "model_ms": round(model_ms, 4),
                       "kernel_sum_ms": round(ksum, 4), "predicted_ms": round(rep.total_ms, 4),
                       "by_type": {t: {"n": v[0], "alone_ms": round(v[1], 4),
                                       "predicted_ms": round(v[2], 4)}
                                   for t, v in sorted(by.items())},
                       "kernels": kernels}
                if args.cut_dw:
                    rec["cut_dw"] = cut_rec
                if args.prefix:
                    rec["prefix"] = prefix_rec
                out.append(rec)
                print(f"{name}: model measured {model_ms:.4f}  sum of measured kernels "
                      f"{ksum:.4f} ({ksum / model_ms:.3f})  predicted {rep.total_ms:.4f} "
                      f"({rep.total_ms / model_ms:.3f})", flush=True)
                for t, (n, a, b) in sorted(by.items()):
                    print(f"    {t:18s} n={n:3d} measured-kernels {a:.4f}  predicted {b:.4f}",
                          flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def cut_depthwise(prof, g, ks, alone_of, sizes: set[int]) -> dict:
    """In-model cost of the stride-1 depthwise kernels (of window ``sizes``; empty: all):
    model minus model without them."""
    cut = g.copy(name=f"{g.name}-nodw")
    removed = [(k, a) for k, a in zip(ks, alone_of)
               if k.type.startswith("dwconv") and k.config.stride == 1
               and (not sizes or k.config.kernel in sizes)]
    for k, _ in removed:
        for node in reversed(k.nodes):
            cut.bypass(node)
    full, without = [], []
    for _ in range(3):
        full.append(prof.measure(g).latency_ms)
        without.append(prof.measure(cut).latency_ms)
    in_model = min(full) - min(without)
    alone = sum(a for _, a in removed)
    print(f"    cut stride-1 dwconv {sorted(sizes) or 'all'} (n={len(removed)}): in model {in_model:.4f}  alone "
          f"{alone:.4f}  ratio {in_model / alone:.3f}   (full {min(full):.4f}, "
          f"without {min(without):.4f})", flush=True)
    return {"kernel_sizes": sorted(sizes), "n": len(removed), "in_model_ms": round(in_model, 4), "alone_ms": round(alone, 4),
            "full_ms": [round(x, 4) for x in full], "without_ms": [round(x, 4) for x in without]}


def prefixes(prof, g, ks, alone_of, rep, n_runs: int) -> list[dict]:
    """Increments of K growing prefixes of the model against their kernels' sums."""
    pred = [r.predicted_ms for r in rep.rows]
    total = sum(pred)
    bounds, acc, goal = [], 0.0, total / n_runs
    for j, p in enumerate(pred):
        acc += p
        if acc >= goal * (len(bounds) + 1) - 1e-12 or j == len(pred) - 1:
            bounds.append(j + 1)
    bounds = sorted(set(bounds))
    inputs = [n for n in g.input_names]
    out, last_ms, last_j = [], 0.0, 0
    for j in bounds:
        names = inputs + [n for k in ks[:j] for n in k.nodes]
        sub = g.subgraph(names, name=f"{g.name}-p{j}")
        ms = min(prof.measure(sub).latency_ms for _ in range(2))
        alone = sum(alone_of[last_j:j])
        inc = ms - last_ms
        kinds = collections.Counter(k.type for k in ks[last_j:j])
        print(f"    kernels {last_j:3d}-{j:3d}: prefix {ms:.4f}  increment {inc:.4f}  alone "
              f"{alone:.4f}  ratio {inc / alone:.3f}  {dict(kinds)}", flush=True)
        out.append({"kernels": [last_j, j], "prefix_ms": round(ms, 4),
                    "increment_ms": round(inc, 4), "alone_ms": round(alone, 4),
                    "types": dict(kinds)})
        last_ms, last_j = ms, j
    return out


if __name__ == "__main__":
    raise SystemExit(main())
