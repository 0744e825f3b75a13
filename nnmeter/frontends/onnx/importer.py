"""The importer: one walk over an ONNX graph in topological order that folds constants
and maps every other node, through the op handlers, onto a :class:`ModelGraph`."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nnmeter.errors import GraphValidationError, ShapeInferenceError, UnsupportedOpError
from nnmeter.frontends.onnx.attributes import jsonable, node_attrs
from nnmeter.frontends.onnx.folding import try_fold
from nnmeter.frontends.onnx.lookups import EmbeddingLookups, embedding_lookups, index_shape
from nnmeter.frontends.onnx.ops import Fallback, handler_for
from nnmeter.frontends.onnx.reader import (
    inferred_shapes, initializers, node_shapes, opset_of, static_inputs,
)
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.ir.ops import UnknownAttrs
from nnmeter.ir.shapes import infer_node

__all__ = ["Importer"]

log = logging.getLogger(__name__)


class Importer:
    """One ONNX → IR conversion (single use).

    What the op handlers and the folding read and write: ``refs`` (ONNX tensor → IR
    tensor, for activations), ``consts`` / ``const_shapes`` (constants; the value is None
    for those known by shape only), ``vi_shapes`` (ONNX shape inference), ``nodes`` (in
    topological order), ``consumers`` (tensor → indices of the nodes reading it),
    ``done`` (indices already converted, patterns included) and ``graph``.
    """

    def __init__(self, model: Any, input_shapes: Mapping[str, Sequence[int]] | None,
                 name: str) -> None:
        self.model = model
        self.name = name
        self.user_shapes = dict(input_shapes or {})
        self.opset = opset_of(model)
        self.consts: dict[str, np.ndarray | None] = {}
        self.const_shapes: dict[str, tuple[int, ...]] = {}
        self.refs: dict[str, Ref] = {}
        self.vi_shapes: dict[str, tuple[int, ...]] = {}
        self.consumers: dict[str, list[int]] = {}
        self.graph_outputs: set[str] = set()
        self.done: set[int] = set()
        self.graph: ModelGraph | None = None
        self.added: list[str] = []
        self.nodes: list[Any] = []
        self._producers: dict[str, int] | None = None  # tensor -> node index (producer())

    # -- helpers ---------------------------------------------------------------------
    def is_const(self, name: str) -> bool:
        return name in self.const_shapes

    def value(self, name: str) -> np.ndarray:
        """The value of a constant input; Fallback if it is not a materialised constant."""
        v = self.consts.get(name)
        if v is None:
            raise Fallback(f"{name!r} is not a known constant")
        return v

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.const_shapes:
            return self.const_shapes[name]
        if name in self.refs:
            return self.graph.shape_of(self.refs[name])
        raise Fallback(f"shape of {name!r} is unknown")

    def set_const(self, name: str, value: np.ndarray | None,
                  shape: Sequence[int] | None = None) -> None:
        if value is not None:
            value = np.asarray(value)
            shape = value.shape
        self.consts[name] = value
        self.const_shapes[name] = tuple(int(d) for d in shape)

    def producer(self, tensor: str) -> int | None:
        """The index of the node that computes ``tensor``, None for a graph input or an
        initializer (an index built on first use)."""
        index = self._producers
        if index is None:
            index = self._producers = {t: i for i, n in enumerate(self.nodes)
                                       for t in n.output if t}
        return index.get(tensor)

    def sole_consumer(self, tensor: str) -> Any | None:
        """The one node reading ``tensor`` (by index), None if several, none, or an output."""
        users = self.consumers.get(tensor, [])
        if len(users) != 1 or tensor in self.graph_outputs:
            return None
        idx = users[0]
        if idx in self.done:
            return None
        return idx

    def node_name(self, node: Any, idx: int) -> str:
        base = node.name or f"{node.op_type}_{idx}"
        name, k = base, 1
        while name in self.graph:
            name = f"{base}_{k}"
            k += 1
        return name

    # -- emission --------------------------------------------------------------------
    def emit(self, onnx_node: Any, idx: int, op: str, attrs: Any, inputs: Sequence[str],
             outputs: Sequence[str], *, name: str | None = None,
             meta: dict | None = None) -> str:
        """Add one IR node reading ONNX tensors ``inputs`` and defining ``outputs``.

        Raises Fallback when the IR's shape rule disagrees with ONNX shape inference.
        """
        refs = []
        for t in inputs:
            if t not in self.refs:
                raise Fallback(f"input {t!r} is not an activation")
            refs.append(self.refs[t])
        in_shapes = tuple(self.graph.shape_of(r) for r in refs)
        nm = name or self.node_name(onnx_node, idx)
        probe = Node(nm, op, attrs, tuple(refs), in_shapes)
        try:
            outs = [tuple(int(d) for d in s) for s in infer_node(probe, in_shapes)]
        except (ShapeInferenceError, IndexError, TypeError, ValueError,
                ZeroDivisionError) as err:
            raise Fallback(f"IR shape rule of {op} fails: {err}") from err
        if len(outs) != len(outputs):
            raise Fallback(f"{op} gives {len(outs)} outputs, ONNX node has {len(outputs)}")
        for t, s in zip(outputs, outs):
            expected = self.vi_shapes.get(t)
            if expected is not None and expected != s:
                raise Fallback(f"{op} gives shape {s}, ONNX inference says {expected}")
        self.added.append(nm)
        self.graph.add_node(
            nm, op, attrs, refs, input_shapes=in_shapes, output_shapes=outs,
            source={"framework": "onnx", "op_type": onnx_node.op_type,
                    "name": onnx_node.name},
            meta=meta,
        )
        for port, t in enumerate(outputs):
            self.refs[t] = Ref(nm, port)
        return nm

    def emit_unknown(self, node: Any, idx: int, reason: str = "") -> None:
        act_inputs = [t for t in node.input if t and t in self.refs]
        outputs = [t for t in node.output if t]
        out_shapes = []
        local: dict[str, tuple[int, ...]] | None = None
        for t in outputs:
            s = self.vi_shapes.get(t)
            if s is None:
                if local is None:
                    local = self._node_shapes(node)
                s = local.get(t)
            if s is None:
                raise UnsupportedOpError(
                    f"ONNX op {node.op_type} {node.name or '#' + str(idx)!r} is outside the "
                    f"IR vocabulary and ONNX shape inference gives no static shape for its "
                    f"output {t!r}; nnmeter cannot represent it (tensor values only; "
                    f"sequences, maps and data-dependent shapes are not supported)"
                )
            out_shapes.append(s)
        fields: dict[str, Any] = {k: jsonable(v) for k, v in node_attrs(node).items()}
        if node.domain not in ("", "ai.onnx"):
            fields["domain"] = node.domain
        consts = {str(i): list(self.const_shapes[t]) for i, t in enumerate(node.input)
                  if t and t in self.const_shapes}
        if consts:
            fields["const_inputs"] = consts
        if reason:
            fields["reason"] = reason
        if not act_inputs:
            raise UnsupportedOpError(
                f"ONNX op {node.op_type} {node.name!r} reads no activation and could not "
                f"be evaluated as a constant"
            )
        refs = [self.refs[t] for t in act_inputs]
        nm = self.node_name(node, idx)
        self.graph.add_node(
            nm, "unknown",
            UnknownAttrs(original_type=f"onnx:{node.op_type}", fields=fields), refs,
            input_shapes=[self.graph.shape_of(r) for r in refs], output_shapes=out_shapes,
            source={"framework": "onnx", "op_type": node.op_type, "name": node.name},
        )
        for port, t in enumerate(outputs):
            self.refs[t] = Ref(nm, port)

    def _node_shapes(self, node: Any) -> dict[str, tuple[int, ...]]:
        """Output shapes of ``node`` by ONNX inference on the node alone, from the
        shapes and constant values this walk already knows
        (:func:`~nnmeter.frontends.onnx.reader.node_shapes`)."""
        known: dict[str, tuple[tuple[int, ...], np.ndarray | None]] = {}
        for t in node.input:
            if not t:
                continue
            if t in self.const_shapes:
                known[t] = (self.const_shapes[t], self.consts.get(t))
            elif t in self.refs:
                known[t] = (tuple(self.graph.shape_of(self.refs[t])), None)
        return node_shapes(node, self.model.opset_import, known)

    def _lookup_input(self, node: Any, idx: int, lookups: "EmbeddingLookups") -> None:
        """An embedding lookup (Gather of a constant table by indices computed from
        integer inputs) becomes a float graph input of the lookup's shape: the IR
        describes the float computation, and the lookup itself copies
        ``prod(shape)`` elements, which no kernel of the runtimes we model spends time
        on compared with what follows."""
        table, ids = node.input[0], node.input[1]
        tshape = self.const_shapes[table]
        axis = int(node_attrs(node).get("axis", 0))
        ishape = (self.vi_shapes.get(ids) or self.const_shapes.get(ids)
                  or index_shape(self, lookups, ids))
        shape = self.vi_shapes.get(node.output[0])
        if shape is None and ishape is not None:
            shape = tuple(ishape) + tuple(tshape[1:])
        if shape is None or axis != 0:
            self.emit_unknown(node, idx, "embedding lookup of unknown shape")
            return
        name = self.node_name(node, idx)
        value = self.consts.get(table)
        dtype = value.dtype.name if value is not None else "float32"
        self.graph.add_input(name, shape, dtype)
        self.graph.replace(
            name, source={"framework": "onnx", "op_type": node.op_type, "name": node.name},
            meta={"embedding_lookup": {"table": table, "table_shape": list(tshape),
                                       "indices_from": sorted(lookups.sources.get(idx, ()))}})
        self.graph.meta.setdefault("embedding_inputs", []).append(name)
        self.refs[node.output[0]] = Ref(name, 0)

    def _note_absorbed(self, before: set[int], mark: int) -> None:
        """Record on the IR node a handler emitted the source nodes it also consumed
        (a pattern: Sigmoid + Mul as swish): ``meta["absorbed"]``, so that a runtime's
        report naming any of them maps back to the IR node."""
        took = sorted(self.done - before)
        if not took or len(self.added) <= mark:
            return
        names = [self.nodes[j].name or f"{self.nodes[j].op_type}_{j}" for j in took]
        node = self.graph.node(self.added[-1])
        node.meta.setdefault("absorbed", [])
        node.meta["absorbed"].extend(nm for nm in names if nm not in node.meta["absorbed"])

    def _convert(self, i: int, n: Any, lookups: EmbeddingLookups) -> None:
        """Convert node ``i`` (a no-op for one already converted, by a pattern or a
        fold): fold it, map it through its handler, or keep it as ``unknown``."""
        if i in self.done:
            return
        self.done.add(i)
        if i in lookups.gathers:
            self._lookup_input(n, i, lookups)
            return
        if self._inline_if(n, lookups):
            return
        if try_fold(self, n):
            return
        handler = handler_for(n.op_type) if n.domain in ("", "ai.onnx") else None
        if handler is None:
            self.emit_unknown(n, i)
            return
        saved_done = set(self.done)
        mark = len(self.added)
        try:
            handler(self, n, i)
            self._note_absorbed(saved_done | {i}, mark)
        except Fallback as why:
            self.done = saved_done
            for name in reversed(self.added[mark:]):
                self.graph.remove(name)
            del self.added[mark:]
            log.debug("keeping %s %s as unknown: %s", n.op_type, n.name, why)
            self.emit_unknown(n, i, str(why))

    def _inline_if(self, node: Any, lookups: EmbeddingLookups) -> bool:
        """An ``If`` whose condition is a constant runs one branch, always: the branch's
        nodes join the walk in its place (appended to ``nodes`` and converted now),
        their outputs renamed to the ``If``'s. torch writes such an ``If`` where a
        squeeze of a dimension it cannot prove to be 1 is traced (``local_response_norm``
        in AlexNet-style models); the runtimes fold it at load time. False, and nothing
        changed, for any other node."""
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
            return False
        cond = self.consts.get(node.input[0])
        if cond is None or np.asarray(cond).size != 1:
            return False
        which = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
        branch = next((a.g for a in node.attribute if a.name == which), None)
        if branch is None or len(branch.output) != len(node.output):
            return False
        import onnx
        from onnx import helper, numpy_helper

        made = {t for bn in branch.node for t in bn.output if t}
        returns = [(o.name, t) for o, t in zip(branch.output, node.output) if t]
        # a tensor the branch computes takes the If's output name; one it only passes
        # on (an outer tensor, returned as it is) is copied by an Identity instead
        rename = {src: dst for src, dst in returns if src in made}
        for init in branch.initializer:
            self.set_const(init.name, numpy_helper.to_array(init))
        added: list[Any] = []
        for bn in branch.node:
            c = onnx.NodeProto()
            c.CopyFrom(bn)
            for k, t in enumerate(c.input):
                c.input[k] = rename.get(t, t)
            for k, t in enumerate(c.output):
                c.output[k] = rename.get(t, t)
            added.append(c)
        for src, dst in returns:
            if src not in made:
                added.append(helper.make_node("Identity", [src], [dst],
                                              name=f"{node.name or 'If'}/{dst}"))
        start = len(self.nodes)
        self.nodes.extend(added)
        for j, c in enumerate(added, start):
            for t in c.input:
                if t:
                    self.consumers.setdefault(t, []).append(j)
        self._producers = None
        log.debug("If %s: condition is constant, %s inlined (%d nodes)", node.name, which,
                  len(added))
        for j in range(start, len(self.nodes)):
            self._convert(j, self.nodes[j], lookups)
        return True

    # -- main --------------------------------------------------------------------------
    def run(self) -> ModelGraph:
        """Convert the model; the validated graph."""
        inputs = static_inputs(self.model, self.user_shapes, self.name)
        self.vi_shapes.update(inferred_shapes(self.model, self.name))
        g = self.model.graph
        self.graph = ModelGraph(self.name, dtype=_graph_dtype(inputs))
        self.graph.meta = {
            "source_format": "onnx", "opset": self.opset,
            "producer": f"{self.model.producer_name} {self.model.producer_version}".strip(),
        }
        for name, value, shape in initializers(self.model):
            self.set_const(name, value, shape)
        nodes = _topological(list(g.node),
                             {nm for nm, _, _ in inputs} | set(self.const_shapes))
        self.nodes = nodes
        for i, n in enumerate(nodes):
            for t in n.input:
                if t:
                    self.consumers.setdefault(t, []).append(i)
        self.graph_outputs = {o.name for o in g.output}
        # Constant nodes first: a pattern that starts at one node reads constants that
        # the exporter may have written after it (torch writes each Constant just
        # before its first reader).
        for i, n in enumerate(nodes):
            if n.op_type == "Constant" and not n.input and n.domain in ("", "ai.onnx"):
                if try_fold(self, n):
                    self.done.add(i)
        lookups = embedding_lookups(self, inputs)
        self.done.update(lookups.index_nodes)
        for name, shape, dtype in inputs:
            if name in lookups.dropped_inputs:
                # Read only to compute lookup indices (and shapes): not an IR input.
                self.set_const(name, None, shape)
                continue
            self.graph.add_input(name, shape, dtype)
            self.graph.replace(name, source={"framework": "onnx", "op_type": "input",
                                             "name": name})
            self.refs[name] = Ref(name, 0)
        for i, n in enumerate(nodes):
            self._convert(i, n, lookups)
        outs = []
        for o in g.output:
            if o.name in self.refs:
                outs.append(self.refs[o.name])
            elif o.name in self.const_shapes:
                log.warning("output %r of %s is a constant; not kept as a graph output",
                            o.name, self.name)
            else:
                raise GraphValidationError(
                    f"output {o.name!r} of {self.name!r} is produced by no node"
                )
        if not outs:
            raise UnsupportedOpError(
                f"every output of {self.name!r} is a constant; the model computes nothing "
                f"from its inputs"
            )
        # A tensor listed twice as an output is one Ref; keep the order, drop repeats.
        seen: list[Ref] = []
        for r in outs:
            if r not in seen:
                seen.append(r)
        self.graph.set_outputs(seen)
        self.graph.validate()
        return self.graph


def _graph_dtype(inputs: list[tuple[str, tuple[int, ...], str]]) -> str:
    for _, _, dtype in inputs:
        if dtype in ("float16", "float32", "float64", "bfloat16"):
            return dtype
    return "float32"


def _topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """ONNX nodes in a valid topological order (the file's order when it is one).

    Raises
    ------
    GraphValidationError
        If the nodes form a cycle or read tensors nothing defines.
    """
    have = set(available)
    ok = True
    for n in nodes:
        if any(t and t not in have for t in n.input):
            ok = False
            break
        have.update(t for t in n.output if t)
    if ok:
        return nodes
    have = set(available)
    pending = list(nodes)
    ordered: list[Any] = []
    while pending:
        rest = []
        for n in pending:
            if all(not t or t in have for t in n.input):
                ordered.append(n)
                have.update(t for t in n.output if t)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            missing = sorted({t for n in rest for t in n.input if t and t not in have})[:5]
            raise GraphValidationError(
                f"ONNX graph has a cycle or reads undefined tensors {missing} "
                f"({len(rest)} nodes cannot be ordered); a model graph must be a DAG"
            )
        pending = rest
    return ordered
