"""Random Maclaurin and Optimized Maclaurin (Wacker et al. Sec. 5; derivations page).

Monte Carlo checks use fixed seeds and 4-standard-error tolerances from the analytic
variances; the allocation is checked against brute force.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kernelkit.features import OptimizedMaclaurin, RandomMaclaurin, dot_product
from kernelkit.features import maclaurin as mc
from kernelkit.features import maclaurin_series as series
from kernelkit.features.dot_product import (
    iid_sketch_variance,
    pair_statistics,
    tensor_srht_variance,
)
from kernelkit.metrics import relative_frobenius_error

SPHERE = mc.unit_sphere_polynomial(2.0)  # eq. 57, a = 2: gamma = coef0 = 1/2


def _unit(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _points(n=4, d=3, seed=0, scale=0.6, nonneg=False):
    X = np.random.default_rng(seed).normal(size=(n, d)) * scale
    return np.abs(X) if nonneg else X


# ====================================================================== coefficients
def test_polynomial_coefficients_expand_the_kernel():
    a = mc.maclaurin_coefficients("polynomial", 5, degree=5, gamma=0.3, coef0=1.7)
    G = np.linspace(-2, 2, 9)
    series = sum(a[n] * G**n for n in range(6))
    np.testing.assert_allclose(series, (0.3 * G + 1.7) ** 5, rtol=1e-12)
    # beyond the degree the coefficients vanish; truncation keeps the first ones
    a8 = mc.maclaurin_coefficients("polynomial", 8, degree=5, gamma=0.3, coef0=1.7)
    np.testing.assert_array_equal(a8[6:], 0.0)
    np.testing.assert_allclose(a8[:6], a)
    # homogeneous: only a_p
    a0 = mc.maclaurin_coefficients("polynomial", 3, degree=3, coef0=0.0)
    np.testing.assert_array_equal(a0, [0, 0, 0, 1])


def test_exponential_coefficients_and_unit_sphere_form():
    a = mc.maclaurin_coefficients("softmax", 6, lengthscale=1.5)
    expect = [1 / (math.factorial(n) * 1.5 ** (2 * n)) for n in range(7)]
    np.testing.assert_allclose(a, expect, rtol=1e-14)
    np.testing.assert_array_equal(mc.maclaurin_coefficients("gaussian", 6, lengthscale=1.5), a)
    # eq. 57: (c + s x.y)^p = (1 - |x - y|^2 / a^2)^p on the unit sphere
    X = _unit(_points(5, 4))
    for a_ in (2.0, 4.0):
        kp = mc.unit_sphere_polynomial(a_)
        D2 = ((X[:, None] - X[None]) ** 2).sum(-1)
        np.testing.assert_allclose(
            (kp["coef0"] + kp["gamma"] * X @ X.T) ** 7, (1 - D2 / a_**2) ** 7, atol=1e-12
        )
    assert mc.unit_sphere_polynomial(4.0) == {"gamma": 1 / 8, "coef0": 7 / 8}  # Sec. 5.5
    with pytest.raises(ValueError):
        mc.unit_sphere_polynomial(1.0)


def test_random_maclaurin_measure():
    a = mc.maclaurin_coefficients("softmax", 4)
    mu = mc.random_maclaurin_measure(a)
    w = 2.0 ** -(np.arange(1, 5) + 1.0)
    np.testing.assert_allclose(mu, np.r_[0.0, w / w.sum()])
    # degrees without a coefficient get no mass
    mu0 = mc.random_maclaurin_measure([0.0, 0.0, 1.0, 0.0, 2.0])
    np.testing.assert_allclose(mu0, [0, 0, 0.8, 0, 0.2])


# ====================================================================== objective sums
@pytest.mark.parametrize("kernel", ["polynomial", "softmax", "gaussian"])
@pytest.mark.parametrize(
    "sketch,cx",
    [
        ("rademacher", False),
        ("rademacher", True),
        ("gaussian", False),
        ("gaussian", True),
        ("srht", False),
        ("srht", True),
    ],
)
def test_pair_sums_match_the_sketch_variance_formulas(kernel, sketch, cx, monkeypatch):
    """The blocked O(m^2 (d + p)) pair sums equal sum_{i != j} of the sketch classes'
    Theorem 2 / eq. 33 formulas and the bias of eq. 51 / 55, pair by pair."""
    monkeypatch.setattr(series, "_PAIR_BLOCK_ELEMENTS", 13)  # several row blocks
    X = _points(7, 6, seed=3, scale=0.5)
    l = 1.3
    if kernel == "polynomial":
        a = mc.maclaurin_coefficients("polynomial", 4, degree=4, gamma=0.5, coef0=0.5)
        k = (0.5 * X @ X.T + 0.5) ** 4
    else:
        a = mc.maclaurin_coefficients(kernel, 6, lengthscale=l)
        k = np.exp(X @ X.T / l**2)
    P = 6
    sums = mc.maclaurin_pair_sums(X, a, P, kernel=kernel, lengthscale=l, sketch=sketch, complex=cx)
    G, N, S = pair_statistics(X, X)
    e = np.exp(-(X * X).sum(1) / (2 * l**2)) if kernel == "gaussian" else np.ones(len(X))
    W = (e[:, None] * e[None, :]) ** 2
    off = ~np.eye(len(X), dtype=bool)
    ap = np.zeros(P + 1)
    ap[: len(a)] = a[: P + 1]
    q, m4 = mc.SKETCH_MOMENTS[(sketch, cx)]
    for n in range(1, P + 1):
        if sketch == "srht":
            # Cov term: the D = 2 variance minus the D = 1 one isolates c(2, d) Cov / 4
            v1 = tensor_srht_variance(G, N, S, n, 1, 8, complex=cx)
            v2 = tensor_srht_variance(G, N, S, n, 2, 8, complex=cx)
            cov = (v2 - v1 / 2) * 4 / 2
            np.testing.assert_allclose(
                sums.cov[n], ap[n] ** 2 * (W * cov)[off].sum(), rtol=1e-8, atol=1e-14
            )
        else:
            v1 = iid_sketch_variance(G, N, S, n, 1, q=q, m4=m4)
        np.testing.assert_allclose(
            sums.var[n], ap[n] ** 2 * (W * v1)[off].sum(), rtol=1e-8, atol=1e-14
        )
    for p in range(P + 1):
        partial = sum(ap[n] * G**n for n in range(p + 1))
        np.testing.assert_allclose(
            sums.bias2[p], (W * (k - partial) ** 2)[off].sum(), rtol=1e-8, atol=1e-13
        )
    assert sums.m == 7 and (sums.d == 8) == (sketch == "srht")


def test_objective_is_the_u_statistic_of_the_mse():
    """g(p, D) = mean_{i != j} [Var k_hat(x_i, x_j) + bias^2] for the fitted allocation,
    with the variance from the map's own ``variance`` (eq. 46-51)."""
    X = _points(9, 5, seed=1, scale=0.4)
    fm = OptimizedMaclaurin(
        12, kernel="softmax", p_min=1, p_max=5, sketch="srht", random_state=0
    ).fit(X)
    off = ~np.eye(9, dtype=bool)
    bias2 = (np.exp(X @ X.T) - fm.expected_kernel(X)) ** 2
    g = (fm.complex_variance(X) + bias2)[off].mean()
    assert fm.objective_[fm.degree_] == pytest.approx(g, rel=1e-9)


