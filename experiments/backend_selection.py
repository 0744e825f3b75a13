"""Backend selection the Walle way, on a set where the winner changes (issue 23).

Usage:
    python experiments/backend_selection.py pool     # pilot: every pool model, 1 pass
    python experiments/backend_selection.py choose   # the selection set, from the pilot
    python experiments/backend_selection.py measure  # truth: the set, 2 fresh passes
    python experiments/backend_selection.py report [--json F]
    python experiments/backend_selection.py pool|choose|measure|report --threads 1,2

Steps write under ``datasets/models/selection@<device>/`` (one device per folder) and
resume where they stopped: every measurement is appended as it is made. ``--threads 1,2``
adds each f32 backend at two threads (``ort-cpu-t2``, ...) as candidates: its pilot rows
join the pilot, its set and truth are files of their own (``set_threads1-2.json``,
``truth_threads1-2.jsonl``): a run of its own in which every candidate is measured.

- **pool**: zoo variants of seed 3000 (a seed no other set uses): ``--per-family`` per
  family (NASBench-201 cells twice as many; none over :data:`MAX_PARAMS` parameters),
  measured once on every backend. The models
  are exported once per format into a cache folder and measured from the files.
- **choose**: the pilot's winner per model; models are dropped, most common winner
  first, until no backend wins more than half. The dropped models are the baselines'
  training data (the FLOPs lines) and the pilot as a whole says which backend wins most
  often. Design decisions read the pilot only; the set's truth is measured afresh.
- **measure**: the set in ``--passes`` passes; in each, per model, every backend in
  turn, the order rotated from model to model; then the real-architecture set's ONNX
  models (``experiments/real_set.py``: pytorchcv through torch.onnx and the onnx wheel's
  Caffe2-era models, built with ``real_set.py build``) the same way on the backends that
  load ONNX (LiteRT takes .tflite only); the analytic baselines' probe models on every
  backend in the same run.
- **report**: truth is the fastest of the passes of this one run; repeatability is the
  first pass's winner scored on the second. Picks scored: nnmeter's predictors of this
  device (``nnmeter.selection.rank_backends``), MNN's analytic cost (FLOPs over one
  measured FLOPS per backend), the same per op class, per-backend FLOPs lines fitted on
  the pilot's other models (leave one out), and "always the pilot's most frequent
  winner". Top-1
  agreement and mean regret (time lost against the measured fastest), for the zoo set
  and the real set apart (the real set's candidates: those that load its files). No
  model of the real set is in the pilot: nothing was chosen on it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

#: every backend measured; the candidates of a selection are a subset (``--candidates``)
BACKENDS = ("ort-cpu", "litert-cpu", "openvino-cpu", "openvino-cpu-f32", "mnn-cpu")
#: the default candidates: the f32 backends. On a CPU with AVX512-BF16 (this one)
#: OpenVINO's default precision is bf16, which won every pilot model by 1.2-3.3x; a user
#: who needs f32 accuracy chooses among these
F32 = ("ort-cpu", "litert-cpu", "openvino-cpu-f32", "mnn-cpu")
SEED = 3000
FAMILIES = ("nasbench201", "mobilenetv1", "mobilenetv2", "mobilenetv3", "mnasnet",
            "proxylessnas", "shufflenetv2", "squeezenet", "resnet", "googlenet", "densenet")


def _dir(device: str | None) -> Path:
    from nnmeter.devices.cpu import local_cpu
    from nnmeter.predictors.dataset import data_root

    return data_root() / "datasets" / "models" / f"selection@{device or local_cpu().short_name()}"


def _read(path: Path) -> list[dict]:
    from nnmeter.predictors.dataset import read_jsonl

    return list(read_jsonl(path))


#: pool models with more parameters are left out: the .tflite converter needs over
#: 10 GiB for a 100 M-parameter ResNet on this 24 GiB machine
MAX_PARAMS = 40e6


def _pool(per_family: int) -> list:
    from nnmeter import zoo

    out = []
    for fam in FAMILIES:
        n = per_family * (2 if fam == "nasbench201" else 1)
        out += [v for v in zoo.sample_variants(fam, n, seed=SEED)
                if v.build().cost().params <= MAX_PARAMS]
    return out


def _model_file(v, backend: str, cache: Path) -> Path:
    """``v`` exported once per format into ``cache``."""
    from nnmeter.backends import get_backend
    from nnmeter.exporters import export

    fmt = get_backend(backend).model_format
    path = cache / f"{v.name}.{fmt}"
    if not path.exists():
        tmp = cache / f"{v.name}.partial.{fmt}"
        export(v.build(), tmp, fmt)
        tmp.replace(path)
    return path


def _measure_models(variants, backends, passes, out_path: Path, cache: Path, tag: str) -> None:
    """Zoo variants, exported once per format into ``cache``."""
    items = [(v.name, v.family, (lambda b, v=v: _model_file(v, b, cache))) for v in variants]
    _measure_items(items, backends, passes, out_path, tag)


def _probe_tag(out_path: Path, backend: str) -> str:
    """The speed-reference tag of ``backend``'s probes in the run writing ``out_path``
    (``truth-ort-cpu``): a backend runs the reference at its own speed."""
    return f"{out_path.stem}-{backend}"


def _measure_items(items, backends, passes, out_path: Path, tag: str) -> None:
    """``items`` — (name, family, file of a backend) — in ``passes`` passes, every
    backend in turn per model with the order rotated, each row appended as measured.
    Each backend measures the speed reference (``nnmeter.devices.reference``) before its
    first model and again whenever one is due, into ``speed_reference.jsonl`` beside the
    rows (tag :func:`_probe_tag`), so that a report can say how fast the host ran
    against each predictor's build."""
    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.devices.reference import SpeedReference

    done = {(r["model"], r["backend"], r["pass"]) for r in _read(out_path)}
    todo = [(p, it) for p in range(passes) for it in items]
    total = len(todo) * len(backends)
    bar = tqdm(total=total, initial=sum(1 for p, it in todo for b in backends
                                        if (it[0], b, p) in done), desc=tag, unit="job")
    profs = {b: Profiler(b) for b in backends}
    refs = {b: SpeedReference(out_path.parent, tag=_probe_tag(out_path, b)) for b in backends}
    try:
        with open(out_path, "a") as fh:
            for i, (p, (name, family, file_of)) in enumerate(todo):
                order = list(backends[i % len(backends):]) + list(backends[:i % len(backends)])
                for b in order:
                    if (name, b, p) in done:
                        continue
                    refs[b].probe(profs[b], f"{tag} pass {p}")  # when one is due
                    try:
                        m = profs[b].measure(file_of(b), on_error="record")
                        row = {"ok": m.ok, "latency_ms": m.latency_ms if m.ok else None,
                               "spread": m.spread, "error": m.error,
                               "fingerprint_id": m.device.fingerprint_id if m.device else None}
                    except Exception as err:  # an export the format cannot take
                        row = {"ok": False, "latency_ms": None,
                               "error": f"{type(err).__name__}: {err}"}
                    fh.write(json.dumps({"model": name, "family": family, "backend": b,
                                         "pass": p, **row,
                                         "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S")})
                             + "\n")
                    fh.flush()
                    bar.update()
    finally:
        bar.close()
        for prof in profs.values():
            prof.close()


