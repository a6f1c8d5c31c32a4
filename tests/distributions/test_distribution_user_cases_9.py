"""New-user cases of kernelkit.distributions: CME's conditional_probability has the
documented shape (n_new,) and refuses a multi-column event; holdout_select names
test_fraction for a split that leaves too few training rows or a non-number; the
pointwise density_ratio takes no pairs as the grid and the conditionals do."""

import numpy as np
import pytest

from kernelkit.distributions import ConditionalMeanEmbedding, JointDistribution, holdout_select


def _data(n=100, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 1))
    return X, 0.8 * X + 0.6 * rng.standard_normal((n, 1))


def test_cme_conditional_probability_shape_and_event_check():
    X, Y = _data()
    xq = np.array([[0.0], [1.0]])
    m = ConditionalMeanEmbedding().fit(X, Y)
    by_call = m.conditional_probability(lambda y: y <= 0, xq)
    by_values = m.conditional_probability(Y <= 0, xq)
    assert by_call.shape == by_values.shape == (2,)
    np.testing.assert_allclose(by_call, by_values)
    np.testing.assert_allclose(by_values, m.conditional_probability((Y <= 0)[:, 0], xq))
    with pytest.raises(ValueError, match="event"):
        m.conditional_probability(np.c_[Y > 0, Y > 1], xq)
    with pytest.raises(ValueError, match="event"):
        m.conditional_probability(lambda y: np.c_[y > 0, y > 1], xq)


@pytest.mark.parametrize("fraction", [0.95, 0.9])
def test_holdout_select_names_test_fraction_when_the_training_split_is_too_small(fraction):
    X, Y = _data(10)
    with pytest.raises(ValueError, match="test_fraction"):
        holdout_select(JointDistribution(), {"reg": [1e-3]}, X, Y, test_fraction=fraction)


@pytest.mark.parametrize("fraction", ["0.2", None, True])
def test_holdout_select_rejects_a_non_number_test_fraction(fraction):
    X, Y = _data(20)
    with pytest.raises(TypeError, match="test_fraction"):
        holdout_select(JointDistribution(), {"reg": [1e-3]}, X, Y, test_fraction=fraction)


def test_pointwise_density_ratio_of_no_pairs():
    X, Y = _data()
    m = JointDistribution().fit(X, Y)
    assert m.density_ratio(X[:0], Y[:0], grid=True).shape == (0, 0)
    assert m.density_ratio(X[:0], Y[:0], grid=False).shape == (0,)
