"""The adb runner's command lines and its parsing of LiteRT's benchmark_model output,
with a stand-in ``adb`` (a script that logs its arguments and answers as a phone
would). Not run against a phone: this machine has none."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest

from nnmeter.farm import RunnerSpec, use_runner
from nnmeter.farm.adb import (
    AdbProfiler, adb_command, benchmark_command, parse_benchmark_output, parse_cpuinfo,
    parse_op_profile,
)

CPUINFO = "\n".join(
    [f"processor\t: {i}\nBogoMIPS\t: 38.40\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
     f"crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\n"
     f"CPU part\t: {'0xd05' if i < 6 else '0xd0d'}\n" for i in range(8)]) + "Hardware\t: Qualcomm\n"

RUN = """INFO: Initialized session in 21.3ms.
INFO: Running benchmark for at least 3 iterations and at least 0 seconds but terminate if exceeding 150 seconds.
INFO: count=3 first=2500 curr=2100 min=2080 max=2500 avg=2226.7 std=195

INFO: Running benchmark for at least {runs} iterations and at least 0 seconds but terminate if exceeding 150 seconds.
INFO: count={runs} first=2090 curr=2010 min={lo} max=2300 avg={avg} std=40

INFO: Inference timings in us: Init: 21300, First inference: 2500, Warmup (avg): 2226.7, Inference (avg): {avg}
"""

OPS = """============================== Run Order ==============================
\t             [node type]\t          [first]\t  [avg ms]\t      [%]\t    [cdf%]\t  [mem KB]\t[times called]\t[Name]
\t                 CONV_2D\t            0.812\t     0.790\t  61.240%\t  61.240%\t     0.000\t        1\t[conv_out]
\t       DEPTHWISE_CONV_2D\t            0.301\t     0.290\t  22.481%\t  83.721%\t     0.000\t        1\t[dw_out]
\t                    MEAN\t            0.210\t     0.210\t  16.279%\t 100.000%\t     0.000\t        1\t[pool_out]

