"""Closed-form fits of GERF / SADERF / ADERF / SDERF: objectives, optimality, constraints,
inclusions (FAVOR# Sec. 4, Thm 4.1-4.3).

The objective is eq. (14), ``Lbar = mean_ij log E[(f1 f2)^2]``, as returned by
``fm.log_objective``. Optimality is checked by editing the fitted attributes ``A_``,
``B_x_``, ``B_y_`` (then ``fm._build()``) and re-evaluating.
"""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import (
    ALPHA,
    DERF_MAPS,
    FITTED_MAPS,
    derf_log_features,
    derf_log_m2,
    derf_params,
    gerf_objective_1d,
    make_xy,
    rotation,
    textbook_a_star,
)
from scipy.linalg import expm
from scipy.optimize import minimize_scalar

from kernelkit.features import ADERF, GERF, SADERF, SDERF, PositiveRF
from kernelkit.features.favor import (
    fit_aderf,
    fit_gerf,
    fit_saderf,
    fit_sderf,
    gerf_phi,
    moments,
    moments_are_threaded,
)

N_PERTURB = 100


def _name(cls):
    return cls.__name__


def _copy(B):
    return None if B is None else np.array(B, dtype=np.float64)


def _state(fm):
    return np.array(fm.A_, dtype=np.float64), _copy(fm.B_x_), _copy(fm.B_y_)


def _set(fm, A, Bx, By):
    fm.A_, fm.B_x_, fm.B_y_ = A, Bx, By
    fm._build()


def _log_uniform(rng, lo=1e-3, hi=0.3):
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _feasible(A):
    return np.minimum(A, 0.12)  # keep 8 A < 1


# ------------------------------------------------------------------ objective formulas
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", DERF_MAPS, ids=_name)
def test_log_objective_equals_pairwise_mean_and_eq15(cls, kernel):
    X, Y = make_xy(30, n=25, m=35)
    fm = cls(n_features=8, kernel=kernel, random_state=0).fit(X, Y=Y)
    fast = fm.log_objective(X, Y)
    pairwise = np.mean(fm._log_second_moment(X, Y, np))
    eq15 = np.mean(derf_log_m2(*derf_params(fm), X, Y, alpha=ALPHA[kernel]))
    assert fast == pytest.approx(pairwise, rel=1e-12, abs=1e-12)
    assert fast == pytest.approx(eq15, rel=1e-11, abs=1e-11)


def test_gerf_phi_shortcut_equals_brute_force():
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((13, 5)) + 0.4, rng.standard_normal((17, 5)) - 0.2
    brute = np.sum((X[:, None, :] + Y[None, :, :]) ** 2) / (5 * 13 * 17)
    assert gerf_phi(moments(X, Y)) == pytest.approx(brute, rel=1e-13)
    # batched over leading dims
    Xb, Yb = rng.standard_normal((2, 3, 13, 5)), rng.standard_normal((2, 3, 17, 5))
    ref = np.array([[gerf_phi(moments(Xb[i, j], Yb[i, j])) for j in range(3)] for i in range(2)])
    np.testing.assert_allclose(gerf_phi(moments(Xb, Yb)), ref, rtol=1e-13)


