import numpy as np
import pytest

from nnmeter.xray.diff import LayerDiff, first_divergence, tensor_metrics, top1_agreement


def test_tensor_metrics_values():
    r = np.array([0.0, 1.0, 2.0, 4.0])
    m = tensor_metrics(r, r)
    assert m["nrmse"] == 0 and m["cosine"] == pytest.approx(1.0) and m["max_abs"] == 0
    d = r + np.array([0, 0, 0, 2.0])
    m = tensor_metrics(d, r)
    assert m["rmse"] == pytest.approx(1.0)
    assert m["nrmse"] == pytest.approx(0.25)
    assert m["max_abs"] == 2.0
    assert tensor_metrics(-r, r)["cosine"] == pytest.approx(-1.0)


def _d(name, nrmse, inp, quant=None):
    return LayerDiff(name, name, "conv", "CONV_2D", "name", (1,), nrmse, 1.0, 0.0, 0.0, 1.0,
                     quant, input_nrmse=inp)


def test_first_divergence_needs_threshold_and_jump():
    diffs = [_d("a", 1e-7, 0), _d("b", 5e-3, 1e-7), _d("c", 2e-2, 5e-3)]
    assert first_divergence(diffs).deployed == "b"
    # error that only grows smoothly is not a jump
    diffs = [_d("a", 2e-3, 1e-3), _d("b", 3e-3, 2e-3)]
    assert first_divergence(diffs) is None
    # int8 layers use the looser threshold
    diffs = [_d("a", 0.01, 0.001, quant=(0.1, 0)), _d("b", 0.2, 0.01, quant=(0.1, 0))]
    assert first_divergence(diffs).deployed == "b"


def test_top1_agreement():
    a = [np.array([[0.1, 0.9]]), np.array([[0.8, 0.2]])]
    b = [np.array([[0.2, 0.8]]), np.array([[0.1, 0.9]])]
    assert top1_agreement(a, b) == 0.5
    assert top1_agreement(a, [np.zeros((1, 3))] * 2) is None
