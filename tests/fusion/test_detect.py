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


# -- edge conversions and ties ------------------------------------------------------

def _node(op_type, covers=(), time_ms=0.01):
    from nnmeter.backends import ExecutedNode

    return ExecutedNode(op_type.lower(), op_type, tuple(covers), time_ms)


def test_edge_share_counts_only_conversions_at_the_model_edges():
    from nnmeter.fusion.detect import edge_share

    # input reorder, conv, an internal reorder between the two ops, pool, output reorder
    nodes = [_node("Reorder", time_ms=0.1), _node("Convolution", ["op1"], 0.4),
             _node("Reorder", time_ms=0.2), _node("Pooling", ["op2"], 0.2),
             _node("Reorder", time_ms=0.1)]
    assert edge_share(nodes) == pytest.approx(0.2)
    # ONNX Runtime names its NCHWc reorders with the domain in front
    ort = [_node("com.microsoft.nchwc.ReorderInput", time_ms=0.002),
           _node("com.microsoft.nchwc.Conv", ["op1"], 0.006),
           _node("com.microsoft.nchwc.ReorderOutput", time_ms=0.002)]
    assert edge_share(ort) == pytest.approx(0.4)
    # an uncovered node that is not a conversion is work, not edge
    assert edge_share([_node("Relu", ["op1"], 0.01), _node("HardSigmoid", [], 0.01)]) == 0.0


def test_edge_share_is_unknown_without_times_or_covered_nodes():
    from nnmeter.fusion.detect import edge_share

    assert edge_share([_node("Reorder"), _node("Conv", ["op1"], None)]) is None
    assert edge_share([_node("Reorder")]) is None
    assert edge_share([]) is None


def test_edge_conversion_ops_include_the_boundary_calibration_ones():
    from nnmeter.fusion.detect import EDGE_CONVERSION_OPS
    from nnmeter.predictors.boundary import LAYOUT_OPS

    assert LAYOUT_OPS <= EDGE_CONVERSION_OPS


def test_edge_shares_remove_the_conversions_a_pair_shares():
    # conv alone 0.5 ms (0.2 of it converting in and out), pool alone 0.3 ms (0.1),
    # the pair 0.65 ms (0.1 of edge conversions): the raw saving is the conversions
    t1, t2, t12 = Timing(0.5, 0.0), Timing(0.3, 0.0), Timing(0.65, 0.0)
    assert decide_pair(t1, t2, t12).fused
    d = decide_pair(t1, t2, t12, edge_shares=(0.4, 1 / 3, 0.1 / 0.65))
    assert not d.fused and d.saving_ms == pytest.approx(0.3 + 0.2 - 0.55)


class EdgeProfiler(ScriptedProfiler):
    """ScriptedProfiler whose single-op models convert layout at both edges.

    Every model pays ``EDGE_MS`` in and out; a conv->maxpool pair therefore measures
    2 * EDGE_MS less than its parts (plus the overhead) without fusing.
    """

    EDGE_MS = 0.2

    def __init__(self, timed: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.timed = timed
        self.profiles = 0

    def _ops(self, graph):
        return [n.op for n in graph.topological_nodes()
                if n.op != "input" and math.prod(n.output_shape) > 8]

    def measure(self, graph, on_error="record", **kw):
        m = super().measure(graph, on_error, **kw)
        if self._ops(graph):
            t = m.latency_ms + 2 * self.EDGE_MS
            m = Measurement(t, t, t, 0.0, self.spread, 5, 50, DEVICE)
        return m

    def profile(self, graph, runs=10):
        self.profiles += 1
        ops = self._ops(graph)
        time_ms = self.EDGE_MS if self.timed else None
        return ([_node("Reorder", time_ms=time_ms)]
                + [_node(op, [f"op{i + 1}"], COST_MS.get(op, 0.05)) for i, op in enumerate(ops)]
                + [_node("Reorder", time_ms=time_ms)])


def test_detection_removes_edge_conversions_and_records_them(tmp_path):
    out = tmp_path / "r.json"
    only = ["conv->maxpool", "conv->relu"]
    plain = detect_fusion("fake-cpu", out=out, only=only, progress=False,
                          profiler=EdgeProfiler(), edge_correction=False)
    assert plain.fuses("conv", "maxpool")  # the shared conversions look like a fusion
    prof = EdgeProfiler()
    rules = detect_fusion("fake-cpu", out=out, only=only, progress=False, profiler=prof)
    assert not rules.fuses("conv", "maxpool") and rules.fuses("conv", "relu")
    p = next(p for p in rules.patterns if p.name == "conv->maxpool")
    assert p.extra["edge"]["share"]["op1"] == pytest.approx(0.4 / 1.4, abs=1e-4)
    assert p.extra["edge"]["removed_ms"]["op2"] > 0
    data = json.loads(out.read_text())
    assert data["detection"]["edge_correction"] is True
    assert data["detection"]["edge_corrected_cases"] == 2
    # op1 is shared by both cases; the sixth is the hand-off probe (a null model), which
    # this profiler reports without a node for its relu: no hand-off is measured
    assert data["detection"]["profiles"] == prof.profiles == 6
    assert data["detection"]["handoff_correction"] is False


def test_untimed_profiles_keep_the_plain_rule(tmp_path):
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json", only=["conv->maxpool"],
                          progress=False, profiler=EdgeProfiler(timed=False))
    (p,) = rules.patterns
    assert p.fused and "untimed" in p.extra["edge"]["skipped"]


