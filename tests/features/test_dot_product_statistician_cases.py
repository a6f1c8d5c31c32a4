"""The dot-product maps read as a statistician would: Monte Carlo checks of the mean and
of ``variance`` / ``complex_variance`` on hard inputs (one-hot and sparse rows, zero rows,
rows of very different norms, ``d = 1``, padded TensorSRHT, ``x = -y``, ``coef0`` 0 and
large, ``gamma != 1``), TensorSketch's variance exactly by enumeration at high degree,
Random / Optimized Maclaurin (the latter at points unlike its fitting data), sparse,
torch, Dask and float32 against NumPy float64, and what Optimized Maclaurin's fitted
allocation depends on.

Defects found here (each test says what went wrong before the fix): Optimized
Maclaurin's subsample depended on the order of the rows, and a ``Generator`` passed as
its ``random_state`` did not advance; its TensorSRHT allocation chased a rounding residue
past ``D_1 = d``; TensorSketch stored a dense ``(d~, p D)`` count-sketch matrix; the
sketches' docstrings filed the paper's complex variances under ``variance``.

Tolerances of the Monte Carlo checks come from the spread of the draws themselves: a
mean is compared with a z-score ``|mean - E| / (sd / sqrt(S))`` and a second moment with
the standard error of the squared deviations; the bound 5 leaves a false-alarm rate of
about 1e-6 per entry under the normal approximation (at most a few dozen entries per
test). Entries whose estimate is exact (zero spread up to rounding) are compared with the
exact value directly.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from kernelkit.features import (
    GaussianSketch,
    OptimizedMaclaurin,
    RademacherSketch,
    RandomMaclaurin,
    TensorSketch,
    TensorSRHT,
)

Z_MAX = 5.0


def hard_rows(d=5):
    """Rows a statistician would try: one-hot, two non-zeros, a zero row, a tiny and a
    large row, and (as the y side) their negatives: ``x = -y`` and ``x = y`` pairs."""
    if d == 1:  # one-hot, a negative, zero, tiny, large
        X = np.array([[1.0], [-0.7], [0.0], [0.05], [3.0], [0.4]])
        return X, np.concatenate([X[:2], -X[3:], X[4:5]])
    rng = np.random.default_rng(11)
    X = np.zeros((6, d))
    X[0, 0] = 1.0  # one-hot
    X[1, [1, d - 1]] = [0.5, -0.7]  # sparse
    # row 2 stays zero
    X[3] = 0.05 * rng.standard_normal(d)  # tiny
    X[4] = 3.0 * rng.standard_normal(d)  # large
    X[5] = np.abs(rng.standard_normal(d))
    return X, np.concatenate([X[:2], -X[3:], X[4:5]])


def gaussian_sketch_sq_se(X, Y, degree, coef0, gamma, D, S):
    """Exact standard error of the mean over S replicates of the squared error
    (k_hat - k)^2 of a real GaussianSketch with D features, per pair (n, m).

    One feature's product is g = prod_{i <= degree} (w_i.x~)(w_i.y~), w_i ~ N(0, I)
    independent, x~ = [sqrt(gamma) x, sqrt(coef0)]: (a, b) = (w.x~, w.y~) is bivariate
    normal, E[(a b)^m] (m <= 4, a polynomial of degree 8) is exact by 6-node Gauss-Hermite
    quadrature, and E[g^m] = E[(a b)^m]^degree. k_hat is the mean of D i.i.d. g, with
    variance s2 / D and fourth central moment (mu4 + 3 (D - 1) s2^2) / D^3, so its squared
    error has variance mu4_hat - var_hat^2. The squared errors of this map are heavy-tailed
    (products of Gaussians to the 4 degree-th power), so their sample spread is not a
    reliable standard error; this is. Returns (SE, E[g]) (E[g] the kernel, to check)."""
    t, wt = np.polynomial.hermite_e.hermegauss(6)
    wt = wt / wt.sum()
    Xt, Yt = (
        np.hstack([np.sqrt(gamma) * Z, np.full((len(Z), 1 if coef0 > 0 else 0), np.sqrt(coef0))])
        for Z in (X, Y)
    )
    sa = np.linalg.norm(Xt, axis=1)[:, None]
    sb = np.linalg.norm(Yt, axis=1)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.clip(np.nan_to_num((Xt @ Yt.T) / (sa * sb)), -1.0, 1.0)
    z1, z2 = t[:, None], t[None, :]
    w2 = wt[:, None] * wt[None, :]
    u = []
    for m in (1, 2, 3, 4):
        # (a b)^m = sa^m sb^m (z1 (rho z1 + sqrt(1 - rho^2) z2))^m, averaged over the nodes
        ab = z1[..., None, None] * (
            rho * z1[..., None, None] + np.sqrt(1 - rho * rho) * z2[..., None, None]
        )
        u.append((sa * sb) ** m * np.einsum("ij,ij...->...", w2, ab**m))
    g1, g2, g3, g4 = (um**degree for um in u)
    s2 = g2 - g1 * g1
    mu4 = g4 - 4 * g3 * g1 + 6 * g2 * g1**2 - 3 * g1**4
    var_hat = s2 / D
    mu4_hat = (mu4 + 3 * (D - 1) * s2 * s2) / D**3
    return np.sqrt(np.maximum(mu4_hat - var_hat * var_hat, 0.0) / S), g1


def check_mc(est, E, V, Vc, label, se_variance=None):
    """``est`` (S, n, m) replicates (complex for complex maps) of an estimate with mean
    ``E`` (n, m), variance of the real part ``V`` and ``E|k_hat - E|^2 = Vc``. z-scores
    from the spread of the replicates (the second moments' from their 4th moments), or
    for a real map's squared error ``se_variance``, an exact standard error."""
    S = est.shape[0]
    re = np.real(est)
    spread = re.std(axis=0, ddof=1)
    exact = spread <= 1e-12 * (1.0 + np.abs(E))  # no spread: the estimate is exact
    np.testing.assert_allclose(re.mean(0)[exact], E[exact], rtol=1e-9, atol=1e-12)
    z = (re.mean(0) - E) / np.where(exact, 1.0, spread / np.sqrt(S))
    assert np.all(np.abs(z[~exact]) < Z_MAX), (label, "mean", z)
    for name, sq, ref in (
        ("variance", (re - E) ** 2, V),
        ("complex_variance", np.abs(est - E) ** 2, Vc),
    ):
        m, se = sq.mean(0), sq.std(0, ddof=1) / np.sqrt(S)
        if se_variance is not None:  # a real map: complex_variance is variance
            se = se_variance
        # an exact entry has variance 0 up to the rounding of k^2 (1e-14 relative)
        assert np.all(ref[exact] <= 1e-12 * (1.0 + E[exact] ** 2)), (label, name)
        zv = (m - ref) / np.where(exact, 1.0, se)
        assert np.all(np.abs(zv[~exact]) < Z_MAX), (label, name, zv)


# ====================================================================== Optimized Maclaurin
def _two_scale_rows(n=300, d=4, seed=0):
    rng = np.random.default_rng(seed)
    half = n // 2
    return np.concatenate(
        [0.2 * rng.standard_normal((half, d)), 1.5 * rng.standard_normal((n - half, d))]
    )


def test_optimized_maclaurin_subsample_does_not_depend_on_row_order():
    """With more rows than ``n_subsample`` the objective reads a random subsample; the
    contract says the allocation is fitted on the data set ``X``: a permutation of its rows
    must give the same allocation (and, with the same seed, the same features). Before the
    fix the subsample was drawn by position, and 10 orders of these rows gave 6 different
    allocations (truncation degrees 5 to 7)."""
    X = _two_scale_rows()
    ref = OptimizedMaclaurin(24, kernel="softmax", n_subsample=40, random_state=0).fit(X)
    for k in range(6):
        perm = np.random.default_rng(k).permutation(len(X))
        fm = OptimizedMaclaurin(24, kernel="softmax", n_subsample=40, random_state=0).fit(X[perm])
        assert fm.degree_ == ref.degree_
        np.testing.assert_array_equal(fm.n_features_per_degree_, ref.n_features_per_degree_)
        # same allocation and same sketch stream: the same map (rounding only)
        np.testing.assert_allclose(fm.transform(X[:5]), ref.transform(X[:5]), rtol=1e-12)


# ====================================================================== TensorSketch cost
def test_tensor_sketch_memory_does_not_grow_with_d_times_D():
    """The guide gives TensorSketch a cost of ``O(p (nnz + D log D))`` per point: the count
    sketches have one non-zero per input coordinate and degree. They used to be stored as
    a dense ``(d~, p D)`` matrix (here 20001 x 512 float64 = 82 MB; 10 GB for a
    bag-of-words ``d = 1e5``, ``D = 4096``, ``p = 3``) and applied by a dense product. Fit
    and transform of sparse rows now allocate ``O(p d + n p D)``: the bound 8 MB is 10x
    the ``O(p d)`` hash tables and output and 1/10 of the dense matrix."""
    import tracemalloc

    import scipy.sparse as sp

    from kernelkit.features import TensorSketch

    d, D = 20_000, 256
    X = sp.random(50, d, density=1e-3, format="csr", random_state=0)
    tracemalloc.start()
    try:
        fm = TensorSketch(D, degree=2, coef0=1.0, random_state=0).fit(X)
        F = fm.transform(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert F.shape == (50, D)
    assert peak < 8e6, peak
    # the features are still the count sketch of x~ (x) x~: Gram matrix vs its definition
    Xd = np.hstack([X.toarray(), np.ones((50, 1))])
    rows = np.arange(d + 1)
    C = [sp.csr_matrix((fm.signs_[i], (rows, fm.hashes_[i])), shape=(d + 1, D)) for i in (0, 1)]
    U = [np.asarray(Xd @ Ci) for Ci in C]
    ref = np.fft.irfft(np.fft.rfft(U[0], axis=1) * np.fft.rfft(U[1], axis=1), n=D, axis=1)
    np.testing.assert_allclose(F, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_optimized_maclaurin_advances_a_generator_random_state():
    """The contract: a ``Generator`` passed as ``random_state`` is a stream, and "the object
    passed advances" with every fit, as with every other map. Optimized Maclaurin derived
    its streams with ``Generator.spawn``, which leaves the generator's own stream where it
    was: the next map fitted with it drew as if this fit had not happened."""
    X = _two_scale_rows(60, 3)
    for cls_kw in (dict(kernel="softmax"), dict(kernel="polynomial", degree=3)):
        g = np.random.default_rng(5)
        OptimizedMaclaurin(16, random_state=g, **cls_kw).fit(X)
        assert g.random() != np.random.default_rng(5).random()
    # and it stays reproducible: an int seed, or equal generators, give equal maps
    a = OptimizedMaclaurin(16, kernel="softmax", random_state=np.random.default_rng(3)).fit(X)
    b = OptimizedMaclaurin(16, kernel="softmax", random_state=np.random.default_rng(3)).fit(X)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))


# ====================================================================== Monte Carlo
IID_PARAMS = [(1, 0.0, 1.0), (2, 0.0, 0.5), (3, 1.0, 2.0), (2, 25.0, 1.0)]


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("cls", [RademacherSketch, GaussianSketch])
@pytest.mark.parametrize("degree,coef0,gamma", IID_PARAMS)
def test_iid_sketch_unbiased_with_documented_variances_on_hard_rows(
    cls, cplx, degree, coef0, gamma
):
    """One fit with ``S D`` i.i.d. features holds ``S`` independent ``D``-feature
    estimates (column groups); their mean, real-part and complex second moments against
    ``exact_kernel``, ``variance`` and ``complex_variance`` on one-hot / sparse / zero /
    tiny / large rows, ``x = -y`` and ``x = y``, ``coef0`` 0 to 25, ``gamma != 1``."""
    X, Y = hard_rows()
    S, D = 8000, 2
    small = cls(D, degree=degree, coef0=coef0, gamma=gamma, complex=cplx, random_state=1)
    small.fit(X)
    E, V = small.exact_kernel(X, Y), small.variance(X, Y)
    np.testing.assert_allclose(small.expected_kernel(X, Y), E)
    se_var = None
    if cls is GaussianSketch and not cplx:
        # heavy-tailed squared errors (products of 4 degree Gaussians): their exact SE,
        # and as many replicates as make it at most 0.08 V, so that a variance off by 1.5
        # is >= 6 SE off (Z_MAX = 5); 8000 left 0.37 V for degree 3 (1.4 SE)
        se1, g1 = gaussian_sketch_sq_se(X, Y, degree, coef0, gamma, D, 1)
        np.testing.assert_allclose(g1, E, rtol=1e-9, atol=1e-12 * np.abs(E).max())
        ok = V > 1e-12 * (1.0 + E**2)  # not exact
        S = max(S, int(np.ceil(np.max(se1[ok] / V[ok]) ** 2 / 0.08**2)))
        se_var = se1 / np.sqrt(S)
    fm = cls(S * D, degree=degree, coef0=coef0, gamma=gamma, complex=cplx, random_state=1)
    fm.fit(X)
    P, Q = fm.transform(X), fm.transform(Y)
    prod = P[:, None, :] * np.conj(Q[None, :, :]) * (S * D / D)  # rescale D_big -> D
    est = np.moveaxis(prod.reshape(len(X), len(Y), S, D).sum(-1), -1, 0)
    check_mc(est, E, V, small.complex_variance(X, Y), cls.__name__, se_var)


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize(
    "d,coef0,D",
    [(5, 0.0, 8), (5, 1.0, 3), (6, 4.0, 11), (1, 0.0, 1), (1, 0.5, 2)],
    ids=["d5-pad8", "d5-coef0-D<d", "d6-pad8-D=d+3", "d1", "d1-coef0"],
)
@pytest.mark.parametrize("degree", [1, 3])
def test_tensor_srht_unbiased_with_documented_variances_padded_and_d1(cplx, d, coef0, D, degree):
    """TensorSRHT blocks (one per ``padded_dim_`` features) are independent, and the first
    ``r`` features of a block are a partial block: replicates of a ``D``-feature estimate
    from one big fit, on the hard rows, with zero-padding (``d~`` not a power of two) and
    ``d = 1``."""
    X, Y = hard_rows(d)
    probe = TensorSRHT(D, degree=degree, coef0=coef0, complex=cplx, random_state=0).fit(X)
    pd = probe.padded_dim_
    k, r = divmod(D, pd)
    per = k + (r > 0)
    S = 6000
    big = TensorSRHT(S * per * pd, degree=degree, coef0=coef0, complex=cplx, random_state=3)
    big.fit(X)
    scale = big.n_features  # unscaled features: P sqrt(D_big)
    g = (big.transform(X)[:, None, :] * np.conj(big.transform(Y))[None, :, :]) * scale
    g = g.reshape(len(X), len(Y), S, per, pd)
    tot = g[..., :k, :].sum(axis=(-1, -2))
    if r:
        tot = tot + g[..., k, :r].sum(-1)
    est = np.moveaxis(tot / D, -1, 0)
    E = probe.exact_kernel(X, Y)
    check_mc(est, E, probe.variance(X, Y), probe.complex_variance(X, Y), "TensorSRHT")
    if degree == 1 and D % pd == 0:  # the docstring: exact for degree 1, D a multiple of d
        np.testing.assert_allclose(probe.approx_kernel(X, Y), E, atol=1e-12 * np.abs(E).max())


@pytest.mark.parametrize("degree,coef0,D", [(1, 0.0, 3), (2, 0.0, 2), (3, 1.0, 5)])
def test_tensor_sketch_unbiased_with_documented_variance_on_hard_rows(degree, coef0, D):
    """Refits (the columns of one TensorSketch are not independent) on the hard rows."""
    X, Y = hard_rows(4)
    X, Y = X[[0, 1, 2, 5]], Y[[0, 1, 4]]  # one-hot, sparse, zero, positive; x = -y
    S = 3000
    est = np.array(
        [
            TensorSketch(D, degree=degree, coef0=coef0, random_state=s).fit(X).approx_kernel(X, Y)
            for s in range(S)
        ]
    )
    fm = TensorSketch(D, degree=degree, coef0=coef0, random_state=0).fit(X)
    V = fm.variance(X, Y)
    check_mc(est, fm.exact_kernel(X, Y), V, V, "TensorSketch")


@pytest.mark.parametrize("degree", [2, 8, 10])
@pytest.mark.parametrize("coef0", [0.0, 2.0])
def test_tensor_sketch_variance_exact_by_enumeration_for_two_features(degree, coef0):
    """High degree defeats Monte Carlo (the squared error's tail holds rare sign
    alignments: 6000 refits at degree 8 gave z = -6 against the formula). For ``D = 2``
    the estimate is, by Parseval on the length-2 FFT,
    ``k_hat = (prod_i a_i(x) a_i(y) + prod_i b_i(x) b_i(y)) / 2`` with
    ``a_i(x) = sum_j s_i(j) x~_j``, ``b_i(x) = sum_j s_i(j) (-1)^h_i(j) x~_j``, i.i.d. over the
    degrees ``i``; enumerating the ``2^d~`` hashes and ``2^d~`` signs of one degree gives
    ``E k_hat`` and ``E k_hat^2`` exactly, to compare with ``tensor_sketch_variance``
    (``g = gcd(2, D) = 2``) to rounding (rtol 1e-9: sums of 1024 terms, powers <= 10)."""
    import itertools

    X, Y = hard_rows(4)
    X, Y = X[[0, 1, 5]], Y[[1, 2, 4]]
    fm = TensorSketch(2, degree=degree, coef0=coef0, random_state=0).fit(X)
    aug = [np.hstack([A, np.full((len(A), 1), np.sqrt(coef0))]) for A in (X, Y)]
    Xa, Ya = (A if coef0 > 0 else A[:, :4] for A in aug)
    dt = Xa.shape[1]
    cfg = np.array(list(itertools.product([-1.0, 1.0], repeat=dt)))  # (2^d~, d~)
    S_, H_ = cfg[:, None, :], cfg[None, :, :]  # signs, (-1)^hash: every pair
    a_x, a_y = np.einsum("shj,nj->shn", S_ + 0 * H_, Xa), np.einsum("shj,mj->shm", S_ + 0 * H_, Ya)
    b_x, b_y = np.einsum("shj,nj->shn", S_ * H_, Xa), np.einsum("shj,mj->shm", S_ * H_, Ya)
    aa = a_x[..., :, None] * a_y[..., None, :]  # (2^d~, 2^d~, n, m)
    bb = b_x[..., :, None] * b_y[..., None, :]
    m1a, m1b = aa.mean((0, 1)), bb.mean((0, 1))
    maa, mbb, mab = (aa * aa).mean((0, 1)), (bb * bb).mean((0, 1)), (aa * bb).mean((0, 1))
    p = degree
    mean = 0.5 * (m1a**p + m1b**p)
    second = 0.25 * (maa**p + mbb**p + 2.0 * mab**p)
    k = fm.exact_kernel(X, Y)
    np.testing.assert_allclose(mean, k, rtol=1e-9, atol=1e-12 * np.abs(k).max())
    np.testing.assert_allclose(
        fm.variance(X, Y), second - k**2, rtol=1e-9, atol=1e-9 * second.max()
    )


def _complex_estimate(fm, X, Y):
    P, Q = fm.transform(X), fm.transform(Y)
    return P @ np.conj(Q).T


@pytest.mark.parametrize(
    "sketch,cplx", [("rademacher", False), ("rademacher", True), ("srht", False), ("srht", True)]
)
def test_optimized_maclaurin_unbiased_far_from_its_fitting_data(sketch, cplx):
    """The allocation is fitted on ``X`` (small norms); the estimate must stay unbiased for
    the truncated series, with the documented variances, at points unlike ``X``: norms 10x
    larger, a zero row, ``x = -y``. Sketches redrawn on the fixed allocation."""
    rng = np.random.default_rng(4)
    X = 0.3 * rng.standard_normal((40, 4))
    Z = np.array([[2.0, 0, 0, 0], [0, 0, -1.5, 0], [0, 0, 0, 0], [1.0, 1.0, 1.0, 1.0]])
    W = np.concatenate([Z[:1], -Z[1:2], 0.1 * Z[3:]])
    fm = OptimizedMaclaurin(
        12, kernel="softmax", p_max=5, sketch=sketch, complex=cplx, random_state=0
    ).fit(X)
    est = np.array([_complex_estimate(fm.redraw(s), Z, W) for s in range(3000)])
    E = fm.expected_kernel(Z, W)
    check_mc(est, E, fm.variance(Z, W), fm.complex_variance(Z, W), "OptimizedMaclaurin")


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel="polynomial", degree=3, coef0=0.0, gamma=0.7),
        dict(kernel="polynomial", degree=2, coef0=5.0),
        dict(kernel="softmax", max_degree=4, lengthscale=0.8),
        dict(kernel="gaussian", max_degree=3, lengthscale=1.3),
    ],
    ids=["poly-coef0-0", "poly-coef0-5", "softmax", "gaussian"],
)
def test_random_maclaurin_unbiased_on_hard_rows(kw, cplx):
    """Random Maclaurin over the draw of the degrees and the sketches (refits)."""
    Z = np.array([[1.2, 0, 0], [0, 0, -0.5], [0, 0, 0], [0.3, 0.4, 1.0]])
    W = np.concatenate([-Z[:2], 0.1 * Z[3:]])
    est = np.array(
        [
            _complex_estimate(RandomMaclaurin(6, complex=cplx, random_state=s, **kw).fit(Z), Z, W)
            for s in range(3000)
        ]
    )
    fm = RandomMaclaurin(6, complex=cplx, random_state=0, **kw).fit(Z)
    E = fm.expected_kernel(Z, W)
    check_mc(est, E, fm.variance(Z, W), fm.complex_variance(Z, W), "RandomMaclaurin")


