"""Subcommands ``backends``, ``measure`` and ``profile``."""

from __future__ import annotations

import argparse
import math
import sys

from nnmeter.commands._common import add_backend, add_json, emit_json, print_table
from nnmeter.farm import add_runner_arguments

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("backends", help="list backends, their versions, and why "
                                               "unavailable ones are")
    add_json(p)
    p.set_defaults(func=_cmd_backends)

    p = subparsers.add_parser(
        "measure", help="measure a model's latency on a backend (in a worker process)",
        description="Measure MODEL (.onnx, .tflite or IR .json) on a backend with the "
                    "nnmeter protocol: warm-up, timed rounds, spread, drift check.")
    p.add_argument("model", metavar="MODEL")
    add_backend(p)
    p.add_argument("--runs", type=int, default=None,
                   help="runs per round (default: adapt to a time budget per round)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds before the measurement is abandoned (default 120)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the worker to a core")
    add_runner_arguments(p)
    add_json(p)
    p.set_defaults(func=_cmd_measure)

    p = subparsers.add_parser(
        "profile", help="the nodes a backend really executes, what they cover, their times")
    p.add_argument("model", metavar="MODEL")
    add_backend(p)
    p.add_argument("--runs", type=int, default=10, help="profiled runs (median per node)")
    add_runner_arguments(p)
    add_json(p)
    p.set_defaults(func=_cmd_profile)


def _cmd_backends(args: argparse.Namespace) -> int:
    from nnmeter.backends import available_backends

    rows = available_backends()
    if args.json:
        emit_json(rows)
        return 0
    print_table(["backend", "runtime", "format", "available", "version / reason"],
                [[r["backend_id"], r["runtime"], r["model_format"],
                  "yes" if r["available"] else "no",
                  r["version"] if r["available"] else r["reason"]] for r in rows])
    print("\nthreads: append -tN to an id (e.g. ort-cpu-t4); default 1 thread")
    return 0


def _cmd_measure(args: argparse.Namespace) -> int:
    from nnmeter.backends import Profiler
    from nnmeter.farm import runner_from_args, use_runner

    overrides = {"runs": args.runs, "rounds": args.rounds, "timeout_s": args.timeout}
    with use_runner(runner_from_args(args)), \
            Profiler(args.backend, core=None if args.no_pin else "auto") as prof:
        m = prof.measure(args.model, on_error="raise", **overrides)
    warnings = m.quality_warnings()
    if args.json:
        emit_json({**m.as_dict(), "warnings": warnings})
        return 0 if m.ok else 2
    if not m.ok:
        print(f"nnmeter measure: measurement failed ({m.extra.get('error_kind')}): {m.error}",
              file=sys.stderr)
        return 2
    ex = m.extra
    print(f"{m.model} on {m.backend_id}")
    print_table(["statistic", "ms"], [
        [f"latency ({ex.get('statistic')})", m.latency_ms], ["median", m.median_ms],
        ["min", m.min_ms], ["std", m.std_ms]])
    print(f"\nrounds {m.rounds}, runs {m.runs}, spread {m.spread:.1%}, "
          f"settled {ex.get('settled')}, calibration {ex.get('calibration_ms', math.nan):.4g} ms"
          f" (drift {ex.get('drift', math.nan):.1%}), compile {ex.get('compile_ms', 0):.0f} ms")
    if ex.get("memory_ratio") is not None:
        print(f"memory probe {ex['memory_ratio']:.2f}x its fastest on this device "
              f"({ex.get('memory_probe_best_ms', math.nan):.3g} ms; 1.00x: no other tenant "
              f"using the memory)")
    d = m.device
    if d is not None:
        print(f"device {d.fingerprint_id}: {d.cpu_model}, {d.cores} cores, {d.runtime} "
              f"{d.runtime_version}, {d.settings}")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from nnmeter.backends import profile
    from nnmeter.farm import runner_from_args, use_runner

    with use_runner(runner_from_args(args)):
        nodes = profile(args.model, args.backend, runs=args.runs)
    if args.json:
        emit_json([n.as_dict() for n in nodes])
        return 0
    print_table(["executed node", "type", "ms", "covers"],
                [[n.name, n.op_type, n.time_ms, ", ".join(n.covers) or "-"] for n in nodes])
    timed = [n.time_ms for n in nodes if n.time_ms is not None]
    if timed:
        print(f"\n{len(nodes)} executed nodes, {sum(timed):.4g} ms in timed nodes")
    else:
        print(f"\n{len(nodes)} executed nodes; this backend reports no per-node times")
    return 0
