"""The Ray runner: one Ray actor per device, each running one measurement at a time.

A *device* here is one node's backend. A node offers a backend by holding the custom
resource ``nnmeter-<backend id>`` (one unit), e.g.::

    ray start --head --resources '{"nnmeter-ort-cpu": 1, "nnmeter-litert-cpu": 1}'
    ray start --address HEAD:6379 --resources "$(nnmeter farm resources)"

The actor of a device takes that unit, so at most one actor per device exists in the
cluster however many builds or scripts submit to it; an actor handles one call at a
time; and on one machine every job also holds the machine's timing lock, so two
devices of one machine (its ``ort-cpu`` and its ``litert-cpu``) never time at once.

Inside the actor a local :class:`~nnmeter.backends.Profiler` drives the usual worker
subprocess, so crash and hang handling is the local one. On top of it:

- the actor is restarted when its process dies (``max_restarts``), and a call that was
  running is retried on the new actor (``max_task_retries``); a job that still fails,
  or that outlives its timeout, comes back as a failed Measurement (``ok=False``,
  ``error_kind`` ``crash`` or ``timeout``), which the builder records like any other:
  no job is lost, and since rows are appended by the driver only when a call returns,
  none is written twice;
- the models travel with the calls (the node may be another machine).

One process keeps one actor per device for all its profilers (a build's calibrations
open several); :func:`release_actors` (called when a ``use_runner`` block ends) kills
them so the device is free for the next driver. ``RAY_USAGE_STATS_ENABLED`` is set to
0 before Ray starts unless the user set it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from nnmeter.backends.base import ExecutedNode, Measurement
from nnmeter.backends.profiler import Profiler, check_on_error
from nnmeter.backends.protocol import Job
from nnmeter.farm.remote import RemoteProfiler

__all__ = ["RayProfiler", "resource_name", "node_resources", "connect", "farm_devices",
           "release_actors", "local_farm", "MAX_RESTARTS", "MAX_TASK_RETRIES", "START_TIMEOUT_S"]

logger = logging.getLogger(__name__)

#: an actor whose process dies is restarted this many times in a row at most
MAX_RESTARTS = 4
#: a call that was running when its actor died is retried this many times
MAX_TASK_RETRIES = 2
#: seconds a call may wait, beyond the job's own timeout, for its actor to (re)start
START_TIMEOUT_S = 300.0
#: the namespace of nnmeter's named actors
NAMESPACE = "nnmeter"

_actors: dict[tuple[str, str], Any] = {}
#: the address this process joined (None: not yet)
_connected_to: str | None = None
_actors_lock = threading.Lock()


def resource_name(backend_id: str) -> str:
    """The custom Ray resource a node holds to offer ``backend_id``: one per runtime,
    whatever its thread count (``ort-cpu-t2`` runs where ``ort-cpu`` does).

    >>> resource_name("ort-cpu"), resource_name("ort-cpu-t2")
    ('nnmeter-ort-cpu', 'nnmeter-ort-cpu')
    """
    from nnmeter.backends.base import parse_backend_id

    base, _threads = parse_backend_id(backend_id)
    return f"nnmeter-{base}"


def node_resources(backend_ids: Any = None) -> dict[str, float]:
    """The ``--resources`` of a node that offers ``backend_ids`` (default: every
    registered backend that runs on this machine)."""
    if backend_ids is None:
        from nnmeter.backends import available_backends

        backend_ids = [r["backend_id"] for r in available_backends() if r["available"]]
    return {resource_name(b): 1.0 for b in backend_ids}


def _ray() -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as err:
        from nnmeter.errors import BackendUnavailableError

        raise BackendUnavailableError(
            'the Ray runner needs Ray: pip install -e ".[farm]"') from err
    return ray


def connect(address: str | None = None) -> Any:
    """Connect this process to Ray (once): to the cluster at ``address``, or, without
    one, a Ray instance started here that offers every registered backend."""
    global _connected_to
    ray = _ray()
    if ray.is_initialized():
        if address and _connected_to is not None and address != _connected_to:
            from nnmeter.errors import SettingsError

            raise SettingsError(f"this process is joined to the Ray cluster at "
                                f"{_connected_to}; one process measures through one "
                                f"cluster (asked for {address})")
        return ray
    kw: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                          "log_to_driver": False, "namespace": NAMESPACE}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kw)
        except (ConnectionError, RuntimeError, TimeoutError) as err:
            from nnmeter.errors import BackendUnavailableError

            raise BackendUnavailableError(
                f"could not join the Ray cluster at {address}: {err} (start it with "
                f"`ray start --head`; --address takes HEAD:6379)") from err
    else:
        from nnmeter.backends import BACKENDS

        ray.init(resources=node_resources(BACKENDS.names()), **kw)
    _connected_to = address or "local"
    return ray


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast, with the fix, when nothing listens at a ``HOST:PORT`` address (Ray
    itself waits minutes); ``ray://`` and ``auto`` addresses are left to Ray."""
    import socket

    from nnmeter.errors import BackendUnavailableError, SettingsError

    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise SettingsError(f"--address {address!r}: give the head's HOST:PORT "
                            f"(e.g. 10.0.0.5:6379) or ray://HOST:10001")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise BackendUnavailableError(
            f"no Ray cluster answers at {address} ({err}); start its head with `ray start "
            f"--head --resources \"$(nnmeter farm resources)\"` or check --address") from err


