"""Gaussian-lambda (Sec. 2.4, eq. 20) and normalised Gaussian (App. F) hybrids: feature
identities, unbiasedness, coefficient moments and the Thm 3.1 / F.1 / F.2 MSE against
Monte Carlo (norms kept small: positive-feature errors are heavy-tailed).
The Gaussian kernel is covered by the exact rescaling identity of
``test_hybrid_backends.py::test_gaussian_kernel_is_the_rescaled_softmax_estimator``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.features import GaussianHybridRF, NormalizedGaussianHybridRF

Z = 5.0
#: draws per Monte Carlo study: the MSE is still resolved to < 20 % (1 SE; asserted)
R_MC = 2500


def _data(seed=3, d=5, scale=0.12):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2, d)) * scale
    Y = rng.normal(size=(2, d)) * scale
    Y[1] = -0.6 * X[1]  # theta = pi, unequal norms
    return X, Y


def _mc_check(make, X, Y, R, kernel_exact):
    est = np.stack([make(s).fit(X, Y=Y).approx_kernel(X, Y) for s in range(R)])  # (R, n, m)
    err = est - kernel_exact
    z_mean = err.mean(0) / (err.std(0) / math.sqrt(R))
    assert np.abs(z_mean).max() < Z, z_mean
    mse = make(0).fit(X, Y=Y).variance(X, Y)
    sq = err**2
    z_mse = (sq.mean(0) - mse) / (sq.std(0) / math.sqrt(R))
    assert np.abs(z_mse).max() < Z, z_mse
    # power: the MSE is resolved to a few per cent, so a wrong formula would be caught
    assert (sq.std(0) / math.sqrt(R) / mse).max() < 0.2


def test_feature_dimensions_and_dot_equals_mixture():
    X, Y = _data(scale=0.5)
    cases = [
        (GaussianHybridRF(4, 3, random_state=0), 2 * 4 * (4 * 3 + 1)),
        (GaussianHybridRF(4, 3, lambda_features="trig", random_state=0), 2 * 4 * 13),
        (NormalizedGaussianHybridRF(4, 3, random_state=0), 4 * 4 * (2 * 3 + 1)),
    ]
    for fm, dim in cases:
        fm.fit(X, Y=Y)
        P, S = fm.transform(X), fm.transform_y(Y)
        assert P.shape == (2, dim) and S.shape == (2, dim) and fm.output_dim == dim
        lam, kp, kt = fm.approx_components(X, Y)
        np.testing.assert_allclose(P @ S.T, lam * kp + (1 - lam) * kt, rtol=1e-12)
        np.testing.assert_allclose(fm.approx_kernel(X, Y), P @ S.T, rtol=1e-12)


def test_gaussian_lambda_hat_direct_formula():
    X, Y = _data(scale=0.5)
    c, n = 0.8, 3
    fm = GaussianHybridRF(2, n, lambda_bandwidth=c, random_state=1).fit(X, Y=Y)
    T = fm.lambda_projection_
    u, v = X / c, -Y / c
    nu, nv = (u * u).sum(1)[:, None], (v * v).sum(1)[None, :]
    direct = np.exp(-nu - nv) * np.cosh((u @ T.T)[:, None, :] + (v @ T.T)[None, :, :]).mean(-1)
    np.testing.assert_allclose(fm.approx_components(X, Y)[0], direct, rtol=1e-12)
    fm = GaussianHybridRF(2, n, lambda_bandwidth=c, lambda_features="trig", random_state=1).fit(
        X, Y=Y
    )
    T = fm.lambda_projection_
    direct = np.cos((u @ T.T)[:, None, :] - (v @ T.T)[None, :, :]).mean(-1)
    np.testing.assert_allclose(fm.approx_components(X, Y)[0], direct, rtol=1e-12)
    exact = np.exp(-((X[:, None, :] + Y[None]) ** 2).sum(-1) / (2 * c * c))
    np.testing.assert_allclose(fm.exact_lambda(X, Y), exact, rtol=1e-12)


@pytest.mark.parametrize("lam_features", ["positive", "trig"])
def test_gaussian_lambda_moments_monte_carlo(lam_features):
    """E lambda_hat = lambda and Var lambda_hat from one map with many lambda features."""
    X, Y = _data(scale=0.3)
    n = 200_000
    fm = GaussianHybridRF(
        1, n, lambda_bandwidth=0.9, lambda_features=lam_features, random_state=2
    ).fit(X, Y=Y)
    lam_exact = fm.exact_lambda(X, Y)
    log_lam, log_var = fm._lambda_log_var(X, Y, np)
    np.testing.assert_allclose(np.exp(log_lam), lam_exact, rtol=1e-12)
    var1 = np.exp(log_var) * n  # single-feature variance
    lam = fm.approx_components(X, Y)[0]
    z = (lam - lam_exact) / np.sqrt(var1 / n)
    assert np.abs(z).max() < Z


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lam_features", "shared"), [("positive", True), ("trig", True), ("positive", False)]
)
def test_gaussian_hybrid_unbiased_and_mse(lam_features, shared):
    """Thm 3.1 with the coefficient moments of either lambda estimator (the shared-W term
    uses all three moments; ("trig", False) would repeat covered terms)."""
    X, Y = _data()
    _mc_check(
        lambda s: GaussianHybridRF(
            3, 2, shared_projection=shared, lambda_features=lam_features, random_state=s
        ),
        X,
        Y,
        R_MC,
        np.exp(X @ Y.T),
    )


def test_gaussian_hybrid_trig_lambda_exact_at_x_equals_minus_y():
    """x = -y: lambda_hat = cos(0) = 1 and SM^{++} is exact (z = 0)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1, 6))
    for s in range(10):
        fm = GaussianHybridRF(3, 2, lambda_features="trig", random_state=s).fit(X, Y=-X)
        np.testing.assert_allclose(fm.approx_kernel(X, -X), np.exp(-X @ X.T), rtol=1e-12)
    assert fm.variance(X, -X)[0, 0] < 1e-25


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False])
def test_normalized_gaussian_unbiased_and_mse(shared):
    X, Y = _data()
    _mc_check(
        lambda s: NormalizedGaussianHybridRF(
            3, 2, sigma=1.5, shared_projection=shared, random_state=s
        ),
        X,
        Y,
        R_MC,
        np.exp(X @ Y.T),
    )