def test_backend_without_executed_graph_keeps_the_plain_rule(tmp_path):
    class NoProfile(EdgeProfiler):
        def profile(self, graph, runs=10):
            self.profiles += 1
            raise NotImplementedError("this runtime cannot tell")

    prof = NoProfile()
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json",
                          only=["conv->maxpool", "conv->relu"], progress=False, profiler=prof)
    assert prof.profiles == 1  # asked once, then not again
    assert all("cannot tell" in p.extra["edge"]["skipped"] for p in rules.patterns)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["detection"]["edge_correction"] is False


def test_ties_go_to_split(tmp_path):
    # conv->relu is fused, but with a noise larger than any margin the decision is a tie
    kw = dict(only=["conv->relu"], progress=False, max_remeasure=1)
    rules = detect_fusion("fake-cpu", out=tmp_path / "a.json",
                          profiler=ScriptedProfiler(spread=0.5), **kw)
    (p,) = rules.patterns
    assert p.close and not p.fused and p.extra["tie"]["leaned_to"] == "fused"
    kept = detect_fusion("fake-cpu", out=tmp_path / "b.json", tie_to_split=False,
                         profiler=ScriptedProfiler(spread=0.5), **kw)
    assert kept.patterns[0].close and kept.patterns[0].fused
    # a multi-output tie goes to "none"
    rules = detect_fusion("fake-cpu", out=tmp_path / "c.json", only=["conv->{relu,add}"],
                          progress=False, max_remeasure=0,
                          profiler=ScriptedProfiler(spread=0.5))
    (p,) = rules.patterns
    assert not p.fused and p.extra["chosen"] == "none" and p.extra["tie"]["leaned_to"] != "none"


def test_resume_reuses_journaled_profiles(tmp_path):
    out = tmp_path / "r.json"
    journal = tmp_path / "r.json.partial.jsonl"
    first = EdgeProfiler()
    from nnmeter.fusion.detect import _null_model, _Store
    from nnmeter.fusion.testcases import build_testcases

    store = _Store(first.measure, journal, resume=False, profile=first.profile)
    for g in build_testcases(only=["conv->maxpool"])[0].models.values():
        store.ensure(g)
        store.edge(g)
    store.view(_null_model(1))  # the hand-off probe
    second = EdgeProfiler()
    detect_fusion("fake-cpu", out=out, only=["conv->maxpool"], progress=False,
                  profiler=second)
    assert second.profiles == 0 and second.calls == 2  # only the overhead probes


def test_repeat_spread_is_the_gap_to_the_next_best_repeat():
    from nnmeter.fusion.detect import _Store, _null_model

    times = iter([0.010, 0.030, 0.0101])  # one disturbed repeat, two that agree

    def measure(graph):
        t = next(times)
        return Measurement(t, t, t, 0.0, 0.002, 5, 50, DEVICE)

    store = _Store(measure, None, False)
    g = _null_model(1)
    for _ in range(3):
        store.measure_new(g)
    t = store.timing(g)
    assert t.latency_ms == pytest.approx(0.010) and t.repeats == 3
    assert t.spread == pytest.approx(0.01)  # not the 100 % the slow repeat would give
    assert t.as_dict()["samples_ms"] == [0.01, 0.0101, 0.03]