def farm_devices(address: str | None = None) -> list[dict[str, Any]]:
    """Every device of the cluster: one row per alive node and backend it offers
    (``node_id``, ``host``, ``backend_id``)."""
    ray = connect(address)
    rows = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for res in sorted(node.get("Resources", {})):
            if res.startswith("nnmeter-"):
                rows.append({"node_id": node["NodeID"], "host": node.get("NodeManagerAddress"),
                             "backend_id": res[len("nnmeter-"):]})
    return rows


@contextlib.contextmanager
def local_farm(nodes: Sequence[Sequence[str]] = (("ort-cpu",), ("litert-cpu",))
               ) -> Iterator[str]:
    """A Ray cluster on this machine, for trying the farm and for tests: a head that
    offers no backend and one worker node per entry of ``nodes``, offering those
    backends. Yields the cluster's address; shuts it down (and this process's Ray
    connection) at the end."""
    global _connected_to
    import tempfile

    _ray()
    from ray.cluster_utils import Cluster

    # Ray (2.60) writes the cluster's address into its default temp folder (/tmp/ray)
    # whatever temp_dir says, and fails where that folder does not exist yet (a fresh
    # machine that never ran Ray)
    os.makedirs(os.path.join(tempfile.gettempdir(), "ray"), exist_ok=True)
    # Ray's socket paths must stay short: a temp folder right under /tmp
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False,
        "temp_dir": tempfile.mkdtemp(prefix="nnray-", dir="/tmp")})
    try:
        for backends in nodes:
            cluster.add_node(num_cpus=1, resources=node_resources(backends))
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        release_actors()
        import ray

        ray.shutdown()
        _connected_to = None
        cluster.shutdown()


class _DeviceActor:
    """Lives on the device's node; runs jobs through local profilers (one per core)."""

    def __init__(self, backend_id: str, protocol: dict[str, Any] | None) -> None:
        import tempfile

        from nnmeter.backends.protocol import ProtocolSettings

        self.backend_id = backend_id
        self.protocol = ProtocolSettings.from_dict(protocol) if protocol else None
        from nnmeter.backends.shipping import ModelInbox

        self.profilers: dict[Any, Profiler] = {}
        self.models = ModelInbox(tempfile.mkdtemp(prefix="nnmeter-actor-"))

    def _profiler(self, core: Any) -> Profiler:
        prof = self.profilers.get(core)
        if prof is None:
            prof = self.profilers[core] = Profiler(self.backend_id, protocol=self.protocol,
                                                   core=core)
        return prof

    def hello(self, core: Any = "auto") -> dict[str, Any]:
        import socket

        import ray

        prof = self._profiler(core).start()
        return {"device": prof.device.as_dict(), "pid": os.getpid(),
                "worker_pid": prof.worker_pid, "host": socket.gethostname(),
                "node_id": ray.get_runtime_context().get_node_id()}

    def _model(self, job: dict[str, Any], ship: dict[str, Any]) -> str | None:
        """The local path of the job's model (None: send its bytes)."""
        if not ship:
            return job["model"]
        return self.models.path_for(ship)

    def run(self, job: dict[str, Any], core: Any, ship: dict[str, Any],
            hook: str | None = None) -> dict[str, Any]:
        path = self._model(job, ship)
        if path is None:
            return {"need_model": True}
        m = self._profiler(core).run_job(Job.from_dict({**job, "model": path}),
                                         on_error="record", _hook=hook)
        d = m.as_dict()
        d["extra"]["actor_pid"] = os.getpid()
        return d

    def profile(self, job: dict[str, Any], core: Any, ship: dict[str, Any]) -> Any:
        path = self._model(job, ship)
        if path is None:
            return {"need_model": True}
        try:
            prof = self._profiler(core)
            nodes = prof.profile(path, runs=job.get("profile_runs", 10),
                                 timeout_s=job.get("protocol", {}).get("timeout_s"))
            return {"ok": True, "nodes": [n.as_dict() for n in nodes]}
        except NotImplementedError as err:
            return {"ok": False, "error_kind": "unsupported", "error": str(err)}
        except Exception as err:  # BackendError, MeasurementError: re-raised on the driver
            return {"ok": False, "error_kind": type(err).__name__, "error": str(err)}

    def close(self) -> None:
        for prof in self.profilers.values():
            prof.close()
        self.profilers.clear()


