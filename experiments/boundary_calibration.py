"""Kernel boundary calibration: measure what single-kernel models pay at their edges
(layout/precision conversions) and check what removing it does to model predictions.

Usage:
  flock /tmp/nnmeter-measure.lock python experiments/boundary_calibration.py \
      --backend openvino-cpu [--per-family 10] [--runs 15]
      profiles single-kernel models (worker on core 1), writes
      datasets/kernels/<backend>@<device>/boundary.json and prints the fit.
  flock /tmp/nnmeter-measure.lock python experiments/boundary_calibration.py \
      --backend openvino-cpu-f32 --all-rows [--runs 10] [--minutes 20]
      profiles every row's single-kernel model (resumable; appended to
      datasets/kernels/<backend>@<device>/row_edges.jsonl as it goes): training then
      removes each profiled row's own edges instead of the fit's; on OpenVINO then
      profiles the pooling/activation/multiply rows that ran in the plain layout
      between two 1x1 convolutions (row_context.jsonl).
  taskset -c 0 python experiments/boundary_calibration.py --backend openvino-cpu --evaluate
      no measurement: trains the predictor with and without the boundary removal and
      re-predicts the base models of experiments/results/backend_selection_measured.json (round 1) against
      the latencies measured there (the other backends keep their stored predictions).
  taskset -c 0 python experiments/boundary_calibration.py --backend openvino-cpu --cv
      no measurement: kernel-level cross-validated accuracy with and without it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _own_dataset_pinned(backend: str) -> Path:
    """This machine's dataset of ``backend``, named before this process is pinned to core
    1 (the cores a process may use are part of the device's identity); an N-thread
    backend is not pinned (its worker must not inherit one core)."""
    from nnmeter.backends import get_backend
    from nnmeter.devices.datasets import own_dataset_dir

    ds_dir = own_dataset_dir(backend)
    if get_backend(backend).threads <= 1:
        os.sched_setaffinity(0, {1})
    return ds_dir


def calibrate(backend: str, per_family: int, runs: int) -> None:
    from nnmeter.predictors.boundary import measure_boundary, write_boundary

    ds_dir = _own_dataset_pinned(backend)
    record = measure_boundary(backend, ds_dir, per_family=per_family, runs=runs)
    record["command"] = "flock /tmp/nnmeter-measure.lock python " + " ".join(
        shlex.quote(a) for a in sys.argv)
    path = write_boundary(ds_dir, record)
    print(f"{len(record['points'])} single-kernel models profiled -> {path}")
    print(f"{'type':18s} {'in elems':>9s} {'out elems':>9s} {'boundary':>9s} {'kernel':>8s} "
          f"{'measured':>9s}  boundary nodes (ms: per inference, perf counters)")
    for p in record["points"]:
        print(f"{p['kernel_type']:18s} {p['input_elements']:9d} {p['output_elements']:9d} "
              f"{p['boundary_ms']:9.4f} {p['kernel_ms']:8.4f} {p['measured_ms']:9.4f}  "
              f"{','.join(p['boundary_nodes'])}")
    fit = record["fit"]
    print("fit [fixed ms, ms/input elem, ms/output elem]:")
    print(f"  shared   {fit['shared']}")
    for fam, c in fit["families"].items():
        print(f"  {fam:8s} {c}")
    print("rms ms:", json.dumps(fit["rms_ms"], sort_keys=True))


def profile_all_rows(backend: str, runs: int, minutes: float | None) -> None:
    import time

    from nnmeter.predictors.boundary import measure_row_profiles

    ds_dir = _own_dataset_pinned(backend)
    deadline = None if minutes is None else time.monotonic() + 60 * minutes
    out = measure_row_profiles(backend, ds_dir, runs=runs, deadline=deadline, progress=True)
    for step, what in (("row_edges", "rows profiled"), ("row_context", "rows profiled in context")):
        if step in out:
            c = out[step]
            print(f"{ds_dir.name}: {c['profiled']} {what}, {c['failed']} failed, "
                  f"{c['remaining']} left (run again to continue)")


def _predictor(backend: str, with_boundary: bool):  # noqa: ANN202
    """The predictor with the edges term (removed in training, paid at the model's
    edges), applied even where boundary.json says not to, or without it."""
    from nnmeter.fusion import load_rules
    from nnmeter.predictors import train
    from nnmeter.devices.datasets import kernel_dataset_for
    from nnmeter.predictors.terms import TERMS

    names = [n for n in TERMS.ordered() if with_boundary or n != "edges"]
    return train.train_predictor(backend, kernel_dataset_for(backend), load_rules(backend),
                                 terms=names, force=("edges",) if with_boundary else ())


def evaluate(backend: str, selection: Path) -> None:
    from nnmeter import zoo

    stored = json.loads(selection.read_text())
    rows = stored["models"]
    graphs = {r["family"]: zoo.base_variant(r["family"]).build() for r in rows}
    preds = {}
    for label, flag in (("before", False), ("after", True)):
        p = _predictor(backend, flag)
        preds[label] = {f: p.predict(g, check_device=False).total_ms for f, g in graphs.items()}
    print(f"{backend}: predicted (before -> after) / measured, ms")
    print(f"{'model':14s} {'stored':>8s} {'before':>8s} {'after':>8s} {'measured':>9s} "
          f"{'err before':>10s} {'err after':>9s}  best(before) best(after) measured-best")
    hits = {"stored": 0, "before": 0, "after": 0}
    errs = {"before": [], "after": []}
    for r in rows:
        f = r["family"]
        meas = r["measured"][backend]
        best = {}
        for label in hits:
            pr = dict(r["predicted"])
            if label != "stored":
                pr[backend] = preds[label][f]
            best[label] = min(pr, key=pr.get)
            hits[label] += best[label] == r["measured_best"]
        for label in errs:
            errs[label].append(preds[label][f] / meas - 1)
        print(f"{f:14s} {r['predicted'][backend]:8.2f} {preds['before'][f]:8.2f} "
              f"{preds['after'][f]:8.2f} {meas:9.2f} {errs['before'][-1]:+10.0%} "
              f"{errs['after'][-1]:+9.0%}  {best['before']:12s} {best['after']:11s} "
              f"{r['measured_best']}")
    n = len(rows)
    for label in errs:
        e = [abs(x) for x in errs[label]]
        print(f"{label}: mean |error| {sum(e) / n:.0%}, within 10 % {sum(x <= .1 for x in e)}/{n}")
    print("predicted fastest = measured fastest: " +
          ", ".join(f"{k} {v}/{n}" for k, v in hits.items()))


def cv_effect(backend: str) -> None:
    """Cross-validated ±10 % kernel accuracy (rf, own data) with and without the boundary
    removed, on a temporary copy of the dataset (choose_regressors writes its choice)."""
    import shutil
    import tempfile

    from nnmeter.predictors import train
    from nnmeter.predictors.boundary import remove_boundary
    from nnmeter.devices.datasets import kernel_dataset_for
    from nnmeter.predictors.dataset import KernelDataset

    original = train.load_kernel_data
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / backend
        shutil.copytree(kernel_dataset_for(backend), copy)
        ds = KernelDataset(copy, backend)

        def patched(dataset, kernel_type):  # noqa: ANN001, ANN202
            d = original(dataset, kernel_type)
            if d is not None:
                remove_boundary(dataset, {kernel_type: d})
            return d

        scores = {"before": train.choose_regressors(ds, candidates=("rf",), min_samples=50)}
        train.load_kernel_data = patched
        try:
            scores["after"] = train.choose_regressors(ds, candidates=("rf",), min_samples=50)
        finally:
            train.load_kernel_data = original
    print(f"{backend}: 5-fold CV ±10 % accuracy of each type's rf (types with ≥ 50 rows)")
    print(f"{'type':18s} {'before':>7s} {'after':>7s}")
    for t in sorted(scores["before"]):
        b, a = scores["before"][t].get("rf"), scores["after"].get(t, {}).get("rf")
        if b is not None and a is not None:
            print(f"{t:18s} {b:7.1%} {a:7.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="openvino-cpu")
    ap.add_argument("--per-family", type=int, default=10)
    ap.add_argument("--runs", type=int, default=None,
                    help="profiled inferences per model (default 15; 10 with --all-rows)")
    ap.add_argument("--all-rows", action="store_true",
                    help="profile every row's single-kernel model (row_edges.jsonl)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="with --all-rows: stop after this long (the next run continues)")
    ap.add_argument("--evaluate", action="store_true",
                    help="no measurement: before/after predictions of the base models")
    ap.add_argument("--cv", action="store_true",
                    help="no measurement: kernel-level CV accuracy before/after")
    ap.add_argument("--selection", type=Path,
                    default=ROOT / "experiments/results/backend_selection_measured.json")
    args = ap.parse_args()
    if args.evaluate:
        evaluate(args.backend, args.selection)
    elif args.cv:
        cv_effect(args.backend)
    elif args.all_rows:
        profile_all_rows(args.backend, args.runs or 10, args.minutes)
    else:
        calibrate(args.backend, args.per_family, args.runs or 15)


if __name__ == "__main__":
    main()
