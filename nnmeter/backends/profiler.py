"""The parent side of measurement: a :class:`Profiler` drives one worker process.

The parent never times anything. It sends serialisable :class:`~nnmeter.backends.
protocol.Job` records to a worker over a pipe and reads back Measurements. A worker
that crashes or hangs is killed and replaced; the job that was running becomes a
failed Measurement (``ok=False``) and the next job runs in a fresh worker.

Examples
--------
>>> from nnmeter.backends import Profiler                      # doctest: +SKIP
>>> with Profiler("ort-cpu") as prof:                          # doctest: +SKIP
...     m = prof.measure("model.onnx")
...     print(m.latency_ms, m.spread, m.device.fingerprint_id)
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nnmeter.backends.base import DeviceInfo, ExecutedNode, Measurement, parse_backend_id
from nnmeter.backends.protocol import Job, ProtocolSettings
from nnmeter.backends.timing_lock import timing_lock
from nnmeter.errors import BackendError, BackendUnavailableError, MeasurementError

__all__ = ["Profiler", "resolve_model", "default_core", "check_on_error"]

logger = logging.getLogger(__name__)

#: seconds a fresh worker may take to import its runtime and report ready
_START_TIMEOUT_S = 120.0


def check_on_error(on_error: str) -> None:
    """Refuse an ``on_error`` other than ``"record"`` or ``"raise"``."""
    if on_error not in ("record", "raise"):
        raise ValueError(f"on_error must be 'record' or 'raise', got {on_error!r}")


def default_core() -> int | None:
    """The core workers pin to by default: the highest one this process may use."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if cpus else None


def resolve_model(model: Any, model_format: str, workdir: str | Path) -> Path:
    """A model file in ``model_format`` for ``model`` (a path or a ModelGraph).

    A ModelGraph, or an IR ``.json`` file, is exported with
    ``nnmeter.exporters.export(graph, path, fmt)`` into ``workdir``.

    Raises
    ------
    BackendError
        If a file of another format is given and cannot be converted.
    """
    from nnmeter.ir.graph import ModelGraph

    graph = None
    if isinstance(model, ModelGraph):
        graph = model
    else:
        path = Path(model)
        if path.suffix.lower() == ".json":
            from nnmeter.ir.serialize import from_json

            graph = from_json(path)
        elif path.suffix.lower() == f".{model_format}":
            return path.resolve()
        else:
            raise BackendError(
                f"this backend takes .{model_format} models (or a ModelGraph / IR .json), "
                f"got {path.name!r}; convert it first")
    from nnmeter.exporters import export

    name = getattr(graph, "name", None) or "model"
    return Path(export(graph, Path(workdir) / f"{name}.{model_format}", model_format))


