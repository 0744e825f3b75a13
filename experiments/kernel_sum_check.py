"""Composition check: is a model's error the regressors' or the kernel sum's?

For a few model-level test variants (datasets/models/ort-cpu@<device>/seed1000.jsonl)
this measures the whole model and then every distinct kernel of it *alone* (its
single-kernel model, the same protocol as the builder), removes the per-inference
overhead and the NCHWc reorders exactly as training does, and prints three totals: the
measured model, the sum of the kernels' own measured times, and the prediction. When the
prediction tracks the kernel sum but the model differs, the kernels behave differently
inside the model.

Usage (ort-cpu only; under the measurement lock):
  flock /tmp/nnmeter-measure.lock python experiments/kernel_sum_check.py nasbench201 0,1,2
"""
import json, sys, collections
import numpy as np
from nnmeter import zoo
from nnmeter.backends import Profiler
from nnmeter.predictors import load_predictor
from nnmeter.partition import partition
from nnmeter.predictors.layout import reorder_elements
from nnmeter.devices.datasets import model_set_path
fam = sys.argv[1]; idxs = [int(x) for x in sys.argv[2].split(",")]
pred = load_predictor("ort-cpu")
ov = pred.overhead_ms; reorders = pred.composition.get("reorders")
fixed, per = reorders.line; block = reorders.block
rows = [json.loads(l) for l in open(model_set_path("ort-cpu", 1000))]
names = sorted({r["variant"] for r in rows if r["family"] == fam and r["ok"]})
with Profiler("ort-cpu") as prof:
    for i in idxs:
        name = names[i]; g = zoo.get_variant(name).build()
        rep = pred.predict(g)
        ks = partition(g, pred.rules)
        m = prof.measure(g).latency_ms
        cache = {}; tot = 0.0; by = collections.defaultdict(lambda: [0.0, 0.0])
        for k, row in zip(ks, rep.rows):
            key = (k.type, k.config)
            if key not in cache:
                kg = k.kernel_type.build_graph(k.config)
                t = prof.measure(kg).latency_ms
                n_in, n_out = reorder_elements(k.kernel_type, k.config, block)
                extra = n_out if "add" in k.type.split("-")[1:] else 0
                sub = sum(fixed + per * n for n in (n_in, n_out, extra) if n)
                cache[key] = max(t - ov - sub, 0.25 * (t - ov))
            tot += cache[key]
            by[k.type][0] += cache[key]; by[k.type][1] += row.predicted_ms
        print(f"{name}: model measured {m:.4f}  sum of measured kernels {tot + ov + rep.layout_ms:.4f}  predicted {rep.total_ms:.4f}", flush=True)
        for t, (a, b) in sorted(by.items()):
            print(f"    {t:18s} measured-kernels {a:.4f}  predicted {b:.4f}")
