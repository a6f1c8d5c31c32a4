"""The distribution estimators against exact peers written out from their formulas.

On problems small enough for the full ``n x n`` Gram matrices, every low-rank estimate is
compared with a hand-written exact reference: the pivoted Cholesky with SciPy's Cholesky
of the pivoted kernel matrix (full rank) and with the trace bound (truncated), KLR with a
Newton solve of the kernel logistic regression on the full Gram matrix, CME with kernel
ridge weights ``(K + n reg I)^{-1} k(x)``, JPDL with its closed form from the monomials,
and the conditionals, marginal ratios and held-out loss of JDL with direct sums over the
grid. Where the rank is truncated, the error must shrink as the tolerance tightens.
Then the degenerate inputs (n = 1, duplicated rows, a constant column, n < d) and the
classification hold-out with a single class in its training split.

Tolerances: the exact identities (weights against sums, symmetry, grid means) hold to
round-off of sums of ``n <= 40`` terms of size O(1) (``1e-12``); the full-rank
comparisons are limited by the conditioning of the Gram matrices, stated at each test.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.linalg
from scipy.special import expit
from threadpoolctl import threadpool_limits

from kernelkit.distributions import (
    ConditionalMeanEmbedding,
    JointDistribution,
    KernelLogisticRegression,
    PolynomialJointDistribution,
    holdout_select,
    pivoted_cholesky,
)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """The systems are tiny (n <= 60): BLAS threads only slow them down."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _gram(A, B, ell):
    return np.exp(-((A[:, None] - B[None]) ** 2).sum(-1) / (2 * ell**2))


