"""The papers' errata, checked numerically against the code that implements the corrected
forms (the errata themselves are listed on the derivation pages of the user guide).

One test per erratum that changes a number: an unbiasedness check against the exact
kernel, a Monte Carlo variance against the closed form the code uses, or an exact
computation (quadrature, eigenvalues) against it. Monte Carlo tolerances are z-scores:
the standard error is estimated from the simulated quantity itself (its sample standard
deviation over sqrt(number of independent draws)), and 4 standard errors leave a false
alarm rate below 1e-4 per check; where the printed form is also checked, it is shown to
lie more than 8 standard errors away, so the test separates the two forms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.distributions import PolynomialJointDistribution
from kernelkit.features import (
    GERF,
    SDERF,
    AngularHybridRF,
    ComplexExponentialRF,
    HyperbolicRF,
    NormalizedGaussianHybridRF,
    OptimizedMaclaurin,
    TensorSRHT,
    TrigRF,
)
from kernelkit.features.dot_product import pair_statistics, tensor_srht_variance
from kernelkit.features.maclaurin_series import greedy_allocation
from kernelkit.metrics import gaussian_kl
from kernelkit.optim import low_rank_partition_bound, multinomial_partition_bound, partition_bound

Z = 4.0  # z-score of every Monte Carlo check (two-sided false alarm < 1e-4)


def _z(samples, target):
    """z-score of the mean of i.i.d. ``samples`` against ``target``."""
    samples = np.asarray(samples, dtype=np.float64)
    return (samples.mean() - target) / (samples.std(ddof=1) / math.sqrt(samples.size))


# ------------------------------------------------------------------ dot-product paper
def test_dp_erratum1_algorithm2_respects_the_budget():
    """Algorithm 2 as printed returns p + D_total features; the corrected loop exactly
    D_total, starting from D_n = 1[a_n > 0], and refuses a budget below that count."""
    cost = np.array([0.0, 3.0, 2.0, 1.0, 5.0])
    active = np.array([False, True, True, False, True])
    for total in (3, 4, 10, 41):
        alloc = greedy_allocation(lambda n, Dn: cost[n] / Dn, active, total)
        assert alloc.sum() == total  # printed: total + 3
        assert np.all(alloc[active] >= 1) and np.all(alloc[~active] == 0)
    with pytest.raises(ValueError):
        greedy_allocation(lambda n, Dn: cost[n] / Dn, active, 2)


@pytest.mark.parametrize("in_budget, width", [(False, 21), (True, 20)])
def test_dp_erratum2_constant_in_budget(in_budget, width):
    """Algorithm 4 returns D_total + 1 columns (the constant on top); Sec. 5.6 counts it
    inside. Both conventions, and both approximate the kernel (the constant column is
    the exact sqrt(a_0), so the diagonal error stays at Monte Carlo size)."""
    X = 0.3 * np.random.default_rng(0).standard_normal((50, 4))
    om = OptimizedMaclaurin(
        n_features=20, kernel="softmax", constant_in_budget=in_budget, random_state=0
    ).fit(X)
    Phi = om.transform(X)
    assert Phi.shape == (50, width)
    # the features of degree 0 are the constant: a column equal to 1 (a_0 = 1 for exp)
    assert np.any(np.all(np.abs(Phi - 1.0) < 1e-12, axis=0))


def _srht_blocks(x, y, blocks, **kw):
    """Independent block estimates of one TensorSRHT fit (blocks are independent)."""
    d = 8
    fm = TensorSRHT(n_features=d * blocks, degree=2, random_state=0, **kw).fit(x[None])
    est = d * blocks * fm.transform(x[None])[0] * np.conj(fm.transform(y[None])[0])
    return est.reshape(blocks, d).mean(axis=1)


def test_dp_errata3_4_9_tensor_srht_moments():
    """Erratum 4: permutations per (block, degree), so the block variance is eq. 28 with
    D = d (a permutation shared by the degrees has a much larger variance for these
    mixed-sign inputs). Erratum 3: the complex map multiplies by diag(z_i) and is
    unbiased with E|k_hat - k|^2 = eq. 33. Erratum 9: the d of eq. 28/33 is the padded
    dimension (d0 = 6 inputs padded to 8; eq. 28 with d = 6 is another value).

    Tolerance of the variance checks: the squared errors of the B independent blocks are
    i.i.d., so their mean has standard error std / sqrt(B)."""
    x = np.array([1, 1, 1, 1, -1, -1, -1, -1.0]) / math.sqrt(8)
    y = np.array([1, -1, 1, -1, 1, -1, 1, -1.0]) / math.sqrt(8)
    k, B = float(x @ y) ** 2, 20_000
    G, N, S = pair_statistics(x[None], y[None])
    blk = _srht_blocks(x, y, B).real
    assert abs(_z(blk, k)) < Z
    sq = (blk - k) ** 2
    assert abs(_z(sq, tensor_srht_variance(G, N, S, 2, 8, d=8)[0, 0])) < Z

    cblk = _srht_blocks(x, y, B, complex=True)
    assert abs(_z(cblk.real, k)) < Z and abs(_z(cblk.imag, 0.0)) < Z
    fm = TensorSRHT(n_features=8, degree=2, complex=True, random_state=0).fit(x[None])
    assert abs(_z(np.abs(cblk - k) ** 2, fm.complex_variance(x[None], y[None])[0, 0])) < Z

    rng = np.random.default_rng(3)
    x6, y6 = rng.standard_normal(6), rng.standard_normal(6)
    x6, y6 = x6 / np.linalg.norm(x6), y6 / np.linalg.norm(y6)
    G, N, S = pair_statistics(x6[None], y6[None])
    sq6 = (_srht_blocks(np.r_[x6, 0, 0], np.r_[y6, 0, 0], B).real - float(x6 @ y6) ** 2) ** 2
    fm6 = TensorSRHT(n_features=8, degree=2, random_state=0).fit(x6[None])
    assert fm6.padded_dim_ == 8
    v8 = fm6.variance(x6[None], y6[None])[0, 0]
    np.testing.assert_allclose(v8, tensor_srht_variance(G, N, S, 2, 8, d=8)[0, 0], rtol=1e-12)
    assert abs(_z(sq6, v8)) < Z
    # with p = 1 and D = 8 the padded map is exact: only d = 8 predicts a zero variance
    G, N, S = pair_statistics(np.stack([x6, y6]))
    np.testing.assert_allclose(tensor_srht_variance(G, N, S, 1, 8, d=8), 0.0, atol=1e-14)
    assert np.all(tensor_srht_variance(G, N, S, 1, 8, d=6) > 1e-3)


def test_dp_erratum5_kl_direction():
    """Eq. 93 as printed can be negative; gaussian_kl is KL[exact || approx] (and the
    other direction on request), each against a Monte Carlo of E_p log(p / q)."""
    mu_e, var_e, mu_a, var_a = 0.3, 0.5, -0.2, 1.5
    printed = 0.5 * (0.5 + math.log(0.5) - 1)  # equal means, var_e = var_a / 2
    assert printed < 0 < gaussian_kl([0.0], [1.0], [0.0], [2.0])
    rng = np.random.default_rng(0)
    for direction, (m_p, v_p, m_q, v_q) in {
        "exact||approx": (mu_e, var_e, mu_a, var_a),
        "approx||exact": (mu_a, var_a, mu_e, var_e),
    }.items():
        z = m_p + math.sqrt(v_p) * rng.standard_normal(200_000)
        log_ratio = 0.5 * math.log(v_q / v_p) - (z - m_p) ** 2 / (2 * v_p)
        log_ratio += (z - m_q) ** 2 / (2 * v_q)
        kl = gaussian_kl([mu_e], [var_e], [mu_a], [var_a], direction=direction)
        assert abs(_z(log_ratio, kl)) < Z


def test_dp_erratum11_real_part():
    """Theorem 3's bound holds for Re k_hat: approx_kernel of a complex sketch is that
    real part, Re(Phi(x) conj(Phi(y))^T)."""
    X = np.random.default_rng(0).standard_normal((5, 3)) / 2
    fm = TensorSRHT(n_features=64, degree=2, complex=True, random_state=0).fit(X)
    K = fm.approx_kernel(X, X)
    assert np.isrealobj(K)
    Phi = fm.transform(X)
    np.testing.assert_allclose(K, (Phi @ np.conj(Phi).T).real, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ FAVOR# paper
def _per_feature(fm, x, y):
    M = fm.projection_.shape[0]
    return M * fm.transform(x)[0] * fm.transform_y(y)[0]


def test_favor_erratum_a_trig_features_unbiased():
    """TrigRF: eq. 7 prints cos(-w.y + theta) on the key side, which estimates
    exp(-x.y); the corrected cos(w.y + theta) estimates exp(x.y)."""
    x, y = np.array([[0.5, -0.3, 0.4]]), np.array([[0.6, 0.2, 0.3]])
    K, M = math.exp(float(x[0] @ y[0])), 200_000
    fm = TrigRF(n_features=M, random_state=0).fit(x, Y=y)
    est = _per_feature(fm, x, y)
    assert abs(_z(est, K)) < Z
    W, th = fm.projection_, fm.offset_
    nx, ny = float(x[0] @ x[0]), float(y[0] @ y[0])
    printed = 2 * math.exp((nx + ny) / 2) * np.cos(W @ x[0] + th) * np.cos(-W @ y[0] + th)
    assert abs(_z(printed, K)) > 2 * Z


def test_favor_erratum_b_gerf_norm_term():
    """GERF: the norm term is -|x|^2/2 (unbiased); the printed -|x|^2/4 multiplies the
    mean by exp((|x|^2 + |y|^2)/4)."""
    x, y = np.array([[0.5, -0.3, 0.4]]), np.array([[0.6, 0.2, 0.3]])
    K, M = math.exp(float(x[0] @ y[0])), 200_000
    est = _per_feature(GERF(n_features=M, A=-0.3, random_state=0).fit(x, Y=y), x, y)
    assert abs(_z(est, K)) < Z
    shift = math.exp((float(x[0] @ x[0]) + float(y[0] @ y[0])) / 4)
    assert abs(_z(est * shift, K)) > 2 * Z


def test_favor_erratum_c_sderf_second_moment_by_quadrature():
    """SDERF: eq. 40 prints det(I-4A)^{1/4} det(I-8A)^{-1/2}; the second moment has the
    normaliser of both features squared, det(I-4A). Exact check: put the projections on
    a 2-d Gauss-Hermite grid, so that the weighted mean of (f1 f2)^2 over the grid is the
    second moment (to quadrature error, far below the 1e-8 tolerance for these smooth
    integrands with 60 nodes per axis)."""
    rng = np.random.default_rng(0)
    X = 0.5 * rng.standard_normal((200, 2))
    Y = 0.5 * rng.standard_normal((200, 2)) + 0.3
    x, y = X[:1], Y[:1]
    t, w = np.polynomial.hermite_e.hermegauss(60)  # weight exp(-t^2/2)
    grid = np.stack(np.meshgrid(t, t, indexing="ij"), axis=-1).reshape(-1, 2)
    weight = np.outer(w, w).ravel() / (2 * math.pi)
    fm = SDERF(n_features=grid.shape[0], random_state=0).fit(X, Y=Y)
    assert np.all(fm.A_ < 0)
    fm.projection_ = grid
    fm._build()  # recompute the constants derived from projection_
    f = grid.shape[0] * fm.transform(x)[0] * fm.transform_y(y)[0]
    K = math.exp(float(x[0] @ y[0]))
    np.testing.assert_allclose(weight @ f, K, rtol=1e-8)
    m2 = float(weight @ f**2)
    np.testing.assert_allclose(grid.shape[0] * fm.variance(x, y)[0, 0] + K**2, m2, rtol=1e-8)
    printed = m2 * np.prod(1 - 4 * fm.A_) ** -0.75
    assert abs(printed / m2 - 1) > 0.05


def test_favor_erratum_d_aderf_factor_two():
    """ADERF: A = A*(phi) with phi = 2 tr(Sigma)/d + 2 mu3 minimises objective (14);
    the printed phi (without the factor 2) gives a larger objective. Exact objective."""
    from kernelkit.features import ADERF

    rng = np.random.default_rng(0)
    X = 0.4 * rng.standard_normal((300, 4))
    Y = 0.4 * rng.standard_normal((300, 4)) + 0.2
    ad = ADERF(n_features=16, random_state=0).fit(X, Y=Y)
    A_fit = float(ad.A_[0])

    def objective(A):
        ad.A_ = np.full(4, A)
        return ad.log_objective(X, Y)

    best = objective(A_fit)
    grid = np.linspace(1.5 * A_fit, 0.5 * A_fit, 41)
    assert best <= min(objective(a) for a in grid) + 1e-12
    # the printed phi/2: A*(phi) is decreasing in phi, A* of half phi is about A_fit / 2
    assert objective(0.5 * A_fit) > best + 1e-3
    # erratum e: zero variance leaves mean log K^2 = 2 mean(x).mean(y), a lower bound
    assert best > 2 * X.mean(0) @ Y.mean(0)


# ------------------------------------------------------------------ hybrid paper
def _circle(r, theta):
    return np.array([[r, 0.0]]), r * np.array([[math.cos(theta), math.sin(theta)]])


def _hybrid_sq_err(cls, x, y, reps, **kw):
    """Squared errors of ``reps`` independent fits (seeds 0..reps-1) at one pair."""
    K = math.exp(float(x[0] @ y[0]))
    return np.array(
        [
            (cls(random_state=s, **kw).fit(x, Y=y).approx_kernel(x, y)[0, 0] - K) ** 2
            for s in range(reps)
        ]
    )


def test_hybrid_erratum3_eq47_mse():
    """Eq. 47: the trig coefficient is E(1 - lambda_hat)^2 = (1 - t)(1 - t + t/n), not
    the printed E[lambda_hat (1 - lambda_hat)]. The hybrid's squared errors over
    independent fits average to the corrected value (0.0314), not the printed (0.0207)."""
    r, th, m, n = 0.5, 1.6, 3, 2
    x, y = _circle(r, th)
    t, c2, s2 = th / math.pi, math.cos(th / 2) ** 2, math.sin(th / 2) ** 2
    mse_pp = math.exp(8 * r * r * c2 - 2 * r * r) * (1 - math.exp(-4 * r * r * c2)) ** 2 / (2 * m)
    mse_tr = math.exp(2 * r * r) * (1 - math.exp(-4 * r * r * s2)) ** 2 / (2 * m)
    corrected = t * (t - t / n + 1 / n) * mse_pp + (1 - t) * (1 - t + t / n) * mse_tr
    printed = t * (t - t / n + 1 / n) * mse_pp + t * (1 - 1 / n - t + t / n) * mse_tr
    fm = AngularHybridRF(m, n, random_state=0).fit(x, Y=y)
    np.testing.assert_allclose(fm.variance(x, y)[0, 0], corrected, rtol=1e-10)
    sq = _hybrid_sq_err(AngularHybridRF, x, y, 3000, n_features=m, n_lambda=n)
    assert abs(_z(sq, corrected)) < Z
    assert abs(_z(sq, printed)) > Z


def test_hybrid_erratum2_shared_projection_cross_term():
    """Eq. 36 counts the cross terms i != j of E[SM++ SM_trig] (one W shared by the two
    base estimators) with C(m, 2); they are the m(m - 1) ordered pairs, giving eq. 38,
    (1 - 1/m) SM^2 + SM^2 cos(|x|^2 - |y|^2)/m. In the hybrid's MSE this cross moment
    enters with the weight 2 E[lambda_hat (1 - lambda_hat)], so the printed count would
    lower the MSE by 2 E[lambda_hat (1 - lambda_hat)] (m - 1)/(2m) SM^2. Unequal norms, so
    that the cos term of eq. 38 is not 1."""
    m, n, th = 3, 2, 1.6
    x = np.array([[0.5, 0.0]])
    y = 0.7 * np.array([[math.cos(th), math.sin(th)]])
    SM, t = math.exp(float(x[0] @ y[0])), th / math.pi
    fm = AngularHybridRF(m, n, shared_projection=True, random_state=0).fit(x, Y=y)
    mse = fm.variance(x, y)[0, 0]
    printed = mse - 2 * t * (1 - t) * (1 - 1 / n) * (m - 1) / (2 * m) * SM**2
    sq = _hybrid_sq_err(AngularHybridRF, x, y, 3000, n_features=m, n_lambda=n)
    assert abs(_z(sq, mse)) < Z
    assert abs(_z(sq, printed)) > 2 * Z
    # the independent-projection variant has no cross term: another, larger MSE
    free = AngularHybridRF(m, n, shared_projection=False, random_state=0).fit(x, Y=y)
    assert free.variance(x, y)[0, 0] > mse


def test_hybrid_erratum1_sizes():
    """Sec. 2.2 swaps m and n: the base estimators use m projections (n_features), the
    coefficient lambda uses n (n_lambda)."""
    x, y = _circle(0.5, 1.0)
    fm = AngularHybridRF(n_features=5, n_lambda=2, random_state=0).fit(x, Y=y)
    assert fm.projection_.shape[0] == 5 and fm.lambda_projection_.shape[0] == 2


def test_hybrid_erratum6_tau_scale():
    """Eq. 70 states tau ~ N(0, I); the normalised Gaussian hybrid needs N(0, sigma^2 I)
    for lambda_hat = 1/rho - cos(tau.(x - y))/rho to be unbiased for lambda. One
    projection per draw: the rows of lambda_projection_ are i.i.d."""
    sigma, R = 1.5, 200_000
    x = np.array([[0.4, -0.3, 0.2]])
    y = np.array([[0.1, 0.5, -0.2]])
    fm = NormalizedGaussianHybridRF(
        n_features=1, n_lambda=R, sigma=sigma, radius=0.5, random_state=0
    ).fit(x, Y=y)
    delta = (x - y)[0]
    rho = 1 - math.exp(-2 * sigma**2 * 0.25)
    np.testing.assert_allclose(fm.rho_, rho, rtol=1e-12)
    lam = (1 - math.exp(-(sigma**2) * float(delta @ delta) / 2)) / rho
    T = fm.lambda_projection_
    assert abs(_z(1 / rho - np.cos(T @ delta) / rho, lam)) < Z
    assert abs(_z(1 / rho - np.cos(T @ delta / sigma) / rho, lam)) > 2 * Z  # N(0, I)


def test_hybrid_erratum7_identity_A_is_one_sided():
    """A = I gives the one-sided SM^+ (m features, per-feature variance
    SM^2 (e^{|x+y|^2} - 1)), not the antithetic SM^++. Per-feature Monte Carlo."""
    x, y = np.array([[0.3, -0.2, 0.4]]), np.array([[0.1, 0.3, 0.2]])
    SM, M = math.exp(float(x[0] @ y[0])), 200_000
    ce = ComplexExponentialRF(n_features=M, A=np.ones(3), random_state=0).fit(x, Y=y)
    est = (M * ce.transform(x)[0] * ce.transform_y(y)[0]).real
    assert abs(_z(est, SM)) < Z
    per_feature = SM**2 * (math.exp(float(np.sum((x + y) ** 2))) - 1)
    np.testing.assert_allclose(M * ce.variance(x, y)[0, 0], per_feature, rtol=1e-10)
    assert abs(_z((est - SM) ** 2, per_feature)) < Z
    pp = HyperbolicRF(1, random_state=0).fit(x, Y=y).variance(x, y)[0, 0]
    assert abs(_z((est - SM) ** 2, pp)) > 2 * Z  # SM^++ with one projection


def test_hybrid_erratum9_bound_of_theorem_3_5():
    """Eq. 64 has an extra 1/r, so the printed bound (27) fails for large r at n = 1;
    the corrected W(r)(2m)^{-1/2} sqrt((1 - 1/n)/(pi r^2) + 1/(n sqrt(pi) r)) on the
    largest relative error eps over the angles holds (m = 1; 1e-9 relative: round-off).
    Exact: the analytic MSE of the code (checked by Monte Carlo in the eq. 47 test)."""
    thetas = np.linspace(0.01, math.pi - 0.01, 400)
    for n in (1, 2, 4):
        for r in (1.0, 2.5, 5.0, 10.0):
            x = np.tile([[r, 0.0]], (len(thetas), 1))
            y = r * np.stack([np.cos(thetas), np.sin(thetas)], axis=1)
            fm = AngularHybridRF(n_features=1, n_lambda=n, random_state=0).fit(x, Y=y)
            # the relative error: root-MSE over the kernel value
            eps = np.sqrt(np.diag(fm.variance(x, y))) / np.exp(np.sum(x * y, axis=1))
            W = math.exp(2 * r * r) * -math.expm1(-4 * r * r)
            corrected = math.sqrt(
                (1 - 1 / n) / (math.pi * r * r) + 1 / (n * math.sqrt(math.pi) * r)
            )
            assert eps.max() / W <= corrected / math.sqrt(2) * (1 + 1e-9)
            if n == 1 and r == 5.0:
                printed = math.sqrt(1 / math.sqrt(math.pi)) / (r * math.sqrt(2))
                assert eps.max() / W > printed  # 0.117 > 0.106


# ------------------------------------------------------------------ JDL paper
def test_jdl_app_b_monomial_counts():
    """App. B prints m_Y = C(d_X + q, d_X); the Y basis has C(d_Y + q, d_Y) monomials."""
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((200, 1)), rng.standard_normal((200, 3))
    jd = PolynomialJointDistribution(degree=2).fit(X, Y)
    assert jd.basis_x_.exponents_.shape[0] == math.comb(1 + 2, 1)  # 3
    assert jd.basis_y_.exponents_.shape[0] == math.comb(3 + 2, 3)  # 10, not 3
    assert jd.coef_.shape == (10, 3)


# ------------------------------------------------------------------ SGB paper
def test_sgb_correction_a_per_sample_z():
    """Alg. LB with the global z underestimates beta after the first sample and the
    result is no bound; with the per-sample z_j, V^T S V + D >= sum_j Sigma_j (exact
    eigenvalues; 1e-12 relative is round-off)."""
    rng = np.random.default_rng(0)
    worst = {True: 0.0, False: 0.0}
    for _ in range(40):
        m, n, d = rng.integers(2, 5), rng.integers(2, 6), rng.integers(3, 7)
        F = rng.standard_normal((m, n, d)) * rng.choice([0.3, 1.0, 3.0])
        theta = rng.standard_normal(d)
        full = partition_bound(theta, F).sigma.sum(axis=0)
        rank = int(rng.integers(1, d + 1))
        for per_sample in (True, False):
            lb = low_rank_partition_bound(theta, F, rank=rank, per_sample_z=per_sample)
            gap = np.linalg.eigvalsh(lb.curvature() - full).min() / max(1.0, np.abs(full).max())
            worst[per_sample] = min(worst[per_sample], gap)
    assert worst[True] > -1e-12 and worst[False] < -0.05


def test_sgb_corrections_b_d_zero_residual_and_batch_log_z():
    """(b) a zero residual g (the first label of every sample, a sample whose labels share
    one feature vector, a row in the span of V) must not be stored as g/|g| = 0/0.
    (d) the batch bound is on prod_j Z_j: its constant is sum_j log z_j, and the
    quadratic bound holds at random theta (1e-10 relative: round-off)."""
    rng = np.random.default_rng(1)
    m, n, d = 4, 3, 5
    F = rng.standard_normal((m, n, d))
    # samples 0, 1: every row a multiple of e_1, so once V holds e_1 the residual g of
    # the next row is exactly 0 while the row is not
    F[:2] = rng.standard_normal((2, n, 1)) * np.eye(d)[0]
    F[2] = F[2, 0]  # sample 2: all labels alike, every row exactly 0
    theta0 = rng.standard_normal(d)
    for rank, variant in [(1, "paper"), (d, "paper"), (2, "eig"), (2, "exact")]:
        lb = low_rank_partition_bound(theta0, F, rank=rank, variant=variant)
        assert np.all(np.isfinite(lb.V)) and np.all(np.isfinite(lb.S))
        np.testing.assert_allclose(
            lb.log_z, [np.log(np.sum(np.exp(Fj @ theta0))) for Fj in F], rtol=1e-12
        )
        for _ in range(50):
            delta = rng.standard_normal(d) * rng.choice([0.1, 1.0, 3.0])
            lhs = sum(np.log(np.sum(np.exp(Fj @ (theta0 + delta)))) for Fj in F)
            rhs = lb.log_z.sum() + delta @ lb.mu.sum(axis=0)
            rhs += 0.5 * delta @ lb.curvature() @ delta
            assert lhs <= rhs + 1e-10 * max(1.0, abs(rhs))


def test_sgb_lemma1_curvature_constants():
    """Lemma 1 corrected: for multinomial features Sigma_t has rank <= n - 1 < d, so the
    smallest eigenvalue of Sigma_t + lam I is lam (mu_2 = 1/lam) and the largest at most
    lam + ((n - 1)/2) |x|^2 (mu_1). Exact eigenvalues, round-off tolerance 1e-10."""
    rng = np.random.default_rng(0)
    X, W = rng.normal(size=(5, 4)), 2.0 * rng.normal(size=(4, 6))
    mb, lam = multinomial_partition_bound(W, X), 1e-2
    for C, x in zip(mb.C, X, strict=True):
        ev = np.linalg.eigvalsh(np.kron(C, np.outer(x, x)) + lam * np.eye(24))
        assert abs(ev.min() - lam) < 1e-10
        assert ev.max() <= lam + (6 - 1) / 2 * x @ x + 1e-10
