"""The softmax-family maps (FAVOR+, FAVOR++, FAVOR#) and the hybrid maps read by a
demanding statistician: unbiasedness and analytic variances on hard inputs (anisotropic
data, large norms, ``y = +-x``, nearly collinear pairs, fewer points than dimensions,
queries far from the fitting data, clustered data with a singleton cluster, angles near 0
and pi), the optimality claims of the fitted maps, float32 against float64 and PyTorch
against NumPy.

Monte Carlo tolerances are z-scores: the standard error comes from the spread of the
draws themselves (or from the map's own analytic variance where that is what is tested),
with a bound of 4.5 (two-sided p ~ 7e-6 per entry). Rounding tolerances are stated
next to each assertion.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import (
    ADERF,
    GERF,
    SADERF,
    SDERF,
    AngularHybridRF,
    ClusteredHybridRF,
    GaussianHybridRF,
    HyperbolicRF,
    NormalizedGaussianHybridRF,
    PositiveRF,
    TrigRF,
)

Z_BOUND = 4.5


def _orthonormal_pair(d: int, seed: int = 0):
    q = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, 2)))[0]
    return q[:, 0], q[:, 1]


def _angle_pairs(r_x: float, r_y: float, thetas, d: int = 4):
    """Rows ``x_k`` (norm ``r_x``) and ``y_k`` (norm ``r_y``) at the angles ``thetas``."""
    u, v = _orthonormal_pair(d)
    thetas = np.asarray(thetas, dtype=np.float64)
    X = np.tile(r_x * u, (len(thetas), 1))
    Y = r_y * (np.cos(thetas)[:, None] * u + np.sin(thetas)[:, None] * v)
    return X, Y


# ====================================================================== float32 variances
#: angles where the variance is small but not zero: near the angular hybrid's exact
#: angles 0 and pi, and near y = -x (FAVOR+'s exact point)
_NEAR_EXACT = [1e-4, 5e-4, 2e-3, 0.5, np.pi - 2e-3, np.pi - 5e-4, np.pi - 1e-4]

_FLOAT32_CASES = [
    (AngularHybridRF, {"n_features": 4, "n_lambda": 2}),
    (AngularHybridRF, {"n_features": 4, "n_lambda": 2, "shared_projection": False}),
    (NormalizedGaussianHybridRF, {"n_features": 4, "n_lambda": 2}),
    (GaussianHybridRF, {"n_features": 4, "n_lambda": 2}),
    (PositiveRF, {"n_features": 8}),
    (HyperbolicRF, {"n_features": 8}),
    (TrigRF, {"n_features": 8}),
    (SDERF, {"n_features": 8}),
    (ClusteredHybridRF, {"n_features": 4, "n_clusters": 1}),
]


@pytest.mark.parametrize("r_y", [0.6, 0.45], ids=["equal-norms", "unequal-norms"])
@pytest.mark.parametrize(
    "cls,kw", _FLOAT32_CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(_FLOAT32_CASES)]
)
def test_float32_variance_is_the_float64_variance_of_the_same_inputs(cls, kw, r_y, backend):
    """float32 input: ``variance`` and ``log_relative_variance`` are the analytic values of
    the (float32-rounded) inputs. They read ``|x - y|^2``, ``|x + y|^2`` and the angle from
    the Gram matrix, which in float32 resolves them only to ~1e-7 |x|^2: the angular
    hybrid's variance was exactly 0 at angles up to ~1e-3 from 0 and pi (where the
    estimator is not exact: see the next test), the normalised Gaussian hybrid's off by
    100 % there, FAVOR+'s and the hyperbolic map's off by factors up to 270 near y = -x.
    The formulas now run in float64 and only the result is rounded to float32 (relative
    error ~6e-8; 1e-5 allows the float64 rounding of the terms, amplified at most ~100
    times by the cancellation in ``1 - e^{-|x-y|^2}`` at these angles)."""
    X, Y = _angle_pairs(0.6, r_y, _NEAR_EXACT)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    X64, Y64 = X32.astype(np.float64), Y32.astype(np.float64)  # the same points
    fm = cls(random_state=0, **kw).fit(X64, Y=Y64)
    ref_var = np.diag(fm.variance(X64, Y64))
    ref_log = np.diag(fm.log_relative_variance(X64, Y64))
    var = fm.variance(backend.asarray(X32), backend.asarray(Y32))
    log_rel = fm.log_relative_variance(backend.asarray(X32), backend.asarray(Y32))
    assert backend.dtype_name(var) == "float32" and backend.dtype_name(log_rel) == "float32"
    var, log_rel = np.diag(backend.to_numpy(var)), np.diag(backend.to_numpy(log_rel))
    assert np.all(ref_var > 0)  # none of these pairs is exact
    np.testing.assert_allclose(var, ref_var, rtol=1e-5)
    # log scale: absolute 1e-5 is the same relative accuracy
    np.testing.assert_allclose(log_rel, ref_log, rtol=0, atol=1e-5)


def test_float32_angular_variance_is_not_zero_where_draws_are_inexact():
    """At ``theta = 5e-4`` (equal norms) the angular hybrid is not exact: ``lambda_hat``
    is 0 unless one of the ``n`` sign projections separates ``x`` and ``y`` (probability
    ``theta/pi`` each), so with ``n = 64`` about one draw in a hundred mixes in
    ``SM^{++}``, whose error at ``theta ~ 0`` is large. The float32 variance was exactly 0
    there (the Gram matrix rounds the angle to 0); it must be the positive float64 value,
    and some of 400 draws must miss the kernel by more than their rounding (1e-9
    relative, float64)."""
    X, Y = _angle_pairs(0.6, 0.6, [5e-4])
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    X64, Y64 = X32.astype(np.float64), Y32.astype(np.float64)
    K = float(np.exp(X64[0] @ Y64[0]))
    fm = AngularHybridRF(4, 64, random_state=0).fit(X64, Y=Y64)
    v32 = float(fm.variance(X32, Y32)[0, 0])
    v64 = float(fm.variance(X64, Y64)[0, 0])
    assert v64 > 0
    np.testing.assert_allclose(v32, v64, rtol=1e-5)
    draws = np.array(
        [
            AngularHybridRF(4, 64, random_state=s).fit(X64, Y=Y64).approx_kernel(X64, Y64)[0, 0]
            for s in range(400)
        ]
    )
    assert np.sum(np.abs(draws / K - 1) > 1e-9) >= 1


# ====================================================================== optimality claims
def _anisotropic_sets(seed: int = 0, n: int = 40, d: int = 6):
    """Queries and keys whose coordinate scales run from 0.01 to 1 in opposite orders."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(0.1, 10, d) * 0.1
    return rng.standard_normal((n, d)) * scales, rng.standard_normal((n, d)) * scales[::-1]


