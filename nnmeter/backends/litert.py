"""LiteRT (TFLite) interpreter on the CPU: ``litert-cpu`` (default XNNPACK delegate)
and ``litert-cpu-ref`` (reference kernels, ``OpResolverType.BUILTIN_REF``).

The Python interpreter has no per-op profiler, so :meth:`LiteRtBackend.profile`
reports the executed graph (delegate partitions and the ops left to built-in
kernels) without times. Per-op times need TFLite's ``benchmark_model`` binary
(``--enable_op_profiling``), which a remote backend can add later.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.backends.base import Backend, ExecutedNode, InputSpec, Prepared

__all__ = ["LiteRtBackend", "LiteRtRefBackend", "LiteRtPrepared"]

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


class LiteRtBackend(Backend):
    """``ai_edge_litert.interpreter.Interpreter`` with its default op resolver
    (XNNPACK delegate applied), ``num_threads`` = threads."""

    base_id = "litert-cpu"
    runtime = "litert"
    model_format = "tflite"
    runtime_module = "ai_edge_litert.interpreter"
    resolver = "AUTO"

    def runtime_version(self) -> str:
        import ai_edge_litert

        return str(getattr(ai_edge_litert, "__version__", "unknown"))

    def settings(self) -> dict[str, Any]:
        return {"threads": self.threads, "op_resolver": self.resolver,
                "delegate": "xnnpack" if self.resolver == "AUTO" else "none"}

    def _interpreter(self, path: Path) -> Any:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        it = Interpreter(model_path=str(path), num_threads=self.threads,
                         experimental_op_resolver_type=getattr(OpResolverType, self.resolver))
        it.allocate_tensors()
        return it

    def _prepare(self, path: Path) -> Prepared:
        return LiteRtPrepared(self._interpreter(path))

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
