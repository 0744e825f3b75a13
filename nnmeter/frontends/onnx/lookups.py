"""Embedding lookups: the Gathers of a constant table (word, token-type or position
embeddings) by indices computed from the model's integer inputs (``input_ids``).

The IR describes float computation over static shapes; a token id is data, not a
shape. So each such lookup becomes a float graph input of the lookup's shape
``(batch, sequence, hidden)``, the integer inputs it reads are dropped when nothing
else reads them (their shapes stay known: a ``Shape`` of ``input_ids`` still folds),
and the integer nodes between them (RoBERTa's position ids, ``cumsum(ids != pad)``)
are dropped with them. What this leaves out of the IR is the lookup itself: it copies
``prod(shape)`` elements, small beside the first matrix product that reads them.

Examples
--------
>>> import numpy as np, onnx
>>> from onnx import helper, numpy_helper, TensorProto
>>> from nnmeter.frontends.onnx import load_onnx
>>> ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> table = numpy_helper.from_array(np.zeros((100, 16), np.float32), "table")
>>> nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
...          helper.make_node("Relu", ["e"], ["y"], name="act")]
>>> g = load_onnx(helper.make_model(helper.make_graph(nodes, "g", [ids], [y], [table])))
>>> [(n.name, n.op, n.output_shape) for n in g.nodes()]
[('embed', 'input', (1, 8, 16)), ('act', 'relu', (1, 8, 16))]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["EmbeddingLookups", "embedding_lookups", "index_shape"]

#: Ops that read a tensor's shape, not its values: they do not carry indices on.
_SHAPE_READERS = {"Shape", "Size"}


@dataclass
class EmbeddingLookups:
    """What :func:`embedding_lookups` found (node indices into ``Importer.nodes``)."""

    gathers: set[int] = field(default_factory=set)        # lookups → graph inputs
    index_nodes: set[int] = field(default_factory=set)    # integer nodes dropped
    dropped_inputs: set[str] = field(default_factory=set)  # integer inputs dropped
    sources: dict[int, set[str]] = field(default_factory=dict)  # lookup → inputs read


def embedding_lookups(imp: Importer,
                      inputs: Sequence[tuple[str, tuple[int, ...], str]]) -> EmbeddingLookups:
    """Find the embedding lookups of ``imp.nodes`` and the integer index computation
    that only feeds them. Integer inputs are those of an integer or bool dtype."""
    found = EmbeddingLookups()
    int_inputs = {nm for nm, _, dtype in inputs if dtype.startswith(("int", "uint", "bool"))}
    if not int_inputs:
        return found
    # tensor -> the integer inputs its value depends on
    origin: dict[str, set[str]] = {nm: {nm} for nm in int_inputs}
    for n in imp.nodes:
        if n.op_type in _SHAPE_READERS:
            continue
        src = set().union(*(origin.get(t, set()) for t in n.input if t))
        if src:
            for t in n.output:
                if t:
                    origin[t] = src
    for i, n in enumerate(imp.nodes):
        if (n.op_type == "Gather" and n.domain in ("", "ai.onnx") and len(n.input) == 2
                and imp.is_const(n.input[0]) and n.input[1] in origin
                and int(_axis(n)) == 0):
            found.gathers.add(i)
            found.sources[i] = origin[n.input[1]]
    if not found.gathers:
        return found

    def only_indices(tensor: str) -> bool:
        if tensor in imp.graph_outputs:
            return False
        for j in imp.consumers.get(tensor, []):
            m = imp.nodes[j]
            if j in found.index_nodes or m.op_type in _SHAPE_READERS:
                continue
            if j in found.gathers and m.input[1] == tensor and m.input[0] != tensor:
                continue
            return False
        return True

    for i in range(len(imp.nodes) - 1, -1, -1):
        n = imp.nodes[i]
        outs = [t for t in n.output if t]
        if (i not in found.gathers and outs and all(t in origin for t in outs)
                and all(only_indices(t) for t in outs)):
            found.index_nodes.add(i)
    found.dropped_inputs = {nm for nm in int_inputs if only_indices(nm)}
    return found


def index_shape(imp: Importer, lookups: EmbeddingLookups, tensor: str) -> tuple[int, ...] | None:
    """The shape of the index tensor ``tensor`` where ONNX shape inference does not give
    it (Expand to a shape computed by Where, as HF writes ``token_type_ids``): the
    dropped index nodes evaluated on zero ids. Index shapes do not depend on the ids'
    values (no NonZero-like op feeds a lookup); None if evaluation fails."""
    import numpy as np

    from nnmeter.frontends.onnx.folding import evaluate

    values: dict[str, Any] = {}
    for nm in lookups.dropped_inputs:
        values[nm] = np.zeros(imp.const_shapes[nm], dtype=np.int64)
    for i in sorted(lookups.index_nodes):
        n = imp.nodes[i]
        ins = []
        for t in n.input:
            if not t:
                ins.append(None)
            elif t in values:
                ins.append(values[t])
            elif imp.consts.get(t) is not None:
                ins.append(imp.consts[t])
            else:
                return None
        try:
            outs = evaluate(n, ins, imp.opset)
        except Exception:  # noqa: BLE001 - any failure means "shape unknown"
            return None
        values.update({t: v for t, v in zip(n.output, outs) if t})
        if tensor in values:
            return tuple(int(d) for d in np.shape(values[tensor]))
    return None


def _axis(node: Any) -> int:
    for a in node.attribute:
        if a.name == "axis":
            return a.i
    return 0
