"""LiteRT (TFLite) interpreter on the CPU: ``litert-cpu`` (default XNNPACK delegate)
and ``litert-cpu-ref`` (reference kernels, ``OpResolverType.BUILTIN_REF``).

The Python interpreter has no per-op profiler, so :meth:`LiteRtBackend.profile`
reports the executed graph (delegate partitions and the ops left to built-in
kernels) without times. Per-op times need TFLite's ``benchmark_model`` binary
(``--enable_op_profiling``), which a remote backend can add later.

:meth:`LiteRtBackend.prepare_recording` adds a second interpreter that keeps every
tensor (``experimental_preserve_all_tensors``). Tensors inside a delegate cannot be
read, so on ``litert-cpu`` that interpreter runs the built-in kernels without XNNPACK;
the thread count is the measurement's. Every interpreter here comes from
:meth:`LiteRtBackend._interpreter`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.backends.base import Backend, ExecutedNode, InputSpec, Prepared, Recording

__all__ = ["LiteRtBackend", "LiteRtRefBackend", "LiteRtPrepared", "LiteRtRecording"]

logger = logging.getLogger(__name__)


class LiteRtPrepared(Prepared):
    def __init__(self, interpreter: Any) -> None:
        self.interpreter = interpreter
        self._in = interpreter.get_input_details()
        self._out = interpreter.get_output_details()
        self.inputs = tuple(InputSpec(d["name"], tuple(int(x) for x in d["shape"]),
                                      np.dtype(d["dtype"]).name) for d in self._in)

    def _feed(self, inputs: Mapping[str, np.ndarray]) -> None:
        for d in self._in:
            self.interpreter.set_tensor(d["index"], np.asarray(inputs[d["name"]], d["dtype"]))

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        self._feed(inputs)
        self.interpreter.invoke()
        return [np.array(self.interpreter.get_tensor(d["index"])) for d in self._out]

    def bind(self, inputs: Mapping[str, np.ndarray] | None = None) -> None:
        super().bind(inputs)
        self._feed(self._bound)

    def _invoke(self) -> None:
        self.interpreter.invoke()


class LiteRtRecording(LiteRtPrepared, Recording):
    """A .tflite model prepared for instrumented runs (:meth:`LiteRtBackend.prepare_recording`).

    ``interpreter`` is the measurement interpreter (the backend's resolver) and serves
    :meth:`run` and :meth:`time_once`. ``recorder`` keeps every tensor; it has the same
    thread count, and the backend's :attr:`~LiteRtBackend.recording_resolver`. The
    Python API cannot time ops, so :meth:`op_times_ms` is always ``{}``.
    """

    def __init__(self, interpreter: Any, recorder: Any, *, label: str = "LiteRT") -> None:
        super().__init__(interpreter)
        self.recorder = recorder
        self._label = label
        ops = recorder._get_ops_details()  # the only public-ish view of the op list
        self.tensor_indices = tuple(dict.fromkeys(
            [int(d["index"]) for d in recorder.get_input_details()]
            + [int(t) for o in ops for t in o["outputs"]]))

    def record(self, inputs: Mapping[str, np.ndarray],
               tensors: Iterable[int] | None = None) -> dict[int, np.ndarray]:
        """Run the recorder once; tensors by index (default :attr:`tensor_indices`: the
        inputs and every op output), as stored (NHWC, quantized dtypes kept).

        Tensors the runtime has freed are left out. Raises BackendError if the run fails.
        """
        for d in self._in:
            self.recorder.set_tensor(d["index"], np.asarray(inputs[d["name"]], d["dtype"]))
        try:
            self.recorder.invoke()
        except RuntimeError as err:
            from nnmeter.errors import BackendError

            raise BackendError(f"{self._label} failed to run: {err}") from err
        out = {}
        for i in self.tensor_indices if tensors is None else tensors:
            try:
                out[int(i)] = np.array(self.recorder.get_tensor(int(i)))
            except ValueError:
                continue  # freed by the runtime
        return out


class LiteRtBackend(Backend):
    """``ai_edge_litert.interpreter.Interpreter`` with its default op resolver
    (XNNPACK delegate applied), ``num_threads`` = threads."""

    base_id = "litert-cpu"
    runtime = "litert"
    model_format = "tflite"
    runtime_module = "ai_edge_litert.interpreter"
    resolver = "AUTO"
    #: resolver of the recording interpreter: the same kernels, minus the delegate
    recording_resolver = "BUILTIN_WITHOUT_DEFAULT_DELEGATES"

    def runtime_version(self) -> str:
        import ai_edge_litert

        return str(getattr(ai_edge_litert, "__version__", "unknown"))

    def settings(self) -> dict[str, Any]:
        return {"threads": self.threads, "op_resolver": self.resolver,
                "delegate": "xnnpack" if self.resolver == "AUTO" else "none"}

    def _interpreter(self, path: Path, *, recording: bool = False) -> Any:
        """An interpreter with tensors allocated: ``num_threads`` = threads and
        :attr:`resolver`; ``recording=True`` keeps every tensor and uses
        :attr:`recording_resolver` instead."""
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        resolver = self.recording_resolver if recording else self.resolver
        extra = {"experimental_preserve_all_tensors": True} if recording else {}
        with warnings.catch_warnings():
            if recording:  # preserving all tensors warns that it is for debugging: it is
                warnings.simplefilter("ignore")
            it = Interpreter(model_path=str(path), num_threads=self.threads,
                             experimental_op_resolver_type=getattr(OpResolverType, resolver),
                             **extra)
        it.allocate_tensors()
        return it

    def _prepare(self, path: Path) -> Prepared:
        return LiteRtPrepared(self._interpreter(path))

    def _prepare_recording(self, path: Path) -> LiteRtRecording:
        return LiteRtRecording(self._interpreter(path), self._interpreter(path, recording=True),
                               label=f"{self.id} ({path.name})")

    def profile(self, model_file: Any, *, runs: int = 10) -> list[ExecutedNode]:
        """Executed partitions without times (the Python API cannot time ops).

        ``covers`` names the model's ops as ``"<OP>:<output tensor name>"``.
        """
        path = self.check_model_file(model_file)
        try:
            it = self._interpreter(path)
        except Exception as err:
            from nnmeter.errors import BackendError

            raise BackendError(f"{self.id} could not compile {path.name}: {err}") from err
        tensors = {t["index"]: t["name"] for t in it.get_tensor_details()}
        ops = it._get_ops_details()  # the only public-ish view of the op list
        model_ops = [o for o in ops if o["op_name"] != "DELEGATE"]
        delegates = [o for o in ops if o["op_name"] == "DELEGATE"]

        def label(o: Mapping[str, Any]) -> str:
            outs = [tensors.get(int(i), str(i)) for i in o["outputs"]]
            return f"{o['op_name']}:{outs[0] if outs else o['index']}"

        producer = {int(t): o for o in model_ops for t in o["outputs"]}
        covered: set[int] = set()
        out: list[ExecutedNode] = []
        for d in delegates:
            stop = {int(t) for t in d["inputs"]}
            region, stack = [], [int(t) for t in d["outputs"]]
            seen: set[int] = set()
            while stack:
                t = stack.pop()
                o = producer.get(t)
                if t in stop or o is None or o["index"] in seen:
                    continue
                seen.add(o["index"])
                region.append(o)
                stack.extend(int(x) for x in o["inputs"] if int(x) >= 0)
            region.sort(key=lambda o: o["index"])
            covered |= seen
            out.append(ExecutedNode(name=f"DELEGATE_{d['index']}", op_type="DELEGATE",
                                    covers=tuple(label(o) for o in region), time_ms=None,
                                    detail="xnnpack; no per-op times in the Python API"))
        for o in model_ops:
            if o["index"] not in covered:
                out.append(ExecutedNode(name=label(o), op_type=o["op_name"], covers=(label(o),),
                                        time_ms=None,
                                        detail="builtin kernel; no per-op times in the Python API"))
        return out


class LiteRtRefBackend(LiteRtBackend):
    """LiteRT with reference kernels only (``OpResolverType.BUILTIN_REF``), as ML-EXray
    uses for replays; no delegate."""

    base_id = "litert-cpu-ref"
    resolver = "BUILTIN_REF"
    recording_resolver = "BUILTIN_REF"
