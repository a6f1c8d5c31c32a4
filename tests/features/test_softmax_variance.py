"""Analytic variances of the softmax-family maps against Monte Carlo and quadrature.

The empirical variance of single-projection products f1 f2 (2e5
projections) must match ``M * fm.variance``, with a z-score built from the exact 4th
moment of the products, on the pairs where that gives the Monte Carlo power; every
parameter used has a_l <= 1/32 (finite fourth moment needs a_l < 1/16).
Exact checks:
Gauss-Hermite quadrature of the first and second moments (the product factorises over
the coordinates of w when A is diagonal), GERF's closed form (eq. 12-13) and the
general DERF formula (eq. 15) written from Thm 4.1's parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import (
    ALL_MAPS,
    ALPHA,
    DERF_MAPS,
    Z_BOUND,
    derf_log_m2,
    derf_moments_by_quadrature,
    derf_params,
    exact_kernel,
    gerf_log_m2,
    make_xy,
    mc_variance_z,
    rotation,
    sample_variance_se,
    single_products,
)

from kernelkit.features import ADERF, GERF, SDERF, HyperbolicRF, TrigRF

M_BIG = 200_000


def _name(cls):
    return cls.__name__


def _check_mc_variance(fm, X, Y, label="", power=0.04, n_pairs=9):
    """Sample variance of M = fm.n_features products f1 f2 per pair against
    ``M * fm.variance``, z-scores with the exact standard error of the sample variance
    (``favor_helpers.sample_variance_se``, from the exact fourth moment).

    The pairs: the ``n_pairs`` of X x Y whose exact relative SE is smallest (drawn data
    put some pairs where the products' fourth moment is huge: a relative SE up to 400 at
    M = 2e5 for one draw, where no Monte Carlo of that size sees the variance); their
    relative SE must be below ``power`` (at most 0.08), so that a variance off by a factor
    1.5 is 0.5 / power >= 6 standard errors off. TrigRF (bounded products, no exact moments
    here) keeps the first 3 x 3 pairs and the sample fourth moment.
    """
    M = fm.n_features
    se_all = sample_variance_se(fm, X, Y, M)
    if se_all is None:
        X, Y = X[:3], Y[:3]
        g = single_products(fm, X, Y).reshape(-1, M)
        v1 = (fm.variance(X, Y) * M).ravel()
        z, rel_se = mc_variance_z(g, v1)
    else:
        rel_all = se_all / (fm.variance(X, Y) * M)
        i, j = np.unravel_index(np.argsort(rel_all, axis=None)[:n_pairs], rel_all.shape)
        Xp, Yp = X[i], Y[j]
        P = np.asarray(fm.transform(Xp), dtype=np.float64)
        S = np.asarray(fm.transform_y(Yp), dtype=np.float64)
        g = M * P * S  # (pairs, D): the products of pair p, as in single_products
        if g.shape[-1] == 2 * M:  # HyperbolicRF: +w and -w columns
            g = g[:, :M] + g[:, M:]
        np.testing.assert_allclose(g.mean(-1), np.diag(fm.approx_kernel(Xp, Yp)), rtol=1e-9)
        v1 = np.einsum("pp->p", fm.variance(Xp, Yp)) * M
        se = se_all[i, j]
        c = g - g.mean(-1, keepdims=True)
        z, rel_se = ((c * c).sum(-1) / (M - 1) - v1) / se, se / v1
    # two-sided, over the <= 9 pairs of one test: |z| < Z_BOUND (p ~ 7e-6 per pair for a
    # normal z; the sample variance of 2e5 products with a finite fourth moment is close)
    assert rel_se.max() < power, f"{label}: no power, relative SE {rel_se.max():.3g}"
    assert np.abs(z).max() < Z_BOUND, f"{label}: variance z-scores\n{z}"


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_variance_matches_monte_carlo_fitted(cls, kernel):
    X, Y = make_xy(4)
    fm = cls(n_features=M_BIG, kernel=kernel, random_state=21).fit(X, Y=Y)
    _check_mc_variance(fm, X, Y, f"{cls.__name__} {kernel}")


@pytest.mark.parametrize("A", [-0.8, 0.0, 1.0 / 32])
def test_gerf_variance_matches_monte_carlo_fixed_A(A):
    # positive A has heavier tails (finite 4th moment needs A < 1/16): smaller norms there
    X, Y = make_xy(5, scale=0.3 if A > 0 else 0.6)
    fm = GERF(n_features=M_BIG, A=A, random_state=22).fit(X, Y=Y)
    _check_mc_variance(fm, X, Y, f"GERF A={A}", power=0.04 if A <= 0 else 0.06)


def test_sderf_variance_matches_monte_carlo_custom_parameters():
    """Per-coordinate a_l in [-0.6, 1/32] and a generic rotation."""
    X, Y = make_xy(6, scale=0.4)
    fm = SDERF(n_features=M_BIG, kernel="gaussian", random_state=23).fit(X, Y=Y)
    fm.A_ = np.array([-0.6, -0.2, 0.0, 0.01, 1.0 / 32, -0.05])
    fm.B_x_ = fm.B_y_ = rotation(6, seed=9).T
    fm._build()
    _check_mc_variance(fm, X, Y, "SDERF custom")


def test_aderf_variance_matches_monte_carlo_custom_parameters():
    """A generic B~1 (not the fitted one) with B~2 = B~1^{-T}, A = 1/32."""
    X, Y = make_xy(7, scale=0.3)
    fm = ADERF(n_features=M_BIG, random_state=24).fit(X, Y=Y)
    B1 = np.eye(6) + 0.3 * np.random.default_rng(0).standard_normal((6, 6))
    fm.A_ = np.full(6, 1.0 / 32)
    fm.B_x_, fm.B_y_ = B1, np.linalg.inv(B1).T
    fm._build()
    _check_mc_variance(fm, X, Y, "ADERF custom", power=0.08)


def test_wrong_variance_formula_is_detected_by_monte_carlo():
    """Printed eq. (40) (D instead of D^4, erratum c) fails the same z-test."""
    X, Y = make_xy(8, scale=0.9)
    fm = SDERF(n_features=M_BIG, random_state=25).fit(X, Y=Y)
    g = single_products(fm, X[:3], Y[:3])
    K2 = exact_kernel(X[:3], Y[:3]) ** 2
    log_m2 = np.log(fm.variance(X[:3], Y[:3]) * fm.n_features + K2)
    logD = 0.25 * np.sum(np.log1p(-4 * fm.A_))
    printed = np.exp(log_m2 - 3 * logD) - K2
    z_ok, _ = mc_variance_z(g, np.exp(log_m2) - K2)
    z_bad, _ = mc_variance_z(g, printed)
    assert np.abs(z_ok).max() < Z_BOUND
    assert np.abs(z_bad).max() > 20


# ------------------------------------------------------------------ exact checks
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", DERF_MAPS, ids=_name)
def test_moments_by_gauss_hermite_quadrature(cls, kernel):
    """E[f1 f2] = K and E[(f1 f2)^2] = M Var + K^2 exactly (quadrature, rtol 1e-10)."""
    X, Y = make_xy(9, scale=0.9)
    fm = cls(n_features=16, kernel=kernel, random_state=0).fit(X, Y=Y)
    Xe, Ye = X[:4], Y[:5]
    m1, m2 = derf_moments_by_quadrature(fm, Xe, Ye, ALPHA[kernel])
    K = exact_kernel(Xe, Ye, kernel)
    np.testing.assert_allclose(m1, K, rtol=1e-10)
    np.testing.assert_allclose(m2, fm.variance(Xe, Ye) * fm.n_features + K**2, rtol=1e-10)


def test_sderf_quadrature_custom_parameters_and_printed_eq40():
    """Non-fitted a_l (some positive, up to 0.1) and rotation; printed (40) is far off."""
    X, Y = make_xy(10, scale=0.9)
    fm = SDERF(n_features=16, random_state=0).fit(X, Y=Y)
    fm.A_ = np.array([-1.5, -0.4, 0.0, 0.05, 0.1, -0.01])
    fm.B_x_ = fm.B_y_ = rotation(6, seed=3)
    fm._build()
    Xe, Ye = X[:4], Y[:4]
    m1, m2 = derf_moments_by_quadrature(fm, Xe, Ye)
    K = exact_kernel(Xe, Ye)
    np.testing.assert_allclose(m1, K, rtol=1e-10)
    m2_lib = fm.variance(Xe, Ye) * fm.n_features + K**2
    np.testing.assert_allclose(m2, m2_lib, rtol=1e-10)
    logD = 0.25 * np.sum(np.log1p(-4 * fm.A_))
    assert np.all(np.abs(np.log(m2_lib * np.exp(-3 * logD)) - np.log(m2)) > 0.1)


@pytest.mark.parametrize("cls", DERF_MAPS, ids=_name)
def test_second_moment_equals_general_derf_eq15(cls):
    """_log_second_moment (diagonal, transformed form) = eq. (15) from Thm 4.1 parameters."""
    X, Y = make_xy(11)
    for kernel in ("softmax", "gaussian"):
        fm = cls(n_features=8, kernel=kernel, random_state=0).fit(X, Y=Y)
        ref = derf_log_m2(*derf_params(fm), X, Y, alpha=ALPHA[kernel])
        np.testing.assert_allclose(fm._log_second_moment(X, Y, np), ref, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("A", [-2.0, -0.3, 0.0, 0.1])
def test_gerf_variance_closed_form(A):
    X, Y = make_xy(12)
    fm = GERF(n_features=10, A=A, random_state=0).fit(X, Y=Y)
    K = exact_kernel(X, Y)
    ref = (np.exp(gerf_log_m2(A, X, Y)) - K**2) / 10
    np.testing.assert_allclose(fm.variance(X, Y), ref, rtol=1e-10)
    fm_g = GERF(n_features=10, A=A, kernel="gaussian", random_state=0).fit(X, Y=Y)
    Kg = exact_kernel(X, Y, "gaussian")
    ref_g = (np.exp(gerf_log_m2(A, X, Y, alpha=-0.5)) - Kg**2) / 10
    np.testing.assert_allclose(fm_g.variance(X, Y), ref_g, rtol=1e-10)


def test_trig_and_hyperbolic_variance_closed_forms():
    """TrigRF (derived, see the derivations page) and the antithetic hyperbolic formula."""
    X, Y = make_xy(13)
    nx, ny = np.sum(X * X, 1)[:, None], np.sum(Y * Y, 1)[None, :]
    d2 = nx + ny - 2 * X @ Y.T
    K = exact_kernel(X, Y)
    trig = np.exp(nx + ny) * (1 + 0.5 * np.exp(-2 * d2)) - K**2
    hyp = 0.5 * (np.exp(2 * (nx + ny + 2 * X @ Y.T)) + 1) * np.exp(-nx - ny) - K**2
    np.testing.assert_allclose(
        TrigRF(7, random_state=0).fit(X, Y=Y).variance(X, Y) * 7, trig, rtol=1e-10
    )
    np.testing.assert_allclose(
        HyperbolicRF(7, random_state=0).fit(X, Y=Y).variance(X, Y) * 7, hyp, rtol=1e-10
    )
    # Gaussian-kernel TrigRF is random Fourier features: Var = 1 + e^{-2|x-y|^2}/2 - K^2
    Kg = exact_kernel(X, Y, "gaussian")
    rff = 1 + 0.5 * np.exp(-2 * d2) - Kg**2
    got = TrigRF(7, kernel="gaussian", random_state=0).fit(X, Y=Y).variance(X, Y) * 7
    np.testing.assert_allclose(got, rff, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_variance_scales_as_one_over_n_features_and_is_nonnegative(cls):
    X, Y = make_xy(14)
    v1 = cls(n_features=10, random_state=0).fit(X, Y=Y).variance(X, Y)
    v2 = cls(n_features=40, random_state=0).fit(X, Y=Y).variance(X, Y)
    np.testing.assert_allclose(v1, 4 * v2, rtol=1e-12)
    assert np.all(v1 >= 0)
    # the diagonal of a symmetric map on X: still strictly positive (not a zero-variance
    # estimator), and the variance uses Y = X by default
    fm = cls(n_features=10, random_state=0).fit(X)
    np.testing.assert_allclose(fm.variance(X), fm.variance(X, X), rtol=1e-14)
    assert np.all(np.diag(fm.variance(X)) > 0)