# ====================================================================== backends
MAPS = [
    (GaussianSketch, dict(degree=3, coef0=0.5, gamma=0.7, complex=True)),
    (RademacherSketch, dict(degree=9, coef0=0.0, gamma=1.3)),
    (TensorSRHT, dict(degree=4, coef0=2.0, complex=True, real_output=True)),
    (TensorSketch, dict(degree=10, coef0=1.0, gamma=0.4)),
    (RandomMaclaurin, dict(kernel="softmax", lengthscale=1.7, complex=True)),
    (OptimizedMaclaurin, dict(kernel="polynomial", degree=5, coef0=1.0, sketch="srht")),
]


@pytest.mark.parametrize("cls,kw", MAPS, ids=lambda v: getattr(v, "__name__", ""))
def test_sparse_torch_and_dask_match_numpy_to_rounding(cls, kw):
    """CSR / CSC, float64 torch tensors and Dask arrays give NumPy's features, estimate and
    variance to rounding (rtol 1e-10: the same float64 operations, reordered)."""
    da = pytest.importorskip("dask.array", reason="dask not installed (the dask extra)")
    torch = pytest.importorskip("torch", reason="torch not installed (the torch extra)")

    X, Y = hard_rows(6)
    fm = cls(16, random_state=0, **kw).fit(X)
    T, K, V = fm.transform(X), fm.approx_kernel(X, Y), fm.variance(X, Y)

    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13 * np.abs(b).max())

    for fmt in (sp.csr_matrix, sp.csc_matrix):
        close(fm.transform(fmt(X)), T)
        close(fm.approx_kernel(fmt(X), fmt(Y)), K)
        close(fm.variance(fmt(X), fmt(Y)), V)
    tX, tY = torch.tensor(X), torch.tensor(Y)
    close(fm.transform(tX).numpy(), T)
    close(fm.approx_kernel(tX, tY).numpy(), K)
    close(fm.variance(tX, tY).numpy(), V)
    dX = da.from_array(X, chunks=4)
    close(fm.transform(dX).compute(), T)
    fd = cls(16, random_state=0, **kw).fit(dX)
    close(fd.transform(X), T)


