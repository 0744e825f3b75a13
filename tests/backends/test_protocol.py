"""The measurement protocol on fake timers: statistics, adaptive rounds, settling."""

from __future__ import annotations

import itertools

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
