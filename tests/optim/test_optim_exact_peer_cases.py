"""The partition-function bound and ``BoundLogisticRegression`` against exact peers.

* The bound against ``logsumexp`` itself at random points (it must lie above it and touch
  it at the expansion point), in the generic and the multinomial Kronecker form.
* One SPFB / bound step against the dense solve of eq. 2.4 written out with ``np.kron``.
* The fitted model against scikit-learn's ``LogisticRegression(C = 1 / (alpha T))``
  (binary and multinomial, with and without the unpenalised intercept) and, where
  scikit-learn's L-BFGS itself stops short (features on scales 1e-6 .. 1e6), against a
  hand-written Newton solve.

Tolerances from the stopping rule: ``fit`` stops once ``g = ||grad L|| <= tol
||grad L(0)||``. Without an intercept ``L`` is ``alpha``-strongly convex, so ``L - L* <=
g^2 / (2 alpha)`` and ``||coef - coef*|| <= g / alpha``; with the (unpenalised) intercept
the same bounds use the smallest eigenvalue ``mu`` of the Hessian at the optimum instead
of ``alpha``, computed by the Newton reference. The tests take these bounds with a
factor 4 of slack (the Hessian changes along the segment to the optimum) plus the
reference's own accuracy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import logsumexp, softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from kernelkit.optim import (
    BoundLogisticRegression,
    bound_step,
    logistic_objective,
    multinomial_objective,
    multinomial_partition_bound,
    partition_bound,
    spfb_step,
)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """The systems are tiny (T <= 80, p <= 5): BLAS threads only slow them down."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# ----------------------------------------------------------------- the bound


@pytest.mark.parametrize("seed", range(4))
def test_bound_lies_above_log_z_at_random_points_and_touches_it_at_the_expansion(seed):
    rng = np.random.default_rng(seed)
    for trial in range(50):
        n_labels, d, m = rng.integers(1, 7), rng.integers(1, 6), rng.integers(1, 4)
        F = rng.normal(size=(m, n_labels, d)) * 10.0 ** rng.uniform(-3, 3)
        if trial % 5 == 0 and n_labels > 1:
            F[:, 1] = F[:, 0]  # two labels with the same features
        if trial % 7 == 0:
            F = np.round(F)  # ties
        theta_t = rng.normal(size=d) * 10.0 ** rng.uniform(-3, 1)
        b = partition_bound(theta_t, F)
        exact = logsumexp(F @ theta_t, axis=1)
        # log-space: log z is a logsumexp to a few ulps of its largest term
        np.testing.assert_allclose(b.log_z, exact, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b.log_bound(theta_t, theta_t), exact, rtol=1e-12, atol=1e-12)
        for _ in range(10):
            theta = theta_t + rng.normal(size=d) * 10.0 ** rng.uniform(-4, 2)
            lhs = logsumexp(F @ theta, axis=1)
            # the bound is a sum of O(|lhs|) terms: round-off 1e-12 relative
            assert np.all(lhs <= b.log_bound(theta_t, theta) + 1e-12 * np.maximum(1, abs(lhs)))


