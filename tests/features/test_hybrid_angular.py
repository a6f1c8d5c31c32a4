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
    return np.stack([make(s).fit(X, Y=Y).approx_kernel(X, Y) for s in range(R)])


def test_output_dim_and_feature_dot_equals_mixture():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(4, 6)) * 0.5, rng.normal(size=(5, 6)) * 0.5
    for shared in (True, False):
        fm = AngularHybridRF(
            n_features=8, n_lambda=8, shared_projection=shared, random_state=0
        ).fit(X, Y=Y)
        P, S = fm.transform(X), fm.transform_y(Y)
        assert P.shape == (4, 288) and S.shape == (5, 288) and fm.output_dim == 288
        lam, kp, kt = fm.approx_components(X, Y)
        # direct formula: lambda_hat = (1 - mean sgn sgn) / 2
        T = fm.lambda_projection_
        lam_direct = 0.5 * (1 - np.sign(X @ T.T) @ np.sign(Y @ T.T).T / 8)
        np.testing.assert_allclose(lam, lam_direct, atol=1e-14)
        W = fm.projection_
        kp_direct = np.exp(-0.5 * (X**2).sum(1)[:, None] - 0.5 * (Y**2).sum(1)[None]) * np.cosh(
            (X @ W.T)[:, None, :] + (Y @ W.T)[None, :, :]
        ).mean(-1)
        Wt = fm.projection_trig_
        kt_direct = np.exp(0.5 * (X**2).sum(1)[:, None] + 0.5 * (Y**2).sum(1)[None]) * np.cos(
            (X @ Wt.T)[:, None, :] - (Y @ Wt.T)[None, :, :]
        ).mean(-1)
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
            fm = AngularHybridRF(
                n_features=4, n_lambda=3, shared_projection=shared, random_state=seed
            ).fit(X, Y=Y)
            np.testing.assert_allclose(fm.approx_kernel(X, Y), exact, rtol=1e-12)
            np.testing.assert_allclose(fm.transform(X) @ fm.transform_y(Y).T, exact, rtol=1e-10)
        assert fm.variance(X, Y)[0, 0] <= 1e-12 * exact**2


def test_variance_nonzero_at_theta_0_unequal_norms():
    X, _ = _pair_on_sphere(5, 0.6, 0.0)
    Y = 0.5 * X
    fm = AngularHybridRF(n_features=3, n_lambda=2, random_state=0).fit(X, Y=Y)
    assert fm.variance(X, Y)[0, 0] > 1e-4
    vals = {
        float(
            AngularHybridRF(n_features=3, n_lambda=2, random_state=s)
            .fit(X, Y=Y)
            .approx_kernel(X, Y)[0, 0]
        )
        for s in range(5)
    }
    assert len(vals) > 1


R_MC = 4000  # independent maps per Monte Carlo study


@pytest.fixture(scope="module")
def mc_draws():
    """R_MC independently seeded maps (m = 3, n = 2, d = 5) for each variant of W, shared
    by the Monte Carlo tests: per draw the components (lambda_hat, SM^{++}, SM^{trig}) and
    the hybrid estimate, each (R, 2, 2). Pair (1, 1) sits at theta = pi with unequal
    norms; the others at random angles."""
    d, m, n = 5, 3, 2
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, d)) * 0.25
    Y = rng.normal(size=(2, d)) * 0.25
    Y[1] = -0.9 * X[1]  # theta = pi with unequal norms
    out = {"X": X, "Y": Y, "m": m, "n": n}
    for shared in (True, False):
        comps = [
            AngularHybridRF(m, n, shared_projection=shared, random_state=s)
            .fit(X, Y=Y)
            .approx_components(X, Y)
            for s in range(R_MC)
        ]
        lam, kp, kt = (np.stack([c[i] for c in comps]) for i in range(3))
        out[shared] = {"lam": lam, "kp": kp, "kt": kt, "est": lam * kp + (1 - lam) * kt}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False])
def test_unbiased_and_mse_matches_monte_carlo(mc_draws, shared):
    """Mean within Z SE of exp(x.y); empirical MSE within Z SE (from the 4th moment) of
    Thm 3.1 (variant II for shared W, I otherwise), resolved to a few per cent."""
    X, Y, m, n = mc_draws["X"], mc_draws["Y"], mc_draws["m"], mc_draws["n"]
    K = np.exp(X @ Y.T)
    err = mc_draws[shared]["est"] - K
    z_mean = err.mean(0) / (err.std(0) / math.sqrt(R_MC))
    assert np.abs(z_mean).max() < Z
    mse = AngularHybridRF(m, n, shared_projection=shared, random_state=0).fit(X, Y=Y).variance(X, Y)
    sq = err**2
    z_mse = (sq.mean(0) - mse) / (sq.std(0) / math.sqrt(R_MC))
    assert np.abs(z_mse).max() < Z, z_mse
    assert (sq.std(0) / math.sqrt(R_MC) / mse).max() < 0.1  # power


