"""Spherical Random Features (Pennington et al. 2015): Gaussian-mixture fit to eq. 57,
unbiasedness for the mixture kernel, variance by Monte Carlo, closeness to eq. 57,
unit-norm validation, seeds and samplers."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import SphericalRandomFeatures
from kernelkit.features.fourier import fit_srf_mixture

Z = 4.5


def _sphere(n=6, d=5, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# ------------------------------------------------------------------ mixture fit
@pytest.mark.parametrize("p, bound", [(3, 0.05), (7, 0.02), (10, 0.015)])
def test_fit_error_is_small(p, bound):
    # measured (40 lengthscales 0.05..50, unweighted NNLS): 0.044, 0.017, 0.013
    alpha, ls, err = fit_srf_mixture(p, a=2.0)
    assert err < bound
    assert np.all(alpha >= 0) and alpha.sum() > 0
    tau = np.linspace(0, 2, 777)
    k_tilde = np.exp(-(tau[:, None] ** 2) / (2 * ls**2)) @ alpha
    assert np.max(np.abs(k_tilde - (1 - tau**2 / 4) ** p)) <= err + 1e-3
    fm = SphericalRandomFeatures(16, degree=p, random_state=0).fit(_sphere())
    assert fm.fit_error_ == err
    np.testing.assert_array_equal(fm.mixture_weights_, alpha)
    np.testing.assert_array_equal(fm.mixture_lengthscales_, ls)


def test_mixture_and_exact_kernels():
    X = _sphere(8, 4, seed=3)
    fm = SphericalRandomFeatures(16, degree=7, amplitude=2.5, random_state=0).fit(X)
    K = fm.exact_kernel(X)
    np.testing.assert_allclose(K, 2.5 * ((1 + X @ X.T) / 2) ** 7, atol=1e-12)
    assert np.max(np.abs(fm.mixture_kernel(X) - K)) <= 2.5 * fm.fit_error_ + 1e-12


# ------------------------------------------------------------------ unbiasedness
@pytest.mark.parametrize("sampler", ["iid", "orthogonal"])
@pytest.mark.parametrize("D", [100_000, 100_001])
def test_unbiased_for_mixture_kernel(sampler, D):
    X = _sphere(6, 5, seed=1)
    fm = SphericalRandomFeatures(D, degree=7, amplitude=1.7, sampler=sampler, random_state=4).fit(X)
    K_hat, K_t = fm.approx_kernel(X), fm.mixture_kernel(X)
    se = np.sqrt(fm.variance(X))
    off = ~np.eye(6, dtype=bool)
    assert np.all(np.abs(K_hat - K_t)[off] < Z * se[off]), np.abs(K_hat - K_t)[off] / se[off]
    if D % 2 == 0:  # cos^2 + sin^2: the diagonal is exact
        np.testing.assert_allclose(np.diag(K_hat), np.diag(K_t), rtol=1e-10)


def test_unbiased_over_seeds():
    X = _sphere(5, 3, seed=2)
    n_seeds, D = 300, 64
    est = np.mean(
        [
            SphericalRandomFeatures(D, degree=3, random_state=s).fit(X).approx_kernel(X)
            for s in range(n_seeds)
        ],
        axis=0,
    )
    fm = SphericalRandomFeatures(D, degree=3, random_state=0).fit(X)
    se = np.sqrt(fm.variance(X) / n_seeds)
    off = ~np.eye(5, dtype=bool)
    z = np.abs(est - fm.mixture_kernel(X))[off] / se[off]
    assert np.all(z < Z), z


def test_close_to_eq57_at_large_D():
    X = _sphere(10, 6, seed=5)
    fm = SphericalRandomFeatures(200_000, degree=10, random_state=0).fit(X)
    err = np.max(np.abs(fm.approx_kernel(X) - fm.exact_kernel(X)))
    assert err < fm.fit_error_ + Z * np.sqrt(fm.variance(X).max())
    assert err < 0.03


def test_sorf_is_close():
    X = _sphere(6, 16, seed=6)
    # SORF rows have a fixed norm (not chi): biased by O(1/sqrt(d)); measured 0.035 here
    fm = SphericalRandomFeatures(100_000, degree=7, sampler="sorf", random_state=0).fit(X)
    assert np.max(np.abs(fm.approx_kernel(X) - fm.mixture_kernel(X))) < 0.06


# ------------------------------------------------------------------ variance vs MC
@pytest.mark.parametrize("D", [8, 7])
def test_variance_matches_monte_carlo(D):
    X = _sphere(3, 4, seed=7)
    n_seeds = 3000
    est = np.empty((n_seeds, 3, 3))
    for s in range(n_seeds):
        est[s] = SphericalRandomFeatures(D, degree=7, random_state=s).fit(X).approx_kernel(X)
    fm = SphericalRandomFeatures(D, degree=7, random_state=0).fit(X)
    var, K = fm.variance(X), fm.mixture_kernel(X)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        e = est[:, i, j]
        assert abs(e.mean() - K[i, j]) < Z * np.sqrt(var[i, j] / n_seeds)
        sq = (e - K[i, j]) ** 2
        se = sq.std(ddof=1) / np.sqrt(n_seeds)
        assert abs(sq.mean() - var[i, j]) < Z * se, (sq.mean(), var[i, j], se)


# ------------------------------------------------------------------ inputs, seeds
def test_unit_norm_validation_and_normalize():
    X = _sphere(4, 3)
    with pytest.raises(ValueError, match="unit-norm"):
        SphericalRandomFeatures(8, normalize=False, random_state=0).fit(2 * X)
    fm = SphericalRandomFeatures(8, normalize=False, random_state=0).fit(X)
    with pytest.raises(ValueError, match="unit-norm"):
        fm.transform(X * (1 + 1e-4))
    fm.transform(X * (1 + 1e-8))  # within tolerance
    fn = SphericalRandomFeatures(8, normalize=True, random_state=0).fit(3 * X)
    np.testing.assert_allclose(fn.transform(3 * X), fm.transform(X), atol=1e-12)
    np.testing.assert_allclose(fn.approx_kernel(X / np.sqrt(2)), fm.approx_kernel(X), atol=1e-12)


def test_seeds_and_shapes():
    X = _sphere(5, 4)
    a = SphericalRandomFeatures(33, degree=5, random_state=11).fit(X)
    b = SphericalRandomFeatures(33, degree=5, random_state=11).fit(X)
    c = SphericalRandomFeatures(33, degree=5, random_state=12).fit(X)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    assert not np.allclose(a.transform(X), c.transform(X))
    assert a.transform(X).shape == (5, 33)
    assert a.projection_.shape == (16, 4) and a.components_.shape == (16,)
    assert np.all(a.mixture_weights_[a.components_] > 0)


def test_errors():
    X = _sphere()
    with pytest.raises(ValueError, match=r"'a' parameter .* \[2.0, inf\)"):
        SphericalRandomFeatures(8, a=1.5).fit(X)
    with pytest.raises(ValueError, match="sampler"):
        SphericalRandomFeatures(8, sampler="nope").fit(X)
    with pytest.raises(ValueError, match="amplitude"):
        SphericalRandomFeatures(8, amplitude=0.0).fit(X)
    fm = SphericalRandomFeatures(8).fit(X)
    np.testing.assert_array_equal(fm.complex_variance(X), fm.variance(X))
