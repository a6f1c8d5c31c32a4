"""``n_jobs`` of JointDistribution (scikit-learn's convention): the threads of the fit's
blocked passes change nothing (fixed blocks, combined in block order); 0 is rejected."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import JointDistribution

KW = {"lengthscale_x": 0.6, "lengthscale_y": 0.6, "reg": 1e-5, "rel_tol": 1e-3}
XQ = np.array([[-1.2, 0.3], [0.0, 0.0], [0.9, -0.5]])


def _data(n=20000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    Y = 0.8 * X[:, :1] + 0.6 * rng.standard_normal((n, 1))
    return X, Y


@pytest.mark.parametrize(
    "kw",
    [{}, {"constraint": "positive"}, {"pivot_sample": 700, "random_state": 3}],
    ids=["exact", "positive", "sampled"],
)
def test_one_and_two_threads_give_the_same_model(kw):
    X, Y = _data()
    one, two = (JointDistribution(n_jobs=k, **KW, **kw).fit(X, Y) for k in (1, 2))
    np.testing.assert_array_equal(one.basis_x_.pivots_, two.basis_x_.pivots_)
    np.testing.assert_allclose(two.coef_, one.coef_, rtol=0, atol=1e-12 * np.abs(one.coef_).max())
    np.testing.assert_allclose(
        two.conditional_expectation(Y, XQ), one.conditional_expectation(Y, XQ), atol=1e-12
    )


def test_pivoted_cholesky_row_blocks_on_one_and_two_threads():
    from kernelkit.distributions import LowRankBasis, _cholesky

    X = _data(n=2 * _cholesky._BLOCK + 500, seed=1)[0]
    one, two = (LowRankBasis(lengthscale=1.5, rel_tol=1e-2, n_jobs=k).fit(X) for k in (1, 2))
    np.testing.assert_array_equal(one.pivots_, two.pivots_)
    np.testing.assert_array_equal(one.factor_t_, two.factor_t_)
    np.testing.assert_array_equal(one.eigenvalues_, two.eigenvalues_)


def test_basis_cache_ignores_n_jobs():
    from kernelkit.distributions import BasisCache

    X = _data(n=300)[0]
    cache = BasisCache()
    first = cache.fit(X, rel_tol=1e-3, n_jobs=1)
    assert cache.fit(X, rel_tol=1e-3, n_jobs=2) is first and cache.hits == 1


def test_bad_n_jobs_is_rejected_by_name():
    X, Y = _data(n=50)
    with pytest.raises(ValueError, match=r"'n_jobs' parameter .* Got 0 instead"):
        JointDistribution(n_jobs=0).fit(X, Y)
    with pytest.raises(TypeError, match="n_jobs"):
        JointDistribution(n_jobs="2").fit(X, Y)
    with pytest.raises(ValueError, match=r"'n_jobs' parameter .* Got 0 instead"):
        JointDistribution(n_jobs=0, pivot_sample=10).fit(X, Y)
    assert JointDistribution(n_jobs=-1).fit(X, Y).get_params()["n_jobs"] == -1
