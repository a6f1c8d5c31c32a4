"""JointDistribution's exact fit runs the two pivoted Choleskys side by side: the bases
are those of separate fits, bit for bit, and an error on either side reaches the caller."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import BasisCache, JointDistribution, LowRankBasis


def _pairs(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    return X, 0.8 * X[:, :1] + 0.6 * rng.standard_normal((n, 1))


@pytest.mark.parametrize("n_jobs", [None, 1, 2])
def test_bases_equal_separate_fits(n_jobs):
    X, Y = _pairs()
    model = JointDistribution(
        lengthscale_x=0.7, lengthscale_y=0.9, rel_tol=1e-4, n_jobs=n_jobs
    ).fit(X, Y)
    for basis, Z, ls in ((model.basis_x_, X, 0.7), (model.basis_y_, Y, 0.9)):
        ref = LowRankBasis("gaussian", ls, rel_tol=1e-4, n_jobs=1).fit(Z)
        np.testing.assert_array_equal(basis.pivots_, ref.pivots_)
        np.testing.assert_array_equal(basis.factor_t_, ref.factor_t_)
        np.testing.assert_array_equal(basis.coef_, ref.coef_)


def test_cached_bases_are_reused_side_by_side():
    X, Y = _pairs(800)
    cache = BasisCache()
    first = JointDistribution(lengthscale_x=0.7, lengthscale_y=0.9, basis_cache=cache).fit(X, Y)
    again = JointDistribution(
        lengthscale_x=0.7, lengthscale_y=0.9, reg=1e-2, basis_cache=cache
    ).fit(X, Y)
    assert again.basis_x_ is first.basis_x_ and again.basis_y_ is first.basis_y_


@pytest.mark.parametrize("side", ["x", "y"])
def test_error_on_either_side_is_raised(side):
    X, Y = _pairs(300)

    def broken(A, B):
        raise RuntimeError(f"kernel {side} failed")

    kw = {f"kernel_{side}": broken}
    with pytest.raises(RuntimeError, match=f"kernel {side} failed"):
        JointDistribution(**kw).fit(X, Y)
