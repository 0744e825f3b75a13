"""``nnmeter zoo``: list the model families, sample variants to files, show a variant.

Examples
--------
Shell::

    nnmeter zoo list
    nnmeter zoo sample mobilenetv2 -n 20 --seed 42 --out models/ --format onnx
    nnmeter zoo show mobilenetv2-s42-i007-1a2b3c4d --json
    nnmeter zoo show resnet50
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nnmeter.commands._common import add_json, emit_json, print_table

__all__ = ["register", "run_list", "run_sample", "run_show", "variant_summary"]

_EXT = {"onnx": ".onnx", "tflite": ".tflite", "json": ".json"}


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "zoo", help="the model zoo: 12 CNN families and NAS-Bench-201, with variant samplers "
                    "(and opt-in transformers: vit, bert, mobilevit)",
        description="List the zoo's architecture families, write seeded variants of a family "
                    "as model files with a manifest, or show one variant's config and cost.",
    )
    sub = p.add_subparsers(dest="zoo_command", metavar="ACTION")

    pl = sub.add_parser("list", help="families with their base params and MACs")
    pl.add_argument("--all", action="store_true",
                    help="also list the opt-in transformer families (vit, bert, mobilevit)")
    add_json(pl)
    pl.set_defaults(func=run_list)

    ps = sub.add_parser(
        "sample", help="write N seeded variants of a family and a manifest.jsonl",
        description="Draw N distinct variants of FAMILY with seed S (deterministic) and "
                    "write each as a model file in DIR, plus DIR/manifest.jsonl holding one "
                    "variant record per line (nnmeter.zoo.variant_from_record rebuilds it).")
    ps.add_argument("family", help="family name (see `nnmeter zoo list`)")
    ps.add_argument("-n", type=int, default=10, help="number of variants (default 10)")
    ps.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    ps.add_argument("--out", required=True, metavar="DIR", help="output folder")
    ps.add_argument("--format", choices=sorted(_EXT), default="onnx",
                    help="model file format (default onnx; json is the nnmeter IR)")
    add_json(ps)
    ps.set_defaults(func=run_sample)

    pw = sub.add_parser("show", help="config and cost of a family, preset or variant",
                        description="NAME is a family (its base config), a preset such as "
                                    "resnet50, or a variant name from `zoo sample`.")
    pw.add_argument("name", help="family, preset or variant name")
    add_json(pw)
    pw.set_defaults(func=run_show)

    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def variant_summary(variant: Any) -> dict[str, Any]:
    """Record of ``variant`` plus its graph's size and cost metrics."""
    graph = variant.build()
    cost = graph.cost()
    return {
        **variant.to_record(),
        "input_shape": list(graph.shape_of(graph.input_names[0])),
        "nodes": len(graph),
        "macs": cost.macs, "flops": cost.flops, "params": cost.params,
        "memory_bytes": cost.memory_bytes,
    }


def run_list(args: argparse.Namespace) -> int:
    from nnmeter.zoo import FAMILIES, base_variant, default_family_names

    rows = []
    for name in (FAMILIES.names() if getattr(args, "all", False) else default_family_names()):
        fam = FAMILIES.get(name)
        s = variant_summary(base_variant(name))
        rows.append({"family": name, "description": fam.description,
                     "input_shape": s["input_shape"], "params": s["params"],
                     "macs": s["macs"], "flops": s["flops"], "ranges": dict(fam.ranges),
                     "presets": sorted(fam.presets()),
                     "reference": dict(fam.reference)})
    if args.json:
        emit_json(rows)
        return 0
    print_table(["family", "input", "params (M)", "MACs (G)", "description"],
                [[r["family"], "x".join(map(str, r["input_shape"][1:])),
                  round(r["params"] / 1e6, 2), round(r["macs"] / 1e9, 3), r["description"]]
                 for r in rows])
    return 0


def run_sample(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from nnmeter.zoo import sample_variants

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = sample_variants(args.family, args.n, args.seed)
    manifest = out / "manifest.jsonl"
    rows = []
    with manifest.open("w", encoding="utf-8") as fh:
        for v in tqdm(variants, desc=f"{args.family} variants", unit="model",
                      disable=None):
            graph = v.build(validate=True)
            path = out / f"{v.name}{_EXT[args.format]}"
            if args.format == "json":
                graph.to_json(str(path))
            else:
                from nnmeter.exporters import export

                export(graph, path, args.format, seed=v.index)
            cost = graph.cost()
            rec = {**v.to_record(), "file": path.name, "format": args.format,
                   "macs": cost.macs, "flops": cost.flops, "params": cost.params}
            # One line per model as soon as it is written: an interrupted run keeps
            # a manifest of every file it finished.
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
            rows.append(rec)
    if args.json:
        emit_json({"manifest": str(manifest), "variants": rows})
        return 0
    print_table(["variant", "file", "params (M)", "MACs (M)"],
                [[r["name"], r["file"], round(r["params"] / 1e6, 3), round(r["macs"] / 1e6, 1)]
                 for r in rows])
    print(f"wrote {len(rows)} models and {manifest}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from nnmeter.zoo import FAMILIES, get_variant

    v = get_variant(args.name)
    s = variant_summary(v)
    fam = FAMILIES.get(v.family)
    s["description"] = fam.description
    s["ranges"] = dict(fam.ranges)
    if args.json:
        emit_json(s)
        return 0
    print(f"{v.name}  ({fam.description})")
    print(f"  input {'x'.join(map(str, s['input_shape']))}, {s['nodes']} nodes, "
          f"{s['params'] / 1e6:.3f} M params, {s['macs'] / 1e6:.1f} M MACs, "
          f"{s['flops'] / 1e6:.1f} M FLOPs")
    print("  config:")
    for key, value in s["config"].items():
        text = json.dumps(value)
        print(f"    {key}: {text if len(text) <= 100 else text[:97] + '...'}")
    return 0
