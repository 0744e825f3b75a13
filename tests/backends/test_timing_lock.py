"""The machine-wide timing lock: jobs of two processes queue instead of colliding."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.backends.timing_lock import timing_lock

HOLD = """
import sys, time
from nnmeter.backends.timing_lock import timing_lock
with timing_lock():
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def lock_file(tmp_path, monkeypatch):
    path = tmp_path / "timing.lock"
    monkeypatch.setenv("NNMETER_TIMING_LOCK", str(path))
    return path


def _holder(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_waits_for_the_first(lock_file):
    proc = _holder(1.0)
    try:
        with timing_lock() as lock:
            assert lock.state == "held"
            # the holder sleeps 1 s with the lock after saying so
            assert lock.wait_ms > 500, "got the lock while the other process held it"
    finally:
        proc.wait()


def test_a_job_stuck_behind_another_goes_on_and_says_so(lock_file):
    proc = _holder(5.0)
    try:
        with timing_lock(wait_s=0.2) as lock:
            assert lock.state == "timeout" and lock.wait_ms >= 200
            assert lock.as_extra()["timing_lock"] == "timeout"
    finally:
        proc.kill()
        proc.wait()


def test_nested_jobs_of_one_process_do_not_wait_for_themselves(lock_file):
    with timing_lock() as outer:
        t0 = time.monotonic()
        with timing_lock(wait_s=5) as inner:
            assert inner.state == "nested"
        assert time.monotonic() - t0 < 1 and outer.state == "held"


def test_the_lock_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("NNMETER_TIMING_LOCK", "off")
    with timing_lock() as lock:
        assert lock.state == "off"


def _m(**kw):
    extra = kw.pop("extra", {})
    base = dict(latency_ms=1.0, median_ms=1.0, min_ms=1.0, std_ms=0.0, spread=0.02, rounds=3,
                runs=30, device=DeviceInfo("cpu", 1, "fake", "1"))
    return Measurement(**{**base, **kw}, extra=extra)


@pytest.mark.parametrize("kw, words", [
    ({}, None),
    ({"spread": 0.46}, "spread 46% (over 10%)"),
    ({"extra": {"total_runs": 30, "dirty_runs": 12}}, "12 of 30 timed runs were preempted"),
    ({"extra": {"quiet": False}}, "no quiet round"),
    ({"extra": {"quiet": False, "contended_rounds": 9, "memory_ratio_max": 1.6}},
     "9 rounds ran while another tenant of the host slowed its memory"),
    ({"extra": {"quiet": True, "contended_rounds": 3, "memory_ratio_max": 1.4}}, None),
    ({"extra": {"memory_persistent": True, "memory_ratio_min": 1.3, "memory_ratio": 1.4}},
     "the host's memory was slow throughout"),
    ({"extra": {"memory_ratio": 1.6}}, "memory-bound probe at 1.60x its fastest"),
    ({"extra": {"memory_ratio": 1.1}}, None),
    ({"extra": {"drift_flag": True, "drift": 0.2}}, "changed speed"),
    ({"extra": {"timing_lock": "timeout", "lock_wait_ms": 900000}}, "held the machine's"),
    ({"extra": {"timing_lock": "held", "lock_wait_ms": 4200}}, "waited 4.2 s"),
])
def test_quality_warnings(kw, words):
    warnings = _m(**kw).quality_warnings()
    if words is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and words in warnings[0], warnings
