"""The ssh runner against a real sshd on 127.0.0.1 (started by the fixture): the worker
runs in an ssh session, the models travel in the requests, and a crash, a hang or a
host that cannot be reached behave as they do locally."""

from __future__ import annotations

import os
import time

import pytest

from nnmeter.backends import Profiler
from nnmeter.builder import build_predictor
from nnmeter.farm import RunnerSpec, use_runner
from nnmeter.farm.ssh import SshProfiler

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")


def _graph():
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("m", (1, 16, 28, 28))
    return b.build([b.relu(b.bn(b.conv(b.x, 32)))])


def test_measure_over_ssh_on_the_remote_device(sshd):
    with use_runner(sshd.spec()), Profiler("ort-cpu") as prof:
        assert isinstance(prof, SshProfiler)
        m = prof.measure(_graph(), rounds=2, round_ms=5.0)
        nodes = prof.profile(_graph(), runs=2)
    assert m.ok and m.latency_ms > 0
    # the remote worker held its machine's lock, and the shipped copy is gone there
    assert m.extra["timing_lock"] in ("held", "nested", "off")
    assert m.model.endswith("m.onnx")
    assert any(n.op_type.endswith("Conv") for n in nodes)
    local = Profiler("ort-cpu").start()  # the same machine here: the same device
    try:
        assert m.device.fingerprint_id == local.device.fingerprint_id
    finally:
        local.close()


def test_small_build_over_ssh_gives_the_local_rows(sshd, local_build, small, rows_of, keys_of,
                                                    tmp_path):
    with use_runner(sshd.spec()):
        build_predictor("ort-cpu", dataset="ort-cpu", root=tmp_path, **small)
    got = rows_of(tmp_path, "ort-cpu", "ort-cpu")
    assert keys_of(got) == keys_of(local_build)
    assert {r["fingerprint_id"] for rs in got.values() for r in rs} == \
        {r["fingerprint_id"] for rs in local_build.values() for r in rs}


def test_a_remote_crash_is_recorded_and_the_next_job_runs(sshd):
    with use_runner(sshd.spec()), Profiler("ort-cpu") as prof:
        bad = prof.measure(_graph(), _hook="exit")
        good = prof.measure(_graph(), rounds=2, round_ms=5.0)
    assert not bad.ok and bad.extra["error_kind"] == "crash"
    assert good.ok and prof.restarts == 1


def test_a_hung_remote_worker_is_killed_with_its_session(sshd):
    with use_runner(sshd.spec()), Profiler("ort-cpu") as prof:
        prof.start()
        remote_pid = prof.remote_pid
        m = prof.measure(_graph(), _hook="hang", timeout_s=3)
        assert not m.ok and m.extra["error_kind"] == "timeout"
        # the ssh session ended with the client, and the worker there with it
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{remote_pid}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{remote_pid}")


def test_an_unreachable_host_says_what_to_check(sshd):
    from nnmeter.errors import BackendUnavailableError

    spec = RunnerSpec("ssh", host="127.0.0.1", port=sshd.port, identity="/nonexistent-key",
                      ssh_options=("StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null",
                                   "ConnectTimeout=5", "IdentitiesOnly=yes",
                                   "IdentityAgent=none"))
    with use_runner(spec), pytest.raises(BackendUnavailableError,
                                         match="without a password"):
        with Profiler("ort-cpu") as prof:
            prof.start()


def test_nnmeter_measure_over_ssh_from_the_command_line(sshd, tmp_path, capsys):
    import json

    from nnmeter import cli
    from nnmeter.exporters import export

    spec = sshd.spec()
    model = export(_graph(), tmp_path / "m.onnx", "onnx")
    argv = ["measure", str(model), "-b", "ort-cpu", "--rounds", "2", "--json",
            "--runner", "ssh", "--host", spec.host, "--port", str(spec.port),
            "--identity", spec.identity, "--remote-python", spec.python]
    for opt in spec.ssh_options:
        argv += ["--ssh-option", opt]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["latency_ms"] > 0 and out["model"] == str(model)
