"""Records and base classes shared by every backend.

A :class:`Backend` names one runtime with its settings. It compiles a model file
once (:meth:`Backend.prepare`) into a :class:`Prepared` that can be run and timed
many times. Timing itself happens only inside a worker process (see
:mod:`nnmeter.backends.protocol`); the records here are plain, serialisable data so
that a job can travel to another process or machine and come back.

Examples
--------
>>> d = DeviceInfo(cpu_model="x", cores=2, runtime="onnxruntime", runtime_version="1",
...                settings={"threads": 1})
>>> d.fingerprint_id == DeviceInfo.from_dict(d.as_dict()).fingerprint_id
True
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from nnmeter.errors import BackendError

__all__ = [
    "Backend",
    "Prepared",
    "Recording",
    "Measurement",
    "DeviceInfo",
    "ExecutedNode",
    "InputSpec",
    "local_cpu_model",
    "parse_backend_id",
]


def local_cpu_model() -> str:
    """The CPU model name of this machine (``/proc/cpuinfo``), or the platform's guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def parse_backend_id(backend_id: str) -> tuple[str, int]:
    """Split ``"ort-cpu-t4"`` into ``("ort-cpu", 4)``; no suffix means 1 thread.

    Examples
    --------
    >>> parse_backend_id("ort-cpu-t4")
    ('ort-cpu', 4)
    >>> parse_backend_id("litert-cpu-ref")
    ('litert-cpu-ref', 1)
    """
    base, sep, tail = backend_id.rpartition("-t")
    if sep and tail.isdigit() and base and int(tail) > 0:
        return base, int(tail)
    return backend_id, 1


#: DeviceInfo fields that describe the CPU (round 2); a record without any of them is a
#: round-1 record, whose fingerprint hashes only the other fields
_CPU_FIELDS = ("vendor", "family", "model", "stepping", "isa", "caches")


