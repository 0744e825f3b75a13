"""ONNX Runtime on the CPU (``ort-cpu``): graph optimisation ALL, as users run it."""

from __future__ import annotations

import json
import logging
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.backends._covers import OnnxIndex, assign_covers
from nnmeter.backends.base import Backend, ExecutedNode, InputSpec, Prepared

__all__ = ["OrtCpuBackend", "OrtPrepared"]

logger = logging.getLogger(__name__)

_ORT_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}
#: nodes ORT inserts to change memory layout or device; they cover no original node
_LAYOUT_OPS = {"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost"}


def _static_shape(shape: list[Any], name: str) -> tuple[int, ...]:
    dims = []
    for d in shape:
        if not isinstance(d, int) or d <= 0:
            from nnmeter.errors import DynamicShapeError

            raise DynamicShapeError(
                f"input {name!r} has dynamic shape {shape}; export the model with a fixed "
                "input shape (e.g. nnmeter ir ... --input-shape 1,3,224,224)")
        dims.append(d)
    return tuple(dims)



def interquartile_mean(values: list[float]) -> float:
    """Mean of the middle half of ``values`` (all of them when fewer than 4).

    ONNX Runtime's profiler reports whole microseconds, so a median of per-run node times
    is a whole microsecond too; on sub-10 µs nodes that rounding is 5-50 % of the time.
    The mean of the middle half keeps the median's indifference to a few disturbed runs
    and the resolution of an average.

    >>> interquartile_mean([1, 1, 2, 2, 2, 9, 1, 2])  # the middle half: 1, 2, 2, 2
    1.75
    >>> interquartile_mean([3.0])
    3.0
    """
    v = sorted(values)
    q = len(v) // 4
    mid = v[q:len(v) - q] if len(v) >= 4 else v
    return sum(mid) / len(mid)

class OrtPrepared(Prepared):
    def __init__(self, session: Any) -> None:
        self.session = session
        self.inputs = tuple(
            InputSpec(i.name, _static_shape(i.shape, i.name), _ORT_DTYPES.get(i.type, "float32"))
            for i in session.get_inputs())
        self._out_names = [o.name for o in session.get_outputs()]

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(self._out_names, dict(inputs)))

    def _invoke(self) -> None:
        self.session.run(self._out_names, self._bound)


class OrtCpuBackend(Backend):
    """onnxruntime's CPU execution provider, ``intra_op`` = threads, ``inter_op`` = 1,
    sequential execution, graph optimisation level ALL (the default users get)."""

    base_id = "ort-cpu"
    runtime = "onnxruntime"
    model_format = "onnx"
    runtime_module = "onnxruntime"

    def runtime_version(self) -> str:
        import onnxruntime

        return onnxruntime.__version__

    def settings(self) -> dict[str, Any]:
        return {"threads": self.threads, "inter_op_threads": 1, "execution_mode": "sequential",
                "graph_optimization_level": "ALL", "provider": "CPUExecutionProvider"}

    def _session_options(self) -> Any:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        if self.threads == 1:
            # a single worker thread must not spin waiting for work that never comes
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return so

    def _prepare(self, path: Path) -> Prepared:
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), self._session_options(),
                                    providers=["CPUExecutionProvider"])
        return OrtPrepared(sess)

    def profile(self, model_file: Any, *, runs: int = 10) -> list[ExecutedNode]:
        """Executed nodes from ORT's optimised graph, timed by ORT's own profiler."""
        import onnx
        import onnxruntime as ort

        path = self.check_model_file(model_file)
        with tempfile.TemporaryDirectory(prefix="nnmeter-ort-prof-") as tmp:
            so = self._session_options()
            opt_path = Path(tmp) / "optimized.onnx"
            so.optimized_model_filepath = str(opt_path)
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / "profile")
            try:
                sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            except Exception as err:
                from nnmeter.errors import BackendError

                raise BackendError(f"{self.id} could not compile {path.name}: {err}") from err
            prepared = OrtPrepared(sess)
            feeds = prepared.random_inputs()
            for _ in range(max(1, runs) + 1):
                prepared.run(feeds)
            prof_file = sess.end_profiling()
            events = json.loads(Path(prof_file).read_text())
            optimized = onnx.load(str(opt_path), load_external_data=False)

        # per node: one duration per run; drop the first (warm-up) run
        durs: dict[str, list[float]] = defaultdict(list)
        for e in events:
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                durs[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1000.0)

        index = OnnxIndex(path)
        nodes = list(optimized.graph.node)
        consumers: dict[str, list[Any]] = defaultdict(list)
        for n in nodes:
            for t in n.input:
                consumers[t].append(n)

        anchors: list[set[str]] = []
        for n in nodes:
            if n.op_type in _LAYOUT_OPS:
                anchors.append(set())
                continue
            a: set[str] = set()
            for o in n.output:
                t = index.resolve_tensor(o)
                if t:
                    a.add(t)
                    continue
                # an output in a private layout reaches the original tensor through reorders
                for c in consumers.get(o, []):
                    if c.op_type in _LAYOUT_OPS:
                        a.update(x for x in (index.resolve_tensor(y) for y in c.output) if x)
            if not a:
                a = index.anchors_of_name(n.name)
            anchors.append(a)
        covers = assign_covers(index, anchors)

        out = []
        for n, cov in zip(nodes, covers):
            times = durs.get(n.name, [])
            times = times[1:] if len(times) > 1 else times
            out.append(ExecutedNode(
                name=n.name, op_type=n.op_type if not n.domain else f"{n.domain}.{n.op_type}",
                covers=cov, time_ms=interquartile_mean(times) if times else None))
        return out