# ====================================================================== Algorithms 2, 3
def _brute_force(cost, active, D_total):
    deg = [int(n) for n in np.flatnonzero(active) if n > 0]
    best = math.inf
    for combo in itertools.product(range(1, D_total + 1), repeat=len(deg)):
        if sum(combo) != D_total:
            continue
        best = min(best, sum(float(cost(n, k)) for n, k in zip(deg, combo, strict=True)))
    return best


@pytest.mark.parametrize(
    "sketch,cx",
    [
        ("rademacher", False),
        ("rademacher", True),
        ("gaussian", False),
        ("srht", False),
        ("srht", True),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_equals_brute_force(sketch, cx, seed):
    """Algorithm 2 (budget-respecting) attains the minimum over all allocations with
    D_n >= 1 for p <= 3, D_total <= 12 (TensorSRHT: on the convex surrogate)."""
    X = _points(12, 3, seed=seed, scale=0.8, nonneg=seed == 1)
    a = mc.maclaurin_coefficients("polynomial", 3, degree=3, gamma=0.7, coef0=0.4)
    sums = mc.maclaurin_pair_sums(X, a, 3, kernel="polynomial", sketch=sketch, complex=cx)

    def cost(n, k):
        return sums.degree_cost(n, k, surrogate=True)

    for p in (1, 2, 3):
        active = np.r_[False, a[1 : p + 1] > 0]
        for D_total in range(p, 13):
            D = mc.greedy_allocation(cost, active, D_total)
            assert D.sum() == D_total and np.all(D[1:] >= 1) and D[0] == 0
            got = sum(float(cost(n, D[n])) for n in range(1, p + 1))
            assert got == pytest.approx(_brute_force(cost, active, D_total), rel=1e-12)


def test_algorithm3_equals_brute_force_over_p():
    X = _points(15, 4, seed=2, scale=0.7)
    a = mc.maclaurin_coefficients("softmax", 3, lengthscale=0.9)
    sums = mc.maclaurin_pair_sums(X, a, 3, kernel="softmax", lengthscale=0.9)
    for D_total in (3, 7, 12):
        p_star, D_star, obj = mc.optimize_allocation(sums, a, D_total, 1, 3)
        best = math.inf
        for p in (1, 2, 3):
            for combo in itertools.product(range(1, D_total + 1), repeat=p):
                if sum(combo) == D_total:
                    best = min(best, sums.objective(np.r_[0, combo]))
        assert obj[p_star] == pytest.approx(best, rel=1e-12)
        assert D_star.sum() == D_total and len(D_star) == p_star + 1


def test_budget_erratum_1():
    """Algorithm 2 as printed allocates p + D_total features; the fix allocates exactly
    D_total and starts from D_n = 1[a_n > 0] (derivations page)."""
    X = _points(10, 3)
    a = mc.maclaurin_coefficients("softmax", 5)
    sums = mc.maclaurin_pair_sums(X, a, 5, kernel="softmax")
    for p, D_total in ((3, 10), (5, 40)):
        D = mc.greedy_allocation(
            lambda n, k: sums.degree_cost(n, k), np.r_[False, [True] * p], D_total
        )
        assert D.sum() == D_total
    with pytest.raises(ValueError, match="smaller than"):
        mc.greedy_allocation(lambda n, k: 1.0 / k, [False, True, True, True], 2)


def test_degrees_without_coefficient_get_no_features():
    X = _points(20, 4, seed=4)
    # (x.y)^3: a_0 = a_1 = a_2 = 0 -> every feature on degree 3, no constant
    fm = OptimizedMaclaurin(10, kernel="polynomial", degree=3, coef0=0.0, random_state=0).fit(X)
    np.testing.assert_array_equal(fm.n_features_per_degree_, [0, 0, 0, 10])
    assert fm.output_dim == 10 and fm.transform(X).shape == (20, 10)
    # the generic rule: D_n = 0 iff a_n = 0 (here every a_n > 0 up to p*)
    fm = OptimizedMaclaurin(30, kernel="polynomial", degree=6, **SPHERE, random_state=0).fit(X)
    a = fm.coefficients_
    np.testing.assert_array_equal(fm.n_features_per_degree_ > 0, a > 0)
    rm = RandomMaclaurin(50, kernel="polynomial", degree=4, coef0=0.0, random_state=0).fit(X)
    np.testing.assert_array_equal(rm.n_features_per_degree_, [0, 0, 0, 0, 50])


def test_srht_surrogate_keeps_degree_one_at_most_d():
    """With the App. C surrogate degree 1 stops at D_1 = d (padded), the H0/1 heuristic
    (Remark 15), whatever the budget."""
    X = _points(40, 6, seed=5, scale=0.5)  # d = 6 -> padded 8
    for D_total in (8, 20, 60, 200):
        for cx in (False, True):
            fm = OptimizedMaclaurin(
                D_total,
                kernel="softmax",
                lengthscale=0.8,
                p_min=2,
                p_max=6,
                sketch="srht",
                complex=cx,
                random_state=0,
            ).fit(X)
            D = fm.n_features_per_degree_
            assert D[1] <= 8 and D[1:].sum() == D_total
            if D_total >= 60:
                assert D[1] == 8


def test_srht_surrogate_is_convex_and_exact_on_blocks():
    d = 8
    for V, C in ((5.0, -0.3), (5.0, 0.2), (1.0, -1.0 / 7)):
        D = np.arange(1, 50)
        s = mc.srht_surrogate(V, C, D, d)
        assert np.all(np.diff(s, 2) >= -1e-12) and np.all(np.diff(s) <= 1e-12)
        exact = series._srht_sum_variance(V, C, 1, d)
        for k in (1, 2, 3):
            exact = series._srht_sum_variance(V, C, k * d, d)
            assert s[k * d - 1] == pytest.approx(exact, rel=1e-12)
        if C <= 0:  # exact on D <= d
            np.testing.assert_allclose(
                s[:d], [series._srht_sum_variance(V, C, k, d) for k in range(1, d + 1)], rtol=1e-12
            )


# ====================================================================== output layout
@pytest.mark.parametrize("cx,real_output", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("constant_in_budget", [False, True])
def test_optimized_output_dim(cx, real_output, constant_in_budget):
    X = _points(30, 5, seed=6, scale=0.5)
    fm = OptimizedMaclaurin(
        17,
        kernel="softmax",
        sketch="rademacher",
        complex=cx,
        real_output=real_output,
        constant_in_budget=constant_in_budget,
        random_state=0,
    ).fit(X)
    D_total = 16 if constant_in_budget else 17
    assert fm.n_features_per_degree_[1:].sum() == D_total
    assert fm.n_features_per_degree_[0] == 1
    width = D_total * (2 if real_output else 1) + 1
    assert fm.output_dim == width
    F = fm.transform(X)
    assert F.shape == (30, width)
    assert np.iscomplexobj(F) == (cx and not real_output)
    # [Re, Im] stacking reproduces Re k_hat
    K = fm.approx_kernel(X)
    np.testing.assert_allclose(np.real(F @ np.conj(F).T), K, atol=1e-12)


def test_sec56_convention_constant_counts():
    """Sec. 5.6's toy counts the constant inside D = 10 (erratum 2)."""
    x = np.linspace(-1, 1, 25)[:, None]
    fm = OptimizedMaclaurin(
        10, kernel="gaussian", lengthscale=0.5, p_max=20, constant_in_budget=True, random_state=0
    ).fit(x)
    assert fm.output_dim == 10 and fm.transform(x).shape == (25, 10)
    # d = 1: Rademacher sketches are exact, so only truncation matters: one feature per
    # degree up to p* = 9 (paper Fig. 5)
    assert fm.degree_ == 9
    np.testing.assert_array_equal(fm.n_features_per_degree_, [1] * 10)


def test_gaussian_map_scales_the_constant_feature():
    X = _points(6, 3, seed=7)
    l = 1.4
    for cls in (RandomMaclaurin, OptimizedMaclaurin):
        fm = cls(20, kernel="gaussian", lengthscale=l, random_state=0).fit(X)
        F = fm.transform(X)
        e = np.exp(-(X * X).sum(1) / (2 * l**2))
        np.testing.assert_allclose(F[:, 0], math.sqrt(fm.coefficients_[0]) * e, rtol=1e-12)
        assert fm.coefficients_[0] == 1.0
        np.testing.assert_allclose(
            fm.exact_kernel(X),
            np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / (2 * l**2)),
            rtol=1e-12,
        )


def test_random_maclaurin_layout():
    X = _points(5, 4)
    fm = RandomMaclaurin(
        40, kernel="softmax", max_degree=6, complex=True, real_output=True, random_state=3
    ).fit(X)
    Dn = fm.n_features_per_degree_
    assert Dn[1:].sum() == 40 and Dn[0] == 1 and len(Dn) == 7
    assert fm.output_dim == 81 and fm.transform(X).shape == (5, 81)
    assert fm.degree_ == 6
    # the measure is 2^-(n+1), renormalised
    assert fm.degree_measure_[1] == pytest.approx(0.5 / (1 - 2.0**-6))


def test_polynomial_degree_range_is_clipped():
    X = _points(20, 3)
    fm = OptimizedMaclaurin(
        12, kernel="polynomial", degree=3, p_min=2, p_max=10, random_state=0
    ).fit(X)
    assert set(fm.objective_) == {2, 3}
    assert fm.degree_ in (2, 3)
    assert fm.objective_[fm.degree_] == min(fm.objective_.values())


# ====================================================================== unbiasedness
def _mc_check(make, X, n_draws, kind="real", var_rtol=0.2, fitted=None):
    """Mean of approx_kernel over seeds vs expected_kernel, within 4 s.e. of the analytic
    variance; the empirical variance within ``var_rtol`` of it. ``fitted(s)`` (optional)
    returns the fitted map of seed ``s`` (default ``make(s).fit(X)``)."""
    fitted = fitted or (lambda s: make(s).fit(X))
    draws = np.stack([fitted(s).approx_kernel(X) for s in range(n_draws)])
    fm = make(0).fit(X)
    expect = fm.expected_kernel(X)
    var = fm.variance(X) if kind == "real" else fm.complex_variance(X)
    se = np.sqrt(var / n_draws)
    z = np.abs(draws.mean(0) - expect) / np.maximum(se, 1e-300)
    assert np.all((z < 4.0) | (var < 1e-20)), z
    if var_rtol is None:
        return draws
    emp = draws.var(0)
    mask = var > 1e-12
    np.testing.assert_allclose(emp[mask], var[mask], rtol=var_rtol)
    return draws


@pytest.mark.parametrize(
    "kernel,sketch,cx",
    [
        ("polynomial", "rademacher", False),
        ("softmax", "rademacher", True),
        ("gaussian", "gaussian", False),
        ("softmax", "gaussian", True),
    ],
)
def test_random_maclaurin_unbiased_for_truncated_series(kernel, sketch, cx):
    X = _points(4, 3, seed=8, scale=0.7)
    kw = dict(degree=4, **SPHERE) if kernel == "polynomial" else dict(max_degree=4)

    def make(s):
        return RandomMaclaurin(
            6, kernel=kernel, sketch=sketch, complex=cx, lengthscale=1.1, random_state=s, **kw
        )

    # the degree draw makes the terms heavy-tailed (weights a_n / mu(n)): the sample
    # variance converges too slowly to check here (see the d = 1 test below)
    _mc_check(make, X, 1500, var_rtol=None)
    # the truncated series, not the kernel (exponential: a visible bias at p = 4)
    fm = make(0).fit(X)
    G = X @ X.T / 1.1**2
    trunc = (
        sum(G**n / math.factorial(n) for n in range(5))
        if kernel != "polynomial"
        else (0.5 + 0.5 * X @ X.T) ** 4
    )
    if kernel == "gaussian":
        e = np.exp(-(X * X).sum(1) / (2 * 1.1**2))
        trunc = trunc * e[:, None] * e[None, :]
    np.testing.assert_allclose(fm.expected_kernel(X), trunc, rtol=1e-12, atol=1e-14)


def test_random_maclaurin_variance_of_the_degree_draw():
    """d = 1, Rademacher: every sketch is exact (Pi_n(x) Pi_n(y) = (xy)^n), so all the
    variance comes from drawing the degrees: (sum_n mu_n (a_n/mu_n)^2 (xy)^(2n)
    - (sum_n a_n (xy)^n)^2) / D, and it matches the Monte Carlo variance."""
    x = np.array([[0.9], [-0.7], [1.3]])
    D = 5

    def make(s):
        return RandomMaclaurin(D, kernel="softmax", max_degree=5, random_state=s)

    fm = make(0).fit(x)
    G = x @ x.T
    mu = fm.degree_measure_
    a = fm.coefficients_
    second = sum(a[n] ** 2 / mu[n] * G ** (2 * n) for n in range(1, 6))
    mean = sum(a[n] * G**n for n in range(1, 6))
    np.testing.assert_allclose(fm.complex_variance(x), (second - mean**2) / D, rtol=1e-12)
    _mc_check(make, x, 4000, var_rtol=0.15)


@pytest.mark.parametrize(
    "sketch,cx",
    [
        ("rademacher", False),
        ("rademacher", True),
        pytest.param("srht", False, marks=pytest.mark.slow),  # 2-5 s (TensorSRHT builds)
        pytest.param("srht", True, marks=pytest.mark.slow),
    ],
)
def test_optimized_maclaurin_unbiased_for_truncated_series(sketch, cx):
    """Algorithm 4 is unbiased for sum_{n <= p*} a_n G^n (allocation fixed by the data:
    n <= n_subsample, so only the sketches vary with the seed)."""
    X = _points(5, 3, seed=9, scale=0.8, nonneg=cx)

    def make(s):
        return OptimizedMaclaurin(
            7, kernel="softmax", p_min=2, p_max=5, sketch=sketch, complex=cx, random_state=s
        )

    fm = make(0).fit(X)
    G = X @ X.T
    trunc = sum(G**n / math.factorial(n) for n in range(fm.degree_ + 1))
    np.testing.assert_allclose(fm.expected_kernel(X), trunc, rtol=1e-12)
    D0 = fm.n_features_per_degree_
    assert all(np.array_equal(make(s).fit(X).n_features_per_degree_, D0) for s in (1, 2))
    # sketches redrawn on the fixed allocation (equal to refitting: see the redraw test)
    _mc_check(make, X, 1500, kind="real", fitted=fm.redraw)


def test_complex_variance_bounds_real_part_variance():
    X = _points(6, 4, seed=10, nonneg=True)
    fm = OptimizedMaclaurin(
        9, kernel="softmax", sketch="rademacher", complex=True, random_state=0
    ).fit(X)
    vc, vr = fm.complex_variance(X), fm.variance(X)
    assert np.all(vr <= vc + 1e-15) and np.any(vr < vc)
    rm = RandomMaclaurin(9, kernel="softmax", max_degree=4, complex=True, random_state=0).fit(X)
    assert np.all(rm.variance(X) <= rm.complex_variance(X) + 1e-15)


# ====================================================================== data, dtypes
def test_optimized_beats_random_maclaurin_on_digits():
    """Issue 3 "Done means": Optimized Maclaurin beats Random Maclaurin in relative
    Frobenius error on digits (centred, unit-normalised, eq. 57 with a = 2, p = 7,
    D = 3d, 5 seeds), and respects its budget."""
    from sklearn.datasets import load_digits

    X = load_digits().data.astype(np.float64)
    idx = np.random.default_rng(0).permutation(len(X))
    tr, te = X[idx[:600]], X[idx[600:1000]]
    mean = tr.mean(0)
    tr, te = _unit(tr - mean), _unit(te - mean)
    D = 3 * 64
    K = (0.5 + 0.5 * te @ te.T) ** 7
    err = {"rm": [], "om": []}
    for s in range(5):
        rm = RandomMaclaurin(D, kernel="polynomial", degree=7, **SPHERE, random_state=s).fit(tr)
        om = OptimizedMaclaurin(
            D, kernel="polynomial", degree=7, **SPHERE, p_min=2, p_max=10, random_state=s
        ).fit(tr)
        assert om.n_features_per_degree_[1:].sum() == D and om.output_dim == D + 1
        err["rm"].append(relative_frobenius_error(K, rm.approx_kernel(te)))
        err["om"].append(relative_frobenius_error(K, om.approx_kernel(te)))
    assert np.mean(err["om"]) < np.mean(err["rm"])
    assert np.mean(err["om"]) < 0.75 * np.mean(err["rm"])


@pytest.mark.parametrize("cls", [RandomMaclaurin, OptimizedMaclaurin])
def test_float32_and_torch(cls, backend):
    X = _points(6, 5, seed=11, scale=0.5)
    fm = cls(16, kernel="gaussian", complex=True, random_state=0).fit(X)
    ref = fm.transform(X)
    for dt in ("float32", "float64"):
        Xb = backend.asarray(X, dt)
        F = fm.transform(Xb)
        assert backend.dtype_name(F) == ("complex64" if dt == "float32" else "complex128")
        np.testing.assert_allclose(
            backend.to_numpy(F), ref, rtol=1e-4 if dt == "float32" else 1e-10, atol=1e-6
        )
        K = fm.approx_kernel(Xb)
        assert backend.dtype_name(K) == dt
        np.testing.assert_allclose(
            backend.to_numpy(K),
            fm.approx_kernel(X),
            rtol=1e-4 if dt == "float32" else 1e-10,
            atol=1e-6,
        )


def test_subsample_used_for_the_objective():
    X = _points(300, 4, seed=12)
    fm = OptimizedMaclaurin(20, kernel="softmax", n_subsample=50, random_state=0).fit(X)
    assert fm.pair_sums_.m == 50
    fm = OptimizedMaclaurin(20, kernel="softmax", n_subsample=None, random_state=0).fit(X)
    assert fm.pair_sums_.m == 300


def test_no_import_cycle_between_dot_product_and_maclaurin():
    """maclaurin builds on dot_product, never the reverse; the package exports both."""
    import kernelkit.features as features

    assert features.RandomMaclaurin is RandomMaclaurin
    assert features.OptimizedMaclaurin is OptimizedMaclaurin
    assert not hasattr(dot_product, "RandomMaclaurin")


# ====================================================================== bad input
@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(degree=0), ValueError, "degree"),
        (dict(degree=2.5), TypeError, "'degree' parameter .* an int"),
        (dict(degree=True), TypeError, "degree"),
        (dict(kernel="rbf"), ValueError, "'kernel' parameter .* Got 'rbf'"),
        (dict(sketch="tensorsketch"), ValueError, "'sketch' parameter .* Got 'tensorsketch'"),
        (dict(n_features=0), ValueError, "n_features"),
        (dict(complex="yes"), TypeError, "complex"),
        (dict(coef0=-1.0), ValueError, "coef0"),
        (dict(gamma=0.0), ValueError, "gamma"),
        (dict(kernel="gaussian", lengthscale=-1.0), ValueError, "lengthscale"),
    ],
)
@pytest.mark.parametrize("cls", [RandomMaclaurin, OptimizedMaclaurin])
def test_bad_parameters(cls, kwargs, exc, match):
    X = _points(5, 3)
    with pytest.raises(exc, match=match):
        cls(**{"n_features": 8, **kwargs}).fit(X)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(p_min=5, p_max=3), "p_min must be <= p_max"),
        (dict(p_min=0), "p_min"),
        (dict(p_max=1.5), "p_max"),
        (dict(n_features=3, p_min=5, p_max=6), "fewer than"),
        (dict(n_features=1, constant_in_budget=True), "fewer than"),
        (dict(sketch="srht", n_subsample=1), "n_subsample"),
    ],
)
def test_optimized_bad_parameters(kwargs, match):
    X = _points(5, 3)
    with pytest.raises((ValueError, TypeError), match=match):
        OptimizedMaclaurin(**{"n_features": 8, "kernel": "softmax", **kwargs}).fit(X)


