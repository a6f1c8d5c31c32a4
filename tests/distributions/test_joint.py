"""JointDistribution: closed forms vs a direct solve, exact dual vs cvxpy, conditionals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit.distributions import JointDistribution


def _gauss(n, rho=0.8, d=1, seed=0):
    rng = np.random.default_rng(seed)
    C = np.block([[np.eye(d), rho * np.eye(d)], [rho * np.eye(d), np.eye(d)]])
    Z = rng.multivariate_normal(np.zeros(2 * d), C, size=n)
    return Z[:, :d], Z[:, d:]


def _Q(X, ls, rel_tol, basis):
    """Q = B V formed explicitly from the factor (small n only): ``B`` is zero off the
    pivot rows (16), where it is ``pivot_coef_`` (the basis factorises the rows in
    lexicographic order, so its pivots are its own, not ``pivoted_cholesky(X)``'s)."""
    B = np.zeros((len(X), basis.n_components_))
    B[basis.pivots_] = basis.pivot_coef_
    return B @ np.linalg.solve(basis.pivot_coef_, basis.coef_)


def _risk_terms(KX, KY, n, reg):
    """Quadratic form P and linear term q of R_lambda (14) in vec(H) (column-major)."""
    E = np.ones((n, n))
    P = np.kron(KX @ KX, KY @ KY) / n**2 + reg * np.kron(KX, KY)
    lin = -(2.0 / n) * (KY @ KX) + (2.0 / n**2) * (KY @ E @ KX)
    return P, lin.ravel(order="F"), (KY @ E @ KX).ravel(order="F")


@pytest.mark.parametrize("constraint", [None, "normalized"])
@pytest.mark.parametrize("reg", [1e-2, 1e-4])
def test_closed_forms_equal_direct_solve_low_rank(constraint, reg):
    """Low rank: minimise R_lambda(Q_Y H Q_X^T) (14) + (20) by a dense KKT solve."""
    n, lsx, lsy, tol = 40, 0.8, 1.1, 1e-5
    X, Y = _gauss(n, seed=3)
    model = JointDistribution(
        lengthscale_x=lsx, lengthscale_y=lsy, reg=reg, rel_tol=tol, constraint=constraint
    ).fit(X, Y)
    KX = rbf_kernel(X, X, gamma=0.5 / lsx**2)
    KY = rbf_kernel(Y, Y, gamma=0.5 / lsy**2)
    QX = _Q(X, lsx, tol, model.basis_x_)
    QY = _Q(Y, lsy, tol, model.basis_y_)
    P, q, s = _risk_terms(KX, KY, n, reg)
    T = np.kron(QX, QY)  # vec(Q_Y H Q_X^T) = (Q_X kron Q_Y) vec(H)
    Pr, qr, sr = T.T @ P @ T, T.T @ q, T.T @ s
    k = Pr.shape[0]
    if constraint is None:
        sol = np.linalg.solve(2 * Pr, -qr)
    else:
        kkt = np.block([[2 * Pr, sr[:, None]], [sr[None, :], np.zeros((1, 1))]])
        sol = np.linalg.solve(kkt, np.concatenate([-qr, [0.0]]))[:k]
    H_direct = sol.reshape(model.coef_.shape, order="F")
    scale = np.abs(H_direct).max()
    np.testing.assert_allclose(model.coef_, H_direct, atol=1e-7 * scale)
    # grid values h|_G = K_Y H K_X agree too
    AX, AY = model.basis_x_.train_features_, model.basis_y_.train_features_
    np.testing.assert_allclose(
        AY @ model.coef_ @ AX.T, KY @ QY @ H_direct @ QX.T @ KX, atol=1e-7 * scale
    )
    if constraint == "normalized":  # (11)/(20)
        assert abs(np.sum(AY @ model.coef_ @ AX.T)) < 1e-8 * n
    # conditionals (5) at new x from explicit kernels: h(x, y_j) = (K_Y Q_Y H Q_X^T k_X(x))_j
    Xn = np.linspace(-2.5, 2.5, 11)[:, None]
    h_new = KY @ QY @ H_direct @ QX.T @ rbf_kernel(X, Xn, gamma=0.5 / lsx**2)  # (n, 11)
    w_direct = (1 + h_new) / (1 + h_new).sum(axis=0)
    np.testing.assert_allclose(model.conditional_weights(Xn), w_direct.T, atol=1e-9)


@pytest.mark.parametrize("constraint", [None, "normalized"])
def test_closed_forms_equal_full_problem(constraint):
    """Full rank (m = n): the closed form solves the full problem (13) in n^2 unknowns."""
    n, ls, reg = 12, 0.3, 1e-3
    rng = np.random.default_rng(1)
    X = np.sort(rng.uniform(-2, 2, (n, 1)), axis=0)
    Y = X + 0.3 * rng.standard_normal((n, 1))
    model = JointDistribution(
        lengthscale_x=ls, lengthscale_y=ls, reg=reg, rel_tol=1e-15, constraint=constraint
    ).fit(X, Y)
    assert model.coef_.shape == (n, n)
    KX = rbf_kernel(X, X, gamma=0.5 / ls**2)
    KY = rbf_kernel(Y, Y, gamma=0.5 / ls**2)
    P, q, s = _risk_terms(KX, KY, n, reg)
    if constraint is None:
        vecH = np.linalg.solve(2 * P, -q)
    else:
        kkt = np.block([[2 * P, s[:, None]], [s[None, :], np.zeros((1, 1))]])
        vecH = np.linalg.solve(kkt, np.concatenate([-q, [0.0]]))[:-1]
    hG = KY @ vecH.reshape(n, n, order="F") @ KX
    AX, AY = model.basis_x_.train_features_, model.basis_y_.train_features_
    np.testing.assert_allclose(AY @ model.coef_ @ AX.T, hG, atol=1e-8 * np.abs(hG).max())


def _cvxpy_positive(model):
    """The split QP of the derivations page solved by cvxpy (reference for the exact dual)."""
    cp = pytest.importorskip("cvxpy")
    from kernelkit.distributions._positive import interval_bounds

    AX, AY = model.basis_x_.train_features_, model.basis_y_.train_features_
    n = AX.shape[0]
    lx, ly = model.basis_x_.eigenvalues_, model.basis_y_.eigenvalues_
    W = np.multiply.outer(ly, lx) / n**2 + model.reg
    S = np.multiply.outer(AY.sum(0), AX.sum(0))
    c = AY.T @ AX / n - S / n**2
    C_lo, C_hi = interval_bounds(AY, AX)
    Pv = cp.Variable(W.shape, nonneg=True)
    Nv = cp.Variable(W.shape, nonneg=True)
    Hv = Pv - Nv
    obj = cp.sum(cp.multiply(W, cp.square(Hv))) - 2 * cp.sum(cp.multiply(c, Hv))
    cons = [
        cp.sum(cp.multiply(S / np.abs(S).max(), Hv)) == 0,
        1 + cp.sum(cp.multiply(C_lo, Pv)) - cp.sum(cp.multiply(C_hi, Nv)) >= 0,
    ]
    prob = cp.Problem(cp.Minimize(obj), cons)
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert prob.status == "optimal"
    return Hv.value, W, c


@pytest.mark.parametrize("reg", [1e-3, 1e-5])
def test_positive_equals_cvxpy(reg):
    X, Y = _gauss(150, seed=4)
    model = JointDistribution(
        lengthscale_x=0.5, lengthscale_y=0.5, reg=reg, rel_tol=1e-4, constraint="positive"
    ).fit(X, Y)
    assert model.solver_info_["kappa"] > 0  # the constraint is active here
    H_ref, W, c = _cvxpy_positive(model)
    H = model.coef_

    def obj(M):
        return float(np.sum(W * M * M) - 2 * np.sum(c * M))

    assert obj(H) <= obj(H_ref) + 1e-7 * abs(obj(H_ref))
    np.testing.assert_allclose(H, H_ref, atol=1e-5 * np.abs(H_ref).max())
    # positivity on the training grid (Lemma 4.3) and normalisation (20)
    AX, AY = model.basis_x_.train_features_, model.basis_y_.train_features_
    grid = 1.0 + AY @ H @ AX.T
    assert grid.min() >= -1e-10
    assert abs(grid.mean() - 1.0) < 1e-10


def test_positive_inactive_equals_normalized():
    X, Y = _gauss(100, rho=0.1, seed=5)
    kw = {"lengthscale_x": 2.0, "lengthscale_y": 2.0, "reg": 1.0, "rel_tol": 1e-3}
    pos = JointDistribution(constraint="positive", **kw).fit(X, Y)
    nrm = JointDistribution(constraint="normalized", **kw).fit(X, Y)
    assert pos.solver_info_["kappa"] == 0.0
    np.testing.assert_allclose(pos.coef_, nrm.coef_, atol=1e-12)


@pytest.mark.parametrize("constraint", [None, "normalized", "positive"])
def test_conditionals(constraint):
    X, Y = _gauss(200, seed=6)
    model = JointDistribution(
        lengthscale_x=0.7, lengthscale_y=0.7, reg=1e-4, rel_tol=1e-5, constraint=constraint
    ).fit(X, Y)
    Xn = np.linspace(-2, 2, 9)[:, None]
    w = model.conditional_weights(Xn)
    assert w.shape == (9, 200)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    # weights are (1 + h(x, y_j)) / sum_j (1 + h(x, y_j)), h from the explicit formula
    ratio = np.stack([model.density_ratio(np.repeat(x[None], 200, 0), Y) for x in Xn])
    np.testing.assert_allclose(w, ratio / ratio.sum(axis=1, keepdims=True), atol=1e-12)
    # expectations of vector / matrix valued f agree with direct weighting
    M = Y[:, :, None] * Y[:, None, :]
    np.testing.assert_allclose(
        model.conditional_expectation(M, Xn), np.einsum("ij,jkl->ikl", w, M), atol=1e-12
    )
    np.testing.assert_allclose(
        model.conditional_expectation(lambda y: y**2, Xn), w @ Y**2, atol=1e-12
    )
    p = model.conditional_probability(lambda y: y[:, 0] <= 0.0, Xn)
    np.testing.assert_allclose(p, w @ (Y[:, 0] <= 0), atol=1e-12)
    # Q's X-marginal density w.r.t. the empirical one: the mean of 1 + h over the y_j
    np.testing.assert_allclose(model.marginal_ratio(Xn), ratio.mean(axis=1), atol=1e-12)
    if constraint is not None:  # (20): the marginal ratio averages to 1 over the x_i
        assert abs(model.marginal_ratio(X).mean() - 1.0) < 1e-10
    # X given Y: the symmetric formulas
    wx = model.conditional_weights(Xn, given="y")
    ratio_x = np.stack([model.density_ratio(X, np.repeat(y[None], 200, 0)) for y in Xn])
    np.testing.assert_allclose(wx, ratio_x / ratio_x.sum(axis=1, keepdims=True), atol=1e-12)
    np.testing.assert_allclose(model.conditional_expectation(X, Xn, given="y"), wx @ X, atol=1e-12)
    # positive correlation: E[Y | X = 1] > E[Y | X = -1]
    cm = model.conditional_expectation(Y, Xn)[:, 0]
    assert cm[6] > cm[2] + 0.5


def test_positive_on_grid():
    """Under "positive", 1 + h >= 0 on the training grid; unconstrained it is violated."""
    X, Y = _gauss(120, rho=0.95, seed=7)
    kw = {"lengthscale_x": 0.3, "lengthscale_y": 0.3, "reg": 1e-6, "rel_tol": 1e-6}
    free = JointDistribution(**kw).fit(X, Y)
    pos = JointDistribution(constraint="positive", **kw).fit(X, Y)
    gx = np.repeat(X, len(Y), axis=0)
    gy = np.tile(Y, (len(X), 1))
    assert free.density_ratio(gx, gy).min() < -0.1
    assert pos.density_ratio(gx, gy).min() >= -1e-10
    G = pos.density_ratio(X, Y, grid=True)  # (n_y, n_x), y on rows
    np.testing.assert_allclose(G, pos.density_ratio(gx, gy).reshape(len(X), len(Y)).T, atol=1e-12)
    assert np.all(pos.conditional_weights(X) >= -1e-12)


def test_loss_falls_with_n():
    """Fixed tolerance: the held-out L2 loss of (8) decreases as n grows (fixed seeds)."""
    Xv, Yv = _gauss(2000, seed=100)
    losses = []
    for n in (100, 400, 1600):
        X, Y = _gauss(n, seed=n)
        model = JointDistribution(lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4, rel_tol=1e-3).fit(
            X, Y
        )
        losses.append(model.validation_loss(Xv, Yv))
    assert losses[0] > losses[1] > losses[2]
    assert losses[2] < 0  # beats independence


def test_second_moment_loss_falls_with_n():
    """Loss (31) against the true conditional second moment falls with n."""
    from kernelkit.distributions import second_moment_loss

    rho = 0.8
    Xt = np.linspace(-1.5, 1.5, 50)[:, None]
    M_true = (1 - rho**2 + (rho * Xt[:, 0]) ** 2)[:, None, None]
    losses = []
    for n in (100, 1000, 10000):
        X, Y = _gauss(n, rho=rho, seed=n + 1)
        model = JointDistribution(
            lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-5, rel_tol=1e-3, constraint="normalized"
        ).fit(X, Y)
        M_hat = model.conditional_expectation(Y[:, :, None] * Y[:, None, :], Xt)
        losses.append(second_moment_loss(M_true, M_hat))
    assert losses[0] > losses[1] > losses[2]


def test_bad_input():
    X, Y = _gauss(20)
    with pytest.raises(ValueError, match="same number of rows"):
        JointDistribution().fit(X, Y[:-1])
    with pytest.raises(ValueError, match="minimum of 2"):
        JointDistribution().fit(X[:1], Y[:1])
    Xb = X.copy()
    Xb[0, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        JointDistribution().fit(Xb, Y)
    Yb = Y.copy()
    Yb[1, 0] = np.inf
    with pytest.raises(ValueError, match="Y contains"):
        JointDistribution().fit(X, Yb)
    for kw, match in (
        ({"rel_tol": 0.0}, "rel_tol"),
        ({"tol": -1.0}, "tol"),
        ({"reg": 0.0}, "reg"),
        ({"constraint": "psd"}, "constraint"),
    ):
        with pytest.raises(ValueError, match=match):
            JointDistribution(**kw).fit(X, Y)
    model = JointDistribution().fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        model.conditional_weights(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="first dimension"):
        model.conditional_expectation(np.zeros(5), X)
    with pytest.raises(ValueError, match="given"):
        model.conditional_weights(X, given="z")


def test_sklearn_grid_search():
    from sklearn.model_selection import GridSearchCV

    X, Y = _gauss(300, seed=8)
    gs = GridSearchCV(
        JointDistribution(rel_tol=1e-3), {"lengthscale_x": [0.05, 0.5], "reg": [1e-4]}, cv=3
    )
    gs.fit(X, Y)
    assert gs.best_params_["lengthscale_x"] == 0.5


def test_expectation_function_matches():
    X, Y = _gauss(150, seed=9)
    model = JointDistribution(lengthscale_x=0.7, lengthscale_y=0.7, rel_tol=1e-4).fit(X, Y)
    Xn = np.linspace(-1, 1, 4)[:, None]
    fn = model.expectation_function(Y**2)
    w = model.conditional_weights(Xn)
    np.testing.assert_allclose(fn(Xn), w @ Y**2, atol=1e-12)
    np.testing.assert_allclose(fn(Xn[:1]), (w @ Y**2)[:1], atol=1e-12)


def test_basis_cache_shares_bases_and_results():
    """BasisCache: one factorisation per (data, kernel, lengthscale, tolerances), same
    results as uncached fits, shared under sklearn's clone / GridSearchCV."""
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    from kernelkit.distributions import BasisCache

    X, Y = _gauss(200, seed=10)
    cache = BasisCache()
    kw = {"lengthscale_x": 0.6, "lengthscale_y": 0.8, "rel_tol": 1e-4}
    fits = [JointDistribution(reg=r, basis_cache=cache, **kw).fit(X, Y) for r in (1e-4, 1e-2)]
    assert (cache.misses, cache.hits) == (2, 2)
    assert fits[0].basis_x_ is fits[1].basis_x_
    assert not fits[0].basis_x_.factor_t_.flags.writeable  # shared arrays are read-only
    fresh = JointDistribution(reg=1e-2, **kw).fit(X, Y)
    np.testing.assert_array_equal(fits[1].coef_, fresh.coef_)
    # another lengthscale, tolerance or data set is a miss
    JointDistribution(reg=1e-2, basis_cache=cache, **{**kw, "lengthscale_x": 0.7}).fit(X, Y)
    JointDistribution(reg=1e-2, basis_cache=cache, **{**kw, "rel_tol": 1e-3}).fit(X, Y)
    JointDistribution(reg=1e-2, basis_cache=cache, **kw).fit(X + 1e-9, Y)
    assert cache.misses == 2 + 1 + 2 + 1
    est = JointDistribution(basis_cache=cache)
    assert clone(est).basis_cache is cache
    cache.clear()
    misses, hits = cache.misses, cache.hits  # counters are cumulative
    gs = GridSearchCV(
        JointDistribution(basis_cache=cache, **kw), {"reg": [1e-4, 1e-3, 1e-2]}, cv=2
    ).fit(X, Y)
    assert cache.misses - misses == 2 * 2 + 2  # 2 folds x 2 sides, then the refit on all data
    assert cache.hits - hits == 2 * 2 * 2
    assert gs.best_estimator_.basis_cache is cache
    # pickling a model does not serialise the cache's contents
    import pickle

    fits[0].basis_cache.fit(Y, lengthscale=3.0)
    assert len(cache) > 0
    restored = pickle.loads(pickle.dumps(fits[0]))
    assert len(restored.basis_cache) == 0
    np.testing.assert_array_equal(
        restored.conditional_weights(X[:3]), fits[0].conditional_weights(X[:3])
    )
    small = BasisCache(max_entries=1)
    JointDistribution(basis_cache=small, **kw).fit(X, Y)
    assert len(small) == 1
    with pytest.raises(TypeError, match="basis_cache"):
        JointDistribution(basis_cache={}).fit(X, Y)
    with pytest.raises(ValueError, match="max_entries"):
        BasisCache(max_entries=0)


def test_dtype_policy_float64_out():
    """float32 / integer inputs are converted: float64 outputs equal to the float64 fit."""
    X, Y = _gauss(120, seed=11)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    kw = {"lengthscale_x": 0.7, "lengthscale_y": 0.7, "rel_tol": 1e-4}
    m32 = JointDistribution(**kw).fit(X32, Y32)
    m64 = JointDistribution(**kw).fit(X32.astype(np.float64), Y32.astype(np.float64))
    Xq = np.array([[-1.0], [0.5]], dtype=np.float32)
    for out32, out64 in (
        (m32.conditional_weights(Xq), m64.conditional_weights(Xq)),
        (
            m32.conditional_expectation(Y32, Xq),
            m64.conditional_expectation(Y32.astype(np.float64), Xq),
        ),
        (m32.density_ratio(Xq, Xq), m64.density_ratio(Xq, Xq)),
    ):
        assert out32.dtype == np.float64
        np.testing.assert_array_equal(out32, out64)
    Xi = np.round(3 * X).astype(np.int64)
    assert JointDistribution(**kw).fit(Xi, Y).conditional_weights(Xi[:2]).dtype == np.float64


def test_nonpositive_mass_warns():
    """Where n + s_Y^T H psi(x) <= 0 the conditional is no distribution: a RuntimeWarning,
    not a silent inf / NaN."""
    X, Y = _gauss(50, seed=12)
    model = JointDistribution(lengthscale_x=0.5, lengthscale_y=0.5).fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.conditional_weights(X[:3])  # a fitted model: no warning
    x0 = X[:1]
    psi = model.basis_x_.transform(x0)[0]
    # a coefficient with s_Y^T H psi(x0) = -2n: total mass -n at x0
    model.coef_ = -2 * 50 * np.outer(model.s_y_, psi) / (model.s_y_ @ model.s_y_ * psi @ psi)
    np.testing.assert_allclose(model.marginal_ratio(x0), [-1.0])  # mass n - 2n = -n
    with pytest.warns(RuntimeWarning, match="not a probability"):
        model.conditional_weights(x0)
    with pytest.warns(RuntimeWarning, match="not a probability"):
        model.conditional_expectation(Y, x0)


@pytest.mark.parametrize("name", ["jdl", "cme", "klr", "jpdl"])
def test_bad_input_all_estimators(name):
    """Different row counts, n < 2, non-finite values and tolerances <= 0 are rejected
    with errors that name the culprit, for every estimator."""
    from kernelkit.distributions import (
        ConditionalMeanEmbedding,
        KernelLogisticRegression,
        PolynomialJointDistribution,
    )

    X, Y = _gauss(20, seed=13)
    make = {
        "jdl": JointDistribution,
        "cme": ConditionalMeanEmbedding,
        "klr": KernelLogisticRegression,
        "jpdl": PolynomialJointDistribution,
    }[name]
    Yf = (Y[:, 0] > 0) if name == "klr" else Y
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples|same number of rows"):
        make().fit(X, Yf[:-1])
    with pytest.raises(ValueError, match=r"minimum of 2|at least 2"):
        make().fit(X[:1], Yf[:1])
    for bad in (np.nan, np.inf):
        Xb = X.copy()
        Xb[3, 0] = bad
        with pytest.raises(ValueError, match=r"NaN|infinity"):
            make().fit(Xb, Yf)
    if name != "klr":
        Yb = Y.copy()
        Yb[2, 0] = np.nan
        with pytest.raises(ValueError, match="Y contains NaN"):
            make().fit(X, Yb)
    if name != "jpdl":
        for kw in ({"rel_tol": 0.0}, {"rel_tol": -1e-3}, {"tol": 0.0}, {"rel_tol": np.nan}):
            with pytest.raises(ValueError, match="tol"):
                make(**kw).fit(X, Yf)
    with pytest.raises(ValueError, match="reg"):
        make(reg=-1.0).fit(X, Yf)


def test_positivity_bounds_brute_force():
    """C_lo / C_hi of (27)/(28) (interval products of the column extremes) equal
    the min / max over the whole training grid of A_Y[j, k] A_X[i, l], computed directly
    from explicit kernel matrices."""
    from kernelkit.distributions._basis import train_extremes
    from kernelkit.distributions._positive import interval_bounds

    X, Y = _gauss(60, seed=14)
    model = JointDistribution(lengthscale_x=0.6, lengthscale_y=0.9, rel_tol=1e-3).fit(X, Y)
    bx, by = model.basis_x_, model.basis_y_
    AX = rbf_kernel(X, X[bx.pivots_], gamma=0.5 / 0.6**2) @ bx.coef_  # (n, m_X)
    AY = rbf_kernel(Y, Y[by.pivots_], gamma=0.5 / 0.9**2) @ by.coef_  # (n, m_Y)
    prods = AY[:, None, :, None] * AX[None, :, None, :]  # (j, i, k, l)
    (lo_x, hi_x), (lo_y, hi_y) = train_extremes(bx), train_extremes(by)
    C_lo, C_hi = interval_bounds(None, None, cmin_y=lo_y, cmax_y=hi_y, cmin_x=lo_x, cmax_x=hi_x)
    np.testing.assert_allclose(C_lo, prods.min(axis=(0, 1)), atol=1e-10)
    np.testing.assert_allclose(C_hi, prods.max(axis=(0, 1)), atol=1e-10)
