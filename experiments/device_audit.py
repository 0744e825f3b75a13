"""Audit: does every committed kernel dataset come from one device?

Round 1 recorded a fingerprint (CPU model name, cores, runtime, settings) that an AVX2
and an AVX-512 machine share, so a dataset's rows could mix two devices without any
field showing it. The rows' timestamps do show the build sessions that wrote them. This
re-measures, on this machine, a sample of each session's rows (the same configurations,
one at a time, through the normal profiler) and compares: rows of this device's kind
re-measure near their stored time; rows from a slower machine (an AVX2 one runs these
kernels 1.6-1.9x slower) re-measure far faster than stored.

Usage:
  flock /tmp/nnmeter-measure.lock python experiments/device_audit.py \
      [--backends ort-cpu,litert-cpu,openvino-cpu,mnn-cpu] [--per-session 8]

Writes experiments/results/device_audit.{txt,json}. A session whose median ratio
(now / stored) is below 0.75 or above 1.33 is flagged as measured on another device.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

#: rows further apart than this in time belong to different build sessions
SESSION_GAP_S = 1800
OUT = Path(__file__).resolve().parent / "results"


def _sessions(rows: list[dict]) -> list[list[dict]]:
    rows = sorted(rows, key=lambda r: r["timestamp"])
    out: list[list[dict]] = []
    last = None
    for r in rows:
        t = time.mktime(time.strptime(r["timestamp"], "%Y-%m-%dT%H:%M:%S"))
        if last is None or t - last > SESSION_GAP_S:
            out.append([])
        out[-1].append(r)
        last = t
    return out


def main() -> None:
    from nnmeter.backends import Profiler
    from nnmeter.devices.datasets import kernel_dataset_for
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors.dataset import KernelDataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="ort-cpu,litert-cpu,openvino-cpu,mnn-cpu")
    ap.add_argument("--per-session", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    report: dict = {"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "backends": {}}
    lines = []
    for b in args.backends.split(","):
        ds = KernelDataset(kernel_dataset_for(b), b)
        rows = [{**r, "kernel_type": t} for t in ds.kernel_types() for r in ds.rows(t)
                if r.get("ok", True) and r.get("latency_ms") and r.get("timestamp")
                and 0.02 <= r["latency_ms"] <= 20]
        sessions = _sessions(rows)
        rng = np.random.default_rng(args.seed)
        res = []
        with Profiler(b) as prof:
            device = None
            for s in sessions:
                pick = rng.choice(len(s), size=min(args.per_session, len(s)), replace=False)
                ratios = []
                for i in sorted(pick):
                    r = s[int(i)]
                    kt = KERNEL_TYPES.get(r["kernel_type"])
                    g = kt.build_graph(kt.config_from_dict(r["config"]))
                    m = prof.measure(g, on_error="record")
                    if m.ok:
                        ratios.append(m.latency_ms / r["latency_ms"])
                        device = m.device
                med = float(np.median(ratios)) if ratios else float("nan")
                within = float(np.mean([abs(x - 1) <= 0.10 for x in ratios])) if ratios \
                    else float("nan")
                flag = bool(ratios) and not (0.75 <= med <= 1.33)
                res.append({"first": s[0]["timestamp"], "last": s[-1]["timestamp"],
                            "rows": len(s), "measured": len(ratios), "median_ratio": med,
                            "within_10": within, "ratios": ratios,
                            "fingerprints": sorted({str(r.get("fingerprint_id")) for r in s}),
                            "other_device": flag})
                lines.append(f"{b:13s} {s[0]['timestamp']} .. {s[-1]['timestamp']} rows "
                             f"{len(s):5d}  re-measured {len(ratios):2d}  now/stored median "
                             f"{med:5.2f}  within ±10 % {100 * within:5.1f} %"
                             + ("  <- another device?" if flag else ""))
                print(lines[-1], flush=True)
        report["backends"][b] = {"dataset": str(ds.directory), "sessions": res,
                                 "device": device.as_dict() if device else None,
                                 "flagged": sum(r["other_device"] for r in res)}
    head = [f"# device audit, {report['created']}, on "
            f"{next((v['device'] or {}).get('name', '?') for v in report['backends'].values())}",
            "# command: flock /tmp/nnmeter-measure.lock python experiments/device_audit.py",
            "# per build session (rows > 30 min apart), a sample of its rows re-measured here;"
            " ratio = now / stored"]
    OUT.mkdir(exist_ok=True)
    (OUT / "device_audit.txt").write_text("\n".join(head + lines) + "\n")
    (OUT / "device_audit.json").write_text(json.dumps(report, indent=1))
    print("flagged sessions:", {b: v["flagged"] for b, v in report["backends"].items()})


if __name__ == "__main__":
    main()
