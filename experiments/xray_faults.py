"""Inject deployment faults into small CNNs and check that xray names each one.

For every seed, one small zoo-like CNN (conv-bn-relu, depthwise, 1x1, residual add, gap,
fc) is written as a float ONNX reference and as float and int8 .tflite deployments. Then
each deployment below is checked against the ONNX reference on smooth random images:

- clean: float .tflite; well-calibrated int8 .tflite
- preprocessing: BGR instead of RGB; [-1,1] instead of [0,1]; NCHW data reshaped into the
  NHWC input; nearest instead of bilinear resize; image rotated by 90 degrees
- quantization: one activation tensor's int8 scale divided by 10 in the flatbuffer
- latency: the float .tflite run on TFLite's reference kernels (litert-cpu-ref)

Prints a confusion table (injected fault x named cause) and writes the HTML report of the
quantization case. Run: ``python experiments/xray_faults.py [--seeds 3] [--html OUT]``
(under ``flock /tmp/nnmeter-measure.lock`` on a shared machine: it times models).
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
import tempfile
import time

import numpy as np

from nnmeter.xray import xray
from nnmeter.xray.faults import build_model_pair, corrupt_quant_scale, make_preprocess, \
    smooth_images
from nnmeter.xray.instrument import open_runner

HW = (32, 32)
LABELS = ["none", "channel_order", "normalization", "layout", "resize_method", "rotation",
          "quantization", "slow_kernels", "preprocessing", "layer_divergence"]


def cases(d: pathlib.Path, seed: int):
    fp = build_model_pair(d, seed=seed, hw=HW)
    qp = build_model_pair(d, seed=seed, hw=HW, quantize="int8")
    raw = list(smooth_images(4, 48, 48, seed=100 + seed))
    ref_pre = make_preprocess(layout="NCHW", size=HW)

    def pre(**bug):
        return dict(inputs=raw, preprocess=make_preprocess(layout="NHWC", size=HW, **bug),
                    reference_preprocess=ref_pre, latency=False)

    convs = [l for l in open_runner(qp.tflite_path).layers.values() if l.op == "conv"]
    target = convs[seed % len(convs)]
    bad = corrupt_quant_scale(qp.tflite_path, d / "bad-scale.tflite", target.name, 0.1)
    yield "none (float)", "none", fp.tflite_path, fp.onnx_path, pre()
    yield "none (int8)", "none", qp.tflite_path, qp.onnx_path, pre()
    yield "BGR input", "channel_order", fp.tflite_path, fp.onnx_path, pre(channel_order="BGR")
    yield "[-1,1] input", "normalization", fp.tflite_path, fp.onnx_path, pre(value_range="-1,1")
    yield "NCHW fed as NHWC", "layout", fp.tflite_path, fp.onnx_path, pre(layout_bug=True)
    yield "nearest resize", "resize_method", fp.tflite_path, fp.onnx_path, pre(resize="nearest")
    yield "rotated 90", "rotation", fp.tflite_path, fp.onnx_path, pre(rotate=90)
    yield "int8 scale /10", "quantization", bad, qp.onnx_path, dict(n_random=4)
    yield "reference kernels", "slow_kernels", fp.tflite_path, fp.onnx_path, \
        dict(n_random=2, backend="litert-cpu-ref")
    # the clean deployments also get the latency check, so it is tested for false alarms
    yield "none (float, timed)", "none", fp.tflite_path, fp.onnx_path, dict(n_random=2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--html", default=None, help="write the quantization case's HTML report")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    confusion: dict[str, dict[str, int]] = {}
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="xray-faults-") as tmp:
        for seed in range(args.seeds):
            d = pathlib.Path(tmp) / f"seed{seed}"
            for name, truth, deployed, reference, kw in cases(d, seed):
                rep = xray(deployed, reference, seed=seed, **kw)
                got = rep.cause.kind if rep.cause else "none"
                confusion.setdefault(truth, {}).setdefault(got, 0)
                confusion[truth][got] += 1
                fd = rep.first_divergent.deployed.split(";")[0] if rep.first_divergent else "-"
                rows.append((seed, name, truth, got, fd, rep.top1_agreement))
                if args.html and truth == "quantization" and seed == 0:
                    rep.to_html(args.html)
    print(f"{'seed':>4}  {'injected':<20} {'expected':<14} {'named':<14} "
          f"{'first divergent':<16} top-1")
    for seed, name, truth, got, fd, top1 in rows:
        mark = "" if truth == got else "   <-- MISS"
        t1 = "-" if top1 is None else f"{top1:.0%}"
        print(f"{seed:>4}  {name:<20} {truth:<14} {got:<14} {fd:<16} {t1}{mark}")
    used = [lab for lab in LABELS if any(lab in c for c in confusion.values()) or
            lab in confusion]
    print("\nconfusion (rows: injected, columns: named by xray)")
    print(f"{'':<14}" + "".join(f"{lab[:13]:>14}" for lab in used))
    for truth in [lab for lab in LABELS if lab in confusion]:
        print(f"{truth:<14}" + "".join(f"{confusion[truth].get(lab, 0):>14}" for lab in used))
    correct = sum(1 for r in rows if r[2] == r[3])
    print(f"\n{correct}/{len(rows)} named correctly ({time.time() - t0:.0f} s)")
    return 0 if correct == len(rows) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    np.seterr(all="ignore")
    sys.exit(main())
