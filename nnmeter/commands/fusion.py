"""``nnmeter detect-fusion`` and ``nnmeter kernels``.

Examples
--------
Shell::

    nnmeter detect-fusion --backend ort-cpu               # writes fusion_rules/ort-cpu.json
    nnmeter detect-fusion --backend mnn-cpu --alpha 0.4 --out /tmp/mnn.json --json
    nnmeter kernels model.onnx --backend ort-cpu
"""

from __future__ import annotations

import argparse
from typing import Any

from nnmeter.commands._common import (
    add_backend, add_input_shape, add_json, emit_json, parse_input_shapes, print_table,
)

__all__ = ["register", "run_detect", "run_kernels", "kernels_report"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "detect-fusion", help="detect a backend's fusion rules with crafted test cases",
        description="Measure op1, op2 and op1->op2 for every op pair (plus multi-output, "
                    "multi-input and block tests) on a backend; fused when "
                    "T1 + T2 - T12 > alpha * min(T1, T2). Writes fusion_rules/<backend>.json "
                    "(resumable: an interrupted run continues from its partial journal).",
    )
    add_backend(p)
    p.add_argument("--alpha", type=float, default=0.5, help="fusion threshold factor (0.5)")
    p.add_argument("--out", metavar="FILE", help="output JSON (default fusion_rules/<backend>.json)")
    p.add_argument("--hw", type=int, default=None,
                   help="test input height/width (28; 7 for ort-*; see TestShapes.for_backend)")
    p.add_argument("--cin", type=int, default=None, help="test input channels (64; 16 for ort-*)")
    p.add_argument("--cout", type=int, default=None,
                   help="conv output channels (128; 32 for ort-*)")
    p.add_argument("--fc-width", type=int, default=None, help="fc width (428; 64 for ort-*)")
    p.add_argument("--balanced", choices=("yes", "no"), default=None,
                   help="resize the heavy op of heavy/light pairs (yes; no for ort-*)")
    p.add_argument("--only", action="append", default=None, metavar="CASE",
                   help="test only this case (e.g. 'conv->relu', 'block:se'); repeatable")
    p.add_argument("--no-resume", action="store_true",
                   help="ignore measurements journaled by an interrupted run")
    p.add_argument("--no-edge-correction", action="store_true",
                   help="keep the layout conversions at the single-op models' edges in "
                        "their times (the plain rule)")
    p.add_argument("--no-handoff-correction", action="store_true",
                   help="keep what the runtime pays for handing tensors in and out of a "
                        "model in the times")
    p.add_argument("--joins-only", action="store_true",
                   help="only read, from the runtime's own graph, which operand's kernel "
                        "takes a residual add, and write it into the existing rules file "
                        "(seconds; runtimes that show their graph: ort-cpu, openvino-cpu, "
                        "mnn-cpu)")
    p.add_argument("--from-runtime", action="store_true",
                   help="take every decision from the runtime's own graph instead of "
                        "timing (the zoo's base models and the test cases, loaded once "
                        "each; minutes, no timing noise), starting from the existing "
                        "rules file's patterns; ort-cpu, openvino-cpu, mnn-cpu")
    p.add_argument("--new-pairs-from", metavar="FAMILY|FILE[,...]", default=None,
                   help="with --from-runtime: only add the pairs that these zoo families' "
                        "models (or model files) show and the rules file lacks (e.g. "
                        "vit,bert,mobilevit for "
                        "transformer kernels), decided by the runtime's graph; every "
                        "existing decision stays as it is")
    add_json(p)
    p.set_defaults(func=run_detect)

    k: argparse.ArgumentParser = subparsers.add_parser(
        "kernels", help="split a model into the kernels a backend runs",
        description="Partition MODEL into kernels with the backend's detected fusion rules "
                    "and print one row per kernel (type, nodes, config, FLOPs).",
    )
    k.add_argument("model", help="model file (.onnx, .tflite, .keras, IR .json, ...)")
    add_backend(k)
    add_input_shape(k)
    k.add_argument("--rules", metavar="FILE", help="rules JSON to use instead of the backend's")
    add_json(k)
    k.set_defaults(func=run_kernels)