def test_sderf_is_not_the_lowest_variance_positive_map_and_the_guide_says_so():
    """choosing.md recommended SDERF because its fit "gives the lowest variance of the
    positive family". Thm 4.3 says less: SDERF's fit minimises the FAVOR# objective (14),
    the mean log second moment over the pairs, *within the SDERF family*, so it is never
    worse than GERF or FAVOR+ on that objective; SDERF and ADERF are not ordered (the
    paper's Fig. 1). On queries and keys with opposite per-coordinate scales ADERF is
    lower on the objective and on the mean variance alike, by far (objective 0.12 against
    1.26; mean variance e^-4.8 against e^-1.6, 16 features)."""
    from pathlib import Path

    from kernelkit.features import ADERF

    X, Y = _anisotropic_sets()
    sd = SDERF(16, random_state=0).fit(X, Y=Y)
    ad = ADERF(16, random_state=0).fit(X, Y=Y)
    ge = GERF(16, random_state=0).fit(X, Y=Y)
    assert ad.log_objective(X, Y) < sd.log_objective(X, Y) - 1.0
    assert ad.variance(X, Y).mean() < 0.1 * sd.variance(X, Y).mean()
    assert sd.log_objective(X, Y) <= ge.log_objective(X, Y)  # what Thm 4.3 does give
    guide = Path(__file__).parents[2] / "docs" / "guide" / "choosing.md"
    row = next(line for line in guide.read_text().splitlines() if "`SDERF` (FAVOR#)" in line)
    assert "lowest variance" not in row
    assert "eq. 14" in row and "ADERF" in row


