"""The graph IR: ModelGraph, op vocabulary, shape inference, cost metrics, JSON."""

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.cost import GraphCost, NodeCost, graph_cost, node_cost
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.ir.ops import OPS
from nnmeter.ir.serialize import SCHEMA_VERSION, from_json, to_json
from nnmeter.ir.shapes import infer_shapes
from nnmeter.ir.validate import lint, validate

__all__ = [
    "GraphBuilder", "GraphCost", "NodeCost", "graph_cost", "node_cost", "ModelGraph",
    "Node", "Ref", "OPS", "SCHEMA_VERSION", "from_json", "to_json", "infer_shapes",
    "lint", "validate",
]