@dataclass(frozen=True)
class DeviceInfo:
    """The device a measurement was made on: the CPU, the runtime and its settings.

    A *device* is one CPU kind (vendor, model name, family/model/stepping, the ISA
    features its kernels dispatch on, cache sizes, the cores the process may use) plus
    one runtime version and its settings. Two measurements may be mixed in one dataset
    only when they come from one device (:meth:`differences` is empty).

    ``fingerprint_id`` is a stable 12-hex-digit hash of the facts (not of the derived
    ``microarch`` and ``name``); ``name`` is the CPU's readable short name
    (``epyc-zen4-avx512-2c``, :meth:`nnmeter.devices.cpu.CpuInfo.short_name`), the
    ``<device>`` of a dataset id ``<backend>@<device>``. A record written before the
    CPU fields existed (round 1) has none of them; its fingerprint hashes only the
    fields it has, so old ids stay valid.

    Examples
    --------
    >>> d = DeviceInfo("AMD EPYC", 2, "onnxruntime", "1.32.0", {"threads": 1}, "x86_64",
    ...                vendor="AuthenticAMD", family=25, model=17, stepping=1,
    ...                isa=("avx2", "fma", "avx512f"), caches={"L3": 33554432})
    >>> DeviceInfo.from_dict(d.as_dict()) == d
    True
    >>> d.differences({**d.as_dict(), "isa": ["avx2", "fma"]})
    ['isa']
    """

    cpu_model: str
    cores: int
    runtime: str
    runtime_version: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    arch: str = ""
    vendor: str = ""
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    isa: tuple[str, ...] = ()
    caches: Mapping[str, int] = field(default_factory=dict)
    microarch: str = ""
    name: str = ""

    __hash__ = None  # settings is a dict; compare with == or by fingerprint_id

    @property
    def has_cpu_facts(self) -> bool:
        """Whether the record carries the round-2 CPU fields."""
        return bool(self.vendor or self.isa or self.caches or self.family is not None)

    @property
    def fingerprint_id(self) -> str:
        """A stable 12-hex-digit hash of every fact (``microarch``/``name`` excluded)."""
        d = self.as_dict(with_id=False)
        d.pop("microarch", None)
        d.pop("name", None)
        blob = json.dumps(d, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def as_dict(self, *, with_id: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"cpu_model": self.cpu_model, "cores": self.cores,
                             "runtime": self.runtime, "runtime_version": self.runtime_version,
                             "settings": dict(self.settings), "arch": self.arch}
        if self.has_cpu_facts:
            d.update({"vendor": self.vendor, "family": self.family, "model": self.model,
                      "stepping": self.stepping, "isa": list(self.isa),
                      "caches": dict(self.caches), "microarch": self.microarch,
                      "name": self.name})
        if with_id:
            d["fingerprint_id"] = self.fingerprint_id
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceInfo:
        """The DeviceInfo of a record (:meth:`as_dict`, old or new).

        Raises
        ------
        DeviceError
            If the record is not a mapping, lacks a required field or has one of the
            wrong type; the message names the field.
        """
        from nnmeter.errors import DeviceError

        if not isinstance(d, Mapping):
            raise DeviceError(f"a device record must be a JSON object, got {type(d).__name__}")
        for key in ("cpu_model", "cores", "runtime", "runtime_version"):
            if key not in d:
                raise DeviceError(f"device record lacks {key!r} (fields: {sorted(d)})")

        def opt_int(key: str) -> int | None:
            v = d.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                raise DeviceError(f"device record {key!r} must be an integer or null, got {v!r}")
            return v

        isa = d.get("isa") or ()
        if not isinstance(isa, (list, tuple)) or not all(isinstance(f, str) for f in isa):
            raise DeviceError(f"device record 'isa' must be a list of flag names, got {isa!r}")
        caches = d.get("caches") or {}
        if not isinstance(caches, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for k, v in caches.items()):
            raise DeviceError(f"device record 'caches' must map a level to bytes, got {caches!r}")
        settings = d.get("settings") or {}
        if not isinstance(settings, Mapping):
            raise DeviceError(f"device record 'settings' must be an object, got {settings!r}")
        try:
            cores = int(d["cores"])
        except (TypeError, ValueError):
            raise DeviceError(f"device record 'cores' must be an integer, got {d['cores']!r}") \
                from None
        return cls(cpu_model=str(d["cpu_model"]), cores=cores, runtime=str(d["runtime"]),
                   runtime_version=str(d["runtime_version"]), settings=dict(settings),
                   arch=str(d.get("arch", "")), vendor=str(d.get("vendor") or ""),
                   family=opt_int("family"), model=opt_int("model"),
                   stepping=opt_int("stepping"), isa=tuple(isa), caches=dict(caches),
                   microarch=str(d.get("microarch") or ""), name=str(d.get("name") or ""))

    @classmethod
    def local(cls, runtime: str, runtime_version: str,
              settings: Mapping[str, Any] | None = None) -> DeviceInfo:
        """This machine's DeviceInfo for a runtime (:func:`nnmeter.devices.cpu.local_cpu`)."""
        from nnmeter.devices.cpu import local_cpu

        cpu = local_cpu()
        return cls(cpu_model=cpu.model_name or local_cpu_model(), cores=cpu.cores,
                   runtime=runtime, runtime_version=runtime_version,
                   settings=dict(settings or {}), arch=cpu.arch or platform.machine(),
                   vendor=cpu.vendor, family=cpu.family, model=cpu.model,
                   stepping=cpu.stepping, isa=tuple(cpu.isa), caches=dict(cpu.caches),
                   microarch=cpu.microarch(), name=cpu.short_name())

    def differences(self, record: Mapping[str, Any] | DeviceInfo | None) -> list[str]:
        """Fields in which ``record`` (another device, as a DeviceInfo or its dict)
        differs from this one; empty when they are one device.

        Only fields both sides record are compared, so a round-1 record (no CPU fields)
        matches a new one of the same CPU name, cores, runtime and settings. A runtime
        version matches when one is a prefix of the other (``1.32`` and ``1.32.0``).
        ``microarch`` and ``name`` are derived and never compared.
        """
        if record is None:
            return ["no device recorded"]
        other = record.as_dict() if isinstance(record, DeviceInfo) else dict(record)
        mine = self.as_dict()
        diffs = []
        for key in ("cpu_model", "cores", "arch", "runtime", "settings", *_CPU_FIELDS):
            if key not in other or key not in mine:
                continue
            a, b = mine[key], other[key]
            if key == "isa":
                a, b = set(a or ()), set(b or ())
            elif key == "arch" and (not a or not b):
                continue
            if a != b:
                diffs.append(key)
        va, vb = str(mine.get("runtime_version", "")), str(other.get("runtime_version", ""))
        if va and vb and not (va.startswith(vb) or vb.startswith(va)):
            diffs.append("runtime_version")
        return diffs


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _json_num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


#: a measurement whose memory probe ran this many times its fastest (before or after the
#: job) says so in its warnings. On one 2-vCPU cloud host over four busy minutes the
#: probe ran at a median 1.29x its fastest and a MobileNetV2 at 1.10x its fastest
#: (``experiments/memory_contention.py``); the warning names the slower half of that.
MEMORY_WARN = 1.25


@dataclass(frozen=True)
class Measurement:
    """The outcome of measuring one model on one backend.

    All times are milliseconds per inference. ``latency_ms`` is the protocol's
    reported statistic (see ``docs/measurement.md``); ``spread`` is relative (0.03 =
    3 %). A failed measurement has ``ok=False``, NaN times and ``error`` saying why;
    ``extra["error_kind"]`` is one of ``compile``, ``run``, ``crash``, ``timeout``.
    """

    latency_ms: float
    median_ms: float
    min_ms: float
    std_ms: float
    spread: float
    rounds: int
    runs: int
    device: DeviceInfo | None
    ok: bool = True
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    backend_id: str = ""
    model: str = ""

    __hash__ = None

    @classmethod
    def failed(cls, error: str, *, kind: str, backend_id: str = "", model: str = "",
               device: DeviceInfo | None = None, **extra: Any) -> Measurement:
        """A failed measurement carrying ``error`` and ``extra["error_kind"] = kind``."""
        return cls(latency_ms=math.nan, median_ms=math.nan, min_ms=math.nan,
                   std_ms=math.nan, spread=math.nan, rounds=0, runs=0, device=device,
                   ok=False, error=error, extra={"error_kind": kind, **extra},
                   backend_id=backend_id, model=model)

    def quality_warnings(self, *, spread_limit: float = 0.10) -> list[str]:
        """What makes this measurement doubtful, one sentence each: a spread between
        rounds over ``spread_limit``, many preempted runs, no quiet round (preempted, or
        timed while the memory probe ran slow), a machine that changed speed, a wait for (or a timeout on) the machine's timing lock."""
        if not self.ok:
            return []
        ex, out = self.extra, []
        if math.isfinite(self.spread) and self.spread > spread_limit:
            out.append(f"the measured rounds spread {self.spread:.0%} (over "
                       f"{spread_limit:.0%}): the machine was busy; re-measure when it is "
                       f"quiet")
        total, dirty = ex.get("total_runs") or 0, ex.get("dirty_runs") or 0
        if total and dirty / total > 0.2:
            out.append(f"{dirty} of {total} timed runs were preempted (another process "
                       f"shared the core)")
        contended = ex.get("contended_rounds") or 0
        if ex.get("memory_persistent"):
            out.append(f"the host's memory was slow throughout (a memory-bound probe ran "
                       f"{ex.get('memory_ratio_min', math.nan):.2f}x or more its fastest "
                       f"on this device): another tenant is using the memory bandwidth and "
                       f"cache, so this time is likely inflated; measure again later")
        elif ex.get("quiet") is False and contended:
            out.append(f"no quiet round: {contended} rounds ran while another tenant of "
                       f"the host slowed its memory (a memory-bound probe up to "
                       f"{ex.get('memory_ratio_max', math.nan):.2f}x its fastest), so all "
                       f"were used")
        elif ex.get("quiet") is False:
            out.append("no quiet round: every round was preempted, so all were used")
        ratio = ex.get("memory_ratio")
        if ratio is not None and ratio > MEMORY_WARN and not ex.get("memory_persistent"):
            out.append(f"the host's memory ran slow around this job (a memory-bound probe "
                       f"at {ratio:.2f}x its fastest on this device): another tenant was "
                       f"using its memory bandwidth and cache, which can inflate this time")
        if ex.get("drift_flag"):
            out.append(f"the machine changed speed during the job (calibration moved "
                       f"{ex.get('drift', 0):.0%})")
        if ex.get("timing_lock") == "timeout":
            out.append(f"another nnmeter job held the machine's timing lock for "
                       f"{ex.get('lock_wait_ms', 0) / 1000:.0f} s; measured anyway, so the "
                       f"two may have timed each other")
        elif (ex.get("lock_wait_ms") or 0) > 1000:
            out.append(f"waited {ex['lock_wait_ms'] / 1000:.1f} s for another nnmeter "
                       f"measurement on this machine to finish")
        return out

    def as_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN becomes None)."""
        return {
            "latency_ms": _json_num(self.latency_ms), "median_ms": _json_num(self.median_ms),
            "min_ms": _json_num(self.min_ms), "std_ms": _json_num(self.std_ms),
            "spread": _json_num(self.spread), "rounds": self.rounds, "runs": self.runs,
            "device": self.device.as_dict() if self.device else None, "ok": self.ok,
            "error": self.error, "extra": dict(self.extra), "backend_id": self.backend_id,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        dev = d.get("device")
        return cls(latency_ms=_num(d.get("latency_ms")), median_ms=_num(d.get("median_ms")),
                   min_ms=_num(d.get("min_ms")), std_ms=_num(d.get("std_ms")),
                   spread=_num(d.get("spread")), rounds=int(d.get("rounds", 0)),
                   runs=int(d.get("runs", 0)),
                   device=DeviceInfo.from_dict(dev) if dev else None,
                   ok=bool(d.get("ok", True)), error=d.get("error"),
                   extra=dict(d.get("extra") or {}), backend_id=str(d.get("backend_id", "")),
                   model=str(d.get("model", "")))


@dataclass(frozen=True)
class ExecutedNode:
    """One node a runtime really executed, after its own graph rewriting and fusion.

    ``covers`` names the nodes of the original (ONNX) model that this node computes;
    it is empty for nodes the runtime added on its own (layout reorders, copies).
    ``time_ms`` is the node's time per inference when the runtime reports it.
    """

    name: str
    op_type: str
    covers: tuple[str, ...]
    time_ms: float | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op_type": self.op_type, "covers": list(self.covers),
                "time_ms": self.time_ms, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExecutedNode:
        t = d.get("time_ms")
        return cls(name=str(d["name"]), op_type=str(d["op_type"]),
                   covers=tuple(d.get("covers") or ()), time_ms=None if t is None else float(t),
                   detail=str(d.get("detail", "")))


@dataclass(frozen=True)
class InputSpec:
    """Name, static shape and numpy dtype of one model input."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class Prepared:
    """A compiled model, ready to run many times (the ``prepare``/``run`` split).

    Subclasses implement :meth:`run` (inputs by name → list of outputs) and
    :meth:`_invoke`, the bare inference on inputs already bound by :meth:`bind`.
    """

    #: the model's inputs, filled by the subclass
    inputs: tuple[InputSpec, ...] = ()

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic random inputs that fit :attr:`inputs`."""
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            dt = np.dtype(spec.dtype)
            if dt.kind == "f":
                out[spec.name] = rng.standard_normal(spec.shape).astype(dt)
            elif dt.kind in "iu":
                out[spec.name] = rng.integers(0, 2, size=spec.shape).astype(dt)
            elif dt.kind == "b":
                out[spec.name] = rng.integers(0, 2, size=spec.shape).astype(bool)
            else:
                out[spec.name] = np.zeros(spec.shape, dtype=dt)
        return out

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run one inference and return the outputs in the model's order."""
        raise NotImplementedError

    def bind(self, inputs: Mapping[str, np.ndarray] | None = None) -> None:
        """Bind ``inputs`` (default: random ones) for :meth:`time_once`."""
        self._bound = dict(inputs) if inputs is not None else self.random_inputs()

    def _invoke(self) -> None:
        self.run(self._bound)

    def time_once(self) -> float:
        """Run the bound inputs once and return the wall time in milliseconds.

        Call this only inside a measurement worker: the parent process never times.
        """
        import time

        if not hasattr(self, "_bound"):
            self.bind()
        t0 = time.perf_counter_ns()
        self._invoke()
        return (time.perf_counter_ns() - t0) / 1e6

    def close(self) -> None:
        """Free the runtime's resources (optional)."""


