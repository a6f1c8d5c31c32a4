"""Random-feature ridge / GP regression / GP classification (App. D): scikit-learn
contract, eq. 88-89 against the function-space eq. 84-85, convergence to the exact GP,
complex features, Milios et al. label transformation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF
from sklearn.linear_model import Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernelkit.estimators import (
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.estimators._posterior import FeaturePosterior, gram_primal
from kernelkit.estimators.gp import mc_softmax, milios_transform
from kernelkit.features import SADERF, RandomFourierFeatures
from kernelkit.kernels import gaussian_kernel


@parametrize_with_checks(
    [
        RandomFeatureRidge(),
        RandomFeatureGPRegressor(),
        RandomFeatureGPRegressor(
            RandomFourierFeatures(128, lengthscale=3.0, complex=True), normalize_y=True
        ),
        RandomFeatureGPClassifier(n_samples=200),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _toy(n=40, d=2, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, -1] + noise * rng.normal(size=n)
    return X, y


# ------------------------------------------------------------------ App. D identities
def _function_space(Phi, y, noise, Phi_s):
    """eq. 84-85 with dense solves: K_hat = Phi Phi^H, k_hat(x, X) = phi(x)^T Phi^H."""
    Kn = Phi @ np.conj(Phi).T + np.diag(noise)
    ks = Phi_s @ np.conj(Phi).T  # (n*, N)
    mu = ks @ np.linalg.solve(Kn, y)
    cov = Phi_s @ np.conj(Phi_s).T - ks @ np.linalg.solve(Kn, np.conj(ks).T)
    return mu, cov


def _weight_space(Phi, y, noise, Phi_s):
    """Bayesian linear model, w ~ CN(0, I): posterior of w, then phi(x)^T w (eq. 88-89)."""
    W = np.diag(1.0 / noise)
    B = np.conj(Phi).T @ W @ Phi + np.eye(Phi.shape[1])
    mean_w = np.linalg.solve(B, np.conj(Phi).T @ W @ y)
    return Phi_s @ mean_w, Phi_s @ np.linalg.solve(B, np.conj(Phi_s).T)


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("D", [6, 40])  # D < N (primal cheaper) and D > N (dual cheaper)
def test_eq88_89_equal_function_and_weight_space_forms(complex_, D):
    X, y = _toy(25, 3, seed=1)
    Xs = _toy(7, 3, seed=2)[0]
    fm = RandomFourierFeatures(D, lengthscale=1.3, complex=complex_, random_state=0).fit(X)
    Phi, Phi_s = fm.transform(X), fm.transform(Xs)
    noise = np.random.default_rng(3).uniform(0.05, 0.5, size=25)  # heteroscedastic
    mu_f, cov_f = _function_space(Phi, y, noise, Phi_s)
    mu_w, cov_w = _weight_space(Phi, y, noise, Phi_s)
    np.testing.assert_allclose(mu_f, mu_w, atol=1e-9)
    np.testing.assert_allclose(cov_f, cov_w, atol=1e-9)
    if complex_:
        assert np.abs(mu_f.imag).max() > 1e-3  # the discarded imaginary part is not 0
    for solver in ("primal", "dual"):
        post = FeaturePosterior.fit(
            Phi.astype(np.result_type(Phi, np.float64)), y[:, None], noise, solver
        )
        assert post.mode == solver
        np.testing.assert_allclose(post.mean(Phi_s)[:, 0], mu_f.real, atol=1e-9)
        np.testing.assert_allclose(post.var(Phi_s), np.diag(cov_f).real, atol=1e-9)
        np.testing.assert_allclose(post.cov(Phi_s), cov_f.real, atol=1e-9)


def test_three_real_products_form_of_B():
    rng = np.random.default_rng(4)
    Phi = rng.normal(size=(30, 5)) + 1j * rng.normal(size=(30, 5))
    w = rng.uniform(0.5, 2, size=30)
    np.testing.assert_allclose(gram_primal(Phi, w), np.conj(Phi).T @ (Phi * w[:, None]), atol=1e-12)


def test_regressor_predict_matches_posterior_and_options():
    X, y = _toy(30, 2, seed=5)
    Xs = _toy(9, 2, seed=6)[0]
    fm = RandomFourierFeatures(20, complex=True, random_state=1)
    gp = RandomFeatureGPRegressor(fm, noise=0.2, amplitude=1.7).fit(X, y)
    Phi = fm.fit(X).transform(X) * np.sqrt(1.7)
    Phi_s = fm.transform(Xs) * np.sqrt(1.7)
    mu, cov = _function_space(Phi, y, np.full(30, 0.2), Phi_s)
    m, s = gp.predict(Xs, return_std=True)
    np.testing.assert_allclose(m, mu.real, atol=1e-10)
    np.testing.assert_allclose(s**2, np.diag(cov).real, atol=1e-10)
    _, s_y = gp.predict(Xs, return_std=True, include_noise=True)
    np.testing.assert_allclose(s_y**2, s**2 + 0.2, atol=1e-12)
    _, c = gp.predict(Xs, return_cov=True)
    np.testing.assert_allclose(c, cov.real, atol=1e-10)
    with pytest.raises(RuntimeError):
        gp.predict(Xs, return_std=True, return_cov=True)
    # multi-output targets share the variance
    Y2 = np.column_stack([y, 2 * y])
    m2, s2 = (
        RandomFeatureGPRegressor(fm, noise=0.2, amplitude=1.7)
        .fit(X, Y2)
        .predict(Xs, return_std=True)
    )
    np.testing.assert_allclose(m2, np.column_stack([m, 2 * m]), atol=1e-10)
    np.testing.assert_allclose(s2, np.column_stack([s, s]), atol=1e-12)


# ------------------------------------------------------------------ convergence
def _exact_gp(X, y, Xs, noise, ls):
    gpr = GaussianProcessRegressor(RBF(ls), alpha=noise, optimizer=None).fit(X, y)
    return gpr.predict(Xs, return_std=True)


@pytest.mark.parametrize("complex_", [False, True])
def test_converges_to_exact_gp(complex_):
    X, y = _toy(60, 2, seed=7)
    Xs = np.random.default_rng(8).uniform(-2.5, 2.5, size=(40, 2))
    ls, noise = 0.8, 0.05
    m_ex, s_ex = _exact_gp(X, y, Xs, noise, ls)
    errs = []
    for D in (32, 512, 8192):
        mean_err, var_err = [], []
        for seed in range(3):
            fm = RandomFourierFeatures(D, lengthscale=ls, complex=complex_, random_state=seed)
            m, s = RandomFeatureGPRegressor(fm, noise=noise).fit(X, y).predict(Xs, True)
            mean_err.append(np.abs(m - m_ex).max())
            var_err.append(np.abs(s**2 - s_ex**2).max())
        errs.append((np.mean(mean_err), np.mean(var_err)))
    (m0, v0), (m1, v1), (m2, v2) = errs
    assert m2 < m1 < m0 and v2 < v1 < v0, errs
    assert m2 < 0.05 and v2 < 0.02, errs


def test_ridge_equals_gp_mean_and_sklearn_ridge_on_features():
    X, y = _toy(35, 2, seed=9)
    Xs = _toy(8, 2, seed=10)[0]
    fm = RandomFourierFeatures(16, random_state=2)
    r = RandomFeatureRidge(fm, alpha=0.3, fit_intercept=False).fit(X, y)
    g = RandomFeatureGPRegressor(fm, noise=0.3).fit(X, y)
    np.testing.assert_allclose(r.predict(Xs), g.predict(Xs), atol=1e-10)
    Phi = fm.fit(X).transform(X)
    sk = Ridge(alpha=0.3).fit(Phi, y)
    r1 = RandomFeatureRidge(fm, alpha=0.3).fit(X, y)
    np.testing.assert_allclose(r1.predict(Xs), sk.predict(fm.transform(Xs)), atol=1e-9)
    np.testing.assert_allclose(r1.coef_, sk.coef_, atol=1e-9)
    # dual (D > N) gives the same solution as primal
    fm_big = RandomFourierFeatures(100, complex=True, random_state=3)
    a = RandomFeatureRidge(fm_big, alpha=0.3, solver="primal").fit(X, y)
    b = RandomFeatureRidge(fm_big, alpha=0.3, solver="dual").fit(X, y)
    np.testing.assert_allclose(a.predict(Xs), b.predict(Xs), atol=1e-9)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-9)


def test_rejects_asymmetric_and_non_feature_maps():
    X, y = _toy(20, 2)
    for est in (RandomFeatureRidge(SADERF(8)), RandomFeatureGPRegressor(SADERF(8))):
        with pytest.raises(ValueError, match="asymmetric"):
            est.fit(X, y)
    with pytest.raises(ValueError, match="asymmetric"):
        RandomFeatureGPClassifier(SADERF(8)).fit(X, y > 0)
    with pytest.raises(TypeError, match="feature_map"):
        RandomFeatureGPRegressor(feature_map="rff").fit(X, y)
    with pytest.raises(ValueError, match="noise"):
        RandomFeatureGPRegressor(noise=0.0).fit(X, y)
    with pytest.raises(ValueError, match="solver"):
        RandomFeatureRidge(solver="qr").fit(X, y)


def test_feature_map_is_cloned_and_seeded():
    X, y = _toy(20, 2)
    fm = RandomFourierFeatures(16)  # random_state=None
    a = RandomFeatureGPRegressor(fm, random_state=4).fit(X, y)
    b = RandomFeatureGPRegressor(fm, random_state=4).fit(X, y)
    assert not hasattr(fm, "projection_")  # the given map is not fitted in place
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


# ------------------------------------------------------------------ classification
def test_milios_transform_values():
    yt, s2 = milios_transform(np.array([1.0, 0.0]), 0.01)
    np.testing.assert_allclose(s2, [0.6882, 4.6151], atol=5e-5)
    np.testing.assert_allclose(yt, [-0.3341, -6.9127], atol=5e-5)


def test_classifier_latent_posteriors_and_probabilities():
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    tr, te = idx[:120], idx[120:]
    fm = RandomFourierFeatures(64, lengthscale=1.5, complex=True, random_state=0)
    clf = RandomFeatureGPClassifier(fm, alpha=0.01, n_samples=500, random_state=0)
    clf.fit(X[tr], y[tr])
    P = clf.predict_proba(X[te])
    np.testing.assert_allclose(P.sum(1), 1.0)
    assert np.mean(clf.predict(X[te]) == y[te]) > 0.85
    # each class posterior is a heteroscedastic GP regression on the transformed labels
    mean, var = clf.predict_latent(X[te])
    Phi = fm.fit(X[tr]).transform(X[tr])
    Phi_s = fm.transform(X[te])
    for c in range(3):
        yt, s2 = milios_transform((y[tr] == c).astype(float), 0.01)
        mu, cov = _function_space(Phi, yt, s2, Phi_s)
        np.testing.assert_allclose(mean[:, c], mu.real, atol=1e-8)
        np.testing.assert_allclose(var[:, c], np.diag(cov).real, atol=1e-8)
    # primal (shared Gram matrices) and dual agree; predictions are batch-independent
    dual = RandomFeatureGPClassifier(fm, n_samples=500, solver="dual", random_state=0)
    m2, v2 = dual.fit(X[tr], y[tr]).predict_latent(X[te])
    np.testing.assert_allclose(m2, mean, atol=1e-8)
    np.testing.assert_allclose(v2, var, atol=1e-8)
    np.testing.assert_allclose(clf.predict_proba(X[te][:5]), P[:5])


def test_mc_softmax_against_direct_sampling():
    mean = np.array([[0.0, 1.0, -1.0]])
    var = np.array([[0.5, 1.0, 2.0]])
    eps = np.random.default_rng(0).standard_normal((20_000, 3))
    Z = mean + np.sqrt(var) * eps
    E = np.exp(Z - Z.max(1, keepdims=True))
    np.testing.assert_allclose(
        mc_softmax(mean, var, eps)[0], (E / E.sum(1, keepdims=True)).mean(0), rtol=1e-12
    )
    # zero variance: the plain softmax of the mean
    p = mc_softmax(mean, np.zeros_like(var), eps)[0]
    np.testing.assert_allclose(p, np.exp(mean[0]) / np.exp(mean[0]).sum())


def test_gp_close_to_exact_kernel_matrix():
    """Sanity link between the estimators and the features: the GP prior covariance is
    amplitude * k_hat."""
    X, y = _toy(15, 2, seed=11)
    fm = RandomFourierFeatures(20000, lengthscale=0.9, random_state=5)
    gp = RandomFeatureGPRegressor(fm, noise=1e6, amplitude=2.0).fit(X, y)  # ~ the prior
    _, cov = gp.predict(X, return_cov=True)
    np.testing.assert_allclose(cov, 2.0 * gaussian_kernel(X, X, 0.9), atol=0.05)


def _any_maps():
    from kernelkit.features import SDERF, GaussianSketch, TensorSRHT
    from kernelkit.features.maclaurin import OptimizedMaclaurin

    return [
        GaussianSketch(48, degree=3, coef0=1.0, complex=True),
        TensorSRHT(48, degree=3, coef0=1.0, complex=True),
        OptimizedMaclaurin(48, kernel="polynomial", degree=3, coef0=1.0),
        OptimizedMaclaurin(48, kernel="gaussian", sketch="srht", complex=True),
        SDERF(48, kernel="gaussian"),
    ]


@pytest.mark.parametrize("fm", _any_maps(), ids=lambda fm: type(fm).__name__)
def test_any_symmetric_feature_map(fm):
    """Dot-product sketches (complex too), Optimized Maclaurin and softmax-family maps all
    plug in; primal and dual forms agree."""
    rng = np.random.default_rng(12)
    X = rng.normal(size=(60, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = X[:, 0] ** 2 + 0.1 * rng.normal(size=60)
    out = {}
    for solver in ("primal", "dual"):
        gp = RandomFeatureGPRegressor(fm, noise=0.05, solver=solver, random_state=0).fit(X, y)
        out[solver] = gp.predict(X[:10], return_std=True)
        assert gp.posterior_.mode == solver
    np.testing.assert_allclose(out["primal"][0], out["dual"][0], atol=1e-7)
    np.testing.assert_allclose(out["primal"][1], out["dual"][1], atol=1e-7)
    assert gp.score(X, y) > 0.6
    clf = RandomFeatureGPClassifier(fm, n_samples=100, random_state=0).fit(X, y > np.median(y))
    assert clf.score(X, y > np.median(y)) > 0.7