@pytest.mark.slow
def test_base_estimators_lemma_2_2_and_eq_38(mc_draws):
    """MSE(trig) = f1(|z|) f3(|Delta|), MSE(++) = f2(|z|) f3(|z|) (Lemma 2.2) and, with a
    shared W, E[SM^{++} SM^{trig}] = (1 - 1/m) SM^2 + SM^2 cos(|x|^2 - |y|^2) / m (eq. 38,
    Erratum 2), from the components of the R independent maps."""
    X, Y, m = mc_draws["X"], mc_draws["Y"], mc_draws["m"]
    kp, kt = mc_draws[True]["kp"], mc_draws[True]["kt"]  # (R, 2, 2)
    K = np.exp(X @ Y.T)
    nx, ny = (X**2).sum(1)[:, None], (Y**2).sum(1)[None]
    z2, d2 = nx + ny + 2 * X @ Y.T, nx + ny - 2 * X @ Y.T
    f3 = lambda u2: (1 - np.exp(-u2)) ** 2  # noqa: E731
    mse_tr = np.exp(z2) / K**2 / (2 * m) * f3(d2)
    mse_pp = np.exp(z2) * K**2 / (2 * m) * f3(z2)
    cross = (1 - 1 / m) * K**2 + K**2 * np.cos(nx - ny) / m
    for samples, target in (((kt - K) ** 2, mse_tr), ((kp - K) ** 2, mse_pp), (kp * kt, cross)):
        z = (samples.mean(0) - target) / (samples.std(0) / math.sqrt(R_MC))
        assert np.abs(z).max() < Z, z
    # C(m, 2) in place of m(m - 1) (the printed eq. 36) is rejected
    wrong = K**2 * (m * (m - 1) / 2 + m * np.cos(nx - ny)) / m**2
    assert np.abs((kp * kt).mean(0) - wrong).max() > 20 * ((kp * kt).std(0) / math.sqrt(R_MC)).max()


@pytest.mark.slow
def test_lambda_hat_is_unbiased_for_theta_over_pi(mc_draws):
    """E lambda_hat = theta / pi (Goemans-Williamson), Var = t(1-t)/n (Lemma 3.2), from the
    coefficients of the R independent maps; exactly 1 at theta = pi."""
    X, Y, n = mc_draws["X"], mc_draws["Y"], mc_draws["n"]
    lam = mc_draws[False]["lam"]  # (R, 2, 2); T is drawn the same way for either variant
    fm = AngularHybridRF(2, n, random_state=0).fit(X, Y=Y)
    t = fm.exact_lambda(X, Y)
    cos = (X @ Y.T) / np.outer(np.linalg.norm(X, axis=1), np.linalg.norm(Y, axis=1))
    np.testing.assert_allclose(t, np.arccos(np.clip(cos, -1, 1)) / np.pi, atol=1e-8)  # snap
    live = (t > 0) & (t < 1)
    assert live.sum() == 3 and t[1, 1] == 1.0
    np.testing.assert_allclose(lam[:, 1, 1], 1.0, atol=1e-12)
    se = np.sqrt(t * (1 - t) / n / R_MC)
    assert np.abs((lam.mean(0) - t)[live] / se[live]).max() < Z
    # Var of the sample variance of a bounded variable: relative SE ~ sqrt(2 / R) ~ 2 %
    np.testing.assert_allclose(lam.var(0)[live], (t * (1 - t) / n)[live], rtol=0.12)