def test_mean_variance_is_not_what_the_fits_order():
    """The fits minimise the mean *log* second moment (14), not the mean variance: on
    these sets (d = 2, 12 queries, 15 keys: seed 48 of a search over 300 random sets)
    the fitted SDERF has a lower objective than the fitted GERF (1.389 against 1.392, as
    Thm 4.3 promises) but a 6 % higher mean variance. softmax.md's example must not
    present its ordering of mean variances as a property of the fits."""
    from pathlib import Path

    # a counterexample found by search, pinned: PCG64 directly, which the harness's
    # KERNELKIT_TEST_RNG_OFFSET does not reach (other sets need not order this way)
    rng = np.random.Generator(np.random.PCG64(48))
    d, n, m = int(rng.integers(2, 6)), int(rng.integers(2, 30)), int(rng.integers(2, 30))
    X = rng.standard_normal((n, d)) * rng.uniform(0.05, 1.5)
    Y = rng.standard_normal((m, d)) * rng.uniform(0.05, 1.5)
    sd = SDERF(16, random_state=0).fit(X, Y=Y)
    ge = GERF(16, random_state=0).fit(X, Y=Y)
    assert sd.log_objective(X, Y) < ge.log_objective(X, Y)
    assert sd.variance(X, Y).mean() > 1.02 * ge.variance(X, Y).mean()
    guide = " ".join(
        (Path(__file__).parents[2] / "docs" / "guide" / "softmax.md").read_text().split()
    )
    assert "fitted maps have lower variance than FAVOR+ on the same data" not in guide
    assert "the mean *log* second moment" in guide and "but not always" in guide


# ====================================================================== DERF maps, hard pairs
def _derf_hard_cases():
    """(fit X, fit Y, query rows, key rows) for every hard case, d = 6: one fixed set
    (PCG64 directly, which the harness's KERNELKIT_TEST_RNG_OFFSET does not reach), as
    the properties stated of it (informative pairs in every case, ADERF's e^170 on the
    far query) are measured on this set; the maps' own draws still vary with the offset."""
    rng = np.random.Generator(np.random.PCG64(5))
    d = 6
    scales = np.geomspace(0.1, 10, d) * 0.05  # column scales 0.005 ... 0.5
    Xa, Ya = rng.standard_normal((30, d)) * scales, rng.standard_normal((30, d)) * scales[::-1]
    u = rng.standard_normal(d)
    u *= 0.5 / np.linalg.norm(u)
    w = rng.standard_normal(d)
    w -= (w @ u) / (u @ u) * u
    w *= 1e-3 / np.linalg.norm(w)  # 0.8 u + w: angle 2.5e-3 from u
    Xs, Ys = 0.3 * rng.standard_normal((2, d)), 0.3 * rng.standard_normal((3, d))
    Xi, Yi = 0.2 * rng.standard_normal((30, d)), 0.2 * rng.standard_normal((30, d))
    return {
        "anisotropic": (Xa, Ya, Xa[:3], Ya[:3]),
        "x=y": (Xa, Ya, Xa[:3], Xa[:3]),
        "x=-y": (Xa, Ya, Xa[:3], -Xa[:3]),
        "collinear": (Xi, Yi, u[None], (0.8 * u + w)[None]),
        "n<d": (Xs, Ys, Xs, Ys),
        "far-query": (Xs, Ys, Xs + 0.25, Ys),
    }


def _derf_moment(fm, Xe, Ye, k):
    """``E[(f1 f2)^k]`` (n, m) of one feature of a fitted diagonal DERF, from its definition
    ``f1 f2 = prod_l (1-4a_l)^{1/2} exp(2 a_l w_l^2 + sqrt(1-4a_l) w_l z_l)
    e^{-(|x'|^2+|y'|^2)/2}``, ``z = x' + y'``, and
    ``E exp(c w^2 + b w) = (1-2c)^{-1/2} exp(b^2 / (2(1-2c)))``."""
    a = np.asarray(fm.A_, dtype=np.float64)
    Xp = Xe if fm.B_x_ is None else Xe @ fm.B_x_.T
    Yp = Ye if fm.B_y_ is None else Ye @ fm.B_y_.T
    z = Xp[:, None, :] + Yp[None, :, :]  # (n, m, d)
    c0 = np.sum(0.5 * k * np.log1p(-4 * a) - 0.5 * np.log1p(-4 * k * a))
    quad = np.sum(k * k * (1 - 4 * a) * z * z / (2 * (1 - 4 * k * a)), axis=-1)
    norms = (Xp * Xp).sum(1)[:, None] + (Yp * Yp).sum(1)[None, :]
    with np.errstate(over="ignore"):  # ADERF's far query: inf, as its variance
        return np.exp(c0 + quad - 0.5 * k * norms)


