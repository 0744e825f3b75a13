"""ModelGraph: the IR every frontend produces and every pass consumes.

A ModelGraph is a networkx DiGraph whose nodes are keyed by unique names. Each graph
node holds one :class:`Node` record under the ``"node"`` key: the canonical op type,
its typed attributes, the *ordered* list of its inputs (as :class:`Ref`), and its input
and output shapes in the canonical layout (see :mod:`nnmeter.ir.ops`). Graph inputs are
nodes of op ``"input"``. Edges only record dependencies; the order of a node's inputs
lives in ``Node.inputs``.

Examples
--------
>>> g = ModelGraph("tiny")
>>> x = g.add_input("x", (1, 3, 8, 8))
>>> _ = g.add_node("relu1", "relu", inputs=[x])
>>> g.set_outputs(["relu1"])
>>> [n.op for n in g.topological_nodes()]
['input', 'relu']
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from nnmeter.errors import GraphValidationError, InputNameError
from nnmeter.ir.ops import OPS, InputAttrs, attrs_class

__all__ = ["Ref", "Node", "ModelGraph", "Shape", "as_ref"]

Shape = tuple[int, ...]


@dataclass(frozen=True, order=True)
class Ref:
    """A reference to output ``port`` of node ``node``."""

    node: str
    port: int = 0

    def __str__(self) -> str:
        return self.node if self.port == 0 else f"{self.node}#{self.port}"


def as_ref(value: "Ref | str | tuple[str, int] | Node") -> Ref:
    """Coerce a node name, a (name, port) pair, a Node or a Ref into a Ref."""
    if isinstance(value, Ref):
        return value
    if isinstance(value, Node):
        return Ref(value.name, 0)
    if isinstance(value, str):
        return Ref(value, 0)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return Ref(str(value[0]), int(value[1]))
    raise TypeError(f"cannot use {value!r} as a tensor reference; pass a node name or Ref")


@dataclass(frozen=True)
class Node:
    """One op of a ModelGraph.

    Attributes
    ----------
    name : str
        Unique within the graph.
    op : str
        Canonical op type from :data:`nnmeter.ir.ops.OPS`.
    attrs : object
        The op's attribute record (a frozen dataclass of the class the op maps to).
    inputs : tuple of Ref
        Ordered activation inputs.
    input_shapes, output_shapes : tuple of shapes
        Canonical-layout shapes, batch included; empty until shape inference ran.
    source : dict
        Where the node came from (``{"framework": "onnx", "op_type": "Conv", "name": ...}``).
    meta : dict
        Free annotations that passes add (fused activation, quantization, kernel id, ...).
    """

    name: str
    op: str
    attrs: Any
    inputs: tuple[Ref, ...] = ()
    input_shapes: tuple[Shape, ...] = ()
    output_shapes: tuple[Shape, ...] = ()
    source: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def output_shape(self) -> Shape:
        """Shape of output 0."""
        return self.output_shapes[0]

    @property
    def input_shape(self) -> Shape:
        """Shape of input 0."""
        return self.input_shapes[0]


class ModelGraph:
    """A DNN as a DAG of canonical ops. See the module docstring for the contract.

    Parameters
    ----------
    name : str
        Model name, kept through JSON and exports.
    dtype : str
        Element type of activations and weights, used for memory traffic (bytes).
    """

    def __init__(self, name: str = "model", *, dtype: str = "float32") -> None:
        self.name = name
        self.dtype = dtype
        self.nx: nx.DiGraph = nx.DiGraph()
        self.outputs: list[Ref] = []
        self.meta: dict[str, Any] = {}
        self._order = itertools.count()
        # Cached topological order; every method that changes nodes or edges resets it.
        # Code that mutates ``self.nx`` directly must call ``invalidate()``.
        self._topo: tuple[str, ...] | None = None

    def invalidate(self) -> None:
        """Forget cached derived data after ``self.nx`` was changed directly."""
        self._topo = None

    # ------------------------------------------------------------------ building
    def add_node(
        self,
        name: str,
        op: str,
        attrs: Any = None,
        inputs: Iterable[Ref | str | tuple[str, int]] = (),
        *,
        input_shapes: Sequence[Sequence[int]] = (),
        output_shapes: Sequence[Sequence[int]] = (),
        source: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Node:
        """Add a node and the edges from its inputs; returns the stored Node.

        Raises
        ------
        GraphValidationError
            If ``name`` exists, ``op`` is outside the vocabulary, ``attrs`` has the
            wrong type, or an input names a node that does not exist yet.
        """
        if name in self.nx:
            raise GraphValidationError(
                f"node name {name!r} already exists; node names must be unique"
            )
        if op not in OPS:
            raise GraphValidationError(
                f"op {op!r} is not in the vocabulary; use 'unknown' with "
                f"UnknownAttrs(original_type=...) for ops outside it"
            )
        cls = attrs_class(op)
        if attrs is None:
            try:
                attrs = cls()
            except TypeError as err:
                raise GraphValidationError(
                    f"op {op!r} needs attributes of type {cls.__name__}: {err}"
                ) from err
        elif not isinstance(attrs, cls):
            raise GraphValidationError(
                f"node {name!r}: op {op!r} takes {cls.__name__}, got {type(attrs).__name__}"
            )
        refs = tuple(as_ref(i) for i in inputs)
        for ref in refs:
            if ref.node not in self.nx:
                raise GraphValidationError(
                    f"node {name!r} reads {ref.node!r}, which does not exist; add "
                    f"producers before consumers"
                )
        node = Node(
            name=name,
            op=op,
            attrs=attrs,
            inputs=refs,
            input_shapes=tuple(tuple(int(d) for d in s) for s in input_shapes),
            output_shapes=tuple(tuple(int(d) for d in s) for s in output_shapes),
            source=dict(source or {}),
            meta=dict(meta or {}),
        )
        return self._insert(node)

    def _insert(self, node: Node) -> Node:
        """Store ``node`` and its input edges, unchecked: for callers that checked
        everything :meth:`add_node` checks (the GraphBuilder, a NAS loop's hot path)."""
        G = self.nx
        name = node.name
        # what DiGraph.add_node and add_edge do for a new node whose producers exist,
        # without their per-call checks (the edges are a third of building a graph)
        succ, pred = G._succ, G._pred
        succ[name] = G.adjlist_inner_dict_factory()
        mine = pred[name] = G.adjlist_inner_dict_factory()
        attrs = G._node[name] = G.node_attr_dict_factory()
        attrs["node"], attrs["order"] = node, next(self._order)
        for ref in node.inputs:
            if name not in succ[ref.node]:
                succ[ref.node][name] = mine[ref.node] = G.edge_attr_dict_factory()
        if cache := getattr(G, "__networkx_cache__", None):
            cache.clear()
        self._topo = None
        return node

    def add_input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Ref:
        """Add a graph input of ``shape`` (canonical layout); returns its Ref."""
        self.add_node(
            name, "input", InputAttrs(dtype=dtype), output_shapes=[tuple(shape)]
        )
        return Ref(name, 0)

    def set_outputs(self, outputs: Iterable[Ref | str | tuple[str, int]]) -> None:
        """Declare the graph outputs, in order."""
        refs = [as_ref(o) for o in outputs]
        for ref in refs:
            if ref.node not in self.nx:
                raise InputNameError(
                    f"output {ref.node!r} is not a node of {self.name!r}; "
                    f"known nodes include {sorted(self.nx)[:8]}"
                )
        self.outputs = refs

    def replace(self, name: str, **changes: Any) -> Node:
        """Replace fields of node ``name`` (like ``dataclasses.replace``), rewiring edges
        when ``inputs`` changes. Returns the new Node."""
        old = self.node(name)
        if "inputs" in changes:
            changes["inputs"] = tuple(as_ref(i) for i in changes["inputs"])
        new = dataclasses.replace(old, **changes)
        if new.op != old.op or "attrs" in changes:
            cls = attrs_class(new.op)
            if not isinstance(new.attrs, cls):
                raise GraphValidationError(
                    f"node {name!r}: op {new.op!r} takes {cls.__name__}, "
                    f"got {type(new.attrs).__name__}"
                )
        if "inputs" in changes:
            self._topo = None
            for pred in list(self.nx.predecessors(name)):
                self.nx.remove_edge(pred, name)
            for ref in new.inputs:
                if ref.node not in self.nx:
                    raise GraphValidationError(f"node {name!r} reads missing {ref.node!r}")
                self.nx.add_edge(ref.node, name)
        self.nx.nodes[name]["node"] = new
        return new

    def remove(self, name: str) -> None:
        """Remove a node that nothing reads any more.

        Raises
        ------
        GraphValidationError
            If another node or a graph output still reads it.
        """
        readers = [s for s in self.nx.successors(name)]
        if readers or any(o.node == name for o in self.outputs):
            raise GraphValidationError(
                f"cannot remove {name!r}: still read by {readers or 'the graph outputs'}"
            )
        self.nx.remove_node(name)
        self._topo = None

    def bypass(self, name: str) -> None:
        """Remove a single-input node, making its readers read its input instead."""
        node = self.node(name)
        if len(node.inputs) != 1:
            raise GraphValidationError(
                f"cannot bypass {name!r}: it has {len(node.inputs)} inputs, needs 1"
            )
        self.redirect(name, node.inputs[0])
        self.nx.remove_node(name)
        self._topo = None

    def redirect(self, name: str, to: Ref) -> None:
        """Make every reader of node ``name`` (and every graph output it is) read ``to``
        instead; ``name`` stays, read by nothing."""
        for reader in list(self.nx.successors(name)):
            rnode = self.node(reader)
            self.replace(reader, inputs=[to if r.node == name else r for r in rnode.inputs])
        self.outputs = [to if o.node == name else o for o in self.outputs]

    # ------------------------------------------------------------------ reading
    def node(self, name: str) -> Node:
        """The Node called ``name``.

        Raises
        ------
        InputNameError
            If no node has that name.
        """
        try:
            return self.nx.nodes[name]["node"]
        except KeyError:
            raise InputNameError(
                f"no node named {name!r} in graph {self.name!r} ({len(self)} nodes)"
            ) from None

    __getitem__ = node

    def __contains__(self, name: object) -> bool:
        return name in self.nx

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def __iter__(self) -> Iterator[str]:
        return iter(self.topological_order())

    def __repr__(self) -> str:
        return f"ModelGraph({self.name!r}, {len(self)} nodes)"

    @property
    def input_names(self) -> list[str]:
        """Names of the graph-input nodes, in insertion order."""
        return [n.name for n in self.topological_nodes() if n.op == "input"]

    def nodes(self) -> list[Node]:
        """All nodes in deterministic topological order."""
        return self.topological_nodes()

    def nodes_unordered(self) -> list[Node]:
        """All nodes in insertion order (no topological sort: for sums and lookups)."""
        return [d["node"] for d in self.nx._node.values()]

    def topological_order(self) -> list[str]:
        """Node names in a deterministic topological order (ties: insertion order).

        Raises
        ------
        GraphValidationError
            If the graph has a cycle.
        """
        if self._topo is not None and len(self._topo) == self.nx.number_of_nodes():
            return list(self._topo)
        order = self.nx.nodes
        try:
            topo = tuple(
                nx.lexicographical_topological_sort(self.nx, key=lambda n: order[n]["order"])
            )
        except nx.NetworkXUnfeasible as err:
            cycle = nx.find_cycle(self.nx)
            raise GraphValidationError(
                f"graph {self.name!r} has a cycle through "
                f"{' -> '.join(u for u, _ in cycle)}; a model graph must be a DAG"
            ) from err
        self._topo = topo
        return list(topo)

    def topological_nodes(self) -> list[Node]:
        return [self.nx.nodes[n]["node"] for n in self.topological_order()]

    def successors(self, name: str) -> list[str]:
        """Names of nodes reading any output of ``name``, in insertion order."""
        order = self.nx.nodes
        return sorted(self.nx.successors(name), key=lambda n: order[n]["order"])

    def predecessors(self, name: str) -> list[str]:
        """Names of distinct producers of ``name``'s inputs, in input order."""
        seen: list[str] = []
        for ref in self.node(name).inputs:
            if ref.node not in seen:
                seen.append(ref.node)
        return seen

    def consumers(self, ref: Ref | str) -> list[str]:
        """Names of nodes that read exactly this tensor."""
        ref = as_ref(ref)
        return [s for s in self.successors(ref.node) if ref in self.node(s).inputs]

    def shape_of(self, ref: Ref | str) -> Shape:
        """Shape of a tensor (node output), from the producer's output_shapes."""
        ref = as_ref(ref)
        node = self.node(ref.node)
        if ref.port >= len(node.output_shapes):
            raise GraphValidationError(
                f"shape of {ref} unknown: {ref.node!r} has {len(node.output_shapes)} "
                f"known output shapes; run infer_shapes first"
            )
        return node.output_shapes[ref.port]

    def op_counts(self) -> dict[str, int]:
        """How many nodes of each op the graph holds."""
        counts: dict[str, int] = {}
        for node in self.topological_nodes():
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    def unknown_ops(self) -> list[Node]:
        """Nodes kept as ``unknown`` because the vocabulary does not cover them."""
        return [n for n in self.topological_nodes() if n.op == "unknown"]

    def copy(self, name: str | None = None) -> "ModelGraph":
        """An independent copy (nodes are immutable, so they are shared)."""
        g = ModelGraph(name or self.name, dtype=self.dtype)
        for node in self.topological_nodes():
            g.nx.add_node(node.name, node=node, order=next(g._order))
        g.nx.add_edges_from(self.nx.edges)
        g._topo = self._topo
        g.outputs = list(self.outputs)
        g.meta = dict(self.meta)
        return g

    def subgraph(self, names: Iterable[str], name: str | None = None) -> "ModelGraph":
        """A new graph of the given nodes; tensors read from outside become inputs.

        Outputs are the tensors of the chosen nodes that are read outside the set or are
        graph outputs (or, if none, every output of the last node).
        """
        keep = set(names)
        g = ModelGraph(name or f"{self.name}_sub", dtype=self.dtype)
        mapped: dict[Ref, Ref] = {}
        for node in self.topological_nodes():
            if node.name not in keep:
                continue
            new_inputs = []
            for i, ref in enumerate(node.inputs):
                if ref.node in keep:
                    new_inputs.append(ref)
                    continue
                if ref not in mapped:
                    in_name = f"in_{len(mapped)}"
                    g.add_input(in_name, node.input_shapes[i] if node.input_shapes else self.shape_of(ref))
                    mapped[ref] = Ref(in_name)
                new_inputs.append(mapped[ref])
            if node.op == "input":
                g.add_input(node.name, node.output_shape, node.attrs.dtype)
                continue
            g.add_node(
                node.name, node.op, node.attrs, new_inputs,
                input_shapes=node.input_shapes, output_shapes=node.output_shapes,
                source=node.source, meta=node.meta,
            )
        outs: list[Ref] = []
        for node in g.topological_nodes():
            for port in range(len(node.output_shapes)):
                ref = Ref(node.name, port)
                outside = [
                    s for s in self.consumers(ref) if s not in keep
                ] if node.name in self.nx else []
                if outside or ref in self.outputs:
                    outs.append(ref)
        if not outs:
            last = g.topological_nodes()[-1]
            outs = [Ref(last.name, p) for p in range(max(1, len(last.output_shapes)))]
        g.outputs = outs
        return g

    # ------------------------------------------------------------------ passes
    def infer_shapes(self) -> "ModelGraph":
        """Fill every node's input and output shapes in place; returns self.

        See :func:`nnmeter.ir.shapes.infer_shapes`.
        """
        from nnmeter.ir.shapes import infer_shapes

        return infer_shapes(self)

    def validate(self) -> "ModelGraph":
        """Raise GraphValidationError listing every problem; returns self when clean."""
        from nnmeter.ir.validate import validate

        validate(self)
        return self

    def lint(self) -> list[str]:
        """Every problem the validator finds, as messages with a fix; [] when clean."""
        from nnmeter.ir.validate import lint

        return lint(self)

    def cost(self) -> "Any":
        """Whole-graph cost totals (:class:`nnmeter.ir.cost.GraphCost`)."""
        from nnmeter.ir.cost import graph_cost

        return graph_cost(self)

    def to_json(self, path: str | None = None, *, indent: int | None = None) -> str:
        """Serialise to JSON (with ``schema_version``); also write to ``path`` if given."""
        from nnmeter.ir.serialize import to_json

        return to_json(self, path, indent=indent)

    @classmethod
    def from_json(cls, text_or_path: str) -> "ModelGraph":
        """Rebuild a graph from :meth:`to_json` output (a JSON string or a file path)."""
        from nnmeter.ir.serialize import from_json

        return from_json(text_or_path)

    def structurally_equal(self, other: "ModelGraph") -> bool:
        """True when both graphs hold the same nodes (name, op, attrs, inputs, shapes)
        and the same outputs; ``source`` and ``meta`` are ignored."""
        if set(self.nx) != set(other.nx) or self.outputs != other.outputs:
            return False
        return all(self.node(n) == other.node(n) for n in self.nx)
