"""Angular hybrid random features (HRF eq. 12, 19): identities, exactness, unbiasedness,
MSE (Thm 3.1 / D.1 with Lemma 3.2) against Monte Carlo, and the max relative error on the
sphere against TrigRF / PositiveRF at matched cost."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.features import AngularHybridRF
from kernelkit.features.hybrid import (
    hybrid_feature_flops,
    matched_n_features,
    regular_feature_flops,
)

Z = 5.0


def _pair_on_sphere(d, r, theta, seed=0):
    """Two vectors of norm r at angle theta, shape (1, d) each."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    x = r * Q[:, 0]
    y = r * (math.cos(theta) * Q[:, 0] + math.sin(theta) * Q[:, 1])
    return x[None, :], y[None, :]


def _draws(make, X, Y, R):
    """(R, n, m) estimates from R independently seeded maps."""
    return np.stack([make(s).fit(X, Y).approx_kernel(X, Y) for s in range(R)])


def test_output_dim_and_feature_dot_equals_mixture():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(4, 6)) * 0.5, rng.normal(size=(5, 6)) * 0.5
    for shared in (True, False):
        fm = AngularHybridRF(n_features=8, n_lambda=8, shared_projection=shared,
                             random_state=0).fit(X, Y)
        P, S = fm.transform(X), fm.transform_y(Y)
        assert P.shape == (4, 288) and S.shape == (5, 288) and fm.output_dim == 288
        lam, kp, kt = fm.approx_components(X, Y)
        # direct formula: lambda_hat = (1 - mean sgn sgn) / 2
        T = fm.lambda_projection_
        lam_direct = 0.5 * (1 - np.sign(X @ T.T) @ np.sign(Y @ T.T).T / 8)
        np.testing.assert_allclose(lam, lam_direct, atol=1e-14)
        W = fm.projection_
        kp_direct = np.exp(-0.5 * (X**2).sum(1)[:, None] - 0.5 * (Y**2).sum(1)[None]) * \
            np.cosh((X @ W.T)[:, None, :] + (Y @ W.T)[None, :, :]).mean(-1)
        Wt = fm.projection_trig_
        kt_direct = np.exp(0.5 * (X**2).sum(1)[:, None] + 0.5 * (Y**2).sum(1)[None]) * \
            np.cos((X @ Wt.T)[:, None, :] - (Y @ Wt.T)[None, :, :]).mean(-1)
        np.testing.assert_allclose(kp, kp_direct, rtol=1e-12)
        np.testing.assert_allclose(kt, kt_direct, rtol=1e-12)
        K = lam_direct * kp_direct + (1 - lam_direct) * kt_direct
        np.testing.assert_allclose(P @ S.T, K, rtol=1e-12)
        np.testing.assert_allclose(fm.approx_kernel(X, Y), K, rtol=1e-12)
        assert (fm.projection_trig_ is fm.projection_) == shared


@pytest.mark.parametrize("r", [0.3, 1.3])
@pytest.mark.parametrize("shared", [True, False])
def test_zero_variance_at_theta_0_and_pi_for_equal_norms(r, shared):
    for theta in (0.0, math.pi):
        X, Y = _pair_on_sphere(7, r, theta)
        exact = math.exp(float((X @ Y.T)[0, 0]))
        for seed in range(20):
            fm = AngularHybridRF(n_features=4, n_lambda=3, shared_projection=shared,
                                 random_state=seed).fit(X, Y)
            np.testing.assert_allclose(fm.approx_kernel(X, Y), exact, rtol=1e-12)
            np.testing.assert_allclose(fm.transform(X) @ fm.transform_y(Y).T, exact,
                                       rtol=1e-10)
        assert fm.variance(X, Y)[0, 0] <= 1e-12 * exact**2


def test_variance_nonzero_at_theta_0_unequal_norms():
    X, _ = _pair_on_sphere(5, 0.6, 0.0)
    Y = 0.5 * X
    fm = AngularHybridRF(n_features=3, n_lambda=2, random_state=0).fit(X, Y)
    assert fm.variance(X, Y)[0, 0] > 1e-4
    vals = {float(AngularHybridRF(n_features=3, n_lambda=2, random_state=s).fit(X, Y)
                  .approx_kernel(X, Y)[0, 0]) for s in range(5)}
    assert len(vals) > 1


@pytest.mark.parametrize("shared", [True, False])
def test_unbiased_and_mse_matches_monte_carlo(shared):
    """Mean within Z SE of exp(x.y); empirical MSE within Z SE (from the 4th moment)."""
    d, m, n, R = 5, 3, 2, 6000
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, d)) * 0.25
    Y = rng.normal(size=(2, d)) * 0.25
    Y[1] = -0.9 * X[1]  # near theta = pi with unequal norms
    K = np.exp(X @ Y.T)
    est = _draws(lambda s: AngularHybridRF(m, n, shared_projection=shared, random_state=s),
                 X, Y, R)
    err = est - K
    z_mean = err.mean(0) / (err.std(0) / math.sqrt(R))
    assert np.abs(z_mean).max() < Z
    mse = AngularHybridRF(m, n, shared_projection=shared, random_state=0).fit(X, Y).variance(X, Y)
    sq = err**2
    z_mse = (sq.mean(0) - mse) / (sq.std(0) / math.sqrt(R))
    assert np.abs(z_mse).max() < Z, z_mse


def test_matched_n_features_rule():
    assert matched_n_features(128, 64, 8) == 95
    assert matched_n_features(128, 64, 8, shared_projection=False) == 53
    assert hybrid_feature_flops(8, 8, 64) == 2 * 16 * 64 + 32 + 8 + 256
    assert regular_feature_flops(128, 64) == 2 * 128 * 64 + 256
    for M, d, n, shared in [(128, 64, 8, True), (256, 16, 4, False), (50, 3, 2, True)]:
        m = matched_n_features(M, d, n, shared_projection=shared)
        budget = regular_feature_flops(M, d)
        assert hybrid_feature_flops(m, n, d, shared_projection=shared) <= budget
        assert hybrid_feature_flops(m + 1, n, d, shared_projection=shared) > budget
    assert matched_n_features(128, 64, 8, rule="dimension") == 7
    with pytest.raises(ValueError, match="n_lambda"):
        matched_n_features(4, 3, 4)
    with pytest.raises(ValueError, match="rule"):
        matched_n_features(128, 64, 8, rule="cost")
