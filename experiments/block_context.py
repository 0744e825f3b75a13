"""Where a whole model's time goes beyond its parts: each block measured alone against
the whole model, and what the predictor says of both.

A model is cut into blocks by its node names (``layer1``, ``inception4a``; a first
name that holds over a quarter of the nodes, such as ``features``, is cut one level
deeper). Each block is measured as a model of its own (its inputs become model
inputs), the whole model too, on ``--backend``; the predictor
(``--dataset``, default this machine's) predicts each block and the whole. Per block it
prints the time alone, the sum of its kernels' ``base_ms`` (the regressors' estimates,
trained on rows whose edge conversions, overhead and chain excess were taken off, and
before the in-model term: a block alone pays edges that this sum leaves out) and the
prediction. The last lines compare the whole model with the sum
of its blocks alone, measured and predicted: a whole model slower than its blocks is an
effect across blocks (the model's working set, the runtime's memory plan), which a
per-kernel in-model term cannot see.

Measurements are the fastest of ``--repeats`` in one worker; each row carries the
memory probe's ratio (``nnmeter.backends.protocol.MemoryProbe``) so a busy host shows.
Run it under the measurement lock, nothing else on the CPU::

    flock /tmp/nnmeter-cpu.lock python experiments/block_context.py --backend mnn-cpu \\
        --models googlenet-s2000-i001-f28c94c2 --out experiments/results/block_context_mnn-cpu@<device>.txt
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def blocks_of(graph) -> dict[str, list[str]]:
    """Block name -> its nodes in topological order (model inputs left out)."""
    order = [n for n in graph.topological_order() if graph.node(n).op != "input"]
    first: dict[str, list[str]] = {}
    for n in order:
        first.setdefault(n.split(".")[0], []).append(n)
    out: dict[str, list[str]] = {}
    for key, nodes in first.items():
        if len(nodes) > len(order) / 4:
            for n in nodes:
                parts = n.split(".")
                out.setdefault(".".join(parts[:2]), []).append(n)
        else:
            out[key] = nodes
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--models", required=True, help="comma-separated zoo variant names")
    ap.add_argument("--dataset", help="predictor dataset (default: this machine's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.devices import local_cpu
    from nnmeter.errors import UnknownNameError
    from nnmeter.predictors import load_predictor

    names = [m for m in args.models.split(",") if m]
    try:
        variants = [zoo.get_variant(m) for m in names]
    except (ValueError, UnknownNameError) as err:
        ap.error(f"--models: {err}")
    pred = load_predictor(args.backend, dataset=args.dataset)
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    cpu = local_cpu()
    say(f"# blocks against whole models on {args.backend}, {cpu.model_name} (family "
        f"{cpu.family}, model {cpu.model}; {cpu.cores} cores), "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; predictor "
        f"{Path(str(pred.meta.get('dataset') or args.dataset or 'this machine')).name}")
    say(f"# command: python experiments/block_context.py {' '.join(sys.argv[1:])}")
    memory: list[float] = []
    with Profiler(args.backend) as prof:

        def timed(g) -> tuple[float, float]:
            ms = [prof.measure(g) for _ in range(args.repeats)]
            ok = [m for m in ms if m.ok]
            if not ok:
                raise RuntimeError(f"{g.name}: {ms[0].error}")
            best = min(ok, key=lambda m: m.latency_ms)
            memory.append(max(m.extra.get("memory_ratio") or 1.0 for m in ok))
            return best.latency_ms, memory[-1]

        for v in variants:
            g = v.build()
            say(f"\n{v.name} ({g.cost().params * 4 / 1e6:.1f} MB of weights)")
            say(f"{'block':18s} {'alone us':>9s} {'kernels us':>10s} {'pred us':>8s} "
                f"{'alone/kernels':>13s} {'memory':>6s}")
            tot_m = tot_b = tot_p = 0.0
            for key, nodes in blocks_of(g).items():
                sub = g.subgraph(nodes, name=f"{v.name}-{key}")
                r = pred.predict(sub, check_device=False)
                base = sum(k.base_ms for k in r.rows)
                m, mem = timed(sub)
                tot_m, tot_b, tot_p = tot_m + m, tot_b + base, tot_p + r.total_ms
                say(f"{key:18s} {m * 1e3:9.1f} {base * 1e3:10.1f} {r.total_ms * 1e3:8.1f} "
                    f"{m / base if base else float('nan'):13.2f} {mem:5.2f}x")
            whole, mem = timed(g)
            pw = pred.predict(g, check_device=False).total_ms
            say(f"sum of blocks alone: measured {tot_m:.3f} ms, kernels {tot_b:.3f} ms, "
                f"predicted {tot_p:.3f} ms")
            say(f"whole model: measured {whole:.3f} ms ({whole / tot_m:.2f}x its blocks "
                f"alone; memory probe {mem:.2f}x), predicted {pw:.3f} ms ({pw / tot_p:.2f}x "
                f"its blocks predicted alone; {pw / whole:.3f}x the measured whole)")
    from nnmeter.backends.base import MEMORY_WARN

    busy = statistics.median(memory) if memory else 1.0
    if busy > MEMORY_WARN:
        say(f"\nnote: the host's memory ran slow through this run (memory probe at a median "
            f"{busy:.2f}x its fastest): another tenant's traffic slows a whole model more "
            f"than its smaller blocks, so repeat on a quiet host before trusting a ratio")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
