"""Cold weights: measure the streaming rate, and check it against classifiers in models.

1. ``--write``: time the calibration fc kernels (67 and 101 MB of weights) on each
   backend and store ``datasets/kernels/<backend>@<device>/weight_stream.json``
   (:mod:`nnmeter.predictors.weight_stream`).
2. For the first ``--variants`` test variants of each ``--family``
   (``datasets/models/<backend>@<device>/seed1000.jsonl``), measure the model and the
   model cut before its first fc, alternately, ``--repeats`` times. Their difference is
   what the classifier costs *inside* the model. It is printed next to the classifier's
   prediction from single-kernel data alone (weights hot) and with the cold-weight
   floor.

Run under the measurement lock::

    flock /tmp/nnmeter-measure.lock python experiments/weight_stream_check.py \\
        --backend ort-cpu --write --family mobilenetv2,mnasnet,mobilenetv3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter import zoo  # noqa: E402
from nnmeter.backends import Profiler  # noqa: E402
from nnmeter.predictors import load_predictor  # noqa: E402
from nnmeter.devices.datasets import model_set_path, own_dataset_dir  # noqa: E402
from nnmeter.predictors.weight_stream import (measure_weight_stream,  # noqa: E402
                                              write_weight_stream)


def cut_before_first_fc(g):
    """(the graph without its classifier, names of the removed nodes)."""
    order = [n.name for n in g.topological_nodes()]
    first = next(n for n in g.topological_nodes() if n.op == "fc")
    tail = order[order.index(first.name):]
    cut = g.copy(name=f"{g.name}-cut")
    cut.outputs = [first.inputs[0]]
    for name in reversed(tail):
        cut.remove(name)
    return cut, set(tail)


def variants(backend: str, family: str, n: int) -> list[str]:
    path = model_set_path(backend, 1000)
    names = sorted({json.loads(line)["variant"] for line in path.open()
                    if f'"family": "{family}"' in line and '"ok": true' in line})
    return names[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", required=True)
    ap.add_argument("--write", action="store_true",
                    help="measure and store the streaming rate first")
    ap.add_argument("--family", default="", help="comma-separated zoo families to check")
    ap.add_argument("--variants", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="also write the rows to FILE")
    args = ap.parse_args()
    out = []
    for backend in args.backend:
        if args.write:
            rec = measure_weight_stream(backend, own_dataset_dir(backend))
            write_weight_stream(own_dataset_dir(backend), rec)
            print(f"{backend}: {rec['bytes_per_ms'] / 1e6:.1f} GB/s "
                  f"(points {rec['rates_gb_s']} GB/s)", flush=True)
        families = [f for f in args.family.split(",") if f]
        if not families:
            continue
        pred = load_predictor(backend)
        rate = pred._stream_rate
        with Profiler(backend) as prof:
            for fam in families:
                for name in variants(backend, fam, args.variants):
                    g = zoo.get_variant(name).build()
                    cut, tail = cut_before_first_fc(g)
                    diffs = []
                    for _ in range(args.repeats):
                        diffs.append(prof.measure(g).latency_ms - prof.measure(cut).latency_ms)
                    # with the floor, then without it (the floor is applied only while
                    # the predictor has a rate)
                    cold = sum(r.predicted_ms for r in pred.predict(g, check_device=False).rows
                               if set(r.nodes) & tail)
                    pred._stream_rate = 0.0
                    hot = sum(r.predicted_ms for r in pred.predict(g, check_device=False).rows
                              if set(r.nodes) & tail)
                    pred._stream_rate = rate
                    row = {"backend": backend, "variant": name,
                           "in_model_ms": [round(d, 4) for d in diffs],
                           "median_in_model_ms": round(float(np.median(diffs)), 4),
                           "predicted_hot_ms": round(hot, 4),
                           "predicted_floor_ms": round(cold, 4)}
                    out.append(row)
                    print(f"{backend} {name:38s} classifier in model "
                          f"{row['median_in_model_ms']:.3f} ms ({', '.join(f'{d:.3f}' for d in diffs)})"
                          f"  predicted hot {hot:.3f}  with floor {cold:.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
