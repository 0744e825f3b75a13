"""The measurement protocol on fake timers: statistics, adaptive rounds, settling."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from nnmeter.backends import protocol as protocol_mod
from nnmeter.backends.protocol import (
    STATISTICS, Job, ProtocolSettings, calibration_ms, run_protocol, spread_of, summarise,
)

@pytest.fixture(autouse=True)
def no_preemption(monkeypatch):
    """Real preemption on a busy machine would make these tests flaky: pretend none."""
    monkeypatch.setattr(protocol_mod, "_involuntary_switches", lambda: 0)


FAST = dict(warmup_ms=0, warmup_runs=1, pause_ms=0, calibrate=False)


class Fake:
    """Returns scripted times (ms) instead of running anything."""

    def __init__(self, times):
        self._it = itertools.cycle(times)
        self.calls = 0

    def time_once(self) -> float:
        self.calls += 1
        return next(self._it)


def test_fixed_runs_and_low_quantile_statistic():
    s = ProtocolSettings(rounds=3, runs=4, statistic="min", **FAST)
    r = run_protocol(Fake([1.0, 1.2, 5.0, 1.1]), s)
    assert (r.rounds, r.runs, r.round_runs) == (3, 12, [4, 4, 4])
    assert r.latency_ms == 1.0 and r.min_ms == 1.0
    assert r.median_ms > r.latency_ms  # the slow outlier raises the median, not the min
    assert set(r.stats) == set(STATISTICS)


def test_adaptive_runs_follow_time_budget():
    s = ProtocolSettings(rounds=2, round_ms=10.0, **FAST)
    r = run_protocol(Fake([0.5]), s)
    assert r.round_runs == [20, 20]  # 10 ms budget / 0.5 ms per run
    r = run_protocol(Fake([50.0]), s)
    assert r.round_runs == [s.min_runs, s.min_runs]  # slow model: min_runs per round


def test_unsettled_rounds_add_rounds_until_the_best_three_agree():
    # warm-up, then rounds of 4 runs at 1, 2, 2, 1, 2, 1 ms: the third 1-ms round settles it
    times = [1.0] + [1.0] * 4 + [2.0] * 8 + [1.0] * 4 + [2.0] * 4 + [1.0] * 4
    s = ProtocolSettings(rounds=2, runs=4, max_rounds=10, spread_threshold=0.05, **FAST)
    r = run_protocol(Fake(times), s)
    assert r.rounds == 6 and r.extra["settled"] is True and r.spread == pytest.approx(1.0)
    capped = run_protocol(Fake(times), ProtocolSettings(rounds=2, runs=4, max_rounds=5, **FAST))
    assert capped.rounds == 5 and capped.extra["settled"] is False
    steady = run_protocol(Fake([1.0]), s)
    assert steady.rounds == 2 and steady.extra["settled"] is True and steady.spread == 0.0


def test_spread_and_summarise():
    rounds = [np.array([1.0, 1.0]), np.array([1.1, 1.1])]
    assert spread_of(rounds) == pytest.approx(0.1)
    st = summarise(rounds)
    assert st["min"] == 1.0 and st["median_round_min"] == pytest.approx(1.05)


def test_calibration_is_positive_and_recorded():
    assert calibration_ms(repeats=1, runs=3) > 0
    s = ProtocolSettings(rounds=1, runs=2, warmup_ms=0, warmup_runs=1, pause_ms=0)
    r = run_protocol(Fake([1.0]), s)
    assert r.extra["calibration_ms"] > 0 and "drift" in r.extra and r.extra["remeasured"] >= 0


def test_settings_and_job_round_trip():
    s = ProtocolSettings(rounds=7, statistic="p10")
    j = Job(model="/m.onnx", backend_id="ort-cpu", protocol=s)
    assert Job.from_dict(j.as_dict()) == j
    assert s.with_overrides(rounds=None, runs=3).runs == 3
    with pytest.raises(ValueError, match="unknown protocol settings"):
        ProtocolSettings.from_dict({"roundz": 3})
    with pytest.raises(ValueError, match="statistic"):
        ProtocolSettings(statistic="average")


def test_preempted_rounds_are_set_aside_and_retried(monkeypatch):
    # every run of the first two rounds is preempted (switch count moves during it)
    calls = itertools.count()
    state = {"dirty": True}
    monkeypatch.setattr(protocol_mod, "_involuntary_switches",
                        lambda: next(calls) if state["dirty"] else 0)
    fake = Fake([1.0])
    s = ProtocolSettings(rounds=2, runs=4, contention_pause_ms=0, **FAST)
    orig = protocol_mod._time_round

    def counting(prepared, runs):
        out = orig(prepared, runs)
        counting.n += 1
        if counting.n >= 2:
            state["dirty"] = False
        return out

    counting.n = 0
    monkeypatch.setattr(protocol_mod, "_time_round", counting)
    r = run_protocol(fake, s)
    assert r.extra["noisy_rounds"] == 2 and r.extra["quiet"] is True
    assert r.rounds == 2 and r.extra["dirty_runs"] == 8 and r.extra["total_runs"] == 16


def test_all_rounds_preempted_falls_back_and_flags(monkeypatch):
    calls = itertools.count()
    monkeypatch.setattr(protocol_mod, "_involuntary_switches", lambda: next(calls))
    s = ProtocolSettings(rounds=2, runs=3, max_noisy_rounds=3, contention_pause_ms=0, **FAST)
    r = run_protocol(Fake([2.0]), s)
    assert r.extra["quiet"] is False and r.extra["noisy_rounds"] == 4
    assert r.latency_ms == 2.0 and r.runs == 12


def _scripted_timer(sample_ms):
    """A ``perf_counter_ns`` stand-in: each pair of calls spans the next of ``sample_ms``."""
    ticks = iter(t for ms in sample_ms for t in (0, int(ms * 1e6)))
    return lambda: next(ticks)


def test_memory_probe_keeps_its_fastest_sample_and_flags_slow_ones():
    probe = protocol_mod.MemoryProbe(4096, timer=_scripted_timer([2.0, 1.0, 1.1, 1.5]))
    assert probe.ratio(5.0) == 1.0  # nothing sampled yet: nothing to compare with
    assert [probe.sample() for _ in range(4)] == [2.0, 1.0, 1.1, 1.5]
    assert probe.best_ms == 1.0 and probe.ratio(1.5) == pytest.approx(1.5)
    assert not probe.slow(1.1, 0.15) and probe.slow(1.5, 0.15) and probe.slow_streak == 1
    assert not probe.slow(1.0, 0.15) and probe.slow_streak == 0


def test_memory_probe_stops_setting_rounds_aside_when_slowness_persists():
    probe = protocol_mod.MemoryProbe(4096, timer=_scripted_timer([1.0]))
    probe.sample()
    verdicts = [probe.slow(2.0, 0.15) for _ in range(protocol_mod.PERSISTENT_AFTER + 3)]
    assert all(verdicts[:protocol_mod.PERSISTENT_AFTER])
    assert not any(verdicts[protocol_mod.PERSISTENT_AFTER:])
    assert not probe.slow(1.0, 0.15) and probe.slow(2.0, 0.15)  # a quiet sample resets it


def test_memory_probe_baseline_is_shared_across_processes_by_file(tmp_path):
    path = tmp_path / "cache" / "zen-64MiB.json"
    first = protocol_mod.MemoryProbe(4096, baseline=path, timer=_scripted_timer([3.0, 2.0]))
    first.sample(), first.sample()
    assert json.loads(path.read_text())["best_ms"] == 2.0
    later = protocol_mod.MemoryProbe(4096, baseline=path, timer=_scripted_timer([2.6]))
    assert later.best_ms == 2.0 and later.ratio(later.sample()) == pytest.approx(1.3)
    assert json.loads(path.read_text())["best_ms"] == 2.0  # a slower sample is not stored
    # another buffer size, or a damaged record, starts from this process's own samples
    assert protocol_mod.MemoryProbe(8192, baseline=path).best_ms == float("inf")
    path.write_text("{not json")
    assert protocol_mod.MemoryProbe(4096, baseline=path).best_ms == float("inf")


class _Neighbour:
    """A model and a memory probe that share one host: while the scripted probe sample
    was slow, the model runs at 3 ms instead of 1 ms."""

    def __init__(self, probe_ms):
        self.slow = False
        samples = iter(probe_ms)
        me = self

        class Probe(protocol_mod.MemoryProbe):
            def sample(self):
                ms = next(samples)
                me.slow = ms > 1.2
                self.best_ms = min(self.best_ms, ms)
                return ms

        self.probe = Probe(4096)
        self.calls = 0

    def time_once(self):
        self.calls += 1
        return 3.0 if self.slow else 1.0


def test_rounds_timed_while_the_memory_probe_was_slow_are_set_aside():
    # the first sample sets the fastest (1.0); then two slow samples, then quiet ones
    host = _Neighbour([1.0, 2.0, 2.0] + [1.0] * 20)
    s = ProtocolSettings(rounds=3, runs=4, contention_pause_ms=0, memory_gate=True, **FAST)
    r = run_protocol(host, s, host.probe)
    assert r.latency_ms == 1.0 and r.rounds == 3
    assert r.extra["contended_rounds"] == 2 and r.extra["quiet"] is True
    assert r.extra["memory_ratio_max"] == pytest.approx(2.0)
    assert r.extra["memory_probe_best_ms"] == 1.0 and not r.extra["memory_persistent"]
    assert r.median_ms == 1.0  # the 3-ms rounds are not among those reported
    assert r.extra["memory_ratio"] == 1.0  # quiet before and after the job
    # the same host with the probe switched off reports every round
    host = _Neighbour([1.0, 2.0, 2.0] + [1.0] * 20)
    off = run_protocol(host, ProtocolSettings(rounds=3, runs=4, memory_probe=False, **FAST),
                       host.probe)
    assert "contended_rounds" not in off.extra and "memory_ratio" not in off.extra
    with pytest.raises(ValueError, match="memory_threshold"):
        ProtocolSettings(memory_threshold=0)


def test_by_default_the_memory_probe_is_recorded_around_the_job_not_used_as_a_gate():
    # slow before the job (the model runs at 3 ms throughout), quiet after it
    host = _Neighbour([3.0, 1.0])
    r = run_protocol(host, ProtocolSettings(rounds=2, runs=3, **FAST), host.probe)
    assert r.latency_ms == 3.0 and r.rounds == 2  # every round kept
    assert r.extra["memory_probe_ms"] == [3.0, 1.0] and r.extra["memory_ratio"] == 3.0
    assert "contended_rounds" not in r.extra
