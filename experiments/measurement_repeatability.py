"""How repeatable are nnmeter's measurements? Measure N models twice, compare.

Measures ``--models`` zoo variants (exported to ONNX, and to TFLite when the TFLite
exporter is available) on every available backend, in two passes at least
``--gap-s`` seconds apart; each pass starts fresh worker processes. Prints, per
backend and per candidate statistic, the share of models whose two measurements
agree within ±2 %, ±5 %, ±10 %, the median |run2/run1 - 1|, and the per-measurement
overhead (wall ms per model beyond the timed runs).

Raw results are appended to ``--out`` (JSONL) as they come; rerunning with the same
``--out`` resumes. Run it under the machine-wide lock::

    flock /tmp/nnmeter-measure.lock .venv/bin/python experiments/measurement_repeatability.py \
        --models 30 --out datasets/repeatability/run1.jsonl

Figures only come from real runs; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("measurement_repeatability")

DEFAULT_BACKENDS = ("ort-cpu", "litert-cpu", "openvino-cpu", "mnn-cpu")


def build_models(n: int, seed: int, max_mflops: float, outdir: Path,
                 formats: tuple[str, ...]) -> list[dict[str, Any]]:
    """``n`` zoo variants under ``max_mflops``, round-robin over families, exported."""
    from nnmeter import zoo
    from nnmeter.exporters import export

    outdir.mkdir(parents=True, exist_ok=True)
    fams = list(zoo.FAMILY_NAMES)
    pools = {f: zoo.sample_variants(f, 12, seed=seed) for f in fams}
    chosen: list[dict[str, Any]] = []
    i = 0
    while len(chosen) < n and any(pools.values()):
        fam = fams[i % len(fams)]
        i += 1
        if not pools[fam]:
            continue
        v = pools[fam].pop(0)
        g = v.build()
        mflops = g.cost().flops / 1e6
        if mflops > max_mflops:
            continue
        files = {}
        for fmt in formats:
            path = outdir / f"{v.name}.{fmt}"
            if not path.exists():
                try:
                    export(g, path, fmt)
                except Exception as err:  # one model that will not export is skipped
                    logger.warning("cannot export %s to %s: %s", v.name, fmt, err)
                    continue
            files[fmt] = str(path)
        chosen.append({"name": v.name, "family": fam, "mflops": mflops, "files": files})
    return chosen


def load_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning("skipping a torn line in %s", path)
    return rows


def run_pass(pass_no: int, models: list[dict[str, Any]], backends: list[str], out: Path,
             done: set[tuple[int, str, str]], protocol: dict[str, Any]) -> None:
    from nnmeter.backends import Profiler, get_backend

    for bid in backends:
        fmt = get_backend(bid).model_format
        todo = [m for m in models if fmt in m["files"] and (pass_no, bid, m["name"]) not in done]
        if not todo:
            continue
        with Profiler(bid) as prof:
            for m in todo:
                meas = prof.measure(m["files"][fmt], **protocol)
                row = {"pass": pass_no, "backend": bid, "model": m["name"],
                       "family": m["family"], "mflops": m["mflops"], "time": time.time(),
                       "measurement": meas.as_dict()}
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                logger.info("pass %d %s %s: %.4g ms (%s)", pass_no, bid, m["name"],
                            meas.latency_ms, "ok" if meas.ok else meas.error)


def analyse(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per backend and statistic: agreement shares, median deviation, overhead."""
    by: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for r in rows:
        if r["measurement"].get("ok"):
            by[(r["backend"], r["model"])][r["pass"]] = r["measurement"]
    out: dict[str, Any] = {}
    for bid in sorted({b for b, _ in by}):
        pairs = [(v[1], v[2]) for (b, _), v in by.items() if b == bid and 1 in v and 2 in v]
        if not pairs:
            continue
        stats_names = sorted(pairs[0][0]["extra"].get("stats", {}))
        per_stat = {}
        for s in stats_names + ["latency_ms", "calibrated"]:
            devs = []
            for a, b in pairs:
                if s == "latency_ms":
                    x, y = a["latency_ms"], b["latency_ms"]
                elif s == "calibrated":  # normalised by each pass's calibration time
                    x = a["latency_ms"] / a["extra"]["calibration_ms"]
                    y = b["latency_ms"] / b["extra"]["calibration_ms"]
                else:
                    x, y = a["extra"]["stats"][s], b["extra"]["stats"][s]
                devs.append(abs(y / x - 1.0))
            d = np.array(devs)
            per_stat[s] = {"within_2": float((d <= 0.02).mean()),
                           "within_5": float((d <= 0.05).mean()),
                           "within_10": float((d <= 0.10).mean()),
                           "median_dev": float(np.median(d)), "max_dev": float(d.max())}
        ms = [m for p in pairs for m in p]
        # the same on pairs where the other cores were mostly idle in both passes
        quiet = [abs(b["latency_ms"] / a["latency_ms"] - 1.0) for a, b in pairs
                 if max(a["extra"].get("others_busy", 1.0) or 1.0,
                        b["extra"].get("others_busy", 1.0) or 1.0) < 0.5]
        if quiet:
            q = np.array(quiet)
            per_stat["latency_ms, quiet pairs"] = {
                "within_2": float((q <= 0.02).mean()), "within_5": float((q <= 0.05).mean()),
                "within_10": float((q <= 0.10).mean()), "median_dev": float(np.median(q)),
                "max_dev": float(q.max()), "n": len(quiet)}
        out[bid] = {
            "models": len(pairs), "statistic": ms[0]["extra"].get("statistic"),
            "per_statistic": per_stat,
            "overhead_ms_median": float(np.median([m["extra"]["overhead_ms"] for m in ms])),
            "job_wall_ms_median": float(np.median([m["extra"]["job_wall_ms"] for m in ms])),
            "latency_ms_range": [float(min(m["latency_ms"] for m in ms)),
                                 float(max(m["latency_ms"] for m in ms))],
            "remeasured": int(sum(m["extra"].get("remeasured", 0) for m in ms)),
            "drift_flags": int(sum(bool(m["extra"].get("drift_flag")) for m in ms)),
            "others_busy_median": float(np.nanmedian(
                [m["extra"].get("others_busy", np.nan) or np.nan for m in ms])),
        }
    return out


