"""MNN's Winograd weights inside a model: what they cost, and whether nnmeter's tile model
gives their size.

1. **Chains.** Models of N identical convolutions (N = 1, 4, 16, 64), measured whole on
   ``--backend`` (mnn-cpu): the time per layer. A Winograd convolution (stride 1, 3x3)
   whose transformed weights stay in the cache runs as it does alone; once the chain's
   tiles overflow it, every layer reads its tiles from memory. A 1x1 convolution with as
   many weight bytes is the control: it is not transformed.
2. **Footprint.** For single convolutions, the memory MNN's session reports
   (``Interpreter.getSessionInfo``) against the transformed weight bytes
   :func:`nnmeter.predictors.winograd.kernel_weight_bytes` gives, and the stride-2 copy
   of the same convolution (no Winograd).

Run under the measurement lock, nothing else on the CPU::

    flock /tmp/nnmeter-cpu.lock python experiments/winograd_check.py \\
        --out experiments/results/winograd_check_mnn-cpu@<device>.txt
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnmeter.ir import GraphBuilder  # noqa: E402

CHAINS = ((10, 64, 3), (10, 192, 1), (10, 128, 3), (10, 384, 1), (28, 64, 3))
LENGTHS = (1, 4, 16, 64)
SINGLES = ((5, 256, 3), (10, 64, 3), (10, 256, 3), (20, 256, 3), (40, 256, 3), (10, 256, 5),
           (10, 64, 5))


def chain(h: int, c: int, k: int, n: int, stride: int = 1):
    """``n`` convolutions ``c -> c`` with a ``k x k`` kernel and ReLU on an ``h x h`` input."""
    b = GraphBuilder(f"chain{n}-{h}-{c}-k{k}-s{stride}", (1, c, h, h))
    x = b.x
    for _ in range(n):
        x = b.relu(b.conv(x, c, k, stride=stride) if stride != 1 else b.conv(x, c, k))
    return b.build([x])


def session_mb(graph, workdir: Path) -> float:
    """The memory (MB) MNN's session holds for ``graph``, one thread."""
    import MNN

    from nnmeter.backends.mnn import convert_onnx_to_mnn
    from nnmeter.exporters import export

    onnx = export(graph, workdir / f"{graph.name}.onnx", "onnx")
    mnn = workdir / f"{graph.name}.mnn"
    convert_onnx_to_mnn(onnx, mnn)
    interp = MNN.Interpreter(str(mnn))
    session = interp.createSession({"numThread": 1, "backend": "CPU", "precision": "high"})
    return float(interp.getSessionInfo(session, 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="mnn-cpu")
    ap.add_argument("--repeats", type=int, default=3,
                    help="measurements of each chain; the fastest is kept")
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    from nnmeter.backends import Profiler
    from nnmeter.kernels.conv import ConvConfig
    from nnmeter.predictors.winograd import kernel_weight_bytes

    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    from nnmeter.backends import get_backend
    from nnmeter.devices.cpu import local_cpu

    dev = get_backend(args.backend).device_info()
    say(f"{args.backend} on {local_cpu().short_name()} ({dev.cpu_model}, {dev.cores} cores; "
        f"{dev.runtime} {dev.runtime_version}), "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    with Profiler(args.backend) as prof:
        say("1. per-layer time (us) in chains of N identical layers, the fastest of "
            f"{args.repeats} measurements")
        say(f"{'layer':24s} {'weights KB':>10s} {'tiles KB':>9s} " +
            " ".join(f"{'N=' + str(n):>8s}" for n in LENGTHS) + "   N=64 / N=1")
        for h, c, k in CHAINS:
            times = []
            for n in LENGTHS:
                g = chain(h, c, k, n)
                ms = min(prof.measure(g).latency_ms for _ in range(args.repeats))
                times.append(ms / n * 1000)
            wb = kernel_weight_bytes(ConvConfig(h=h, w=h, cin=c, cout=c, kernel=k))
            own = c * c * k * k * 4
            say(f"{h}x{h} {c}->{c} {k}x{k}".ljust(24) + f" {own / 1e3:10.0f} "
                f"{(wb[1] / 1e3 if wb else 0):9.0f} " + " ".join(f"{t:8.1f}" for t in times)
                + f"   {times[-1] / times[0]:.2f}x")
    say("2. one convolution: MNN's session memory against nnmeter's transformed weights (MB)")
    say(f"{'layer':24s} {'weights':>8s} {'tiles':>8s} {'session':>8s} {'stride 2':>8s}")
    work = Path(tempfile.mkdtemp(prefix="nnmeter-winograd-"))
    try:
        for h, c, k in SINGLES:
            wb = kernel_weight_bytes(ConvConfig(h=h, w=h, cin=c, cout=c, kernel=k))
            s1 = session_mb(chain(h, c, k, 1), work)
            s2 = session_mb(chain(h, c, k, 1, stride=2), work)
            say(f"{h}x{h} {c}->{c} {k}x{k}".ljust(24) + f" {c * c * k * k * 4 / 1e6:8.3f} "
                f"{(wb[1] / 1e6 if wb else 0):8.3f} {s1:8.3f} {s2:8.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("command: " + " ".join(["python", "experiments/winograd_check.py"] + sys.argv[1:]))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
