"""Runner selection: use_runner, the command-line options and the Profiler's routing."""

from __future__ import annotations

import argparse

import pytest

from nnmeter.backends import Profiler
from nnmeter.errors import SettingsError
from nnmeter.farm import (
    RunnerSpec, add_runner_arguments, current_runner, runner_device, runner_from_args,
    use_runner,
)


def _args(*argv):
    p = argparse.ArgumentParser()
    add_runner_arguments(p)
    return p.parse_args(list(argv))


def test_blocks_nest_and_the_innermost_wins():
    assert current_runner() is None
    with use_runner("ray") as outer:
        with use_runner(RunnerSpec("ssh", host="h")):
            assert current_runner().kind == "ssh"
        assert current_runner() is outer
    with use_runner("local"), use_runner(None):
        assert current_runner() is None


def test_profiler_is_local_outside_a_runner_and_the_runner_s_inside():
    from nnmeter.farm.adb import AdbProfiler
    from nnmeter.farm.ssh import SshProfiler

    assert type(Profiler("ort-cpu")) is Profiler
    assert runner_device("ort-cpu") is None  # local: the caller reads its own machine
    with use_runner(RunnerSpec("ssh", host="h")):
        assert type(Profiler("ort-cpu")) is SshProfiler
    with use_runner(RunnerSpec("adb", serial="s")):
        assert type(Profiler("litert-cpu")) is AdbProfiler


def test_command_line_options_belong_to_their_runner():
    assert runner_from_args(_args()) is None
    spec = runner_from_args(_args("--runner", "ssh", "--host", "me@box", "--port", "2222",
                                  "--ssh-option", "ConnectTimeout=5"))
    assert (spec.host, spec.port, spec.ssh_options) == ("me@box", 2222, ("ConnectTimeout=5",))
    assert runner_from_args(_args("--runner", "ray", "--address", "h:6379")).address == "h:6379"
    with pytest.raises(SettingsError, match="--host is an option of --runner ssh"):
        runner_from_args(_args("--runner", "ray", "--host", "x"))
    with pytest.raises(SettingsError, match="--address is an option of --runner ray"):
        runner_from_args(_args("--address", "x"))
    with pytest.raises(SettingsError, match="needs a host"):
        runner_from_args(_args("--runner", "ssh"))
    with pytest.raises(SettingsError, match="not one of"):
        RunnerSpec("carrier-pigeon")
    with pytest.raises(SettingsError, match="TCP port"):
        RunnerSpec("ssh", host="h", port=70000)


def test_describe_names_where_measurements_run():
    assert RunnerSpec("ray", address="head:6379", node="abc").describe() == \
        "ray at head:6379, node abc"
    assert RunnerSpec("adb").describe() == "adb device (the only one)"


def test_a_remote_device_names_its_own_dataset(tmp_path):
    from nnmeter.backends.base import DeviceInfo
    from nnmeter.devices.datasets import default_dataset_id

    phone = DeviceInfo("Tensor G3", 8, "litert-benchmark_model", "0123456789ab",
                       {"threads": 1}, "aarch64", name="tensor-g3-8c")
    assert default_dataset_id("litert-cpu", tmp_path, device=phone) == "litert-cpu@tensor-g3-8c"


def test_a_ray_address_nobody_answers_fails_fast_with_the_fix():
    import socket

    from nnmeter.errors import BackendUnavailableError
    from nnmeter.farm.ray_runner import _check_reachable

    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendUnavailableError, match="ray start --head"):
        _check_reachable(f"127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(SettingsError, match="HOST:PORT"):
        _check_reachable("no-port")
    _check_reachable("ray://head:10001")  # left to Ray