def _pairs(n=15, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    Y = X[:, :1] + 0.3 * rng.standard_normal((n, 1))
    return X, Y


# ----------------------------------------------------------------- pivoted Cholesky


def test_full_rank_pivoted_cholesky_is_scipys_cholesky_of_the_pivoted_matrix():
    X, _ = _pairs()
    K = _gram(X, X, 1.0)
    L, B, piv = pivoted_cholesky("gaussian", X, lengthscale=1.0, rel_tol=1e-15)
    assert L.shape == (15, 15)  # 15 distinct points: K is numerically of full rank
    # the rows of L in pivot order are the lower-triangular Cholesky factor of K[piv, piv];
    # cond(K) ~ 1e6 here and both factorisations are backward stable, so the factors agree
    # to about cond * eps ~ 1e-10 (measured 6e-15)
    Lc = scipy.linalg.cholesky(K[np.ix_(piv, piv)], lower=True)
    np.testing.assert_allclose(L[piv], Lc, atol=1e-10)
    np.testing.assert_allclose(L @ L.T, K, atol=1e-12)
    np.testing.assert_allclose(B.T @ L, np.eye(15), atol=1e-8)


def test_truncated_pivoted_cholesky_meets_the_trace_bound_and_improves_with_the_tolerance():
    X, _ = _pairs(n=40, seed=2)
    K = _gram(X, X, 1.0)
    ranks, errors = [], []
    for rel_tol in (1e-1, 1e-2, 1e-3, 1e-5):
        L, _, piv = pivoted_cholesky("gaussian", X, lengthscale=1.0, rel_tol=rel_tol)
        R = K - L @ L.T
        assert np.trace(R) <= rel_tol * np.trace(K)
        # the residual is a Schur complement, positive semi-definite up to round-off of
        # O(m eps) on entries of size 1
        assert np.linalg.eigvalsh(R).min() >= -1e-12
        assert np.all(np.abs(np.diag(R)[piv]) <= 1e-12)  # exact at the pivots
        ranks.append(L.shape[1])
        errors.append(np.abs(R).max())
    assert ranks == sorted(ranks) and ranks[0] < ranks[-1]
    assert all(b <= a for a, b in itertools.pairwise(errors))
    assert errors[-1] < errors[0] / 100


def _kernel_matrix(name, X, ell):
    r = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    s3, s5 = np.sqrt(3) * r / ell, np.sqrt(5) * r / ell
    return {
        "gaussian": np.exp(-(r**2) / (2 * ell**2)),
        "laplacian": np.exp(-r / ell),
        "matern32": (1 + s3) * np.exp(-s3),
        "matern52": (1 + s5 + s5**2 / 3) * np.exp(-s5),
        "cauchy": 1 / (1 + r**2 / ell**2),
    }[name]


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian", "matern32", "matern52", "cauchy"])
def test_full_rank_factor_reproduces_each_kernel_written_out(kernel):
    X = np.random.default_rng(0).uniform(-2, 2, (20, 3))
    L, _, _ = pivoted_cholesky(kernel, X, lengthscale=0.9, rel_tol=1e-15)
    assert L.shape[1] == 20
    # entries of size <= 1, a factor of full rank: L L^T = K to a few ulps (measured 9e-16)
    np.testing.assert_allclose(L @ L.T, _kernel_matrix(kernel, X, 0.9), atol=1e-13)


@pytest.mark.parametrize("pivot_sample", [None, 60])
def test_reported_trace_residual_is_that_of_the_full_kernel_matrix(pivot_sample):
    rng = np.random.default_rng(0)
    n = 300
    X = rng.standard_normal((n, 2))
    Y = X[:, :1] + 0.5 * rng.standard_normal((n, 1))
    model = JointDistribution(
        lengthscale_x=0.7, rel_tol=1e-3, pivot_sample=pivot_sample, random_state=0
    ).fit(X, Y)
    basis = model.basis_x_
    A = basis.transform(X)  # psi at all n rows: K ~ A A^T (Nystrom on the pivots)
    R = _gram(X, X, 0.7) - A @ A.T
    # a sum of n = 300 entries of size <= 1: round-off ~1e-13 (measured 2e-13)
    assert abs(basis.trace_residual_ - np.trace(R)) < 1e-11
    assert np.linalg.eigvalsh(R).min() > -1e-12  # a Schur complement: PSD
    if pivot_sample is None:  # the tolerance holds on the rows it was run on
        assert np.trace(R) <= 1e-3 * n


# ----------------------------------------------------------------- JDL identities


@pytest.mark.parametrize("constraint", [None, "normalized", "positive"])
def test_jdl_conditionals_are_direct_sums_and_given_y_is_the_swapped_fit(constraint):
    X, Y = _pairs()
    kw = dict(reg=1e-3, rel_tol=1e-12, constraint=constraint)
    model = JointDistribution(lengthscale_x=0.7, lengthscale_y=0.5, **kw).fit(X, Y)
    swapped = JointDistribution(lengthscale_x=0.5, lengthscale_y=0.7, **kw).fit(Y, X)
    Xq = np.random.default_rng(3).uniform(-2, 2, (6, 2))
    Yq = np.linspace(-2, 2, 5)[:, None]

    w = model.conditional_weights(Xq)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(model.conditional_expectation(Y, Xq), w @ Y, atol=1e-12)
    event = Y[:, 0] <= 0.0
    np.testing.assert_allclose(
        model.conditional_probability(lambda t: t[:, 0] <= 0.0, Xq), w @ event, atol=1e-12
    )
    # conditioning on Y is the model of (Y, X) conditioned on its first argument
    np.testing.assert_allclose(
        model.conditional_expectation(X, Yq, given="y"),
        swapped.conditional_expectation(X, Yq),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        model.conditional_weights(Yq, given="y"), swapped.conditional_weights(Yq), atol=1e-12
    )
    # the marginal ratio is the mean of 1 + h over the training targets
    grid = model.density_ratio(X, Y, grid=True)  # (n_y, n_x)
    np.testing.assert_allclose(model.marginal_ratio(X), grid.mean(axis=0), atol=1e-12)
    if constraint is not None:
        assert abs(grid.mean() - 1.0) < 1e-12  # normalisation (20)
    if constraint == "positive":
        assert grid.min() >= -1e-12  # Lemma 4.3: 1 + h >= 0 on the training grid


def test_jdl_validation_loss_is_the_grid_loss_of_eq_8():
    X, Y = _pairs(n=30, seed=4)
    model = JointDistribution(lengthscale_x=0.7, lengthscale_y=0.5, reg=1e-3).fit(X[:20], Y[:20])
    Xv, Yv = X[20:], Y[20:]
    n = len(Xv)
    h = model.density_ratio(Xv, Yv, grid=True) - 1.0  # h on the held-out grid
    loss = np.sum((n * np.eye(n) - np.ones((n, n)) - h) ** 2) / n**2
    # validation_loss is E(h) - (n - 1), E(0) = n - 1; both are sums of n^2 terms of O(1)
    np.testing.assert_allclose(model.validation_loss(Xv, Yv), loss - (n - 1), atol=1e-12)
    assert model.score(Xv, Yv) == -model.validation_loss(Xv, Yv)


@pytest.mark.parametrize("pivot_sample", [None, 50])
@pytest.mark.parametrize("constraint", [None, "normalized"])
def test_jdl_solves_problem_22_on_its_basis_by_a_direct_kronecker_solve(pivot_sample, constraint):
    """Whatever rows the pivots come from, the fit minimises ``(1/n^2) ||(nI - E) -
    A_Y H A_X^T||_F^2 + reg ||H||_F^2`` (the basis is orthonormal in the RKHS) over all n
    rows; here solved directly in ``vec(H)`` (with a multiplier for (20)), without the
    diagonal form."""
    rng = np.random.default_rng(0)
    n, reg = 200, 1e-4
    X = rng.standard_normal((n, 2))
    Y = X[:, :1] + 0.5 * rng.standard_normal((n, 1))
    model = JointDistribution(
        lengthscale_x=0.8,
        lengthscale_y=0.6,
        reg=reg,
        rel_tol=1e-6,
        pivot_sample=pivot_sample,
        random_state=0,
        constraint=constraint,
    ).fit(X, Y)
    Ax, Ay = model.basis_x_.transform(X), model.basis_y_.transform(Y)
    mx, my = Ax.shape[1], Ay.shape[1]
    Q = np.kron(Ax.T @ Ax, Ay.T @ Ay) / n**2 + reg * np.eye(mx * my)
    S = np.outer(Ay.sum(0), Ax.sum(0))
    b = (Ay.T @ Ax / n - S / n**2).ravel(order="F")
    if constraint is None:
        H = np.linalg.solve(Q, b)
    else:
        a = S.ravel(order="F")
        kkt = np.block([[Q, a[:, None]], [a[None, :], np.zeros((1, 1))]])
        H = np.linalg.solve(kkt, np.append(b, 0.0))[:-1]
    h = Ay @ H.reshape((my, mx), order="F") @ Ax.T
    # Q has condition ~ (max lam_X lam_Y / n^2 + reg) / reg ~ 1e4; h is O(30): the two
    # solves agree to ~1e-16 * 1e4 * 30 (measured 5e-13)
    np.testing.assert_allclose(model.density_ratio(X, Y, grid=True) - 1.0, h, atol=1e-10)


# ----------------------------------------------------------------- KLR, CME, JPDL


def _klr_newton(K, y, reg):
    """Kernel logistic regression ``min -loglik(f) + reg ||f||_H^2`` with ``f = K a``,
    solved by Newton's method in the eigenbasis of ``K`` (``K = A A^T``, ``||f||^2 =
    ||u||^2``): well conditioned where ``a`` itself is not. Returns ``a``."""
    ev, U = np.linalg.eigh(K)
    keep = ev > 1e-15 * ev.max()
    U, ev = U[:, keep], ev[keep]
    u = _klr_newton_on_design(U * np.sqrt(ev), y, reg)
    return U @ (u / np.sqrt(ev))


def _klr_newton_on_design(A, y, reg):
    """``argmin_u -loglik(A u) + reg ||u||^2`` by Newton's method."""
    u = np.zeros(A.shape[1])
    for _ in range(50):
        p = expit(A @ u)
        g = A.T @ (p - y) + 2 * reg * u
        H = A.T @ (A * (p * (1 - p))[:, None]) + 2 * reg * np.eye(len(u))
        u -= np.linalg.solve(H, g)
    assert np.abs(g).max() < 1e-12
    return u


def test_klr_reaches_the_full_gram_kernel_logistic_regression():
    rng = np.random.default_rng(4)
    n, ell, reg = 25, 0.7, 1e-2
    X = rng.uniform(-2, 2, (n, 1))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(int)
    a = _klr_newton(_gram(X, X, ell), y, reg)
    Xq = np.linspace(-3, 3, 13)[:, None]
    exact = _gram(Xq, X, ell) @ a
    errors = []
    for rel_tol in (1e-2, 1e-4, 1e-8, 1e-15):
        fit = KernelLogisticRegression(lengthscale=ell, reg=reg, rel_tol=rel_tol).fit(X, y)
        errors.append(np.abs(fit.decision_function(Xq) - exact).max())
    assert all(b < a for a, b in itertools.pairwise(errors))  # finer basis, closer
    # The finest fit's error, in two parts, each against its bound (|psi(x)| <= 1 and
    # |f(x)| <= |f|_H for the Gaussian kernel, k(x, x) = 1; measured 5e-8 to 2.7e-6 over
    # 10 draws, so no single draw's value is a bound). The objective F is mu = 2 reg
    # strongly convex with an L = lambda_max(K) / 4 + 2 reg Lipschitz gradient.
    # (1) The optimizer: L-BFGS stops on ftol = 1e-14 (an objective that no longer falls
    # by ftol |F| per iteration) before its gtol, with gradients up to 5e-7. Its excess
    # over the optimum u_s on the basis (Newton's) measured -0.04 to 4.1 ftol |F| over 16
    # draws (F's own rounding is ~1 ftol |F|): 64 ftol |F| holds with a margin of 16, and
    # puts the coefficients within sqrt(2 excess / mu) of u_s.
    P, Pq = fit.basis_.transform(X), fit.basis_.transform(Xq)
    u_s = _klr_newton_on_design(P, y, reg)

    def objective(u):
        f = P @ u
        return np.sum(np.logaddexp(0.0, f) - y * f) + reg * u @ u

    excess = 64 * 1e-14 * abs(objective(u_s))
    assert objective(fit.coef_) - objective(u_s) <= excess
    opt_bound = np.sqrt(2 * excess / (2 * reg))
    # (2) The basis: its span S holds the functions k(., x_piv); f* = sum_i a_i k(., x_i)
    # lies within |a|_1 sqrt(max_i r_i) of S, r_i = 1 - |psi(x_i)|^2 the residual of the
    # pivoted Cholesky (+ m eps for its rounding), and the optimum on S within
    # sqrt(L / mu) of that distance of f* (F(f_s) - F* <= F(P f*) - F*).
    m = P.shape[1]
    r = np.clip(1.0 - np.sum(P * P, axis=1), 0.0, None) + m * np.finfo(float).eps
    L = np.linalg.eigvalsh(_gram(X, X, ell)).max() / 4 + 2 * reg
    basis_bound = np.sqrt(L / (2 * reg)) * np.abs(a).sum() * np.sqrt(r.max())
    assert np.abs(Pq @ u_s - exact).max() <= basis_bound
    assert errors[-1] <= opt_bound + basis_bound


def test_cme_converges_to_kernel_ridge_weights_as_the_tolerance_tightens():
    rng = np.random.default_rng(4)
    n, ell, reg = 25, 0.7, 1e-2
    X = rng.uniform(-2, 2, (n, 1))
    Y = np.sin(X) + 0.1 * rng.standard_normal((n, 1))
    Xq = np.linspace(-3, 3, 7)[:, None]
    K = _gram(X, X, ell)
    exact = np.linalg.solve(K + n * reg * np.eye(n), _gram(Xq, X, ell).T).T @ Y
    errors = []
    for rel_tol in (1e-2, 1e-4, 1e-8, 1e-15):
        cme = ConditionalMeanEmbedding(lengthscale_x=ell, lengthscale_y=0.5, reg=reg)
        cme.set_params(rel_tol=rel_tol).fit(X, Y)
        errors.append(np.abs(cme.conditional_expectation(Y, Xq) - exact).max())
    # at full numerical rank the only error is the dropped spectrum below 1e-14 of
    # trace(K), amplified by 1 / (n reg) = 4: measured 1.2e-8
    assert errors[-1] < 1e-7
    assert all(b < a for a, b in itertools.pairwise(errors))


def _monomials(Z, q):
    cols = []
    for deg in range(q + 1):
        for c in itertools.combinations_with_replacement(range(Z.shape[1]), deg):
            cols.append(np.prod(Z[:, list(c)], axis=1) if c else np.ones(len(Z)))
    return np.stack(cols, axis=1)


def _jpdl_density_ratio(X, Y, q, reg, Xq, Yq):
    """App. B written out: standardised monomials, ``psi = G^{-1/2} tau`` (pseudo-inverse
    root on the range of ``G``), ``H = (A_Y^T A_X / n - s_Y s_X^T / n^2) / (1 + reg)``."""
    n = len(X)

    def basis(Z):
        mu, sd = Z.mean(0), Z.std(0)
        V = _monomials((Z - mu) / sd, q)
        ev, U = np.linalg.eigh(V.T @ V / n)
        keep = ev > 1e-12 * ev.max()
        R = U[:, keep] / np.sqrt(ev[keep])
        return (lambda Zn: _monomials((Zn - mu) / sd, q) @ R), V @ R

    psi_x, Ax = basis(X)
    psi_y, Ay = basis(Y)
    H = (Ay.T @ Ax / n - np.outer(Ay.sum(0), Ax.sum(0)) / n**2) / (1 + reg)
    return 1.0 + np.einsum("ik,kl,il->i", psi_y(Yq), H, psi_x(Xq))


@pytest.mark.parametrize("n, dx, dy, q", [(30, 1, 1, 3), (40, 2, 1, 2), (8, 2, 2, 2)])
def test_jpdl_equals_its_closed_form_from_the_monomials(n, dx, dy, q):
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, dx))
    Y = X[:, :1] ** 2 + rng.standard_normal((n, dy))
    Xq, Yq = rng.standard_normal((5, dx)), rng.standard_normal((5, dy))
    fit = PolynomialJointDistribution(degree=q, reg=1e-2).fit(X, Y)
    # (8, 2, 2, 2): 6 monomials on 8 points, G condition ~1e4; the density ratio is a
    # product of two G^{-1/2}: agreement to cond(G) eps ~ 1e-12 (measured 2e-13)
    np.testing.assert_allclose(
        fit.density_ratio(Xq, Yq), _jpdl_density_ratio(X, Y, q, 1e-2, Xq, Yq), atol=1e-11
    )
    np.testing.assert_allclose(fit.conditional_weights(Xq).sum(axis=1), 1.0, atol=1e-12)
    assert abs(fit.density_ratio(X, Y, grid=True).mean() - 1.0) < 1e-12  # constant in basis


