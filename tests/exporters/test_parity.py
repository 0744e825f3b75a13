"""Parity: the ONNX path and the TFLite path read the same IR back, up to recorded differences.

For each small graph built with GraphBuilder, ``load_onnx(export_onnx(g))`` and
``load_tflite(export_tflite(g))`` are normalised and compared as multisets of node
signatures (op, output shapes, layout-free attributes) and of edges between them.

Recorded differences that the normalisation removes (each is what TensorFlow's
converter does, not a loss in either frontend):

- ``bn`` is folded into the conv / dwconv / fc before it (dropped on the ONNX side);
- ``hsigmoid`` is ``[add(+3)] -> relu6 -> mul(1/6)`` in TFLite, the add folded into a
  preceding conv's bias (collapsed back on the TFLite side);
- ``channelshuffle`` is ``reshape -> transpose -> reshape`` in TFLite (collapsed);
- ``flatten`` is a ``reshape`` (TFLite has no flatten; the frontend inserts a reshape
  in front of a FULLY_CONNECTED that flattens its input);
- conv / pool ``pads`` may differ where TF's SAME puts the odd row at the end while the
  IR's symmetric pads gave the same output size (pads are not compared, shapes are);
- node names (TFLite tensor names) are not compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------ a small rewritable view
class _View:
    """Mutable copy of a graph's structure: name -> [op, out_shapes, input names, attrs, meta]."""

    def __init__(self, g: ModelGraph) -> None:
        self.nodes: dict[str, dict] = {}
        for n in g.topological_nodes():
            self.nodes[n.name] = {"op": n.op, "shapes": n.output_shapes,
                                  "inputs": [r.node for r in n.inputs],
                                  "attrs": n.attrs, "meta": n.meta}

    def consumers(self, name: str) -> list[str]:
        return [k for k, v in self.nodes.items() if name in v["inputs"]]

    def bypass(self, name: str) -> None:
        src = self.nodes[name]["inputs"][0]
        for k in self.consumers(name):
            self.nodes[k]["inputs"] = [src if i == name else i for i in self.nodes[k]["inputs"]]
        del self.nodes[name]

    def collapse(self, chain: list[str], op: str) -> None:
        """Replace a chain of single-consumer nodes by one node of ``op`` (named as the last)."""
        last = chain[-1]
        self.nodes[last]["op"] = op
        self.nodes[last]["inputs"] = list(self.nodes[chain[0]]["inputs"])
        self.nodes[last]["attrs"] = None
        for name in chain[:-1]:
            del self.nodes[name]

    def signature(self) -> tuple[Counter, Counter]:
        def sig(name: str) -> tuple:
            n = self.nodes[name]
            return (n["op"], n["shapes"], _attr_key(n["op"], n["attrs"]))

        nodes = Counter(sig(k) for k in self.nodes)
        edges = Counter((sig(i), sig(k)) for k, v in self.nodes.items() for i in v["inputs"])
        return nodes, edges


def _attr_key(op: str, attrs) -> tuple:
    """Layout-free attributes worth comparing (pads excluded, see module docstring)."""
    if attrs is None:
        return ()
    if op in ("conv", "dwconv", "convtranspose"):
        return (attrs.out_channels, attrs.kernel, attrs.stride, attrs.groups)
    if op in ("maxpool", "avgpool"):
        return (attrs.kernel, attrs.stride)
    if op == "fc":
        return (attrs.out_features,)
    if op == "concat":
        return (attrs.axis,)
    if op == "split":
        return (attrs.axis, attrs.sizes)
    if op == "resize":
        return (attrs.size, attrs.mode)
    if op == "gap":
        return (attrs.keepdims,)
    if op == "transpose":
        return (attrs.perm,)
    return ()


def _near(value, target: float) -> bool:
    return value is not None and abs(value - target) < 1e-4


def normalise_onnx(g: ModelGraph) -> _View:
    v = _View(g)
    for name in [k for k, n in v.nodes.items() if n["op"] == "bn"]:
        v.bypass(name)
    for n in v.nodes.values():
        if n["op"] == "flatten":
            n["op"], n["attrs"] = "reshape", None
        elif n["op"] == "reshape":
            n["attrs"] = None
        elif n["op"] in ("channelshuffle", "hsigmoid"):
            n["attrs"] = None
    return v


def normalise_tflite(g: ModelGraph) -> _View:
    v = _View(g)
    # relu6 -> mul(1/6), optionally after add(+3): hsigmoid
    for name in [k for k, n in v.nodes.items() if n["op"] == "relu6"]:
        if name not in v.nodes:
            continue
        readers = v.consumers(name)
        if len(readers) != 1:
            continue
        mul = v.nodes[readers[0]]
        if mul["op"] != "mul" or not _near(mul["meta"].get("const_value"), 1 / 6):
            continue
        chain = [name, readers[0]]
        src = v.nodes[name]["inputs"][0]
        if (v.nodes[src]["op"] == "add" and _near(v.nodes[src]["meta"].get("const_value"), 3.0)
                and len(v.consumers(src)) == 1):
            chain.insert(0, src)
        v.collapse(chain, "hsigmoid")
    # reshape(rank 5) -> transpose -> reshape: channelshuffle
    for name in [k for k, n in v.nodes.items() if n["op"] == "reshape"]:
        if name not in v.nodes or len(v.nodes[name]["shapes"][0]) != 5:
            continue
        (t,) = v.consumers(name)
        (r,) = v.consumers(t)
        if v.nodes[t]["op"] == "transpose" and v.nodes[r]["op"] == "reshape":
            v.collapse([name, t, r], "channelshuffle")
    for n in v.nodes.values():
        if n["op"] == "reshape":
            n["attrs"] = None
    return v


