"""The chain excess: its file, and training's use of it."""

from __future__ import annotations

import json
import shutil

import pytest

from nnmeter.errors import FingerprintMismatchError
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.predictors.chain import CHAIN_FILE, chain_excess_ms, read_chain
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.model import PredictorSettings
from nnmeter.predictors.train import train_predictor

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


@pytest.fixture(scope="module")
def data_dir(conv_bn_relu_dir):
    return conv_bn_relu_dir


def _copy_with_model(data_dir, tmp_path):
    """A writable copy of the dataset, its KernelDataset, and a conv-bn-relu model."""
    d = tmp_path / "copy"
    shutil.copytree(data_dir, d)
    b = GraphBuilder("m", (1, 64, 14, 14))
    return d, KernelDataset(d, "ort-cpu"), b.build([b.relu(b.bn(b.conv(b.x, 64, 3)))])


def test_excess_is_never_negative():
    assert chain_excess_ms({"excess_ms": -0.002}) == 0.0
    assert chain_excess_ms({"excess_ms": 0.002}) == 0.002


def test_training_subtracts_the_excess_from_every_kernel(data_dir, tmp_path):
    d, ds, g = _copy_with_model(data_dir, tmp_path)
    base = train_predictor("ort-cpu", d, RULES).predict(g, check_device=False).total_ms
    (d / CHAIN_FILE).write_text(json.dumps({"fingerprint_id": ds.fingerprint_id,
                                            "excess_ms": 0.001}))
    assert read_chain(ds)["excess_ms"] == 0.001
    pred = train_predictor("ort-cpu", d, RULES)
    assert pred.composition.get("chain").excess_ms() == 0.001
    assert pred.predict(g, check_device=False).total_ms < base
    off = train_predictor("ort-cpu", d, RULES, PredictorSettings(chain_correction=False))
    assert off.composition.get("chain") is None
    assert off.predict(g, check_device=False).total_ms == pytest.approx(base)
    (d / CHAIN_FILE).write_text(json.dumps({"fingerprint_id": "other", "excess_ms": 0.001}))
    with pytest.raises(FingerprintMismatchError):
        read_chain(ds)


def test_a_family_of_its_own_overrides_the_default(data_dir, tmp_path):
    d, ds, g = _copy_with_model(data_dir, tmp_path)
    totals = {}
    for label, families in (("default", {}), ("own", {"conv": 0.003}), ("other", {"pool": 0.003})):
        (d / CHAIN_FILE).write_text(json.dumps({"fingerprint_id": ds.fingerprint_id,
                                                "excess_ms": 0.001, "families": families}))
        totals[label] = train_predictor("ort-cpu", d, RULES).predict(
            g, check_device=False).total_ms
    assert totals["own"] < totals["default"]
    assert totals["other"] == pytest.approx(totals["default"])