def _onnx_backends(backends) -> tuple[str, ...]:
    """The backends of ``backends`` that load an ONNX file."""
    from nnmeter.backends import get_backend

    return tuple(b for b in backends if get_backend(b).model_format == "onnx")


def _real_items(real_dir: str | None) -> list[tuple[str, str, Path]]:
    """The real-architecture set's ONNX models: (name, family, file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "real_set", Path(__file__).with_name("real_set.py"))
    real_set = importlib.util.module_from_spec(spec)
    sys.modules["real_set"] = real_set  # its dataclasses look their module up
    spec.loader.exec_module(real_set)
    d = Path(real_dir) if real_dir else real_set.default_dir("real")
    man = d / "manifest.json"
    if not man.exists():
        raise SystemExit(f"error: no real-architecture set in {d}; build it with "
                         "'python experiments/real_set.py build --only torch.onnx,caffe2' "
                         "or pass --no-real")
    manifest = json.loads(man.read_text())
    return [(n, info["family"], d / info["file"]) for n, info in sorted(manifest.items())
            if info["file"].endswith(".onnx")]


def _table(rows: list[dict]) -> dict[str, dict[str, list[float]]]:
    """model → backend → latencies of its passes (ok rows only)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("ok") and r.get("latency_ms"):
            out.setdefault(r["model"], {}).setdefault(r["backend"], []).append(r["latency_ms"])
    return out


