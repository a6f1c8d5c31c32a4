"""kernelkit's dot-product, hybrid, joint-distribution and partition-bound families tried
as a new user would: data and cases the family tests do not use (large norms, wide
inputs, duplicated rows, string labels), each checked against an exact reference."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.distributions import JointDistribution, LowRankBasis


def _far_rows(d, seed=0):
    """20 rows in dimension ``d``: the first 10 of norm ~1e160 (every squared distance
    from them overflows float64), the rest of norm ~1; only the first 3 coordinates are
    non-zero, so the Gaussian kernel is that of ``X[:, :3]``."""
    rng = np.random.default_rng(seed)
    X = np.zeros((20, d))
    X[:, :3] = rng.standard_normal((20, 3))
    X[:10] *= 1e160
    return X


@pytest.mark.parametrize("d", [3, 12])
def test_jdl_basis_on_rows_far_apart_is_the_kernel_limit_in_any_dimension(d):
    """Squared distances beyond float64 are inf and the kernel there is its limit 0, and
    a row is at distance 0 from itself (kernel 1). Above 8 coordinates the kernel was
    formed from the norms, |a|^2 + |b|^2 - 2 a.b = inf - inf = NaN at rows of norm
    1e160: the basis features and the conditional means were NaN. In 3 coordinates the
    values were right but the fit warned "overflow encountered in square" once per
    kernel column. Padding the inputs with zero coordinates leaves the kernel, and so the
    model, unchanged: the 12-coordinate model must equal the 3-coordinate one to
    round-off (both factor the same 0/1-plus-moderate kernel matrix; 1e-9 leaves room for
    the different summation orders, relative to values of order 1)."""
    X = _far_rows(d)
    Y = np.linspace(-1.0, 1.0, 20)[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        basis = LowRankBasis("gaussian", 1.0, rel_tol=1e-8).fit(X)
        psi = basis.transform(X)
        model = JointDistribution(rel_tol=1e-8).fit(X, Y)
        mean = model.conditional_expectation(Y, X[:12])
    assert np.all(np.isfinite(psi))
    # the basis reproduces the kernel on the training rows: psi psi^T = K (block: the
    # far rows are orthogonal to everything, unit norm)
    K = psi @ psi.T
    np.testing.assert_allclose(np.diag(K), 1.0, atol=1e-9)
    np.testing.assert_allclose(K[:10, :10], np.eye(10), atol=1e-9)
    np.testing.assert_allclose(K[:10, 10:], 0.0, atol=1e-9)
    reference = JointDistribution(rel_tol=1e-8).fit(X[:, :3], Y)
    np.testing.assert_allclose(
        mean, reference.conditional_expectation(Y, X[:12, :3]), rtol=1e-9, atol=1e-9
    )
