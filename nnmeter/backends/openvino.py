"""OpenVINO's CPU plugin (``openvino-cpu``): latency hint, one stream, N threads.

Telemetry: the OpenVINO runtime (``openvino.Core``) sends nothing; only the model
conversion tool ``ovc`` (``openvino.tools.ovc``) uses ``openvino_telemetry``. We read
ONNX files with ``Core.read_model`` and never import ``ovc``. The worker also sets
``OPENVINO_TELEMETRY_OPT_OUT=1`` in case a future version honours it.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.backends._covers import OnnxIndex, assign_covers
from nnmeter.backends.base import Backend, ExecutedNode, InputSpec, Prepared

__all__ = ["OpenVinoCpuBackend", "OpenVinoPrepared"]

logger = logging.getLogger(__name__)

#: the friendly name OpenVINO gives an op its transformations built from several ONNX
#: nodes (``HSwish_7919`` for ``x * clip(x + 3, 0, 6) / 6``): it names no original node
_REBUILT = re.compile(r"^[A-Z][A-Za-z]*_\d+$")

#: runtime-model layer types that compute nothing of the original model
_NON_COMPUTE = {"Input", "Output", "Parameter", "Result", "Const", "Constant", "Reorder"}


def _isa_cap_without_bf16() -> bool:
    """Whether ``ONEDNN_MAX_CPU_ISA`` limits oneDNN to an ISA without bf16 (SSE4.1, AVX,
    AVX2 and their VNNI forms; the AVX-512 core and AMX caps have it)."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return bool(cap) and not (cap.startswith("AVX512_CORE_BF16") or cap.startswith("AVX10")
                              or cap.startswith("AVX512_CORE_AMX") or cap in ("ALL", "DEFAULT")
                              or "FP16" in cap)


def _core() -> Any:
    os.environ.setdefault("OPENVINO_TELEMETRY_OPT_OUT", "1")
    import openvino as ov

    return ov.Core()


class OpenVinoPrepared(Prepared):
    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        specs = []
        for i, port in enumerate(compiled.inputs):
            ps = port.get_partial_shape()
            if ps.is_dynamic:
                from nnmeter.errors import DynamicShapeError

                raise DynamicShapeError(f"OpenVINO input {i} has dynamic shape {ps}; export "
                                        "the model with a fixed input shape")
            names = port.get_names()
            name = port.get_any_name() if names else f"input_{i}"
            specs.append(InputSpec(name, tuple(int(d) for d in ps.to_shape()),
                                   np.dtype(port.get_element_type().to_dtype()).name))
        self.inputs = tuple(specs)

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        feeds = {i: np.asarray(inputs[s.name]) for i, s in enumerate(self.inputs)}
        res = self.request.infer(feeds)
        return [np.array(res[o]) for o in self.compiled.outputs]

    def bind(self, inputs: Mapping[str, np.ndarray] | None = None) -> None:
        super().bind(inputs)
        for i, s in enumerate(self.inputs):
            self.request.set_input_tensor(i, _ov_tensor(self._bound[s.name]))

    def _invoke(self) -> None:
        self.request.infer()


def _ov_tensor(a: np.ndarray) -> Any:
    import openvino as ov

    return ov.Tensor(np.ascontiguousarray(a))


