"""Model-level accuracy: zoo variants measured on a backend vs the kernel predictor and
the FLOPs / FLOPs+MAC baselines, per family, next to measurement repeatability.

Usage:
  flock /tmp/nnmeter-measure.lock python experiments/model_accuracy.py measure \
      --backend ort-cpu [--n 20] [--families resnet,mobilenetv2,...] [--passes 2]
  python experiments/model_accuracy.py report --backend ort-cpu [--json out.json]

Without ``--families`` both steps take the zoo's default families (the CNNs and
NAS-Bench-201); the opt-in transformer families (vit, bert, mobilevit) are measured
and reported only when named, e.g. ``--family vit`` (``--family`` is ``--families``).

``measure`` appends one row per (variant, pass) to
datasets/models/<backend>@<device>/seed<seed>.jsonl (``<device>`` this machine's name
unless ``--device`` names another; seed 1000 by default) as it goes (resumable: measured
(variant, pass) pairs are skipped). Family by family (cheapest first), every variant is
measured once, then all of them again, through one Profiler, so the two measurements of
a model are a minute or more apart: their agreement is the in-process repeatability. A
time-limited run thus leaves whole families. The variants come from the zoo's samplers
with seed 1000, which the kernel builder (seed 0, kernels only) never saw as whole
models.

Run ``measure`` again later with a higher ``--passes`` to add a pass in a new session
(a new worker process, hours later). ``report --since T`` takes the truth from the passes
measured at or after ``T`` only (one session's; the host's speed moves between
sessions by more than the predictor's error). Without it ``report`` takes a model's
time as the fastest of all its passes (interference only ever adds time) and prints two repeatabilities: the
first two passes (one process, minutes apart) and the sessions (the fastest pass of the
earlier session against the fastest of the later one, for models measured in two
sessions at least half an hour apart).

Baselines (FLOPs, FLOPs+MAC, the graph MLP and, with ``--gcn``, the GCN; with
``--gcn --train-seeds`` also BRP-NAS's own network and schedule,
``nnmeter.predictors.brpnas``) are by default
scored by 5-fold cross-validation on the reported set itself (each fold trained on 80 %
of it). ``report --train-seeds 1000,7000`` trains them instead on other sets measured on
the same device, as their papers train them on a measured training set, and scores them
on the reported set, which none of them saw. The seeds' roles: 0 the kernel builder and
the in-model calibration, 1000 the design set, 2000 and 5000 (transformers) the reported
sets, 3000 the backend-selection set, 7000 a baselines' training set (25 a family,
one pass).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SEED = 1000


def _path(backend: str, seed: int = SEED, device: str | None = None) -> Path:
    from nnmeter.devices.datasets import model_set_path

    return model_set_path(backend, seed, device)


def _rows(backend: str, seed: int = SEED, device: str | None = None) -> list[dict]:
    p = _path(backend, seed, device)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line of an interrupted run
    return out


def measure(args: argparse.Namespace) -> None:
    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.devices.reference import SpeedReference
    from nnmeter.errors import NNMeterError

    # cheap families first, so a time-limited run covers as many families as it can
    cheap_first = ["nasbench201", "mobilenetv3", "mobilenetv2", "shufflenetv2", "mnasnet",
                   "proxylessnas", "mobilenetv1", "squeezenet", "googlenet", "resnet",
                   "densenet", "alexnet", "vgg"]
    fams = args.families.split(",") if args.families else \
        [f for f in cheap_first if f in zoo.FAMILY_NAMES] + \
        [f for f in zoo.FAMILY_NAMES if f not in cheap_first]
    done = {(r["variant"], r["pass"]) for r in _rows(args.backend, args.seed, args.device)}
    path = _path(args.backend, args.seed, args.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_new = 0
    # the speed reference at the start of every family (nnmeter.devices.reference): a
    # report can then say how fast the device ran against its predictor's build
    reference = SpeedReference(path.parent, tag=path.stem)
    with Profiler(args.backend) as prof, open(path, "a") as fh:
        for fam in fams:
            reference.probe(prof, f"before {fam}", force=True)
            variants = zoo.sample_variants(fam, args.n, seed=args.seed)
            # family by family: pass 0 over its variants, then pass 1 (minutes apart).
            # Graphs are rebuilt (deterministically) rather than kept: twenty large
            # ResNets with their weights, plus the .tflite converter, exhaust 24 GiB.
            for p in range(args.passes):
                for v in variants:
                    if (v.name, p) in done:
                        continue
                    if args.limit is not None and n_new >= args.limit:
                        return
                    g = v.build()
                    c = g.cost()
                    params = c.params
                    if args.max_params and params > args.max_params:
                        # recorded, so a resumed run does not try it again
                        fh.write(json.dumps({
                            "variant": v.name, "family": v.family, "pass": p,
                            "latency_ms": None, "ok": False,
                            "error": f"skipped: {params / 1e6:.0f} M parameters > "
                                     f"--max-params {args.max_params / 1e6:.0f} M",
                            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
                        fh.flush()
                        print(f"pass {p} {v.name}: skipped ({params / 1e6:.0f} M parameters)")
                        continue
                    try:
                        m = prof.measure(g, on_error="record")
                    except NNMeterError as err:  # an export the backend cannot take
                        print(f"pass {p} {v.name}: skipped ({err})")
                        continue
                    row = {"variant": v.name, "family": v.family, "pass": p,
                           "latency_ms": m.latency_ms if m.ok else None, "spread": m.spread,
                           "ok": m.ok, "error": m.error, "flops": c.flops,
                           "memory_bytes": c.memory_bytes,
                           "fingerprint_id": m.device.fingerprint_id if m.device else None,
                           # how slow the host's memory ran around the job (1.0: as fast
                           # as this device has been seen; nnmeter.backends.protocol)
                           "memory_ratio": m.extra.get("memory_ratio") if m.ok else None,
                           "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S")}
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    print(f"pass {p} {v.name:40s} {row['latency_ms']}", flush=True)
                    n_new += 1


def measure_in_children(args: argparse.Namespace, every: int) -> None:
    """``measure`` in a chain of child processes of ``every`` new measurements each:
    a process that converted many models to .tflite holds their memory until it exits
    (and was killed for it after 186 rows of a zoo set). Each child appends to the set
    and the next resumes it; a child that ends (or is killed) without a new row stops
    the chain, with its exit status."""
    import subprocess

    argv = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--limit",
            str(every)]
    chunk = 0
    while True:
        before = len(_rows(args.backend, args.seed, args.device))
        chunk += 1
        print(f"[child {chunk}] up to {every} new measurements ({before} rows so far)",
              flush=True)
        rc = subprocess.run(argv).returncode
        after = len(_rows(args.backend, args.seed, args.device))
        if after == before:
            if rc != 0:
                raise SystemExit(f"error: a measuring child exited with status {rc} before "
                                 f"its first measurement; {after} rows are kept in "
                                 f"{_path(args.backend, args.seed, args.device)}")
            print(f"done: {after} rows", flush=True)
            return
        if rc != 0:
            print(f"[child {chunk}] exited with status {rc} after {after - before} new rows "
                  "(kept); resuming in a new process", flush=True)


#: measurements of one variant further apart than this belong to different sessions
SESSION_GAP_S = 1800


def _sessions(lat: list[float], at: list[str | None]) -> tuple[float, float] | None:
    """(fastest pass of the earlier session, fastest of the later) for a variant measured
    in two sessions at least :data:`SESSION_GAP_S` apart (split at the widest gap between
    its timestamps), else None. Two passes in one worker process share its state and the
    machine's state of that minute; sessions hours apart, in new processes, show how
    well a measurement repeats on another occasion."""
    timed = sorted((t, x) for t, x in zip(at, lat) if t)
    if len(timed) < 2:
        return None
    secs = [time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S")) for t, _ in timed]
    gaps = [b - a for a, b in zip(secs, secs[1:])]
    cut = int(np.argmax(gaps))
    if gaps[cut] < SESSION_GAP_S:
        return None
    return (min(x for _, x in timed[:cut + 1]), min(x for _, x in timed[cut + 1:]))


def _training_set(args: argparse.Namespace, wanted: set, exclude: list[str]) -> dict:
    """The baselines' training models: every model measured on this device under
    ``--train-seeds`` (the fastest of its passes), of the reported families, none of
    the reported set's own models."""
    from nnmeter import zoo

    by: dict[str, dict] = {}
    skip = set(exclude)
    for seed in (int(x) for x in args.train_seeds.split(",")):
        for r in _rows(args.backend, seed, args.device):
            if r.get("ok") and r.get("latency_ms") and r.get("family") in wanted \
                    and r["variant"] not in skip:
                e = by.setdefault(r["variant"], {"lat": [], "F": [r["flops"], r["memory_bytes"]]})
                e["lat"].append(r["latency_ms"])
    if len(by) < 10:
        sys.exit(f"error: --train-seeds {args.train_seeds}: {len(by)} measured models of "
                 f"these families on this device; measure a training set first "
                 f"(python experiments/model_accuracy.py measure --seed N)")
    names = sorted(by)
    return {"graphs": [zoo.get_variant(n).build() for n in names],
            "F": np.array([by[n]["F"] for n in names], dtype=float),
            "y": np.array([min(by[n]["lat"]) for n in names])}