def test_errata_9_bound_holds_and_printed_eq27_fails():
    """Thm 3.5 bound: the corrected form W(r)(2m)^{-1/2} sqrt((1-1/n)/(pi r^2) +
    1/(n sqrt(pi) r)) holds on a theta grid for r in [1, 10]; the printed eq. 27
    (1/r) (2m)^{-1/2} W(r) sqrt(1/pi - 1/(n pi) + 1/(n sqrt(pi))) fails at n = 1, r = 5."""
    thetas = np.linspace(1e-3, np.pi - 1e-3, 301)
    m, d = 2, 3
    base = [_pair_on_sphere(d, 1.0, th, seed=6) for th in thetas]
    X1 = np.concatenate([p[0] for p in base])
    Y1 = np.concatenate([p[1] for p in base])

    def eps_max(r, n):
        X, Y = r * X1, r * Y1
        fm = AngularHybridRF(m, n, random_state=0).fit(X, Y=Y)
        return (np.sqrt(np.diag(fm.variance(X, Y))) / np.exp(np.sum(X * Y, axis=1))).max()

    for n in (1, 2, 4):
        for r in (1.0, 2.0, 5.0, 10.0):
            W = np.exp(2 * r * r) * (1 - np.exp(-4 * r * r))
            bound = (
                W
                / np.sqrt(2 * m)
                * np.sqrt((1 - 1 / n) / (np.pi * r * r) + 1 / (n * np.sqrt(np.pi) * r))
            )
            assert eps_max(r, n) <= bound * (1 + 1e-9), (n, r)
    r, n = 5.0, 1
    W = np.exp(2 * r * r) * (1 - np.exp(-4 * r * r))
    printed = (
        W / (r * np.sqrt(2 * m)) * np.sqrt(1 / np.pi - 1 / (n * np.pi) + 1 / (n * np.sqrt(np.pi)))
    )
    assert eps_max(r, n) > printed
    # docs/derivations/hybrid.md, table of worst-case gains: max eps(anghyb) / max eps(trig)
    # = .165 at n = 1, r = 5 (equal m); with m = 1 this is erratum 9's "max eps/W = 0.117
    # against a bound of 0.106"
    np.testing.assert_allclose(eps_max(r, n) / W * np.sqrt(2 * m), 0.165, atol=1e-3)
    np.testing.assert_allclose(printed / W * np.sqrt(2 * m) / np.sqrt(2), 0.106, atol=1e-3)


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


def _eq47_corrected(r, theta, m, n):
    """Corrected eq. 47 (Erratum 3): MSE on the sphere of radius r."""
    t = theta / np.pi
    c2, s2 = np.cos(theta / 2) ** 2, np.sin(theta / 2) ** 2
    pp = (
        t
        * (t - t / n + 1 / n)
        / (2 * m)
        * np.exp(8 * r * r * c2 - 2 * r * r)
        * (1 - np.exp(-4 * r * r * c2)) ** 2
    )
    tr = (
        (1 - t) * (1 - t + t / n) / (2 * m) * np.exp(2 * r * r) * (1 - np.exp(-4 * r * r * s2)) ** 2
    )
    return pp + tr


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("r", [0.5, 1.5])
def test_variance_on_sphere_is_corrected_eq47(shared, r):
    m, n, d = 3, 2, 5
    thetas = np.linspace(0.0, np.pi, 9)
    pairs = [_pair_on_sphere(d, r, th, seed=2) for th in thetas]
    X = np.concatenate([p[0] for p in pairs])
    Y = np.concatenate([p[1] for p in pairs])
    fm = AngularHybridRF(m, n, shared_projection=shared, random_state=0).fit(X, Y=Y)
    np.testing.assert_allclose(
        np.diag(fm.variance(X, Y)), _eq47_corrected(r, thetas, m, n), rtol=1e-10, atol=1e-20
    )


def test_variance_limit_thm_3_5():
    """lim eps/sqrt(theta) = lim eps/sqrt(pi - theta) = W(r)/sqrt(2 pi m n) (Thm 3.5)."""
    r, m, n, d = 1.5, 4, 3, 3
    Wr = np.exp(2 * r * r) * (1 - np.exp(-4 * r * r))
    for theta, gap in ((1e-5, 1e-5), (np.pi - 1e-5, 1e-5)):
        X, Y = _pair_on_sphere(d, r, theta)
        fm = AngularHybridRF(m, n, random_state=0).fit(X, Y=Y)
        eps = np.sqrt(fm.variance(X, Y)[0, 0]) / np.exp((X @ Y.T)[0, 0])
        np.testing.assert_allclose(eps / np.sqrt(gap), Wr / np.sqrt(2 * np.pi * m * n), rtol=1e-3)


def test_shared_projection_lowers_mse_for_unequal_norms():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3, 4)) * 0.6
    Y = rng.normal(size=(3, 4)) * 0.3
    v1 = AngularHybridRF(3, 2, shared_projection=True, random_state=0).fit(X, Y=Y).variance(X, Y)
    v2 = AngularHybridRF(3, 2, shared_projection=False, random_state=0).fit(X, Y=Y).variance(X, Y)
    assert np.all(v1 < v2)


