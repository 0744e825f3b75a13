"""Drift of the model-level test set: re-measure stored variants now, compare with then.

The stored set is this machine's ``datasets/models/ort-cpu@<device>/seed1000.jsonl``.

Prints, per variant, the stored pass times with their timestamp, the fresh measurement and
the ratio; then the median ratio and the share within ±10 % / ±5 %. Saves nothing.

Usage: flock /tmp/nnmeter-measure.lock python experiments/measurement_drift.py mobilenetv2,mnasnet
"""
import json, sys, numpy as np
from nnmeter import zoo
from nnmeter.backends import Profiler
from nnmeter.devices.datasets import model_set_path
fams = sys.argv[1].split(",")
rows = [json.loads(l) for l in open(model_set_path("ort-cpu", 1000))]
by = {}
for r in rows:
    if r.get("ok") and r.get("latency_ms") and r["family"] in fams:
        by.setdefault(r["variant"], []).append((r["latency_ms"], r["timestamp"]))
ratios = []
with Profiler("ort-cpu") as prof:
    for n, l in sorted(by.items()):
        m = prof.measure(zoo.get_variant(n).build()).latency_ms
        ratios.append(m / min(x for x, _ in l))
        print(n, "then", "/".join("%.3f" % x for x, _ in l), l[0][1], "now %.3f" % m, "ratio %.3f" % ratios[-1], flush=True)
r = np.array(ratios)
print("median now/then %.3f; within ±10 %%: %.2f; within ±5 %%: %.2f" % (np.median(r), np.mean(np.abs(r - 1) <= .1), np.mean(np.abs(r - 1) <= .05)))