#: the GCN settings tried on a validation split of the training set (BRP-NAS holds out
#: 100 of its 1,000 models for validation): layers x width, learning rate, epochs
GCN_GRID = [((64,) * 4, 3e-3, 150), ((64,) * 4, 1e-3, 300), ((128,) * 4, 1e-3, 150),
            ((128,) * 4, 3e-3, 300)]


def _tuned_gcn(graphs: list, y: np.ndarray) -> object:
    """The GCN baseline with the setting of :data:`GCN_GRID` whose share within ±10 % on
    100 held-out training models is best (then lower MAPE), refitted on all of them."""
    from nnmeter.evaluate import evaluate
    from nnmeter.predictors.gnn import GCNBaseline

    val = np.random.default_rng(0).permutation(len(y))[:min(100, len(y) // 5)]
    fit = np.setdiff1d(np.arange(len(y)), val)
    scores = []
    for hidden, lr, epochs in GCN_GRID:
        model = GCNBaseline(hidden=hidden, learning_rate=lr, epochs=epochs, progress=True)
        model.fit([graphs[i] for i in fit], y[fit])
        m = evaluate(model.predict([graphs[i] for i in val]), y[val])
        scores.append((m.acc10, -m.mape_percent))
        print(f"GCN {len(hidden)}x{hidden[0]}, lr {lr:g}, {epochs} epochs: validation "
              f"{100 * m.acc10:.1f} % within ±10 %, MAPE {m.mape_percent:.1f} %",
              file=sys.stderr, flush=True)
    hidden, lr, epochs = GCN_GRID[max(range(len(scores)), key=lambda i: scores[i])]
    print(f"GCN: {len(hidden)}x{hidden[0]}, lr {lr:g}, {epochs} epochs, refitted on "
          f"{len(y)} models", file=sys.stderr, flush=True)
    return GCNBaseline(hidden=hidden, learning_rate=lr, epochs=epochs,
                       progress=True).fit(graphs, y)


def _brpnas_gcn(train_graphs: list, y: np.ndarray, graphs: list) -> np.ndarray:
    """BRP-NAS's GCN with its paper's schedule (nnmeter.predictors.brpnas) on the op
    graphs: trained on ``train_graphs`` (100 of them held out for the schedule's
    validation, as BRP-NAS holds out 100), predicting ``graphs``. Width 128 and 8 graphs a
    step instead of the paper's 600 and 1: zoo op graphs have up to a thousand nodes."""
    from nnmeter.predictors.brpnas import BRPNASPredictor, encode_op_graph

    model = BRPNASPredictor(hidden=128, batch_size=8, validation=min(100, len(y) // 5),
                            progress=True)
    model.fit([encode_op_graph(g) for g in train_graphs], y)
    print(f"BRP-NAS GCN: {model.epochs_run_} epochs (best {model.best_epoch_}), validation "
          f"MAPE {model.validation_mape_:.1f} %", file=sys.stderr, flush=True)
    return model.predict([encode_op_graph(g) for g in graphs])


def _record_accuracy(args: argparse.Namespace, pred: object, wanted: set, out: dict) -> None:
    """Write the overall figures into the predictor dataset's ``accuracy.json``, which
    ``nnmeter devices`` shows (key ``zoo seed N``, or ``transformers seed N``)."""
    from nnmeter import zoo
    from nnmeter.predictors.dataset import kernel_dataset_dir

    if pred.resolution is None:
        sys.exit("error: --record: this predictor has no dataset to record its accuracy in")
    kind = "transformers" if wanted <= set(zoo.TRANSFORMER_FAMILIES) else "zoo"
    o = out["overall"]["predictor"]
    path = kernel_dataset_dir(pred.resolution.dataset.dataset_id) / "accuracy.json"
    acc = json.loads(path.read_text()) if path.exists() else {}
    acc[f"{kind} seed {args.seed}"] = {
        "acc10": o["acc10"], "acc5": o["acc5"], "mape_percent": o["mape_percent"],
        "n": o["n"], "repeatability_acc10": out["overall"]["repeatability_acc10"],
        "measured_on": f"{args.backend}@{out['device']}", "since": args.since,
        "date": out["date"],
        "command": "python experiments/model_accuracy.py report --backend "
                   f"{args.backend} --seed {args.seed}"
                   + (f" --families {args.families}" if args.families else "")
                   + (f" --since {args.since}" if args.since else "")}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(acc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    print(f"recorded in {path}")


def _speed_line(args: argparse.Namespace, pred: Any) -> dict[str, Any]:
    """Print and return how fast the device ran the speed reference while this set was
    measured, against the predictor's build (nnmeter.devices.reference); sets and
    builds made before the reference existed have no probes, and say so."""
    from nnmeter.devices.reference import read_reference, set_against_builds, summarize

    build_dir = pred.resolution.dataset.directory if pred.resolution is not None else None
    got = set_against_builds(_path(args.backend, args.seed, args.device),
                             {"build": build_dir} if build_dir is not None else {})
    s_set, ratio = got["set"], got.get("build")
    s_build = summarize(read_reference(build_dir)) if build_dir is not None else None
    if s_set is None:
        print("speed reference: no probes recorded with this set (measured before the "
              "reference existed)")
    else:
        print(f"speed reference: this set {s_set['probes']} probes, median "
              f"{s_set['median_ms']:.3g} ms, drift {100 * s_set['drift']:.1f} %"
              + (f"; the predictor's build {s_build['median_ms']:.3g} ms: the set ran at "
                 f"{ratio:.3f}x the build's time" if ratio is not None else
                 "; the predictor's build has no probes"))
    return {"set": s_set, "build": s_build, "set_over_build": ratio}


def report(args: argparse.Namespace) -> None:
    from nnmeter import zoo
    from nnmeter.evaluate import evaluate
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.baselines import (
        FlopsBaseline, FlopsMacBaseline, GraphMLPBaseline, cross_val_predict,
        graph_op_features,
    )

    # the default families unless named: transformer rows measured into the same set
    # (``measure --family vit``) must not change the default report
    wanted = set(args.families.split(",")) if args.families else set(zoo.default_family_names())
    rows = [r for r in _rows(args.backend, args.seed, args.device)
            if r.get("ok") and r.get("latency_ms") and r.get("family") in wanted
            and (args.since is None or (r.get("timestamp") or "") >= args.since)]
    by: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: (r["pass"], r.get("timestamp") or "")):
        e = by.setdefault(r["variant"], {"family": r["family"], "lat": [], "at": [], "F": [
            r["flops"], r["memory_bytes"]]})
        e["lat"].append(r["latency_ms"])
        e["at"].append(r.get("timestamp"))
    names = sorted(by)
    if not names:
        print("no measured models; run the measure step first")
        return
    pred = load_predictor(args.backend, device=args.device)
    graphs = [zoo.get_variant(n).build() for n in names]
    predicted = np.array(pred.predict_many(graphs))
    true = np.array([min(by[n]["lat"]) for n in names])
    F = np.array([by[n]["F"] for n in names], dtype=float)
    G = np.vstack([graph_op_features(g) for g in graphs])
    gcn = brp = None
    if args.train_seeds:
        # the baselines learn from other measured models of the same device, as the
        # paper trains them, and predict this set, which none of them saw
        train = _training_set(args, wanted, names)
        Ft, Gt, yt = train["F"], np.vstack([graph_op_features(g) for g in train["graphs"]]), \
            train["y"]
        flops = FlopsBaseline().fit(Ft, yt).predict(F)
        fmac = FlopsMacBaseline().fit(Ft, yt).predict(F)
        mlp = GraphMLPBaseline().fit(Gt, yt).predict(G)
        if args.gcn:
            gcn = _tuned_gcn(train["graphs"], yt).predict(graphs)
            brp = _brpnas_gcn(train["graphs"], yt, graphs)
        trained_on = f"seeds {args.train_seeds} ({len(yt)} models)"
    else:
        flops = cross_val_predict(FlopsBaseline, F, true)
        fmac = cross_val_predict(FlopsMacBaseline, F, true)
        mlp = cross_val_predict(GraphMLPBaseline, G, true)
        if args.gcn:
            from nnmeter.predictors.gnn import GCNBaseline, cross_val_predict_graphs

            gcn = cross_val_predict_graphs(GCNBaseline, graphs, true, progress=True)
        trained_on = "5-fold cross-validation on this set"
    fams = np.array([by[n]["family"] for n in names])
    rep_pairs = [(by[n]["lat"][0], by[n]["lat"][1]) for n in names if len(by[n]["lat"]) >= 2]
    sessions = {n: _sessions(by[n]["lat"], by[n]["at"]) for n in names}
    device = args.device or pred.device_name
    out = {"backend": args.backend, "device": device, "predictor_dataset":
           pred.resolution.dataset.dataset_id if pred.resolution is not None else None,
           "seed": args.seed,
           "date": time.strftime("%Y-%m-%d"), "n_models": len(names), "families": {}}
    out["since"] = args.since
    out["baselines_trained_on"] = trained_on
    print(f"{args.backend} on {device}, zoo seed {args.seed}, {len(names)} models, "
          f"{out['date']}; truth: the fastest of each model's passes"
          + (f" measured since {args.since} (one session)" if args.since else "")
          + f"; baselines: {trained_on}")
    out["speed_reference"] = _speed_line(args, pred)
    print(f"{'family':14s} {'n':>3s} {'±5%':>6s} {'±10%':>6s} {'MAPE%':>6s} {'RMSE ms':>8s} "
          f"{'FLOPs ±10%':>10s} {'F+MAC ±10%':>10s} {'MLP ±10%':>9s} {'GCN ±10%':>9s} "
          f"{'BRP-NAS ±10%':>12s} "
          f"{'repeat ±10%':>11s} {'sessions ±10%':>13s}")

    def line(label: str, mask: np.ndarray) -> dict:
        m = evaluate(predicted[mask], true[mask])
        mf = evaluate(flops[mask], true[mask])
        mm = evaluate(fmac[mask], true[mask])
        mg = evaluate(mlp[mask], true[mask])
        gc = evaluate(gcn[mask], true[mask]) if gcn is not None else None
        bp = evaluate(brp[mask], true[mask]) if brp is not None else None
        sel = [n for n, k in zip(names, mask) if k]
        pairs = [(by[n]["lat"][0], by[n]["lat"][1]) for n in sel if len(by[n]["lat"]) >= 2]
        rep = float(np.mean([abs(a - b) / b <= 0.10 for a, b in pairs])) if pairs else float("nan")
        across = [sessions[n] for n in sel if sessions[n] is not None]
        rep_s = float(np.mean([abs(a - b) / b <= 0.10 for a, b in across])) if across \
            else float("nan")
        print(f"{label:14s} {m.n:3d} {100*m.acc5:6.1f} {100*m.acc10:6.1f} {m.mape_percent:6.1f} "
              f"{m.rmse_ms:8.3f} {100*mf.acc10:10.1f} {100*mm.acc10:10.1f} {100*mg.acc10:9.1f} "
              f"{100*gc.acc10 if gc else float('nan'):9.1f} "
              f"{100*bp.acc10 if bp else float('nan'):12.1f} {100*rep:11.1f} "
              f"{100*rep_s:13.1f}")
        return {"predictor": m.as_dict(), "flops": mf.as_dict(), "flops_mac": mm.as_dict(),
                "graph_mlp": mg.as_dict(), "gcn": gc.as_dict() if gc else None,
                "brpnas": bp.as_dict() if bp else None,
                "repeatability_acc10": rep, "repeat_pairs": len(pairs),
                "session_repeatability_acc10": rep_s, "session_pairs": len(across)}

    for f in sorted(set(fams)):
        out["families"][f] = line(f, fams == f)
    out["overall"] = line("ALL", np.ones(len(names), dtype=bool))
    out["repeatability_pairs"] = len(rep_pairs)
    if args.record:
        _record_accuracy(args, pred, wanted, out)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    # the figures, next to the JSON: predicted against measured, and per-family bars
    from nnmeter.plots import family_bars, predicted_vs_measured

    stem = Path(args.json).with_suffix("")
    title = f"{args.backend} on {device}, seed {args.seed}"
    predicted_vs_measured(predicted, true, fams, f"{stem}_scatter.png", title=title)
    methods = {"nnmeter": "predictor", "FLOPs": "flops", "FLOPs+MAC": "flops_mac",
               "graph MLP": "graph_mlp", "GCN": "gcn", "BRP-NAS": "brpnas",
               "repeatability": None}
    bars = {}
    for fam, row in {**out["families"], "ALL": out["overall"]}.items():
        bars[fam] = {label: (row["repeatability_acc10"] if key is None else
                             (row[key] or {}).get("acc10", float("nan")))
                     for label, key in methods.items() if key is None or row.get(key)}
    family_bars(bars, f"{stem}_families.png", title=title + ": within ±10 % per family")
    print(f"figures: {stem}_scatter.png, {stem}_families.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["measure", "report"])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--families", "--family", default=None,
                    help="comma-separated zoo families (default: the CNNs and NAS-Bench-201; "
                         "the transformer families vit, bert, mobilevit only when named)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=SEED,
                    help=f"variant seed; other than {SEED} (the test set) writes "
                         f"datasets/models/<backend>@<device>/seed<N>.jsonl, e.g. a "
                         f"calibration set")
    ap.add_argument("--device", default=None,
                    help="device whose measured set to use (default: this machine's)")
    ap.add_argument("--limit", type=int, default=None,
                    help="stop after this many new measurements (run again to resume): the "
                         ".tflite converter does not give back the memory of large models")
    ap.add_argument("--restart-every", type=int, default=None, metavar="N",
                    help="measure in child processes of N new measurements each, until the "
                         "set is done (default: 25 on LiteRT, whose .tflite converter keeps "
                         "the memory of every model it converted; 0: one process)")
    ap.add_argument("--max-params", type=float, default=None,
                    help="skip (and record) variants with more parameters: the .tflite "
                         "converter needed over 24 GiB for a 466 M-parameter ResNet")
    ap.add_argument("--json", default=None)
    ap.add_argument("--since", default=None, metavar="TIMESTAMP",
                    help="report: only passes measured at or after this time "
                         "(e.g. 2026-12-03T18:00), so the truth comes from one session "
                         "and not the fastest over sessions hours apart")
    ap.add_argument("--gcn", action="store_true",
                    help="also score the graph baselines: the GCN (its setting chosen over "
                         "GCN_GRID on 100 held-out training models) and, with "
                         "--train-seeds, BRP-NAS's own network and training schedule")
    ap.add_argument("--record", action="store_true",
                    help="report: write the overall figures into the predictor dataset's "
                         "accuracy.json, which `nnmeter devices` shows")
    ap.add_argument("--train-seeds", default=None, metavar="SEEDS",
                    help="report: train the baselines on the models measured under these "
                         "seeds (comma-separated, e.g. 1000,7000) and score them on the "
                         "reported set, instead of 5-fold cross-validation on it")
    from nnmeter.farm import add_runner_arguments, runner_device, runner_from_args, use_runner

    add_runner_arguments(ap)
    args = ap.parse_args()
    if args.since is not None:
        # rows are stamped %Y-%m-%dT%H:%M:%S and compared as text: a prefix of that form
        for form, width in (("%Y-%m-%dT%H:%M:%S", 19), ("%Y-%m-%dT%H:%M", 16),
                            ("%Y-%m-%dT%H", 13), ("%Y-%m-%d", 10)):
            try:
                time.strptime(args.since, form)
            except ValueError:
                continue
            if len(args.since) == width:  # zero-padded, or the text comparison misleads
                break
        else:
            ap.error(f"--since {args.since!r}: give a time as 2026-12-03T18:00 "
                     f"(YYYY-MM-DD[THH[:MM[:SS]]])")
    if args.train_seeds is not None:
        try:
            seeds = [int(x) for x in args.train_seeds.split(",")]
        except ValueError:
            ap.error(f"--train-seeds {args.train_seeds!r}: give comma-separated seeds, "
                     f"e.g. 1000,7000")
        if args.seed in seeds:
            ap.error(f"--train-seeds {args.train_seeds}: seed {args.seed} is the reported "
                     f"set; train the baselines on other seeds")
    args.json = args.json or f"experiments/results/model_accuracy_{args.backend}.json"
    if args.step == "report":
        report(args)
        return
    every = args.restart_every if args.restart_every is not None else \
        (25 if args.backend.startswith("litert") else 0)
    if every > 0 and args.limit is None and args.runner == "local":
        measure_in_children(args, every)
        return
    # through a farm runner (--runner ray|ssh|adb) the set is the remote device's
    with use_runner(runner_from_args(args)):
        if args.device is None and args.runner != "local":
            dev = runner_device(args.backend)
            args.device = dev.name or dev.fingerprint_id
            print(f"measuring on {args.device} ({args.runner})", flush=True)
        measure(args)


if __name__ == "__main__":
    main()
