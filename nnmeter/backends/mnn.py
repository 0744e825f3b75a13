"""Alibaba MNN on the CPU (``mnn-cpu``): ONNX converted in-process to ``.mnn``.

Conversion calls the converter's C++ entry point (``_tools.mnnconvert``) directly.
We never import ``MNN.tools`` nor run the ``mnnconvert``/``mnnquant`` console
scripts: their Python wrappers pip-install a logging SDK and send usage logs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnmeter.backends._covers import OnnxIndex, assign_covers
from nnmeter.backends.base import Backend, ExecutedNode, InputSpec, Prepared
from nnmeter.errors import BackendError

__all__ = ["MnnCpuBackend", "MnnPrepared", "convert_onnx_to_mnn", "mnn_covers"]

logger = logging.getLogger(__name__)

_RASTER = re.compile(r"^(.*)_raster_\d+$")
#: one group of a grouped convolution MNN runs as separate convolutions
_GROUP = re.compile(r"^(.*)__group__\d+$")
#: the name suffix of the convolution MNN's converter runs a Gemm or MatMul as
_CONVERTED = "__matmul_converted"
#: the name suffix of the layout conversion MNN puts in front of an op that wants NCHW
_BEFORE = "__before_tr"

#: ONNX ops that only move data: inside MNN they are rasters (region copies)
_MOVES = frozenset({"Concat", "Reshape", "Transpose", "Slice", "Split", "Flatten",
                    "Squeeze", "Unsqueeze", "Identity", "Constant", "Expand", "Tile",
                    "DepthToSpace", "SpaceToDepth"})


def mnn_covers(order: list[tuple[str, str]], graph: Mapping[str, Any],
               index: OnnxIndex) -> list[tuple[str, ...]]:
    """The original ONNX nodes each op MNN executed computes.

    ``order`` is the executed ops as MNN's callbacks name them (name, type), ``graph``
    the converted model as JSON (``oplists``, ``tensorName``), ``index`` the ONNX file.
    MNN names what it made at run time after an op of the converted model:

    - ``<op>__group__<k>``: one group of a grouped convolution run as its own
      convolution; every group (and the raster that cuts its input) computes ``<op>``.
    - ``<op>_raster_<k>`` in front of an op that runs under its own name: a region copy
      that gathers ``<op>``'s input. It computes the data-movement nodes (concat,
      reshape, transpose, slice…) between ``<op>`` and the ops before it, which then
      are not ``<op>``'s; with none there it only converts a layout and computes nothing.
    - ``<op>_raster_<k>`` for an op that does not run under its own name (a pooling
      over a 3-D layout runs as ``<op>_raster_0``, the raster, and ``<op>_raster_1``,
      the pooling): both compute ``<op>``.

    - ``<op>__before_tr_raster_<k>``: the layout conversion in front of ``<op>``; when
      ``<op>`` does not run under its own name (a reshape of an NC4HW4 tensor), the
      conversion is what computes it.
    - ``<y>__matmul_converted``: a Gemm or MatMul run as a convolution, between a
      reshape and a layout conversion + reshape of the converter's own; it computes the
      nodes back from the tensor that last reshape writes (an activation the convolution
      took in included).

    An original op MNN runs in several passes is covered by each of them (the
    comparison with the partition counts such a group once). A move a gathering raster
    made is that raster's only.
    """
    tensor_names = graph.get("tensorName", [])
    mnn_ops = {op.get("name"): op for op in graph.get("oplists", [])}
    executed_plain = {n for n, t in order if t != "Raster" and not _GROUP.match(n)}

    readers: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for op in graph.get("oplists", []):
        for i in op.get("inputIndexes") or []:
            readers[i].append(op)

    def resolved(indexes: Any) -> set[str]:
        a = set()
        for i in indexes or []:
            if 0 <= i < len(tensor_names):
                r = index.resolve_tensor(tensor_names[i])
                if r:
                    a.add(r)
        return a

    def op_anchors(op: Mapping[str, Any]) -> set[str]:
        a = resolved(op.get("outputIndexes"))
        if str(op.get("name", "")).endswith(_CONVERTED):
            # a Gemm/MatMul the converter made a convolution of: its result (with an
            # activation it took in) has the original tensor's name only after the
            # converter's own layout conversion and reshape
            outs = list(op.get("outputIndexes") or [])
            for step in ("ConvertTensor", "Reshape"):
                outs = [o for i in outs for r in readers.get(i, ()) if r.get("type") == step
                        for o in (r.get("outputIndexes") or [])[:1]]
                a = resolved(outs) or a
        return a or index.anchors_of_name(str(op.get("name", "")))

    def plain(op: Mapping[str, Any] | None) -> bool:
        return op is not None and op.get("type") not in ("ConvertTensor", "Input")

    anchors: list[set[str]] = []
    gathers: dict[int, str] = {}  # executed index of a raster → the op it gathers for
    for i, (name, op_type) in enumerate(order):
        op = mnn_ops.get(name)
        m = _RASTER.match(name)
        base = m.group(1) if m else name
        g = _GROUP.match(base)
        if g and plain(mnn_ops.get(g.group(1))):
            anchors.append(op_anchors(mnn_ops[g.group(1)]))
            continue
        host = base[:-len(_BEFORE)] if base.endswith(_BEFORE) else None
        if (host and op_type == "Raster" and host not in executed_plain
                and plain(mnn_ops.get(host))):
            base = host  # the layout conversion in front of a reshape does the reshape
        base_op = mnn_ops.get(base)
        if op is None and op_type == "Raster":
            if base in executed_plain and plain(base_op):
                gathers[i] = base
                anchors.append(set())
            elif base_op is None or base in executed_plain or not plain(base_op):
                anchors.append(set())  # a layout conversion
            else:
                anchors.append(op_anchors(base_op))
        elif op is None and m and base_op is not None:
            anchors.append(op_anchors(base_op))
        elif not plain(op):
            anchors.append(set())
        else:
            anchors.append(op_anchors(op))
    covers = assign_covers(index, anchors)
    at = {name: i for i, (name, _t) in enumerate(order) if name in executed_plain}
    claimed: set[str] = set()
    for i, base in sorted(gathers.items()):
        j = at[base]
        moved = tuple(n for n in covers[j] if index.op_type.get(n) in _MOVES)
        fresh = tuple(n for n in moved if n not in claimed)
        if fresh and len(moved) < len(covers[j]):
            covers[i] = fresh
            claimed.update(fresh)
    # a move a raster made is that raster's: the ops that read its result (every
    # branch of an Inception block) and later rasters that gather through it again
    # (DenseNet's concat of a concat, copied from the sources) do not compute it
    for k in range(len(covers)):
        if k not in gathers:
            covers[k] = tuple(n for n in covers[k] if n not in claimed)
    return covers


@contextlib.contextmanager
def _captured_fds() -> Iterator[list[str]]:
    """Capture what C code writes to fds 1 and 2; the text lands in the yielded list."""
    sink: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield sink
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace"))


def _mnn_tools() -> Any:
    import _tools  # MNN's converter extension; NOT MNN.tools (which phones home)

    return _tools


def convert_onnx_to_mnn(onnx_file: str | Path, mnn_file: str | Path, *,
                        json_file: str | Path | None = None) -> Path:
    """Convert an ONNX model to MNN in-process; optionally dump the MNN graph as JSON
    (its ops and tensor names, without the weights).

    Raises
    ------
    BackendError
        If the converter fails; the message carries the converter's output.
    """
    tools = _mnn_tools()
    mnn_file = Path(mnn_file)
    with _captured_fds() as log:
        tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", str(onnx_file),
                          "--MNNModel", str(mnn_file), "--bizCode", "nnmeter"])
    if not mnn_file.exists() or mnn_file.stat().st_size == 0:
        msg = " ".join(line.strip() for line in "".join(log).splitlines()
                       if "ERROR" in line or "failed" in line.lower())
        raise BackendError(f"MNN could not convert {Path(onnx_file).name}: "
                           f"{msg or ''.join(log).strip()[-500:]}")
    if json_file is not None:
        # the dump writes every weight as JSON text (VGG-13: 1.4 GB, 89 s); the graph is
        # the same converted with its weights kept apart, whose dump holds none of them
        with tempfile.TemporaryDirectory(prefix="nnmeter-mnn-graph-") as tmp, _captured_fds():
            bare = Path(tmp) / "graph.mnn"
            tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", str(onnx_file),
                              "--MNNModel", str(bare), "--bizCode", "nnmeter",
                              "--saveExternalData"])
            tools.mnnconvert(["mnnconvert", "-f", "MNN", "--modelFile",
                              str(bare if bare.exists() else mnn_file),
                              "--JsonFile", str(json_file)])
    return mnn_file


class MnnPrepared(Prepared):
    def __init__(self, interpreter: Any, session: Any, workdir: str) -> None:
        import MNN

        self._mnn = MNN
        self.interpreter = interpreter
        self.session = session
        self._workdir = workdir
        self._in = interpreter.getSessionInputAll(session)
        self.inputs = tuple(InputSpec(name, tuple(int(d) for d in t.getShape()), "float32")
                            for name, t in self._in.items())

    def _feed(self, inputs: Mapping[str, np.ndarray]) -> None:
        MNN = self._mnn
        for name, t in self._in.items():
            a = np.ascontiguousarray(inputs[name], dtype=np.float32)
            t.copyFrom(MNN.Tensor(a.shape, MNN.Halide_Type_Float, a,
                                  MNN.Tensor_DimensionType_Caffe))

    def _run_session(self) -> None:
        rc = self.interpreter.runSession(self.session)
        if rc:  # MNN's ErrorCode: 0 is NO_ERROR; it raises nothing itself
            raise BackendError(f"MNN's runSession failed (error code {rc})")

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        MNN = self._mnn
        self._feed(inputs)
        self._run_session()
        outs = []
        for t in self.interpreter.getSessionOutputAll(self.session).values():
            host = MNN.Tensor(t.getShape(), MNN.Halide_Type_Float,
                              np.zeros(t.getShape(), np.float32), MNN.Tensor_DimensionType_Caffe)
            t.copyToHostTensor(host)
            outs.append(np.array(host.getNumpyData()))
        return outs

    def bind(self, inputs: Mapping[str, np.ndarray] | None = None) -> None:
        super().bind(inputs)
        self._feed(self._bound)

    def _invoke(self) -> None:
        self._run_session()

    def close(self) -> None:
        shutil.rmtree(self._workdir, ignore_errors=True)


class MnnCpuBackend(Backend):
    """MNN's CPU backend through the session API, ``numThread`` = threads,
    precision ``high`` (fp32)."""

    base_id = "mnn-cpu"
    runtime = "mnn"
    model_format = "onnx"
    runtime_module = "MNN"

    def available(self) -> tuple[bool, str]:
        with _captured_fds():  # MNN prints CPU features on import
            return super().available()

    def runtime_version(self) -> str:
        with _captured_fds():
            import MNN

        return str(MNN.version())

    def settings(self) -> dict[str, Any]:
        return {"threads": self.threads, "precision": "high", "forward": "CPU"}

    def _convert(self, path: Path, *, with_json: bool = False) -> tuple[str, Path, Path | None]:
        workdir = tempfile.mkdtemp(prefix="nnmeter-mnn-")
        mnn_file = Path(workdir) / (path.stem + ".mnn")
        json_file = Path(workdir) / (path.stem + ".json") if with_json else None
        try:
            convert_onnx_to_mnn(path, mnn_file, json_file=json_file)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return workdir, mnn_file, json_file

    def _open(self, path: Path, *, with_json: bool = False) -> tuple[MnnPrepared, Path | None]:
        import MNN

        workdir, mnn_file, json_file = self._convert(path, with_json=with_json)
        try:
            with _captured_fds() as log:
                interp = MNN.Interpreter(str(mnn_file))
                session = interp.createSession({"numThread": self.threads, "backend": "CPU",
                                                "precision": "high"})
            if session is None:
                raise BackendError(f"MNN could not create a session: {''.join(log)[-500:]}")
            prepared = MnnPrepared(interp, session, workdir)
            # a session MNN could not resize (an op whose output shape it cannot infer:
            # the If before a pooling in pytorchcv's AlexNet through torch.onnx) has empty
            # outputs and runs nothing; timed, it took 0.0007 ms on the Xeon and won a
            # backend-selection truth by 40,000x
            empty = [n for n, t in interp.getSessionOutputAll(session).items()
                     if 0 in tuple(t.getShape())]
            if empty:
                raise BackendError(
                    f"MNN could not infer the shapes of {path.name} (output "
                    f"{', '.join(empty)} is empty: the session was not resized), so it "
                    f"would run nothing; {' '.join(''.join(log).split())[-300:]}".rstrip("; "))
            return prepared, json_file
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise

    def _prepare(self, path: Path) -> Prepared:
        return self._open(path)[0]

    def profile(self, model_file: Any, *, runs: int = 10) -> list[ExecutedNode]:
        """Executed ops from MNN's per-op callbacks, timed around each op."""
        path = self.check_model_file(model_file)
        try:
            prepared, json_file = self._open(path, with_json=True)
        except BackendError:
            raise
        except Exception as err:
            raise BackendError(f"{self.id} could not compile {path.name}: {err}") from err
        try:
            graph = json.loads(Path(json_file).read_text()) if json_file else {}
            prepared.bind()
            prepared._invoke()
            order: list[tuple[str, str]] = []
            times: dict[str, list[float]] = defaultdict(list)
            for r in range(max(1, runs)):
                starts: dict[str, int] = {}

                def before(_tensors: Any, info: Any, _s: dict = starts) -> bool:
                    _s[info.getName()] = time.perf_counter_ns()
                    return True

                def after(_tensors: Any, info: Any, _s: dict = starts, _r: int = r) -> bool:
                    name = info.getName()
                    times[name].append((time.perf_counter_ns() - _s.get(name, 0)) / 1e6)
                    if _r == 0:
                        order.append((name, info.getType()))
                    return True

                prepared.interpreter.runSessionWithCallBackInfo(prepared.session, before, after)
        finally:
            prepared.close()

        covers = mnn_covers(order, graph, OnnxIndex(path))
        return [ExecutedNode(name=n, op_type=t, covers=c,
                             time_ms=float(np.median(times[n])) if times.get(n) else None,
                             detail="python callback timing")
                for (n, t), c in zip(order, covers)]