def run_detect(args: argparse.Namespace) -> int:
    import dataclasses

    from nnmeter.fusion import TestShapes, detect_fusion, rules_path

    over = {"hw": args.hw, "cin": args.cin, "cout": args.cout, "fc_width": args.fc_width,
            "balanced": None if args.balanced is None else args.balanced == "yes"}
    shapes = dataclasses.replace(TestShapes.for_backend(args.backend),
                                 **{k: v for k, v in over.items() if v is not None})
    out = args.out or rules_path(args.backend)
    if args.joins_only:
        return _run_joins(args, out)
    if args.from_runtime:
        return _run_from_runtime(args, out)
    rules = detect_fusion(args.backend, alpha=args.alpha, shapes=shapes, out=out,
                          only=args.only, progress=not args.json, resume=not args.no_resume,
                          edge_correction=not args.no_edge_correction,
                          handoff_correction=not args.no_handoff_correction)
    summary = rules.summary()
    summary["out"] = str(out)
    if args.json:
        emit_json({**summary, "rules": rules.to_dict()})
        return 0
    rows = [[p.name, p.kind, "yes" if p.fused else "no", "yes" if p.close else "",
             p.saving_ms, p.threshold_ms] for p in rules.patterns]
    print_table(["pattern", "kind", "fused", "close", "saving_ms", "threshold_ms"], rows)
    print()
    for kind in ("pair", "multi_output", "multi_input", "block"):
        s = summary[kind]
        print(f"{kind:13s} tested {s['tested']:4d}  fused {s['fused']:4d}  close {s['close']:4d}")
    print(f"wrote {out}")
    return 0


def _run_from_runtime(args: argparse.Namespace, out: Any) -> int:
    import functools
    import time
    from pathlib import Path

    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.fusion import load_rules
    from nnmeter.fusion.joins import join_operand_from_runtime, with_join_operand
    from nnmeter.fusion.runtime import runtime_rules

    base_path = Path(out) if Path(out).exists() else None
    base = load_rules(str(base_path) if base_path else args.backend)
    if args.new_pairs_from:
        return _run_new_pairs(args, out, base, base_path)
    graphs = [zoo.get_family(f).build(zoo.get_family(f).base_config())
              for f in zoo.FAMILY_NAMES]
    t0 = time.perf_counter()
    with Profiler(args.backend) as prof:
        profile = functools.partial(prof.profile, runs=1)
        rules, report = runtime_rules(base, profile, graphs, progress=not args.json)
        rules = with_join_operand(rules, join_operand_from_runtime(prof))
    flipped = sorted(n for n, r in report.items() if r["fused"] != r["timed_fused"])
    record = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "graphs": [g.name for g in graphs], "wall_s": round(time.perf_counter() - t0, 1),
        "sources": {src: sum(r["source"] == src for r in report.values())
                    for src in sorted({r["source"] for r in report.values()})},
        "changed_from_timed": flipped}
    # the records of earlier --new-pairs-from runs stay
    _write_rules(out, base_path, rules, lambda runtime: runtime.update(record))
    if args.json:
        emit_json({"out": str(out), **record, "patterns": report})
        return 0
    print(f"{len(report)} patterns decided from {args.backend}'s own graph: "
          + ", ".join(f"{v} by {k}" for k, v in record["sources"].items()))
    print(f"{len(flipped)} differ from the timed decisions: {', '.join(flipped) or '-'}")
    print(f"wrote {out}")
    return 0


def _write_rules(out: Any, base_path: Any, rules: Any, update_runtime: Any) -> None:
    """Write ``rules`` to ``out`` over the file at ``base_path`` (its other keys kept),
    after ``update_runtime(record)`` changed its ``runtime_rules`` record in place."""
    import json
    from pathlib import Path

    from nnmeter.predictors.store import write_atomic

    data = json.loads(Path(base_path).read_text()) if base_path else {}
    data.update(rules.to_dict())
    update_runtime(data.setdefault("runtime_rules", {}))
    write_atomic(Path(out), (json.dumps(data, indent=1) + "\n").encode())


