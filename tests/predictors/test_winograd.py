"""Winograd weights: MNN's tile choice and the bytes its transformed weights take, and
the in-model term charging those bytes on a runtime that keeps them."""

from __future__ import annotations

import pytest

from nnmeter.ir import GraphBuilder
from nnmeter.kernels import kernel_from_nodes
from nnmeter.kernels.conv import ConvConfig
from nnmeter.predictors.facts import device_facts
from nnmeter.predictors.terms.in_model import InModelTerm, kernel_mb
from nnmeter.predictors.winograd import (kernel_weight_bytes, winograd_tile,
                                         winograd_weight_bytes)


@pytest.mark.parametrize("hw, c, k, tile", [
    # tiles whose weight bytes matched the session memory MNN reported on the Zen 4
    (10, 256, 3, 8), (20, 256, 3, 6), (5, 256, 3, 4), (40, 256, 3, 8), (10, 256, 5, 8),
    (10, 64, 3, 8),
])
def test_the_tile_is_the_one_mnn_picks(hw, c, k, tile):
    assert winograd_tile(hw, hw, c, c, k) == tile


@pytest.mark.parametrize("kw", [dict(stride=2), dict(groups=2), dict(kernel_w=1)])
def test_strided_grouped_and_non_square_convolutions_are_not_winograd(kw):
    assert winograd_tile(10, 10, 64, 64, 3, **kw) is None


def test_a_pointwise_convolution_and_a_tiny_output_are_not_winograd():
    assert winograd_tile(10, 10, 64, 64, 1) is None
    # a 1x1 output: no tile does fewer operations than the direct convolution
    assert winograd_tile(1, 1, 64, 64, 3) is None


def test_transformed_weights_are_alpha_squared_tiles_of_cin_by_cout_floats():
    assert winograd_weight_bytes(10, 10, 64, 32, 3) == 8 * 8 * 64 * 32 * 4
    assert winograd_weight_bytes(10, 10, 64, 32, 3, stride=2) is None


def test_a_kernel_config_gives_its_own_and_its_transformed_weight_bytes():
    own, tiles = kernel_weight_bytes(ConvConfig(h=10, w=10, cin=64, cout=64, kernel=3))
    assert own == 64 * 64 * 9 * 4 and tiles == 64 * 64 * 64 * 4
    # explicit zero pads shrink the output to 8x8, which two 4x4 tiles (alpha 6) cover
    # a side with fewer operations than two 6x6 ones
    assert kernel_weight_bytes(ConvConfig(h=10, w=10, cin=64, cout=64, kernel=3,
                                          pads=(0, 0, 0, 0)))[1] == 6 * 6 * 64 * 64 * 4
    assert kernel_weight_bytes(ConvConfig(h=10, w=10, cin=64, cout=64, kernel=3,
                                          stride=2)) is None
    assert kernel_weight_bytes(object()) is None  # not a convolution's config


def test_only_mnn_keeps_winograd_weights():
    assert device_facts({"runtime": "mnn", "isa": ["avx2"]}).winograd_weights
    for rt in ("onnxruntime", "openvino", "litert"):
        assert not device_facts({"runtime": rt, "isa": ["avx2"]}).winograd_weights


def _conv(k, stride=1):
    b = GraphBuilder("m", (1, 64, 10, 10))
    y = b.relu(b.conv(b.x, 64, k, stride=stride, name="c"), name="r")
    return kernel_from_nodes(b.build([y]), ["c", "r"])


def test_the_in_model_term_charges_transformed_weights_only_on_such_a_runtime():
    k3, k1 = _conv(3), _conv(1)
    moved = k3.kernel_type.cost(k3.config).memory_bytes / 1e6
    extra = (64 * 64 * 64 * 4 - 64 * 64 * 9 * 4) / 1e6
    assert kernel_mb(k3, 0.0) == pytest.approx(moved)
    assert kernel_mb(k3, 0.0, True) == pytest.approx(moved + extra)
    # a pointwise and a strided convolution move what they move either way
    for k in (k1, _conv(3, stride=2)):
        assert kernel_mb(k, 0.0, True) == pytest.approx(
            k.kernel_type.cost(k.config).memory_bytes / 1e6)
    # beyond the last-level cache alone, nothing is charged (measured cold already)
    assert kernel_mb(k3, 1e6, True) == 0.0
    plain = InModelTerm((("conv", 0.05),), 10)
    wino = InModelTerm((("conv", 0.05),), 10, winograd=True)
    assert wino._kernel(k3)[1] == pytest.approx(plain._kernel(k3)[1] + 0.05 * extra)


def test_more_threads_cap_the_tile_lower_and_the_term_reads_them_from_the_device():
    # a 6x6 output is one 6x6 tile (alpha 8) on one thread; split over four threads the
    # unit is capped at sqrt(9) = 3, and of 2 and 3 only 2 has a tile MNN has (alpha 4)
    assert winograd_tile(6, 6, 64, 64, 3) == 8
    assert winograd_tile(6, 6, 64, 64, 3, threads=4) == 4
    from nnmeter.predictors.terms.in_model import _threads

    assert _threads({"settings": {"threads": 2}}) == 2
    assert _threads({"settings": {}}) == 1 and _threads(None) == 1