_DERF = [PositiveRF, GERF, SADERF, ADERF, SDERF]
_INFORMATIVE = 0.05  # relative SE of the sample variance below which it is compared


@pytest.mark.parametrize("case", list(_derf_hard_cases()))
@pytest.mark.parametrize("cls", _DERF, ids=lambda c: c.__name__)
def test_derf_maps_unbiased_and_variance_on_hard_pairs(cls, case):
    """The one-feature estimates ``M f1(w_m, x) f2(w_m, y)`` of 100 000 features are i.i.d.
    draws: their mean must be the kernel within 4.5 standard errors of the map's analytic
    variance (plus 1e-12 relative for rounding: exact pairs such as FAVOR+ at ``y = -x``
    have zero variance), and their sample variance the analytic variance within 4.5
    standard errors of the sample variance, ``sqrt((mu4 - var^2) / M)`` with the central
    fourth moment ``mu4`` from the exact moments ``E[(f1 f2)^k]``, k <= 4 (fitted
    ``a_l <= 0``, so all are finite). Pairs whose sample variance has a relative SE above
    5 % (heavy tails: an asymmetric map's key side fed queries, ADERF's ridge directions)
    are checked for the mean only; every case has informative pairs except ADERF's far
    query (next test)."""
    X, Y, Xe, Ye = _derf_hard_cases()[case]
    M = 100_000
    fm = cls(M, random_state=3).fit(X, Y=Y)
    g = (fm.transform(Xe) * M)[:, None, :] * fm.transform_y(Ye)[None, :, :]  # (n, m, M)
    K = np.exp(Xe @ Ye.T)
    V = fm.variance(Xe, Ye) * M  # one feature
    np.testing.assert_allclose(_derf_moment(fm, Xe, Ye, 1), K, rtol=1e-10)
    m2, m3, m4 = (_derf_moment(fm, Xe, Ye, k) for k in (2, 3, 4))
    np.testing.assert_allclose(V, m2 - K * K, rtol=1e-8, atol=1e-14 * K.max() ** 2)
    mean = g.mean(-1)
    assert np.all(np.abs(mean - K) <= Z_BOUND * np.sqrt(V / M) + 1e-12 * K), case
    mu4 = m4 - 4 * K * m3 + 6 * K * K * m2 - 3 * K**4
    with np.errstate(invalid="ignore", over="ignore"):
        se_var = np.sqrt(np.clip(mu4 - V * V, 0, None) / M)
        informative = (V > 1e-12 * K * K) & (se_var <= _INFORMATIVE * V)
    # exact pairs (FAVOR+ at y = -x): every draw is the kernel up to rounding (1e-16
    # relative per draw, so a sample variance of order 1e-32 K^2)
    exact = V == 0
    assert np.all(g.var(-1)[exact] <= 1e-24 * (K * K)[exact]), case
    if cls is ADERF and case == "far-query":
        assert not informative.any()  # the ridge directions: see the next test
        return
    assert informative.any(), case
    dev = np.abs(g.var(-1) - V)[informative]
    assert np.all(dev <= Z_BOUND * se_var[informative]), case


def test_ridge_directions_of_aderf_and_saderf_and_their_documentation():
    """ADERF fitted on 2 queries in d = 6 (the ridge of ``eps`` makes it valid and
    unbiased): a later query with a component outside the span of the fitting queries
    is scaled up along the ridge directions, and with the default ``eps = 1e-6`` its
    relative variance is about e^170 (the estimate of one draw is ~1e-37 where the kernel
    is ~1). SADERF, fitted on queries with an all-zero coordinate, does the same to a
    query that is non-zero there (e^59). SDERF needs no ridge and GERF no transform:
    both stay below e^-3 on the same pairs. A larger ``eps`` (1e-2) cures it at almost no
    cost on the fitting data (objective (14) 0.489 against 0.485). The docstrings must
    say so, as "valid and unbiased" alone suggests the fit is safe for any later input."""
    X, Y, Xe, Ye = _derf_hard_cases()["far-query"]
    # the size of one draw's estimate (~1e-37) is that of this draw of the features: a
    # golden value, pinned with PCG64 directly (the harness's seed offset does not reach it)
    ad = ADERF(64, random_state=np.random.Generator(np.random.PCG64(0))).fit(X, Y=Y)
    assert np.all(ad.log_relative_variance(Xe, Ye) > 100)
    assert np.all(ad.approx_kernel(Xe, Ye) < 1e-30 * np.exp(Xe @ Ye.T))
    for cls in (SDERF, GERF):
        assert np.all(cls(64, random_state=0).fit(X, Y=Y).log_relative_variance(Xe, Ye) < -1)
    wide = ADERF(64, random_state=0, eps=1e-2).fit(X, Y=Y)
    assert np.all(wide.log_relative_variance(Xe, Ye) < 0)
    assert wide.log_objective(X, Y) < ad.log_objective(X, Y) + 0.01

    rng = np.random.Generator(np.random.PCG64(0))  # the set the e^59 was measured on
    Xz, Yz = 0.3 * rng.standard_normal((40, 6)), 0.3 * rng.standard_normal((40, 6))
    Xz[:, 0] = 0.0
    Xq = Xz[:3].copy()
    Xq[:, 0] = 0.3
    sa = SADERF(64, random_state=0).fit(Xz, Y=Yz)
    assert np.all(sa.log_relative_variance(Xq, Yz[:3]) > 30)
    assert np.all(sa.log_relative_variance(Xz[:3], Yz[:3]) < 0)  # the fitting data: fine

    for cls in (ADERF, SADERF):
        doc = " ".join(cls.__doc__.split())
        assert "later" in doc and "larger ``eps``" in doc and "SDERF" in doc, cls