def _node_for(ray: Any, backend_id: str, wanted: str | None) -> str | None:
    """The node id whose ``backend_id`` is the device; None when Ray may choose
    (exactly one node offers it)."""
    from nnmeter.errors import BackendUnavailableError, SettingsError

    res = resource_name(backend_id)
    nodes = [n for n in ray.nodes() if n.get("Alive") and res in n.get("Resources", {})]
    if not nodes:
        raise BackendUnavailableError(
            f"no node of the Ray cluster offers {backend_id}: start one with "
            f"`ray start ... --resources '{{\"{res}\": 1}}'` (see `nnmeter farm resources`)")
    if wanted:
        hit = [n for n in nodes if n["NodeID"].startswith(wanted)
               or n.get("NodeManagerAddress") == wanted or n.get("NodeName") == wanted]
        if len(hit) != 1:
            raise SettingsError(
                f"--node {wanted!r} matches {len(hit)} of the nodes offering {backend_id}: "
                + ", ".join(f"{n['NodeID'][:12]} ({n.get('NodeManagerAddress')})"
                            for n in nodes))
        return hit[0]["NodeID"]
    if len(nodes) > 1:
        raise SettingsError(
            f"{len(nodes)} nodes offer {backend_id}, and a dataset is one device: choose "
            "one with --node " + " or ".join(f"{n['NodeID'][:12]} "
                                             f"({n.get('NodeManagerAddress')})" for n in nodes))
    return None


def _actor(spec: Any, backend_id: str, protocol: dict[str, Any] | None) -> Any:
    """This process's actor for the device (made on first use)."""
    ray = connect(spec.address)
    key = (backend_id, spec.node or "")
    with _actors_lock:
        handle = _actors.get(key)
        if handle is not None:
            return handle
        node = _node_for(ray, backend_id, spec.node)
        opts: dict[str, Any] = {"num_cpus": 0, "resources": {resource_name(backend_id): 1},
                                "max_restarts": MAX_RESTARTS,
                                "max_task_retries": MAX_TASK_RETRIES}
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        cls = ray.remote(_DeviceActor)
        handle = _actors[key] = cls.options(**opts).remote(backend_id, protocol)
        return handle


def release_actors() -> None:
    """Kill this process's device actors, freeing their devices for other drivers."""
    with _actors_lock:
        handles = list(_actors.values())
        _actors.clear()
    if not handles:
        return
    ray = _ray()
    for h in handles:
        try:
            ray.get(h.close.remote(), timeout=30)
        except Exception:  # a dead actor has nothing to close
            pass
        try:
            ray.kill(h, no_restart=True)
        except Exception:  # gone already: the device is free either way
            pass


