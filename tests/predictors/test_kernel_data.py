"""Rows whose latency is not a plausible number of milliseconds are skipped, loudly."""

from __future__ import annotations

import logging

from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.kernel_data import load_kernel_data


def test_garbage_and_absurd_latencies_are_skipped_with_a_warning(tmp_path, caplog):
    ds = KernelDataset(tmp_path, "ort-cpu")
    for i, lat in enumerate((0.1, "garbage", 1e308, True, -1.0, None, float("nan"), 0.2)):
        ds.append("relu", {"config": {"h": 14, "w": 14, "cin": 32 + i}, "latency_ms": lat})
    with caplog.at_level(logging.WARNING):
        data = load_kernel_data(ds, "relu")
    assert list(data.y) == [0.1, 0.2]
    assert "5 row(s) skipped" in caplog.text and "relu" in caplog.text


def test_a_configuration_measured_twice_keeps_its_fastest_row_and_first_origin(tmp_path):
    ds = KernelDataset(tmp_path, "ort-cpu")
    a, b = {"h": 14, "w": 14, "cin": 32}, {"h": 7, "w": 7, "cin": 64}
    ds.append("relu", {"config": a, "latency_ms": 0.30, "origin": "initial"})
    ds.append("relu", {"config": b, "latency_ms": 0.05, "origin": "round1"})
    ds.append("relu", {"config": dict(reversed(list(a.items()))), "latency_ms": 0.20,
                       "origin": "remeasure"})
    ds.append("relu", {"config": b, "latency_ms": 0.07, "origin": "remeasure"})
    data = load_kernel_data(ds, "relu")
    assert list(data.y) == [0.20, 0.05]
    assert list(data.origins) == ["initial", "round1"]
