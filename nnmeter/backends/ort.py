"""ONNX Runtime on the CPU (``ort-cpu``): graph optimisation ALL, as users run it.

Every session this module builds (measurement, profiling, recording) takes its options
from :meth:`OrtCpuBackend._session_options`, so they cannot drift apart.
"""

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
from nnmeter.backends.base import Backend, ExecutedNode, InputSpec, Prepared, Recording

__all__ = ["OrtCpuBackend", "OrtPrepared", "OrtRecording"]

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

#: ONNX activations ORT's NCHWc convolution applies in place (its ``activation``)
_NCHWC_ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish"}


def _nchwc_tail(index: OnnxIndex, node: Any, anchors: set[str]) -> set[str]:
    """Anchors of an NCHWc convolution that ORT named after its own output but that
    also adds a residual (a fourth, ``Sum`` input) and applies an activation: the
    original tensor it really produces is the add's (and the activation's) output.

    Without this the add and activation it computes are attributed to the next node.
    """
    if len(anchors) != 1:
        return anchors
    t = next(iter(anchors))
    if len(node.input) > 3 and node.input[3]:
        nxt = index.follow(t, {"Add", "Sum"})
        if nxt is None:
            return anchors
        t = nxt
    if any(a.name == "activation" for a in node.attribute):
        t = index.follow(t, _NCHWC_ACTIVATIONS) or t
    return {t}


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


class OrtRecording(OrtPrepared, Recording):
    """A model prepared for instrumented runs on ``ort-cpu``
    (:meth:`OrtCpuBackend.prepare_recording`).

    ``session`` is the measurement session (the options of :meth:`OrtCpuBackend.prepare`)
    and serves :meth:`run` and :meth:`time_once`; :meth:`op_times_ms` profiles a session
    with those same options. ``values_session`` runs a copy of the model whose every node
    output is a graph output; its options are the measurement's with graph optimisation
    off (``ORT_DISABLE_ALL``), so that no value is fused away.
    """

    def __init__(self, backend: OrtCpuBackend, path: Path, session: Any,
                 values_session: Any) -> None:
        super().__init__(session)
        self._backend = backend
        self._path = path
        self.values_session = values_session
        self._value_names = [o.name for o in values_session.get_outputs()]

    def record(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; every node output of the model (and every graph output) by name.

        Graph inputs are not included. Raises BackendError if the run fails.
        """
        try:
            values = self.values_session.run(self._value_names, dict(inputs))
        except Exception as err:  # onnxruntime raises its own untyped exceptions
            from nnmeter.errors import BackendError

            raise BackendError(
                f"{self._backend.id} failed to run {self._path.name}: {err}") from err
        return dict(zip(self._value_names, values))

    def op_times_ms(self, inputs: Mapping[str, np.ndarray], *,
                    runs: int = 10) -> dict[str, float]:
        """Time per executed node (ORT's optimised graph) in ms, by node name: the
        interquartile mean of ``runs`` runs after one warm-up run, from ORT's profiler,
        as :meth:`OrtCpuBackend.profile` times nodes."""
        with tempfile.TemporaryDirectory(prefix="nnmeter-ort-prof-") as tmp:
            per_run = self._backend._node_times(self._path, Path(tmp), runs=runs,
                                                feeds=inputs)
        return {name: interquartile_mean(t) for name, t in per_run.items() if t}


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

    def _session_options(self, *, optimize: bool = True) -> Any:
        """The session options of every session this backend builds (see
        :meth:`settings`). ``optimize=False`` turns ORT's graph rewriting off
        (``ORT_DISABLE_ALL``) and changes nothing else: the recording session uses it
        to keep every intermediate value."""
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                       else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
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

    def _prepare_recording(self, path: Path) -> OrtRecording:
        import onnx
        import onnxruntime as ort

        model = onnx.load(str(path))
        have = {o.name for o in model.graph.output}
        for node in model.graph.node:
            for name in node.output:
                if name and name not in have:
                    model.graph.output.append(onnx.ValueInfoProto(name=name))
                    have.add(name)
        # onnx.load reads external weights in, so the serialised copy stands alone
        values = ort.InferenceSession(model.SerializeToString(),
                                      self._session_options(optimize=False),
                                      providers=["CPUExecutionProvider"])
        sess = ort.InferenceSession(str(path), self._session_options(),
                                    providers=["CPUExecutionProvider"])
        return OrtRecording(self, path, sess, values)

    def _node_times(self, path: Path, tmp: Path, *, runs: int,
                    feeds: Mapping[str, np.ndarray] | None = None,
                    optimized_path: Path | None = None) -> dict[str, list[float]]:
        """Per executed node: its kernel time in ms in each of ``runs`` runs after one
        warm-up run, from ORT's profiler on a session with the measurement options.

        ``feeds`` default to the model's random inputs; ``optimized_path`` receives ORT's
        optimised graph. Raises BackendError if ORT cannot compile the model.
        """
        import onnxruntime as ort

        so = self._session_options()
        if optimized_path is not None:
            so.optimized_model_filepath = str(optimized_path)
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp / "profile")
        try:
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as err:
            from nnmeter.errors import BackendError

            raise BackendError(f"{self.id} could not compile {path.name}: {err}") from err
        prepared = OrtPrepared(sess)
        feeds = prepared.random_inputs() if feeds is None else dict(feeds)
        for _ in range(max(1, runs) + 1):
            prepared.run(feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
        durs: dict[str, list[float]] = defaultdict(list)
        for e in events:
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                durs[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1000.0)
        return {name: t[1:] if len(t) > 1 else t for name, t in durs.items()}

    def profile(self, model_file: Any, *, runs: int = 10) -> list[ExecutedNode]:
        """Executed nodes from ORT's optimised graph, timed by ORT's own profiler."""
        import onnx

        path = self.check_model_file(model_file)
        with tempfile.TemporaryDirectory(prefix="nnmeter-ort-prof-") as tmp:
            opt_path = Path(tmp) / "optimized.onnx"
            durs = self._node_times(path, Path(tmp), runs=runs, optimized_path=opt_path)
            optimized = onnx.load(str(opt_path), load_external_data=False)

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
                if n.op_type == "Conv" and n.domain == "com.microsoft.nchwc":
                    a = _nchwc_tail(index, n, a)
            anchors.append(a)
        covers = assign_covers(index, anchors)

        out = []
        for n, cov in zip(nodes, covers):
            times = durs.get(n.name, [])
            out.append(ExecutedNode(
                name=n.name, op_type=n.op_type if not n.domain else f"{n.domain}.{n.op_type}",
                covers=cov, time_ms=interquartile_mean(times) if times else None))
        return out
