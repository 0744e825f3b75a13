"""Measuring beyond this machine: runners that put a profiler's worker somewhere else.

A *runner* decides where the measurement worker of every
:class:`~nnmeter.backends.Profiler` runs:

``local`` (the default)
    a worker subprocess on this machine, as always;
``ray``
    a Ray actor per device (:mod:`nnmeter.farm.ray_runner`): one device is one node's
    backend, and the actor holds the node's ``nnmeter-<backend>`` resource, so each
    device runs one measurement at a time however many builds submit to it. An actor
    that dies is restarted and its job retried; a job that still fails is recorded as a
    failed measurement, never lost. ``pip install -e ".[farm]"``;
``ssh``
    the same worker started on another host over ssh (:mod:`nnmeter.farm.ssh`),
    speaking the same JSON lines; the models travel inside the requests;
``adb``
    an Android phone's LiteRT ``benchmark_model`` over adb (:mod:`nnmeter.farm.adb`).

Everything that measures (``nnmeter build``, its calibrations, ``nnmeter measure``, the
model-level experiment scripts) goes through the runner active in
:func:`use_runner`, without knowing it: inside the block, ``Profiler(...)`` returns the
runner's profiler. A measurement keeps the device it was measured on (the remote
worker's), so datasets stay one device each.

Examples
--------
>>> from nnmeter.farm import RunnerSpec, use_runner, current_runner
>>> with use_runner(RunnerSpec("ssh", host="lab-box")):
...     current_runner().describe()
'ssh to lab-box'
>>> current_runner() is None
True
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

__all__ = ["RUNNER_KINDS", "RunnerSpec", "use_runner", "current_runner", "runner_device",
           "add_runner_arguments", "runner_from_args"]

#: the runners ``--runner`` accepts
RUNNER_KINDS = ("local", "ray", "ssh", "adb")

_lock = threading.Lock()
_stack: list[RunnerSpec] = []


@dataclass(frozen=True)
class RunnerSpec:
    """Where measurements run and how to reach it.

    Attributes
    ----------
    kind : {"local", "ray", "ssh", "adb"}
    address : str, optional
        Ray: the cluster's address (``ray://head:10001`` or ``head:6379``); None starts
        a one-machine Ray instance here.
    node : str, optional
        Ray: the node (id, or its IP address) whose backend is the device, when several
        nodes offer the backend; None: the only node that offers it.
    host : str, optional
        ssh: ``[user@]host``.
    port : int, optional
        ssh: the port (default ssh's).
    identity : str, optional
        ssh: a private key file (``ssh -i``).
    python : str, optional
        ssh: the remote interpreter that has nnmeter installed (default ``python3``).
    ssh_options : tuple of str
        ssh: more ``-o`` options (``"StrictHostKeyChecking=accept-new"``).
    remote_env : mapping
        ssh: environment variables set for the remote worker.
    serial : str, optional
        adb: the device serial (``adb -s``); None: adb's only device.
    adb : str
        adb: the adb executable.
    benchmark_binary : str
        adb: LiteRT's ``benchmark_model`` on the phone.
    push_benchmark : str, optional
        adb: a local ``benchmark_model`` (built for the phone's ABI) to push to
        ``benchmark_binary`` first; None: it is there already.
    """

    kind: str = "local"
    address: str | None = None
    node: str | None = None
    host: str | None = None
    port: int | None = None
    identity: str | None = None
    python: str | None = None
    ssh_options: tuple[str, ...] = ()
    remote_env: Mapping[str, str] = field(default_factory=dict)
    serial: str | None = None
    adb: str = "adb"
    benchmark_binary: str = "/data/local/tmp/benchmark_model"
    push_benchmark: str | None = None

    def __post_init__(self) -> None:
        from nnmeter.errors import SettingsError

        if self.kind not in RUNNER_KINDS:
            raise SettingsError(f"runner {self.kind!r} is not one of "
                                f"{', '.join(RUNNER_KINDS)}")
        if self.kind == "ssh" and not self.host:
            raise SettingsError("the ssh runner needs a host: --host [USER@]HOST")
        if self.push_benchmark is not None and not os.path.isfile(self.push_benchmark):
            raise SettingsError(f"--push-benchmark {self.push_benchmark}: no such file (a "
                                f"benchmark_model built for the phone)")
        if self.port is not None and not (isinstance(self.port, int) and 0 < self.port < 65536):
            raise SettingsError(f"--port must be a TCP port number, got {self.port!r}")
        object.__setattr__(self, "ssh_options", tuple(self.ssh_options))
        object.__setattr__(self, "remote_env", dict(self.remote_env))

    def profiler_class(self) -> type:
        """The :class:`~nnmeter.backends.Profiler` subclass of this runner."""
        if self.kind == "ray":
            from nnmeter.farm.ray_runner import RayProfiler

            return RayProfiler
        if self.kind == "ssh":
            from nnmeter.farm.ssh import SshProfiler

            return SshProfiler
        if self.kind == "adb":
            from nnmeter.farm.adb import AdbProfiler

            return AdbProfiler
        from nnmeter.backends.profiler import Profiler

        return Profiler

    def describe(self) -> str:
        """One line for logs and reports."""
        if self.kind == "ray":
            where = self.address or "a Ray instance on this machine"
            return f"ray at {where}" + (f", node {self.node}" if self.node else "")
        if self.kind == "ssh":
            return f"ssh to {self.host}" + (f":{self.port}" if self.port else "")
        if self.kind == "adb":
            return f"adb device {self.serial or '(the only one)'}"
        return "local"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in {
            "kind": self.kind, "address": self.address, "node": self.node,
            "host": self.host, "port": self.port, "serial": self.serial}.items()
            if v is not None}


@contextlib.contextmanager
def use_runner(spec: RunnerSpec | str | None) -> Iterator[RunnerSpec | None]:
    """Run every measurement started inside the block through ``spec`` (a RunnerSpec,
    or a kind name). None or ``"local"`` leaves measurement local. Blocks nest; the
    innermost wins. Process-wide (threads included): one process measures through one
    runner at a time."""
    if isinstance(spec, str):
        spec = RunnerSpec(spec)
    if spec is None or spec.kind == "local":
        yield spec
        return
    with _lock:
        _stack.append(spec)
    try:
        yield spec
    finally:
        with _lock:
            _stack.remove(spec)
        if spec.kind == "ray":
            from nnmeter.farm.ray_runner import release_actors

            release_actors()


def current_runner() -> RunnerSpec | None:
    """The runner of the innermost :func:`use_runner` block; None: local."""
    with _lock:
        return _stack[-1] if _stack else None


def runner_device(backend_id: str) -> Any:
    """The :class:`~nnmeter.backends.DeviceInfo` that the active runner measures
    ``backend_id`` on (starting its worker); None when measurement is local (the
    caller reads this machine's own)."""
    spec = current_runner()
    if spec is None:
        return None
    from nnmeter.backends import Profiler

    with Profiler(backend_id) as prof:
        prof.start()
        return prof.device


def add_runner_arguments(p: argparse.ArgumentParser) -> None:
    """``--runner`` and its options, for every command that measures."""
    g = p.add_argument_group("where to measure (default: this machine)")
    g.add_argument("--runner", choices=RUNNER_KINDS, default="local",
                   help="local (default), ray (a Ray cluster: one actor per device), ssh "
                        "(a worker on --host) or adb (an Android phone's LiteRT)")
    g.add_argument("--address", default=None, metavar="ADDR",
                   help="ray: the cluster's address (default: start Ray on this machine)")
    g.add_argument("--node", default=None, metavar="NODE",
                   help="ray: the node (id or IP) whose backend to measure on, when "
                        "several offer it")
    g.add_argument("--host", default=None, metavar="[USER@]HOST", help="ssh: the host")
    g.add_argument("--port", type=int, default=None, help="ssh: its port")
    g.add_argument("--identity", default=None, metavar="KEY", help="ssh: a private key file")
    g.add_argument("--remote-python", default=None, metavar="PATH",
                   help="ssh: the remote interpreter with nnmeter installed "
                        "(default python3)")
    g.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                   help="ssh: an extra -o option (repeatable)")
    g.add_argument("--serial", default=None, help="adb: the device serial")
    g.add_argument("--push-benchmark", default=None, metavar="FILE",
                   help="adb: push this benchmark_model (built for the phone) first")


def runner_from_args(args: argparse.Namespace) -> RunnerSpec | None:
    """The RunnerSpec the command line asks for; None for local.

    Raises
    ------
    SettingsError
        If an option does not fit the runner (``--host`` without ``--runner ssh``...).
    """
    from nnmeter.errors import SettingsError

    kind = getattr(args, "runner", "local") or "local"
    given = {name: getattr(args, attr, None) for name, attr in (
        ("--address", "address"), ("--node", "node"), ("--host", "host"),
        ("--port", "port"), ("--identity", "identity"), ("--remote-python", "remote_python"),
        ("--serial", "serial"), ("--push-benchmark", "push_benchmark"))}
    given["--ssh-option"] = getattr(args, "ssh_option", None) or None
    owner = {"--address": "ray", "--node": "ray", "--host": "ssh", "--port": "ssh",
             "--identity": "ssh", "--remote-python": "ssh", "--ssh-option": "ssh",
             "--serial": "adb", "--push-benchmark": "adb"}
    for opt, value in given.items():
        if value is not None and owner[opt] != kind:
            raise SettingsError(f"{opt} is an option of --runner {owner[opt]}, not of "
                                f"--runner {kind}")
    if kind == "local":
        return None
    return RunnerSpec(kind, address=given["--address"], node=given["--node"],
                      host=given["--host"], port=given["--port"],
                      identity=given["--identity"], python=given["--remote-python"],
                      ssh_options=tuple(getattr(args, "ssh_option", None) or ()),
                      serial=given["--serial"], push_benchmark=given["--push-benchmark"])