def test_multinomial_kronecker_bound_lies_above_log_z():
    rng = np.random.default_rng(5)
    for _ in range(100):
        p, n, m = rng.integers(1, 5), rng.integers(2, 6), rng.integers(1, 5)
        X = rng.normal(size=(m, p)) * 10.0 ** rng.uniform(-2, 2)
        W = rng.normal(size=(p, n)) * 10.0 ** rng.uniform(-2, 1)
        mb = multinomial_partition_bound(W, X)
        np.testing.assert_allclose(mb.log_z, logsumexp(X @ W, axis=1), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(mb.prob, softmax(X @ W, axis=1), atol=1e-14)
        for _ in range(10):
            D = rng.normal(size=(p, n)) * 10.0 ** rng.uniform(-3, 1)
            u = X @ D  # (m, n): the change of the logits
            bound = mb.log_z + np.sum(u * mb.prob, 1) + 0.5 * np.einsum("ja,jab,jb->j", u, mb.C, u)
            lhs = logsumexp(X @ (W + D), axis=1)
            assert np.all(lhs <= bound + 1e-12 * np.maximum(1, abs(lhs)))


# ----------------------------------------------------------------- one step


def _dense_curvature(W, X, lam):
    mb = multinomial_partition_bound(W, X)
    m, p = X.shape
    n = W.shape[1]
    A = sum(np.kron(mb.C[j], np.outer(X[j], X[j])) for j in range(m)) / m
    return A + lam * np.eye(n * p), mb


@pytest.mark.parametrize("linear_solver", ["cg", "dense"])
def test_spfb_step_is_the_dense_solve_of_eq_2_6(linear_solver):
    rng = np.random.default_rng(1)
    m, p, n, lam = 5, 8, 3, 0.1  # m < p: the data part of the curvature is singular
    X = rng.standard_normal((m, p))
    y = np.array([0, 1, 2, 0, 1])
    W = rng.standard_normal((p, n)) * 0.3
    A, mb = _dense_curvature(W, X, lam)
    G = X.T @ (mb.prob - np.eye(n)[y]) / m + lam * W
    exact = np.linalg.solve(A, G.T.ravel()).reshape(n, p).T  # vec in column-major order
    W_new, info = spfb_step(W, X, y, lam, 0.5, linear_solver=linear_solver, rtol=1e-13)
    # CG to a relative residual 1e-13 on a system of condition ~1e2 (lam = 0.1 against
    # curvature entries O(1)): direction to ~1e-11 (measured 3e-13)
    np.testing.assert_allclose(info["direction"], exact, atol=1e-10)
    np.testing.assert_allclose(W_new, W - 0.5 * exact, atol=1e-10)


def test_full_batch_bound_step_never_increases_the_objective():
    rng = np.random.default_rng(2)
    for trial in range(60):
        m, p, n = rng.integers(1, 20), rng.integers(1, 5), rng.integers(2, 5)
        X = rng.standard_normal((m, p)) * 10.0 ** rng.uniform(-2, 2)
        y = rng.integers(0, n, m)
        W = rng.standard_normal((p, n)) * 10.0 ** rng.uniform(-2, 1)
        lam = 10.0 ** rng.uniform(-6, 1)
        f0 = multinomial_objective(W, X, y, lam)
        for solver in ("cg", "dense"):
            f1 = multinomial_objective(bound_step(W, X, y, lam, linear_solver=solver)[0], X, y, lam)
            assert f1 <= f0 + 1e-12 * max(1.0, abs(f0)), (trial, solver)


# ----------------------------------------------------------------- the fitted model


def _newton(X, y, alpha, fit_intercept):
    """Minimise the objective of ``logistic_objective`` by Newton's method (intercept
    unpenalised); returns ``(f*, probabilities, mu)`` with ``mu`` the smallest eigenvalue
    of the Hessian at the optimum in the coordinates of ``(coef_, intercept_)`` (for
    more than two classes on the sum-to-zero subspace, the model's shift invariance).
    Binary: one score ``s = x w``, ``-log p = logaddexp(0, -/+ s)``, ridge on ``w``.
    With an intercept the iteration runs on the centred inputs (the same problem, the
    intercept shifted by ``coef . mean``: well conditioned for data with an offset)."""
    T = len(y)
    classes = np.unique(y)
    yi = np.searchsorted(classes, y)
    binary = len(classes) == 2
    n = 1 if binary else len(classes)
    Y = np.eye(len(classes))[yi][:, 1:] if binary else np.eye(n)[yi]
    shift = X.mean(axis=0) if fit_intercept else np.zeros(X.shape[1])

    def design(Z):
        return np.hstack([Z, np.ones((T, 1))]) if fit_intercept else Z

    q = X.shape[1] + fit_intercept
    pen = np.ones(q)
    if fit_intercept:
        pen[-1] = 0.0
    Proj = np.eye(q) if binary else np.kron(np.eye(q), np.eye(n) - 1.0 / n)

    def prob(Xa, W):
        S = Xa @ W
        return 1.0 / (1.0 + np.exp(-S)) if binary else softmax(S, axis=1)

    def f(Xa, W):
        S = Xa @ W
        if binary:
            data = np.mean(np.logaddexp(0.0, np.where(yi == 1, -1.0, 1.0) * S[:, 0]))
        else:
            data = np.mean(logsumexp(S, 1) - S[np.arange(T), yi])
        return data + 0.5 * alpha * np.sum(pen[:, None] * W**2)

    def derivatives(Xa, W):
        P = prob(Xa, W)
        G = Xa.T @ (P - Y) / T + alpha * pen[:, None] * W
        blocks = (P * (1 - P))[:, :, None] if binary else None
        H = sum(
            np.kron(
                np.outer(Xa[i], Xa[i]),
                blocks[i] if binary else np.diag(P[i]) - np.outer(P[i], P[i]),
            )
            for i in range(T)
        )
        H = H / T + np.diag(np.repeat(alpha * pen, n))
        return Proj @ G.ravel(), Proj @ H @ Proj

    Xc = design(X - shift)
    W = np.zeros((q, n))
    for _ in range(100):
        g, H = derivatives(Xc, W)
        step = np.linalg.lstsq(H, g, rcond=None)[0].reshape(q, n)
        s, f0 = 1.0, f(Xc, W)
        # a rise within the rounding of f is no rise: near the optimum a Newton step
        # changes f by about g^2 / mu, below eps |f|, and halving it would stall the
        # iteration near g ~ sqrt(eps |f| mu) (1.8e-10 seen on one host) instead of
        # letting it converge quadratically to round-off
        tol = 16 * np.finfo(float).eps * abs(f0)
        while f(Xc, W - s * step) > f0 + tol and s > 1e-10:
            s /= 2
        W = W - s * step
    assert np.abs(g).max() < 1e-10  # Newton's quadratic convergence: at round-off
    if fit_intercept:  # back to the inputs as given
        W[-1] -= shift @ W[:-1]
    Xa = design(X)
    _, H = derivatives(Xa, W)
    ev = np.linalg.eigvalsh(H)
    mu = ev[ev > 1e-12 * ev.max()].min()
    P = prob(Xa, W)
    return f(Xa, W), (np.hstack([1 - P, P]) if binary else P), mu


def _data(T=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, 4))
    y2 = (X[:, 0] + 0.5 * rng.standard_normal(T) > 0).astype(int)
    y3 = np.digitize(X[:, 0] + 0.5 * rng.standard_normal(T), [-0.5, 0.5])
    return X, y2, y3


