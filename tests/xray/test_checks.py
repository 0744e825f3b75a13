import numpy as np
import pytest

from nnmeter.xray.checks import (affine_fit, check_inputs, describe_range, resize_bilinear,
                                 resize_nearest, smooth_images)
from nnmeter.xray.faults import make_preprocess


@pytest.fixture(scope="module")
def raw():
    return list(smooth_images(3, 36, 36, seed=1))


def _inputs(raw, **kw):
    return np.concatenate([make_preprocess(**kw)(r)["input"] for r in raw])


def test_smooth_images_are_uint8_and_smooth():
    imgs = smooth_images(2, 20, 24, seed=0)
    assert imgs.shape == (2, 20, 24, 3) and imgs.dtype == np.uint8
    assert imgs.min() == 0 and imgs.max() == 255
    # neighbouring pixels are close: not noise
    assert np.abs(np.diff(imgs.astype(float), axis=1)).mean() < 20


def test_resizers_keep_constants_and_differ_on_images():
    c = np.full((1, 3, 10, 10), 7.0)
    assert np.allclose(resize_nearest(c, (4, 6)), 7.0)
    assert np.allclose(resize_bilinear(c, (4, 6)), 7.0)
    img = smooth_images(1, 30, 30)[0].transpose(2, 0, 1).astype(float)
    a, b = resize_nearest(img, (20, 20)), resize_bilinear(img, (20, 20))
    assert a.shape == b.shape == (3, 20, 20)
    assert np.abs(a - b).max() > 1
    # same size: bilinear with half-pixel centres is the identity
    assert np.allclose(resize_bilinear(img, (30, 30)), img)


def test_affine_fit_recovers_scale_and_offset():
    x = np.random.default_rng(0).uniform(0, 1, (2, 3, 4, 4))
    a, b, res = affine_fit(x, 2 * x - 1)
    assert a[0] == pytest.approx(2) and b[0] == pytest.approx(-1) and res < 1e-9
    mean, std = np.array([0.4, 0.5, 0.6]), np.array([0.2, 0.25, 0.3])
    y = (x - mean[None, :, None, None]) / std[None, :, None, None]
    a, b, res = affine_fit(x, y, per_channel=True)
    assert np.allclose(a, 1 / std) and res < 1e-9


def test_describe_range():
    assert describe_range(np.array([0.0, 0.5, 1.0])) == "[0,1]"
    assert describe_range(np.array([-1.0, 0.9])) == "[-1,1]"
    assert describe_range(np.array([0.0, 250.0])) == "[0,255]"


def test_same_inputs_have_no_cause(raw):
    ref = _inputs(raw)
    chk = check_inputs(ref.copy(), ref)
    assert chk.same and chk.cause is None


@pytest.mark.parametrize("kw, kind", [
    (dict(channel_order="BGR"), "channel_order"),
    (dict(value_range="-1,1"), "normalization"),
    (dict(value_range="0,255"), "normalization"),
    (dict(layout_bug=True), "layout"),
    (dict(rotate=90), "rotation"),
    (dict(rotate=180), "rotation"),
    (dict(resize="nearest"), "resize_method"),
])
def test_each_injected_preprocessing_bug_is_named(raw, kw, kind):
    ref = _inputs(raw)
    dep = _inputs(raw, **kw)
    raw_c = np.stack(raw).transpose(0, 3, 1, 2).astype(float)
    chk = check_inputs(dep, ref, raw=raw_c)
    assert not chk.same
    assert chk.cause is not None and chk.cause.kind == kind
    assert chk.cause.residual < 0.01 < chk.plain_nrmse * 0.5 or chk.cause.residual < 1e-6


def test_bgr_with_other_range_names_both(raw):
    ref = _inputs(raw)
    dep = _inputs(raw, channel_order="BGR", value_range="-1,1")
    chk = check_inputs(dep, ref)
    assert chk.cause.kind == "channel_order"
    assert "[-1,1]" in chk.cause.detail


def test_unexplained_difference_has_no_cause(raw):
    ref = _inputs(raw)
    dep = ref + np.random.default_rng(0).normal(0, 0.2, ref.shape)
    chk = check_inputs(dep, ref)
    assert not chk.same and chk.cause is None