# ====================================================================== hybrids, hard pairs
def _hybrid_hard_pairs():
    """Pairs (rows of X with rows of Y), d = 4: equal norms 2e-3 from the exact angles 0
    and pi, unequal norms at the same angles, a right angle, a zero query, a mid angle."""
    u, v = _orthonormal_pair(4)

    def at(r_x, r_y, theta):
        return r_x * u, r_y * (np.cos(theta) * u + np.sin(theta) * v)

    pairs = [
        at(0.5, 0.5, 2e-3),
        at(0.5, 0.5, np.pi - 2e-3),
        at(0.3, 0.6, 2e-3),
        at(0.3, 0.6, np.pi - 2e-3),
        at(0.4, 0.7, np.pi / 2),
        (np.zeros(4), 0.6 * u),
        at(0.45, 0.45, 1.0),
    ]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


_HYBRIDS = [
    (AngularHybridRF, {}),
    (AngularHybridRF, {"shared_projection": False}),
    (GaussianHybridRF, {"lambda_features": "trig"}),
    (GaussianHybridRF, {}),
    (NormalizedGaussianHybridRF, {}),
    (NormalizedGaussianHybridRF, {"kernel": "gaussian", "shared_projection": False}),
]


@pytest.mark.parametrize(
    "cls,kw", _HYBRIDS, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(_HYBRIDS)]
)
def test_bipolar_hybrids_unbiased_and_mse_on_hard_pairs(cls, kw):
    """2000 independent draws (m = 4, n = 2) of the bipolar hybrids on the hard pairs:
    the mean error within 4.5 SE of the analytic variance (1e-12 relative for rounding),
    and away from the exact angles (pairs 3-7) the mean squared error within 4.5 SE of
    ``variance``, the SE from the spread of the squared errors. (Next to the exact angles
    the error is a rare event, ``lambda_hat != 0`` in a fraction ``~theta`` of the draws,
    and the sample spread says nothing; the antithetic positive ``lambda_hat`` of the
    Gaussian hybrid is heavy-tailed, so only its mean is compared.)"""
    X, Y = _hybrid_hard_pairs()
    if kw.get("kernel") == "gaussian":
        K = np.exp(-0.5 * np.sum((X - Y) ** 2, axis=1))
    else:
        K = np.exp(np.sum(X * Y, axis=1))
    S = 2000
    V = np.diag(cls(4, 2, random_state=0, **kw).fit(X, Y=Y).variance(X, Y))
    draws = np.array(
        [np.diag(cls(4, 2, random_state=s, **kw).fit(X, Y=Y).approx_kernel(X, Y)) for s in range(S)]
    )
    err = draws - K
    assert np.all(np.abs(err.mean(0)) <= Z_BOUND * np.sqrt(V / S) + 1e-12 * K)
    if cls is GaussianHybridRF and kw.get("lambda_features", "positive") == "positive":
        return
    sq = err[:, 2:] ** 2
    se = sq.std(0) / np.sqrt(S)
    assert np.all(np.abs(sq.mean(0) - V[2:]) <= Z_BOUND * se)


