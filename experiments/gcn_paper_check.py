"""The GCN baseline checked where its paper has a figure: BRP-NAS on NAS-Bench-201 latency.

BRP-NAS trains its GCN latency predictor on 900 NAS-Bench-201 cells measured on a
device, holds out 100 for validation, and tests on the rest of the space. Its figure,
as HELP (Lee et al., NeurIPS 2021, Table 3) reports it for BRP-NAS with 900 samples:
Spearman's rank correlation 0.796 on a desktop CPU (Xeon Gold 6226), 0.814 (Titan RTX),
0.666 (Pixel 2), 0.847 (Raspberry Pi 4), 0.811 (ASIC), 0.801 (FPGA): mean 0.789; a FLOPs
ranking 0.826 on the same CPU. This script repeats that protocol on cells measured on
this project's device (``experiments/protocol.json``: seed 12000, 1,400 cells, two
passes of one run), with the paper's split sizes: 900 training (the GCN's fit), 100
validation (its schedule), the other 400 tested. On the test cells it scores:

- the BRP-NAS GCN on BRP-NAS's cell graph, with the paper's setting
  (:data:`nnmeter.predictors.brpnas.PAPER_SETTING`) — the check;
- the same network on the op graph of the whole network (what the zoo tables use),
  width 128 and 8 graphs a step (the op graphs have ~100-200 nodes);
- a FLOPs line and a FLOPs+MAC line (nn-Meter's baselines) fitted on the same 1,000;
- nnmeter's kernel predictor for the device, which none of these cells trained;
- the measurement's own repeatability (pass 0 against pass 1).

Usage::

  python experiments/gcn_paper_check.py [--backend ort-cpu] [--device NAME]
      [--seed 12000] [--repeats 1]

Writes ``experiments/results/gcn_paper_check_<backend>@<device>.{txt,json,png}``. No
measurement: it reads the set ``model_accuracy.py measure --seed 12000 --families
nasbench201 --n 1400`` wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: BRP-NAS with 900 samples, Spearman on NAS-Bench-201 latency (HELP, Table 3)
PAPER = {"Xeon Gold 6226 (desktop CPU)": 0.796, "Titan RTX": 0.814, "Pixel 2": 0.666,
         "Raspberry Pi 4": 0.847, "ASIC (Eyeriss)": 0.811, "FPGA": 0.801, "mean": 0.789}
PAPER_FLOPS_CPU = 0.826
TRAIN, VALIDATION = 900, 100


def _truth(backend: str, seed: int, device: str | None) -> dict[str, list[float]]:
    from nnmeter.devices.datasets import model_set_path
    from nnmeter.predictors.dataset import read_jsonl

    path = model_set_path(backend, seed, device)
    if not path.exists():
        sys.exit(f"error: {path}: no measured set; measure it first: python "
                 f"experiments/model_accuracy.py measure --backend {backend} --seed {seed} "
                 f"--families nasbench201 --n 1400")
    by: dict[str, list[float]] = {}
    for r in read_jsonl(path):  # torn lines of an interrupted run are set aside
        if r.get("ok") and r.get("latency_ms") and r.get("family") == "nasbench201":
            by.setdefault(r["variant"], [None, None])
            if r["pass"] in (0, 1):
                by[r["variant"]][r["pass"]] = r["latency_ms"]
    return {n: v for n, v in by.items() if v[0] is not None}


def main() -> int:
    from nnmeter import zoo
    from nnmeter.evaluate import evaluate
    from nnmeter.plots import method_panels
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.baselines import FlopsBaseline, FlopsMacBaseline
    from nnmeter.predictors.brpnas import (
        PAPER_SETTING, BRPNASPredictor, encode_nb201_cell, encode_op_graph,
    )

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--device", default=None, help="the measured set's device (default: "
                    "this machine's)")
    ap.add_argument("--seed", type=int, default=12000)
    ap.add_argument("--repeats", type=int, default=1,
                    help="random splits (BRP-NAS averages 100); each trains both GCNs")
    ap.add_argument("--out", default=None, help="output stem (default experiments/results/"
                    "gcn_paper_check_<backend>@<device>)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: give 1 or more")

    truth = _truth(args.backend, args.seed, args.device)
    names = sorted(truth)
    if len(names) < TRAIN + VALIDATION + 50:
        sys.exit(f"error: {len(names)} measured cells; the check needs "
                 f"{TRAIN + VALIDATION} to train and at least 50 to test (measure --n 1400)")
    variants = [zoo.get_variant(n) for n in names]
    y = np.array([min(v for v in truth[n] if v is not None) for n in names])
    pairs = [(a, b) for a, b in truth.values() if a is not None and b is not None]
    rep = float(np.mean([abs(a - b) / b <= 0.10 for a, b in pairs])) if pairs else float("nan")
    pred = load_predictor(args.backend, device=args.device)
    device = args.device or pred.device_name
    graphs = [v.build() for v in variants]
    costs = [g.cost() for g in graphs]
    F = np.array([[c.flops, c.memory_bytes] for c in costs], dtype=float)
    cells = [encode_nb201_cell(v.config.cell) for v in variants]
    t0 = time.time()
    ops = [encode_op_graph(g) for g in graphs]
    nnm = np.array(pred.predict_many(graphs))
    print(f"{len(names)} cells of {args.backend}@{device} (seed {args.seed}); encoded in "
          f"{time.time() - t0:.0f} s; repeatability {100 * rep:.1f} % of {len(pairs)} "
          f"within ±10 %", file=sys.stderr)

    stem = Path(args.out or f"experiments/results/gcn_paper_check_{args.backend}@{device}")
    runs = []
    for r in range(args.repeats):
        order = np.random.default_rng(r).permutation(len(names))
        train, test = order[:TRAIN + VALIDATION], order[TRAIN + VALIDATION:]
        got = {}
        t0 = time.time()
        cell_gcn = BRPNASPredictor(
            **{k: PAPER_SETTING[k] for k in ("layers", "hidden", "dropout", "learning_rate",
                                             "weight_decay", "epochs", "batch_size",
                                             "lr_patience", "stop_patience",
                                             "warmup_epochs")},
            validation=VALIDATION, random_state=r, progress=True)
        cell_gcn.fit([cells[i] for i in train], y[train])
        got["BRP-NAS GCN, cell graph (paper setting)"] = (
            cell_gcn.predict([cells[i] for i in test]),
            f"{cell_gcn.epochs_run_} epochs (best {cell_gcn.best_epoch_}), "
            f"{time.time() - t0:.0f} s")
        t0 = time.time()
        op_gcn = BRPNASPredictor(hidden=128, batch_size=8, validation=VALIDATION,
                                 random_state=r, progress=True)
        op_gcn.fit([ops[i] for i in train], y[train])
        got["BRP-NAS GCN, op graph (zoo setting)"] = (
            op_gcn.predict([ops[i] for i in test]),
            f"{op_gcn.epochs_run_} epochs (best {op_gcn.best_epoch_}), "
            f"{time.time() - t0:.0f} s")
        got["FLOPs line"] = (FlopsBaseline().fit(F[train], y[train]).predict(F[test]), "")
        got["FLOPs+MAC line"] = (FlopsMacBaseline().fit(F[train], y[train]).predict(F[test]),
                                 "")
        got["nnmeter (kernel predictor)"] = (nnm[test], "not trained on these cells")
        got["FLOPs ranking (no fit)"] = (F[test, 0], "Spearman only")
        runs.append({label: {"metrics": evaluate(p, y[test]).as_dict(), "note": note}
                     for label, (p, note) in got.items()})
        if r == 0:  # the figure shows the first split
            first_test = test
            scatter = {label: p for label, (p, _) in got.items()
                       if label.startswith(("BRP", "nnmeter"))}

    labels = list(runs[0])
    lines = [f"BRP-NAS's check on {args.backend}@{device}, {time.strftime('%Y-%m-%d')}: "
             f"{len(names)} NAS-Bench-201 cells (seed {args.seed}), truth the faster of two "
             f"passes of one run; {TRAIN} training / {VALIDATION} validation / "
             f"{len(names) - TRAIN - VALIDATION} tested; {args.repeats} split(s)",
             f"measurement repeatability (pass 0 vs pass 1): {100 * rep:.1f} % of "
             f"{len(pairs)} within ±10 %",
             f"{'method':42s} {'Spearman':>8s} {'±5 %':>6s} {'±10 %':>6s} {'MAPE %':>7s}  note"]
    summary = {}
    for label in labels:
        ms = [run[label]["metrics"] for run in runs]
        s = {k: float(np.mean([m[k] for m in ms])) for k in
             ("spearman", "acc5", "acc10", "mape_percent")}
        s["spearman_sd"] = float(np.std([m["spearman"] for m in ms]))
        summary[label] = s
        rank_only = label.startswith("FLOPs ranking")
        lines.append(f"{label:42s} {s['spearman']:8.3f} "
                     + ("     -      -       -" if rank_only else
                        f"{100 * s['acc5']:6.1f} {100 * s['acc10']:6.1f} "
                        f"{s['mape_percent']:7.1f}")
                     + f"  {runs[0][label]['note']}")
    lines.append("the paper (BRP-NAS, 900 samples; HELP Table 3): Spearman "
                 + ", ".join(f"{k} {v:.3f}" for k, v in PAPER.items())
                 + f"; FLOPs on the desktop CPU {PAPER_FLOPS_CPU:.3f}")
    ours = summary["BRP-NAS GCN, cell graph (paper setting)"]["spearman"]
    lines.append(f"check: our BRP-NAS GCN {ours:.3f} against the paper's {PAPER['mean']:.3f} "
                 f"(mean) / {PAPER['Xeon Gold 6226 (desktop CPU)']:.3f} (desktop CPU): "
                 + ("at or above the paper's level" if ours >= PAPER["mean"] else
                    "below the paper's level"))
    text = "\n".join(lines)
    print(text)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".txt").write_text(text + "\n")
    stem.with_suffix(".json").write_text(json.dumps(
        {"backend": args.backend, "device": device, "seed": args.seed,
         "date": time.strftime("%Y-%m-%d"), "n_cells": len(names), "train": TRAIN,
         "validation": VALIDATION, "repeatability_acc10": rep, "runs": runs,
         "summary": summary, "paper_spearman": PAPER, "paper_flops_cpu": PAPER_FLOPS_CPU},
        indent=1))
    method_panels(y[first_test], scatter, f"{stem}.png",
                  title=f"NAS-Bench-201 on {args.backend}@{device}: {len(first_test)} test "
                        f"cells (split 0)")
    print(f"wrote {stem}.txt, .json, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
