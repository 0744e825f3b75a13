"""Build cost per backend: kernel measurements and minutes, from the datasets on disk.

Usage: python experiments/build_cost.py [--json out.json]
Reads datasets/kernels/<backend>@<device>/ (this machine's, else the nearest device's:
rows, rounds.jsonl, builds.jsonl); measures nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default="experiments/results/build_cost.json")
    args = ap.parse_args()
    from nnmeter.predictors import available_predictors
    from nnmeter.devices.datasets import kernel_dataset_for
    from nnmeter.predictors.dataset import KernelDataset

    out = {}
    print(f"{'backend':14s} {'types':>5s} {'measured':>9s} {'failed':>7s} {'minutes':>8s}")
    for b in available_predictors():
        ds = KernelDataset(kernel_dataset_for(b), b)
        n_ok = n_fail = 0
        per_type = {}
        for t in ds.kernel_types():
            rows = ds.rows(t)
            ok = sum(1 for r in rows if r.get("ok", True) and r.get("latency_ms"))
            per_type[t] = ok
            n_ok += ok
            n_fail += len(rows) - ok
        builds_file = ds.directory / "builds.jsonl"
        builds = [json.loads(x) for x in builds_file.read_text().splitlines()] \
            if builds_file.exists() else []
        minutes = sum(b_["minutes"] for b_ in builds)
        out[b] = {"measurements": n_ok, "failed": n_fail, "minutes": minutes,
                  "builds": len(builds), "per_type": per_type,
                  "fingerprint_id": ds.fingerprint_id}
        print(f"{b:14s} {len(per_type):5d} {n_ok:9d} {n_fail:7d} {minutes:8.1f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