def _gradient_bound(est, X, y, mu):
    """``L - L* <= g^2 / (2 mu)`` at the final gradient norm ``g``, times 4."""
    zero = np.zeros_like(est.coef_)
    g0 = _grad_norm(zero, np.zeros_like(est.intercept_), X, y, est.alpha, est.fit_intercept)
    g = est.grad_norm_history_[-1] * g0  # the ratio is what fit records
    return 4 * g**2 / (2 * mu)


def _grad_norm(coef, intercept, X, y, alpha, fit_intercept, h=1e-6):
    """``||grad L||`` by central differences (exact for this smooth objective to h^2)."""
    theta = np.concatenate([coef.ravel(), intercept.ravel()])
    k = coef.size

    def f(t):
        b = t[k:] if fit_intercept else np.zeros_like(intercept)
        return logistic_objective(t[:k].reshape(coef.shape), b, X, y, alpha)

    free = k + (intercept.size if fit_intercept else 0)
    g = [(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(len(theta))[:free]]
    return float(np.linalg.norm(g))


@pytest.mark.parametrize("solver", ["spfb", "lspfb", "bound"])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_fit_reaches_scikit_learns_optimum(solver, classes, fit_intercept):
    X, y2, y3 = _data()
    y = y2 if classes == 2 else y3
    alpha, T = 1e-2, len(y)
    est = BoundLogisticRegression(
        solver=solver, alpha=alpha, rank=4, fit_intercept=fit_intercept, random_state=0
    ).fit(X, y)
    ref = LogisticRegression(
        C=1 / (alpha * T), fit_intercept=fit_intercept, tol=1e-12, max_iter=10_000
    ).fit(X, y)
    f_ours = logistic_objective(est.coef_, est.intercept_, X, y, alpha)
    f_ref = logistic_objective(ref.coef_, ref.intercept_, X, y, alpha)
    f_star, P_star, mu = _newton(X, y, alpha, fit_intercept)
    assert mu >= alpha * (1 - 1e-9) or fit_intercept  # ridge: strongly convex in coef
    # scikit-learn's L-BFGS at tol 1e-12 is within 1e-12 of the Newton optimum (measured
    # 1e-15): the same conversion C = 1 / (alpha T), the same unpenalised intercept
    assert abs(f_ref - f_star) < 1e-10
    bound = _gradient_bound(est, X, y, mu)
    assert -1e-12 <= f_ours - f_star <= bound + 1e-12
    # probabilities: |p - p*| <= |logit change| <= ||x|| ||theta - theta*|| with
    # ||theta - theta*|| <= g / mu = sqrt(2 bound / mu) (bound carries the factor 4)
    x_norm = np.linalg.norm(np.hstack([X, np.ones((T, 1))]), axis=1).max()
    dist = np.sqrt(2 * bound / mu)
    p_ours = est.predict_proba(X)
    np.testing.assert_allclose(p_ours, P_star, atol=x_norm * dist)
    np.testing.assert_allclose(p_ours, ref.predict_proba(X), atol=x_norm * dist + 1e-6)


@pytest.mark.parametrize(
    "case",
    ["separable", "one-sample class", "scales 1e-6..1e6", "offset 1e4"],
)
def test_hard_data_reaches_the_newton_optimum(case):
    X, _, y3 = _data()
    alpha, y, fit_intercept = 1e-2, y3, True
    if case == "separable":
        y, alpha = (X[:, 0] > 0).astype(int), 1e-5
    elif case == "one-sample class":
        y = np.where(y3 == 2, 1, y3)
        y[5] = 2
    elif case == "scales 1e-6..1e6":
        X = X * np.array([1e6, 1.0, 1e-6, 1.0])
    else:
        X = X + 1e4
    est = BoundLogisticRegression(alpha=alpha, random_state=0, max_epochs=500).fit(X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    f_star, _, mu = _newton(X, y, alpha, fit_intercept)
    f_ours = logistic_objective(est.coef_, est.intercept_, X, y, alpha)
    assert -1e-12 <= f_ours - f_star <= _gradient_bound(est, X, y, mu) + 1e-12
    L = np.array(est.loss_history_)
    assert np.all(np.diff(L[est.switch_epoch_ :]) <= 1e-12 * L[0])  # finishing: monotone


def test_sparse_input_is_refused_with_a_clear_error():
    X, _, y3 = _data()
    with pytest.raises(TypeError, match="Sparse data was passed"):
        BoundLogisticRegression().fit(sp.csr_matrix(X), y3)


def test_single_class_is_refused_with_a_clear_error():
    X, _, _ = _data()
    with pytest.raises(ValueError, match="only one class"):
        BoundLogisticRegression().fit(X, np.zeros(len(X), dtype=int))


def test_no_convergence_warning_where_the_optimum_is_reached():
    X, _, y3 = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        BoundLogisticRegression(alpha=1e-2, random_state=0).fit(X, y3)


# ----------------------------------------------------------------- float32, dense solve


def _pixels():
    """Unscaled 8 x 8 digit images with pixel values 0..256 (as raw 8-bit images), float32."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:300] * 16, y[:300]


def test_dense_bound_step_on_float32_pixels_is_the_float64_step():
    # The dense solve runs in float64 (docstrings), so it must not depend on the float32
    # rounding of the bound's C_j: C_j is ~0 along the classes' common direction, and a
    # float32 error eps32 |C_j| ~ 1e-8 there, times |x|^2 ~ 1e6 summed over the batch,
    # outweighs lam = 1e-4 and made the matrix indefinite ("not positive definite")
    X, y = _pixels()
    W = np.zeros((X.shape[1], 10))
    _, info64 = spfb_step(W, X, y, 1e-4, linear_solver="dense")
    W32, info32 = spfb_step(
        W.astype(np.float32), X.astype(np.float32), y, 1e-4, linear_solver="dense"
    )
    assert W32.dtype == np.float32 and info32["direction"].dtype == np.float32
    # the float32 inputs are exact (integers), the logits at W = 0 too: the same float64
    # system, so the directions differ by the float32 rounding of the result (6e-8
    # relative; measured 2.5e-8). Before, the float32 rounding of the gradient along the
    # common direction, amplified by 1 / lam, put it 58% off.
    d64 = info64["direction"]
    assert np.linalg.norm(info32["direction"] - d64) <= 1e-6 * np.linalg.norm(d64)


def test_bound_solver_fits_float32_pixels_like_float64():
    X, y = _pixels()
    kw = dict(solver="bound", alpha=1e-4, max_epochs=5, tol=None)
    f64 = BoundLogisticRegression(**kw).fit(X, y)
    f32 = BoundLogisticRegression(**kw).fit(X.astype(np.float32), y)
    assert f32.coef_.dtype == np.float32
    # five majorisation steps from the same start: each direction agrees to float32
    # rounding and the float32 logits of the next expansion point differ by ~1e-7
    # relative (measured: the objectives by at most 5e-8 relative)
    np.testing.assert_allclose(f32.loss_history_, f64.loss_history_, rtol=1e-6)