# ----------------------------------------------------------------- degenerate data

ESTIMATORS = [
    JointDistribution(),
    JointDistribution(constraint="normalized"),
    JointDistribution(constraint="positive"),
    ConditionalMeanEmbedding(),
    PolynomialJointDistribution(degree=2),
]


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: f"{type(e).__name__}-{e.constraint}")
def test_degenerate_data_gives_a_clear_error_or_finite_conditionals(est):
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((20, 2)), rng.standard_normal((20, 1))
    with pytest.raises(ValueError, match="1 sample"):
        est.fit(X[:1], Y[:1])
    Xc = X.copy()
    Xc[:, 1] = 3.0  # a constant column
    cases = {
        "duplicated rows": (np.repeat(X[:3], 5, axis=0), np.repeat(Y[:3], 5, axis=0)),
        "constant column": (Xc, Y),
        "constant X": (np.ones((20, 2)), Y),
        "n < d": (rng.standard_normal((5, 30)), Y[:5]),
    }
    for name, (Xd, Yd) in cases.items():
        fit = est.fit(Xd, Yd)
        mean = fit.conditional_expectation(Yd, Xd[:4])
        assert np.all(np.isfinite(mean)), name
        if name == "constant X":  # X carries no information: the same answer everywhere
            np.testing.assert_allclose(mean, mean[:1].repeat(4, axis=0), atol=1e-12)
    # a constant Y: every conditional mean is that constant (CME is normalised only at
    # the mean feature, so it is left out here)
    if not isinstance(est, ConditionalMeanEmbedding):
        ones = np.ones((20, 1))
        mean = est.fit(X, ones).conditional_expectation(ones, X[:4])
        np.testing.assert_allclose(mean, 1.0, atol=1e-12)


