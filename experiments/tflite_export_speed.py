"""Time of exporting small IR graphs to .tflite (float32 and int8), per model.

Usage: python experiments/tflite_export_speed.py [--n 20]
Prints the median and max milliseconds per model after one warm-up export (the first
export in a process also pays TensorFlow's import and tracing set-up). No assertions.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def _model(i: int):
    from nnmeter.ir.builder import GraphBuilder

    b = GraphBuilder(f"m{i}", (1, 16 + 8 * (i % 4), 28, 28))
    y = b.relu(b.bn(b.conv(b.x, 32 + 8 * (i % 5), 3, 1 + i % 2)))
    return b.build([b.gap(y)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    from nnmeter.exporters.tflite import export_tflite

    out = tempfile.mkdtemp(prefix="nnmeter-export-")
    t = time.perf_counter()
    export_tflite(_model(999), f"{out}/warm.tflite")
    print(f"first export (TF import + set-up): {time.perf_counter() - t:.2f} s")
    for quantize in (None, "int8"):
        times = []
        for i in range(args.n):
            g = _model(i)
            t = time.perf_counter()
            export_tflite(g, f"{out}/{i}-{quantize}.tflite", quantize=quantize)
            times.append(1000 * (time.perf_counter() - t))
        print(f"{quantize or 'float32':8s} n={args.n} median {statistics.median(times):.0f} ms "
              f"max {max(times):.0f} ms per model")


if __name__ == "__main__":
    main()