class Profiler:
    """Keep one measurement worker alive for many jobs on one backend.

    Inside :func:`nnmeter.farm.use_runner` (``--runner ray|ssh|adb`` on the command
    line), ``Profiler(...)`` returns that runner's profiler instead, a subclass with the
    same methods whose worker runs on another machine or in a Ray actor; everything
    that measures (the builder, its calibrations, the experiment scripts) then goes
    through the runner without knowing it.

    Parameters
    ----------
    backend_id : str
        E.g. ``"ort-cpu"`` or ``"ort-cpu-t4"``.
    protocol : ProtocolSettings, optional
        Defaults for every job; per-call overrides go to :meth:`measure`.
    core : int or None or "auto"
        Core to pin the worker to; ``"auto"`` pins a one-thread backend to
        :func:`default_core` and leaves an N-thread one unpinned, None does not pin.
    python : str
        Interpreter for the worker (default: this one).

    Raises
    ------
    UnknownNameError
        If ``backend_id`` names no registered backend (the message lists them).
    ValueError
        If ``core`` pins an N-thread backend to one core: its threads would take turns
        on it, and every time measured would be of that, not of the backend.
    """

    #: True when the worker cannot read this machine's files: jobs carry the model's bytes
    ships_models = False
    #: False when the worker holds the timing lock of its own machine (``--timing-lock``)
    locks_here = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Profiler:
        if cls is Profiler:
            from nnmeter.farm import current_runner

            spec = current_runner()
            if spec is not None and spec.kind != "local":
                cls = spec.profiler_class()
        return super().__new__(cls)

    def __init__(self, backend_id: str, *, protocol: ProtocolSettings | None = None,
                 core: int | str | None = "auto", python: str | None = None) -> None:
        from nnmeter.backends import get_backend

        self.backend = get_backend(backend_id)  # validates the id before any process starts
        self.backend_id = self.backend.id
        self.protocol = protocol or ProtocolSettings()
        # a one-thread backend is pinned to one core; an N-thread one runs on all the
        # cores it may use (pinning its threads to one core would time them taking turns)
        self.core = (default_core() if self.backend.threads <= 1 else None) \
            if core == "auto" else core
        if isinstance(self.core, int) and self.backend.threads > 1:
            raise ValueError(f"core={self.core} would pin {self.backend_id}'s "
                             f"{self.backend.threads} threads to one core (they would take "
                             f"turns on it); pass core='auto' or None")
        self.python = python or sys.executable
        self.device: DeviceInfo | None = None
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self._buf = b""
        self._next_id = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="nnmeter-profiler-")
        self._shipper: Any = None
        if self.ships_models:
            from nnmeter.backends.shipping import ModelShipper

            self._shipper = ModelShipper()

    # -- worker lifecycle ---------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # numpy's BLAS (used by the calibration workload) must stay on one thread
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
        env.setdefault("OPENVINO_TELEMETRY_OPT_OUT", "1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
        return env

    def _command(self) -> list[str]:
        """The command line that starts the worker (a remote runner wraps it)."""
        cmd = [self.python, "-m", "nnmeter.backends.worker", "--backend", self.backend_id]
        if self.core is not None:
            cmd += ["--core", str(self.core)]
        return cmd

    def _start(self) -> None:
        if self._shipper is not None:
            self._shipper.reset()  # a fresh worker holds no model
        cmd = self._command()
        self._stderr = tempfile.TemporaryFile(mode="w+b", dir=self._tmp.name)
        self._buf = b""
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, env=self._env())
        line = self._readline(_START_TIMEOUT_S)
        hello = json.loads(line) if line else None
        if not hello or not hello.get("ready"):
            why = (hello or {}).get("error") or self._stderr_tail() or "no reply"
            self._kill()
            raise BackendUnavailableError(
                f"backend {self.backend_id} could not start a worker: {why}")
        self.device = DeviceInfo.from_dict(hello["device"])
        self.affinity = hello.get("affinity")
        self.remote_pid = hello.get("pid")  # the worker's pid on its own machine
        logger.info("worker pid %s for %s on cores %s", hello.get("pid"), self.backend_id,
                    self.affinity)

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.warning("worker %s did not exit after SIGKILL", self._proc.pid)
            for f in (self._proc.stdin, self._proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self._proc = None

    def _stderr_tail(self, n: int = 1500) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - n))
            return self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def _readline(self, timeout_s: float) -> bytes | None:
        """One line from the worker; None on timeout; b"" at end of file (it died)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _request(self, msg: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any] | None, str]:
        """Send one request; return (reply, "") or (None, why it failed)."""
        if not self._alive():
            self._kill()
            self._start()
        self._next_id += 1
        msg = {"id": self._next_id, **msg}
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(msg) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            return None, f"crash: could not send the job to the worker ({err})"
        line = self._readline(timeout_s)
        if not line:
            self.restarts += 1
            if line is None:
                self._kill()
                return None, f"timeout: no result within {timeout_s:g} s; worker killed"
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            code = self._proc.returncode
            tail = self._stderr_tail(600)
            self._kill()
            return None, (f"crash: worker exited with code {code}"
                          + (f"; its last words: {tail}" if tail else ""))
        reply = json.loads(line)
        if reply.get("id") != msg["id"]:  # out of step: start over rather than guess
            self.restarts += 1
            self._kill()
            return None, "crash: worker replied out of order; worker restarted"
        return reply, ""

    # -- public API ---------------------------------------------------------------------
    def start(self) -> Profiler:
        """Start the worker now (otherwise the first job starts it)."""
        if not self._alive():
            self._start()
        return self

    def run_job(self, job: Job, *, on_error: str = "record",
                _hook: str | None = None) -> Measurement:
        """Run one serialisable job; see :meth:`measure` for ``on_error``."""
        check_on_error(on_error)
        t0 = time.perf_counter()
        msg: dict[str, Any] = {"cmd": "measure", "job": job.as_dict()}
        if _hook:
            msg["hook"] = _hook
        if not self._alive():  # start the worker (and its imports) before the queue
            self._start()
        with self._machine() as lock:
            t0 = time.perf_counter()  # the job's own time, not the wait for the machine
            reply, why = self._request_job(msg, job.model, job.protocol.timeout_s)
        wall_ms = (time.perf_counter() - t0) * 1000
        if reply is None:
            kind, _, text = why.partition(": ")
            return Measurement.failed(text, kind=kind, backend_id=self.backend_id,
                                      model=job.model, device=self.device, job_wall_ms=wall_ms,
                                      **lock.as_extra())
        if not reply.get("ok"):
            err = str(reply.get("error"))
            if on_error == "raise" and reply.get("error_kind") in ("compile", "run"):
                raise BackendError(err)
            return Measurement.failed(err, kind=str(reply.get("error_kind", "run")),
                                      backend_id=self.backend_id, model=job.model,
                                      device=self.device, job_wall_ms=wall_ms,
                                      **lock.as_extra())
        d = reply["measurement"]
        d["model"] = job.model  # the worker may have run a shipped copy
        d["extra"]["job_wall_ms"] = wall_ms
        d["extra"]["overhead_ms"] = wall_ms - d["extra"].get("timed_ms", 0.0)
        d["extra"]["worker_restarts"] = self.restarts
        if self.locks_here:
            d["extra"].update(lock.as_extra())
        return Measurement.from_dict(d)

    def measure(self, model: Any, *, on_error: str = "record", _hook: str | None = None,
                **protocol: Any) -> Measurement:
        """Measure ``model`` (a file of the backend's format, an IR .json or a ModelGraph).

        Parameters
        ----------
        on_error : {"record", "raise"}
            What to do when the runtime cannot compile or run the model: return a
            failed Measurement (default; a builder goes on), or raise BackendError.
            A worker crash or timeout is always recorded, never raised.
        **protocol
            Overrides of :class:`ProtocolSettings` fields for this job (``rounds=3``).
        """
        path = resolve_model(model, self.backend.model_format, self._tmp.name)
        job = Job(model=str(path), backend_id=self.backend_id,
                  protocol=self.protocol.with_overrides(**protocol))
        try:
            return self.run_job(job, on_error=on_error, _hook=_hook)
        finally:
            self._discard(path)

    def profile(self, model: Any, *, runs: int = 10,
                timeout_s: float | None = None) -> list[ExecutedNode]:
        """The executed graph of ``model`` on this backend (see ``Backend.profile``).

        Raises
        ------
        BackendError
            If the runtime cannot compile the model.
        NotImplementedError
            If the backend cannot report its executed graph.
        MeasurementError
            If the worker crashed or timed out.
        """
        path = resolve_model(model, self.backend.model_format, self._tmp.name)
        job = Job(model=str(path), backend_id=self.backend_id, protocol=self.protocol,
                  kind="profile", profile_runs=runs)
        try:
            if not self._alive():
                self._start()
            with self._machine():
                reply, why = self._request_job({"cmd": "profile", "job": job.as_dict()},
                                               job.model, timeout_s or self.protocol.timeout_s)
        finally:
            self._discard(path)
        if reply is None:
            raise MeasurementError(f"profiling {path.name} on {self.backend_id} failed: {why}")
        if not reply.get("ok"):
            if reply.get("error_kind") == "unsupported":
                raise NotImplementedError(reply.get("error"))
            raise BackendError(str(reply.get("error")))
        return [ExecutedNode.from_dict(n) for n in reply["nodes"]]

    def _machine(self) -> Any:
        """The timing lock of the machine the worker measures on, held here; a worker
        on another machine holds its own (``--timing-lock``)."""
        if self.locks_here:
            return timing_lock()
        import contextlib

        from nnmeter.backends.timing_lock import LockState

        return contextlib.nullcontext(LockState("remote"))

    def _ship(self, model: str, *, force: bool = False) -> dict[str, Any]:
        """The request fields that name ``model`` by content for a worker that cannot
        read this machine's files (:attr:`ships_models`), with its bytes unless that
        worker holds them (:mod:`nnmeter.backends.shipping`); none for a local worker."""
        if self._shipper is None:
            return {}
        return self._shipper.fields(model, force=force)

    def _request_job(self, msg: dict[str, Any], model: str,
                     timeout_s: float) -> tuple[dict[str, Any] | None, str]:
        """:meth:`_request` for a job, sending the model's bytes again when the worker
        does not hold them (it restarted, or evicted them)."""
        reply, why = self._request({**msg, **self._ship(model)}, timeout_s)
        if reply is not None and reply.get("error_kind") == "need_model":
            reply, why = self._request({**msg, **self._ship(model, force=True)}, timeout_s)
        return reply, why

    def _discard(self, path: Path) -> None:
        """Delete a model file this profiler exported (into its own folder) once its job
        is done: a long run of distinct models (a test set with VGGs) would otherwise
        keep every export on disk until the profiler closes."""
        if path.parent.resolve() == Path(self._tmp.name).resolve():
            path.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop the worker politely (kill it if it does not answer)."""
        if self._alive():
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(b'{"cmd": "exit"}\n')
                self._proc.stdin.flush()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._tmp.cleanup()

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_proc", None) is not None:
            self._kill()

    # -- helpers for tests and runners --------------------------------------------------
    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._alive() else None
