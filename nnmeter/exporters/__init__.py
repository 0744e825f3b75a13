"""Exporters: a :class:`~nnmeter.ir.graph.ModelGraph` → a runnable model file with random
weights, for fusion test cases, kernel profiling and the zoo.

Examples
--------
>>> import os, tempfile
>>> from nnmeter.ir import GraphBuilder
>>> b = GraphBuilder("t", (1, 3, 8, 8))
>>> g = b.build([b.relu(b.x)])
>>> export(g, os.path.join(tempfile.mkdtemp(), "t.onnx"), "onnx").name
't.onnx'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nnmeter.errors import ExportError

__all__ = ["export", "FORMATS"]

#: Formats :func:`export` writes.
FORMATS = ("onnx", "tflite")


def export(graph: Any, path: "str | os.PathLike", fmt: str, **options: Any) -> Path:
    """Export ``graph`` to ``path`` in format ``fmt`` ("onnx" or "tflite").

    ``options`` go to the format's exporter (``seed``, ``opset`` for ONNX; ``seed``,
    ``quantize`` for TFLite).

    Raises
    ------
    ExportError
        If ``fmt`` is not one of :data:`FORMATS`.
    """
    if fmt == "onnx":
        from nnmeter.exporters.onnx import export_onnx

        return export_onnx(graph, path, **options)
    if fmt == "tflite":
        from nnmeter.exporters.tflite import export_tflite

        return export_tflite(graph, path, **options)
    raise ExportError(f"unknown export format {fmt!r}; choose one of {list(FORMATS)}")