def test_clustered_hybrid_with_a_singleton_cluster_and_a_zero_centre_coordinate():
    """k-means on 20 points and one outlier gives a singleton query cluster whose centre
    is the outlier, with a coordinate exactly 0: ``A^{ij}`` has the clipped entry
    ``1/eps = 1000`` there. Over 2000 redraws (m = 4) the zero-one and Gaussian mixtures
    stay unbiased (4.5 SE of the analytic variance where it is finite) for queries of
    either cluster, the zero query and a query far from the data; the zero-one mixture's
    mean squared error matches ``variance`` within 4.5 SE of the squared errors on the
    pairs of the fitted clusters. The Gaussian mixture gives every pair all ``n_q n_k``
    estimators, so the entry 1000 makes its variance inf (beyond float64) for a query
    that is not at 0 in that coordinate: it must be reported as inf, not as a number."""
    rng = np.random.default_rng(0)
    d = 3
    X = np.concatenate([[0.5, -0.4, 0.3] + 0.05 * rng.standard_normal((20, d)), [[-0.6, 0, 0.2]]])
    Y = np.concatenate(
        [
            [-0.3, 0.5, -0.2] + 0.05 * rng.standard_normal((20, d)),
            [0.4, 0.3, 0.0] + 0.05 * rng.standard_normal((5, d)),
        ]
    )
    Xe = np.concatenate([X[[0, 20]], [[0.0, 0.0, 0.0]], [[1.0, 1.0, -1.0]]])
    Ye = Y[[0, 22, 3, 21]]
    K = np.exp(Xe @ Ye.T)
    S = 2000
    for mixture in ("zero_one", "gaussian"):
        kw = {"mixture": mixture, "n_lambda": 2} if mixture == "gaussian" else {}
        fm = ClusteredHybridRF(4, n_clusters=2, random_state=0, **kw).fit(X, Y=Y)
        assert fm.A_.max() == pytest.approx(1000.0)  # the singleton's zero coordinate
        np.testing.assert_array_equal(fm.cluster_pairs(X[[20]], Y[:1])[0], [0])  # singleton
        V = fm.variance(Xe, Ye)
        draws = np.array([fm.redraw(s).approx_kernel(Xe, Ye) for s in range(S)])
        assert np.all(np.isfinite(draws))
        err = draws - K
        finite = np.isfinite(V)
        assert np.all(np.abs(err.mean(0))[finite] <= Z_BOUND * np.sqrt(V[finite] / S))
        if mixture == "gaussian":
            assert not finite[0].any() and finite[2].all()  # inf, not NaN; the zero query
            assert not np.isnan(V).any()
            continue
        assert finite.all()
        sq = err[:, :3] ** 2  # the fitted queries and the zero query
        se = sq.std(0) / np.sqrt(S)
        assert np.all(np.abs(sq.mean(0) - V[:3]) <= Z_BOUND * se)


# ====================================================================== fitted optima, hard sets
def _hard_fit_sets():
    rng = np.random.default_rng(11)
    d = 6
    scales = np.geomspace(0.1, 10, d) * 0.1

    def normal(n, scale):
        return rng.standard_normal((n, d)) * scale

    zero = normal(40, 0.4)
    zero[:, 0] = 0.0
    u = rng.standard_normal(d) * 0.4
    return {
        "anisotropic": (normal(40, scales), normal(40, scales[::-1])),
        "n<d": (normal(3, 0.5), normal(2, 0.5)),
        "n<d-anisotropic": (normal(3, scales), normal(4, scales)),
        "zero-column": (zero, normal(25, 0.4)),
        "large-norms": (normal(40, 1.5), normal(40, 1.5)),
        "collinear": (np.outer(rng.uniform(0.5, 1, 30), u), np.outer(rng.uniform(0.5, 1, 20), u)),
    }


@pytest.mark.parametrize("case", list(_hard_fit_sets()))
def test_fitted_objectives_are_ordered_on_hard_sets(case):
    """The nested families give ordered fitted optima of (14): FAVOR+ >= GERF >= SADERF >=
    ADERF and GERF >= SDERF, all above the zero-variance bound ``2 mean(x).mean(y)``
    (erratum e), also where the fits need their ridge (fewer points than dimensions, a
    zero column, exactly collinear sets) and for norms ~3.7. Tolerance: rounding of the
    O((n + m) d^2) objective, 1e-9 of its size."""
    X, Y = _hard_fit_sets()[case]
    obj = {
        cls.__name__: cls(8, random_state=0).fit(X, Y=Y).log_objective(X, Y)
        for cls in (PositiveRF, GERF, SADERF, ADERF, SDERF)
    }
    tol = 1e-9 * (1 + max(abs(v) for v in obj.values()))
    for big, small in [
        ("PositiveRF", "GERF"),
        ("GERF", "SADERF"),
        ("SADERF", "ADERF"),
        ("GERF", "SDERF"),
    ]:
        assert obj[small] <= obj[big] + tol, (case, big, small, obj)
    bound = 2 * X.mean(0) @ Y.mean(0)
    assert min(obj.values()) >= bound - tol


