"""Real inference backends and the measurement protocol.

A backend id names one runtime with its settings: ``ort-cpu``, ``litert-cpu``,
``litert-cpu-ref``, ``openvino-cpu`` (``openvino-cpu-f32`` held to f32), ``mnn-cpu``; a
suffix ``-tN`` selects N threads
(``ort-cpu-t4``). Third parties add backends through the ``nnmeter.backends``
entry-point group: the entry point names a :class:`Backend` subclass, called as
``cls(threads=N)``.

Measuring always happens in a worker subprocess (see ``docs/measurement.md``).

Examples
--------
>>> from nnmeter.backends import get_backend
>>> get_backend("ort-cpu-t4").threads
4
>>> m = measure("model.onnx", "ort-cpu")                      # doctest: +SKIP
>>> nodes = profile("model.onnx", "openvino-cpu")             # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from nnmeter.backends.base import (
    Backend,
    DeviceInfo,
    ExecutedNode,
    InputSpec,
    Measurement,
    Prepared,
    Recording,
    parse_backend_id,
)
from nnmeter.backends.litert import LiteRtBackend, LiteRtRefBackend
from nnmeter.backends.mnn import MnnCpuBackend
from nnmeter.backends.openvino import OpenVinoCpuBackend, OpenVinoCpuF32Backend
from nnmeter.backends.ort import OrtCpuBackend
from nnmeter.backends.profiler import Profiler
from nnmeter.backends.protocol import Job, ProtocolSettings
from nnmeter.registry import Registry

__all__ = [
    "BACKENDS", "Backend", "DeviceInfo", "ExecutedNode", "InputSpec", "Job", "Measurement",
    "Prepared", "Profiler", "ProtocolSettings", "Recording", "available_backends", "get_backend",
    "measure", "profile",
]

#: backend classes by base id; ``get_backend`` adds the thread suffix
BACKENDS: Registry[type[Backend]] = Registry("backends", entry_point_group="nnmeter.backends")
for _cls in (OrtCpuBackend, LiteRtBackend, LiteRtRefBackend, OpenVinoCpuBackend,
             OpenVinoCpuF32Backend, MnnCpuBackend):
    BACKENDS.register(_cls.base_id, _cls)
del _cls


def get_backend(backend_id: str) -> Backend:
    """The backend for ``backend_id`` (``"ort-cpu"``, ``"ort-cpu-t4"``, ...).

    Cheap: no runtime is imported until the backend prepares a model.

    Raises
    ------
    UnknownNameError
        If the id (without its ``-tN`` suffix) is not registered; lists the known ids.
    """
    base, threads = parse_backend_id(backend_id)
    if base not in BACKENDS and backend_id in BACKENDS:
        base, threads = backend_id, 1
    return BACKENDS.get(base)(threads=threads)


def available_backends() -> list[dict[str, Any]]:
    """Every registered backend with whether it runs here, its version, or why not.

    Imports each runtime, so it takes a few seconds.
    """
    rows = []
    for name in BACKENDS.names():
        b = get_backend(name)
        ok, why = b.available()
        version = ""
        if ok:
            try:
                version = b.runtime_version()
            except Exception as err:  # a runtime that imports but cannot say its version
                ok, why = False, f"{type(err).__name__}: {err}"
        rows.append({"backend_id": name, "runtime": b.runtime, "model_format": b.model_format,
                     "available": ok, "version": version, "reason": why})
    return rows


def measure(model: Any, backend_id: str, *, on_error: str = "raise",
            core: int | str | None = "auto", **protocol: Any) -> Measurement:
    """Measure ``model`` on ``backend_id`` in a fresh worker subprocess.

    Parameters
    ----------
    model : path or ModelGraph
        A file in the backend's format (``.onnx`` / ``.tflite``), an IR ``.json`` or a
        ModelGraph (exported with ``nnmeter.exporters.export``).
    on_error : {"raise", "record"}
        A model the runtime cannot compile or run raises BackendError (default) or
        comes back as ``Measurement(ok=False)``. Crashes and timeouts always come back
        as failed Measurements.
    **protocol
        :class:`ProtocolSettings` fields, e.g. ``rounds=7``, ``runs=50``, ``timeout_s=30``.

    For many models use one :class:`Profiler`: it keeps the worker alive.
    """
    with Profiler(backend_id, core=core) as prof:
        return prof.measure(model, on_error=on_error, **protocol)


def profile(model: Any, backend_id: str, *, runs: int = 10) -> list[ExecutedNode]:
    """The nodes ``backend_id`` really executes for ``model``, in a worker subprocess.

    Raises
    ------
    BackendError
        If the runtime cannot compile the model.
    NotImplementedError
        If the backend cannot report its executed graph.
    """
    with Profiler(backend_id) as prof:
        return prof.profile(model, runs=runs)