def _threads(args: argparse.Namespace) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(t) for t in str(args.threads).split(",")}))
    except ValueError:
        raise SystemExit(f"--threads {args.threads}: thread counts separated by commas, "
                         "e.g. 1,2") from None
    if not out or out[0] < 1:
        raise SystemExit(f"--threads {args.threads}: thread counts are 1 or more")
    return out


def _with_threads(backends, threads: tuple[int, ...]) -> tuple[str, ...]:
    """Each backend at each thread count (``ort-cpu``, ``ort-cpu-t2``, ...)."""
    return tuple(b if t == 1 else f"{b}-t{t}" for t in threads for b in backends)


def _measured(threads: tuple[int, ...]) -> tuple[str, ...]:
    """What a run measures: every backend at one thread, the f32 ones at the others
    too (OpenVINO's bf16 is measured beside, never a candidate)."""
    return BACKENDS + tuple(b for b in _with_threads(F32, threads) if b not in BACKENDS)


def _suffix(threads: tuple[int, ...]) -> str:
    """The files of a run over thread counts: ``truth.jsonl`` for one thread,
    ``truth_threads1-2.jsonl`` for 1 and 2."""
    return "" if threads == (1,) else "_threads" + "-".join(map(str, threads))


def _winners(table: dict[str, dict[str, list[float]]], cands) -> dict[str, str]:
    """Model → its fastest candidate, over the models measured on every candidate."""
    return {m: min(cands, key=lambda b: min(bs[b])) for m, bs in table.items()
            if all(b in bs for b in cands)}


def _candidates(args: argparse.Namespace) -> tuple[str, ...]:
    cands = tuple(b.strip() for b in args.candidates.split(",")) if args.candidates else F32
    unknown = [b for b in cands if b not in BACKENDS]
    if unknown:
        raise SystemExit(f"--candidates: {', '.join(unknown)} not measured here; the "
                         f"measured backends are {', '.join(BACKENDS)}")
    return _with_threads(cands, _threads(args))


def pool(args: argparse.Namespace) -> None:
    d = _dir(args.device)
    d.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    _measure_models(_pool(args.per_family), _measured(_threads(args)), 1, d / "pilot.jsonl",
                    cache, "pilot")


