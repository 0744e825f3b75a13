"""Rows whose latency is not a plausible number of milliseconds are skipped, loudly."""

from __future__ import annotations

import logging

from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.kernel_data import load_kernel_data


def test_garbage_and_absurd_latencies_are_skipped_with_a_warning(tmp_path, caplog):
    ds = KernelDataset(tmp_path, "ort-cpu")
    good = {"h": 14, "w": 14, "cin": 32}
    for lat in (0.1, "garbage", 1e308, True, -1.0, None, float("nan"), 0.2):
        ds.append("relu", {"config": good, "latency_ms": lat})
    with caplog.at_level(logging.WARNING):
        data = load_kernel_data(ds, "relu")
    assert list(data.y) == [0.1, 0.2]
    assert "5 row(s) skipped" in caplog.text and "relu" in caplog.text
