"""The Keras / SavedModel frontend: ``.keras``, ``.h5`` or a SavedModel directory -> ModelGraph.

The model goes through TensorFlow's TFLite converter and then
:func:`nnmeter.frontends.tflite.load_tflite`, so the IR is exactly what a LiteRT
deployment of the model runs (batch norm folded, activations fused, as recorded in
node ``meta``). TensorFlow is imported here only, lazily.

Traceability: every node keeps the converter's tensor name in ``source["name"]``
(for example ``"tiny_1/conv_a_1/Relu;tiny_1/conv_a_1/convolution"``). For ``.keras``
and ``.h5`` files the Keras layer the node came from is matched against the model's
layer names and stored in ``source["keras_layer"]``; an activation or softmax that a
layer applies itself (``Dense(..., activation="softmax")``) whose tensor name carries
no layer inherits its producer's layer, with ``meta["keras_layer_inferred"] = True``.

Shapes: Keras models have a dynamic batch dimension; without ``input_shapes`` it is
set to 1 (no warning, since that is the usual meaning). Other dynamic dimensions
(for example ``Input((None, None, 3))``) need ``input_shapes`` in the canonical NCHW
layout, else :class:`~nnmeter.errors.DynamicShapeError`.

Conversion uses TFLite builtin ops; if the converter needs TensorFlow ops it has no
builtin for, it retries with ``SELECT_TF_OPS`` and those ops come back as ``unknown``
nodes (``original_type`` ``"tflite:CUSTOM:Flex<Op>"``), with a warning.

Examples
--------
>>> from nnmeter.frontends.keras import load_keras
>>> g = load_keras("mobilenet.keras")                  # doctest: +SKIP
>>> g.nodes()[1].source["keras_layer"]                 # doctest: +SKIP
'conv1'
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nnmeter.errors import DynamicShapeError, ExportError, ModelLoadError
from nnmeter.frontends.tflite import load_tflite, tflite_inputs
from nnmeter.ir.graph import ModelGraph
from nnmeter.ir.ops import ACTIVATIONS

__all__ = ["load_keras"]

logger = logging.getLogger(__name__)


def _tf() -> Any:
    from nnmeter.exporters.tflite import _tf as import_tf

    try:
        return import_tf()
    except ExportError as err:
        raise ModelLoadError(
            "loading Keras / SavedModel models needs TensorFlow; install it with "
            "`pip install tensorflow-cpu`"
        ) from err


def _convert(make_converter: Any, where: str) -> bytes:
    """Run a TFLite converter quietly; retry with SELECT_TF_OPS if builtins do not suffice."""
    tf = _tf()
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make_converter().convert()
    except Exception as first:  # the converter raises ConverterError and RuntimeError
        logger.warning("%s needs TensorFlow ops without a TFLite builtin; retrying with "
                       "SELECT_TF_OPS (they load as unknown ops): %s", where,
                       str(first).splitlines()[0] if str(first) else first)
        try:
            with contextlib.redirect_stdout(sink), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                conv = make_converter()
                conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                                  tf.lite.OpsSet.SELECT_TF_OPS]
                return conv.convert()
        except Exception as err:
            raise ModelLoadError(
                f"the TFLite converter cannot convert {where}: {str(err).splitlines()[:2]}"
            ) from err


def _layer_names(model: Any) -> list[str]:
    names: list[str] = []

    def walk(layer: Any) -> None:
        names.append(layer.name)
        for sub in getattr(layer, "layers", []) or []:
            walk(sub)

    for layer in model.layers:
        walk(layer)
    return names


def _match_layer(tensor_name: str, layers: set[str]) -> str | None:
    """The Keras layer a converter tensor name comes from (last matching path component)."""
    for segment in tensor_name.split(";"):
        parts = segment.split("/")
        for part in reversed(parts[:-1] or parts):
            if part in layers:
                return part
            base = re.sub(r"_\d+$", "", part)
            if base in layers:
                return base
    return None


def _annotate(graph: ModelGraph, layers: list[str], framework: str) -> None:
    """Set ``source["framework"]`` and, for Keras files, ``source["keras_layer"]``."""
    known = set(layers)
    for node in graph.topological_nodes():
        source = {**node.source, "framework": framework, "via": "tflite"}
        meta = dict(node.meta)
        layer = None
        if not known:
            pass
        elif node.op == "input":
            layer = node.name if node.name in known else None
        else:
            # The node's own name first: a fused tensor name lists several layers.
            layer = (_match_layer(node.name, known)
                     or _match_layer(node.source.get("name", ""), known))
            if layer is None and (node.op in ACTIVATIONS or node.op == "softmax") and node.inputs:
                layer = graph.node(node.inputs[0].node).source.get("keras_layer")
                if layer is not None:
                    meta["keras_layer_inferred"] = True
        if layer is not None:
            source["keras_layer"] = layer
        graph.replace(node.name, source=source, meta=meta)


def _default_shapes(data: bytes, input_shapes: Mapping[str, Sequence[int]] | None,
                    where: str) -> dict[str, tuple[int, ...]] | None:
    """Batch 1 for every input whose only dynamic dimension is the batch."""
    given = dict(input_shapes or {})
    if "" in given:
        return given        # load_tflite resolves "" (the first input) itself
    out: dict[str, tuple[int, ...]] = {}
    for name, signature, _ in tflite_inputs(data):
        if name in given:
            out[name] = tuple(given[name])
            continue
        if any(d < 0 for d in signature[1:]):
            raise DynamicShapeError(
                f"{where}: input {name!r} has dynamic dimensions {signature} (NCHW, -1 = "
                f"dynamic); pass input_shapes={{{name!r}: (1, ...)}} with every dimension"
            )
        if signature and signature[0] < 0:
            out[name] = (1,) + tuple(signature[1:])
    out.update({k: tuple(v) for k, v in given.items() if k not in out})
    return out or None


def load_keras_model(model: Any, *,
                     input_shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
    """A ``keras.Model`` object (in memory, not saved) as a ModelGraph, converted like
    :func:`load_keras` converts a saved one.

    Raises
    ------
    ModelLoadError
        If the model cannot be converted.
    """
    tf = _tf()
    name = getattr(model, "name", None) or type(model).__name__
    data = _convert(lambda: tf.lite.TFLiteConverter.from_keras_model(model), f"model {name!r}")
    shapes = _default_shapes(data, input_shapes, f"model {name!r}")
    graph = load_tflite(data, input_shapes=shapes)
    graph.name = name
    _annotate(graph, _layer_names(model), "keras")
    graph.meta["source"] = {**graph.meta.get("source", {}), "framework": "keras",
                            "object": type(model).__name__, "via": "tflite"}
    return graph


def load_keras(path: str | os.PathLike[str], *,
               input_shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
    """Load a Keras model (``.keras`` / ``.h5``) or a SavedModel directory as a ModelGraph.

    Parameters
    ----------
    path : path-like
        A ``.keras`` or ``.h5`` file, or a SavedModel directory.
    input_shapes : dict of str to shape, optional
        Canonical (NCHW) shapes by input name (``""`` = the first input); the batch
        dimension defaults to 1.

    Returns
    -------
    ModelGraph
        Validated, canonical NCHW; ``meta["source"]["framework"]`` is ``"keras"`` or
        ``"saved_model"``.

    Raises
    ------
    ModelLoadError
        If the path is missing, not a Keras/SavedModel model, or cannot be converted.
    DynamicShapeError
        If a non-batch dimension is dynamic and ``input_shapes`` does not fix it.
    """
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"no Keras model or SavedModel at {str(p)!r}")
    tf = _tf()
    layers: list[str] = []
    if p.is_dir():
        if not ((p / "saved_model.pb").exists() or (p / "saved_model.pbtxt").exists()):
            raise ModelLoadError(
                f"{str(p)!r} is a directory without saved_model.pb; pass a SavedModel "
                f"directory or a .keras / .h5 file"
            )
        framework = "saved_model"
        data = _convert(lambda: tf.lite.TFLiteConverter.from_saved_model(str(p)), str(p))
    elif p.suffix.lower() in (".keras", ".h5"):
        framework = "keras"
        try:
            import keras

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = keras.models.load_model(str(p), compile=False)
        except (OSError, ValueError, TypeError, KeyError, ImportError) as err:
            raise ModelLoadError(
                f"cannot read the Keras model {str(p)!r}: {err}. Is it a complete .keras "
                f"or .h5 file saved by Keras?"
            ) from err
        layers = _layer_names(model)
        data = _convert(lambda: tf.lite.TFLiteConverter.from_keras_model(model), str(p))
    else:
        raise ModelLoadError(
            f"{str(p)!r} is neither a .keras / .h5 file nor a SavedModel directory"
        )
    shapes = _default_shapes(data, input_shapes, str(p))
    graph = load_tflite(data, input_shapes=shapes)
    graph.name = p.stem if p.is_file() else p.name
    _annotate(graph, layers, framework)
    graph.meta["source"] = {**graph.meta.get("source", {}), "framework": framework,
                            "path": str(p), "via": "tflite"}
    return graph
