from __future__ import annotations

import math

import numpy as np

from nnmeter.evaluate import within
from nnmeter.predictors.regressors import RandomForestKernelRegressor
from nnmeter.sampling.adaptive import (
    Sample, high_error_indices, run_adaptive, sample_around, split_of,
)
from nnmeter.sampling.prior import config_key

STEP = 24  # latency jumps every 24 channels, like a SIMD tile


def _latency(cfg):
    # a step function of both channel counts, smooth in hw
    # work is padded to tiles: 8 input channels, STEP output channels
    return 0.02 + 1e-6 * cfg["hw"] ** 2 * math.ceil(cfg["cin"] / 8) * 8 * math.ceil(cfg["cout"] / STEP) * STEP


def _featurize(cfgs):
    return np.array([[c["hw"], c["cin"], c["cout"]] for c in cfgs], dtype=float)


def _make():
    return RandomForestKernelRegressor(n_estimators=30, max_depth=20)


def _measure(cfgs, origin):
    return [Sample(c, _latency(c), origin) for c in cfgs]


def test_split_is_stable_and_adaptive_goes_to_train():
    cfg = {"hw": 7, "cin": 3, "cout": 9}
    assert split_of(cfg) == split_of(dict(reversed(list(cfg.items()))))
    assert split_of(cfg, "round2") == "train"
    parts = [split_of({"hw": 1, "cin": i, "cout": 1}) for i in range(2000)]
    assert 0.1 < parts.count("test") / 2000 < 0.2 and 0.1 < parts.count("val") / 2000 < 0.2


def test_high_error_indices_sorted():
    assert high_error_indices([1, 1, 1, 1], [1.05, 1.5, 0.8, 1.2], 0.1) == [1, 2, 3]


def test_sample_around_range_ties_and_no_duplicates():
    rng = np.random.default_rng(0)
    base = {"hw": 14, "cin": 100, "cout": 100, "k": 3}
    seen = {config_key(base)}
    out = sample_around(base, 30, rng, ("cin", "cout"), ties=[("cin", "cout")], exclude=seen)
    assert out and all(50 <= c["cin"] < 120 and c["cin"] == c["cout"] for c in out)
    assert all(c["hw"] == 14 and c["k"] == 3 for c in out)
    keys = [config_key(c) for c in out]
    assert len(set(keys)) == len(keys) and config_key(base) not in keys
    again = sample_around(base, 30, rng, ("cin", "cout"), ties=[("cin", "cout")], exclude=seen)
    assert not set(keys) & {config_key(c) for c in again}


CMAX = 600


def _draw(rng, n):
    """``n`` distinct dwconv-like configs (cin == cout), uniform over the space."""
    out = {}
    while len(out) < n:
        c = int(rng.integers(8, CMAX))
        cfg = {"hw": int(rng.choice([7, 14, 28])), "cin": c, "cout": c}
        out.setdefault(config_key(cfg), cfg)
    return list(out.values())


def test_adaptive_finds_step_points_better_than_uniform():
    rng = np.random.default_rng(0)
    samples = _measure(_draw(rng, 100), "initial")
    logs = []
    res = run_adaptive("dwconv", samples, _measure, _featurize, _make,
                       channel_fields=("cin", "cout"), ties=[("cin", "cout")], rounds=4,
                       per_point=10, max_new_per_round=100, target_acc10=1.01,
                       on_round=logs.append)
    n_total = len(res.samples)
    assert n_total > len(samples) and len(logs) >= 2
    assert all(s.config["cin"] == s.config["cout"] for s in res.samples)
    keys = [config_key(s.config) for s in res.samples]
    assert len(set(keys)) == len(keys)  # never a duplicate measurement
    assert [log.round for log in logs] == list(range(1, len(logs) + 1))
    # uniform baseline with the same number of measurements
    uni = _draw(rng, n_total)
    grid = [{"hw": hw, "cin": c, "cout": c} for hw in (7, 14, 28) for c in range(8, CMAX)]
    truth = np.array([_latency(c) for c in grid])
    adaptive_reg = _make().fit(_featurize([s.config for s in res.samples]),
                               [s.latency_ms for s in res.samples])
    uniform_reg = _make().fit(_featurize(uni), [_latency(c) for c in uni])
    acc_adaptive = within(adaptive_reg.predict(_featurize(grid)), truth, 10)
    acc_uniform = within(uniform_reg.predict(_featurize(grid)), truth, 10)
    assert acc_adaptive > acc_uniform, (acc_adaptive, acc_uniform)
    # and right at the step points (within 2 channels of a jump)
    near = [c for c in grid if min(c["cout"] % STEP, STEP - c["cout"] % STEP) <= 2]
    t_near = np.array([_latency(c) for c in near])
    assert within(adaptive_reg.predict(_featurize(near)), t_near, 10) > \
        within(uniform_reg.predict(_featurize(near)), t_near, 10)


def test_adaptive_stops_on_budget():
    rng = np.random.default_rng(0)
    samples = _measure(_draw(rng, 60), "initial")
    res = run_adaptive("dwconv", samples, _measure, _featurize, _make,
                       channel_fields=("cin", "cout"), rounds=5, should_stop=lambda: True)
    assert len(res.logs) == 1 and res.logs[0].n_new == 0 and len(res.samples) == len(samples)


def test_explore_fraction_mixes_prior_draws_without_duplicates():
    rng = np.random.default_rng(3)
    samples = _measure(_draw(rng, 80), "initial")
    drawn = []

    def explore(n, exclude):
        out = [c for c in _draw(np.random.default_rng(len(drawn) + 50), 3 * n)
               if config_key(c) not in exclude][:n]
        drawn.extend(out)
        return out

    res = run_adaptive("dwconv", samples, _measure, _featurize, _make,
                       channel_fields=("cin", "cout"), ties=[("cin", "cout")], rounds=2,
                       per_point=10, max_new_per_round=60, target_acc10=1.01,
                       explore=explore, explore_fraction=0.5)
    keys = [config_key(s.config) for s in res.samples]
    assert len(keys) == len(set(keys))
    assert drawn and {config_key(c) for c in drawn} <= set(keys)


def test_sample_around_snaps_a_share_of_neighbours_to_the_channel_block():
    rng = np.random.default_rng(3)
    base = {"hw": 14, "cin": 100, "cout": 100, "k": 3}
    out = sample_around(base, 60, rng, ("cin", "cout"), ties=[("cin", "cout")],
                        sweep_fraction=0.0, align=8, align_fraction=0.5)
    aligned = [c for c in out if c["cin"] % 8 == 0]
    assert aligned and len(aligned) < len(out)
    assert all(50 <= c["cin"] < 120 for c in out)
