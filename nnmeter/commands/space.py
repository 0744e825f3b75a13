"""``nnmeter space``: a predictor's table of a whole search space (NAS-Bench-201).

Examples
--------
Shell::

    nnmeter space nasbench201 --backend ort-cpu
    nnmeter space nasbench201 -b litert-cpu --top 5 --plot nb201.png --json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from nnmeter.commands._common import UsageError, add_backend, add_json, emit_json, print_table

__all__ = ["register", "space_summary"]

SPACES = ("nasbench201",)


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "space", help="predict every network of a search space (NAS-Bench-201) into a table",
        description="Fill the predictor's table of NAS-Bench-201: the predicted latency, "
                    "FLOPs and parameters of all 15,625 cells (9,445 distinct networks), "
                    "computed once per predictor and stored beside its cache, so a search "
                    "scores a cell by a lookup (`predict_many` takes NAS-Bench-201 configs "
                    "and uses the table). Prints the table's spread and its fastest and "
                    "slowest cells.")
    p.add_argument("space", choices=SPACES, help="the search space")
    add_backend(p)
    p.add_argument("--device", default=None, metavar="NAME",
                   help="the predictor of this device (default: this machine's)")
    p.add_argument("--channels", default="16,32,64", metavar="C1,C2,C3",
                   help="channels of the three stages (default 16,32,64 as defined)")
    p.add_argument("--cells-per-stage", type=int, default=5, metavar="N",
                   help="cells per stage (default 5)")
    p.add_argument("--resolution", type=int, default=32, help="input size (default 32)")
    p.add_argument("--classes", type=int, default=10, help="classifier outputs (default 10)")
    p.add_argument("--top", type=int, default=3, metavar="K",
                   help="list the K fastest and K slowest networks (default 3)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="draw predicted ms against MFLOPs for every cell to FILE")
    add_json(p)
    p.set_defaults(func=_cmd_space)


def _network(args: argparse.Namespace) -> Any:
    from nnmeter.zoo.nasbench201 import NASBench201Config

    try:
        channels = tuple(int(c) for c in args.channels.split(","))
    except ValueError:
        raise UsageError(f"--channels {args.channels!r}: give three integers, e.g. "
                         f"16,32,64") from None
    if len(channels) != 3 or min(channels) < 1:
        raise UsageError(f"--channels {args.channels!r}: give three positive integers")
    for name, v in (("--cells-per-stage", args.cells_per_stage),
                    ("--resolution", args.resolution), ("--classes", args.classes)):
        if v < 1:
            raise UsageError(f"{name} must be at least 1 (got {v})")
    if args.resolution < 4:
        raise UsageError(f"--resolution {args.resolution}: the two reductions need at "
                         f"least 4 pixels")
    return NASBench201Config(channels=channels, cells_per_stage=args.cells_per_stage,
                             resolution=args.resolution, num_classes=args.classes)


def space_summary(pred: Any, table: Any, *, top: int = 3) -> dict[str, Any]:
    """The summary ``nnmeter space`` prints, as a dict (``--json``)."""
    from nnmeter.zoo.nasbench201 import arch_str, cell_from_index

    ms = table.values[0]
    done = ~np.isnan(ms)
    n = int(done.sum())
    # one row per distinct network: its live cell (the cells that build it share its row)
    classes = _classes()
    reps = np.unique(classes[done])
    order = reps[np.argsort(ms[reps], kind="stable")]

    def row(i: int) -> dict[str, Any]:
        band = pred.interval(float(ms[i]))
        return {"cell_index": int(i), "arch": arch_str(cell_from_index(int(i))),
                "cells": int((classes == i).sum()),
                "ms": float(ms[i]), "interval_ms": list(band) if band else None,
                "mflops": float(table.values[1, i]) / 1e6,
                "params_m": float(table.values[2, i]) / 1e6}

    vals = ms[done]
    net = table.network
    return {
        "space": "nasbench201", "backend": pred.backend_id, "device": pred.device_name,
        "network": {"channels": list(net.channels), "cells_per_stage": net.cells_per_stage,
                    "resolution": net.resolution, "num_classes": net.num_classes},
        "cells": int(ms.size), "filled": n,
        "distinct_networks": int(reps.size),
        "table": str(table.path) if table.path else None,
        "interval_level": pred.intervals.level if pred.intervals is not None else None,
        "ms": ({"min": float(vals.min()), "median": float(np.median(vals)),
                "max": float(vals.max())} if n else None),
        "fastest": [row(int(i)) for i in order[:top]],
        "slowest": [row(int(i)) for i in order[::-1][:top]],
    }


def _classes() -> np.ndarray:
    from nnmeter.predictors.space_table import live_classes

    return live_classes()


def _cmd_space(args: argparse.Namespace) -> int:
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.space_table import table_for

    if args.top < 0:
        raise UsageError(f"--top must be 0 or more (got {args.top})")
    network = _network(args)
    pred = load_predictor(args.backend, device=args.device)
    table = table_for(pred, network)
    before = table.filled
    t = time.perf_counter()
    built = table.fill(progress=not args.json)
    seconds = time.perf_counter() - t
    out = space_summary(pred, table, top=args.top)
    out.update(computed_networks=built, computed_seconds=round(seconds, 2),
               already_filled=before)
    if args.plot:
        out["plot"] = str(_plot(out, table, args.plot))
    if args.json:
        emit_json(out)
        return 0
    net = out["network"]
    print(f"NAS-Bench-201 on {pred.backend_id}@{pred.device_name} (C={net['channels']}, "
          f"N={net['cells_per_stage']}, {net['resolution']}x{net['resolution']}, "
          f"{net['num_classes']} classes): {out['filled']:,} of {out['cells']:,} cells, "
          f"{out['distinct_networks']:,} distinct networks")
    if built:
        print(f"computed {built:,} network(s) in {seconds:.1f} s "
              f"({built / max(seconds, 1e-9):.0f}/s); {before:,} cells were already in the table")
    else:
        print("the table was already complete")
    print(f"table: {out['table'] or '(memory only: the predictor has no cache folder)'}")
    if out["ms"]:
        m = out["ms"]
        print(f"predicted ms: min {m['min']:.3f}, median {m['median']:.3f}, max {m['max']:.3f}")
    level = out["interval_level"]
    head = ["", "ms", f"{int(100 * level)} % interval" if level else "interval", "MFLOPs",
            "params M", "cells", "arch (dead edges as none)"]
    rows = []
    for label, items in (("fastest", out["fastest"]), ("slowest", out["slowest"])):
        for r in items:
            band = r["interval_ms"]
            rows.append([label, f"{r['ms']:.3f}",
                         f"{band[0]:.3f}–{band[1]:.3f}" if band else "-",
                         f"{r['mflops']:.1f}", f"{r['params_m']:.3f}", r["cells"], r["arch"]])
    if rows:
        print()
        print_table(head, rows)
    if args.plot:
        print(f"\nplot: {out['plot']}")
    return 0


def _plot(summary: dict[str, Any], table: Any, path: str) -> Any:
    import nnmeter.plots as plots

    plt = plots._plt()
    done = ~np.isnan(table.values[0])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter(table.values[1, done] / 1e6, table.values[0, done], s=3, alpha=0.35,
               color="#3060c0", linewidths=0)
    ax.set_xlabel("MFLOPs (2 per multiply-add, nnmeter.ir.cost)")
    ax.set_ylabel("predicted ms")
    ax.set_title(f"NAS-Bench-201 on {summary['backend']}@{summary['device']}: "
                 f"{summary['filled']:,} cells", fontsize=9)
    return plots._save(fig, path)