class OpenVinoCpuBackend(Backend):
    """OpenVINO CPU plugin, ``PERFORMANCE_HINT=LATENCY``, ``NUM_STREAMS=1``,
    ``INFERENCE_NUM_THREADS`` = threads. Inference precision is left at the plugin's
    default (bf16 on CPUs with AVX512-BF16/AMX, as users get); the resolved value is
    recorded in the settings."""

    base_id = "openvino-cpu"
    runtime = "openvino"
    model_format = "onnx"
    runtime_module = "openvino"

    def runtime_version(self) -> str:
        import openvino as ov

        return ov.get_version()

    def _config(self, *, perf_count: bool = False) -> dict[str, str]:
        cfg = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
               "INFERENCE_NUM_THREADS": str(self.threads)}
        if _isa_cap_without_bf16():
            # the plugin still picks bf16 from the CPU's flags, but oneDNN, limited to an
            # ISA without bf16, then cannot build a convolution or inner product: run f32,
            # as a CPU of that ISA does by default
            cfg["INFERENCE_PRECISION_HINT"] = "f32"
        if perf_count:
            cfg["PERF_COUNT"] = "YES"
        return cfg

    def settings(self) -> dict[str, Any]:
        s: dict[str, Any] = {"threads": self.threads, **self._config()}
        # oneDNN, under OpenVINO's CPU plugin, limits its kernels to this ISA (AVX2 on an
        # AVX-512 CPU runs the AVX2 kernels, in f32): another device, so part of its id
        cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip()
        if cap:
            s["onednn_max_cpu_isa"] = cap.upper()
        try:
            v = _core().get_property("CPU", "INFERENCE_PRECISION_HINT")
            s.setdefault("INFERENCE_PRECISION_HINT",
                         v.to_string() if hasattr(v, "to_string") else str(v))
        except Exception as err:  # the property is informative only
            logger.debug("could not read INFERENCE_PRECISION_HINT: %s", err)
        return s

    def _compile(self, path: Path, *, perf_count: bool = False) -> Any:
        core = _core()
        return core.compile_model(core.read_model(str(path)), "CPU",
                                  self._config(perf_count=perf_count))

    def _prepare(self, path: Path) -> Prepared:
        return OpenVinoPrepared(self._compile(path))

    def profile(self, model_file: Any, *, runs: int = 10) -> list[ExecutedNode]:
        """Runtime-model layers (``originalLayersNames``) with the plugin's perf counters."""
        path = self.check_model_file(model_file)
        try:
            compiled = self._compile(path, perf_count=True)
            prepared = OpenVinoPrepared(compiled)
        except Exception as err:
            from nnmeter.errors import BackendError

            raise BackendError(f"{self.id} could not compile {path.name}: {err}") from err
        prepared.bind()
        prepared._invoke()  # warm-up, not counted
        times: dict[str, list[float]] = defaultdict(list)
        exec_types: dict[str, str] = {}
        for _ in range(max(1, runs)):
            prepared._invoke()
            for p in prepared.request.profiling_info:
                if str(p.status).endswith("EXECUTED") and "NOT_RUN" not in str(p.status):
                    times[p.node_name].append(p.real_time.total_seconds() * 1000.0)
                    exec_types[p.node_name] = p.exec_type

        index = OnnxIndex(path)
        ops = [op for op in compiled.get_runtime_model().get_ordered_ops()]
        rows, anchors = [], []
        tails: dict[int, set[str]] = {}  # layers that fused an op OpenVINO rebuilt
        for op in ops:
            rt = op.get_rt_info()
            layer_type = str(rt["layerType"].astype(str)) if "layerType" in rt else op.get_type_name()
            originals = (str(rt["originalLayersNames"].astype(str))
                         if "originalLayersNames" in rt else "")
            name = op.get_friendly_name()
            if layer_type in _NON_COMPUTE:
                if layer_type == "Reorder":
                    rows.append((name, layer_type))
                    anchors.append(set())
                continue
            a: set[str] = set()
            rebuilt = False
            for item in filter(None, originals.split(",")):
                found = index.anchors_of_name(item.strip())
                a |= found
                # an op OpenVINO rebuilt from several ONNX nodes keeps no original name
                rebuilt |= not found and bool(_REBUILT.match(item.strip()))
            for out in op.outputs():
                for t in out.get_names():
                    r = index.resolve_tensor(t)
                    if r:
                        a.add(r)
            if not a:
                a = index.anchors_of_name(name)
            rows.append((name, layer_type))
            anchors.append(a)
            if rebuilt and a:
                tails[len(anchors) - 1] = a
        claimed = set().union(*anchors) if anchors else set()
        for i, a in tails.items():
            anchors[i] = a | index.elementwise_tail(a, claimed - a)
        covers = assign_covers(index, anchors)
        out = []
        for (name, layer_type), cov in zip(rows, covers):
            t = times.get(name)
            if not cov and not t:
                continue  # constant subgraphs, folded at compile time: never run per inference
            out.append(ExecutedNode(name=name, op_type=layer_type, covers=cov,
                                    time_ms=float(np.median(t)) if t else None,
                                    detail=exec_types.get(name, "")))
        prepared.close()
        return out


class OpenVinoCpuF32Backend(OpenVinoCpuBackend):
    """OpenVINO CPU plugin held to f32 (``INFERENCE_PRECISION_HINT=f32``): on a CPU with
    AVX512-BF16 or AMX the plugin's default runs bf16, which a user who needs f32
    accuracy turns off. Another device setting, so another backend id; its fusion rules
    are ``openvino-cpu``'s (the same plugin fuses the same patterns)."""

    base_id = "openvino-cpu-f32"
    rules_base_id = "openvino-cpu"

    def _config(self, *, perf_count: bool = False) -> dict[str, str]:
        return {**super()._config(perf_count=perf_count), "INFERENCE_PRECISION_HINT": "f32"}
