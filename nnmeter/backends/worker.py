"""The measurement worker: ``python -m nnmeter.backends.worker --backend ID``.

One worker serves one backend. It pins itself to one core where the OS allows,
imports the runtime once, then answers JSON-lines requests on stdin with JSON-lines
replies on stdout. Runtimes print on fd 1 from C code, so the worker keeps a private
duplicate of fd 1 for the protocol and points fd 1 at stderr.

Requests (one JSON object per line)::

    {"id": 1, "cmd": "measure", "job": {...Job.as_dict()...}}
    {"id": 2, "cmd": "profile", "job": {...}}
    {"id": 3, "cmd": "ping"}
    {"id": 4, "cmd": "exit"}

A ``measure`` or ``profile`` request may name its model by content instead, for a
worker on another machine (an ssh or Ray runner): ``"model_sha256"``,
``"model_name"`` and, when the worker may not hold it yet, ``"model_data"`` (the
file's bytes, base64; see :mod:`nnmeter.backends.shipping`). A worker that does not
hold the model answers ``"error_kind": "need_model"``.

Replies carry the same ``id`` and either ``"ok": true`` with ``measurement`` /
``nodes`` / ``device``, or ``"ok": false`` with ``error`` and ``error_kind``. The
first line a worker writes is ``{"ready": true, "device": {...}, "affinity": [...]}``
(or ``"ready": false`` with ``error``). With ``--exit-with-parent`` the worker
exits as soon as its parent process does (a remote worker whose ssh session or Ray
actor died must not go on measuring on the core). Test hooks: a request may carry
``"hook": "exit"`` (the worker dies at once) or ``"hook": "hang"`` (it sleeps forever).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
import traceback
from typing import IO, Any

__all__ = ["main", "serve"]

logger = logging.getLogger("nnmeter.backends.worker")


def _pin(core: int | None) -> list[int]:
    """Pin this process to ``core`` if given and allowed; return the affinity set."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    # the device's cores are those the user's process may use, not the one the worker
    # is pinned to for timing: read (and cache) the CPU before pinning
    from nnmeter.devices.cpu import local_cpu

    local_cpu()
    if core is not None and core >= 0:
        try:
            os.sched_setaffinity(0, {core})
        except OSError as err:
            logger.warning("could not pin the worker to core %d: %s", core, err)
    return sorted(os.sched_getaffinity(0))


