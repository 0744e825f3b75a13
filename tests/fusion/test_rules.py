"""Fusion rules JSON: round trip, lookups, schema validation errors."""

from __future__ import annotations

import json

import pytest

from nnmeter.errors import FusionRulesError
from nnmeter.fusion import FusionRules, load_rules
from nnmeter.fusion.rules import Pattern


def _rules() -> FusionRules:
    p = Pattern("conv->relu", "pair", ("conv", "relu"), True, close=True,
                times_ms={"op1": {"latency_ms": 1.0, "spread": 0.02},
                          "op2": {"latency_ms": 0.1, "spread": 0.05},
                          "block": {"latency_ms": 1.01, "spread": 0.02}},
                saving_ms=0.09, threshold_ms=0.05)
    mo = Pattern("conv->{relu,add}", "multi_output", ("conv", "relu", "add"), False)
    blk = Pattern("block:se", "block", ("gap", "conv"), True, extra={"block": "se"})
    return FusionRules("toy-cpu", {"fingerprint_id": "abc", "runtime": "toy"}, 0.5,
                       {"hw": 28}, (p, mo, blk), "2025-01-01T00:00:00Z")


def test_round_trip_through_a_file(tmp_path):
    r = _rules()
    path = tmp_path / "toy-cpu.json"
    r.to_json(path)
    back = load_rules(path)
    assert back == r
    assert back.fuses("conv", "relu") and not back.fuses("relu", "conv")
    assert back.fuses("conv", "identity")
    assert not back.multi_consumer_fuses("conv")
    assert back.block_fused("se") and not back.block_fused("hswish")
    assert back.multi_input_fuses("add")  # untested: pair rules decide
    assert back.fingerprint_id == "abc"


def test_load_by_backend_id_uses_the_rules_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NNMETER_FUSION_RULES_DIR", str(tmp_path))
    _rules().to_json(tmp_path / "toy-cpu.json")
    assert load_rules("toy-cpu").backend_id == "toy-cpu"
    assert load_rules("toy-cpu-t4").backend_id == "toy-cpu"  # thread suffix falls back
    with pytest.raises(FusionRulesError, match="nnmeter detect-fusion --backend nope"):
        load_rules("nope")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema_version=99), "schema_version is 99"),
    (lambda d: d.pop("backend_id"), "missing field 'backend_id'"),
    (lambda d: d.update(alpha="half"), "field 'alpha' has type str"),
    (lambda d: d["patterns"][0].update(kind="triple"), "is not one of"),
    (lambda d: d["patterns"][0].pop("fused"), "lacks 'fused'"),
    (lambda d: d["patterns"][0]["times_ms"].update(op1={"spread": 1}), "numeric latency_ms"),
    (lambda d: d["patterns"].append(dict(d["patterns"][0])), "duplicate pattern names"),
])
def test_schema_errors_say_what_is_wrong(tmp_path, mutate, message):
    data = _rules().to_dict()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FusionRulesError, match=message):
        load_rules(path)


def test_not_json_and_missing_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(FusionRulesError, match="not valid JSON"):
        load_rules(bad)
    with pytest.raises(FusionRulesError, match="no fusion rules file"):
        load_rules(tmp_path / "missing.json")
