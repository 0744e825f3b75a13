"""``nnmeter xray``: validate a deployed model against a reference, layer by layer."""

from __future__ import annotations

import argparse
import sys

from nnmeter.commands._common import add_json, emit_json, print_table

__all__ = ["register"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "xray", help="validate a deployment layer by layer (ML-EXray)",
        description=(
            "Run DEPLOYED and a reference on the same inputs, record every intermediate "
            "tensor, align the layers and report the verdict (OK/FAULT), the first "
            "divergent layer, the cause when a check recognises it (channel order, value "
            "range, layout, resize method, rotation, quantization) and slow kernels. "
            "Exit code 0 when OK, 1 on FAULT, 2 on errors."))
    p.add_argument("deployed", help="deployed model (.tflite or .onnx)")
    p.add_argument("--reference", "-r", default=None,
                   help="reference model (float .onnx or .tflite); default: DEPLOYED on "
                        "TFLite's reference kernels (litert-cpu-ref)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--inputs", metavar="DIR",
                     help="folder of raw inputs (.npy, .png, .jpg); without --preprocess, "
                          ".npy arrays are model inputs in NCHW")
    src.add_argument("--random", type=int, default=4, metavar="N",
                     help="use N smooth random images (default 4)")
    p.add_argument("--preprocess", metavar="MODULE:FN",
                   help="the deployment's preprocessing: fn(raw) -> model input or dict "
                        "of named steps (last = model input); MODULE may be a .py path")
    p.add_argument("--reference-preprocess", metavar="MODULE:FN",
                   help="the reference preprocessing (default: the reference sees the "
                        "deployed model's exact input)")
    p.add_argument("--backend", "-b", default=None,
                   help="backend of the deployed model: litert-cpu, litert-cpu-ref, ort-cpu "
                        "(default by file type)")
    p.add_argument("--reference-backend", default=None,
                   help="backend of the reference (default by file type)")
    p.add_argument("--threshold", type=float, default=None,
                   help="nRMSE above which a float layer diverges (default 1e-3)")
    p.add_argument("--quant-threshold", type=float, default=None,
                   help="nRMSE above which an int8 layer diverges (default 0.05)")
    p.add_argument("--no-latency", action="store_true", help="skip the latency checks")
    p.add_argument("--layers", action="store_true", help="also print the per-layer table")
    p.add_argument("--html", metavar="OUT", help="write a single-file HTML report")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nnmeter.xray import xray
    from nnmeter.xray.diff import DEFAULT_QUANT_THRESHOLD, DEFAULT_THRESHOLD
    from nnmeter.xray.replay import load_function

    report = xray(
        args.deployed, args.reference,
        inputs=args.inputs, n_random=args.random,
        preprocess=load_function(args.preprocess) if args.preprocess else None,
        reference_preprocess=(load_function(args.reference_preprocess)
                              if args.reference_preprocess else None),
        backend=args.backend, reference_backend=args.reference_backend,
        threshold=args.threshold if args.threshold is not None else DEFAULT_THRESHOLD,
        quant_threshold=(args.quant_threshold if args.quant_threshold is not None
                         else DEFAULT_QUANT_THRESHOLD),
        latency=not args.no_latency,
    )
    if args.html:
        report.to_html(args.html)
    if args.json:
        data = report.as_dict()
        if args.html:
            data["html"] = args.html
        emit_json(data)
    else:
        print(report.summary())
        if args.layers:
            print()
            headers, rows = report.layer_table()
            print_table(headers, rows)
        if args.html:
            print(f"HTML report: {args.html}", file=sys.stderr)
    return 0 if report.verdict == "OK" else 1
