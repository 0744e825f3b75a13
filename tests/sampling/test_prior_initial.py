from __future__ import annotations

import numpy as np
import pytest

from nnmeter.sampling.initial import sample_initial
from nnmeter.sampling.prior import KernelPrior, config_key


def _real_configs():
    out = []
    for hw, chans in ((112, (16, 24, 32)), (56, (24, 32, 48, 64)), (14, (96, 160, 320, 384))):
        for c in chans:
            for k in (3, 5):
                out.append({"hw": hw, "cin": c, "cout": c, "kernel": k, "stride": 1})
                out.append({"hw": hw, "cin": c, "cout": 2 * c, "kernel": k, "stride": 2})
    return out


def test_prior_fields_ties_and_roundtrip():
    prior = KernelPrior.from_configs("dwconv", [
        {"hw": 56, "cin": c, "cout": c, "kernel": 3, "stride": 1} for c in (16, 32, 64, 96)])
    assert prior.channel_fields == ("cin", "cout")
    assert prior.ties == (("cin", "cout"),)
    assert KernelPrior.from_dict(prior.to_dict()) == prior
    with pytest.raises(ValueError, match="no configurations"):
        KernelPrior.from_configs("conv", [])


def test_samples_are_valid_and_snapped():
    configs = _real_configs()
    prior = KernelPrior.from_configs("conv", configs, min_group=4)
    seen_k = {c["kernel"] for c in configs}
    seen_hw = {c["hw"] for c in configs}
    for cfg in sample_initial(prior, 200, seed=3):
        assert isinstance(cfg["cin"], int) and cfg["cin"] >= 1 and cfg["cout"] >= 1
        assert cfg["kernel"] in seen_k and cfg["stride"] in (1, 2) and cfg["hw"] in seen_hw


def test_channels_follow_their_resolution():
    prior = KernelPrior.from_configs("conv", _real_configs(), min_group=4)
    samples = prior.sample(400, np.random.default_rng(0))
    big = [c["cin"] for c in samples if c["hw"] == 112]
    small = [c["cin"] for c in samples if c["hw"] == 14]
    assert max(big) <= 40 and min(small) >= 90  # within the histogram of its context


def test_initial_sampling_deterministic_and_deduplicated():
    prior = KernelPrior.from_configs("conv", _real_configs())
    a = sample_initial(prior, 150, seed=7)
    assert a == sample_initial(prior, 150, seed=7)
    assert a != sample_initial(prior, 150, seed=8)
    assert len({config_key(c) for c in a}) == len(a) == 150
    b = sample_initial(prior, 100, seed=9, exclude=a)
    assert not {config_key(c) for c in a} & {config_key(c) for c in b}


def test_initial_sampling_respects_filter_and_small_spaces():
    prior = KernelPrior.from_configs("pool", [{"hw": 7, "cin": 1, "kernel": 2}] * 3)
    out = sample_initial(prior, 10, seed=0)
    assert out == [{"hw": 7, "cin": 1, "kernel": 2}]  # the only value in a point prior
    prior = KernelPrior.from_configs("conv", _real_configs())
    assert all(c["cin"] < 100 for c in
               sample_initial(prior, 30, accept=lambda c: c["cin"] < 100))


def test_prior_keeps_the_share_of_aligned_channels():
    real = [{"hw": 28, "cin": 8 * i, "cout": 16 * i, "k": 3} for i in range(1, 31)]
    real += [{"hw": 28, "cin": 8 * i + 3, "cout": 16 * i, "k": 3} for i in range(1, 11)]
    prior = KernelPrior.from_configs("conv", real)
    assert prior.aligned_share == pytest.approx(30 / 40)
    draws = prior.sample(2000, np.random.default_rng(0))
    share = np.mean([c["cin"] % 8 == 0 and c["cout"] % 8 == 0 for c in draws])
    # the snapped share plus the few unsnapped draws that are aligned by chance
    assert 0.70 <= share <= 0.85
    back = KernelPrior.from_dict(prior.to_dict())
    assert back.aligned_share == prior.aligned_share
