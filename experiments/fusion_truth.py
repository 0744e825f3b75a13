"""Check detected fusion rules against what each runtime really executes.

For every tested pattern of ``fusion_rules/<backend>.json`` the pattern's model
(op1 -> op2, or the multi-output / multi-input / block model) and the separate models
it is compared with (op1 alone and op2 alone; the producer and each consumer; the
branch and the join; each op of a block) are profiled on the backend. The runtime's
truth is "fused" when both hold:

- *covers*: one executed node covers nodes of both op1 and op2 (multi-output: the
  producer and a consumer; multi-input: a branch and the join; block: two or more of
  the block's ops), its covers mapped back to the original model; or, in a pair, no
  executed node covers one of the two ops (it was absorbed into another node);
- *kernels*: the runtime runs fewer kernels for the pattern's model than for the
  separate models together. Kernels are the executed nodes it reports as run (timed),
  less the layout/precision conversions that do no original op's work.

Each guards against the other's blind spot. MNN's converter renames and moves ops
(the MatMul of an fc becomes ``<fc>__matmul_converted``, a sigmoid after an fc moves in
front of the fc's reshape), which leaves some compute nodes without covers and credits
a reshape raster with both ops: fc -> sigmoid "covers" but still runs its UnaryOp. And
a pair can run fewer kernels without fusing anything, when a layout conversion that op2
needs alone is not needed after op1 (MNN's pooling after a convolution: its raster is
named after the pooling and covers it). Rows keep both
(``truth_covers``, ``truth_kernels`` with the ``kernels`` counts); the summary counts
where they differ.

Prints one row per disagreement and the agreement per backend, for the rule's
decision (on corrected times) and for the raw rule without any correction
(``extra.raw``).

Run (one backend at a time, under the measurement lock)::

    flock /tmp/nnmeter-measure.lock .venv/bin/python experiments/fusion_truth.py \
        --backend ort-cpu --backend openvino-cpu --backend mnn-cpu

``--rules FILE`` scores a candidate rules file (e.g. a fresh ``nnmeter detect-fusion
--out FILE``) instead of the committed one of the backend named in the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter.backends import Profiler  # noqa: E402
from nnmeter.fusion.runtime import covers_fused, kernel_count, separate_roles  # noqa: E402
from nnmeter.fusion import TestShapes, build_testcases, load_rules  # noqa: E402
from nnmeter.fusion.testcases import graph_signature  # noqa: E402
from nnmeter.kernels import kernel_type_of  # noqa: E402
from nnmeter.partition.truth import ir_set  # noqa: E402


def ir_names(covers, names: set[str]) -> set[str]:
    """Map runtime-reported original node names back to IR node names (prefix match
    for IR ops that export to several nodes)."""
    return set(ir_set(covers, {n: n for n in names}))


#: one executed node covers ops of both sides (the library's definition)
truth_of = covers_fused


def truth_by_kernels(case, counts: dict[str, int]) -> bool:
    """Fused when the pattern's model runs fewer kernels than its separate models; a
    block only when its model runs one kernel (what the partitioner's block rule means;
    see nnmeter.fusion.runtime.case_truth)."""
    if case.kind == "block" and counts["block"] > 1:
        return False
    return counts["block"] < sum(counts[r] for r in separate_roles(case))


#: ops a runtime runs in place or as a view inside a model (concat writes its inputs'
#: producers straight into its buffer, reshape/flatten/split are views), but which a
#: single-op test model must copy from its input to its output
MEMORY_OPS = frozenset({"reshape", "flatten", "concat", "split", "identity"})

#: ops whose single-op test models pay layout/precision conversions at their edges
#: (NCHW <-> blocked, fp32 <-> bf16) that a pair of them shares
LAYOUT_OPS = frozenset({"conv", "dwconv", "fc"})

#: ops whose output is much smaller than their input
SHRINKING_OPS = frozenset({"gap", "maxpool", "avgpool", "reducemean"})


def explain(row: dict) -> str:
    """Why the detector and the runtime disagree, first match wins:

    - ``noise``: the decision was within the measurement noise (re-measured, still close);
    - ``missed, saves no time``: the runtime fused the ops into one node, but the fused
      node takes about as long as the two ops did (the rule needs a saving);
    - ``in-place op``: the runtime kept two nodes, but one is a memory op (concat,
      reshape, ...) that costs nothing after a producer inside a model, so the pair
      *does* save time - a saving the formula cannot tell from a fusion;
    - ``layout boundary``: the runtime kept two nodes, and the saving is the layout or
      precision conversion at the edges of the single-op models, which the pair model
      shares - again a saving without a fusion;
    - ``output hand-off``: the runtime kept two nodes, and op2 shrinks its input (global
      or strided pooling): op1's single-op model hands its whole output back to the
      caller, while in the pair it stays inside the runtime;
    - ``other``.
    """
    ops = set(row["name"].replace("{", "").replace("}", "").replace(",", "->").split("->"))
    if row.get("close"):
        return "noise"
    if row["truth"] and not row["decision"]:
        return "missed, saves no time"
    if ops & MEMORY_OPS:
        return "in-place op"
    if ops & LAYOUT_OPS:
        return "layout boundary"
    if row["name"].split("->")[-1] in SHRINKING_OPS:
        return "output hand-off"
    return "other"


def run_backend(backend: str, rules_file: str | None = None) -> dict:
    rules = load_rules(rules_file or backend)
    shapes = TestShapes(**{k: v for k, v in rules.shapes.items()
                           if k in TestShapes.__dataclass_fields__})
    cases = {c.name: c for c in build_testcases(shapes)}
    rows = []
    single_counts: dict[str, int] = {}
    with Profiler(backend) as prof:
        for p in rules.patterns:
            case = cases.get(p.name)
            if case is None:
                continue
            try:
                executed = prof.profile(case.models["block"], runs=3)
                counts = {"block": kernel_count(executed)}
                for role in dict.fromkeys(separate_roles(case)):  # in order: stable files
                    sig = graph_signature(case.models[role])
                    if sig not in single_counts:
                        single_counts[sig] = kernel_count(
                            prof.profile(case.models[role], runs=3))
                    counts[role] = single_counts[sig]
            except (NotImplementedError, RuntimeError) as err:
                rows.append({"name": p.name, "kind": p.kind, "error": str(err)[:200]})
                continue
            by_covers, by_kernels = truth_of(case, executed), truth_by_kernels(case, counts)
            truth = by_covers and by_kernels
            rows.append({
                "name": p.name, "kind": p.kind, "decision": p.fused, "truth": truth,
                "truth_covers": by_covers, "truth_kernels": by_kernels, "kernels": counts,
                "agree": p.fused == truth, "close": p.close,
                "raw": (p.extra.get("raw") or {}).get("fused"),
                "saving_ms": p.saving_ms, "threshold_ms": p.threshold_ms,
                "executed": [f"{e.op_type}[{','.join(e.covers)}]" for e in executed
                             if e.covers],
            })
    ok = [r for r in rows if "error" not in r]
    # patterns the partitioner can act on: pairs whose fused sequence has a kernel
    # type (conv-bn, fc-relu, ...), and every multi-output/-input/block test
    usable = [r for r in ok if r["kind"] != "pair"
              or kernel_type_of(tuple(r["name"].split("->"))) != "other"]
    with_raw = [r for r in ok if r["raw"] is not None]
    summary = {
        "backend": backend, "rules": str(rules_file or f"fusion_rules/{backend}.json"),
        "patterns": len(ok), "errors": len(rows) - len(ok),
        "agree": sum(r["agree"] for r in ok),
        "agreement": round(sum(r["agree"] for r in ok) / max(1, len(ok)), 4),
        "usable": len(usable), "usable_agree": sum(r["agree"] for r in usable),
        "agreement_raw_rule": round(
            sum(r["raw"] == r["truth"] for r in with_raw) / max(1, len(with_raw)), 4),
        "truth_fused": sum(r["truth"] for r in ok), "decided_fused": sum(r["decision"] for r in ok),
        # baselines: a rule set that never fuses, and one that fuses every pattern
        "agreement_never_fuse": round(sum(not r["truth"] for r in ok) / max(1, len(ok)), 4),
        "agreement_always_fuse": round(sum(r["truth"] for r in ok) / max(1, len(ok)), 4),
        "disagreements_close": sum(1 for r in ok if not r["agree"] and r["close"]),
        "truth_definitions_differ": sum(1 for r in ok
                                        if r["truth_kernels"] != r["truth_covers"]),
    }
    for r in ok:
        if not r["agree"]:
            r["why"] = explain(r)
    summary["why"] = {}
    for r in ok:
        if not r["agree"]:
            summary["why"][r["why"]] = summary["why"].get(r["why"], 0) + 1
    return {"summary": summary, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", default=None)
    ap.add_argument("--json", metavar="FILE", help="also write all rows to FILE")
    ap.add_argument("--from-json", metavar="FILE",
                    help="print an earlier run's rows again (no profiling), re-explained")
    ap.add_argument("--rules", action="append", default=[], metavar="FILE",
                    help="score this rules file instead of the committed one of the backend "
                         "it names (its backend_id); repeatable, one file per backend")
    args = ap.parse_args()
    rules_files: dict[str, str] = {}
    for f in args.rules:
        backend_id = load_rules(f).backend_id
        if backend_id in rules_files:
            ap.error(f"two --rules files for {backend_id}: {rules_files[backend_id]} and {f}")
        rules_files[backend_id] = f
    results = {}
    saved = json.loads(Path(args.from_json).read_text()) if args.from_json else {}
    for backend in (args.backend or list(saved) or list(rules_files)
                    or ["ort-cpu", "openvino-cpu", "mnn-cpu"]):
        if saved:
            res = saved[backend]
            res["summary"]["why"] = {}
            for r in res["rows"]:
                if "error" not in r and not r["agree"]:
                    r["why"] = explain(r)
                    res["summary"]["why"][r["why"]] = res["summary"]["why"].get(r["why"], 0) + 1
        else:
            res = run_backend(backend, rules_files.get(backend))
        results[backend] = res
        s = res["summary"]
        print(f"== {backend}: {s['agree']}/{s['patterns']} agree ({100 * s['agreement']:.1f} %); "
              f"raw rule (no correction) {100 * s['agreement_raw_rule']:.1f} %; "
              f"on the {s['usable']} patterns the partitioner can use "
              f"{s['usable_agree']}/{s['usable']} "
              f"({100 * s['usable_agree'] / max(1, s['usable']):.1f} %); "
              f"runtime fused {s['truth_fused']}, detector fused {s['decided_fused']}, "
              f"never-fuse baseline {100 * s.get('agreement_never_fuse', 0):.1f} %, "
              f"always-fuse {100 * s.get('agreement_always_fuse', 0):.1f} %, "
              f"disagreements within noise {s['disagreements_close']}, errors {s['errors']}")
        if "truth_definitions_differ" in s:
            differ = [r for r in res["rows"] if "error" not in r
                      and r["truth_kernels"] != r["truth_covers"]]
            print(f"   covers and kernel counts differ on {s['truth_definitions_differ']} "
                  "(runtime=split for these): " + ", ".join(
                      f"{r['name']} (covers {'fused' if r['truth_covers'] else 'split'}, "
                      f"kernels {r['kernels']})" for r in differ))
        print("   disagreements by cause: " + ", ".join(
            f"{k} {v}" for k, v in sorted(s["why"].items(), key=lambda kv: -kv[1])))
        for r in res["rows"]:
            if "error" in r:
                print(f"   ERROR {r['name']}: {r['error']}")
            elif not r["agree"]:
                print(f"   {r['name']:24s} [{r['why']}] "
                      f"detector={'fused' if r['decision'] else 'split'} "
                      f"runtime={'fused' if r['truth'] else 'split'} close={r['close']} "
                      f"saving={r['saving_ms']} thr={r['threshold_ms']} raw={r['raw']} "
                      f"exec={r['executed'][:4]}")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
