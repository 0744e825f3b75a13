import numpy as np

from nnmeter.predictors.features import channel_columns, model_input


def test_alignment_columns_appended_for_channel_features():
    names = ("H", "W", "CIN", "COUT", "FLOPs")
    X = np.array([[7, 7, 100, 101, 5e6], [7, 7, 96, 64, 4e6]], dtype=float)
    Z = model_input(names, X)
    assert channel_columns(names) == [2, 3]
    assert Z.shape == (2, 5 + 6 + 1) and np.array_equal(Z[:, :5], X)
    assert list(Z[0, 5:]) == [0, 4, 4, 1, 5, 5, 0] and list(Z[1, 5:]) == [0, 0, 0, 0, 0, 0, 1]
    assert np.array_equal(model_input(names, X[0]), Z[0])


def test_no_channel_features_is_identity():
    X = np.array([[1.0, 2.0]])
    assert np.array_equal(model_input(("elements", "bytes"), X), X)


def test_aligned_flag_needs_every_channel_column_aligned():
    names = ("CIN", "COUT")
    Z = model_input(names, np.array([[16, 32], [16, 20], [3, 16]], dtype=float))
    assert list(Z[:, -1]) == [1.0, 0.0, 0.0]
