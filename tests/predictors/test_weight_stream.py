"""The cold-weight floor: streaming rate fit, its file, and the predictor's use of it."""

from __future__ import annotations

import json
import shutil

import pytest

from nnmeter.errors import DatasetError, FingerprintMismatchError
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.train import train_predictor
from nnmeter.predictors.weight_stream import (STREAM_FILE, StreamPoint, fit_weight_stream,
                                              last_level_cache_bytes, read_weight_stream,
                                              stream_floor_ms, write_weight_stream)

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


def test_the_slowest_point_sets_the_rate():
    rec = fit_weight_stream([StreamPoint(1000, 1000, 0.1), StreamPoint(2000, 1000, 0.4)])
    assert rec["bytes_per_ms"] == pytest.approx(2000 * 1000 * 4 / 0.4)
    assert rec["rates_gb_s"] == [40.0, 20.0]  # 4 MB in 0.1 ms, 8 MB in 0.4 ms
    with pytest.raises(DatasetError):
        fit_weight_stream([StreamPoint(1000, 1000, 0.0)])


def test_floor_is_weight_bytes_over_rate():
    assert stream_floor_ms(1_000_000, 2e7) == pytest.approx(0.2)
    assert stream_floor_ms(1_000_000, 0.0) == 0.0


@pytest.fixture(scope="module")
def data_dir(conv_bn_relu_dir):
    return conv_bn_relu_dir


def _record(ds, rate):
    return {"backend_id": "ort-cpu", "fingerprint_id": ds.fingerprint_id,
            "bytes_per_ms": rate, "points": [],
            "llc_bytes": 0}  # every model overflows it


def test_file_round_trip_and_its_errors(data_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    ds = KernelDataset(d, "ort-cpu")
    assert read_weight_stream(ds) is None
    write_weight_stream(d, _record(ds, 2e7))
    assert read_weight_stream(ds)["bytes_per_ms"] == 2e7
    (d / STREAM_FILE).write_text(json.dumps({**_record(ds, 2e7), "apply": False}))
    assert read_weight_stream(ds) is None
    (d / STREAM_FILE).write_text(json.dumps({**_record(ds, 2e7), "fingerprint_id": "other"}))
    with pytest.raises(FingerprintMismatchError):
        read_weight_stream(ds)
    (d / STREAM_FILE).write_text(json.dumps(_record(ds, 0)))
    with pytest.raises(DatasetError, match="bytes_per_ms"):
        read_weight_stream(ds)
    (d / STREAM_FILE).write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        read_weight_stream(ds)


def test_predictor_lifts_kernels_to_their_streaming_time(data_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    ds = KernelDataset(d, "ort-cpu")
    b = GraphBuilder("m", (1, 16, 56, 56))
    # a conv with few weights and much work per weight (1x1 at 56x56), then one with
    # many weights and little work per weight (3x3, stride 8, 7x7 output)
    g = b.build([b.relu(b.bn(b.conv(b.relu(b.bn(b.conv(b.x, 16, kernel=1))), 512,
                                    stride=8)))])
    hot = train_predictor("ort-cpu", d, RULES)
    assert hot.composition.get("weight_refetch") is None
    base = hot.predict(g, check_device=False)
    from nnmeter.kernels import KERNEL_TYPES

    names = KERNEL_TYPES.get("conv-bn-relu").feature_names
    # a rate that puts the wide conv's floor at three times its estimate
    wide = base.rows[1]
    rate = wide.features[names.index("params")] * 4 / (3 * wide.predicted_ms)
    write_weight_stream(d, _record(ds, rate))
    cold = train_predictor("ort-cpu", d, RULES)
    assert cold.composition.get("weight_refetch").bytes_per_ms == rate
    rep = cold.predict(g, check_device=False)
    for before, after in zip(base.rows, rep.rows):
        floor = stream_floor_ms(after.features[names.index("params")], rate)
        assert after.predicted_ms == pytest.approx(max(before.predicted_ms, floor))
    assert rep.rows[1].predicted_ms == pytest.approx(3 * wide.predicted_ms)  # lifted
    assert rep.rows[0].predicted_ms == pytest.approx(base.rows[0].predicted_ms)  # above it
    # the batch path applies the same floor
    assert cold.predict_many([g])[0] == pytest.approx(rep.total_ms)


def _two_convs(data_dir, tmp_path):
    """(copied dataset dir, its KernelDataset, a two-conv graph, its prediction without
    a streaming rate, the conv kernels' feature names)."""
    from nnmeter.kernels import KERNEL_TYPES

    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    b = GraphBuilder("m", (1, 16, 56, 56))
    # a conv with few weights and much work per weight (1x1 at 56x56), then one with
    # many weights and little work per weight (3x3, stride 8, 7x7 output)
    g = b.build([b.relu(b.bn(b.conv(b.relu(b.bn(b.conv(b.x, 16, kernel=1))), 512,
                                    stride=8)))])
    hot = train_predictor("ort-cpu", d, RULES).predict(g, check_device=False)
    return d, KernelDataset(d, "ort-cpu"), g, hot, KERNEL_TYPES.get("conv-bn-relu").feature_names


def test_models_that_fit_in_the_last_level_cache_keep_hot_weights(data_dir, tmp_path):
    d, ds, g, hot, names = _two_convs(data_dir, tmp_path)
    moved = sum(r.features[names.index("bytes")] for r in hot.rows)
    rate = 1e3  # a floor far above every estimate
    for llc, lifted in ((moved * 2, False), (moved / 2, True)):
        write_weight_stream(d, {**_record(ds, rate), "llc_bytes": llc})
        rep = train_predictor("ort-cpu", d, RULES).predict(g, check_device=False)
        assert (rep.total_ms > 2 * hot.total_ms) is lifted


def test_last_level_cache_is_read_from_the_os_or_unknown():
    size = last_level_cache_bytes()
    assert size is None or size >= 64 * 1024


def test_refetch_adds_the_weight_fetch_to_kernels_that_reuse_weights(data_dir, tmp_path):
    d, ds, g, hot, names = _two_convs(data_dir, tmp_path)
    rate = 5e5
    # every kernel fits the cache alone (measured hot), the model overflows it
    moved = [r.features[names.index("bytes")] for r in hot.rows]
    llc = max(moved) + 1
    assert sum(moved) > llc
    write_weight_stream(d, {**_record(ds, rate), "llc_bytes": llc, "refetch": True})
    pred = train_predictor("ort-cpu", d, RULES)
    assert pred.composition.get("weight_refetch").refetch is True
    rep = pred.predict(g, check_device=False)
    for before, after in zip(hot.rows, rep.rows):
        fetch = stream_floor_ms(after.features[names.index("params")], rate)
        assert after.predicted_ms == pytest.approx(before.predicted_ms + fetch)
