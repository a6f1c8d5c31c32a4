"""Data generators of the JDL experiments: Archakov-Hansen correlation matrices, closed-form
conditional moments (checked by Monte Carlo with z-scores), small data sets, Fama-French."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import expm, logm

from kernelkit.datasets._images import DatasetNotAvailable
from kernelkit.datasets._jdl import (
    FRENCH_SV_PORTFOLIOS,
    archakov_hansen_correlation,
    correlation_to_gamma,
    french_classification_data,
    gaussian_conditional_moments,
    load_french_portfolios,
    random_correlation_matrix,
    sample_cauchy_chain,
    sample_gaussian,
    sample_uniform_chain,
    uniform_chain_conditional_moments,
)

Z_MAX = 4.5  # two-sided z-score bound: with ~30 checks per test, false alarms ~ 2e-4


# ====================================================================== Archakov-Hansen
def _assert_correlation(C):
    p = C.shape[0]
    np.testing.assert_allclose(C, C.T, atol=0)
    np.testing.assert_allclose(np.diag(C), np.ones(p), atol=1e-12)
    assert np.linalg.eigvalsh(C).min() > 0  # positive definite
    assert np.all(np.abs(C[~np.eye(p, dtype=bool)]) < 1)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 7), seed=st.integers(0, 2**32 - 1), scale=st.floats(0.0, 2.0))
def test_ah_valid_correlation_and_bijection(p, seed, scale):
    gamma = np.random.default_rng(seed).normal(0, scale, size=p * (p - 1) // 2)
    C = archakov_hansen_correlation(gamma)
    _assert_correlation(C)
    # logm amplifies the rounding of C (relative eps) by up to about cond(C): 1e-8 alone
    # fails at scale ~2, p = 7 (cond 1.7e10, error 5e-7) with the old code as well
    atol = 1e-8 + 10 * np.finfo(np.float64).eps * np.linalg.cond(C)
    np.testing.assert_allclose(correlation_to_gamma(C), gamma, atol=atol)


def test_ah_matches_matrix_logarithm():
    """logm(C) (scipy) has off-diagonal gamma; expm of it gives C back."""
    rng = np.random.default_rng(1)
    gamma = rng.normal(size=15)
    C = archakov_hansen_correlation(gamma)
    L = logm(C).real
    np.testing.assert_allclose(L[np.tril_indices(6, -1)], gamma, atol=1e-10)
    np.testing.assert_allclose(expm(L), C, atol=1e-12)


def test_ah_two_by_two_is_fisher_transform():
    for g in (-2.0, -0.3, 0.0, 0.7, 3.0):
        C = archakov_hansen_correlation([g])
        assert C[0, 1] == pytest.approx(np.tanh(g), abs=1e-13)


def test_ah_inverse_of_arbitrary_correlation_matrix():
    """C -> gamma -> C for correlation matrices drawn independently of the parametrisation."""
    from scipy.stats import random_correlation

    rng = np.random.default_rng(2)
    for p in (3, 5, 8):
        eig = rng.uniform(0.2, 2.0, size=p)
        C = random_correlation.rvs(eig * p / eig.sum(), random_state=rng)
        C = (C + C.T) / 2
        np.fill_diagonal(C, 1.0)
        np.testing.assert_allclose(
            archakov_hansen_correlation(correlation_to_gamma(C)), C, atol=1e-10
        )


def test_ah_bad_input():
    with pytest.raises(ValueError, match="gamma"):
        archakov_hansen_correlation([0.1, 0.2])  # not p(p-1)/2
    with pytest.raises(ValueError, match="gamma"):
        archakov_hansen_correlation([])
    with pytest.raises(ValueError, match="gamma"):
        archakov_hansen_correlation([0.1, np.nan, 0.2])
    with pytest.raises(ValueError, match="gamma"):
        archakov_hansen_correlation(np.zeros((3, 1)))
    with pytest.raises(ValueError, match="positive definite"):
        correlation_to_gamma(np.ones((3, 3)))
    with pytest.raises(ValueError, match="unit diagonal"):
        correlation_to_gamma(2 * np.eye(3))
    with pytest.raises(ValueError, match="symmetric"):
        correlation_to_gamma(np.array([[1.0, 0.5], [0.1, 1.0]]))
    with pytest.raises(ValueError, match="p must"):
        random_correlation_matrix(1)
    with pytest.raises(TypeError, match="random_state"):
        random_correlation_matrix(3, random_state="x")


def test_random_correlation_matrix_reproducible():
    C1 = random_correlation_matrix(6, random_state=5)
    C2 = random_correlation_matrix(6, random_state=np.random.default_rng(5))
    np.testing.assert_array_equal(C1, C2)
    _assert_correlation(C1)
    np.testing.assert_array_equal(random_correlation_matrix(4, 0, scale=0.0), np.eye(4))


# ====================================================================== Gaussian moments
def _orthogonality_z(resid, G):
    """z-scores of mean(resid_k * g_j): both must be 0 if E[resid | X] = 0.

    resid (N, K), G (N, J) -> (K, J)."""
    prod = resid[:, :, None] * G[:, None, :]  # (N, K, J)
    return prod.mean(0) / (prod.std(0, ddof=1) / np.sqrt(len(resid)))


def _poly2(X):
    n, d = X.shape
    cols = [np.ones(n)] + [X[:, i] for i in range(d)]
    cols += [X[:, i] * X[:, j] for i in range(d) for j in range(i, d)]
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("d_x,d_y", [(1, 1), (3, 3), (2, 4)])
def test_gaussian_conditional_moments_monte_carlo(d_x, d_y):
    """E[(Y Y^T - M(X)) g(X)] = 0 for g in {1, x_i, x_i x_j}, and E[Y - m(X)] g(X) = 0.

    The true M(x) is quadratic in x, so these test functions determine it: the
    unconditional second moment, for example, fails the same test (power check)."""
    p = d_x + d_y
    # gamma centred at 0.5: every pair clearly dependent (so the power check has power)
    C = archakov_hansen_correlation(np.random.default_rng(10).normal(0.5, 0.3, p * (p - 1) // 2))
    X, Y = sample_gaussian(C, 200_000, d_x, random_state=11)
    mean, second = gaussian_conditional_moments(C, X)
    assert mean.shape == (len(X), d_y) and second.shape == (len(X), d_y, d_y)
    G = _poly2(X)
    r2 = (Y[:, :, None] * Y[:, None, :] - second).reshape(len(X), -1)
    assert np.abs(_orthogonality_z(r2, G)).max() < Z_MAX
    assert np.abs(_orthogonality_z(Y - mean, G)).max() < Z_MAX
    # power: the unconditional second moment is rejected by the same statistic
    wrong = (Y[:, :, None] * Y[:, None, :] - C[d_x:, d_x:]).reshape(len(X), -1)
    assert np.abs(_orthogonality_z(wrong, G)).max() > 1.5 * Z_MAX
    # the moments are PSD and the sample covariance is C
    assert np.linalg.eigvalsh(second).min() > 0
    np.testing.assert_allclose(np.cov(np.hstack([X, Y]).T), C, atol=0.02)


def test_gaussian_moments_bad_input():
    C = random_correlation_matrix(4, 0)
    with pytest.raises(ValueError, match="d_x"):
        gaussian_conditional_moments(C, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="columns"):
        gaussian_conditional_moments(C, np.zeros((3, 2)), d_x=1)
    with pytest.raises(ValueError, match="two-dimensional"):
        gaussian_conditional_moments(C, np.zeros(3))
    with pytest.raises(ValueError, match="n must"):
        sample_gaussian(C, 0, 2)


# ====================================================================== small data sets
def test_uniform_chain_structure():
    X, Y = sample_uniform_chain(1000, random_state=0)
    assert X.shape == (1000, 3) and Y.shape == (1000, 3)
    Z = np.hstack([X, Y])
    incr = Z * np.arange(1, 7) - np.concatenate(
        [np.zeros((1000, 1)), Z[:, :-1] * np.arange(1, 6)], axis=1
    )
    assert incr.min() >= 0 and incr.max() <= 1  # increments are U(0, 1)


def test_uniform_chain_conditional_moments_monte_carlo():
    """Fix x (i.e. U_1..U_3), redraw U_4..U_6: the mean of Y Y^T matches, by z-score."""
    rng = np.random.default_rng(3)
    X, _ = sample_uniform_chain(5, random_state=4)
    mean, second = uniform_chain_conditional_moments(X)
    N = 100_000
    for i in range(len(X)):
        s = 3 * X[i, -1]
        T = np.cumsum(rng.uniform(size=(N, 3)), axis=1)  # (N, 3)
        Yc = (s + T) / np.arange(4, 7)
        P = (Yc[:, :, None] * Yc[:, None, :]).reshape(N, -1)
        z = (P.mean(0) - second[i].ravel()) / (P.std(0, ddof=1) / np.sqrt(N))
        assert np.abs(z).max() < Z_MAX
        zm = (Yc.mean(0) - mean[i]) / (Yc.std(0, ddof=1) / np.sqrt(N))
        assert np.abs(zm).max() < Z_MAX
    with pytest.raises(ValueError, match="fewer than"):
        uniform_chain_conditional_moments(np.zeros((2, 6)))


def test_cauchy_chain_scale():
    """Increments are Cauchy(0, 0.1): P(|incr| < 0.1) = 1/2 (binomial z-score)."""
    X, Y = sample_cauchy_chain(40_000, random_state=0)
    Z = np.hstack([X, Y])
    incr = Z * np.arange(1, 7) - np.concatenate(
        [np.zeros((len(Z), 1)), Z[:, :-1] * np.arange(1, 6)], axis=1
    )
    frac = (np.abs(incr) < 0.1).mean(0)
    z = (frac - 0.5) / np.sqrt(0.25 / len(Z))
    assert np.abs(z).max() < Z_MAX
    with pytest.raises(ValueError, match="scale"):
        sample_cauchy_chain(10, scale=0.0)
    with pytest.raises(ValueError, match="d_x"):
        sample_cauchy_chain(10, d_x=6)


# ====================================================================== Fama-French proxy
def test_french_portfolios():
    try:
        dates, Z = load_french_portfolios()
    except DatasetNotAvailable:
        pytest.skip("linearmodels not installed")
    from linearmodels.datasets import french

    df = french.load()
    assert Z.shape == (819, len(FRENCH_SV_PORTFOLIOS)) and len(dates) == 819
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z[:, 4], df["S3V3"] - df["RF"])
    X, y = french_classification_data(5)
    assert X.shape == (818, 5) and y.shape == (818,)
    np.testing.assert_allclose(X[1], Z[1, :5])
    np.testing.assert_allclose(y[0], Z[1, :5].sum())  # y_t uses month t, x_t month t-1
    with pytest.raises(ValueError, match="d must"):
        french_classification_data(10)