def test_gerf_objective_is_the_one_dimensional_form_and_A_is_its_grid_minimum():
    X, Y = make_xy(31, n=60, m=50, scale=0.9)
    fm = GERF(n_features=8, random_state=0).fit(X, Y=Y)
    A = fm.A_[0]
    assert np.all(fm.A_ == A)
    assert fm.log_objective(X, Y) == pytest.approx(gerf_objective_1d(A, X, Y), rel=1e-12)
    grid = np.linspace(A - 1.0, 0.124, 200_001)
    vals = gerf_objective_1d(grid, X, Y)
    k = int(np.argmin(vals))
    assert abs(grid[k] - A) <= 2 * (grid[1] - grid[0])
    res = minimize_scalar(
        lambda a: gerf_objective_1d(a, X, Y),
        bounds=(grid[max(k - 2, 0)], grid[k + 2]),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert res.x == pytest.approx(A, abs=1e-6)


def test_aderf_objective_equals_eq16():
    """Thm 4.2 optimum, eq. (16), computed from scratch (eps=0: no ridge)."""
    X, Y = make_xy(32, n=70, m=55, scale=0.9)
    d = X.shape[1]
    fm = ADERF(n_features=8, eps=0.0, random_state=0).fit(X, Y=Y)
    M1, M2 = X.T @ X / len(X), Y.T @ Y / len(Y)
    L1, Q1 = np.linalg.eigh(M1)
    L2, Q2 = np.linalg.eigh(M2)
    Sigma = np.linalg.svd(np.diag(np.sqrt(L1)) @ Q1.T @ Q2 @ np.diag(np.sqrt(L2)), compute_uv=False)
    mu3 = X.mean(0) @ Y.mean(0) / d
    A = float(textbook_a_star(2 * Sigma.sum() / d + 2 * mu3))
    assert fm.A_ == pytest.approx(np.full(d, A), rel=1e-10)
    eq16 = d * (
        np.log(1 - 4 * A)
        - 0.5 * np.log(1 - 8 * A)
        + 2 / (1 - 8 * A) * (Sigma.sum() / d + mu3)
        + 2 * mu3
    )
    assert fm.log_objective(X, Y) == pytest.approx(eq16, rel=1e-10)
    # erratum d: without the factor 2 in phi the objective is clearly worse
    A_wrong = float(textbook_a_star(Sigma.sum() / d + mu3))
    Bx, By = fm.B_x_, fm.B_y_
    _set(fm, np.full(d, A_wrong), Bx, By)
    assert fm.log_objective(X, Y) > eq16 + 1e-3


def test_sderf_objective_equals_eq17():
    X, Y = make_xy(33, n=70, m=55, scale=0.9)
    fm = SDERF(n_features=8, random_state=0).fit(X, Y=Y)
    N = np.mean(
        (X[:, None, :] + Y[None, :, :])[..., :, None]
        * (X[:, None, :] + Y[None, :, :])[..., None, :],
        axis=(0, 1),
    )
    lam = np.linalg.eigvalsh(N)[::-1]
    a = textbook_a_star(lam)
    np.testing.assert_allclose(fm.A_, a, rtol=1e-9, atol=1e-14)
    eq17 = (
        np.sum(np.log(1 - 4 * a) - 0.5 * np.log(1 - 8 * a) + (1 + 1 / (1 - 8 * a)) * lam)
        - np.mean(np.sum(X * X, 1))
        - np.mean(np.sum(Y * Y, 1))
    )
    assert fm.log_objective(X, Y) == pytest.approx(eq17, rel=1e-10)


def test_objective_shifts_by_a_constant_between_kernels():
    """Gaussian objective = softmax objective - mean(|x|^2 + |y|^2) (same fitted params)."""
    X, Y = make_xy(34)
    shift = np.mean(np.sum(X * X, 1)) + np.mean(np.sum(Y * Y, 1))
    for cls in FITTED_MAPS:
        s = cls(n_features=8, random_state=0).fit(X, Y=Y)
        g = cls(n_features=8, kernel="gaussian", random_state=0).fit(X, Y=Y)
        np.testing.assert_allclose(g.A_, s.A_, rtol=1e-14)
        assert g.log_objective(X, Y) == pytest.approx(s.log_objective(X, Y) - shift, rel=1e-12)


# ------------------------------------------------------------------ optimality
def _worse_than_perturbations(fm, X, Y, perturb, seed):
    base = fm.log_objective(X, Y)
    A0, Bx0, By0 = _state(fm)
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(N_PERTURB):
        _set(
            fm,
            *perturb(
                rng,
                A0.copy(),
                None if Bx0 is None else Bx0.copy(),
                None if By0 is None else By0.copy(),
            ),
        )
        diffs.append(fm.log_objective(X, Y) - base)
    _set(fm, A0, Bx0, By0)
    assert fm.log_objective(X, Y) == base
    return np.array(diffs)


@pytest.fixture(scope="module")
def hetero_data():
    return make_xy(35, n=80, m=60, scale=0.9)


def test_gerf_is_optimal_against_perturbations(hetero_data):
    X, Y = hetero_data
    fm = GERF(n_features=8, random_state=0).fit(X, Y=Y)

    def perturb(rng, A, Bx, By):
        return _feasible(A + rng.choice([-1, 1]) * _log_uniform(rng)), Bx, By

    assert _worse_than_perturbations(fm, X, Y, perturb, 0).min() > 0


def test_saderf_is_optimal_against_perturbations(hetero_data):
    X, Y = hetero_data
    fm = SADERF(n_features=8, eps=0.0, random_state=0).fit(X, Y=Y)
    psi = fm.psi_
    np.testing.assert_allclose(np.diag(fm.B_x_), psi, rtol=1e-15)
    np.testing.assert_allclose(fm.B_y_, np.diag(1 / psi), rtol=1e-15)

    def perturb(rng, A, Bx, By):
        p = psi * np.exp(_log_uniform(rng) * rng.standard_normal(psi.size))
        if rng.random() < 0.5:  # psi is always perturbed, A half of the time
            A = _feasible(A + rng.choice([-1, 1]) * _log_uniform(rng))
        return A, np.diag(p), np.diag(1 / p)

    assert _worse_than_perturbations(fm, X, Y, perturb, 1).min() > 0


def test_aderf_is_optimal_against_perturbations(hetero_data):
    X, Y = hetero_data
    fm = ADERF(n_features=8, eps=0.0, random_state=0).fit(X, Y=Y)

    def perturb(rng, A, Bx, By):
        mode = rng.integers(3)  # 0: B only, 1: A only, 2: both
        if mode != 1:
            G = rng.standard_normal(Bx.shape)
            Bx = Bx + _log_uniform(rng) * np.linalg.norm(Bx) / np.linalg.norm(G) * G
            By = np.linalg.inv(Bx).T
        if mode != 0:
            A = _feasible(A + rng.choice([-1, 1]) * _log_uniform(rng))
        return A, Bx, By

    assert _worse_than_perturbations(fm, X, Y, perturb, 2).min() > 0


def test_sderf_is_optimal_against_perturbations(hetero_data):
    X, Y = hetero_data
    fm = SDERF(n_features=8, random_state=0).fit(X, Y=Y)

    def perturb(rng, A, Bx, By):
        mode = rng.integers(3)  # 0: rotation only, 1: a only, 2: both
        if mode != 1:
            G = rng.standard_normal(Bx.shape)
            R = expm(_log_uniform(rng) * (G - G.T) / 2)  # near-identity rotation
            Bx = By = R @ Bx
        if mode != 0:
            A = _feasible(A + _log_uniform(rng) * rng.standard_normal(A.size))
        return A, Bx, By

    assert _worse_than_perturbations(fm, X, Y, perturb, 3).min() > 0


def test_aderf_A_is_the_minimum_along_A_for_the_fitted_B(hetero_data):
    X, Y = hetero_data
    fm = ADERF(n_features=8, eps=0.0, random_state=0).fit(X, Y=Y)
    A0, Bx, By = _state(fm)
    d = A0.size

    def objective(a):
        _set(fm, np.full(d, a), Bx, By)
        return fm.log_objective(X, Y)

    grid = np.linspace(A0[0] - 1.0, 0.124, 801)
    k = int(np.argmin([objective(a) for a in grid]))
    res = minimize_scalar(
        objective,
        bounds=(grid[max(k - 1, 0)], grid[k + 1]),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert res.x == pytest.approx(A0[0], abs=1e-6)


# ------------------------------------------------------------------ constraints (Thm 4.1)
def _check_general_derf_features(fm, X, Y, W):
    Amat, B1, B2, C1, C2, logD = derf_params(fm)
    lx = derf_log_features(Amat, B1, C1, logD, W, X) - 0.5 * np.log(fm.n_features)
    ly = derf_log_features(Amat, B2, C2, logD, W, Y) - 0.5 * np.log(fm.n_features)
    np.testing.assert_allclose(fm.log_transform(X), lx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fm.log_transform_y(Y), ly, rtol=1e-10, atol=1e-10)


def test_aderf_satisfies_theorem_4_1_constraints():
    X, Y = make_xy(36, n=50, m=45, scale=0.9)
    d = X.shape[1]
    fm = ADERF(n_features=32, random_state=0).fit(X, Y=Y)
    Amat, B1, B2, _, _, _ = derf_params(fm)
    assert np.all(np.diag(Amat) == np.diag(Amat)[0]) and np.all(8 * Amat < 1)
    np.testing.assert_allclose(fm.B_x_.T @ fm.B_y_, np.eye(d), atol=1e-10)
    inv4 = np.linalg.inv(np.eye(d) - 4 * Amat)
    np.testing.assert_allclose(B1.T @ inv4 @ B2, np.eye(d), atol=1e-10)
    # features are exactly D exp(w^T A w + w^T B_k x + x^T C_k x), C_k = -B_k^T(I-4A)^-1 B_k/2
    _check_general_derf_features(fm, X, Y, fm.projection_)
    # and the fit is the one of Thm 4.2 turned by U~ (B_k = U~ B~k): B_x M1 B_x^T and
    # B_y M2 B_y^T are both U~ Sigma U~^T, whose eigenvalues Sigma are the square roots of
    # those of M1^{1/2} M2 M1^{1/2} (independently, with SciPy; ridge 1e-6: 1e-5 trace)
    from scipy.linalg import sqrtm

    M1, M2 = X.T @ X / len(X), Y.T @ Y / len(Y)
    S1, S2 = fm.B_x_ @ M1 @ fm.B_x_.T, fm.B_y_ @ M2 @ fm.B_y_.T
    np.testing.assert_allclose(S1, S2, atol=1e-5 * np.trace(S1))
    np.testing.assert_allclose(S1, S1.T, atol=1e-12 * np.trace(S1))
    R1 = np.real(sqrtm(M1))
    sigma = np.sqrt(np.linalg.eigvalsh(R1 @ M2 @ R1))
    np.testing.assert_allclose(np.linalg.eigvalsh(S1), sigma, atol=1e-5 * np.trace(S1))


def test_sderf_satisfies_theorem_4_3_constraints():
    X, Y = make_xy(37, n=50, m=45, scale=0.9)
    d = X.shape[1]
    fm = SDERF(n_features=32, random_state=0).fit(X, Y=Y)
    Q3t = fm.B_x_
    assert fm.B_y_ is fm.B_x_ or np.array_equal(fm.B_y_, fm.B_x_)
    np.testing.assert_allclose(Q3t @ Q3t.T, np.eye(d), atol=1e-12)
    Amat, B1, B2, C1, _, _ = derf_params(fm)
    np.testing.assert_allclose(
        B1.T @ np.linalg.inv(np.eye(d) - 4 * Amat) @ B2, np.eye(d), atol=1e-10
    )
    np.testing.assert_allclose(C1, -0.5 * np.eye(d), atol=1e-12)
    # Q3 diagonalises N with non-ascending eigenvalues, a_l = A*(lambda_l)
    Z = X[:, None, :] + Y[None, :, :]
    N = np.einsum("ijk,ijl->kl", Z, Z) / (len(X) * len(Y))
    lam = np.diag(Q3t @ N @ Q3t.T)
    np.testing.assert_allclose(Q3t @ N @ Q3t.T, np.diag(lam), atol=1e-12)
    assert np.all(np.diff(lam) <= 1e-12)
    np.testing.assert_allclose(fm.A_, textbook_a_star(lam), rtol=1e-9)
    # the projections w (input coordinates) enter turned, as Q3^T w: Thm 4.1's features
    # with diagonal A in Q3's basis and the projections written in that basis
    _check_general_derf_features(fm, X, Y, fm.projection_ @ Q3t.T)


def test_saderf_and_gerf_match_their_formulas():
    X, Y = make_xy(38, n=30, m=20)
    d = X.shape[1]
    sa = SADERF(n_features=32, eps=0.0, random_state=0).fit(X, Y=Y)
    psi4 = np.sum(Y * Y, 0) / len(Y) / (np.sum(X * X, 0) / len(X))
    np.testing.assert_allclose(sa.psi_**4, psi4, rtol=1e-12)
    np.testing.assert_allclose(sa.B_x_.T @ sa.B_y_, np.eye(d), atol=1e-12)
    A = textbook_a_star(gerf_phi(moments(X * sa.psi_, Y / sa.psi_)))
    np.testing.assert_allclose(sa.A_, A, rtol=1e-10)
    _check_general_derf_features(sa, X, Y, sa.projection_)
    ge = GERF(n_features=32, random_state=0).fit(X, Y=Y)
    A = float(textbook_a_star(gerf_phi(moments(X, Y))))
    W = ge.projection_
    ref = (
        d / 4 * np.log(1 - 4 * A)
        + A * np.sum(W * W, 1)[None, :]
        + np.sqrt(1 - 4 * A) * X @ W.T
        - 0.5 * np.sum(X * X, 1)[:, None]
    )
    np.testing.assert_allclose(ge.transform(X), np.exp(ref) / np.sqrt(32), rtol=1e-11)


def test_batched_fit_functions_equal_per_item_fits():
    rng = np.random.default_rng(39)
    Xb, Yb = rng.standard_normal((2, 3, 20, 4)), rng.standard_normal((2, 3, 15, 4)) + 0.3
    A = fit_gerf(moments(Xb, Yb))
    psi, As = fit_saderf(moments(Xb, Yb))
    B1, B2, Aa = fit_aderf(moments(Xb, Yb))
    Q, a = fit_sderf(moments(Xb, Yb))
    for i in range(2):
        for j in range(3):
            X, Y = Xb[i, j], Yb[i, j]
            assert A[i, j] == pytest.approx(fit_gerf(moments(X, Y)), rel=1e-13)
            p1, a1 = fit_saderf(moments(X, Y))
            np.testing.assert_allclose(psi[i, j], p1, rtol=1e-13)
            assert As[i, j] == pytest.approx(a1, rel=1e-13)
            b1, b2, aa = fit_aderf(moments(X, Y))
            # SVD/eigh signs may differ between batched and single calls: compare invariants
            np.testing.assert_allclose(B1[i, j].T @ B1[i, j], b1.T @ b1, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(B2[i, j].T @ B2[i, j], b2.T @ b2, rtol=1e-9, atol=1e-12)
            assert Aa[i, j] == pytest.approx(aa, rel=1e-10)
            q, aq = fit_sderf(moments(X, Y))
            np.testing.assert_allclose(a[i, j], aq, rtol=1e-10)
            np.testing.assert_allclose(np.abs(np.sum(Q[i, j] * q, 1)), 1.0, atol=1e-8)


# ------------------------------------------------------------------ inclusions
def _same_features(fm1, fm2, X, Y):
    np.testing.assert_allclose(fm1.transform(X), fm2.transform(X), rtol=1e-12)
    np.testing.assert_allclose(fm1.transform_y(Y), fm2.transform_y(Y), rtol=1e-12)
    np.testing.assert_allclose(fm1.variance(X, Y), fm2.variance(X, Y), rtol=1e-10)
    assert fm1.log_objective(X, Y) == pytest.approx(fm2.log_objective(X, Y), rel=1e-12)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_positive_rf_is_gerf_with_A_zero(kernel):
    X, Y = make_xy(40, n=10, m=12)
    pos = PositiveRF(n_features=50, kernel=kernel, random_state=5).fit(X, Y=Y)
    ge = GERF(n_features=50, kernel=kernel, A=0.0, random_state=5).fit(X, Y=Y)
    _same_features(pos, ge, X, Y)
    W = pos.projection_
    ref = np.exp(
        X @ W.T - 0.5 * np.sum(X * X, 1)[:, None] + ALPHA[kernel] * np.sum(X * X, 1)[:, None]
    ) / np.sqrt(50)
    np.testing.assert_allclose(pos.transform(X), ref, rtol=1e-12)


def test_saderf_with_unit_psi_is_gerf():
    X, Y = make_xy(41, n=10, m=12)
    ge = GERF(n_features=50, A=-0.37, random_state=5).fit(X, Y=Y)
    sa = SADERF(n_features=50, random_state=5).fit(X, Y=Y)
    _set(sa, np.full(6, -0.37), np.diag(np.ones(6)), np.diag(np.ones(6)))
    _same_features(sa, ge, X, Y)


def test_aderf_with_diagonal_B_is_saderf():
    X, Y = make_xy(42, n=10, m=12)
    sa = SADERF(n_features=50, random_state=5).fit(X, Y=Y)
    ad = ADERF(n_features=50, random_state=5).fit(X, Y=Y)
    _set(ad, sa.A_.copy(), np.diag(sa.psi_), np.diag(1 / sa.psi_))
    _same_features(ad, sa, X, Y)


def test_sderf_with_identity_rotation_and_equal_a_is_gerf():
    X, Y = make_xy(43, n=10, m=12)
    ge = GERF(n_features=50, kernel="gaussian", A=-0.21, random_state=5).fit(X, Y=Y)
    sd = SDERF(n_features=50, kernel="gaussian", random_state=5).fit(X, Y=Y)
    _set(sd, np.full(6, -0.21), np.eye(6), np.eye(6))
    _same_features(sd, ge, X, Y)
    # a non-identity rotation Q with equal a_l gives GERF feature by feature too: the
    # projections are turned by Q as well, so A = Q^T (a I) Q = a I (Thm 4.1 with the
    # symmetric matrix); the objective is unchanged
    _set(sd, np.full(6, -0.21), rotation(6), rotation(6))
    assert sd.log_objective(X, Y) == pytest.approx(ge.log_objective(X, Y), rel=1e-12)
    _same_features(sd, ge, X, Y)


@pytest.mark.parametrize("seed", [44, 45, 46])
def test_hierarchy_of_fitted_objectives(seed):
    X, Y = make_xy(seed, n=60, m=50, scale=0.9)
    L = {
        cls.__name__: cls(n_features=8, random_state=0).fit(X, Y=Y).log_objective(X, Y)
        for cls in DERF_MAPS
    }
    bound = 2 * np.mean(X @ Y.T)  # zero-variance limit, mean log K^2
    gap = 1e-3  # heterogeneous data: the inclusions are strict
    assert L["PositiveRF"] > L["GERF"] + gap
    assert L["GERF"] > L["SADERF"] + gap
    assert L["SADERF"] > L["ADERF"] + gap
    assert L["GERF"] > L["SDERF"] + gap
    assert min(L.values()) > bound


def test_hierarchy_collapses_on_isotropic_symmetric_data():
    """X = Y isotropic: GERF's optimum is already within ~sampling noise of SADERF's."""
    rng = np.random.default_rng(47)
    X = rng.standard_normal((4000, 3)) * 0.5
    L = {
        cls.__name__: cls(n_features=8, random_state=0).fit(X).log_objective(X)
        for cls in FITTED_MAPS
    }
    assert abs(L["GERF"] - L["SADERF"]) < 0.02 * abs(L["GERF"])
    assert L["GERF"] >= L["SADERF"] >= L["ADERF"] - 1e-12


@pytest.mark.parametrize("cls", [SDERF, ADERF])
def test_threaded_fit_draws_the_same_projections_as_a_serial_fit(cls):
    # large inputs: threaded moments first, then the projections drawn on a pool thread
    # beside the serial fit
    rng = np.random.default_rng(4)
    X = 0.1 * rng.standard_normal((12000, 48))
    Y = 0.1 * rng.standard_normal((11000, 48))
    assert moments_are_threaded(X) and moments_are_threaded(Y)
    serial = cls(64, random_state=7, n_jobs=1).fit(X, Y=Y)
    threaded = cls(64, random_state=7, n_jobs=2).fit(X, Y=Y)
    np.testing.assert_array_equal(threaded.projection_, serial.projection_)
    np.testing.assert_array_equal(threaded.A_, serial.A_)
    np.testing.assert_allclose(threaded.transform(X[:50]), serial.transform(X[:50]), rtol=1e-12)
