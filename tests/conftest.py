"""Test-wide setup: runtimes that write into the home folder get a temporary one."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# onnxruntime, openvino, keras and matplotlib write caches and telemetry state into the
# home folder; give the whole test session a throw-away one before any of them loads.
# It holds the predictor caches the tests train (close to 1 GB), so it goes when the
# test process ends.
_HOME = tempfile.mkdtemp(prefix="nnmeter-test-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
os.environ["HOME"] = _HOME
os.environ["XDG_CACHE_HOME"] = os.path.join(_HOME, ".cache")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OPENVINO_TELEMETRY_OPT_OUT", "1")


class LinearCostProfiler:
    """A stand-in Profiler: every model takes a fixed linear function of its FLOPs and
    memory traffic, so builder and predictor tests run without a runtime."""

    def __init__(self) -> None:
        from nnmeter.backends.base import DeviceInfo

        self.device = DeviceInfo(cpu_model="fake cpu", cores=2, runtime="onnxruntime",
                                 runtime_version="1", settings={"threads": 1})

    def measure(self, graph, on_error="record", **protocol):
        from nnmeter.backends.base import Measurement

        c = graph.cost()
        ms = 0.01 + 2e-8 * c.flops + 1e-7 * c.memory_bytes
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=self.device)


@pytest.fixture(scope="session")
def linear_cost_profiler() -> LinearCostProfiler:
    return LinearCostProfiler()
