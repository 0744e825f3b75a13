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


def test_one_row_equals_the_first_row_of_the_batch_bit_for_bit():
    rng = np.random.default_rng(0)
    for names in (("H", "W", "CIN", "COUT", "K", "S", "FLOPs"), ("CIN1", "CIN2", "CTOTAL"),
                  ["h", "cin", "Cout"]):  # a list of names, lower case
        n = len(names)
        rows = np.concatenate([
            rng.integers(0, 2049, size=(200, n)).astype(float),     # channel counts
            rng.integers(0, 33, size=(50, n)).astype(float) * 8.0,  # aligned ones
            rng.normal(0, 300, size=(50, n)),                       # negatives, fractions
            rng.uniform(0, 1e12, size=(20, n)),                     # huge values
        ])
        batch = model_input(names, rows)
        for i, row in enumerate(rows):
            one = model_input(names, row)
            assert one.dtype == np.float64 and one.tobytes() == batch[i].tobytes()
        assert model_input(names, list(rows[0])).tobytes() == batch[0].tobytes()


def test_one_row_with_non_finite_channels_matches_the_batch():
    names = ("CIN", "COUT")
    rows = np.array([[np.nan, 8.0], [np.inf, 16.0], [-np.inf, 3.0], [-0.0, 8.0]])
    with np.errstate(invalid="ignore"):  # inf % m is NaN, as numpy warns
        batch = model_input(names, rows)
    for i, row in enumerate(rows):
        np.testing.assert_array_equal(model_input(names, row), batch[i])