def choose(args: argparse.Namespace) -> None:
    d = _dir(args.device)
    cands = _candidates(args)
    t = {m: {b: v for b, v in bs.items() if b in cands}
         for m, bs in _table(_read(d / "pilot.jsonl")).items()}
    winners = _winners(t, cands)
    chosen = dict(winners)
    while True:
        counts = {b: sum(1 for w in chosen.values() if w == b) for b in cands}
        top = max(counts, key=counts.get)
        if counts[top] * 2 <= len(chosen):
            break
        # drop the model of the top winner whose win is the narrowest
        def margin(m: str) -> float:
            lat = sorted(min(v) for v in t[m].values())
            return lat[1] / lat[0]
        drop = min((m for m, w in chosen.items() if w == top), key=margin)
        del chosen[drop]
    rec = {"candidates": list(cands), "chosen": sorted(chosen),
           "dropped": sorted(set(winners) - set(chosen)), "pilot_winners": winners,
           "pilot_most_frequent": max(cands, key=lambda b: sum(
               1 for w in winners.values() if w == b)),
           "pilot_counts": {b: sum(1 for w in winners.values() if w == b) for b in cands},
           "set_counts": {b: sum(1 for w in chosen.values() if w == b) for b in cands},
           "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (d / f"set{_suffix(_threads(args))}.json").write_text(json.dumps(rec, indent=1))
    print(f"pilot winners {rec['pilot_counts']}; set of {len(chosen)}: {rec['set_counts']}")


def _run(args: argparse.Namespace) -> tuple[Path, tuple[int, ...], str, tuple[str, ...], dict]:
    """The run ``args`` name: its folder, thread counts, file suffix, the backends it
    measures and its set (``choose``'s record)."""
    d = _dir(args.device)
    threads = _threads(args)
    sfx = _suffix(threads)
    path = d / f"set{sfx}.json"
    if not path.exists():
        raise SystemExit(f"error: no selection set {path}; run 'pool' and 'choose'"
                         + (f" with --threads {args.threads}" if sfx else "") + " first")
    return d, threads, sfx, _measured(threads), json.loads(path.read_text())


def measure(args: argparse.Namespace) -> None:
    from nnmeter.backends import Profiler
    from nnmeter.selection import measure_rates

    d, threads, sfx, measured, rec = _run(args)
    names = set(rec["chosen"])
    variants = [v for v in _pool(args.per_family) if v.name in names]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    _measure_models(variants, measured, args.passes, d / f"truth{sfx}.jsonl", cache, "truth")
    if args.real:
        items = [(n, fam, (lambda b, f=f: f)) for n, fam, f in _real_items(args.real_dir)]
        _measure_items(items, _onnx_backends(measured), args.passes,
                       d / f"real_truth{sfx}.jsonl", "real set")
    # the analytic baselines' FLOPS per backend (a backend measured before keeps its
    # rates: they are the baseline's own probes, not truth)
    rates_path = d / "rates.json"
    rec_rates = json.loads(rates_path.read_text()) if rates_path.exists() else {
        "rates_flops_per_ms": {}}
    missing = [b for b in measured if b not in rec_rates["rates_flops_per_ms"]]
    for b in missing:
        with Profiler(b) as prof:
            rec_rates["rates_flops_per_ms"][b] = measure_rates(b, prof)
    if missing:
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        rec_rates.setdefault("measured_per_backend", {}).update({b: now for b in missing})
        rates_path.write_text(json.dumps(rec_rates, indent=1))


def _score_part(models: list[str], graphs: dict, truth_rows: list[dict],
                cands: tuple[str, ...], others: tuple[str, ...], extra_picks: dict,
                rates: dict, device: str | None = None,
                speed: dict[str, float | None] | None = None) -> dict:
    """Every pick scored on ``models`` (top-1, mean and max regret), each candidate's
    predictor on them, the truth's repeatability and its near ties. ``device``: whose
    predictors rank the candidates (the set's, from ``--device``; default this
    machine's), so a set stored for another device is re-scored with that device's.
    ``speed`` (backend -> the run's speed-reference probes over its predictor's build's,
    :func:`_run_speed`): where any is known, a second pick ranks with every prediction
    times its backend's factor, what ``nnmeter select-backend --probe-speed`` does."""
    from nnmeter.selection import NEAR_TIE, AnalyticCost, rank_backends, regret, speed_factor

    full = _table(truth_rows)
    t = {m: {b: v for b, v in full[m].items() if b in cands} for m in models}
    mnn = AnalyticCost(rates, per_class=False)
    per_class = AnalyticCost(rates, per_class=True)
    picks: dict[str, dict[str, str]] = {"nnmeter": {}, "mnn_analytic": {},
                                        "analytic_per_class": {}, **extra_picks}
    predicted: dict[str, dict] = {}
    for m in models:
        g = graphs[m]
        ranked = rank_backends(g, cands, device=device)
        predicted[m] = {c.backend_id: c.as_dict() for c in ranked}
        picks["nnmeter"][m] = ranked[0].backend_id
        if speed and any(v is not None for v in speed.values()):
            # the same predictions, each times its backend's factor (as rank_backends'
            # speed= does), rather than predicting every model again
            picks.setdefault("nnmeter_run_speed", {})[m] = min(
                ranked, key=lambda c: c.predicted_ms * speed_factor(speed.get(c.backend_id))
            ).backend_id
        picks["mnn_analytic"][m] = mnn.pick(g, cands)
        picks["analytic_per_class"][m] = per_class.pick(g, cands)
    truth = {m: {b: min(t[m][b]) for b in cands} for m in models}
    best = {m: min(truth[m], key=truth[m].get) for m in models}
    runner_up = {m: sorted(truth[m].values())[1] / min(truth[m].values()) - 1
                 for m in models}
    beaten = {b: sum(1 for m in models if b in full[m] and
                     min(full[m][b]) < min(truth[m].values())) for b in others}
    out: dict = {"models": len(models), "candidates": list(cands), "speed_factors": speed or {},
                 "other_backends_faster_than_every_candidate": beaten,
                 "set_counts": {b: sum(1 for m in models if best[m] == b) for b in cands},
                 "near_ties": sum(r <= NEAR_TIE for r in runner_up.values()),
                 "scores": {}, "predicted": predicted, "measured": truth, "picks": picks}
    for name, p in picks.items():
        regs = [regret(p[m], truth[m]) for m in models]
        out["scores"][name] = {"top1": sum(p[m] == best[m] for m in models) / len(models),
                               "mean_regret": statistics.fmean(regs),
                               "max_regret": max(regs),
                               "within_near_tie": sum(r <= NEAR_TIE for r in regs)
                               / len(models)}
    # each candidate's predictor on the set (the picks need the ratios between backends
    # right, not the level, but a level far off says which predictor to distrust)
    out["predictor_accuracy"] = {}
    for b in cands:
        ratio = [predicted[m][b]["predicted_ms"] / truth[m][b] for m in models]
        out["predictor_accuracy"][b] = {
            "within_10": sum(abs(r - 1) <= 0.10 for r in ratio) / len(ratio),
            "mape": 100 * statistics.fmean(abs(r - 1) for r in ratio),
            "median_ratio": statistics.median(ratio),
            "device": next(iter(predicted.values()))[b]["device"]}
    # repeatability: the first pass's winner scored on the second
    by_pass: dict[int, dict[str, dict[str, float]]] = {}
    for r in truth_rows:
        if r.get("ok") and r["model"] in truth and r["backend"] in cands:
            by_pass.setdefault(r["pass"], {}).setdefault(r["model"], {})[r["backend"]] = \
                r["latency_ms"]
    if len(by_pass) >= 2:
        p0, p1 = by_pass[0], by_pass[1]
        both = [m for m in models if m in p0 and m in p1 and len(p0[m]) == len(p1[m]) ==
                len(cands)]
        w0 = {m: min(p0[m], key=p0[m].get) for m in both}
        w1 = {m: min(p1[m], key=p1[m].get) for m in both}
        regs = [regret(w0[m], p1[m]) for m in both]
        out["repeatability"] = {"top1": sum(w0[m] == w1[m] for m in both) / len(both),
                                "mean_regret": statistics.fmean(regs),
                                "within_near_tie": sum(r <= NEAR_TIE for r in regs)
                                / len(both), "models": len(both)}
    return out


def _run_speed(run_path: Path, cands: tuple[str, ...], device: str | None
               ) -> dict[str, float | None]:
    """Per candidate, how much longer the speed reference took in the run that wrote
    ``run_path`` (its probes, tag :func:`_probe_tag`) than in the build of the predictor
    that ranks it (None where either recorded none: runs before the probes existed,
    builds before the reference)."""
    from nnmeter.devices.reference import compare_records, read_reference
    from nnmeter.predictors import load_predictor

    out: dict[str, float | None] = {}
    for b in cands:
        run = read_reference(run_path.parent, tag=_probe_tag(run_path, b))
        ds = load_predictor(b, device=device).dataset_dir
        out[b] = compare_records(read_reference(ds), run) if ds and run else None
    return out


def _part_lines(title: str, part: dict) -> list[str]:
    from nnmeter.selection import NEAR_TIE

    n = part["models"]
    lines = [f"{title}: {n} models among {', '.join(part['candidates'])}; winners "
             f"{part['set_counts']}; near ties (runner-up within {100 * NEAR_TIE:.0f} % of "
             f"the fastest) {part['near_ties']} of {n}"]
    for b, k in part["other_backends_faster_than_every_candidate"].items():
        lines.append(f"  ({b}, not a candidate, beat every candidate on {k} of {n})")
    for name, sc in part["scores"].items():
        lines.append(f"  {name:20s} top-1 {100 * sc['top1']:5.1f} %  mean regret "
                     f"{100 * sc['mean_regret']:5.1f} %  max regret "
                     f"{100 * sc['max_regret']:5.1f} %  regret ≤ {100 * NEAR_TIE:.0f} % "
                     f"{100 * sc['within_near_tie']:5.1f} %")
    if "repeatability" in part:
        r = part["repeatability"]
        lines.append(f"  {'repeatability':20s} top-1 {100 * r['top1']:5.1f} %  mean regret "
                     f"{100 * r['mean_regret']:5.1f} %  regret ≤ {100 * NEAR_TIE:.0f} % "
                     f"{100 * r['within_near_tie']:5.1f} %  (pass 1's winner on pass 2, "
                     f"{r['models']} models)")
    if any(f is not None for f in part.get("speed_factors", {}).values()):
        lines.append("  nnmeter_run_speed: each prediction times its backend's speed-reference "
                     "probes in this run over its build's (" + ", ".join(
                         f"{b} {f:.3f}" if f is not None else f"{b} no probes"
                         for b, f in part["speed_factors"].items()) + ")")
    for b, a in part["predictor_accuracy"].items():
        lines.append(f"  predictor {b} ({a['device']}): {100 * a['within_10']:.1f} % within "
                     f"±10 %, MAPE {a['mape']:.1f} %, median predicted/measured "
                     f"{a['median_ratio']:.3f}")
    return lines


def report(args: argparse.Namespace) -> None:
    import numpy as np

    from nnmeter import zoo

    d, threads, sfx, measured, rec = _run(args)
    cands = tuple(rec["candidates"])
    others = tuple(b for b in measured if b not in cands)
    truth_rows = _read(d / f"truth{sfx}.jsonl")
    full = _table(truth_rows)
    models = [m for m in rec["chosen"] if m in full and all(b in full[m] for b in cands)]
    rates = json.loads((d / "rates.json").read_text())["rates_flops_per_ms"]
    graphs = {m: zoo.get_variant(m).build() for m in models}
    pilot = _table(_read(d / "pilot.jsonl"))
    pool_flops = {m: (graphs[m] if m in graphs else zoo.get_variant(m).build()).cost().flops
                  for m in pilot}

    def flops_line(b: str, leave_out: str | None) -> np.ndarray:
        """Backend ``b``'s latency against FLOPs, fitted on the pilot (the model itself
        left out: the zoo set is the pilot's models, measured afresh)."""
        ms = [m for m in pilot if m != leave_out and b in pilot[m]]
        return np.polyfit([float(pool_flops[m]) for m in ms], [min(pilot[m][b]) for m in ms], 1)

    def most_frequent(cs: tuple[str, ...]) -> str:
        wins = list(_winners(pilot, cs).values())
        return max(cs, key=wins.count)

    zoo_part = _score_part(models, graphs, truth_rows, cands, others, {
        "flops_lines": {m: min(cands, key=lambda b: np.polyval(
            flops_line(b, m), pool_flops[m])) for m in models},
        "most_frequent": {m: rec["pilot_most_frequent"] for m in models}}, rates,
        args.device, _run_speed(d / f"truth{sfx}.jsonl", cands, args.device))
    out: dict = {"device": d.name.split("@", 1)[1], "truth": "fastest of the passes of one run",
                 **zoo_part}
    lines = [f"backend selection on {out['device']} (written {time.strftime('%Y-%m-%d %H:%M')}), "
             f"thread counts {','.join(map(str, threads))}, truth: {out['truth']}",
             *_part_lines("zoo set (seed 3000)", zoo_part)]
    real_path = d / f"real_truth{sfx}.jsonl"
    if args.real and real_path.exists():
        from nnmeter.errors import NNMeterError
        from nnmeter.frontends import load_model

        real_rows = _read(real_path)
        rcands = _onnx_backends(cands)
        rfull = _table(real_rows)
        files = {n: f for n, _, f in _real_items(args.real_dir)}
        rmodels = [m for m in sorted(rfull) if m in files and all(b in rfull[m] for b in rcands)]
        rgraphs, unreadable = {}, {}
        for m in rmodels:
            try:
                rgraphs[m] = load_model(files[m])
            except NNMeterError as err:  # a model nnmeter cannot read is no pick at all
                unreadable[m] = str(err).split(";")[0]
        rmodels = [m for m in rmodels if m in rgraphs]
        lines_fit = {b: flops_line(b, None) for b in rcands}
        mf = most_frequent(rcands)
        real_part = _score_part(rmodels, rgraphs, real_rows, rcands,
                                tuple(b for b in _onnx_backends(measured) if b not in rcands), {
            "flops_lines": {m: min(rcands, key=lambda b: np.polyval(
                lines_fit[b], rgraphs[m].cost().flops)) for m in rmodels},
            "most_frequent": {m: mf for m in rmodels}}, rates, args.device,
            _run_speed(real_path, rcands, args.device))
        real_part["failed"] = sorted(set(rfull) - set(rmodels) - set(unreadable))
        real_part["unreadable"] = unreadable
        out["real"] = real_part
        lines += ["", *_part_lines("real-architecture set (ONNX; held out, never in the "
                                   "pilot)", real_part)]
        if real_part["failed"]:
            lines.append(f"  not measured on every candidate: {', '.join(real_part['failed'])}")
        for m, why in unreadable.items():
            lines.append(f"  not scored, nnmeter cannot read it: {m} ({why})")
    text = "\n".join(lines)
    print(text)
    args.json = args.json or f"experiments/results/backend_selection_{out['device']}{sfx}.json"
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    Path(args.json).with_suffix(".txt").write_text(text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["pool", "choose", "measure", "report"])
    ap.add_argument("--device", default=None,
                    help="device folder, and whose predictors `report` ranks with (default: "
                         "this machine)")
    ap.add_argument("--per-family", type=int, default=3)
    ap.add_argument("--candidates", default=None, metavar="B1,B2",
                    help="the backends to choose among (default: the f32 ones, "
                         + ",".join(F32) + ")")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--threads", default="1", metavar="N1,N2",
                    help="thread counts: each f32 backend at each is a candidate (default 1; "
                         "1,2 makes a run of its own: set_threads1-2.json, "
                         "truth_threads1-2.jsonl, ...)"),
    ap.add_argument("--real", action=argparse.BooleanOptionalAction, default=True,
                    help="measure and score the real-architecture set's ONNX models too "
                         "(default: yes)")
    ap.add_argument("--real-dir", default=None,
                    help="the real set's folder (default: real_set.py's)")
    ap.add_argument("--cache", default="/tmp/nnmeter-selection-models",
                    help="where exported models are kept between steps")
    ap.add_argument("--json", default=None,
                    help="report: where to write (default: experiments/results/"
                         "backend_selection_<device>[_threads1-2].json, and .txt beside)")
    args = ap.parse_args()
    {"pool": pool, "choose": choose, "measure": measure, "report": report}[args.step](args)


if __name__ == "__main__":
    main()
