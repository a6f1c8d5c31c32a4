"""Dot-product sketches, Maclaurin maps and hybrids on data and parameters a new user tries:
unnormalised rows (norms 0.01 to 10) with a zero row, ``d = 1``, ``n < d = 300``,
negative inner products, degrees up to 6, extreme ``coef0`` / ``gamma``, one to three
features, ``n_lambda = 1``, one cluster, duplicated points, data on a subspace; array
layouts, pandas, torch, sparse and float32 inputs; and the GP regressor on these maps
against the exact GP.

Monte Carlo checks (unbiasedness against ``expected_kernel``, ``variance`` against the
empirical mean squared error) use ``|mean - target| < Z`` standard errors of the
replicates, with ``Z = 5`` for the few dozen comparisons of a test (a two-sided normal
tail of 6e-7 each). The replicates are bounded (Rademacher, SRHT and count-sketch
weights) or light-tailed (exponential features of inputs of norm <= 0.6), so the normal
approximation of their means holds. Where every replicate is the same number (an exact
estimator) the standard error is the rounding of the features, at most ``64 eps`` times
the Cauchy-Schwarz scale of the estimate.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernelkit.features import (
    AngularHybridRF,
    ClusteredHybridRF,
    GaussianHybridRF,
    GaussianSketch,
    NormalizedGaussianHybridRF,
    OptimizedMaclaurin,
    RademacherSketch,
    RandomMaclaurin,
    TensorSketch,
    TensorSRHT,
    optimal_diagonal_A,
)

Z = 5.0
EPS64 = np.finfo(np.float64).eps


def _check_mean(values, target, scale, label):
    """``values`` (R, ...) replicates of an unbiased estimate of ``target`` (...)."""
    m = values.mean(axis=0)
    se = values.std(axis=0, ddof=1) / np.sqrt(values.shape[0])
    # exact estimators: rounding only (and exact zeros: any positive floor)
    se = np.maximum(se, 64 * EPS64 * scale + np.finfo(np.float64).tiny)
    z = np.abs(m - target) / se
    assert np.all(z < Z), f"{label}: mean off by {z.max():.1f} standard errors"


def _check_variance(values, target, variance, scale, label):
    """The analytic ``variance`` against the mean squared error of the replicates."""
    _check_mean((values - target) ** 2, variance, scale**2, label + " (variance)")


# ---------------------------------------------------------------- data sets
def _norms():
    """Rows of norms 0.01 .. 10 against a reversed row, a shrunk row and a zero row."""
    X = np.random.default_rng(0).standard_normal((4, 5))
    X *= (np.array([0.01, 0.3, 3.0, 10.0]) / np.linalg.norm(X, axis=1))[:, None]
    return X, np.vstack([-X[1], 0.5 * X[2], np.zeros(5)])


def _d1():
    return np.array([[0.5], [-2.0], [0.0]]), np.array([[3.0], [-0.1]])


def _negative():
    X = np.random.default_rng(1).standard_normal((3, 4))
    return X, -X


DATA = {"norms_and_zero_row": _norms, "d1": _d1, "negative": _negative}


def _scale(fm, X, Y):
    """Cauchy-Schwarz bound ``sqrt(k(x, x) k(y, y))`` of the estimates, (n, m)."""
    kx = np.abs(np.diag(fm.exact_kernel(X, X)))
    ky = np.abs(np.diag(fm.exact_kernel(Y, Y)))
    return np.sqrt(kx[:, None] * ky[None, :]) + np.abs(fm.exact_kernel(X, Y))


# ---------------------------------------------------------------- i.i.d. sketches
@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("p", [1, 3, 6])
@pytest.mark.parametrize(("coef0", "gamma"), [(0.0, 1.0), (1e-6, 1.0), (100.0, 1e-3)])
@pytest.mark.parametrize("cplx", [False, True])
def test_rademacher_sketch_unbiased_with_its_variances(data, p, coef0, gamma, cplx):
    """One fit with ``D = 50,000`` features gives ``D`` independent one-feature estimates
    ``g_l = D Phi_l(x) conj Phi_l(y)`` (i.i.d. weights): their mean is the kernel, the mean
    of ``(Re g - k)^2`` is ``D variance`` and of ``|g - k|^2`` is ``D complex_variance``
    (checked up to degree 3: at degree 6 a few rare sign patterns carry the squared errors,
    and 50,000 of them have no normal mean)."""
    X, Y = DATA[data]()
    D = 50_000
    fm = RademacherSketch(D, degree=p, coef0=coef0, gamma=gamma, complex=cplx, random_state=0)
    fm.fit(X)
    P, S = fm.transform(X), fm.transform_y(Y)
    g = np.moveaxis(D * P[:, None, :] * np.conj(S)[None, :, :], -1, 0)  # (D, n, m)
    k = (gamma * X @ Y.T + coef0) ** p
    np.testing.assert_allclose(fm.exact_kernel(X, Y), k, rtol=1e-12, atol=0)
    scale = _scale(fm, X, Y)
    label = f"{data} p={p} coef0={coef0} gamma={gamma} complex={cplx}"
    _check_mean(np.real(g), k, scale, label)
    if p <= 3:  # the squared errors' 4th moment grows like 9^p: no normal mean at p = 6
        _check_variance(np.real(g), k, D * fm.variance(X, Y), scale, label)
        _check_mean(np.abs(g - k) ** 2, D * fm.complex_variance(X, Y), scale**2, label + " |.|^2")


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("cplx", [False, True])
def test_gaussian_sketch_unbiased_with_its_variance(data, cplx):
    """Degree 2 (the squared errors of Gaussian weights have finite variance up to
    ``p = 2`` with a CLT of 50,000 replicates)."""
    X, Y = DATA[data]()
    D = 50_000
    fm = GaussianSketch(D, degree=2, coef0=0.5, complex=cplx, random_state=1).fit(X)
    P, S = fm.transform(X), fm.transform_y(Y)
    g = np.real(np.moveaxis(D * P[:, None, :] * np.conj(S)[None, :, :], -1, 0))
    k = (X @ Y.T + 0.5) ** 2
    _check_mean(g, k, _scale(fm, X, Y), data)
    _check_variance(g, k, D * fm.variance(X, Y), _scale(fm, X, Y), data)


# ---------------------------------------------------------------- TensorSRHT, TensorSketch
def _refits(make, X, Y, n_draws, fit_kw=None):
    est = [make(s).fit(X, **(fit_kw or {})).approx_kernel(X, Y) for s in range(n_draws)]
    return np.asarray(est), make(0).fit(X, **(fit_kw or {}))


@pytest.mark.parametrize(
    ("make", "data"),
    [
        (lambda s: TensorSRHT(3, degree=3, coef0=1.0, random_state=s), "d1"),
        (lambda s: TensorSRHT(5, degree=2, complex=True, random_state=s), "norms_and_zero_row"),
        (lambda s: TensorSRHT(7, degree=3, coef0=0.5, gamma=2.0, random_state=s), "negative"),
        (lambda s: TensorSketch(3, degree=3, coef0=1.0, random_state=s), "d1"),
        (lambda s: TensorSketch(5, degree=2, coef0=1e-6, random_state=s), "norms_and_zero_row"),
    ],
    ids=["srht-d1", "srht-complex-norms", "srht-negative", "ts-d1", "ts-norms"],
)
def test_structured_sketches_unbiased_with_their_variance(make, data):
    """Refits: TensorSRHT pads ``d~ = 2`` (``d = 1`` with ``coef0``) to 2 and has fewer
    features than the padded dimension; TensorSketch hashes into 3 or 5 buckets."""
    X, Y = DATA[data]()
    est, fm = _refits(make, X, Y, 2000)
    k = fm.exact_kernel(X, Y)
    scale = _scale(fm, X, Y)
    _check_mean(est, k, scale, data)
    _check_variance(est, k, fm.variance(X, Y), scale, data)


def test_tensor_srht_fewer_features_than_a_wide_input():
    """``n = 3 < d = 300``, ``D = 4`` features from one block of the padded ``d = 512``."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3, 300)) / np.sqrt(300)
    Y = -X[:2] + 0.1 * X[1:]
    est, fm = _refits(lambda s: TensorSRHT(4, degree=2, coef0=1.0, random_state=s), X, Y, 2000)
    assert fm.padded_dim_ == 512
    k = (X @ Y.T + 1.0) ** 2
    _check_mean(est, k, _scale(fm, X, Y), "d=300")
    _check_variance(est, k, fm.variance(X, Y), _scale(fm, X, Y), "d=300")


