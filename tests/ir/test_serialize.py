"""Tests of the JSON round trip."""

from __future__ import annotations

import json

import pytest

from nnmeter.errors import ModelLoadError
from nnmeter.ir import SCHEMA_VERSION, GraphBuilder, ModelGraph, from_json, to_json
from nnmeter.ir.ops import UnknownAttrs


def _graph() -> ModelGraph:
    b = GraphBuilder("rt", (1, 8, 8, 8))
    a, c = b.split(b.x, [4, 4], name="sp")
    a = b.clip(b.dwconv(a, name="dw"), -1.0, float("inf"), name="cl")
    y = b.concat([c, a], name="cat")
    y = b.channelshuffle(y, 2, name="cs")
    g = b.graph
    g.add_node("u", "unknown", UnknownAttrs("onnx:Elu", {"alpha": 0.5}), [y],
               input_shapes=[(1, 8, 8, 8)], output_shapes=[(1, 8, 8, 8)],
               source={"framework": "onnx", "op_type": "Elu", "name": "u"},
               meta={"note": 1})
    g.set_outputs(["u", ("sp", 1)])
    g.meta = {"origin": "test"}
    return g


def test_round_trip_keeps_everything(tmp_path):
    g = _graph()
    back = from_json(to_json(g))
    assert back.structurally_equal(g)
    assert back["u"].source == g["u"].source and back["u"].meta == {"note": 1}
    assert back.meta == {"origin": "test"} and back.name == "rt"
    assert back["cl"].attrs.max_value == float("inf")
    path = tmp_path / "g.json"
    g.to_json(str(path), indent=1)
    assert ModelGraph.from_json(str(path)).structurally_equal(g)
    assert back.topological_order() == g.topological_order()


def test_schema_version_mismatch():
    data = json.loads(to_json(_graph()))
    assert data["schema_version"] == SCHEMA_VERSION
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ModelLoadError, match="schema_version"):
        from_json(json.dumps(data))
    del data["schema_version"]
    with pytest.raises(ModelLoadError, match="schema_version None"):
        from_json(json.dumps(data))


def test_malformed_json():
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        from_json("{not json")
    with pytest.raises(ModelLoadError):
        from_json(json.dumps({"schema_version": SCHEMA_VERSION, "nodes": [{"op": "relu"}]}))
    with pytest.raises(ModelLoadError, match="cannot read"):
        from_json("/no/such/file.json")


def test_inconsistent_json_names_the_problem():
    data = json.loads(to_json(_graph()))
    data["nodes"] = data["nodes"][1:]  # the input is gone, readers dangle
    with pytest.raises(ModelLoadError, match="not a node of the graph"):
        from_json(json.dumps(data))


def _conv_json() -> dict:
    b = GraphBuilder("cb", (1, 3, 8, 8))
    return json.loads(to_json(b.build([b.relu(b.bn(b.conv(b.x, 32, name="c"), name="n"),
                                              name="r")])))


def _node(d, name):
    return next(n for n in d["nodes"] if n["name"] == name)


# each bad input (issue 20's battery) and the words its one-line error must carry
BAD_JSON = {
    "attribute-string": (lambda d: _node(d, "c")["attrs"].update(out_channels="abc"),
                         "'out_channels' must be a whole number, got 'abc'"),
    "attribute-bool": (lambda d: _node(d, "c")["attrs"].update(out_channels=True),
                       "must be a whole number, got True"),
    "attribute-fraction": (lambda d: _node(d, "c")["attrs"].update(out_channels=32.5),
                           "must be a whole number, got 32.5"),
    "stride-string": (lambda d: _node(d, "c")["attrs"].update(stride="ab"),
                      "'stride' must be a list"),
    "kernel-three": (lambda d: _node(d, "c")["attrs"].update(kernel=[1, 2, 3]),
                     "must be a list of 2 values"),
    "kernel-zero": (lambda d: _node(d, "c")["attrs"].update(kernel=[0, 0]),
                    "kernel=[0, 0] must be at least 1"),
    "attribute-unknown": (lambda d: _node(d, "c")["attrs"].update(colour=1),
                          "conv has no attribute 'colour'"),
    "out-channels-huge": (lambda d: _node(d, "c")["attrs"].update(out_channels=10 ** 12),
                          "differ from inferred"),
    "port-7": (lambda d: _node(d, "n").update(inputs=[["c", 7]]),
               "reads port 7 of 'c', which has 1 outputs"),
    "cycle": (lambda d: _node(d, "c").update(inputs=[["r", 0]]),
              "the nodes form a cycle (c -> n -> r -> c)"),
    "missing-producer": (lambda d: _node(d, "n").update(inputs=[["ghost", 0]]),
                         "reads 'ghost', which is not a node of the graph"),
    "unknown-op": (lambda d: _node(d, "n").update(op="frobnicate"),
                   "op 'frobnicate' is not in the vocabulary"),
    "no-op": (lambda d: _node(d, "n").pop("op"), "has no string 'op'"),
    "zero-dim": (lambda d: _node(d, "input").update(output_shapes=[[1, 3, 0, 8]]),
                 "zero-size dimension in [(1, 3, 0, 8)] (a static 0, not a dynamic one)"),
    "negative-dim": (lambda d: _node(d, "input").update(output_shapes=[[1, 3, -1, 8]]),
                     "negative dimension"),
    "shape-string": (lambda d: _node(d, "c").update(output_shapes="abc"),
                     "output_shapes must be a list of shapes"),
    "ref-not-pair": (lambda d: _node(d, "n").update(inputs=["c"]),
                     "is not a [node name, output port] pair"),
    "duplicate-name": (lambda d: d["nodes"].append(dict(_node(d, "c"))), "appears twice"),
    "nodes-not-list": (lambda d: d.update(nodes={"a": 1}), "no 'nodes' list"),
    "node-not-object": (lambda d: d["nodes"].append(3), "node #4 is a int"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_bad_graph_json_is_one_clear_error_naming_the_file(case, tmp_path):
    edit, words = BAD_JSON[case]
    d = _conv_json()
    edit(d)
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ModelLoadError) as info:
        from_json(str(path))
    msg = str(info.value)
    assert msg.startswith(f"{path}: graph JSON is ") and words in msg, msg
    assert "\n" not in msg


def test_nodes_in_any_order_load_producers_first():
    d = _conv_json()
    d["nodes"] = d["nodes"][::-1]
    g = from_json(json.dumps(d))
    assert g.topological_order() == ["input", "c", "n", "r"]


def test_json_without_shapes_gets_them_inferred():
    d = _conv_json()
    for n in d["nodes"]:
        if n["op"] != "input":
            n["input_shapes"], n["output_shapes"] = [], []
    assert from_json(json.dumps(d))["r"].output_shapes == ((1, 32, 8, 8),)