# ----------------------------------------------------------------- hold-out, one class


def _rare_event(n=20, split_seed=3):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 1))
    Y = X + 0.1 * rng.standard_normal((n, 1))
    # the rare sample (smallest Y) is moved to the first validation index of
    # holdout_select's split for random_state=split_seed (its permutation's first
    # n_val entries), so that split's training labels are all False for every draw
    first_val = int(np.random.default_rng(split_seed).permutation(n)[0])
    i = int(np.argmin(Y[:, 0]))
    X[[i, first_val]], Y[[i, first_val]] = X[[first_val, i]], Y[[first_val, i]]
    return X, Y, float(np.min(Y))  # exactly one sample has Y <= threshold


def test_holdout_classification_names_a_training_split_with_one_class():
    X, Y, q = _rare_event()
    # random_state=3 puts the only sample of the event into the validation fifth (as
    # _rare_event places it): the classifier's training labels are all False; the error
    # must say so in the caller's terms (the split, the event and what to change), not
    # "y has 1 classes"
    with pytest.raises(ValueError, match=r"training split .* only .*Y\[:, 0\] <= threshold"):
        holdout_select(
            KernelLogisticRegression(),
            {"reg": [1e-3]},
            X,
            Y,
            loss="classification",
            threshold=q,
            random_state=3,
        )
    # an event that holds for every sample
    with pytest.raises(ValueError, match=r"training split .* only"):
        holdout_select(
            KernelLogisticRegression(), {"reg": [1e-3]}, X, Y, loss="classification", threshold=9.0
        )
    # labels passed as given (loss=None): the same check, naming the labels
    labels = (Y[:, 0] <= q).astype(int)
    with pytest.raises(ValueError, match=r"training split .* only the label"):
        holdout_select(KernelLogisticRegression(), {"reg": [1e-3]}, X, labels, random_state=3)
    # JDL has no classes: the estimate of the event's probability is just close to 0
    res = holdout_select(
        JointDistribution(),
        {"reg": [1e-3]},
        X,
        Y,
        loss="classification",
        threshold=q,
        random_state=3,
    )
    assert np.isfinite(res.best_loss)
    # other splits hold both classes and fit
    res = holdout_select(
        KernelLogisticRegression(), {"reg": [1e-3]}, X, Y, loss="classification", threshold=q
    )
    assert np.isfinite(res.best_loss)


