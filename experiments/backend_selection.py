"""Backend selection over the zoo's base models: does the predicted fastest backend
match the measured fastest (or come within 5 % of it)?

Usage: flock /tmp/nnmeter-measure.lock python experiments/backend_selection.py \
           [--backends ort-cpu,litert-cpu,...] [--families ...] [--json out.json]
Measures every base model on every backend (one Profiler per backend, in turn).

``--reuse-measured FILE`` takes the measured latencies from an earlier run's JSON
instead (same machine fingerprint: each backend's current fingerprint must match the
one stored there), so that a retrained predictor can be re-scored without re-measuring.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backends", default=None)
    ap.add_argument("--families", default=None)
    ap.add_argument("--json", default="experiments/results/backend_selection.json")
    ap.add_argument("--reuse-measured", default=None, metavar="FILE",
                    help="measured latencies from an earlier run's JSON (no measuring)")
    args = ap.parse_args()
    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.evaluate import kendall
    from nnmeter.predictors import available_predictors, load_predictor

    backends = args.backends.split(",") if args.backends else available_predictors()
    fams = args.families.split(",") if args.families else [
        f for f in zoo.FAMILY_NAMES if f != "nasbench201"]
    graphs = {f: zoo.base_variant(f).build() for f in fams}
    predicted = {b: {f: load_predictor(b).predict(g, check_device=False).total_ms
                     for f, g in graphs.items()} for b in backends}
    measured: dict[str, dict[str, float]] = {}
    fingerprints: dict[str, str | None] = {}
    if args.reuse_measured:
        from nnmeter.backends import get_backend

        old = json.loads(Path(args.reuse_measured).read_text())
        stored = old.get("fingerprints", {})
        for b in backends:
            now = get_backend(b).device_info().fingerprint_id
            if stored.get(b) not in (None, now):
                raise SystemExit(f"{args.reuse_measured}: {b} was measured on fingerprint "
                                 f"{stored[b]}, this machine is {now}; measure again")
            fingerprints[b] = now
            measured[b] = {r["family"]: r["measured"].get(b, float("nan"))
                           for r in old["models"] if r["family"] in graphs}
    else:
        for b in backends:
            with Profiler(b) as prof:
                measured[b] = {}
                fingerprints[b] = None
                for f, g in graphs.items():
                    m = prof.measure(g, on_error="record")
                    measured[b][f] = m.latency_ms if m.ok else float("nan")
                    if m.device is not None:
                        fingerprints[b] = m.device.fingerprint_id
    hits = within5 = 0
    rows = []
    for f in fams:
        ok = [b for b in backends if measured[b].get(f, float("nan")) == measured[b].get(f)]
        if len(ok) < 2:
            continue
        pb = min(ok, key=lambda b: predicted[b][f])
        mb = min(ok, key=lambda b: measured[b][f])
        hit = pb == mb
        w5 = measured[pb][f] <= 1.05 * measured[mb][f]
        hits += hit
        within5 += w5
        tau = kendall([predicted[b][f] for b in ok], [measured[b][f] for b in ok])
        rows.append({"family": f, "predicted_best": pb, "measured_best": mb, "hit": hit,
                     "within5": w5, "kendall_tau": tau,
                     "predicted": {b: predicted[b][f] for b in ok},
                     "measured": {b: measured[b][f] for b in ok}})
        print(f"{f:14s} predicted {pb:13s} measured {mb:13s} "
              f"{'hit' if hit else ('within 5%' if w5 else 'miss'):9s} tau={tau:.2f}")
    n = len(rows)
    print(f"\n{hits}/{n} predicted fastest = measured fastest; {within5}/{n} within 5 %")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"backends": backends, "models": rows,
                                           "hits": hits, "within5": within5, "n": n,
                                           "fingerprints": fingerprints,
                                           "measured_from": args.reuse_measured or "this run"},
                                          indent=1, default=str))


if __name__ == "__main__":
    main()