============================== Top by Computation Time ==============================
\t             [node type]\t          [first]\t  [avg ms]\t      [%]\t    [cdf%]\t  [mem KB]\t[times called]\t[Name]
\t                 CONV_2D\t            0.812\t     0.790\t  61.240%\t  61.240%\t     0.000\t        1\t[conv_out]
"""

FAKE_ADB = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_ADB_LOG"], "a") as fh:
        fh.write(json.dumps(args) + "\\n")
    if args[:1] == ["-s"]:
        args = args[2:]
    state = os.environ["FAKE_ADB_LOG"] + ".n"
    if args[0] == "push":
        sys.exit(0 if os.path.exists(args[1]) else 1)
    cmd = args[1:]
    if cmd[:2] == ["cat", "/proc/cpuinfo"]:
        print({cpuinfo!r})
    elif cmd[:1] == ["getprop"]:
        print({{"ro.product.model": "Pixel 8", "ro.soc.model": "Tensor G3"}}.get(cmd[1], ""))
    elif cmd[:1] == ["sha256sum"]:
        print("0123456789abcdef0123 " + cmd[1])
    elif cmd[:1] and cmd[0].endswith("benchmark_model"):
        n = int(open(state).read()) if os.path.exists(state) else 0
        open(state, "w").write(str(n + 1))
        runs = [a.split("=")[1] for a in cmd if a.startswith("--num_runs=")][0]
        if any("broken" in a for a in cmd):
            print("ERROR: Failed to allocate tensors."); sys.exit(1)
        avg = 2000.0 + 100 * (n % 3)
        print({run!r}.format(runs=runs, lo=avg - 50, avg=avg))
        if "--enable_op_profiling=true" in cmd:
            print({ops!r})
''')


@pytest.fixture
def fake_adb(tmp_path, monkeypatch):
    path = tmp_path / "adb"
    path.write_text(FAKE_ADB.format(python=sys.executable, cpuinfo=CPUINFO, run=RUN, ops=OPS))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "adb.log"
    monkeypatch.setenv("FAKE_ADB_LOG", str(log))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] \
            if log.exists() else []
    return RunnerSpec("adb", serial="PHONE1", adb=str(path)), calls


def _tflite(tmp_path, name="m.tflite"):
    path = tmp_path / name
    path.write_bytes(b"TFL3 not a real model: the stand-in adb only checks it exists")
    return path


def test_a_job_pushes_times_each_round_parses_and_cleans_up(fake_adb, tmp_path):
    spec, calls = fake_adb
    with use_runner(spec):
        from nnmeter.backends import Profiler

        with Profiler("litert-cpu", protocol=None) as prof:
            assert isinstance(prof, AdbProfiler)
            m = prof.measure(_tflite(tmp_path), rounds=3, runs=20)
    assert m.ok and m.rounds == 3 and m.runs == 60
    # round means 2000, 2100, 2200 us: the latency is the lowest, the median the middle
    assert m.latency_ms == pytest.approx(2.0) and m.median_ms == pytest.approx(2.1)
    assert m.min_ms == pytest.approx(1.95) and m.spread == pytest.approx(0.1)
    assert m.extra["statistic"] == "min_round_mean"
    log = calls()
    assert ["-s", "PHONE1", "push", str(tmp_path / "m.tflite"),
            "/data/local/tmp/nnmeter/m.tflite"] in log
    bench = [c for c in log if c[3].endswith("benchmark_model")]
    assert len(bench) == 3 and bench[0][3:] == [
        "/data/local/tmp/benchmark_model", "--graph=/data/local/tmp/nnmeter/m.tflite",
        "--num_threads=1", "--warmup_runs=3", "--num_runs=20", "--min_secs=0",
        "--use_xnnpack=true"]
    assert log[-1] == ["-s", "PHONE1", "shell", "rm", "-f", "/data/local/tmp/nnmeter/m.tflite"]
    d = m.device
    assert (d.cpu_model, d.cores, d.runtime_version) == ("Tensor G3", 8, "0123456789ab")
    assert d.name == "tensor-g3-8c"
    assert "asimddp" in d.isa and "sve" not in d.isa and d.settings["phone"] == "Pixel 8"


def test_reference_kernels_and_threads_reach_the_command_line(fake_adb, tmp_path):
    spec, calls = fake_adb
    prof = AdbProfiler("litert-cpu-ref-t4", spec=spec)
    prof.measure(_tflite(tmp_path), rounds=1, runs=5)
    bench = [c for c in calls() if c[3].endswith("benchmark_model")][0]
    assert "--use_xnnpack=false" in bench and "--num_threads=4" in bench


def test_a_model_the_tool_cannot_run_is_a_failed_measurement(fake_adb, tmp_path):
    spec, calls = fake_adb
    prof = AdbProfiler("litert-cpu", spec=spec)
    m = prof.measure(_tflite(tmp_path, "broken.tflite"), rounds=2)
    assert not m.ok and "Failed to allocate tensors" in m.error
    assert calls()[-1][-1] == "/data/local/tmp/nnmeter/broken.tflite"  # removed anyway


def test_op_profile_reads_the_run_order_table(fake_adb, tmp_path):
    spec, _ = fake_adb
    nodes = AdbProfiler("litert-cpu", spec=spec).profile(_tflite(tmp_path))
    assert [(n.op_type, n.time_ms, n.name) for n in nodes] == [
        ("CONV_2D", 0.79, "conv_out"), ("DEPTHWISE_CONV_2D", 0.29, "dw_out"),
        ("MEAN", 0.21, "pool_out")]


def test_other_backends_and_a_missing_adb_are_refused_clearly(tmp_path):
    from nnmeter.errors import BackendUnavailableError

    spec = RunnerSpec("adb", adb=str(tmp_path / "no-adb"))
    with pytest.raises(BackendUnavailableError, match="not a LiteRT backend"):
        AdbProfiler("ort-cpu", spec=spec)
    with pytest.raises(BackendUnavailableError, match="platform-tools"):
        AdbProfiler("litert-cpu", spec=spec).start()


def test_parsers_on_their_own():
    out = parse_benchmark_output(RUN.format(runs=50, lo=990, avg=1000.5))
    assert out["avg_ms"] == pytest.approx(1.0005) and out["count"] == 50
    assert out["init_ms"] == pytest.approx(21.3)
    from nnmeter.errors import MeasurementError

    with pytest.raises(MeasurementError, match="no timings"):
        parse_benchmark_output("ERROR: Could not open 'x.tflite'.")
    info = parse_cpuinfo(CPUINFO)
    assert info["cores"] == 8 and info["parts"] == ["0xd05", "0xd0d"]
    assert parse_op_profile("no table here") == []
    assert adb_command(RunnerSpec("adb"), "devices") == ["adb", "devices"]
    cmd = benchmark_command(RunnerSpec("adb"), "/data/local/tmp/nnmeter/a b.tflite",
                            threads=1, runs=5, warmup_runs=1, op_profiling=True)
    assert cmd[3] == "'--graph=/data/local/tmp/nnmeter/a b.tflite'"  # quoted for the shell
    assert cmd[-1] == "--enable_op_profiling=true"
    assert os.path.basename(cmd[2]) == "benchmark_model"


def test_the_tool_is_pushed_first_when_asked(fake_adb, tmp_path):
    spec, calls = fake_adb
    tool = tmp_path / "benchmark_model"
    tool.write_bytes(b"\x7fELF stand-in")
    spec = RunnerSpec("adb", serial="PHONE1", adb=spec.adb, push_benchmark=str(tool))
    AdbProfiler("litert-cpu", spec=spec).start()
    log = calls()
    assert log[0] == ["-s", "PHONE1", "push", str(tool), "/data/local/tmp/benchmark_model"]
    assert log[1] == ["-s", "PHONE1", "shell", "chmod", "755", "/data/local/tmp/benchmark_model"]
    from nnmeter.errors import SettingsError

    with pytest.raises(SettingsError, match="no such file"):
        RunnerSpec("adb", push_benchmark=str(tmp_path / "missing"))
