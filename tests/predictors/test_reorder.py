"""The profiled reorder curve: fit, file, and how it scales the relu line."""

from __future__ import annotations

import json
import math

import pytest

from nnmeter.errors import DatasetError, FingerprintMismatchError
from nnmeter.predictors.reorder import (IN_CACHE_ELEMENTS, REORDER_FILE, fit_reorder_curve,
                                        read_reorders, reorder_cost_ms, reorder_ms,
                                        write_reorders)


def _curve():
    # 0.2 ns per element while in cache, 0.5 ns past 2 M elements, and a small-size floor
    pts = [(500, 0.002), (5_000, 0.003)]
    pts += [(n, 0.2e-6 * n) for n in (60_000, 120_000, 250_000, 500_000, 900_000)]
    pts += [(n, 0.5e-6 * n) for n in (2_000_000, 4_000_000, 8_000_000)]
    return fit_reorder_curve(pts, bins=10)


def test_curve_is_non_decreasing_and_linear_past_its_ends():
    c = _curve()
    assert all(b >= a for a, b in zip(c["log_ms"], c["log_ms"][1:]))
    assert reorder_ms(c, 8_000_000) == pytest.approx(4.0, rel=1e-6)
    assert reorder_ms(c, 16_000_000) == pytest.approx(8.0, rel=1e-6)
    assert reorder_ms(c, 0) == 0.0
    with pytest.raises(DatasetError):
        fit_reorder_curve([(0, 1.0)])


def test_line_is_kept_in_cache_and_scaled_past_it():
    c = _curve()
    line = (0.001, 1e-7)
    # small and in-cache tensors: the line, whatever the profiler read there
    for n in (500, 100_000, IN_CACHE_ELEMENTS[1]):
        assert reorder_ms(c, n, line) == pytest.approx(line[0] + line[1] * n)
    # past the cache: 0.5 / 0.2 times the line
    n = 4_000_000
    assert reorder_ms(c, n, line) == pytest.approx((line[0] + line[1] * n) * 2.5, rel=1e-6)


def test_cost_never_exceeds_the_profiled_node():
    c = _curve()
    # a line below the profiled nodes (the Zen 4's case) is kept as it is
    low = (0.0005, 0.5e-7)
    for n in (5_000, 100_000, 500_000):
        assert reorder_cost_ms(n, low, c) == pytest.approx(reorder_ms(c, n, low))
        assert reorder_cost_ms(n, low, c) < reorder_ms(c, n)
    # a steeper line (a device whose relu is slow per element) is held to the curve
    steep = (0.001, 1e-6)
    for n in (100_000, 500_000, 4_000_000):
        assert reorder_ms(c, n, steep) > reorder_ms(c, n)
        assert reorder_cost_ms(n, steep, c) == pytest.approx(reorder_ms(c, n))
    # without a profiled curve there is nothing to bound it by: the line
    assert reorder_cost_ms(100_000, steep) == pytest.approx(steep[0] + steep[1] * 100_000)


class _DS:
    def __init__(self, directory, fid="abc"):
        self.directory, self.fingerprint_id = directory, fid


def test_file_round_trip_and_its_errors(tmp_path):
    ds = _DS(tmp_path)
    assert read_reorders(ds) is None
    write_reorders(tmp_path, {"fingerprint_id": "abc", "curve": _curve(), "points": []})
    assert read_reorders(ds)["log_elements"] == _curve()["log_elements"]
    with pytest.raises(FingerprintMismatchError):
        read_reorders(_DS(tmp_path, "other"))
    (tmp_path / REORDER_FILE).write_text(json.dumps({"fingerprint_id": "abc", "curve": {}}))
    with pytest.raises(DatasetError, match="curve"):
        read_reorders(ds)
    (tmp_path / REORDER_FILE).write_text("{")
    with pytest.raises(DatasetError, match="not valid JSON"):
        read_reorders(ds)
    assert math.isfinite(reorder_ms(_curve(), 123_456))


def test_training_subtracts_the_steeper_reorders_of_large_kernels(tmp_path,
                                                                   linear_cost_profiler):
    from nnmeter.builder import build_predictor
    from nnmeter.fusion.rules import FusionRules
    from nnmeter.ir import GraphBuilder
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
    from nnmeter.predictors.train import train_predictor

    rules = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True,
                                                         ("bn", "relu"): True})
    convs = [{"h": h, "w": h, "cin": c, "cout": c, "kernel": 1, "stride": 1, "groups": 1,
              "pads": None} for h in (14, 56, 112, 224) for c in (16, 32, 64, 128)]
    relus = [{"h": h, "w": h, "cin": c} for h in (7, 14, 28, 56) for c in (16, 32)]
    build_predictor("ort-cpu", dataset="ort-cpu", budget_minutes=5, root=tmp_path, profiler=linear_cost_profiler,
                    rules=rules, prior_configs={"conv-bn-relu": convs, "relu": relus},
                    progress=False, train=False, max_samples_per_type=16, rounds=0,
                    initial_fraction=1.0, calibrate_weight_stream=False,
                    calibrate_in_model=False)
    d = kernel_dataset_dir("ort-cpu", tmp_path)
    b = GraphBuilder("m", (1, 128, 224, 224))
    g = b.build([b.relu(b.bn(b.conv(b.x, 128, 1)))])
    line = train_predictor("ort-cpu", d, rules)
    assert line.composition.get("reorders").curve is None
    # past the caches a reorder costs 3x its in-cache rate per element (the profiled
    # nodes above the relu line, as profiled nodes are: they bound the cost from above)
    pts = [(n, 1e-6 * n) for n in (60_000, 200_000, 900_000)]
    pts += [(n, 3e-6 * n) for n in (3_000_000, 6_400_000, 12_000_000)]
    write_reorders(d, {"fingerprint_id": KernelDataset(d, "ort-cpu").fingerprint_id,
                       "curve": fit_reorder_curve(pts, bins=6), "points": pts})
    steep = train_predictor("ort-cpu", d, rules)
    assert steep.composition.get("reorders").curve["log_elements"]
    conv_line = line.predict(g, check_device=False).rows[0].predicted_ms
    conv_steep = steep.predict(g, check_device=False).rows[0].predicted_ms
    assert conv_steep < conv_line  # more of its single-kernel time was reorders