@pytest.mark.parametrize("cls", [GaussianSketch, RademacherSketch])
@pytest.mark.parametrize("degree", [2, 4])
def test_float32_estimate_within_the_rounding_bound(cls, degree):
    """float32 input: each of the ``p`` projections ``w.x~`` is a sum of ``d~`` products,
    off by at most ``~d~ eps sum_j |w_j x~_j|`` (standard summation bound); the product of
    ``p`` of them and the sum over ``D`` features add ``~(p + D) eps`` relative. So
    ``|K32 - K64| <= (d~ + p + D) eps32 A`` with ``A = sum_l prod_i (|w_il|.|x~|)
    (|w_il|.|y~|) / D`` (the estimate with every cancellation removed)."""
    X, Y = hard_rows(6)
    X, Y = X / 2.0, Y / 2.0  # moderate norms
    D = 64
    fm = cls(D, degree=degree, coef0=1.0, random_state=0).fit(X)
    K32 = fm.approx_kernel(X.astype(np.float32), Y.astype(np.float32))
    assert K32.dtype == np.float32
    K64 = fm.approx_kernel(X, Y)
    W = np.abs(fm.weights_)  # (p, d~, D)
    Xa, Ya = (np.abs(np.hstack([A, np.ones((len(A), 1))])) for A in (X, Y))
    AX = np.prod(np.einsum("nj,pjl->pnl", Xa, W), axis=0)  # (n, D)
    AY = np.prod(np.einsum("nj,pjl->pnl", Ya, W), axis=0)
    bound = (7 + degree + D) * np.finfo(np.float32).eps * (AX @ AY.T) / D
    assert np.all(np.abs(K32 - K64) <= bound)


