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
    with pytest.raises(ModelLoadError, match="does not exist"):
        from_json(json.dumps(data))