def test_max_relative_error_on_sphere_analytic_equal_m():
    """Equal m: max_theta eps(anghyb) <= 0.5 max_theta eps(trig) = 0.5 max eps(++)
    (derivations page, derived table), from :meth:`variance` on a theta grid."""
    thetas = np.linspace(0.0, np.pi, 61)
    d = 3
    pairs = [_pair_on_sphere(d, 1.0, th, seed=3) for th in thetas]
    X1 = np.concatenate([p[0] for p in pairs])
    Y1 = np.concatenate([p[1] for p in pairs])
    for m in (4,):
        for n in (1, 2, 8, 64):
            for r in (0.05, 0.5, 1.0, 2.0, 4.0):
                X, Y = r * X1, r * Y1
                fm = AngularHybridRF(m, n, random_state=0).fit(X, Y=Y)
                eps = np.sqrt(np.diag(fm.variance(X, Y))) / np.exp(np.sum(X * Y, axis=1))
                # Lemma 3.4: max eps(trig) = max eps(++) = W(r) / sqrt(2m)
                W = np.exp(2 * r * r) * (1 - np.exp(-4 * r * r))
                assert eps.max() <= 0.5 * W / np.sqrt(2 * m) * (1 + 1e-9), (n, r)


@pytest.mark.slow
def test_max_relative_error_on_sphere_below_trig_and_positive_at_matched_cost():
    """Monte Carlo on the sphere (d = 16, r = 0.5, 13 angles): the angular hybrid at the
    FLOP-matched size (:func:`matched_n_features`) has a smaller maximum relative error
    than TrigRF and PositiveRF with M projections, and than the analytic Lemma 3.4 value
    W(r)/sqrt(2M) of the sin/cos trig and antithetic FAVOR+ maps."""
    from kernelkit.features import PositiveRF, TrigRF

    d, r, M, n, R = 16, 0.5, 16, 4, 800  # MC eps within ~4 % of the analytic value
    m = matched_n_features(M, d, n)
    thetas = np.linspace(0.0, np.pi, 13)
    pairs = [_pair_on_sphere(d, r, th, seed=4) for th in thetas]
    X = np.concatenate([p[0] for p in pairs])
    Y = np.concatenate([p[1] for p in pairs])
    K = np.exp(np.sum(X * Y, axis=1))

    def max_rel_error(make):
        est = np.stack([np.diag(make(s).fit(X, Y=Y).approx_kernel(X, Y)) for s in range(R)])
        return (np.sqrt(np.mean((est - K) ** 2, axis=0)) / K).max()

    hyb = max_rel_error(lambda s: AngularHybridRF(m, n, random_state=s))
    trig = max_rel_error(lambda s: TrigRF(M, random_state=s))
    pos = max_rel_error(lambda s: PositiveRF(M, random_state=s))
    analytic = AngularHybridRF(m, n, random_state=0).fit(X, Y=Y)
    eps_an = (np.sqrt(np.diag(analytic.variance(X, Y))) / K).max()
    assert abs(hyb / eps_an - 1) < 0.15  # MC agrees with the analytic maximum
    W = np.exp(2 * r * r) * (1 - np.exp(-4 * r * r))
    # analytic values: hybrid 0.0999, TrigRF / PositiveRF ~0.35 / 0.30, sin/cos trig 0.184
    assert hyb < 0.5 * min(trig, pos), (hyb, trig, pos)
    assert hyb < 0.7 * W / np.sqrt(2 * M)


def test_bad_parameters():
    X = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.raises(ValueError, match="n_lambda"):
        AngularHybridRF(4, 0).fit(X)
    with pytest.raises(TypeError, match="n_lambda"):
        AngularHybridRF(4, None).fit(X)
    with pytest.raises(ValueError, match="n_features"):
        AngularHybridRF(0, 2).fit(X)
    with pytest.raises(TypeError, match="shared_projection"):
        AngularHybridRF(4, 2, shared_projection=1).fit(X)
    with pytest.raises(ValueError, match="lengthscale"):
        AngularHybridRF(4, 2, lengthscale=-1.0).fit(X)
    with pytest.raises(ValueError, match=r"'sampler' parameter .* Got 'sobol'"):
        AngularHybridRF(4, 2, sampler="sobol").fit(X)
    with pytest.raises(ValueError, match="n_features"):
        matched_n_features(0, 3, 2)
    with pytest.raises(ValueError, match="n_lambda"):
        matched_n_features(10, 3, 0)
    fm = AngularHybridRF(4, 2, random_state=0)
    assert fm.output_dim == 4 * 4 * 3  # known before fit
    with pytest.raises(Exception, match="not fitted"):
        fm.transform(X)