@pytest.mark.parametrize("cls", [RademacherSketch, GaussianSketch, TensorSRHT])
def test_docstrings_say_which_method_gives_the_papers_complex_variance(cls):
    """The paper's complex variances (eq. 19, 21, 33) are ``E|k_hat - k|^2``, which is
    :meth:`complex_variance`; :meth:`variance` is the real part's (smaller). The class
    docstrings cited both equations under "see :meth:`variance`"."""
    X = np.abs(np.random.default_rng(0).standard_normal((4, 5)))
    fm = cls(8, degree=2, complex=True, random_state=0).fit(X)
    v, vc = fm.variance(X), fm.complex_variance(X)
    off = ~np.eye(len(X), dtype=bool)  # k_hat(x, x) = |phi(x)|^2 is real: equal there
    assert np.all(v <= vc * (1 + 1e-12)) and np.all(v[off] < vc[off])
    doc = " ".join(cls.__doc__.split())
    assert "complex_variance" in doc, cls.__name__
    assert "variance of the real part" in doc or "real part's" in doc, cls.__name__


def test_optimized_maclaurin_srht_does_not_chase_rounding_beyond_d():
    """TensorSRHT of degree 1 is exact at ``D_1 = d`` (the padded dimension): the convex
    surrogate (eq. 72-73) is ``(V + (d - 1) C) / D`` there and beyond, with
    ``C = -V / (d - 1)``, i.e. exactly 0. Its rounding residue (1e-45 here) outweighed the
    true gains of degrees 2-4 (1e-60) on small-norm data, so the greedy gave degree 1
    13 features, where the exact variance (eq. 33, D not a multiple of d) is 1e-30 and at
    ``D_1 = 4`` it is 0. The class docstring promises ``D_1 <= d`` when other degrees are
    used."""
    X = 1e-8 * np.random.default_rng(0).standard_normal((10, 3))
    fm = OptimizedMaclaurin(
        16, kernel="polynomial", degree=4, coef0=1.0, sketch="srht", random_state=0
    ).fit(X)
    Dn, d = fm.n_features_per_degree_, fm.pair_sums_.d
    assert fm.degree_ == 1 or Dn[1] <= d, (Dn, d)
    for n in range(2, 6):
        assert fm.pair_sums_.degree_cost(1, d + n) == 0.0  # the surrogate, exactly 0