def print_report(summary: dict[str, Any]) -> None:
    for bid, s in summary.items():
        print(f"\n{bid}: {s['models']} models, {s['latency_ms_range'][0]:.3g}-"
              f"{s['latency_ms_range'][1]:.3g} ms; reported statistic {s['statistic']}; "
              f"overhead {s['overhead_ms_median']:.0f} ms/model (median), job wall "
              f"{s['job_wall_ms_median']:.0f} ms; re-measured {s['remeasured']}, "
              f"drift flags {s['drift_flags']}; other cores busy "
              f"{s['others_busy_median']:.0%} of the time (median)")
        print(f"  {'statistic':<18} {'±2%':>6} {'±5%':>6} {'±10%':>6} {'median|d|':>10} "
              f"{'max|d|':>8}")
        for name, v in s["per_statistic"].items():
            label = f"{name} (n={v['n']})" if "n" in v else name
            print(f"  {label:<18} {v['within_2']:>6.0%} {v['within_5']:>6.0%} "
                  f"{v['within_10']:>6.0%} {v['median_dev']:>10.2%} {v['max_dev']:>8.1%}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=30)
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                   help="comma-separated backend ids (unavailable ones are skipped)")
    p.add_argument("--gap-s", type=float, default=60.0,
                   help="minimum seconds between the end of pass 1 and pass 2")
    p.add_argument("--max-mflops", type=float, default=1200.0,
                   help="skip zoo variants above this many MFLOPs (keeps the run short)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("datasets/repeatability/repeat.jsonl"))
    p.add_argument("--model-dir", type=Path, default=None,
                   help="where exported models go (default: next to --out)")
    p.add_argument("--protocol", default="{}",
                   help='JSON overrides of ProtocolSettings, e.g. \'{"rounds": 7}\'')
    p.add_argument("--analyse-only", action="store_true")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not args.analyse_only:
        from nnmeter.backends import available_backends

        avail = {r["backend_id"]: r for r in available_backends()}
        backends = []
        for b in args.backends.split(","):
            base = b.strip()
            row = avail.get(base.rsplit("-t", 1)[0] if base not in avail else base)
            if row is None or not row["available"]:
                logger.warning("skipping %s: %s", base, row["reason"] if row else "unknown")
                continue
            backends.append(base)
        formats = ("onnx",)
        try:
            import nnmeter.exporters.tflite  # noqa: F401

            formats = ("onnx", "tflite")
        except ImportError:
            logger.warning("no TFLite exporter yet: LiteRT backends get no models")
        model_dir = args.model_dir or args.out.parent / "models"
        models = build_models(args.models, args.seed, args.max_mflops, model_dir, formats)
        logger.info("%d models: %s", len(models), ", ".join(m["name"] for m in models))
        protocol = json.loads(args.protocol)
        rows = load_rows(args.out)
        done = {(r["pass"], r["backend"], r["model"]) for r in rows}
        run_pass(1, models, backends, args.out, done, protocol)
        rows = load_rows(args.out)
        end1 = max((r["time"] for r in rows if r["pass"] == 1), default=time.time())
        wait = end1 + args.gap_s - time.time()
        if wait > 0 and not any(r["pass"] == 2 for r in rows):
            logger.info("waiting %.0f s before pass 2", wait)
            time.sleep(wait)
        run_pass(2, models, backends, args.out, done, protocol)
    summary = analyse(load_rows(args.out))
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print_report(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