# ------------------------------------------------------------------ the graphs
def _stem() -> ModelGraph:
    b = GraphBuilder("stem", (1, 3, 32, 32))
    return b.build([b.relu(b.bn(b.conv(b.x, 16, 3, 2)))])


def _mbv2_block() -> ModelGraph:
    b = GraphBuilder("mbv2", (1, 16, 16, 16))
    y = b.relu6(b.bn(b.conv(b.x, 64, 1)))
    y = b.relu6(b.bn(b.dwconv(y, 3)))
    y = b.bn(b.conv(y, 16, 1))
    return b.build([b.add_(b.x, y)])


def _se_block() -> ModelGraph:
    b = GraphBuilder("se", (1, 16, 14, 14))
    y = b.hswish(b.bn(b.dwconv(b.x, 5, 2)))
    return b.build([b.se(y, gate="hsigmoid")])


def _shuffle_unit() -> ModelGraph:
    b = GraphBuilder("shuffle", (1, 32, 14, 14))
    left, right = b.split(b.x, [16, 16])
    right = b.relu(b.bn(b.conv(right, 16, 1)))
    right = b.bn(b.dwconv(right, 3))
    right = b.relu(b.bn(b.conv(right, 16, 1)))
    return b.build([b.channelshuffle(b.concat([left, right]), 2)])


def _resnet_head() -> ModelGraph:
    b = GraphBuilder("resnet", (1, 8, 32, 32))
    y = b.maxpool(b.relu(b.bn(b.conv(b.x, 16, 7, 2))), 3, 2, pads=(1, 1, 1, 1))
    z = b.relu(b.bn(b.conv(y, 16, 3)))
    z = b.bn(b.conv(z, 16, 3))
    y = b.relu(b.add_(y, z))
    y = b.avgpool(y, 2)
    return b.build([b.softmax(b.fc(b.gap(y, keepdims=False), 10))])


def _fpn() -> ModelGraph:
    b = GraphBuilder("fpn", (1, 8, 16, 16))
    hi = b.relu(b.conv(b.x, 8, 3))
    lo = b.relu(b.conv(hi, 8, 3, 2))
    up = b.resize(lo, (16, 16))
    return b.build([b.sigmoid(b.concat([hi, up]))])


def _swish_block() -> ModelGraph:
    b = GraphBuilder("swish", (1, 8, 12, 12))
    y = b.swish(b.bn(b.conv(b.x, 16, 3)))
    return b.build([b.mul(y, b.sigmoid(b.gap(y)))])


def _flatten_head() -> ModelGraph:
    b = GraphBuilder("flat", (1, 8, 8, 8))
    y = b.relu(b.conv(b.x, 8, 3))
    y = b.transpose(y, (0, 1, 3, 2))
    return b.build([b.fc(b.flatten(b.gap(y)), 4), b.fc(b.flatten(b.avgpool(y, 8)), 3)])


GRAPHS: dict[str, Callable[[], ModelGraph]] = {
    f.__name__.strip("_"): f
    for f in (_stem, _mbv2_block, _se_block, _shuffle_unit, _resnet_head, _fpn, _swish_block,
              _flatten_head)
}


@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_onnx_and_tflite_paths_agree(tmp_path, case):
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnx")
    from nnmeter.exporters.onnx import export_onnx
    from nnmeter.exporters.tflite import export_tflite
    from nnmeter.frontends.onnx import load_onnx
    from nnmeter.frontends.tflite import load_tflite

    g = GRAPHS[case]()
    via_onnx = load_onnx(export_onnx(g, tmp_path / f"{case}.onnx"))
    via_tflite = load_tflite(export_tflite(g, tmp_path / f"{case}.tflite"))
    assert not via_tflite.unknown_ops()
    a_nodes, a_edges = normalise_onnx(via_onnx).signature()
    b_nodes, b_edges = normalise_tflite(via_tflite).signature()
    assert a_nodes == b_nodes, (
        f"only via ONNX: {a_nodes - b_nodes}\nonly via TFLite: {b_nodes - a_nodes}")
    assert a_edges == b_edges, (
        f"only via ONNX: {a_edges - b_edges}\nonly via TFLite: {b_edges - a_edges}")
    # Both read the model's outputs at the IR's shapes.
    assert sorted(via_onnx.shape_of(r) for r in via_onnx.outputs) == \
        sorted(g.shape_of(r) for r in g.outputs) == \
        sorted(via_tflite.shape_of(r) for r in via_tflite.outputs)


def test_normalisation_is_not_vacuous():
    """The normaliser keeps real differences: a different graph does not compare equal."""
    a = normalise_onnx(_stem()).signature()
    b = normalise_onnx(_fpn()).signature()
    assert a != b
    nodes, _ = normalise_onnx(_mbv2_block()).signature()
    assert not any(sig[0] == "bn" for sig in nodes)
