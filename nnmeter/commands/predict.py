"""Subcommands ``predict``, ``build`` and ``select-backend``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nnmeter.commands._common import (
    add_backend, add_input_shape, add_json, emit_json, parse_input_shapes, print_table,
)
from nnmeter.farm import add_runner_arguments

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict", help="predict a model's latency on a backend, kernel by kernel",
        description="Partition MODEL with the backend's fusion rules, predict each kernel "
                    "with its regressor and sum. Kernels without a regressor of their own "
                    "type are estimated by a fallback and listed.")
    p.add_argument("model", metavar="MODEL", help=".onnx, .tflite, .keras, SavedModel or IR .json")
    add_backend(p)
    add_input_shape(p)
    p.add_argument("--measure", action="store_true",
                   help="also measure the model on the real backend and print the error")
    p.add_argument("--device", default=None, metavar="NAME",
                   help="predict for this device (a name from `nnmeter devices`, a dataset "
                        "id or a fingerprint id), wherever this runs; default: this "
                        "machine's predictor, else the nearest device's (with a warning)")
    p.add_argument("--dataset", default=None,
                   help="kernel dataset folder under datasets/kernels (overrides --device)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="also draw the time per kernel type (with intervals) to FILE "
                        "(.png, .svg or .pdf)")
    add_json(p)
    p.set_defaults(func=_cmd_predict)

    p = subparsers.add_parser(
        "build", help="build a backend's predictor: detect fusion, sample, profile, train",
        description="Sample kernel configurations from the zoo's prior, profile them on the "
                    "backend (appending every measurement to datasets/kernels/<dataset>/), "
                    "refine with adaptive step-point sampling and train the regressors. "
                    "Resumable: rerun to continue.")
    add_backend(p)
    p.add_argument("--budget-minutes", type=float, default=20.0, metavar="M",
                   help="wall-clock budget of the whole build: sampling, calibrations and "
                        "training (default 20)")
    p.add_argument("--resume", action="store_true", default=True,
                   help="continue an existing dataset (the default)")
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="refuse to touch a dataset that already has measurements")
    p.add_argument("--kernels", default=None, metavar="T1,T2",
                   help="only these kernel types or families (e.g. conv,dwconv)")
    p.add_argument("--prior-families", default=None, metavar="F1,F2",
                   help="zoo families whose kernels make the sampling prior (default: the "
                        "CNN zoo); vit,bert,mobilevit for transformer kernels (matmul, "
                        "softmax, layernorm, token-shaped fc)")
    p.add_argument("--dataset", default=None,
                   help="dataset id under datasets/kernels (default: this machine's, "
                        "<backend>@<device name>); a dataset of another device is refused")
    p.add_argument("--transfer-from", default=None, metavar="DEVICE",
                   help="adapt DEVICE's predictor (a device name, dataset id or fingerprint "
                        "id from `nnmeter devices`) to this machine: measure only the kernel "
                        "configurations that matter most and the calibrations, within "
                        "--budget-minutes (10 is the budget it was designed and scored "
                        "for; a longer one plans more configurations, and time the "
                        "calibrations leave goes to a second pass over the in-model "
                        "models, then to more kernels)")
    p.add_argument("--in-model-variants", type=int, default=None, metavar="N",
                   help="with --transfer-from: measure the in-model calibration's zoo "
                        "models of N a family (a build measures 3; 10 is 117 CNN models) "
                        "with the time the calibrations leave, before their second pass. "
                        "On the 2-vCPU Xeon 10 narrowed the errors of OpenVINO, MNN and "
                        "LiteRT, and widened ONNX Runtime's")
    p.add_argument("--rounds", type=int, default=3, help="adaptive rounds per kernel type")
    p.add_argument("--no-remeasure", dest="remeasure", action="store_false",
                   help="do not first measure again the rows earlier builds made while "
                        "the speed reference ran slow (the default measures them again "
                        "and trains on each configuration's fastest row)")
    add_runner_arguments(p)
    add_json(p)
    p.set_defaults(func=_cmd_build)

    p = subparsers.add_parser(
        "select-backend", help="rank the backends with a predictor by predicted latency",
        description="Predict MODEL on every backend with a predictor and rank them "
                    "(Walle-style backend choice with a measured cost model).")
    p.add_argument("model", metavar="MODEL")
    add_input_shape(p)
    p.add_argument("--backends", default=None, metavar="B1,B2",
                   help="only these backends (default: every backend with a predictor)")
    p.add_argument("--measure", action="store_true",
                   help="also measure on every backend and check the ranking")
    p.add_argument("--device", default=None, metavar="NAME",
                   help="rank for this device's predictors (default: this machine's)")
    p.add_argument("--probe-speed", action="store_true",
                   help="first measure each backend's speed reference (about a second a "
                        "backend) and scale its prediction by how much slower or faster "
                        "this machine runs it now than while its predictor was built: "
                        "predictors built at different times on a shared host were built "
                        "at different speeds (this machine's predictors only)")
    add_json(p)
    p.set_defaults(func=_cmd_select)


def _load(args: argparse.Namespace) -> Any:
    from nnmeter.frontends import load_model
    from nnmeter.ir.graph import ModelGraph

    shapes = parse_input_shapes(getattr(args, "input_shape", []))
    if str(args.model).endswith(".json"):
        graph = ModelGraph.from_json(args.model)
        if shapes:
            graph = load_model(args.model, input_shapes=shapes)
        return graph
    return load_model(args.model, input_shapes=shapes)


def _measured_source(args: argparse.Namespace, graph: Any, backend_id: str) -> tuple[Any, str]:
    """What ``--measure`` runs: the user's own file when the backend takes its format
    (and no ``--input-shape`` changes it), else nnmeter's export of the IR. Returns the
    model and a label for the report."""
    from pathlib import Path

    from nnmeter.backends import get_backend

    path = Path(str(args.model))
    fmt = get_backend(backend_id).model_format
    if path.suffix.lower() == f".{fmt}" and path.is_file() and not getattr(args, "input_shape", None):
        return path, "the model file"
    return graph, f"nnmeter's {fmt} export of the graph (random weights)"


def _measure(args: argparse.Namespace, graph: Any, backend_id: str) -> tuple[Any, str]:
    from nnmeter.backends import measure

    model, what = _measured_source(args, graph, backend_id)
    return measure(model, backend_id), what


def _cmd_predict(args: argparse.Namespace) -> int:
    from nnmeter.predictors import load_predictor

    graph = _load(args)
    predictor = load_predictor(args.backend, dataset=args.dataset, device=args.device)
    report = predictor.predict(graph)
    out: dict[str, Any] = report.as_dict()
    if args.plot:
        from pathlib import Path

        from nnmeter.commands._common import UsageError
        from nnmeter.plots import kernel_type_bars

        if Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise UsageError(f"--plot {args.plot}: give a .png, .svg or .pdf file name")
        out["plot"] = str(kernel_type_bars(report, args.plot))
    if args.measure:
        m, what = _measure(args, graph, args.backend)
        out["measured_model"] = what
        out["measured_ms"] = m.latency_ms
        out["measured_spread"] = m.spread
        out["error_percent"] = 100.0 * (report.total_ms - m.latency_ms) / m.latency_ms
        fid = m.device.fingerprint_id if m.device else None
        out["measured_fingerprint_id"] = fid
        quality = [f"measurement: {w}" for w in m.quality_warnings()]
        if quality:
            out["warnings"] = list(out["warnings"]) + quality
        diffs = m.device.differences(report.device) if m.device and report.device else []
        if not diffs and m.ok:
            # the same device: is it running at the speed the predictor was built at?
            from nnmeter.devices.reference import speed_against_build

            speed = speed_against_build(args.backend, predictor.dataset_dir)
            if speed is not None:
                out["speed_reference"] = {k: v for k, v in speed.items() if k != "warning"}
                if speed["warning"]:
                    out["warnings"] = list(out["warnings"]) + [speed["warning"]]
        if diffs:
            out["device_mismatch"] = True
            out["warnings"] = list(out["warnings"]) + [
                f"measured on this machine ({m.device.name or fid}), but the prediction is "
                f"for {report.device_name or 'another device'} (differs in: "
                f"{', '.join(diffs)}): the error compares two devices"]
    if args.json:
        emit_json(out)
        return 0
    how = {"this machine": "this machine's predictor", "requested": "requested with --device",
           "nearest": "NOT this machine: the nearest device with a predictor"}.get(
        report.device_selection, "")
    print(f"model {report.model or args.model} on {report.backend_id}"
          f"{'@' + report.device_name if report.device_name else ''}: "
          f"{len(report.rows)} kernels" + (f" ({how})" if how else ""))
    rows = []
    for r in report.rows:
        nodes = ",".join(r.nodes)
        rows.append([r.type, nodes if len(nodes) <= 48 else nodes[:45] + "...",
                     round(r.predicted_ms, 4), r.estimated_by, ",".join(r.terms)])
    print_table(["kernel", "nodes", "predicted ms", "estimated by", "adjusted by"], rows)
    print()
    summary = sorted(report.by_type().items(), key=lambda kv: -kv[1][1])
    print_table(["kernel type", "count", "predicted ms", "share %"],
                [[t, n, round(ms, 4), round(100 * ms / report.total_ms, 1)]
                 for t, (n, ms) in summary])
    print(f"\nkernels: {sum(r.predicted_ms for r in report.rows):.4f} ms")
    # every composition term by its own name: what it adds once per model, and what it
    # already changed inside the kernel rows above
    width = max((len(t.label) for t in report.terms), default=0)
    for t in report.terms:
        inside = (f"  ({t.kernel_ms:+.4f} ms inside {t.kernels} kernel row(s))"
                  if t.kernels else "")
        print(f"  + {t.label:<{width}s} {t.ms:.4f} ms{inside}")
    band = ""
    if report.interval_ms:
        lo, hi = report.interval_ms
        band = f" ({100 * report.interval_level:.0f} % interval {lo:.3f}–{hi:.3f} ms)"
    print(f"predicted total: {report.total_ms:.3f} ms{band}")
    if args.measure:
        print(f"measured:        {out['measured_ms']:.3f} ms (spread "
              f"{100 * (out['measured_spread'] or 0):.1f} %; {out['measured_model']})")
        print(f"error:           {out['error_percent']:+.1f} %")
        speed = out.get("speed_reference")
        if speed:
            print(f"speed reference: {speed['now_ms']:.3g} ms now, {speed['build_ms']:.3g} ms "
                  f"while the predictor was built ({speed['ratio']:.2f}x)")
    if args.plot:
        print(f"plot: {out['plot']}")
    for w in out["warnings"]:
        if w != predictor.logged_warning:  # the device warning is logged once already
            print(f"warning: {w}", file=sys.stderr)
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from nnmeter.farm import runner_from_args, use_runner

    with use_runner(runner_from_args(args)):
        return _build(args)


def _build(args: argparse.Namespace) -> int:
    from nnmeter.builder import build_predictor
    from nnmeter.commands._common import UsageError

    kernels = [k.strip() for k in args.kernels.split(",")] if args.kernels else None
    families = [f.strip() for f in args.prior_families.split(",")] \
        if args.prior_families else None
    variants = args.in_model_variants
    if variants is not None and not args.transfer_from:
        raise UsageError("--in-model-variants goes with --transfer-from (to add models to "
                         "an existing dataset: experiments/in_model_pass.py --variants N)")
    if variants is not None and variants < 1:
        raise UsageError(f"--in-model-variants must be at least 1, not {variants}")
    if args.transfer_from:
        from nnmeter.builder import build_by_transfer

        tres = build_by_transfer(args.backend, args.transfer_from,
                                 budget_minutes=args.budget_minutes, dataset=args.dataset,
                                 progress=not args.json, in_model_variants=variants)
        if args.json:
            emit_json(tres.as_dict())
            return 0
        print(tres.summary())
        return 0
    result = build_predictor(args.backend, budget_minutes=args.budget_minutes,
                             resume=args.resume, kernels=kernels, dataset=args.dataset,
                             rounds=args.rounds, prior_families=families,
                             remeasure_disturbed=args.remeasure, progress=not args.json)
    if args.json:
        emit_json(result.as_dict())
        return 0
    from nnmeter.predictors.dataset import KernelDataset

    log = [r for r in KernelDataset(result.dataset_dir, args.backend).rounds()
           if r.get("round", 0) > 0][-60:]
    if log:
        def pct(v: Any) -> Any:
            return None if v is None or v != v else round(100 * v, 1)
        print_table(["kernel type", "round", "new", "total", "cv ±10 %", "test ±10 %",
                     "minutes"],
                    [[r["kernel_type"], r["round"], r["n_new"], r["n_measured_total"],
                      pct(r.get("cv_acc10")), pct(r.get("test_acc10")),
                      round(r.get("minutes", 0.0), 2)] for r in log])
        print()
    rows = []
    for t, s in result.types.items():
        acc = s.get("test_acc10")
        rows.append([t, s["samples"], None if acc is None else round(100 * acc, 1),
                     round(s["minutes"], 2)])
    print_table(["kernel type", "samples", "held-out ±10 % acc", "minutes"], rows)
    print(f"\n{result.measurements} measurements in {result.minutes:.1f} min; data in "
          f"{result.dataset_dir}")
    again = result.remeasured
    if again.get("pending"):
        print(f"measured again first: {again['measured']} of {again['pending']} configurations "
              f"that earlier builds measured while the device ran slow"
              + (f" ({again['left']} left for the next run)" if again.get("left") else ""))
    if result.speed_reference:
        from nnmeter.devices.reference import describe

        print(describe(result.speed_reference))
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if result.stopped_by_budget:
        print("stopped by the budget; rerun to continue (it resumes)")
    return 0


def _cmd_select(args: argparse.Namespace) -> int:
    from nnmeter.predictors import available_predictors
    from nnmeter.selection import NEAR_TIE, near_ties, probe_speeds, rank_backends, regret

    graph = _load(args)
    ids = [b.strip() for b in args.backends.split(",")] if args.backends else \
        available_predictors()
    speeds = probe_speeds(ids, device=args.device) if args.probe_speed else {}
    ranked = rank_backends(graph, ids, device=args.device,
                           speed={b: v["ratio"] for b, v in speeds.items()})
    results = [c.as_dict() for c in ranked]
    for row in results:
        if row["backend_id"] in speeds:
            row["speed_reference"] = speeds[row["backend_id"]]
    if args.measure:
        for row in results:
            m, row["measured_model"] = _measure(args, graph, row["backend_id"])
            row["measured_ms"] = m.latency_ms
            row["measured_spread"] = m.spread
            row["warnings"] = m.quality_warnings()
    out: dict[str, Any] = {"model": graph.name, "ranking": results,
                           "predicted_best": results[0]["backend_id"] if results else None,
                           "near_ties": near_ties(ranked), "near_tie_tolerance": NEAR_TIE}
    if args.measure and results:
        measured = {r["backend_id"]: r["measured_ms"] for r in results}
        best = min(results, key=lambda r: r["measured_ms"])
        out["measured_best"] = best["backend_id"]
        out["pick_right"] = out["predicted_best"] == best["backend_id"]
        out["regret"] = regret(out["predicted_best"], measured)
        out["within_5_percent"] = out["regret"] <= 0.05
        from nnmeter.evaluate import kendall

        if len(results) > 1:
            out["kendall_tau"] = kendall([r["predicted_ms"] for r in results],
                                         [r["measured_ms"] for r in results])
    if args.json:
        emit_json(out)
        return 0
    for b, v in speeds.items():
        if v["ratio"] is None:
            print(f"warning: {b}: not scaled for the host's speed: {v['why']}", file=sys.stderr)
        else:
            print(f"{b}: speed reference {v['now_ms']:.3g} ms now, {v['build_ms']:.3g} ms "
                  f"in its build: predictions x {v['ratio']:.3f}")
    level = next((r["interval_level"] for r in results if r["interval_level"]), None)
    headers = ["rank", "backend", "predicted ms",
               f"{level:.0%} interval" if level else "interval", "device"] + \
        (["measured ms"] if args.measure else [])

    def span(r: dict[str, Any]) -> str:
        iv = r["interval_ms"]
        return f"{iv[0]:.3g}-{iv[1]:.3g}" if iv else "-"
    print_table(headers, [[i + 1, r["backend_id"], round(r["predicted_ms"], 3), span(r),
                           r["device"] + (" (nearest)" if r["device_mismatch"] else "")] +
                          ([round(r["measured_ms"], 3)] if args.measure else [])
                          for i, r in enumerate(results)])
    print(f"\npredicted fastest: {out['predicted_best']}")
    if out["near_ties"]:
        print(f"near tie: {', '.join(out['near_ties'])} predicted within "
              f"{100 * NEAR_TIE:.0f} % of it; on a busy or small machine the measured "
              f"winner among them can change from run to run (--measure checks)")
    if args.measure:
        print(f"measured fastest:  {out['measured_best']} (the pick is "
              f"{'right' if out['pick_right'] else 'wrong'}; regret "
              f"{100 * out['regret']:.1f} %)")
        for r in results:
            for w in r["warnings"]:
                print(f"warning: {r['backend_id']} measurement: {w}", file=sys.stderr)
    return 0
