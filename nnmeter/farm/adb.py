"""The adb runner: LiteRT models timed on an Android phone with LiteRT's own
``benchmark_model`` tool, over adb.

The tool must be on the phone: push it once yourself, or give ``push_benchmark``
(``--push-benchmark FILE``) and the runner pushes it when it starts. Then every job
pushes its ``.tflite`` into ``/data/local/tmp/nnmeter/``, runs the tool once per
round, parses its timings and deletes the model. :meth:`AdbProfiler.profile` runs it with
``--enable_op_profiling=true`` and reads the per-op table.

The tool reports per round only its mean, minimum and spread of the run times, not each
run, so the protocol's statistic cannot be applied as on a local worker: the latency
is the lowest round mean (``extra["statistic"] = "min_round_mean"``); rounds,
warm-up runs and runs per round follow the job's protocol (``runs`` left unset: 50).

**Not run against a phone here**: this machine has no Android device. The command
lines and the parsing of the tool's output are tested with a stand-in ``adb``.

Examples
--------
>>> from nnmeter.farm import RunnerSpec
>>> spec = RunnerSpec("adb", serial="R58M")
>>> adb_command(spec, "shell", "getprop", "ro.product.model")
['adb', '-s', 'R58M', 'shell', 'getprop', 'ro.product.model']
>>> benchmark_command(spec, "/data/local/tmp/nnmeter/m.tflite", threads=1, runs=20,
...                   warmup_runs=3)[-6:]                        # doctest: +NORMALIZE_WHITESPACE
['--graph=/data/local/tmp/nnmeter/m.tflite', '--num_threads=1', '--warmup_runs=3',
 '--num_runs=20', '--min_secs=0', '--use_xnnpack=true']
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from nnmeter.backends.base import DeviceInfo, ExecutedNode, Measurement
from nnmeter.backends.profiler import check_on_error, resolve_model
from nnmeter.backends.protocol import Job
from nnmeter.farm.remote import RemoteProfiler

__all__ = ["AdbProfiler", "adb_command", "benchmark_command", "parse_benchmark_output",
           "parse_op_profile", "parse_cpuinfo", "REMOTE_DIR"]

#: where models are pushed on the phone
REMOTE_DIR = "/data/local/tmp/nnmeter"

_COUNT = re.compile(r"count=(\d+)\s+first=([\d.]+)\s+curr=([\d.]+)\s+min=([\d.]+)\s+"
                    r"max=([\d.]+)\s+avg=([\d.eE+]+)\s+std=([\d.]+)")
_TIMINGS = re.compile(r"Inference timings in us:\s*Init:\s*([\d.]+),\s*First inference:\s*"
                      r"([\d.]+),\s*Warmup \(avg\):\s*([\d.eE+]+),\s*Inference \(avg\):\s*"
                      r"([\d.eE+]+)")
_OP_ROW = re.compile(r"^\s*(\S[^\t]*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)%\s+"
                     r"([\d.]+)\s+(\d+)\s+\[(.*)\]\s*$")


def adb_command(spec: Any, *args: str) -> list[str]:
    """``adb [-s SERIAL] ARGS...``."""
    cmd = [spec.adb]
    if spec.serial:
        cmd += ["-s", spec.serial]
    return cmd + list(args)


def benchmark_command(spec: Any, remote_model: str, *, threads: int, runs: int,
                      warmup_runs: int, op_profiling: bool = False,
                      xnnpack: bool = True) -> list[str]:
    """The adb command line that times ``remote_model`` once (one round)."""
    args = [spec.benchmark_binary, f"--graph={remote_model}", f"--num_threads={threads}",
            f"--warmup_runs={warmup_runs}", f"--num_runs={runs}", "--min_secs=0",
            f"--use_xnnpack={'true' if xnnpack else 'false'}"]
    if op_profiling:
        args.append("--enable_op_profiling=true")
    # adb joins the words for the phone's shell: quote each one
    return adb_command(spec, "shell", *(shlex.quote(a) for a in args))


def parse_benchmark_output(text: str) -> dict[str, float]:
    """The timings of one ``benchmark_model`` run, in ms: ``avg_ms``, ``min_ms``,
    ``max_ms``, ``std_ms``, ``first_ms``, ``count`` of the timed runs (its second
    ``count=`` line; the first is the warm-up), plus ``init_ms`` when printed.

    Raises
    ------
    MeasurementError
        If the output has no timed-runs line (the tool failed: its output is quoted).
    """
    from nnmeter.errors import MeasurementError

    lines = _COUNT.findall(text)
    if not lines:
        tail = text.strip()[-400:]
        raise MeasurementError(f"benchmark_model printed no timings: {tail!r}")
    count, first, _curr, lo, hi, avg, std = lines[-1]
    out = {"count": float(count), "first_ms": float(first) / 1000, "min_ms": float(lo) / 1000,
           "max_ms": float(hi) / 1000, "avg_ms": float(avg) / 1000, "std_ms": float(std) / 1000}
    t = _TIMINGS.search(text)
    if t:
        out["init_ms"] = float(t.group(1)) / 1000
    return out


def parse_op_profile(text: str) -> list[ExecutedNode]:
    """The ``Run Order`` table of ``--enable_op_profiling=true`` as executed nodes (the
    op's type, its average ms per inference and the tensor name in brackets)."""
    nodes: list[ExecutedNode] = []
    section = None
    for line in text.splitlines():
        if line.lstrip().startswith("====="):
            title = line.strip("= \t")
            section = "run" if title.startswith("Run Order") else "other"
            if section == "run" and nodes:  # a second op table (another subgraph): stop
                break
            continue
        if section != "run":
            continue
        m = _OP_ROW.match(line)
        if m:
            op, _first, avg, *_rest, times, name = m.groups()
            per_call = float(avg)
            nodes.append(ExecutedNode(name=name or f"{op}_{len(nodes)}", op_type=op.strip(),
                                      covers=(name,) if name else (), time_ms=per_call,
                                      detail=f"times_called={times}"))
    return nodes


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """Cores, ISA features and CPU part numbers from an Android ``/proc/cpuinfo``."""
    cores, features, parts, hardware = 0, set(), set(), ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "processor" and value.isdigit():
            cores += 1
        elif key == "features":
            features |= set(value.split())
        elif key == "cpu part":
            parts.add(value)
        elif key == "hardware":
            hardware = value
    return {"cores": cores, "features": sorted(features), "parts": sorted(parts),
            "hardware": hardware}


#: ARM features kernels dispatch on, as /proc/cpuinfo spells them
_ARM_ISA = ("asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2", "sme")


class AdbProfiler(RemoteProfiler):
    """A :class:`~nnmeter.backends.Profiler` for a phone over adb (see the module).
    Takes LiteRT backends only (``litert-cpu``, ``litert-cpu-ref``, ``-tN``)."""

    kind = "adb"

    def __init__(self, backend_id: str, **kw: Any) -> None:
        from nnmeter.errors import BackendUnavailableError

        super().__init__(backend_id, **kw)
        if self.backend.model_format != "tflite":
            raise BackendUnavailableError(
                f"the adb runner times .tflite models with LiteRT's benchmark_model; "
                f"{backend_id} is not a LiteRT backend (use litert-cpu or litert-cpu-ref)")
        self.xnnpack = not backend_id.startswith("litert-cpu-ref")
        self._started = False

    def _adb(self, *args: str, timeout_s: float = 120.0) -> str:
        from nnmeter.errors import MeasurementError

        cmd = adb_command(self.spec, *args)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except FileNotFoundError as err:
            from nnmeter.errors import BackendUnavailableError

            raise BackendUnavailableError(f"no adb executable {self.spec.adb!r}: install "
                                          "Android's platform-tools") from err
        except subprocess.TimeoutExpired as err:
            raise MeasurementError(f"`{shlex.join(cmd)}` took over {timeout_s:g} s") from err
        if out.returncode != 0:
            raise MeasurementError(f"`{shlex.join(cmd)}` failed ({out.returncode}): "
                                   f"{(out.stderr or out.stdout).strip()[-400:]}")
        return out.stdout

    def start(self) -> AdbProfiler:
        if self._started:
            return self
        if self.spec.push_benchmark:
            self._adb("push", str(self.spec.push_benchmark), self.spec.benchmark_binary)
            self._adb("shell", "chmod", "755", self.spec.benchmark_binary)
        info = parse_cpuinfo(self._adb("shell", "cat", "/proc/cpuinfo"))
        props = {k: self._adb("shell", "getprop", k).strip() for k in (
            "ro.product.model", "ro.soc.model", "ro.build.fingerprint")}
        digest = self._adb("shell", "sha256sum", self.spec.benchmark_binary).split()
        version = digest[0][:12] if digest else "unknown"
        model = props["ro.soc.model"] or info["hardware"] or props["ro.product.model"]
        slug = re.sub(r"[^a-z0-9]+", "-", (model or "android").lower()).strip("-")
        self.device = DeviceInfo(
            cpu_model=model or "android", cores=info["cores"], runtime="litert-benchmark_model",
            runtime_version=version,
            settings={"threads": self.backend.threads, "xnnpack": self.xnnpack,
                      "phone": props["ro.product.model"], "build": props["ro.build.fingerprint"]},
            arch="aarch64", vendor="arm", isa=tuple(f for f in _ARM_ISA if f in info["features"]),
            microarch=",".join(info["parts"]), name=f"{slug}-{info['cores']}c")
        self._adb("shell", "mkdir", "-p", REMOTE_DIR)
        self._started = True
        return self

    def _alive(self) -> bool:
        return self._started

    def _push(self, model: str) -> str:
        remote = f"{REMOTE_DIR}/{Path(model).name}"
        self._adb("push", str(model), remote)
        return remote

    def run_job(self, job: Job, *, on_error: str = "record",
                _hook: str | None = None) -> Measurement:
        from nnmeter.errors import BackendError, NNMeterError

        check_on_error(on_error)
        t0 = time.perf_counter()
        p = job.protocol
        runs = p.runs or 50
        try:
            self.start()
            remote = self._push(job.model)
            try:
                rounds = [parse_benchmark_output(self._adb(*benchmark_command(
                    self.spec, remote, threads=self.backend.threads, runs=runs,
                    warmup_runs=p.warmup_runs, xnnpack=self.xnnpack)[len(adb_command(
                        self.spec)):], timeout_s=p.timeout_s)) for _ in range(p.rounds)]
            finally:
                self._adb("shell", "rm", "-f", remote)
        except NNMeterError as err:
            if on_error == "raise":
                raise BackendError(str(err)) from err
            return Measurement.failed(str(err), kind="run", backend_id=self.backend_id,
                                      model=job.model, device=self.device,
                                      job_wall_ms=(time.perf_counter() - t0) * 1000)
        avgs = [r["avg_ms"] for r in rounds]
        best = min(avgs)
        return Measurement(
            latency_ms=best, median_ms=statistics.median(avgs),
            min_ms=min(r["min_ms"] for r in rounds),
            std_ms=statistics.median(r["std_ms"] for r in rounds),
            spread=(max(avgs) - best) / best if best > 0 else math.nan, rounds=len(rounds),
            runs=int(sum(r["count"] for r in rounds)), device=self.device, ok=True,
            extra={"statistic": "min_round_mean", "round_means_ms": avgs, "runner": "adb",
                   "job_wall_ms": (time.perf_counter() - t0) * 1000},
            backend_id=self.backend_id, model=job.model)

    def profile(self, model: Any, *, runs: int = 10,
                timeout_s: float | None = None) -> list[ExecutedNode]:
        self.start()
        path = resolve_model(model, self.backend.model_format, self._tmp.name)
        try:
            remote = self._push(str(path))
            try:
                cmd = benchmark_command(self.spec, remote, threads=self.backend.threads,
                                        runs=runs, warmup_runs=1, op_profiling=True,
                                        xnnpack=self.xnnpack)
                text = self._adb(*cmd[len(adb_command(self.spec)):],
                                 timeout_s=timeout_s or self.protocol.timeout_s)
            finally:
                self._adb("shell", "rm", "-f", remote)
        finally:
            self._discard(path)
        return parse_op_profile(text)

    def close(self) -> None:
        self._started = False
        self._tmp.cleanup()