class Recording(Prepared):
    """A model compiled for instrumented runs (:meth:`Backend.prepare_recording`).

    :meth:`run`, :meth:`bind` and :meth:`time_once` run the model exactly as
    :meth:`Backend.prepare` would, with the measurement settings. On top of that
    :meth:`record` returns every intermediate tensor and :meth:`op_times_ms` the time
    of every executed op, each under the same settings as far as the runtime allows
    (each subclass says where it cannot).
    """

    def record(self, inputs: Mapping[str, np.ndarray]) -> dict[Any, np.ndarray]:
        """Run once; every intermediate tensor, keyed by the runtime's own tensor id.

        Values are as the runtime holds them: native layout, quantized dtypes kept.
        """
        raise NotImplementedError

    def op_times_ms(self, inputs: Mapping[str, np.ndarray], *,
                    runs: int = 10) -> dict[str, float]:
        """Time per executed op in ms by the runtime's node name; ``{}`` when the runtime
        cannot time ops."""
        return {}


_T = TypeVar("_T")


class Backend:
    """One runtime on one device with its settings.

    Subclasses set :attr:`base_id`, :attr:`runtime`, :attr:`model_format` and
    implement :meth:`runtime_version`, :meth:`_prepare` and optionally
    :meth:`profile`. Constructing a backend is cheap and imports nothing heavy.

    Parameters
    ----------
    threads : int
        Intra-op threads the runtime may use (part of the backend id: ``-t4``).
    """

    base_id: str = ""
    #: a backend whose fusion rules this one shares when it has none of its own (the
    #: same runtime under another setting, e.g. a precision); None: its own only
    rules_base_id: str | None = None
    runtime: str = ""
    model_format: str = "onnx"
    #: python module whose import tells whether the runtime is installed
    runtime_module: str = ""

    def __init__(self, *, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads

    @property
    def id(self) -> str:
        return self.base_id if self.threads == 1 else f"{self.base_id}-t{self.threads}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r})"

    # -- availability ---------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """Whether the runtime can be imported here, and if not, why."""
        import importlib

        try:
            importlib.import_module(self.runtime_module)
        except Exception as err:  # any import failure means unavailable
            return False, f"cannot import {self.runtime_module}: {type(err).__name__}: {err}"
        return True, ""

    def runtime_version(self) -> str:
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """The settings that change timing; part of the fingerprint."""
        return {"threads": self.threads}

    def device_info(self) -> DeviceInfo:
        """This machine's fingerprint for this backend (imports the runtime)."""
        return DeviceInfo.local(self.runtime, self.runtime_version(), self.settings())

    # -- compile / run ----------------------------------------------------------------
    def check_model_file(self, model_file: str | os.PathLike) -> Path:
        path = Path(model_file)
        if not path.exists():
            raise BackendError(f"{self.id}: model file {str(path)!r} does not exist")
        if path.suffix.lower() != f".{self.model_format}":
            raise BackendError(
                f"{self.id} takes .{self.model_format} models, got {path.name!r}; export the "
                f"model with nnmeter.exporters.export(graph, path, {self.model_format!r})")
        return path

    def prepare(self, model_file: str | os.PathLike) -> Prepared:
        """Compile ``model_file`` once for many runs.

        Raises
        ------
        BackendError
            If the file is missing, of the wrong format, or the runtime cannot compile
            it; the message carries the runtime's own words.
        """
        path = self.check_model_file(model_file)
        return self._compile_with(path, self._prepare)

    def prepare_recording(self, model_file: str | os.PathLike) -> Recording:
        """Compile ``model_file`` for instrumented runs: outputs, every intermediate
        tensor and per-op times, with the same runtime settings as :meth:`prepare`.

        Raises
        ------
        BackendError
            As :meth:`prepare`.
        NotImplementedError
            If this backend cannot record intermediate tensors.
        """
        if type(self)._prepare_recording is Backend._prepare_recording:
            raise NotImplementedError(
                f"{self.id} cannot record intermediate tensors; ort-cpu, litert-cpu and "
                f"litert-cpu-ref can")
        path = self.check_model_file(model_file)
        return self._compile_with(path, self._prepare_recording)

    def _compile_with(self, path: Path, build: Callable[[Path], _T]) -> _T:
        """``build(path)``, with the runtime's own errors raised as BackendError."""
        try:
            return build(path)
        except BackendError:
            raise
        except Exception as err:  # the runtime's own exception types vary
            raise BackendError(
                f"{self.id} could not compile {path.name}: {type(err).__name__}: "
                f"{str(err).strip()[:2000]}") from err

    def _prepare(self, path: Path) -> Prepared:
        raise NotImplementedError

    def _prepare_recording(self, path: Path) -> Recording:
        raise NotImplementedError

    def profile(self, model_file: str | os.PathLike, *, runs: int = 10) -> list[ExecutedNode]:
        """The nodes the runtime really executes, with what they cover and their times.

        Raises
        ------
        NotImplementedError
            If this runtime cannot tell (the subclass says why).
        """
        raise NotImplementedError(f"{self.id} cannot report its executed graph")