def test_a_profiler_that_times_nothing_is_asked_once(tmp_path):
    prof = EdgeProfiler(timed=False)

    def untimed(graph, runs=10):
        prof.profiles += 1
        return [_node("Conv", ["op1"], None)]

    prof.profile = untimed
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json",
                          only=["conv->maxpool", "conv->relu"], progress=False, profiler=prof)
    assert prof.profiles == 2  # the first model, then the null-model probe; no more
    assert all("times no executed node" in p.extra["edge"]["skipped"] for p in rules.patterns)


# -- hand-off ------------------------------------------------------------------------

class HandoffProfiler(ScriptedProfiler):
    """ScriptedProfiler that also pays ``PER_ELEMENT_MS`` for every element of every
    graph input and output, outside any kernel, and runs reshapes as views (free, and
    reported untimed) unless ``reshape_kernel``."""

    PER_ELEMENT_MS = 3e-6  # per element handed in and out (split by IN_SHARE)
    IN_SHARE = 0.5

    def __init__(self, reshape_kernel: bool = False, in_share: float = 0.5, **kw) -> None:
        super().__init__(**kw)
        self.reshape_kernel = reshape_kernel
        self.IN_SHARE = in_share
        self.profiles = 0

    def measure(self, graph, on_error="record", **kw):
        m = super().measure(graph, on_error, **kw)
        t = m.latency_ms
        if not self.reshape_kernel:
            t -= 0.05 * sum(n.op in ("reshape", "split") and math.prod(n.output_shape) > 8
                            for n in graph.topological_nodes())
        ins = sum(math.prod(graph.shape_of(i)) for i in graph.input_names)
        outs = sum(math.prod(graph.shape_of(o)) for o in graph.outputs)
        t += self.IN_SHARE * 2 * self.PER_ELEMENT_MS * ins
        t += (1 - self.IN_SHARE) * 2 * self.PER_ELEMENT_MS * outs
        return Measurement(t, t, t, 0.0, self.spread, 5, 50, DEVICE)

    def profile(self, graph, runs=10):
        self.profiles += 1
        views = () if self.reshape_kernel else ("reshape", "split")
        return [_node(n.op, [n.name], None if n.op in views else COST_MS.get(n.op, 0.05))
                for n in graph.topological_nodes() if n.op != "input"]


def test_passthrough_model_only_reshapes():
    from nnmeter.fusion.detect import passthrough_model

    g = passthrough_model((1, 64, 28, 28))
    (node,) = [n for n in g.topological_nodes() if n.op != "input"]
    assert node.name == "op1" and node.op == "reshape"
    assert node.output_shape == (1, 64 * 28 * 28)
    assert passthrough_model((1, 428)).node("op1").output_shape == (428, 1)
    assert passthrough_model((1, 1, 1, 1)).node("op1").output_shape == (1, 1)


def test_handoff_is_removed_from_the_saving(tmp_path):
    only = ["relu->maxpool", "conv->relu", "bn->{relu,add}"]
    plain = detect_fusion("fake-cpu", out=tmp_path / "a.json", only=only, progress=False,
                          profiler=HandoffProfiler(), handoff_correction=False,
                          edge_correction=False)
    # relu's output crosses two model boundaries in the separate models: looks fused
    assert plain.fuses("relu", "maxpool")
    rules = detect_fusion("fake-cpu", out=tmp_path / "b.json", only=only, progress=False,
                          profiler=HandoffProfiler(), edge_correction=False)
    assert not rules.fuses("relu", "maxpool") and rules.fuses("conv", "relu")
    p = next(p for p in rules.patterns if p.name == "relu->maxpool")
    n = 64 * 28 * 28  # relu's output
    h = p.extra["handoff_ms"]  # half of H per crossing: relu's output crosses twice
    assert h["op1"] + h["op2"] - h["block"] == pytest.approx(
        2 * HandoffProfiler.PER_ELEMENT_MS * n, rel=1e-3)
    assert p.saving_ms == pytest.approx(0.0, abs=1e-4)  # nothing fused, nothing left
    multi = next(p for p in rules.patterns if p.kind == "multi_output")
    assert not multi.fused and multi.extra["chosen"] == "none"
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["detection"]["handoff_correction"] is True
    rec = data["detection"]["handoff_ms"]["1x64x28x28"]
    assert rec["in"] == pytest.approx(HandoffProfiler.PER_ELEMENT_MS * n, rel=1e-2)
    assert rec["out"] == pytest.approx(HandoffProfiler.PER_ELEMENT_MS * n, rel=1e-2)


