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


def _gaussian_maps():
    from kernelkit.features import (
        AngularHybridRF,
        ComplexExponentialRF,
        GaussianHybridRF,
        NormalizedGaussianHybridRF,
        PositiveRF,
        RandomFourierFeatures,
        RandomMaclaurin,
    )

    return [
        RandomMaclaurin(16, kernel="gaussian", random_state=0),
        AngularHybridRF(8, 4, kernel="gaussian", random_state=0),
        GaussianHybridRF(8, 4, kernel="gaussian", random_state=0),
        NormalizedGaussianHybridRF(8, 4, kernel="gaussian", random_state=0),
        ComplexExponentialRF(8, kernel="gaussian", random_state=0),
        PositiveRF(8, kernel="gaussian", random_state=0),
        RandomFourierFeatures(8, random_state=0),
    ]


@pytest.mark.parametrize("fm", _gaussian_maps(), ids=lambda fm: type(fm).__name__)
def test_gaussian_exact_kernel_of_near_duplicates_far_from_the_origin(fm):
    """Rows of norm ~1e8 in 12 coordinates and their near-duplicates at distance ~1:
    the maps' ``exact_kernel`` formed ``|x|^2 + |y|^2 - 2 x.y``, whose rounding error
    ``~ d eps |x|^2`` is ~1 here, so ``k(x, x)`` came out as 0.78 and the near-duplicates'
    values off by up to 0.5 (where ``kernelkit.kernels.gaussian_kernel`` is right), and
    the random Fourier features' variance at ``x = y`` was not 0. The reference is
    ``exp(-|x - y|^2 / 2)`` from the differences: each is rounded once (relative 1e-16
    of |x| = 1e8, so 1e-8 absolute on a difference of order 1), and the kernel, in
    [0, 1], moves by less than 1e-7; the diagonal is exactly 1."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((5, 12)) * 3e7
    B = np.vstack([A[:2], A[2:] + 0.3 * rng.standard_normal((3, 12))])
    want = np.exp(-0.5 * np.sum((A - B) ** 2, axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the features' own overflow
        fm.fit(A, Y=B)
        K = fm.exact_kernel(A, B)
    np.testing.assert_allclose(np.diag(K), want, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.diag(fm.exact_kernel(A, A)), 1.0)
    if type(fm).__name__ == "RandomFourierFeatures":  # exact at x = y
        np.testing.assert_array_equal(np.diag(fm.variance(A, A)), 0.0)