# ---------------------------------------------------------------- Maclaurin maps
@pytest.mark.parametrize("n_features", [1, 2, 3])
@pytest.mark.parametrize(
    "kw",
    [
        {"kernel": "softmax", "max_degree": 4},
        {"kernel": "gaussian", "max_degree": 3, "lengthscale": 3.0},
        {"kernel": "polynomial", "degree": 3, "coef0": 0.0},  # a_3 only
    ],
    ids=["softmax", "gaussian", "poly-top-coefficient-only"],
)
def test_random_maclaurin_with_one_to_three_features(n_features, kw):
    """With ``D = 1..3`` most degrees get no feature in a draw; the estimate is unbiased for
    the truncated series over the draws, with the variance of the degree draw."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4, 3))
    X *= (np.array([0.05, 0.3, 0.5, 0.6]) / np.linalg.norm(X, axis=1))[:, None]
    Y = np.vstack([-X[2], X[3], np.zeros(3)])
    make = lambda s: RandomMaclaurin(n_features, random_state=s, **kw)  # noqa: E731
    est, fm = _refits(make, X, Y, 2000)
    G = X @ Y.T
    if kw["kernel"] == "polynomial":
        series = G**3
        assert list(fm.n_features_per_degree_) == [0, 0, 0, n_features]
    else:
        s = 1.0 / kw.get("lengthscale", 1.0) ** 2
        series = sum(
            (s * G) ** n / np.prod(np.arange(1, n + 1)) for n in range(kw["max_degree"] + 1)
        )
        if kw["kernel"] == "gaussian":
            sx, sy = np.sum(X * X, axis=1), np.sum(Y * Y, axis=1)
            series = series * np.exp(-0.5 * s * (sx[:, None] + sy[None, :]))
    np.testing.assert_allclose(fm.expected_kernel(X, Y), series, rtol=1e-13, atol=1e-15)
    scale = np.abs(series) + 1.0
    _check_mean(est, series, scale, f"D={n_features}")
    _check_variance(est, series, fm.variance(X, Y), scale, f"D={n_features}")


def test_optimized_maclaurin_degree_cap_below_the_kernel():
    """``p_max = 2`` for the exponential kernel: the map estimates ``1 + G + G^2 / 2``
    without bias (its truncation bias is the rest of the series)."""
    rng = np.random.default_rng(4)
    X = 0.4 * rng.standard_normal((5, 3))
    Y = np.vstack([-X[0], X[1], np.zeros(3)])
    fm = OptimizedMaclaurin(3, kernel="softmax", p_max=2, random_state=0).fit(X)
    G = X @ Y.T
    series = 1.0 + G + 0.5 * G**2
    assert fm.degree_ <= 2
    if fm.degree_ == 1:
        series = 1.0 + G
    np.testing.assert_allclose(fm.expected_kernel(X, Y), series, rtol=1e-14)
    est = np.asarray([fm.redraw(s).approx_kernel(X, Y) for s in range(3000)])
    _check_mean(est, series, series + 1.0, "p_max=2")
    _check_variance(est, series, fm.variance(X, Y), series + 1.0, "p_max=2")


def test_optimized_maclaurin_budget_too_small_names_n_features():
    X = np.random.default_rng(5).standard_normal((6, 3))
    with pytest.raises(ValueError, match="n_features=1 leaves 0 sketch features"):
        OptimizedMaclaurin(1, kernel="softmax", constant_in_budget=True).fit(X)
    with pytest.raises(ValueError, match=r"n_features=2 .*p_min=3"):
        OptimizedMaclaurin(2, kernel="softmax", p_min=3, p_max=3).fit(X)


# ---------------------------------------------------------------- hybrids
def _subspace_with_duplicates():
    """Points of norm <= 0.6 on a 2-dim subspace of R^6, a duplicated row, x = y, x = -y and
    a zero row."""
    rng = np.random.default_rng(6)
    B = np.linalg.qr(rng.standard_normal((6, 2)))[0]  # (6, 2) orthonormal
    Zc = 0.3 * rng.standard_normal((3, 2))
    X = np.vstack([Zc @ B.T, (Zc @ B.T)[:1], np.zeros((1, 6))])  # row 3 duplicates row 0
    Y = np.vstack([X[0], -X[1], 0.5 * X[2], np.zeros(6)])
    return X, Y


@pytest.mark.parametrize(
    "make",
    [
        lambda s: AngularHybridRF(1, 1, random_state=s),
        lambda s: AngularHybridRF(
            2, 64, shared_projection=False, kernel="gaussian", random_state=s
        ),
        lambda s: GaussianHybridRF(1, 1, random_state=s),
        lambda s: GaussianHybridRF(3, 40, lambda_features="trig", random_state=s),
        lambda s: NormalizedGaussianHybridRF(1, 1, random_state=s),
        lambda s: NormalizedGaussianHybridRF(3, 40, kernel="gaussian", random_state=s),
    ],
    ids=[
        "angular-1-1",
        "angular-2-64",
        "gauss-1-1",
        "gauss-trig-3-40",
        "normalized-1-1",
        "normalized-3-40",
    ],
)
@pytest.mark.parametrize("data", ["subspace", "d1"])
def test_hybrids_on_degenerate_data(make, data):
    """Unbiased with the analytic variance; exact pairs (``x = y``, zero rows) included."""
    if data == "subspace":
        X, Y = _subspace_with_duplicates()
    else:
        X, Y = np.array([[0.3], [-0.2], [0.0]]), np.array([[0.3], [0.25], [0.0]])
    est, fm = _refits(make, X, Y, 2000, fit_kw={"Y": Y})
    k = fm.exact_kernel(X, Y)
    np.testing.assert_allclose(fm.expected_kernel(X, Y), k, rtol=1e-14)
    scale = _scale(fm, X, Y)
    _check_mean(est, k, scale, data)
    _check_variance(est, k, fm.variance(X, Y), scale, data)
    # duplicated rows give identical rows of the estimate and of the variance
    if data == "subspace":
        np.testing.assert_array_equal(fm.approx_kernel(X, Y)[0], fm.approx_kernel(X, Y)[3])


def test_clustered_one_cluster_uses_the_means():
    """``n_clusters = 1``: the centres are the means, ``A`` is the optimal diagonal of the
    means (eq. 88), and the estimator is the complex exponential one of that ``A``."""
    rng = np.random.default_rng(7)
    X, Y = 0.4 * rng.standard_normal((6, 3)), 0.4 * rng.standard_normal((5, 3))
    fm = ClusteredHybridRF(4, n_clusters=1, random_state=0).fit(X, Y=Y)
    np.testing.assert_allclose(fm.centers_x_[0], X.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(fm.centers_y_[0], Y.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(fm.A_[0, 0], optimal_diagonal_A(X.mean(0), Y.mean(0)), rtol=1e-12)
    # zero-one features with one pair: Psi_A(x)^T Psi_{A^-1}(y) per projection w_l
    W, a = fm.projection_, fm.A_[0, 0]  # (m, d), (d,)
    ax, by = X * a, Y / a
    lx = ax @ W.T - 0.5 * np.sum(ax * ax, axis=1)[:, None]  # (n, m)
    ly = by @ W.T - 0.5 * np.sum(by * by, axis=1)[:, None]
    direct = np.exp(lx) @ np.exp(ly).T / W.shape[0]
    np.testing.assert_allclose(fm.approx_kernel(X, Y), direct, rtol=1e-12)


def test_clustered_counts_duplicates_once():
    X = np.array([[0.1, 0.2], [0.1, 0.2], [0.3, -0.1], [0.3, -0.1]])  # 2 distinct points
    fm = ClusteredHybridRF(4, n_clusters=2, random_state=0).fit(X, Y=X)
    assert np.all(np.isfinite(fm.approx_kernel(X, X)))
    with pytest.raises(ValueError, match=r"n_clusters=3 for X exceeds .* distinct X points \(2\)"):
        ClusteredHybridRF(4, n_clusters=3).fit(X, Y=np.vstack([X, [[1.0, 1.0]]]))


# ---------------------------------------------------------------- inputs
MAPS = {
    "rademacher-complex": lambda: RademacherSketch(
        16, degree=3, coef0=0.5, gamma=2.0, complex=True
    ),
    "srht-complex-real-output": lambda: TensorSRHT(
        16, degree=2, coef0=1.0, complex=True, real_output=True
    ),
    "srht-fwht": lambda: TensorSRHT(16, degree=3, coef0=0.5, method="fwht"),
    "tensor-sketch": lambda: TensorSketch(16, degree=3, coef0=1.0, gamma=0.5),
    "random-maclaurin-gaussian-complex": lambda: RandomMaclaurin(
        16, kernel="gaussian", max_degree=5, complex=True
    ),
    "optimized-maclaurin-srht": lambda: OptimizedMaclaurin(16, kernel="softmax", sketch="srht"),
    "angular": lambda: AngularHybridRF(4, 3, kernel="gaussian"),
    "normalized-gaussian": lambda: NormalizedGaussianHybridRF(4, 3),
    "clustered-gaussian": lambda: ClusteredHybridRF(4, n_clusters=2, mixture="gaussian"),
}
SPARSE_OK = {
    k for k in MAPS if k.split("-")[0] in ("rademacher", "srht", "tensor", "random", "optimized")
}


def _xy():
    rng = np.random.default_rng(8)
    return 0.4 * rng.standard_normal((7, 5)), 0.4 * rng.standard_normal((4, 5))


@pytest.mark.parametrize("name", MAPS)
def test_layouts_pandas_and_sparse_give_the_same_numbers(name):
    pd = pytest.importorskip("pandas")
    X, Y = _xy()
    fm = MAPS[name]().set_params(random_state=0).fit(X, Y=Y)
    K, P = fm.approx_kernel(X, Y), fm.transform(X)
    big = np.zeros((14, 10))
    big[::2, ::2] = X
    ro = X.copy()
    ro.flags.writeable = False
    for A in (np.asfortranarray(X), big[::2, ::2], ro, pd.DataFrame(X)):
        np.testing.assert_allclose(fm.approx_kernel(A, Y), K, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(fm.transform(A), P, rtol=1e-13, atol=1e-15)
        refit = MAPS[name]().set_params(random_state=0).fit(A, Y=Y)
        np.testing.assert_allclose(refit.approx_kernel(X, Y), K, rtol=1e-13, atol=1e-15)
    if name in SPARSE_OK:  # documented: the sketches and Maclaurin maps accept sparse input
        Xs, Ys = sp.csr_matrix(X), sp.csc_matrix(Y)
        np.testing.assert_allclose(fm.approx_kernel(Xs, Ys), K, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(fm.transform(Xs), P, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(fm.variance(Xs, Ys), fm.variance(X, Y), rtol=1e-12)
    else:
        with pytest.raises(TypeError, match="does not support sparse input"):
            fm.transform(sp.csr_matrix(X))


@pytest.mark.parametrize("name", MAPS)
def test_torch_gives_the_numpy_numbers(name):
    torch = pytest.importorskip("torch")
    X, Y = _xy()
    fm = MAPS[name]().set_params(random_state=0).fit(X, Y=Y)
    Xt, Yt = torch.tensor(X), torch.tensor(Y)
    np.testing.assert_allclose(
        fm.approx_kernel(Xt, Yt).numpy(), fm.approx_kernel(X, Y), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(fm.transform(Xt).numpy(), fm.transform(X), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        fm.variance(Xt, Yt).numpy(), fm.variance(X, Y), rtol=1e-10, atol=1e-14
    )


@pytest.mark.parametrize("name", MAPS)
@pytest.mark.parametrize("side", ["X", "Y"])
def test_non_finite_input_is_named(name, side):
    X, Y = _xy()
    fm = MAPS[name]().set_params(random_state=0).fit(X, Y=Y)
    for bad in (np.nan, np.inf):
        A, B = X.copy(), Y.copy()
        (A if side == "X" else B)[1, 2] = bad
        for method in ("approx_kernel", "variance", "expected_kernel", "exact_kernel"):
            with pytest.raises(ValueError, match=f"^{side} contains NaN or infinity"):
                getattr(fm, method)(A, B)


@pytest.mark.parametrize("cls", [RademacherSketch, TensorSRHT, TensorSketch])
@pytest.mark.parametrize("scale", [1e-3, 10.0])
def test_float32_degree_six_at_extreme_norms(cls, scale):
    """float32 rows of norm ~1e-3 (``k ~ 1e-36``, below float32's normal range for the
    features' partial products) and ~10 (``k ~ 1e12``): the estimate is the float64 one
    to float32 rounding. Each feature is a product of 6 projections of ``d~ = 3`` terms
    and the estimate a sum of ``D = 64`` products, so its error is at most
    ``(6 (3 + 1) + 2 + 64) eps32`` times the Cauchy-Schwarz scale of the estimate."""
    X = scale * np.random.default_rng(9).standard_normal((4, 3))
    fm = cls(64, degree=6, random_state=0).fit(X)
    K64 = fm.approx_kernel(X, X)
    K32 = fm.approx_kernel(X.astype(np.float32), X.astype(np.float32))
    assert K32.dtype == np.float32
    P = fm.transform(X)
    norms = np.sqrt(np.sum(np.abs(P) ** 2, axis=1))
    tol = (6 * 4 + 2 + 64) * np.finfo(np.float32).eps * norms[:, None] * norms[None, :]
    # where the 64 products fall below float32's normal range each rounding is off by up
    # to half the smallest subnormal s, absolutely: 64 products and 63 additions, < 64 s
    # (some draws put entries ~1e-40 there, 4-5 s off against a relative bound below s)
    tol = tol + 64 * float(np.finfo(np.float32).smallest_subnormal)
    assert np.all(np.abs(K32 - K64) <= tol)
    assert np.all(np.isfinite(fm.variance(X.astype(np.float32), X.astype(np.float32))))


# ---------------------------------------------------------------- GP regression
@pytest.mark.parametrize(
    "make",
    [
        lambda D, s: TensorSRHT(D, degree=3, coef0=1.0, complex=True, random_state=s),
        lambda D, s: RademacherSketch(D, degree=2, coef0=1.0, complex=True, random_state=s),
    ],
    ids=["srht-complex", "rademacher-complex"],
)
def test_gp_on_sketches_approaches_the_exact_gp(make):
    """Posterior mean and standard deviation against the exact GP with the same polynomial
    kernel: the Gram error, hence the posterior's, falls like ``D^-1/2`` (8x from 64 to
    4096 features); over 3 seeds it must fall at least 3x, and the std stays >= 0."""
    from kernelkit.estimators import RandomFeatureGPRegressor

    rng = np.random.default_rng(10)
    X = 0.5 * rng.standard_normal((30, 4))
    y = np.sin(X.sum(axis=1)) + 0.05 * rng.standard_normal(30)
    Xt = 0.5 * rng.standard_normal((6, 4))
    noise = 0.1
    fm = make(8, 0).fit(X)
    K = fm.exact_kernel(X, X) + noise * np.eye(30)
    Ktx = fm.exact_kernel(Xt, X)
    mu0 = Ktx @ np.linalg.solve(K, y)
    sd0 = np.sqrt(np.diag(fm.exact_kernel(Xt, Xt)) - np.sum(Ktx * np.linalg.solve(K, Ktx.T).T, 1))
    errs = {}
    for D in (64, 4096):
        e = []
        for s in range(3):
            mu, sd = (
                RandomFeatureGPRegressor(make(D, s), noise=noise)
                .fit(X, y)
                .predict(Xt, return_std=True)
            )
            assert np.all(sd >= 0)
            e.append(np.abs(mu - mu0).max() + np.abs(sd - sd0).max())
        errs[D] = np.mean(e)
    assert errs[4096] < errs[64] / 3, errs


# ---------------------------------------------------------------- variances out of range
@pytest.mark.parametrize(
    "make",
    [
        lambda: RademacherSketch(64, degree=3, complex=True),
        lambda: GaussianSketch(64, degree=3),
        lambda: TensorSRHT(64, degree=3),
        lambda: TensorSRHT(64, degree=3, complex=True, real_output=True),
        lambda: TensorSketch(64, degree=3),
    ],
    ids=["rademacher-complex", "gaussian", "srht", "srht-complex", "tensor-sketch"],
)
def test_sketch_variance_beyond_the_float_range(make):
    """Rows of norms 1e100, 1 and 1e-120 against 1e-100, 1 and 1e-120 (``coef0 = 0``): the kernel
    ``G^3 ~ 1e299`` is representable and its variance ``~ G^6`` is not, so ``variance``
    is ``+inf`` (not NaN), and ``log_relative_variance``, which is scale-free (the
    variances are homogeneous of degree ``2p`` in ``x`` and ``y``, like ``k^2``), equals
    its value on the unit rows, also where ``k`` itself underflows."""
    u = np.random.default_rng(11).standard_normal((3, 4))
    X = u * np.array([1e100, 1.0, 1e-120])[:, None]
    Y = u[::-1] * np.array([1e-100, 1.0, 1e-120])[:, None]
    fm = make().set_params(random_state=0).fit(X)
    k = fm.exact_kernel(X, Y)
    assert np.isfinite(k[0, 1]) and abs(k[0, 1]) > 1e290
    V, Vc = fm.variance(X, Y), fm.complex_variance(X, Y)
    assert V[0, 1] == np.inf and Vc[0, 1] == np.inf
    assert not np.any(np.isnan(V)) and not np.any(np.isnan(Vc))
    un, vn = (
        u / np.linalg.norm(u, axis=1)[:, None],
        u[::-1] / np.linalg.norm(u[::-1], axis=1)[:, None],
    )
    ref = fm.log_relative_variance(un, vn)  # O(1) kernel values and variances
    np.testing.assert_allclose(fm.log_relative_variance(X, Y), ref, rtol=1e-12, atol=1e-12)
    # and, where the variance is representable, it is the unit-row one times |x|^6 |y|^6
    w = (np.sum(X[1] ** 2) * np.sum(Y[1] ** 2)) ** 3
    np.testing.assert_allclose(V[1, 1], w * fm.variance(un, vn)[1, 1], rtol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomMaclaurin(64, kernel="polynomial", degree=3, coef0=0.0),
        lambda: OptimizedMaclaurin(64, kernel="polynomial", degree=3, coef0=0.0),
        lambda: RandomMaclaurin(64, kernel="softmax", max_degree=4, complex=True),
    ],
    ids=["random-poly", "optimized-poly", "random-softmax-complex"],
)
def test_maclaurin_variance_beyond_the_float_range(make):
    """The Maclaurin variances are sums of degree-``n`` terms homogeneous of degree ``2n``
    in ``x`` and ``y``: formed on unit rows, they are ``+inf`` (not NaN) where they
    overflow, and for the homogeneous polynomial kernel ``(x.y)^3`` the relative variance
    is scale-free, so it equals its value on the unit rows (it was NaN or inf)."""
    u = np.random.default_rng(12).standard_normal((3, 4))
    X = u * np.array([1e100, 1.0, 1e-120])[:, None]
    Y = u[::-1] * np.array([1e-100, 1.0, 1e-120])[:, None]
    fm = make().set_params(random_state=0).fit(u)
    V, Vc = fm.variance(X, Y), fm.complex_variance(X, Y)
    assert not np.any(np.isnan(V)) and not np.any(np.isnan(Vc))
    if fm.kernel == "polynomial":
        assert V[0, 1] == np.inf  # k ~ 1e300, Var ~ k^2
        un = u / np.linalg.norm(u, axis=1)[:, None]
        vn = u[::-1] / np.linalg.norm(u[::-1], axis=1)[:, None]
        ref = fm.log_relative_variance(un, vn)
        np.testing.assert_allclose(fm.log_relative_variance(X, Y), ref, rtol=1e-12, atol=1e-12)
    # where representable the variance is unchanged: the unit-row formula at ordinary norms
    Xo, Yo = 0.5 * u, 0.3 * u[::-1]
    w = (np.sum(Xo**2, axis=1)[:, None] * np.sum(Yo**2, axis=1)[None, :]) ** 3
    if fm.kernel == "polynomial":
        un = Xo / np.linalg.norm(Xo, axis=1)[:, None]
        vn = Yo / np.linalg.norm(Yo, axis=1)[:, None]
        np.testing.assert_allclose(fm.variance(Xo, Yo), w * fm.variance(un, vn), rtol=1e-12)


@pytest.mark.parametrize(
    "cls", [RademacherSketch, GaussianSketch, TensorSRHT, TensorSketch, RandomMaclaurin]
)
def test_zero_row_without_offset_is_exact_not_nan(cls):
    """A zero row with ``coef0 = 0``: every feature is 0, so the estimate is exactly the
    kernel 0 (variance 0). ``log_relative_variance`` said NaN (log(0 / 0)); the contract
    is ``-inf`` where the estimate is exact. Other pairs keep their finite values."""
    X = np.random.default_rng(5).standard_normal((4, 3))
    X[0] = 0.0
    fm = cls(n_features=32, coef0=0.0, random_state=0).fit(X)
    np.testing.assert_array_equal(fm.approx_kernel(X)[0], 0.0)
    np.testing.assert_array_equal(fm.variance(X)[0], 0.0)
    lrv = fm.log_relative_variance(X)
    assert np.all(lrv[0] == -np.inf) and np.all(lrv[:, 0] == -np.inf)
    assert np.all(np.isfinite(lrv[1:, 1:]))
    # the finite entries are log(variance / kernel^2) of the same pairs
    K = fm.exact_kernel(X)[1:, 1:]
    np.testing.assert_allclose(np.exp(lrv[1:, 1:]), fm.variance(X)[1:, 1:] / K**2, rtol=1e-9)