def test_saderf_means_not_sums_for_sets_of_different_sizes():
    """Eq. 20 prints ``psi_l = (sum_j y_jl^2 / sum_i x_il^2)^{1/4}``; the library uses means
    (its docstring says so). For 10 queries and 40 keys the printed sums give
    ``psi * (40/10)^{1/4}``, and the objective (14) of that ``psi`` (with its own optimal
    ``A``) is higher: the GERF statistic of ``(psi x, y / psi)`` is
    ``sum_l psi_l^2 mean_i x_il^2 + mean_j y_jl^2 / psi_l^2``, minimised exactly by the
    means' ``psi``. Moving one entry of the fitted ``psi`` by 1 % either way raises it too."""
    from kernelkit.features import a_star

    rng = np.random.default_rng(2)
    d = 5
    X = 0.4 * rng.standard_normal((10, d)) * np.linspace(0.3, 1.5, d)
    Y = 0.4 * rng.standard_normal((40, d)) * np.linspace(1.5, 0.3, d)
    sa = SADERF(8, random_state=0, eps=0.0).fit(X, Y=Y)
    best = sa.log_objective(X, Y)

    def objective(psi):
        Xp, Yp = X * psi, Y / psi
        phi = ((Xp**2).sum(1).mean() + (Yp**2).sum(1).mean() + 2 * X.mean(0) @ Y.mean(0)) / d
        sa.B_x_, sa.B_y_, sa.A_ = np.diag(psi), np.diag(1 / psi), np.full(d, a_star(phi))
        return sa.log_objective(X, Y)

    psi = sa.psi_.copy()
    np.testing.assert_allclose(objective(psi), best, rtol=1e-12)
    assert objective(psi * (40 / 10) ** 0.25) > best + 1e-3
    for ell in range(d):  # one coordinate at a time
        for f in (0.99, 1.01):
            moved = psi.copy()
            moved[ell] *= f
            assert objective(moved) > best, (ell, f)


def test_aderf_without_ridge_on_singular_moments_is_refused_not_biased():
    """``eps = 0`` is a valid parameter, but Thm 4.2 needs nonsingular second moments.
    With 3 queries in d = 6 and no ridge the fitted ``B~1``, ``B~2`` had entries of 1e144
    and ``B~1^T B~2`` missed the identity by 1e137, so ``x'.y' != x.y``: a biased map whose
    estimates were all 0 and whose ``log_relative_variance`` was 1e258, without a word.
    The fit must refuse it, naming ``eps``; a tiny ridge (1e-12) is enough for an
    unbiased map (z-score of the mean of 200 000 features against the analytic
    variance)."""
    rng = np.random.default_rng(0)
    X, Y = 0.4 * rng.standard_normal((3, 6)), 0.4 * rng.standard_normal((2, 6))
    with pytest.raises(ValueError, match="eps"):
        ADERF(16, random_state=0, eps=0.0).fit(X, Y=Y)
    M = 200_000
    fm = ADERF(M, random_state=0, eps=1e-12).fit(X, Y=Y)
    # the constraint of Thm 4.2 to rounding (entries of B~2 up to ~600: 1e-9)
    np.testing.assert_allclose(fm.B_x_.T @ fm.B_y_, np.eye(6), atol=1e-9)
    K = np.exp(X @ Y.T)
    z = (fm.approx_kernel(X, Y) - K) / np.sqrt(fm.variance(X, Y))
    assert np.all(np.abs(z) < Z_BOUND)
    # a well-conditioned fit with eps = 0 stays allowed
    Xf, Yf = 0.4 * rng.standard_normal((40, 6)), 0.4 * rng.standard_normal((40, 6))
    ADERF(16, random_state=0, eps=0.0).fit(Xf, Y=Yf)