def test_polynomial_queries_beyond_the_float64_range_of_the_monomials_raise():
    """Degree-4 monomials of a standardised query overflow float64 beyond |z| ~ 1e77: the
    conditionals there were NaN (with overflow / invalid-value RuntimeWarnings); they must
    be a clear error instead, and queries whose monomials are finite stay finite."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 2))
    Y = X[:, :1] + rng.standard_normal((30, 1))
    fit = PolynomialJointDistribution(degree=4).fit(X, Y)
    near = np.array([[1e70, 0.5]])  # |z|^4 ~ 1e280: finite
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert np.all(np.isfinite(fit.basis_x_.transform(near)))
        for far in ([[1e80, 0.5]], [[0.5, -1e200]]):
            for method in (fit.conditional_expectation, fit.conditional_weights):
                args = (Y, far) if method == fit.conditional_expectation else (far,)
                with pytest.raises(ValueError, match=r"monomials .* overflow"):
                    method(*args)
            with pytest.raises(ValueError, match=r"monomials .* overflow"):
                fit.density_ratio(far, Y[:1])
        with pytest.raises(ValueError, match=r"monomials .* overflow"):
            fit.conditional_expectation(X, [[1e100]], given="y")
    # unstandardised training data whose monomials overflow: a clear error, not a
    # RuntimeWarning and a LinAlgError (or NaN coefficients)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="monomials overflows float64"):
            PolynomialJointDistribution(degree=4, standardize=False).fit(X * 1e80, Y)