def test_measure_chain_with_a_linear_cost_profiler(conv_bn_relu_dir, linear_cost_profiler,
                                                   monkeypatch, tmp_path):
    import statistics

    from nnmeter.predictors.chain import (COMPUTE_TYPES, LENGTHS, PAIR_LINK, ROUNDS,
                                          chain_cases, fit_size_excess,
                                          merge_chain)

    monkeypatch.setenv("NNMETER_CACHE", str(tmp_path / "cache"))
    seen = []
    from nnmeter.predictors.terms import ChainTerm, composition_before

    rec = ChainTerm.measure("ort-cpu", conv_bn_relu_dir, profiler=linear_cost_profiler,
                            on_point=seen.append,
                            before=composition_before("ort-cpu", conv_bn_relu_dir, "chain"))
    assert len(rec["points"]) == len(chain_cases()) == len(seen)
    assert rec["lengths"] == list(LENGTHS)
    for p in rec["points"]:
        # the fake's time is linear in the chain's FLOPs and weights: the slope is one
        # link's share, and the excess is what the single models cost beyond it
        t = p["chain_ms"]
        assert t[3] > t[2] > t[1] > t[0] > 0
        fixed = rec["overhead_ms"] * max(p["singles"], 1) + p["reorders_ms"] + p["boundary_ms"]
        if p["kernel_type"] == PAIR_LINK:  # split and concat alone, per kernel
            assert p["singles"] == 2 and len(p["singles_ms"]) == 2
            assert p["excess_ms"] == pytest.approx(
                (sum(p["singles_ms"]) - fixed - p["slope_ms"]) / 2)
        else:
            assert p["singles"] == 0
            assert p["excess_ms"] == pytest.approx(t[0] - fixed - p["slope_ms"])
    assert all(p["elements"] > 0 for p in rec["points"])
    assert rec["rounds"] == ROUNDS
    for p in rec["points"]:  # each model keeps its median round
        assert len(p["rounds_ms"]) == ROUNDS
        median = [statistics.median(col) for col in zip(*p["rounds_ms"])]
        assert p["chain_ms"] == pytest.approx(median[p["singles"]:])
    assert (rec["excess_ms"], rec["size"]) == fit_size_excess(rec["points"])
    if rec["size"] is None:
        assert rec["excess_ms"] == pytest.approx(statistics.median(
            p["excess_ms"] for p in rec["points"] if p["kernel_type"] in COMPUTE_TYPES))
    fams = {"activation", "channelshuffle", "pool", "split", "concat"}
    assert set(rec["families"]) == set(rec["family_lines"]) == fams
    # merging a record with itself keeps every median time and doubles the rounds
    merged = merge_chain([rec, rec])
    assert merged["rounds"] == 2 * ROUNDS and len(merged["points"]) == len(rec["points"])
    assert [p["excess_ms"] for p in merged["points"]] == pytest.approx(
        [p["excess_ms"] for p in rec["points"]])
    with pytest.raises(ValueError, match="fingerprints"):
        merge_chain([rec, {**rec, "fingerprint_id": "other"}])


def test_a_family_line_sets_the_excess_by_size():
    rec = {"excess_ms": 0.001, "families": {"split": 0.002},
           "family_lines": {"split": {"a_ms": 0.001, "ms_per_melem": 0.05}}}
    assert chain_excess_ms(rec, "split", elements=100_000) == pytest.approx(0.006)
    rec["family_lines"]["split"]["max_elements"] = 50_000  # not extended past the calibration
    assert chain_excess_ms(rec, "split", elements=100_000) == pytest.approx(0.0035)
    assert chain_excess_ms(rec, "split") == 0.002  # no size given: the median
    assert chain_excess_ms(rec, "conv", elements=100_000) == 0.001


def test_the_size_term_subtracts_more_from_larger_models(data_dir, tmp_path):
    d, ds, g = _copy_with_model(data_dir, tmp_path)

    def total(size):
        (d / CHAIN_FILE).write_text(json.dumps({"fingerprint_id": ds.fingerprint_id,
                                                "excess_ms": 0.0, "size": size}))
        pred = train_predictor("ort-cpu", d, RULES)
        assert pred.composition.get("chain").record["size"] == size
        return pred.predict(g, check_device=False).total_ms

    none = total(None)
    # a knee above every row changes nothing; one below every row lowers the prediction
    assert total({"knee_elements": 1e12, "ms_per_melem": 1.0}) == pytest.approx(none)
    assert total({"knee_elements": 0.0, "ms_per_melem": 0.5}) < none


def test_size_fit_needs_points_above_the_knee():
    from nnmeter.predictors.chain import fit_size_excess

    flat = [{"kernel_type": "dwconv-bn", "elements": n, "excess_ms": 0.001}
            for n in (1e5, 2e5, 4e5, 8e5)]
    assert fit_size_excess(flat) == (0.001, None)  # no slope: the median, no size term
    assert fit_size_excess(flat[:3]) == (0.001, None)  # too few points for a knee
    assert fit_size_excess([]) == (0.0, None)