@pytest.mark.parametrize(
    "cls", [AngularHybridRF, NormalizedGaussianHybridRF, GaussianHybridRF], ids=lambda c: c.__name__
)
def test_float32_exact_lambda_near_the_exact_angles(cls, backend):
    """``exact_lambda`` (``E lambda_hat``: ``theta / pi`` for the angular hybrid,
    ``(1 - e^{-sigma^2 |x-y|^2 / 2}) / rho`` for the normalised one) of float32 input is
    the float64 value of the same inputs: in float32 the Gram-based angle of a pair
    5e-4 rad apart was 0 (the angular coefficient 0 instead of 1.6e-4, the normalised one
    off by 100 %). Rounding: the result's float32 cast, 6e-8, amplified at most ~100
    times by ``1 - cos`` at these angles (1e-5)."""
    X, Y = _angle_pairs(0.6, 0.6, [1e-4, 5e-4, 2e-3, 0.7, np.pi - 5e-4])
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    X64, Y64 = X32.astype(np.float64), Y32.astype(np.float64)
    fm = cls(4, 2, random_state=0).fit(X64, Y=Y64)
    ref = np.diag(fm.exact_lambda(X64, Y64))
    lam = fm.exact_lambda(backend.asarray(X32), backend.asarray(Y32))
    assert backend.dtype_name(lam) == "float32"
    np.testing.assert_allclose(np.diag(backend.to_numpy(lam)), ref, rtol=1e-5)


def test_normalized_gaussian_radius_is_in_the_units_of_x():
    """``radius`` is divided by ``lengthscale`` like the inputs (``radius_`` is the scaled
    value), while the default is the root-mean-square norm of the *scaled* rows: with
    ``lengthscale = 2`` a user reading "r" as the scaled radius of App. F would pass half
    of what is meant, and ``rho`` (hence ``lambda`` and its endpoints 0 and 1) would be
    wrong. The docstring must say which units ``radius`` is in. With the radius in the
    units of X, ``lambda(pi) = 1`` for inputs of that norm."""
    X, Y = _angle_pairs(1.4, 1.4, [np.pi])
    fm = NormalizedGaussianHybridRF(4, 2, lengthscale=2.0, radius=1.4, random_state=0)
    fm.fit(X, Y=Y)
    assert fm.radius_ == pytest.approx(0.7)
    np.testing.assert_allclose(fm.exact_lambda(X, Y), [[1.0]], rtol=1e-12)
    doc = " ".join(NormalizedGaussianHybridRF.__doc__.split())
    assert "in the units of ``X``" in doc


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("r", [3.0, 5.0, 8.0])
def test_gaussian_hybrid_with_trig_lambda_is_exact_at_y_equals_minus_x(r, kernel, backend):
    """The guide's table: ``GaussianHybridRF`` with trig-estimated ``lambda`` has zero
    variance at ``x = -y``, where ``lambda_hat = mean_i cos(tau_i.(x + y)/c) = 1`` drops
    the trig estimator and ``SM^{++}`` is exact; ``variance`` says 0. The estimate formed
    ``lambda_hat`` as ``u(x).v(y) = mean_i (sin^2 + cos^2)``, 1 only to rounding
    (1e-16), and that rounding times the trig estimate, ``~e^{|x|^2}`` against a kernel of
    ``e^{-|x|^2}``, was the whole answer at ``|x| = 8``: off by 1e38 relative in float64.
    ``approx_kernel`` must be exact there to the rounding of the kernel itself (float64:
    1e-10; float32: ``|x|^2`` times its eps in the exponent, 1e-4 at ``|x|^2 = 64``)."""
    X, _ = _angle_pairs(r, r, [0.0])
    Y = -X
    fm = GaussianHybridRF(8, 4, kernel=kernel, lambda_features="trig", random_state=0)
    fm.fit(X, Y=Y)
    K = fm.exact_kernel(X, Y)
    assert fm.variance(X, Y)[0, 0] == 0.0
    for dtype, rtol in (("float64", 1e-10), ("float32", 1e-4)):
        k = backend.to_numpy(fm.approx_kernel(backend.asarray(X, dtype), backend.asarray(Y, dtype)))
        if K[0, 0] < np.finfo(dtype).tiny:  # e^{-128} (Gaussian kernel, |x| = 8): float32 has 0
            assert abs(k[0, 0]) <= np.finfo(dtype).tiny, dtype
        else:
            np.testing.assert_allclose(k, K, rtol=rtol, err_msg=dtype)
