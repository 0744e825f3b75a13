"""Does another tenant's memory traffic slow our measurements, and does the memory probe
take it out?

On a shared cloud host the other tenants share the last-level cache and the memory
bandwidth with this guest. Nothing inside the guest shows them: no process of ours is
preempted and the matrix calibration (L1/L2-resident) keeps its time. The protocol's
memory probe (:class:`nnmeter.backends.protocol.MemoryProbe`: a sum over twice the
last-level cache) does feel them. Two parts:

1. **Timeline.** For ``--minutes``, alternately: the matrix calibration and the memory
   probe (in this process), then one model measured (3 rounds; the worker samples its
   own probe just before and after). Prints how the model's time follows each signal,
   and its time while the worker's probe was quiet against while it was slow.
2. **A/B.** ``--set`` zoo variants (seed ``--seed``, mid-size families whose data lives
   around the cache, under ``--max-gflops``) measured in two passes, each model with
   the memory gate (``ProtocolSettings.memory_gate``: rounds timed while the probe ran
   slow are set aside) off and on, side by side (off, on; the next model on, off).
   Prints per protocol the repeatability of the two passes (within ±5 / ±10 %), the
   median |pass 1 / pass 0 - 1|, pass 1 against pass 0, the time against the other
   protocol and the wall time per measurement.

Rows go to ``--out``.jsonl as they come; the report to ``--out``.txt. Run it under the
measurement lock, nothing else on the CPU::

    flock /tmp/nnmeter-cpu.lock python experiments/memory_contention.py --backend ort-cpu \\
        --out experiments/results/memory_contention_ort-cpu@<device>

Figures come from real runs only; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: families whose variants mostly keep 2-32 MB of weights, where the stored sets repeat
#: worst (one Zen 4 core; the last-level cache is 32 MiB)
FAMILIES = ("mobilenetv2", "mobilenetv3", "mnasnet", "proxylessnas", "shufflenetv2",
            "squeezenet", "googlenet", "resnet")


def timeline(prof, probe, graph, minutes: float, fh, say) -> None:
    from nnmeter.backends.protocol import calibration_ms

    rows = []
    t0 = time.time()
    while time.time() - t0 < minutes * 60:
        cal = calibration_ms(repeats=1, runs=5)
        mem = min(probe.sample() for _ in range(2))
        m = prof.measure(graph, rounds=3)
        row = {"part": "timeline", "t": round(time.time() - t0, 2), "calibration_ms": cal,
               "probe_ms": mem, "model_ms": m.latency_ms if m.ok else None,
               "worker_probe_ratio": m.extra.get("memory_ratio") if m.ok else None}
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        if m.ok:
            rows.append(row)
    if len(rows) < 5:
        say("timeline: too few measurements")
        return
    cal = np.array([r["calibration_ms"] for r in rows])
    mem = np.array([r["probe_ms"] for r in rows])
    mod = np.array([r["model_ms"] for r in rows])
    say(f"timeline: {len(rows)} rounds over {minutes:g} min; model {graph.name}")
    for name, a in (("matrix calibration", cal), ("memory probe", mem), ("model", mod)):
        say(f"  {name:20s} fastest {a.min():.4g} ms, median {np.median(a) / a.min():.2f}x, "
            f"90th percentile {np.percentile(a, 90) / a.min():.2f}x")
    lm = np.log(mod / mod.min())
    near = np.array([r["worker_probe_ratio"] or 1.0 for r in rows])
    for name, a in (("matrix calibration", cal), ("memory probe", mem),
                    ("worker's probe around the job", near)):
        say(f"  model time against the {name}: correlation of logs "
            f"{np.corrcoef(np.log(a / a.min()), lm)[0, 1]:+.2f}")
    quiet = near <= 1.15
    if quiet.any() and (~quiet).any():
        say(f"  model while the worker's probe was within 15 % of its fastest: median "
            f"{np.median(mod[quiet]) / mod.min():.3f}x its fastest (n={quiet.sum()}); "
            f"while it was slower: {np.median(mod[~quiet]) / mod.min():.3f}x "
            f"(n={(~quiet).sum()})")


def ab(prof, graphs, fh, say) -> None:
    res: dict[tuple[str, bool, int], float] = {}
    wall: dict[bool, list[float]] = {False: [], True: []}
    for p in range(2):
        for i, g in enumerate(graphs):
            order = (False, True) if (i + p) % 2 == 0 else (True, False)
            for on in order:
                t = time.perf_counter()
                m = prof.measure(g, memory_gate=on, on_error="record")
                w = time.perf_counter() - t
                row = {"part": "ab", "variant": g.name, "pass": p, "memory_gate": on,
                       "ok": m.ok, "latency_ms": m.latency_ms if m.ok else None,
                       "wall_s": w, "contended_rounds": m.extra.get("contended_rounds"),
                       "memory_ratio_max": m.extra.get("memory_ratio_max")}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                if m.ok:
                    res[(g.name, on, p)] = m.latency_ms
                    wall[on].append(w)
        say(f"  pass {p} done ({len(graphs)} models x 2 protocols)")
    names = [g.name for g in graphs]
    for on in (False, True):
        pairs = [(res[(n, on, 0)], res[(n, on, 1)]) for n in names
                 if (n, on, 0) in res and (n, on, 1) in res]
        r = np.array([b / a for a, b in pairs])
        other = np.array([min(res[(n, on, 0)], res[(n, on, 1)])
                          / min(res[(n, not on, 0)], res[(n, not on, 1)]) for n in names
                          if all((n, x, q) in res for x in (False, True) for q in (0, 1))])
        label = "memory gate on " if on else "memory gate off"
        say(f"  {label}: {len(r)} models; passes within ±5 % {np.mean(np.abs(r - 1) <= .05):.1%}"
            f", ±10 % {np.mean(np.abs(r - 1) <= .10):.1%}, median |pass 1 / pass 0 - 1| "
            f"{np.median(np.abs(r - 1)):.1%}, pass 1 / pass 0 median {np.median(r):.3f}; "
            f"faster pass against the other protocol's: "
            f"median {np.median(other):.3f}x; wall {np.median(wall[on]):.2f} s a "
            f"measurement (median)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--model", default="examples/mobilenetv2.json",
                    help="the timeline's model (IR .json or zoo variant name)")
    ap.add_argument("--minutes", type=float, default=4.0, help="the timeline's length")
    ap.add_argument("--set", type=int, default=24, help="zoo variants in the A/B part")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--max-gflops", type=float, default=2.0,
                    help="leave larger variants out of the A/B part (a 300-ms model "
                         "takes a minute a measurement)")
    ap.add_argument("--out", required=True, help="path stem of the .jsonl and .txt")
    args = ap.parse_args()
    if args.minutes < 0 or args.set < 0:
        ap.error("--minutes and --set must be >= 0")

    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.backends.protocol import MemoryProbe, ProtocolSettings, probe_bytes
    from nnmeter.devices import local_cpu
    from nnmeter.ir import ModelGraph

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    cpu = local_cpu()
    mp = Path(args.model)
    graph = ModelGraph.from_json(mp.read_text()) if mp.suffix == ".json" and mp.exists() \
        else zoo.get_variant(args.model).build()
    say(f"# memory contention on {args.backend}, {cpu.model_name} (family {cpu.family}, "
        f"model {cpu.model}; {cpu.cores} cores), {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    say(f"# command: python experiments/memory_contention.py {' '.join(sys.argv[1:])}")
    probe = MemoryProbe(probe_bytes(dict(cpu.caches)))
    say(f"memory probe: a sum over {probe.nbytes >> 20} MiB; the threshold "
        f"{ProtocolSettings().memory_threshold:.0%} above its fastest")
    per_family = max(1, -(-args.set // len(FAMILIES))) if args.set else 0
    graphs, graphs_meta = [], []
    for fam in FAMILIES:
        for v in zoo.sample_variants(fam, 3 * per_family, seed=args.seed):
            g = v.build()
            if sum(x.family == fam for x in graphs_meta) < per_family \
                    and len(graphs) < args.set and g.cost().flops <= args.max_gflops * 1e9:
                graphs.append(g)
                graphs_meta.append(v)
    with Profiler(args.backend) as prof, open(out.with_suffix(".jsonl"), "a") as fh:
        if args.minutes > 0:
            timeline(prof, probe, graph, args.minutes, fh, say)
        if graphs:
            say(f"A/B: {len(graphs)} zoo variants (seed {args.seed}; "
                f"{', '.join(FAMILIES)}; at most {args.max_gflops:g} GFLOPs), two passes, "
                f"the memory gate off and on side by side")
            ab(prof, graphs, fh, say)
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
