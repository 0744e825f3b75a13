"""Partitioner vs runtime: kernels predicted from the rules against nodes really executed.

For the base model of every zoo family: the number of kernels ``partition`` makes with
``fusion_rules/<backend>.json``, the number of nodes the runtime executes (all of them,
and without layout reorders / copies, i.e. nodes that cover no original op), and the
first kernel whose node set is not exactly one executed node's coverage.

Run (under the measurement lock; profiles every base model once)::

    flock /tmp/nnmeter-measure.lock .venv/bin/python experiments/partition_truth.py --backend ort-cpu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter import zoo  # noqa: E402
from nnmeter.backends import Profiler  # noqa: E402
from nnmeter.fusion import load_rules  # noqa: E402
from nnmeter.partition import partition  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusion_truth import ir_names  # noqa: E402


def compare(graph, kernels, executed) -> dict:
    names = {n.name for n in graph.topological_nodes() if n.op != "input"}
    groups = [frozenset(ir_names(e.covers, names)) for e in executed]
    compute = [g for g in groups if g]
    exact = set(compute)
    first = None
    for k in kernels:
        ks = frozenset(k.nodes)
        if ks not in exact:
            runtime = sorted({tuple(sorted(g)) for g in compute if g & ks})
            first = f"kernel {k.type}{list(k.nodes)} vs runtime {runtime[:3]}"
            break
    matched = sum(frozenset(k.nodes) in exact for k in kernels)
    return {"kernels": len(kernels), "executed": len(executed), "executed_compute": len(compute),
            "matched": matched, "first_difference": first}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="ort-cpu")
    args = ap.parse_args()
    rules = load_rules(args.backend)
    print(f"{'family':14s} {'nodes':>5s} {'kernels':>7s} {'exec':>5s} {'exec-compute':>12s} "
          f"{'exact':>5s}  first difference")
    tot_k = tot_e = tot_m = 0
    with Profiler(args.backend) as prof:
        for fam_name in zoo.FAMILY_NAMES:
            fam = zoo.get_family(fam_name)
            g = fam.build(fam.base_config())
            kernels = partition(g, rules)
            try:
                executed = prof.profile(g, runs=2)
            except (NotImplementedError, RuntimeError) as err:
                print(f"{fam_name:14s} profile failed: {str(err)[:150]}")
                continue
            r = compare(g, kernels, executed)
            tot_k += r["kernels"]
            tot_e += r["executed_compute"]
            tot_m += r["matched"]
            print(f"{fam_name:14s} {len(g) - len(g.input_names):5d} {r['kernels']:7d} "
                  f"{r['executed']:5d} {r['executed_compute']:12d} {r['matched']:5d}  "
                  f"{r['first_difference'] or '-'}")
            sys.stdout.flush()
    print(f"total: {tot_k} kernels predicted, {tot_e} compute nodes executed, "
          f"{tot_m} kernels match an executed node exactly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
