"""Fusion detection: decisions with a scripted profiler, and a real run on ort-cpu."""

from __future__ import annotations

import json
import math

import pytest

from nnmeter.backends import DeviceInfo, Measurement
from nnmeter.fusion import detect_fusion, load_rules
from nnmeter.fusion.detect import Timing, decide_pair

COST_MS = {"conv": 1.0, "relu": 0.2, "bn": 0.2, "add": 0.3, "maxpool": 0.25}
DEVICE = DeviceInfo("cpu", 1, "fake", "1.0")


class ScriptedProfiler:
    """Times a model as the sum of its op costs, fusing conv->relu (relu becomes free)."""

    backend_id = "fake-cpu"

    def __init__(self, spread: float = 0.01) -> None:
        self.calls = 0
        self.spread = spread

    def measure(self, graph, on_error="record", **kw):
        self.calls += 1
        ops = [n.op for n in graph.topological_nodes()
               if n.op != "input" and math.prod(n.output_shape) > 8]  # the probe is ~free
        t = 0.01 + sum(COST_MS.get(o, 0.05) for o in ops)
        for n in graph.topological_nodes():
            if n.op == "relu" and graph.node(n.inputs[0].node).op == "conv":
                t -= COST_MS["relu"]
        return Measurement(t, t, t, 0.0, self.spread, 5, 50, DEVICE)

    def close(self):
        pass


def test_decide_pair_rule():
    d = decide_pair(Timing(1.0, 0.0), Timing(0.2, 0.0), Timing(1.0, 0.0), alpha=0.5)
    assert d.fused and d.saving_ms == pytest.approx(0.2) and d.threshold_ms == pytest.approx(0.1)
    d = decide_pair(Timing(1.0, 0.0), Timing(0.2, 0.0), Timing(1.2, 0.0))
    assert not d.fused and not d.close


def test_overhead_correction_removes_the_per_inference_bias():
    # two ~free ops whose times are the overhead (0.5 ms) plus a little: the raw rule
    # calls them fused only because T1 + T2 pays the overhead twice
    t1, t2, t12 = Timing(0.6, 0.0), Timing(0.55, 0.0), Timing(0.64, 0.0)
    raw = decide_pair(t1, t2, t12)
    net = decide_pair(t1, t2, t12, overhead_ms=0.5)
    assert raw.fused and not net.fused
    assert net.saving_ms == pytest.approx(0.01) and net.threshold_ms == pytest.approx(0.025)
    # times below the overhead floor at zero
    assert decide_pair(Timing(0.4, 0.0), t2, t12, overhead_ms=0.5).threshold_ms == 0.0


def test_measure_overhead_splits_inference_and_node_costs():
    from nnmeter.fusion.detect import _Store, measure_overhead

    class Fake:
        def measure(self, graph, on_error="record", **kw):
            t = 0.004 + 0.0005 * (len(graph) - 1)  # O_inf 4 us, 0.5 us per node
            return Measurement(t, t, t, 0.0, 0.0, 5, 50, DEVICE)

    store = _Store(lambda g: Fake().measure(g), None, False)
    o_inf, o_node = measure_overhead(store)
    assert o_inf == pytest.approx(0.004) and o_node == pytest.approx(0.0005)


def test_scripted_detection_decisions_and_file(tmp_path):
    prof = ScriptedProfiler()
    out = tmp_path / "fake-cpu.json"
    only = ["conv->relu", "conv->bn", "relu->conv", "conv->{relu,add}", "{conv,conv}->add"]
    rules = detect_fusion("fake-cpu", out=out, only=only, progress=False, profiler=prof)
    assert rules.fuses("conv", "relu") and not rules.fuses("conv", "bn")
    assert not rules.fuses("relu", "conv")
    assert rules.multi_consumer_fuses("conv")  # the conv+relu split explains the time best
    assert not rules.multi_input_fuses("add")
    loaded = load_rules(out)
    assert loaded == rules and loaded.device["fingerprint_id"] == DEVICE.fingerprint_id
    data = json.loads(out.read_text())
    p = next(p for p in data["patterns"] if p["name"] == "conv->relu")
    assert set(p["times_ms"]) == {"op1", "op2", "block"} and p["close"] is False
    assert p["extra"]["raw"]["fused"] is True and p["extra"]["overhead_ms"] > 0
    assert data["detection"]["overhead_ms"] > 0 and "node_overhead_ms" in data["detection"]
    assert not (tmp_path / "fake-cpu.json.partial.jsonl").exists()


def test_close_decisions_are_remeasured_and_flagged(tmp_path):
    prof = ScriptedProfiler(spread=0.5)  # noise larger than any margin
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json", only=["conv->bn"],
                          progress=False, profiler=prof, max_remeasure=2)
    (p,) = rules.patterns
    assert p.close and p.times_ms["block"]["repeats"] == 3


def test_resume_reuses_journaled_measurements(tmp_path):
    out = tmp_path / "r.json"
    first = ScriptedProfiler()
    detect_fusion("fake-cpu", out=out, only=["conv->relu"], progress=False, profiler=first)
    # simulate an interrupted run: journal left behind by hand
    journal = tmp_path / "r.json.partial.jsonl"
    sig_rows = []
    from nnmeter.fusion.testcases import build_testcases, graph_signature
    for g in build_testcases(only=["conv->relu"])[0].models.values():
        m = first.measure(g)
        sig_rows.append(json.dumps({"sig": graph_signature(g), "m": m.as_dict()}))
    journal.write_text("\n".join(sig_rows) + "\n")
    second = ScriptedProfiler()
    detect_fusion("fake-cpu", out=out, only=["conv->relu"], progress=False, profiler=second)
    assert second.calls == 2  # only the two overhead probes were new


@pytest.mark.integration
def test_detection_on_ort_cpu(tmp_path):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    out = tmp_path / "ort-cpu.json"
    rules = detect_fusion("ort-cpu", out=out, only=["conv->relu", "relu->maxpool", "block:gap"],
                          progress=False, max_remeasure=1,
                          protocol={"rounds": 3, "round_ms": 10.0, "calibrate": False})
    data = json.loads(out.read_text())
    assert data["backend_id"] == "ort-cpu" and data["schema_version"] == 1
    assert data["device"]["runtime"] and data["device"]["fingerprint_id"]
    assert {p["name"] for p in data["patterns"]} == {"conv->relu", "relu->maxpool", "block:gap"}
    for p in data["patterns"]:
        assert isinstance(p["fused"], bool)
        assert all(t["latency_ms"] > 0 for t in p["times_ms"].values())
    assert load_rules(out) == rules