def _watch_parent(interval_s: float = 0.5) -> None:
    """Exit this process as soon as its parent is gone (it is then re-parented)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(18)

    threading.Thread(target=watch, name="nnmeter-parent-watch", daemon=True).start()


def _send(out: IO[str], obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, default=str) + "\n")
    out.flush()


def _measure(backend: Any, device: Any, job: Any) -> dict[str, Any]:
    from nnmeter.backends.base import Measurement
    from nnmeter.backends.protocol import run_protocol
    from nnmeter.errors import BackendError

    t_job = time.perf_counter()
    t0 = time.perf_counter()
    try:
        prepared = backend.prepare(job.model)
    except BackendError as err:
        return {"ok": False, "error": str(err), "error_kind": "compile"}
    compile_ms = (time.perf_counter() - t0) * 1000
    try:
        feeds = prepared.random_inputs(job.protocol.seed)
        prepared.run(feeds)  # one checked run: a model that cannot run fails here
        prepared.bind(feeds)
    except Exception as err:  # the runtime's own exception types vary
        prepared.close()
        return {"ok": False, "error": f"{backend.id} could not run {job.model}: "
                                      f"{type(err).__name__}: {err}", "error_kind": "run"}
    try:
        res = run_protocol(prepared, job.protocol, _memory_probe(device))
    finally:
        prepared.close()
    extra = {**res.extra, "stats": res.stats, "round_runs": res.round_runs,
             "timed_ms": res.timed_ms, "compile_ms": compile_ms,
             "statistic": job.protocol.statistic,
             "worker_wall_ms": (time.perf_counter() - t_job) * 1000,
             "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else None}
    m = Measurement(latency_ms=res.latency_ms, median_ms=res.median_ms, min_ms=res.min_ms,
                    std_ms=res.std_ms, spread=res.spread, rounds=res.rounds, runs=res.runs,
                    device=device, ok=True, error=None, extra=extra,
                    backend_id=backend.id, model=job.model)
    return {"ok": True, "measurement": m.as_dict()}


_PROBE: list[Any] = []


def _memory_probe(device: Any) -> Any:
    """This worker's memory probe (:class:`nnmeter.backends.protocol.MemoryProbe`),
    made once: its buffer is twice the device's largest cache, and the fastest sample
    is kept per device under ``memory_probe/`` of nnmeter's cache root
    (:func:`nnmeter._cache.cache_root`)."""
    if not _PROBE:
        from nnmeter._cache import cache_root
        from nnmeter.backends.protocol import MemoryProbe, probe_bytes

        caches = getattr(device, "caches", None) or {}
        name = str(getattr(device, "name", None) or "unknown").replace("/", "_")
        nbytes = probe_bytes(caches)
        _PROBE.append(MemoryProbe(nbytes, baseline=cache_root() / "memory_probe"
                                  / f"{name}-{nbytes >> 20}MiB.json"))
    return _PROBE[0]


def _profile(backend: Any, job: Any) -> dict[str, Any]:
    from nnmeter.errors import BackendError

    try:
        nodes = backend.profile(job.model, runs=job.profile_runs)
    except BackendError as err:
        return {"ok": False, "error": str(err), "error_kind": "compile"}
    except NotImplementedError as err:
        return {"ok": False, "error": str(err), "error_kind": "unsupported"}
    return {"ok": True, "nodes": [n.as_dict() for n in nodes]}


def serve(backend_id: str, core: int | None, inp: IO[str], out: IO[str], *,
          lock: bool = False) -> int:
    """Answer requests from ``inp`` on ``out`` until ``exit`` or end of input. With
    ``lock``, each job holds this machine's timing lock (a parent on another machine
    cannot)."""
    from nnmeter.backends import get_backend

    affinity = _pin(core)
    try:
        backend = get_backend(backend_id)
        ok, why = backend.available()
        if not ok:
            _send(out, {"ready": False, "error": why})
            return 3
        device = backend.device_info()
    except Exception as err:  # report any start-up failure to the parent, then stop
        _send(out, {"ready": False, "error": f"{type(err).__name__}: {err}"})
        return 3
    _send(out, {"ready": True, "pid": os.getpid(), "affinity": affinity,
                "device": device.as_dict()})
    inbox = tempfile.TemporaryDirectory(prefix="nnmeter-worker-")
    try:
        return _serve_loop(backend, device, inp, out, inbox.name, lock)
    finally:
        inbox.cleanup()


def _serve_loop(backend: Any, device: Any, inp: IO[str], out: IO[str], inbox: str,
                lock: bool) -> int:
    import contextlib

    from nnmeter.backends.protocol import Job
    from nnmeter.backends.shipping import ModelInbox
    from nnmeter.backends.timing_lock import timing_lock

    models = ModelInbox(inbox)
    for line in inp:
        if not line.strip():
            continue
        req = json.loads(line)
        rid = req.get("id")
        hook = req.get("hook")
        if hook == "exit":
            os._exit(17)
        if hook == "hang":
            while True:
                time.sleep(3600)
        cmd = req.get("cmd")
        try:
            if cmd == "exit":
                _send(out, {"id": rid, "ok": True})
                return 0
            if cmd == "ping":
                reply = {"ok": True, "pid": os.getpid()}
            elif cmd in ("measure", "profile"):
                job_dict = dict(req["job"])
                shipped = models.path_for(req) if "model_sha256" in req else job_dict["model"]
                if shipped is None:
                    _send(out, {"id": rid, "ok": False, "error_kind": "need_model",
                                "error": "send the model's bytes"})
                    continue
                job = Job.from_dict({**job_dict, "model": shipped})
                with (timing_lock() if lock else contextlib.nullcontext()) as held:
                    reply = _measure(backend, device, job) if cmd == "measure" else \
                        _profile(backend, job)
                if held is not None and reply.get("measurement"):
                    reply["measurement"]["extra"].update(held.as_extra())
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}",
                         "error_kind": "protocol"}
        except Exception as err:  # a bug while serving one job must not kill the worker
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}",
                     "error_kind": "run", "traceback": traceback.format_exc(limit=5)}
        _send(out, {"id": rid, **reply})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnmeter.backends.worker")
    p.add_argument("--backend", required=True)
    p.add_argument("--core", default=None,
                   help="pin to this core (-1: no pin; auto: the highest core this "
                        "process may use, as a local profiler picks)")
    p.add_argument("--timing-lock", action="store_true",
                   help="hold this machine's timing lock during each job (a parent on "
                        "another machine cannot)")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit as soon as the parent process does (remote runners)")
    args = p.parse_args(argv)
    core: int | None
    if args.core is None:
        core = None
    elif args.core == "auto":
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        core = cpus[-1] if cpus else None
    else:
        try:
            core = int(args.core)
        except ValueError:
            p.error(f"--core takes a core number, -1 or auto, got {args.core!r}")
    if args.exit_with_parent:
        _watch_parent()
    proto_out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # C-level prints from runtimes must not corrupt the protocol
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="worker %(levelname)s %(name)s: %(message)s")
    return serve(args.backend, core, sys.stdin, proto_out, lock=args.timing_lock)


if __name__ == "__main__":
    sys.exit(main())