def _run_new_pairs(args: argparse.Namespace, out: Any, base: Any, base_path: Any) -> int:
    import functools
    import time
    from pathlib import Path

    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.frontends import load_model
    from nnmeter.fusion.runtime import new_pairs_from_models

    names = [f.strip() for f in args.new_pairs_from.split(",") if f.strip()]
    graphs = []
    for name in names:
        if Path(name).suffix:  # a model file (.onnx, IR .json, ...)
            graphs.append(load_model(name))
            continue
        fam = zoo.get_family(name)  # an unknown name lists the known ones
        graphs.append(fam.build(fam.base_config()))
        graphs.extend(v.build() for v in zoo.sample_variants(fam.name, 2, seed=0))
    t0 = time.perf_counter()
    with Profiler(args.backend) as prof:
        rules, report = new_pairs_from_models(base, functools.partial(prof.profile, runs=1),
                                              graphs)
    run = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "graphs": [g.name for g in graphs], "wall_s": round(time.perf_counter() - t0, 1),
           "added": sorted(report)}

    def append_run(runtime: dict) -> None:
        runs = runtime.get("new_pairs") or []
        runs = [runs] if isinstance(runs, dict) else list(runs)  # one run per call
        runtime["new_pairs"] = runs + [run]

    _write_rules(out, base_path, rules, append_run)
    if args.json:
        emit_json({"out": str(out), "added": report})
        return 0
    print_table(["pattern", "fused", "edges fused", "edges"],
                [[n, "yes" if r["fused"] else "no", r["fused_edges"], r["edges"]]
                 for n, r in report.items()])
    print(f"{len(report)} pairs added from {len(graphs)} models of {', '.join(names)}; "
          f"wrote {out}")
    return 0


def _run_joins(args: argparse.Namespace, out: Any) -> int:
    from pathlib import Path

    from nnmeter.backends import Profiler
    from nnmeter.errors import FusionRulesError
    from nnmeter.fusion.joins import join_operand_from_runtime, update_rules_file

    if not Path(out).exists():
        raise FusionRulesError(f"no rules file at {out}; run `nnmeter detect-fusion "
                               f"--backend {args.backend}` first")
    with Profiler(args.backend) as prof:
        result = join_operand_from_runtime(prof)
    update_rules_file(out, result)
    if args.json:
        emit_json({"out": str(out), **result})
        return 0
    print(f"residual add joins: {result['operand'] or 'not known'} "
          f"({', '.join(f'{k} -> {v}' for k, v in result['evidence'].items())})")
    print(f"wrote {out}")
    return 0


def kernels_report(graph: Any, rules: Any) -> dict[str, Any]:
    """JSON-able kernel table of ``graph`` under ``rules``."""
    from nnmeter.errors import UnsupportedOpError
    from nnmeter.partition import partition

    rows = []
    for k in partition(graph, rules):
        kt = k.kernel_type
        try:
            flops = kt.cost(k.config).flops
        except UnsupportedOpError:  # an 'other' op that cannot be rebuilt
            flops = getattr(k.config, "flops", None)
        rows.append({**k.as_dict(), "flops": flops,
                     "features": dict(zip(kt.feature_names, map(float, k.features())))})
    return {"model": graph.name, "backend_id": rules.backend_id,
            "fingerprint_id": rules.fingerprint_id, "nodes": len(graph),
            "kernels": rows}


def _config_text(cfg: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("attrs_json",))


def run_kernels(args: argparse.Namespace) -> int:
    from nnmeter.frontends import load_model
    from nnmeter.fusion import load_rules

    from nnmeter.ir.canonical import for_backend

    rules = load_rules(args.rules or args.backend)
    graph = load_model(args.model, input_shapes=parse_input_shapes(args.input_shape))
    graph = for_backend(graph, rules.backend_id)
    report = kernels_report(graph, rules)
    if args.json:
        emit_json(report)
        return 0
    rows = [[i, r["type"], ",".join(r["nodes"]) if len(r["nodes"]) <= 3
             else f"{r['nodes'][0]}..{r['nodes'][-1]} ({len(r['nodes'])})",
             _config_text(r["config"]), r["flops"]] for i, r in enumerate(report["kernels"])]
    print_table(["#", "type", "nodes", "config", "FLOPs"], rows)
    print()
    print(f"{report['model']}: {report['nodes']} nodes -> {len(rows)} kernels "
          f"on {rules.backend_id}")
    return 0
