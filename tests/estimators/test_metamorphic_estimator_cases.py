"""Metamorphic relations of the estimators and the joint-distribution models.

Each test states a relation that must hold whatever the data: the same model fitted on
transformed data (rows permuted or duplicated, labels renamed, targets scaled, inputs
rotated or padded, the roles of X and Y swapped) must give the correspondingly
transformed predictions. ``hypothesis`` draws the data; the random features are fixed by
``random_state`` so that only the relation itself is tested.

Tolerances: where the relation is exact in exact arithmetic, the two fits run the same
floating-point operations in another order (sums over permuted or duplicated rows,
scaled right-hand sides), so they differ by round-off amplified by the condition number
of the solved system. With features of norm <= 1 (``sqrt(2 / D)`` per random Fourier
feature), ``n <= 30`` rows and a regularisation >= 1e-2, that condition number is at
most ``(n + alpha) / alpha <= 3e3``, so ``3e3 * 64 eps ~ 4e-11`` relative; the tests
use ``1e-8`` (relative to the size of the outputs), far above that bound and far below
any effect of a broken relation (which changes predictions at the 1e-2 level and more).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import special_ortho_group
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from kernelkit.distributions import (
    ConditionalMeanEmbedding,
    JointDistribution,
    KernelLogisticRegression,
)
from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.features import RandomFourierFeatures
from kernelkit.optim import BoundLogisticRegression, logistic_objective

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RTOL = 1e-8  # see the module docstring


def _scale(a) -> float:
    return max(1.0, float(np.max(np.abs(a))))


def _close(a, b, rtol=RTOL):
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * _scale(b))


@st.composite
def regression_data(draw, min_n=3, max_n=30, max_d=3):
    """(X, y, seed): a small regression problem drawn from a seed."""
    n = draw(st.integers(min_n, max_n))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X.sum(axis=1)) + 0.3 * rng.standard_normal(n)
    return X, y, seed


@st.composite
def classification_data(draw, n_classes=None, min_n=6, max_n=30, max_d=3):
    """(X, y, seed): labels 0..C-1, each class present at least once."""
    C = n_classes or draw(st.integers(2, 4))
    n = draw(st.integers(max(min_n, C), max_n))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.concatenate([np.arange(C), rng.integers(0, C, n - C)])
    X[np.arange(n), 0] += y  # a signal
    return X, y, seed


def _rff():
    return RandomFourierFeatures(n_features=64, lengthscale=1.0, random_state=0)


def _ridge(**kw):
    return RandomFeatureRidge(_rff(), **{"alpha": 0.1, **kw})


def _gp(**kw):
    return RandomFeatureGPRegressor(_rff(), **{"noise": 0.1, **kw})


# ============================================================= permutation of training rows
@pytest.mark.parametrize("solver", ["primal", "dual"])
@SETTINGS
@given(data=regression_data(), perm_seed=st.integers(0, 1000))
def test_regressors_invariant_to_row_order(solver, data, perm_seed):
    X, y, _ = data
    p = np.random.default_rng(perm_seed).permutation(len(y))
    Xq = np.random.default_rng(1).standard_normal((5, X.shape[1]))
    for est in (_ridge(solver=solver), _gp(solver=solver, normalize_y=True)):
        a = est.fit(X, y)
        fa = a.predict(Xq, return_std=True) if isinstance(a, RandomFeatureGPRegressor) else None
        pa = a.predict(Xq)
        b = clone(est).fit(X[p], y[p])
        _close(b.predict(Xq), pa)
        if fa is not None:
            _close(b.predict(Xq, return_std=True)[1], fa[1])


@SETTINGS
@given(data=classification_data(), perm_seed=st.integers(0, 1000))
def test_classifiers_invariant_to_row_order(data, perm_seed):
    X, y, _ = data
    p = np.random.default_rng(perm_seed).permutation(len(y))
    Xq = np.random.default_rng(1).standard_normal((5, X.shape[1]))
    for est in (
        RandomFeatureGPClassifier(_rff(), n_samples=200, random_state=0),
        NadarayaWatsonClassifier(method="positive", n_components=32, random_state=0),
        NadarayaWatsonClassifier(exact=True),
    ):
        a = est.fit(X, y).predict_proba(Xq)
        b = est.fit(X[p], y[p]).predict_proba(Xq)
        _close(b, a)


# ============================================================= relabelling classes
def _relabellings(C):
    """Label maps of the classes 0..C-1: the permutation of the sorted classes each
    induces, as (mapping function, column order)."""
    rev = np.arange(C)[::-1]
    return [
        (lambda y: y - 7, np.arange(C)),  # shifted ints: same order
        (lambda y: np.array([f"c{v}" for v in y]), np.arange(C)),  # strings, same order
        (lambda y: 10.0 * y - 3.0, np.arange(C)),  # floats (integral: scikit-learn calls
        # non-integral float labels continuous and refuses them)
        (lambda y: C - 1 - y, rev),  # reversed: columns reversed
        (lambda y: np.array([f"z{C - 1 - v}" for v in y]), rev),
        (lambda y: (y + 1) % C, (np.arange(C) - 1) % C),  # a cyclic shift
    ]


@SETTINGS
@given(data=classification_data())
def test_relabelling_permutes_columns_exact_classifiers(data):
    """Nadaraya-Watson (random features and exact) and the GP classifier's latent GPs:
    one independent score / GP per class, so renaming classes permutes the columns."""
    X, y, _ = data
    C = int(y.max()) + 1
    Xq = np.random.default_rng(1).standard_normal((6, X.shape[1]))
    ests = [
        NadarayaWatsonClassifier(method="positive", n_components=32, random_state=0),
        NadarayaWatsonClassifier(exact=True),
    ]
    for est in ests:
        ref = est.fit(X, y).predict_proba(Xq)
        for f, order in _relabellings(C):
            got = est.fit(X, f(y))
            np.testing.assert_array_equal(got.classes_, f(np.arange(C))[order])
            _close(got.predict_proba(Xq), ref[:, order])
            np.testing.assert_array_equal(got.predict(Xq), f(np.argmax(ref, axis=1)))
    gp = RandomFeatureGPClassifier(_rff(), n_samples=200, random_state=0)
    mean, var = gp.fit(X, y).predict_latent(Xq)
    for f, order in _relabellings(C):
        m2, v2 = gp.fit(X, f(y)).predict_latent(Xq)
        _close(m2, mean[:, order])
        _close(v2, var[:, order])


@SETTINGS
@given(data=classification_data())
def test_relabelling_permutes_gp_classifier_probabilities(data):
    X, y, _ = data
    C = int(y.max()) + 1
    Xq = np.random.default_rng(1).standard_normal((6, X.shape[1]))
    gp = RandomFeatureGPClassifier(_rff(), n_samples=200, random_state=0)
    ref = gp.fit(X, y).predict_proba(Xq)
    for f, order in _relabellings(C):
        got = gp.fit(X, f(y))
        np.testing.assert_array_equal(got.classes_, f(np.arange(C))[order])
        _close(got.predict_proba(Xq), ref[:, order])


BINARY_LABELS = [(0, 1), (-1, 1), ("a", "b"), (False, True), (2.0, 7.0)]


@SETTINGS
@given(data=classification_data(n_classes=2))
def test_binary_label_encodings_give_the_same_probabilities(data):
    X, y, _ = data
    Xq = np.random.default_rng(1).standard_normal((6, X.shape[1]))
    ests = [
        RandomFeatureGPClassifier(_rff(), n_samples=200, random_state=0),
        NadarayaWatsonClassifier(method="positive", n_components=32, random_state=0),
        KernelLogisticRegression(lengthscale=1.0, reg=1e-2, rel_tol=1e-6),
        BoundLogisticRegression(solver="bound", alpha=1e-2, tol=1e-9, max_epochs=500),
    ]
    for est in ests:
        ref = None
        for lab in BINARY_LABELS:
            labels = np.array(lab)[y]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = est.fit(X, labels)
            np.testing.assert_array_equal(got.classes_, np.array(lab))
            P = got.predict_proba(Xq)
            if ref is None:
                ref = P
            # BoundLogisticRegression is iterative (tol 1e-9 on the gradient ratio): the
            # same iterations for every encoding, so round-off only
            _close(P, ref)
        # swapped labels: the positive class changes, the columns swap
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            P = est.fit(X, 1 - y).predict_proba(Xq)
        tol = 1e-5 if isinstance(est, BoundLogisticRegression | KernelLogisticRegression) else RTOL
        _close(P, ref[:, ::-1], rtol=tol)


# ============================================================= scaling and shifting targets
@pytest.mark.parametrize("solver", ["primal", "dual"])
@SETTINGS
@given(
    data=regression_data(), a=st.sampled_from([-3.0, -0.5, 0.01, 2.0, 1e3]), b=st.floats(-50, 50)
)
def test_ridge_affine_targets(solver, data, a, b):
    """With an intercept (the documented centring), ``a y + b`` predicts ``a f + b``;
    without it, ``a y`` predicts ``a f`` (and a shift is not absorbed)."""
    X, y, _ = data
    Xq = np.random.default_rng(1).standard_normal((5, X.shape[1]))
    f = _ridge(solver=solver).fit(X, y).predict(Xq)
    g = _ridge(solver=solver).fit(X, a * y + b).predict(Xq)
    _close(g, a * f + b, rtol=RTOL * (abs(a) + abs(b) + 1))
    f0 = _ridge(solver=solver, fit_intercept=False).fit(X, y).predict(Xq)
    g0 = _ridge(solver=solver, fit_intercept=False).fit(X, a * y).predict(Xq)
    _close(g0, a * f0, rtol=RTOL * (abs(a) + 1))


@pytest.mark.parametrize("solver", ["primal", "dual"])
@SETTINGS
@given(
    data=regression_data(), a=st.sampled_from([-3.0, -0.5, 0.01, 2.0, 1e3]), b=st.floats(-50, 50)
)
def test_gp_affine_targets(solver, data, a, b):
    """``normalize_y=True``: mean ``a f + b`` and standard deviation ``|a| s`` (noise and
    amplitude refer to the normalised targets). ``normalize_y=False``: a zero prior mean,
    so the mean is linear (``a y`` gives ``a f``) and the standard deviation does not
    depend on ``y`` at all."""
    X, y, _ = data
    Xq = np.random.default_rng(1).standard_normal((5, X.shape[1]))
    gp = _gp(solver=solver, normalize_y=True)
    f, s = gp.fit(X, y).predict(Xq, return_std=True)
    g, t = gp.fit(X, a * y + b).predict(Xq, return_std=True)
    tol = RTOL * (abs(a) + abs(b) + 1)
    _close(g, a * f + b, rtol=tol)
    _close(t, abs(a) * s, rtol=tol)
    gp0 = _gp(solver=solver)
    f, s = gp0.fit(X, y).predict(Xq, return_std=True)
    g, t = gp0.fit(X, a * y + b).predict(Xq, return_std=True)
    f1 = gp0.fit(X, a * y).predict(Xq)
    _close(f1, a * f, rtol=RTOL * (abs(a) + 1))
    _close(t, s)


# ============================================================= duplicated rows
@pytest.mark.parametrize("solver", ["primal", "dual"])
@SETTINGS
@given(data=regression_data(max_n=15))
def test_duplicating_rows_halves_the_regularisation(solver, data):
    """Ridge minimises the *sum* ``|Y - Phi w|^2 + alpha |w|^2`` and the GP's likelihood is
    a product over rows: every row twice is the same problem with ``alpha / 2`` (ridge)
    or ``noise / 2`` (GP)."""
    X, y, _ = data
    X2, y2 = np.vstack([X, X]), np.concatenate([y, y])
    Xq = np.random.default_rng(1).standard_normal((5, X.shape[1]))
    for fi in (True, False):
        a = _ridge(solver=solver, alpha=0.05, fit_intercept=fi).fit(X, y).predict(Xq)
        b = _ridge(solver=solver, alpha=0.1, fit_intercept=fi).fit(X2, y2).predict(Xq)
        _close(b, a)
    for ny in (True, False):
        ma, sa = _gp(solver=solver, noise=0.05, normalize_y=ny).fit(X, y).predict(Xq, True)
        mb, sb = _gp(solver=solver, noise=0.1, normalize_y=ny).fit(X2, y2).predict(Xq, True)
        _close(mb, ma)
        _close(sb, sa)


@SETTINGS
@given(data=classification_data(max_n=20))
def test_bound_logistic_regression_duplicated_rows_and_sklearn_optimum(data):
    """``BoundLogisticRegression`` minimises the *mean* loss plus ``alpha/2 |W|^2``: rows
    duplicated leave its optimum unchanged, while scikit-learn's *sum* needs ``C`` halved
    (``C = 1 / (alpha T)`` with the new ``T``).
    Either way it is scikit-learn's optimum with ``C = 1 / (alpha T)``, whatever the row
    order.

    Tolerance: both solvers stop at a gradient norm ~1e-9 of the objective's scale; the
    objective is ``alpha``-strongly convex (``alpha = 0.05``), so the minimisers differ by
    at most ``|grad| / alpha ~ 2e-8`` and the probabilities (1-Lipschitz in the logits,
    inputs of norm < 10) by < 1e-6: checked at 1e-5.
    """
    X, y, _ = data
    alpha = 0.05
    T = len(y)
    p = np.random.default_rng(0).permutation(T)
    kw = dict(solver="spfb", alpha=alpha, tol=1e-10, max_epochs=2000, random_state=0)
    ref = LogisticRegression(C=1 / (alpha * T), tol=1e-12, max_iter=10_000).fit(X, y)
    f_ref = logistic_objective(ref.coef_, ref.intercept_, X, y, alpha)
    for Xf, yf, a in [
        (X, y, alpha),
        (X[p], y[p], alpha),
        (np.vstack([X, X]), np.tile(y, 2), alpha),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = BoundLogisticRegression(**{**kw, "alpha": a}).fit(Xf, yf)
        np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), atol=1e-5)
        f = logistic_objective(est.coef_, est.intercept_, X, y, alpha)
        assert f <= f_ref * (1 + 1e-8) + 1e-12
    ref2 = LogisticRegression(C=1 / (alpha * 2 * T), tol=1e-12, max_iter=10_000)
    ref2.fit(np.vstack([X, X]), np.tile(y, 2))
    np.testing.assert_allclose(ref2.predict_proba(X), ref.predict_proba(X), atol=1e-5)


# ============================================================= padding and rotating inputs
@SETTINGS
@given(data=classification_data(), c=st.floats(-100, 100))
def test_nadaraya_watson_exact_ignores_constant_columns_and_rotations(data, c):
    """The Gaussian kernel depends on ``|x - x'|`` only: a constant (or zero) column added
    to every input, training and query alike, and an orthogonal rotation change nothing
    for the exact Nadaraya-Watson classifier."""
    X, y, seed = data
    d = X.shape[1]
    Xq = np.random.default_rng(1).standard_normal((6, d))
    est = NadarayaWatsonClassifier(exact=True, sigma=0.7)
    ref = est.fit(X, y).predict_proba(Xq)

    def pad(Z, v):
        return np.hstack([Z, np.full((len(Z), 1), v)])

    for v in (0.0, c):
        _close(est.fit(pad(X, v), y).predict_proba(pad(Xq, v)), ref, rtol=1e-7)
    Q = special_ortho_group.rvs(d, random_state=seed) if d > 1 else np.array([[-1.0]])
    _close(est.fit(X @ Q, y).predict_proba(Xq @ Q), ref, rtol=1e-7)


# ============================================================= joint distribution model
@st.composite
def joint_data(draw, max_n=40):
    n = draw(st.integers(5, max_n))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    rho = draw(st.floats(-0.9, 0.9))
    X = rng.standard_normal((n, 1))
    Y = np.hstack([rho * X + np.sqrt(1 - rho**2) * rng.standard_normal((n, 1)), rng.random((n, 1))])
    return X, Y


def _jdl(constraint, **kw):
    return JointDistribution(
        lengthscale_x=0.7, lengthscale_y=0.9, reg=1e-3, rel_tol=1e-8, constraint=constraint, **kw
    )


@pytest.mark.parametrize("constraint", [None, "normalized", "positive"])
@SETTINGS
@given(data=joint_data())
def test_joint_sum_rule_and_normalisation(constraint, data):
    """On the training grid ``G[j, i] = 1 + h(x_i, y_j)``: the X-marginal's density is the
    column mean (sum rule over y), the conditional of Y given x_i is column i over its
    sum, and symmetrically for X given Y; "normalized" and "positive" make the total mass
    one, and "positive" makes every grid entry (so every conditional weight at a training
    point) non-negative.

    Tolerance: the grid, the marginals and the weights are products of the same m x m
    coefficients in another order, entries O(1) (at most ~n for the ratios): 1e-9.
    """
    X, Y = data
    n = len(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mass warnings of free models far from the data
        m = _jdl(constraint).fit(X, Y)
        G = m.density_ratio(X, Y, grid=True)  # (n_y, n_x)
        _close(m.density_ratio(X, Y), np.diag(G), rtol=1e-9)
        _close(m.marginal_ratio(X), G.mean(axis=0), rtol=1e-9)
        _close(m.marginal_ratio(Y, given="y"), G.mean(axis=1), rtol=1e-9)
        W = m.conditional_weights(X)
        Wy = m.conditional_weights(Y, given="y")
        _close(W.sum(axis=1), np.ones(n), rtol=1e-9)
        _close(Wy.sum(axis=1), np.ones(n), rtol=1e-9)
        col = G.sum(axis=0)
        row = G.sum(axis=1)
        ok_x, ok_y = np.abs(col) > 1e-6 * n, np.abs(row) > 1e-6 * n
        _close(W[ok_x], (G / col).T[ok_x], rtol=1e-7)
        _close(Wy[ok_y], (G / row[:, None])[ok_y], rtol=1e-7)
        # the expectation of y is the weights' mean of y
        _close(m.conditional_expectation(Y, X[ok_x]), W[ok_x] @ Y, rtol=1e-7)
    if constraint is not None:
        assert abs(G.mean() - 1.0) < 1e-9
        _close(m.marginal_ratio(X).mean(), 1.0, rtol=1e-9)
    if constraint == "positive":
        assert G.min() >= -1e-9
        assert W.min() >= -1e-9 and Wy.min() >= -1e-9


@pytest.mark.parametrize("constraint", [None, "normalized", "positive"])
@SETTINGS
@given(data=joint_data())
def test_joint_swapping_x_and_y_swaps_the_roles(constraint, data):
    """The model is symmetric in X and Y: fitted on ``(Y, X)`` with the lengthscales
    swapped, its grid is the transpose, conditioning on x is conditioning on y, and the
    marginals swap.

    Tolerance: the same pivoted Choleskys and the same (transposed) m x m solve, so
    round-off in the order of the products only: 1e-8 relative to the O(1) entries."""
    X, Y = data
    a = _jdl(constraint).fit(X, Y)
    b = JointDistribution(
        lengthscale_x=0.9, lengthscale_y=0.7, reg=1e-3, rel_tol=1e-8, constraint=constraint
    ).fit(Y, X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(b.density_ratio(Y, X, grid=True), a.density_ratio(X, Y, grid=True).T)
        _close(b.conditional_weights(X, given="y"), a.conditional_weights(X))
        _close(b.conditional_weights(Y), a.conditional_weights(Y, given="y"))
        _close(b.marginal_ratio(X, given="y"), a.marginal_ratio(X))
        _close(b.conditional_expectation(Y, X, given="y"), a.conditional_expectation(Y, X))


@SETTINGS
@given(data=joint_data(), perm_seed=st.integers(0, 1000), dup=st.booleans())
def test_low_rank_models_invariant_to_row_order(data, perm_seed, dup):
    """The joint model, the CME and KLR fitted on the rows in another order (no pivot
    sample: every row is factorised) are the same model. Ties in the pivoted Cholesky
    are common (the Gaussian kernel's constant diagonal ties every row for the first
    pivot, and ``1 - k(x, p)^2`` rounds to exactly 1 far from the pivots), so they must
    not go to whichever row comes first; duplicated points (``dup``) are interchangeable.

    Tolerance: the same pivots and the same m x m solves with the sums over the rows in
    another order; the solves are regularised (``reg = 1e-3``, or 1e-2 for CME / KLR)
    and their outputs O(1), so the difference is round-off amplified by at most ~1e4:
    1e-8 leaves a wide margin (1e-6 for KLR, whose L-BFGS stops at its gradient
    tolerance), while another choice of pivots changes the conditional means by 1e-3 to
    0.4 at these tolerances."""
    X, Y = data
    if dup:
        X, Y = np.vstack([X, X[:3]]), np.vstack([Y, Y[:3]])
    p = np.random.default_rng(perm_seed).permutation(len(X))
    Xq = np.linspace(-2, 2, 5)[:, None]
    t = (Y[:, 0] > 0).astype(int)
    if t.min() == t.max():
        t[0] = 1 - t[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for constraint in (None, "positive"):
            a = JointDistribution(lengthscale_x=0.5, reg=1e-3, constraint=constraint)
            ea = a.fit(X, Y).conditional_expectation(Y, Xq)
            eb = a.fit(X[p], Y[p]).conditional_expectation(Y[p], Xq)
            _close(eb, ea)
        cme = ConditionalMeanEmbedding(lengthscale_x=0.5, reg=1e-2)
        ea = cme.fit(X, Y).conditional_expectation(Y, Xq)
        _close(cme.fit(X[p], Y[p]).conditional_expectation(Y[p], Xq), ea)
        klr = KernelLogisticRegression(lengthscale=0.5, reg=1e-2)
        pa = klr.fit(X, t).predict_proba(Xq)
        # KLR is fitted by L-BFGS, which stops at a gradient of up to gtol = 1e-10: with
        # the objective strongly convex with modulus >= reg = 1e-2, the two stopping
        # points differ by up to ~1e-8 in the weights (4e-8 seen in the probabilities),
        # not by round-off; another choice of pivots moves them by 1e-3 or more
        _close(klr.fit(X[p], t[p]).predict_proba(Xq), pa, rtol=1e-6)
