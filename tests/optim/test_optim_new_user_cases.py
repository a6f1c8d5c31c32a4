"""BoundLogisticRegression on the inputs a new user brings: one regression test per defect
found by trying the estimator on badly scaled, float32, pandas and refitted data."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from kernelkit.optim import BoundLogisticRegression, KroneckerCurvature


def _data(n_classes=3, T=60, p=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, p))  # (T, p)
    y = (X[:, 0] + 0.5 * rng.normal(size=T) > 0).astype(int)
    if n_classes == 3:
        y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=T), [-0.5, 0.5])
    return X, y


def test_finishing_phase_when_cg_cannot_start():
    """float32 features of scale 1e4 (alpha = 1e-4): the curvature is not positive definite
    in float32, CG returns 0 and the Polak-Ribiere ratio divided by zero. The finishing
    phase now steps along the gradient there, so its line search keeps lowering L."""
    X, y = _data(seed=0)
    X = (X * 1e4).astype(np.float32)
    clf = BoundLogisticRegression(random_state=0, max_epochs=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, y)  # was: ZeroDivisionError
    assert clf.switch_epoch_ is not None and np.all(np.isfinite(clf.coef_))
    finish = np.array(clf.loss_history_[clf.switch_epoch_ :])
    # an exact line search never raises L; each evaluation of L from float32 logits S
    # (logsumexp minus one logit) is off by at most ~2 eps_32 max|S|
    S = np.abs(clf.decision_function(X)).max()
    assert np.all(np.diff(finish) <= 4 * np.finfo(np.float32).eps * S)
    assert finish[-1] < 0.5 * finish[0]


@pytest.mark.parametrize("change", ["features", "fit_intercept"])
def test_warm_start_on_other_data_starts_afresh(change):
    """A warm-started refit on data of another width (or with another fit_intercept) was a
    matmul shape error (spfb) or a misleading 'diverged' error (bound, sgd)."""
    X, y = _data()
    kw = dict(max_epochs=5, tol=None, random_state=0)
    warm = BoundLogisticRegression(warm_start=True, **kw).fit(X, y)
    X2, kw2 = (X[:, :3], kw) if change == "features" else (X, {**kw, "fit_intercept": False})
    warm.set_params(**kw2).fit(X2, y)
    cold = BoundLogisticRegression(**kw2).fit(X2, y)
    assert warm.n_iter_ == 5  # a fresh start: the counters restart too
    np.testing.assert_array_equal(warm.coef_, cold.coef_)  # same seed, same path
    np.testing.assert_array_equal(warm.intercept_, cold.intercept_)


def test_dataframe_predictions_warn_nothing():
    """Fitted on a DataFrame, predicting on the same DataFrame raised scikit-learn's 'X does
    not have valid feature names' UserWarning: the scores validated X twice."""
    X, y = _data(n_classes=2)
    df = pd.DataFrame(X, columns=list("abcd"))
    clf = BoundLogisticRegression(random_state=0).fit(df, y)
    ref = BoundLogisticRegression(random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P = clf.predict_proba(df)
        scores = clf.decision_function(df)
        clf.predict_log_proba(df)
        clf.score(df, y)
    # the same fit to round-off (a DataFrame converts to another memory layout)
    np.testing.assert_allclose(P, ref.predict_proba(X), rtol=1e-12)
    np.testing.assert_allclose(scores, ref.decision_function(X), rtol=1e-12, atol=1e-14)
    with pytest.warns(UserWarning, match="feature names"):  # scikit-learn's own check stays
        clf.predict(X)


def test_dense_solve_of_badly_scaled_features_says_so():
    """Features of scale 1e8 against alpha = 1e-4: the dense Cholesky of the curvature fails
    although lam > 0. This was reported as a divergence ('decrease eta0') with the advice
    'use lam > 0'; it is a conditioning limit and the message now says so."""
    X, y = _data(n_classes=2)
    with pytest.raises(ValueError, match="StandardScaler") as info:
        BoundLogisticRegression(solver="bound").fit(X * 1e8, y)
    assert "ill-conditioned" in str(info.value) and "eta0" not in str(info.value)
    C = np.ones((2, 2, 2))  # rank one: singular without a ridge
    with pytest.raises(ValueError, match="use lam > 0"):
        KroneckerCurvature(np.ones((2, 3)), C, lam=0.0).solve(np.ones((3, 2)), method="dense")


def test_bound_solver_refuses_to_raise_the_objective():
    """With CG at the same scale, rounding broke the majorisation: the 'monotone' bound
    solver raised L from 0.37 to about 1e18 and returned that model with only a
    ConvergenceWarning. A rise beyond round-off now raises, naming the cause."""
    X, y = _data(n_classes=2)
    clf = BoundLogisticRegression(solver="bound", linear_solver="cg", max_epochs=50)
    with pytest.raises(FloatingPointError, match=r"objective rose .* standardise X"):
        clf.fit(X * 1e8, y)


def _gradient(coef, intercept, X, y, alpha):
    """Gradient of the mean-form objective in (coef, intercept), multinomial, (n, p + 1)."""
    T = len(y)
    P = softmax(X @ coef.T + intercept, axis=1)  # (T, n)
    P[np.arange(T), y] -= 1.0
    return np.hstack([P.T @ X / T + alpha * coef, P.sum(axis=0)[:, None] / T])


def _hessian_min_eig(coef, intercept, X, alpha):
    """Smallest Hessian eigenvalue of the objective on the zero-sum-intercept subspace."""
    T, p = X.shape
    n = coef.shape[0]
    Xa = np.hstack([X, np.ones((T, 1))])  # (T, p + 1)
    P = softmax(X @ coef.T + intercept, axis=1)  # (T, n)
    cov = np.einsum("ta,ab->tab", P, np.eye(n)) - P[:, :, None] * P[:, None, :]  # (T, n, n)
    H = np.einsum("tab,ti,tj->aibj", cov, Xa, Xa).reshape(n * (p + 1), -1) / T
    ridge = np.tile(np.r_[np.full(p, alpha), 0.0], n)  # class-major (n, p + 1) layout
    H = H + np.diag(ridge)
    shift = np.zeros((n, p + 1))
    shift[:, p] = 1.0 / np.sqrt(n)  # the direction the objective is flat along
    s = shift.ravel()
    Q = np.eye(n * (p + 1)) - np.outer(s, s)
    return np.linalg.eigvalsh(Q @ H @ Q)[1]  # [0] is the flat direction's 0


@pytest.mark.parametrize("solver", ["spfb", "lspfb", "bound"])
def test_multinomial_intercept_is_scikit_learns(solver):
    """The intercepts of a softmax model are defined up to a common shift. LSPFB drifted
    along it (5e-3 from scikit-learn's zero-sum intercept at the optimum); every solver now
    reports the zero-sum one, within the distance that the final gradient bounds."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 5))
    y = rng.integers(0, 3, 80)
    alpha = 1e-2
    ref = LogisticRegression(C=1 / (alpha * len(y)), tol=1e-12, max_iter=10_000).fit(X, y)
    clf = BoundLogisticRegression(
        solver=solver, alpha=alpha, rank=3, batch_size=16, tol=1e-9, max_epochs=3000
    )
    clf.set_params(random_state=0).fit(X, y)
    assert abs(clf.intercept_.sum()) <= 1e-12 * np.abs(clf.intercept_).max()
    g = np.linalg.norm(_gradient(clf.coef_, clf.intercept_, X, y, alpha))
    g_ref = np.linalg.norm(_gradient(ref.coef_, ref.intercept_, X, y, alpha))
    mu = _hessian_min_eig(ref.coef_, ref.intercept_, X, alpha)
    # strong convexity (modulus ~mu near the optimum, 2x margin): each is within its
    # gradient norm / mu of the optimum
    bound = 2 * (g + g_ref) / mu
    np.testing.assert_allclose(clf.intercept_, ref.intercept_, rtol=0, atol=bound)
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=0, atol=bound)


def test_rows_present_once_per_class_converge_at_zero():
    """Every row once with each label: W = 0 is optimal and the gradient there is rounding
    noise. The ratio ||grad L|| / ||grad L(0)|| of two rounding errors never reached tol,
    so every solver ran max_epochs and warned; it now stops after one epoch."""
    X, y = _data(n_classes=2)
    X2, y2 = np.vstack([X, X]), np.r_[y, 1 - y]
    for solver in ("spfb", "lspfb", "bound", "sgd"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            clf = BoundLogisticRegression(solver=solver, rank=2, random_state=0).fit(X2, y2)
        assert clf.n_iter_ == 1
        # the coefficients stay at rounding level: |coef| <= T eps max|x| / alpha
        T = len(y2)
        assert np.abs(clf.coef_).max() <= T * np.finfo(float).eps * np.abs(X2).max() / 1e-4


def test_dask_fit_stops_by_the_same_rule():
    """On Dask input ``tol`` bounded the loss decrease per epoch (a different rule from the
    in-memory fit's gradient ratio) and grad_norm_history_ stayed empty; both now stop at
    the same epoch with the same histories."""
    da = pytest.importorskip("dask.array")
    X, y = _data()
    kw = dict(solver="bound", tol=1e-2, random_state=0)
    ref = BoundLogisticRegression(**kw).fit(X, y)
    est = BoundLogisticRegression(**kw).fit(da.from_array(X, chunks=20), da.from_array(y, 20))
    assert est.n_iter_ == ref.n_iter_ < 100
    # the same arithmetic summed in another order: round-off of the Dask test suite
    np.testing.assert_allclose(est.grad_norm_history_, ref.grad_norm_history_, rtol=1e-8)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-10)


def test_unsortable_labels_name_the_argument():
    """Numbers mixed with strings: numpy's bare "'<' not supported" from sorting the
    labels; the TypeError now names y (or classes) and says what is wrong."""
    X, _ = _data()
    y = np.array(["a", 1, 2], dtype=object)[np.arange(len(X)) % 3]
    with pytest.raises(TypeError, match="y: the labels must be mutually comparable"):
        BoundLogisticRegression().fit(X, y)
    with pytest.raises(TypeError, match="classes: the labels must be mutually comparable"):
        BoundLogisticRegression().partial_fit(
            X, np.arange(len(X)) % 3, classes=np.array([1, "a", 2], dtype=object)
        )


def test_overflowing_scores_raise_instead_of_nan_probabilities():
    """Finite X whose scores overflow gave NaN probabilities (with RuntimeWarnings only)."""
    X, y = _data()
    clf = BoundLogisticRegression(random_state=0).fit(X, y)
    huge = np.full((2, 4), 1e308)
    huge[:, 1] = -1e308  # X coef^T sums +inf and -inf: NaN scores
    for method in ("decision_function", "predict", "predict_proba", "predict_log_proba"):
        with pytest.raises(ValueError, match="overflow"):
            getattr(clf, method)(huge)
    clf32 = BoundLogisticRegression(random_state=0).fit(X.astype(np.float32), y)
    with pytest.raises(ValueError, match="overflow float32"):
        clf32.predict_proba(np.full((2, 4), 3e38, dtype=np.float32))
    P = clf.predict_proba(X * 1e300)  # large but finite scores: exact 0/1 probabilities
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-15)


def test_features_whose_squares_overflow_are_refused():
    """Entries of 1e155: the curvature's sums of x x^T overflow. solver="bound" returned a
    model at 45% training accuracy with an infinite gradient ratio (a ConvergenceWarning
    only); every solver now raises a ValueError naming X."""
    X, y = _data()
    for solver in ("spfb", "bound", "sgd"):
        with pytest.raises(ValueError, match="X is too large"):
            BoundLogisticRegression(solver=solver, random_state=0).fit(X * 1e155, y)


def test_a_run_that_ends_worse_than_zero_says_why():
    """SGD on features of scale 1e4 ends with an objective ~1e5 times its value at zero;
    the ConvergenceWarning advised only 'increase max_epochs'. It now names the cause."""
    X, y = _data()
    clf = BoundLogisticRegression(solver="sgd", max_epochs=5, random_state=0)
    with pytest.warns(ConvergenceWarning, match="objective rose .* standardise X"):
        clf.fit(X * 1e4, y)
    assert clf.loss_history_[-1] > clf.loss_history_[0]
    with warnings.catch_warnings(record=True) as caught:  # a short run that improves
        warnings.simplefilter("always")
        BoundLogisticRegression(solver="sgd", max_epochs=5, random_state=0).fit(X, y)
    assert caught and all("rose" not in str(w.message) for w in caught)
