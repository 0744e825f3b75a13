"""Frontends: model files → :class:`~nnmeter.ir.graph.ModelGraph`.

:func:`load_model` picks the frontend from the file; each frontend module imports its
runtime lazily, so importing this package stays cheap.

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> import os, tempfile
>>> g = GraphBuilder("t", (1, 3, 8, 8)).build()
>>> path = os.path.join(tempfile.mkdtemp(), "t.json")
>>> _ = g.to_json(path)
>>> load_model(path).structurally_equal(g)
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nnmeter.errors import ModelLoadError

__all__ = ["load_model", "SUPPORTED_FORMATS"]

#: What :func:`load_model` accepts, for error messages and ``--help``.
SUPPORTED_FORMATS = (
    ".onnx", ".tflite", ".keras", ".h5", "SavedModel directory", ".json (nnmeter IR)",
    "onnx.ModelProto", "torch.nn.Module", "keras.Model",
)


def load_model(source: "str | os.PathLike | Any", *,
               input_shapes: Mapping[str, Sequence[int]] | None = None,
               canonical: bool = True) -> Any:
    """Load any supported model into a validated ModelGraph.

    A model file (ONNX, TFLite, Keras) is rewritten as the runtimes see it once they
    load it (:func:`nnmeter.ir.canonical.canonicalize`: Identity and Dropout removed,
    constant scale/shift folded into the convolution before it, zero pads merged,
    cancelling transposes removed; what was done is in ``graph.meta["canonical"]``)
    unless ``canonical`` is False. IR JSON and ModelGraph objects are taken as they are.

    Parameters
    ----------
    source : path, onnx.ModelProto, torch.nn.Module, keras.Model or ModelGraph
        ``.onnx``, ``.tflite``, ``.keras`` / ``.h5``, a SavedModel directory, a ``.json``
        IR file, an in-memory ``onnx.ModelProto``, a ``torch.nn.Module`` (exported with
        ``torch.onnx``; ``input_shapes`` required), a ``keras.Model`` object; a
        ModelGraph is returned as is.
    input_shapes : dict, optional
        ``{input name: shape}`` in the canonical NCHW layout, for models with dynamic
        dimensions (key ``""`` = the first input).

    Raises
    ------
    ModelLoadError
        If the file does not exist or its format is not supported (the message lists
        the supported formats); the frontends raise their own errors too.
    """
    from nnmeter.ir.graph import ModelGraph

    if isinstance(source, ModelGraph) or (isinstance(source, (str, os.PathLike))
                                          and Path(source).suffix.lower() == ".json"):
        return _load(source, input_shapes)
    graph = _load(source, input_shapes)
    if canonical and isinstance(graph, ModelGraph):
        from nnmeter.ir.canonical import canonicalize

        canonicalize(graph)
    return graph


def _load(source: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> Any:
    """load_model without the canonical passes."""
    from nnmeter.ir.graph import ModelGraph

    if isinstance(source, ModelGraph):
        return source
    if type(source).__name__ == "ModelProto":
        from nnmeter.frontends.onnx import load_onnx

        return load_onnx(source, input_shapes)
    if _is_instance(source, "torch", "nn.Module"):
        return _from_torch(source, input_shapes)
    if _is_instance(source, "keras", "Model"):
        from nnmeter.frontends.keras import load_keras_model

        return load_keras_model(source, input_shapes=input_shapes)
    if not isinstance(source, (str, os.PathLike)):
        raise ModelLoadError(
            f"cannot load a model from a {type(source).__name__}; pass a path, an "
            f"onnx.ModelProto, a torch.nn.Module or a keras.Model (supported: "
            f"{', '.join(SUPPORTED_FORMATS)})"
        )
    path = Path(source)
    if not path.exists():
        raise ModelLoadError(f"model file {path} does not exist")
    suffix = path.suffix.lower()
    if path.is_dir():
        if (path / "saved_model.pb").exists() or (path / "saved_model.pbtxt").exists():
            from nnmeter.frontends.keras import load_keras

            return _with_shapes(load_keras, path, input_shapes)
        raise ModelLoadError(
            f"{path} is a directory without saved_model.pb; supported formats: "
            f"{', '.join(SUPPORTED_FORMATS)}"
        )
    if suffix == ".onnx":
        from nnmeter.frontends.onnx import load_onnx

        return load_onnx(path, input_shapes)
    if suffix == ".json":
        graph = ModelGraph.from_json(str(path))
        return _reshaped(graph, input_shapes, path) if input_shapes else graph
    if suffix == ".tflite":
        from nnmeter.frontends.tflite import load_tflite

        return _with_shapes(load_tflite, path, input_shapes)
    if suffix in (".keras", ".h5"):
        from nnmeter.frontends.keras import load_keras

        return _with_shapes(load_keras, path, input_shapes)
    raise ModelLoadError(
        f"{path} has suffix {suffix or '(none)'!r}, which nnmeter does not read; supported "
        f"formats: {', '.join(SUPPORTED_FORMATS)}"
    )


def _reshaped(graph: Any, input_shapes: Mapping[str, Sequence[int]], path: Path) -> Any:
    """``graph`` (read from IR JSON at ``path``) with new input shapes (``''`` names the
    first input) and every other shape inferred again from them."""
    from nnmeter.errors import InputNameError, ShapeInferenceError

    inputs = graph.input_names
    for name, shape in input_shapes.items():
        target = name or (inputs[0] if inputs else "")
        if target not in inputs:
            raise InputNameError(f"{path}: --input-shape names {name!r}, which is not an "
                                 f"input of the graph (its inputs: {', '.join(inputs)})")
        old = graph.node(target).output_shapes
        if old and len(old[0]) != len(shape):
            raise ModelLoadError(f"{path}: input {target!r} has rank {len(old[0])} "
                                 f"({list(old[0])}), --input-shape gives {list(shape)}")
        graph.replace(target, output_shapes=(tuple(int(d) for d in shape),))
    for node in graph.nodes():
        if node.op != "input":
            graph.replace(node.name, input_shapes=(), output_shapes=())
    try:
        return graph.infer_shapes()
    except ShapeInferenceError as err:
        raise ModelLoadError(f"{path}: the graph does not take input shapes "
                             f"{dict(input_shapes)}: {err}") from err


def _is_instance(obj: Any, package: str, attr: str) -> bool:
    """``isinstance(obj, package.attr)`` without importing ``package`` (a model object of
    a framework means the framework is already imported)."""
    import sys

    mod = sys.modules.get(package)
    if mod is None:
        return False
    cls: Any = mod
    for part in attr.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            return False
    return isinstance(cls, type) and isinstance(obj, cls)


def _from_torch(module: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> Any:
    """A torch.nn.Module through torch.onnx, with zero tensors of ``input_shapes`` (in
    order; ``""`` or a name for each input) as the example inputs."""
    import torch

    from nnmeter.frontends.torch import load_torch

    if not input_shapes:
        raise ModelLoadError(
            f"a torch.nn.Module ({type(module).__name__}) has no shapes of its own; pass "
            f"input_shape=(1, 3, 224, 224) (or input_shapes={{name: shape}})")
    names = [n for n in input_shapes if n] or None
    if names is not None and len(names) != len(input_shapes):
        raise ModelLoadError("name every input of a torch module in input_shapes, or give "
                             "one unnamed shape")
    inputs = tuple(torch.zeros(tuple(int(d) for d in shape)) for shape in input_shapes.values())
    return load_torch(module, inputs[0] if len(inputs) == 1 else inputs, input_names=names)


def _with_shapes(loader: Any, path: Path, input_shapes: Any) -> Any:
    """Call a frontend, passing ``input_shapes`` only when it takes them."""
    import inspect

    if input_shapes is not None and "input_shapes" in inspect.signature(loader).parameters:
        return loader(path, input_shapes=input_shapes)
    return loader(path)