class RayProfiler(RemoteProfiler):
    """A :class:`~nnmeter.backends.Profiler` whose jobs run in the device's Ray actor
    (see the module)."""

    kind = "ray"

    def __init__(self, backend_id: str, **kw: Any) -> None:
        super().__init__(backend_id, **kw)
        self._handle: Any = None
        self.actor_pid: int | None = None
        self.node_id: str | None = None
        self.host: str | None = None

    # -- the actor ------------------------------------------------------------------
    def _actor(self) -> Any:
        if self._handle is None:
            self._handle = _actor(self.spec, self.backend_id, None)
        return self._handle

    def start(self) -> RayProfiler:
        if self.device is None:
            from nnmeter.backends.base import DeviceInfo
            from nnmeter.errors import BackendUnavailableError, NNMeterError

            ray = _ray()
            try:
                hello = ray.get(self._actor().hello.remote(self.core), timeout=START_TIMEOUT_S)
            except NNMeterError:  # says what to do already (no cluster, no such node)
                raise
            except Exception as err:
                raise BackendUnavailableError(
                    f"the Ray actor of {self.backend_id} ({self.spec.describe()}) did not "
                    f"start: {type(err).__name__}: {err}") from err
            self.device = DeviceInfo.from_dict(hello["device"])
            self.actor_pid, self.node_id, self.host = \
                hello["pid"], hello["node_id"], hello["host"]
        return self

    def _alive(self) -> bool:
        return self._handle is not None

    def _call(self, method: str, job: Job, *args: Any) -> tuple[Any, str, str]:
        """Call the actor; return (result, "", "") or (None, kind, why)."""
        ray = _ray()
        try:
            for force in (False, True):  # again with the bytes if the actor lacks them
                ref = getattr(self._actor(), method).remote(
                    job.as_dict(), self.core, self._ship(job.model, force=force), *args)
                got = ray.get(ref, timeout=job.protocol.timeout_s + START_TIMEOUT_S)
                if not (isinstance(got, dict) and got.get("need_model")):
                    break
            return got, "", ""
        except ray.exceptions.GetTimeoutError:
            self.restarts += 1
            ray.kill(self._actor(), no_restart=False)  # a fresh actor for the next job
            return None, "timeout", (f"no result from the Ray actor within "
                                     f"{job.protocol.timeout_s + START_TIMEOUT_S:g} s; "
                                     f"actor restarted")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
            self.restarts += 1
            return None, "crash", (f"the Ray actor of {self.backend_id} died "
                                   f"{MAX_TASK_RETRIES + 1} times on this job: "
                                   f"{type(err).__name__}: {str(err)[:300]}")

    def run_job(self, job: Job, *, on_error: str = "record",
                _hook: str | None = None) -> Measurement:
        check_on_error(on_error)
        self.start()
        t0 = time.perf_counter()
        d, kind, why = self._call("run", job, _hook)
        wall_ms = (time.perf_counter() - t0) * 1000
        if d is None:
            return Measurement.failed(why, kind=kind, backend_id=self.backend_id,
                                      model=job.model, device=self.device, job_wall_ms=wall_ms)
        m = Measurement.from_dict({**d, "model": job.model})
        if not m.ok and on_error == "raise" and m.extra.get("error_kind") in ("compile", "run"):
            from nnmeter.errors import BackendError

            raise BackendError(str(m.error))
        m.extra["actor_job_wall_ms"] = m.extra.get("job_wall_ms")
        m.extra["job_wall_ms"] = wall_ms
        m.extra["overhead_ms"] = wall_ms - m.extra.get("timed_ms", 0.0)
        m.extra["farm_overhead_ms"] = wall_ms - (m.extra["actor_job_wall_ms"] or 0.0)
        m.extra["runner"] = "ray"
        return m

    def profile(self, model: Any, *, runs: int = 10,
                timeout_s: float | None = None) -> list[ExecutedNode]:
        from nnmeter.backends.profiler import resolve_model
        from nnmeter.errors import BackendError, MeasurementError

        self.start()
        path = resolve_model(model, self.backend.model_format, self._tmp.name)
        protocol = self.protocol if timeout_s is None else \
            self.protocol.with_overrides(timeout_s=timeout_s)
        job = Job(model=str(path), backend_id=self.backend_id, protocol=protocol,
                  kind="profile", profile_runs=runs)
        try:
            reply, kind, why = self._call("profile", job)
        finally:
            self._discard(path)
        if reply is None:
            raise MeasurementError(f"profiling {Path(path).name} on {self.backend_id} "
                                   f"failed: {kind}: {why}")
        if not reply["ok"]:
            if reply["error_kind"] == "unsupported":
                raise NotImplementedError(reply["error"])
            raise BackendError(reply["error"])
        return [ExecutedNode.from_dict(n) for n in reply["nodes"]]

    @property
    def worker_pid(self) -> int | None:
        return self.actor_pid

    def close(self) -> None:
        """Forget the actor (it stays for this process's other profilers until
        :func:`release_actors`)."""
        self._handle = None
        self._tmp.cleanup()
