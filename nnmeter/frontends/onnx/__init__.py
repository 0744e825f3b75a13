"""ONNX frontend: an ``.onnx`` file (or an ``onnx.ModelProto``) → :class:`ModelGraph`.

What it does, in order:

1. reads the model (``ModelLoadError`` when it is not a readable ONNX model);
2. fixes the input shapes (``input_shapes`` overrides; a dynamic dimension without
   one raises :class:`DynamicShapeError`) and runs ONNX shape inference;
3. walks the nodes in topological order. A node whose inputs are all constant
   (initializers, ``Constant``, ``ConstantOfShape``, ``Shape`` of a tensor whose shape
   is known, ...) is evaluated with numpy, so shape-computing chains such as
   Shape → Gather → Unsqueeze → Concat → Reshape fold away (so do the attention masks,
   token-type and position ids that transformers build from static shapes). Embedding
   lookups (a Gather of a constant table by indices computed from integer inputs)
   become float graph inputs of the lookup's shape (:mod:`.lookups`). Every other node
   maps onto the IR vocabulary (:mod:`nnmeter.ir.ops`), with multi-node patterns
   recognised (channel shuffle, swish, hswish, erf- and tanh-GELU, MatMul + bias Add,
   the decomposed LayerNorm of opsets before 17; a Concat with a constant class token
   is a pad, a strided Slice splits and reshapes, a Gather by a constant scalar index
   a split and a reshape). Ops outside the vocabulary become ``unknown`` nodes with the output shapes from ONNX shape
   inference; nothing is dropped except Identity, inference-mode Dropout and the
   QuantizeLinear/DequantizeLinear pairs of QDQ models on activations (counted in
   ``graph.meta["qdq_nodes_removed"]``: the IR describes the float computation).
4. validates the graph.

The package does this in stages, a module each: :mod:`.reader` (the file, input
shapes, ONNX shape inference, initializers), :mod:`.folding` (constant folding),
:mod:`.lookups` (embedding lookups), :mod:`.importer` (the walk over the graph) and
:mod:`.ops` (one module of op handlers per op family, registered on a shared registry).

ONNX is NCHW already, which is the IR's canonical layout. IR node names are the ONNX
node names (made unique, generated as ``<OpType>_<index>`` when empty); graph inputs keep
their ONNX names, and an embedding lookup's input takes its Gather's node name.

Examples
--------
>>> import onnx
>>> from onnx import helper, TensorProto
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> node = helper.make_node("Relu", ["x"], ["y"], name="act")
>>> model = helper.make_model(helper.make_graph([node], "g", [x], [y]))
>>> g = load_onnx(model)
>>> [(n.name, n.op, n.output_shape) for n in g.nodes()]
[('x', 'input', (1, 3, 8, 8)), ('act', 'relu', (1, 3, 8, 8))]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nnmeter.frontends.onnx.importer import Importer
from nnmeter.frontends.onnx.reader import read_onnx_model
from nnmeter.ir.graph import ModelGraph

__all__ = ["load_onnx", "read_onnx_model"]


def load_onnx(source: "str | os.PathLike | bytes | Any",
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
    """Load an ONNX model into a validated :class:`ModelGraph`.

    Parameters
    ----------
    source : path, bytes or onnx.ModelProto
        The model. A ModelProto is not modified.
    input_shapes : dict, optional
        ``{input name: shape}`` (NCHW, batch included) for inputs with dynamic
        dimensions, or to override declared shapes. The key ``""`` names the first input.

    Returns
    -------
    ModelGraph
        Shape-annotated and validated. Ops outside the vocabulary are ``unknown``
        nodes (see ``graph.unknown_ops()``).

    Raises
    ------
    ModelLoadError
        Missing, truncated or corrupt file.
    DynamicShapeError
        An input has a dynamic dimension and ``input_shapes`` does not fix it.
    InputNameError
        ``input_shapes`` names something that is not a model input.
    UnsupportedOpError
        An op the IR cannot represent even as ``unknown`` (no static output shape,
        non-tensor values such as sequences or strings).
    GraphValidationError
        Cyclic or disconnected graphs.
    """
    model = read_onnx_model(source)
    if isinstance(source, (str, os.PathLike)):
        default_name = Path(source).stem
    else:
        default_name = "model"
    name = model.graph.name or default_name
    return Importer(model, input_shapes, name).run()