def _sphere_pair(d, r, theta, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    x = r * Q[:, 0]
    y = r * (math.cos(theta) * Q[:, 0] + math.sin(theta) * Q[:, 1])
    return x[None, :], y[None, :]


def test_normalized_gaussian_theorem_f2_and_lambda_endpoints():
    """F.2 on the sphere (independent projections); lambda(0) = 0, lambda(pi) = 1."""
    r, sigma, m, n, d = 0.7, 1.5, 3, 2, 4
    thetas = np.linspace(0.0, np.pi, 7)
    pairs = [_sphere_pair(d, r, th) for th in thetas]
    X = np.concatenate([p[0] for p in pairs])
    Y = np.concatenate([p[1] for p in pairs])
    fm = NormalizedGaussianHybridRF(
        m, n, sigma=sigma, radius=r, shared_projection=False, random_state=0
    ).fit(X, Y=Y)
    lam = np.diag(fm.exact_lambda(X, Y))
    np.testing.assert_allclose(lam[[0, -1]], [0.0, 1.0], atol=1e-12)
    D2 = 4 * r * r * np.sin(thetas / 2) ** 2
    rho = 1 - np.exp(-2 * sigma**2 * r * r)
    el2 = (1 - np.exp(-(sigma**2) * D2 / 2)) ** 2 / rho**2 + (1 - np.exp(-(sigma**2) * D2)) ** 2 / (
        2 * rho**2 * n
    )
    e1l2 = ((1 - rho) - np.exp(-(sigma**2) * D2 / 2)) ** 2 / rho**2 + (
        1 - np.exp(-(sigma**2) * D2)
    ) ** 2 / (2 * rho**2 * n)
    z2 = 4 * r * r * np.cos(thetas / 2) ** 2
    sm = np.exp(r * r * np.cos(thetas))
    mse_pp = np.exp(z2) * sm**2 / (2 * m) * (1 - np.exp(-z2)) ** 2
    mse_tr = np.exp(z2) / sm**2 / (2 * m) * (1 - np.exp(-D2)) ** 2
    np.testing.assert_allclose(
        np.diag(fm.variance(X, Y)), el2 * mse_pp + e1l2 * mse_tr, rtol=1e-10, atol=1e-20
    )
    # shared projections: unchanged for equal norms (cos(|x|^2 - |y|^2) = 1)
    fm2 = NormalizedGaussianHybridRF(m, n, sigma=sigma, radius=r, random_state=0).fit(X, Y=Y)
    np.testing.assert_allclose(fm2.variance(X, Y), fm.variance(X, Y), rtol=1e-10, atol=1e-20)


def test_normalized_gaussian_zero_variance_at_theta_0():
    X, Y = _sphere_pair(5, 1.2, 0.0)
    for s in range(10):
        fm = NormalizedGaussianHybridRF(3, 2, random_state=s).fit(X, Y=Y)
        np.testing.assert_allclose(fm.approx_kernel(X, Y), np.exp(X @ Y.T), rtol=1e-12)
    assert fm.variance(X, Y)[0, 0] < 1e-20
    Xp, Yp = _sphere_pair(5, 1.2, np.pi)  # not exact at theta = pi
    assert fm.variance(Xp, Yp)[0, 0] > 1e-6


def test_normalized_gaussian_radius_fit_and_tau_scale():
    X, Y = _data(scale=0.5)
    fm = NormalizedGaussianHybridRF(2, 50_000, sigma=2.0, random_state=0).fit(X, Y=Y)
    r2 = np.concatenate([(X**2).sum(1), (Y**2).sum(1)]).mean()
    assert fm.radius_ == pytest.approx(math.sqrt(r2))
    assert fm.rho_ == pytest.approx(1 - math.exp(-2 * 4.0 * r2))
    # tau_i ~ N(0, sigma^2 I) (Erratum 6)
    assert np.var(fm.lambda_projection_) == pytest.approx(4.0, rel=0.02)
    fm = NormalizedGaussianHybridRF(2, 3, radius=2.0, lengthscale=2.0, random_state=0).fit(X, Y=Y)
    assert fm.radius_ == 1.0


@pytest.mark.parametrize("cls", [GaussianHybridRF, NormalizedGaussianHybridRF])
def test_bad_parameters(cls):
    X, Y = _data()
    with pytest.raises(ValueError, match="n_lambda"):
        cls(3, 0).fit(X, Y=Y)
    with pytest.raises(TypeError, match="n_lambda"):
        cls(3, 2.5).fit(X, Y=Y)
    with pytest.raises(TypeError, match="shared_projection"):
        cls(3, 2, shared_projection="yes").fit(X, Y=Y)
    with pytest.raises(ValueError, match="kernel"):
        cls(3, 2, kernel="laplace").fit(X, Y=Y)
    if cls is GaussianHybridRF:
        with pytest.raises(ValueError, match="lambda_bandwidth"):
            cls(3, 2, lambda_bandwidth=0.0).fit(X, Y=Y)
        with pytest.raises(ValueError, match="lambda_features"):
            cls(3, 2, lambda_features="sign").fit(X, Y=Y)
    else:
        with pytest.raises(ValueError, match="sigma"):
            cls(3, 2, sigma=-1.0).fit(X, Y=Y)
        with pytest.raises(ValueError, match="radius"):
            cls(3, 2).fit(np.zeros((2, 5)))