def test_an_output_only_handoff_leaves_the_ops_their_own_time(tmp_path):
    # OpenVINO's case: inputs are read in place, outputs are copied
    only = ["relu->maxpool", "conv->relu", "bn->relu"]
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json", only=only, progress=False,
                          profiler=HandoffProfiler(in_share=0.0), edge_correction=False)
    data = json.loads((tmp_path / "r.json").read_text())
    n = 64 * 28 * 28
    rec = data["detection"]["handoff_ms"]["1x64x28x28"]
    assert rec["in"] == pytest.approx(0.0, abs=1e-6)
    assert rec["out"] == pytest.approx(2 * HandoffProfiler.PER_ELEMENT_MS * n, rel=1e-2)
    assert not rules.fuses("relu", "maxpool") and rules.fuses("conv", "relu")
    p = next(p for p in rules.patterns if p.name == "relu->maxpool")
    assert p.saving_ms == pytest.approx(0.0, abs=1e-4)
    # relu alone keeps its own 0.2 ms: the threshold is half of it, not of nothing
    assert p.threshold_ms == pytest.approx(0.5 * COST_MS["relu"], rel=1e-2)


def test_no_handoff_where_the_reshape_runs_a_kernel(tmp_path):
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json", only=["relu->maxpool"],
                          progress=False, edge_correction=False,
                          profiler=HandoffProfiler(reshape_kernel=True))
    (p,) = rules.patterns
    assert set(p.extra["handoff_ms"].values()) == {0.0}
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["detection"]["handoff_ms"]["1x64x28x28"] == "the flatten runs a kernel"


def test_a_model_of_views_alone_does_not_turn_profiling_off(tmp_path):
    # OpenVINO reports its reshape not run: a reshape-only model is all untimed, though
    # the profiler times every model that runs a kernel
    prof = HandoffProfiler()
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json",
                          only=["relu->reshape", "relu->maxpool"], progress=False,
                          profiler=prof)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["detection"]["edge_correction"] is True
    assert data["detection"]["handoff_correction"] is True
    p = next(p for p in rules.patterns if p.name == "relu->maxpool")
    assert "share" in p.extra["edge"]


def test_a_multi_output_model_dearer_than_its_parts_fused_nothing():
    from nnmeter.fusion.detect import _decide_case
    from nnmeter.fusion.testcases import build_testcases

    (case,) = build_testcases(only=["conv->{relu,add}"])
    t = {"p": Timing(0.50, 0.001), "c1": Timing(0.10, 0.001), "c2": Timing(0.12, 0.001),
         "p+c1": Timing(0.50, 0.001), "p+c2": Timing(0.62, 0.001)}
    # none = 0.72; conv+relu = 0.62; conv+add = 0.72: a block at 0.80 is nearest to a
    # fused hypothesis only by accident of its excess
    pattern, margin, _ = _decide_case(case, {**t, "block": Timing(0.80, 0.001)}, 0.5)
    assert not pattern["fused"] and pattern["extra"]["chosen"] == "none"
    assert margin == pytest.approx(0.08)
    # below the unfused sum, the nearest hypothesis still wins
    pattern, _, _ = _decide_case(case, {**t, "block": Timing(0.63, 0.001)}, 0.5)
    assert pattern["fused"] and pattern["extra"]["chosen"] == "conv+relu"


class LoadedProfiler(ScriptedProfiler):
    """The first measurement of the fused pair runs on a busy core: 60 % slower and
    mostly preempted, with a small spread (a decision outside the noise, but wrong)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def measure(self, graph, on_error="record", **kw):
        m = super().measure(graph, on_error, **kw)
        ops = tuple(n.op for n in graph.topological_nodes() if n.op != "input")
        if ops == ("conv", "relu") and ops not in self.seen:
            self.seen.add(ops)
            t = m.latency_ms * 1.6
            return Measurement(t, t, t, 0.0, 0.01, 5, 20, DEVICE,
                               extra={"total_runs": 50, "dirty_runs": 30})
        return m


def test_a_decision_on_a_disturbed_measurement_is_measured_again(tmp_path):
    rules = detect_fusion("fake-cpu", out=tmp_path / "r.json", only=["conv->relu"],
                          progress=False, profiler=LoadedProfiler(), max_remeasure=2)
    (p,) = rules.patterns
    assert p.fused, "the busy first measurement turned the fusion into 'not fused'"
    assert p.extra["flipped"][0] is False and p.extra["flipped"][-1] is True
    assert p.times_ms["block"]["repeats"] >= 2