def test_bad_data():
    fm = OptimizedMaclaurin(8, kernel="softmax")
    with pytest.raises(ValueError, match="at least 2"):
        fm.fit(np.ones((1, 3)))
    with pytest.raises(ValueError, match="NaN"):
        fm.fit(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="max_degree"):
        RandomMaclaurin(8, kernel="softmax", max_degree=0).fit(np.ones((2, 3)))
    fm.fit(_points(5, 3))
    with pytest.raises(ValueError, match="features"):
        fm.transform(np.ones((2, 4)))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        RandomMaclaurin(8).transform(np.ones((2, 3)))
    with pytest.raises(ValueError, match="overflow"):
        OptimizedMaclaurin(8, kernel="softmax", lengthscale=1e-3).fit(_points(5, 3) * 10)


def test_redraw_equals_refit_with_that_seed():
    X = _points(30, 4, seed=13)
    fm = OptimizedMaclaurin(15, kernel="softmax", sketch="srht", complex=True, random_state=0).fit(
        X
    )
    other = fm.redraw(5)
    ref = OptimizedMaclaurin(15, kernel="softmax", sketch="srht", complex=True, random_state=5).fit(
        X
    )
    np.testing.assert_array_equal(other.n_features_per_degree_, ref.n_features_per_degree_)
    np.testing.assert_allclose(other.transform(X), ref.transform(X), rtol=1e-14)
    assert other.random_state == 5 and fm.random_state == 0
    assert not np.allclose(other.transform(X), fm.transform(X))
