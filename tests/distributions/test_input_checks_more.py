"""Arguments the distribution helpers used to take without a check: ``density_ratio``'s
``grid`` (any truthy string switched to grid mode), ``BasisCache``'s ``max_entries``
(NaN gave a message without its name, ``True`` counted as 1) and
``second_moment_loss`` on no rows (a reshape error)."""

import numpy as np
import pytest

from kernelkit.distributions import BasisCache, JointDistribution, second_moment_loss


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 1))
    return JointDistribution().fit(X, X + rng.standard_normal((40, 1))), X


@pytest.mark.parametrize("grid", ["no", "yes", 1, 0, None, [True]])
def test_density_ratio_grid_must_be_a_bool(model, grid):
    m, X = model
    with pytest.raises(TypeError, match="grid must be a bool"):
        m.density_ratio(X[:3], X[:3], grid=grid)


def test_density_ratio_grid_accepts_numpy_bools(model):
    m, X = model
    assert m.density_ratio(X[:3], X[:2], grid=np.True_).shape == (2, 3)
    np.testing.assert_array_equal(
        m.density_ratio(X[:3], X[:3], grid=np.False_), m.density_ratio(X[:3], X[:3])
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [(np.nan, ValueError), (True, TypeError), (0, ValueError), (2.5, ValueError), ("3", TypeError)],
)
def test_basis_cache_max_entries_is_checked_by_name(value, error):
    with pytest.raises(error, match="max_entries"):
        BasisCache(value)


def test_basis_cache_max_entries_accepts_integers():
    assert BasisCache(np.int64(3)).max_entries == 3
    assert BasisCache(2.0).max_entries == 2  # an integral float, as before
    assert BasisCache().max_entries is None


def test_second_moment_loss_of_no_rows_is_a_clear_error():
    with pytest.raises(ValueError, match="empty: the mean loss \\(31\\) is undefined"):
        second_moment_loss(np.zeros((0, 1, 1)), np.zeros((0, 1, 1)))
