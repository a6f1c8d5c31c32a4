"""Second new-user sweep of the softmax / Gaussian maps and random Fourier features: values
on data nobody had tried (anisotropic, shifted, correlated, X and Y from different
distributions, n < d, d = 1, d = 200, degenerate moments), every sampler, float32 at large
norms, NumPy against torch for every method, and ``RandomFeatures(method="auto")``.

Unbiasedness and variances are checked by Monte Carlo against ``exact_kernel`` and
``variance``: over the single-projection products of one large fit for i.i.d. projections
(z-scores with the exact fourth moment, ``favor_helpers.sample_variance_se``), over seeds
for the structured samplers. The regression tests of the fixed defects say so.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from favor_helpers import (
    ALL_MAPS,
    Z_BOUND,
    mc_variance_z,
    sample_variance_se,
    single_products,
    textbook_a_star,
)

from kernelkit.estimators import RandomFeatures
from kernelkit.estimators._methods import auto_candidates, make_feature_map
from kernelkit.features import (
    GERF,
    SADERF,
    SDERF,
    HyperbolicRF,
    PositiveRF,
    RandomFourierFeatures,
    TrigRF,
)
from kernelkit.features._base import combine_scaled

EPS32 = float(np.finfo(np.float32).eps)
MAPS_AND_RFF = [*ALL_MAPS, RandomFourierFeatures]


def _name(cls):
    return cls.__name__


def _case(name, rng=None):
    """``(X, Y)`` of the data set ``name`` (``Y`` None: the map is fitted on X alone),
    drawn from ``rng`` (default ``np.random.default_rng(1)``)."""
    rng = np.random.default_rng(1) if rng is None else rng
    d = 4
    if name == "anisotropic":  # one column 10x the others
        X, Y = 0.08 * rng.standard_normal((5, d)), 0.08 * rng.standard_normal((4, d))
        X[:, 0] *= 10
        Y[:, 0] *= 10
        return X, Y
    if name == "far_mean":
        return 0.1 * rng.standard_normal((5, d)) + 0.4, 0.1 * rng.standard_normal((4, d)) + 0.4
    if name == "correlated":
        C = np.linalg.cholesky(0.9 * np.ones((d, d)) + 0.1 * np.eye(d))
        return 0.3 * rng.standard_normal((5, d)) @ C.T, 0.3 * rng.standard_normal((4, d)) @ C.T
    if name == "different_distributions":  # and n != m
        return 0.05 * rng.standard_normal((5, d)), 0.5 * rng.standard_normal((3, d)) + 0.2
    if name == "n_below_d":
        return 0.15 * rng.standard_normal((3, 12)), 0.15 * rng.standard_normal((2, 12))
    if name == "d1":
        return 0.5 * rng.standard_normal((5, 1)), 0.7 * rng.standard_normal((4, 1))
    if name == "d200":
        return 0.04 * rng.standard_normal((4, 200)), 0.04 * rng.standard_normal((3, 200))
    if name == "query_key_scales":  # |x| ~ 0.01, |y| ~ 1
        return 0.01 * rng.standard_normal((5, d)), 0.6 * rng.standard_normal((4, d))
    if name == "all_rows_equal":
        Z = np.tile(0.3 * rng.standard_normal((1, d)), (4, 1))
        return Z, Z.copy()
    if name == "zero_column":
        Z = 0.3 * rng.standard_normal((5, d))
        Z[:, 2] = 0.0
        return Z, None
    if name == "rank_one":
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        return np.outer(0.4 * rng.standard_normal(5), u), np.outer(0.4 * rng.standard_normal(4), u)
    raise AssertionError(name)


CASES = [
    "anisotropic",
    "far_mean",
    "correlated",
    "different_distributions",
    "n_below_d",
    "d1",
    "d200",
    "query_key_scales",
    "all_rows_equal",
    "zero_column",
    "rank_one",
]


# ---------------------------------------------------------------------- i.i.d. projections
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_unbiased_and_variance_on_unseen_data(cls, case):
    """Mean and variance of the single-projection products f1(w, x) f2(w, y) of one fit
    with 10^5 i.i.d. projections (the fitted parameters depend on the data only) against
    ``exact_kernel`` and ``n_features * variance``.

    The mean's z-score uses the analytic variance. The sample variance is compared only
    where the Monte Carlo has the power to see it: its z-score uses the exact standard
    error of the sample variance (``favor_helpers.sample_variance_se``, from the products'
    exact fourth moment), and only pairs whose exact relative SE is at most 0.05 are
    compared, so that a variance off by a factor 1.5 is >= 10 SE off. The positive maps'
    products are log-normal-like, with fourth moments ~ exp(6 sigma^2): the sample fourth
    moment (used before) was itself heavy-tailed, made some draws' z-scores too large
    (HyperbolicRF on far_mean: z = -5.0) and left pairs of relative SE 0.34 in the check.
    TrigRF (bounded products, no exact moments there) keeps the sample fourth moment on
    the pairs with ``Var / K^2 <= 8``. Cases without such pairs check the mean only."""
    X, Y = _case(case)
    Yv = X if Y is None else Y
    for kernel in ("softmax", "gaussian"):
        fm = cls(n_features=100_000, kernel=kernel, random_state=3).fit(X, Y=Y)
        g = single_products(fm, X, Yv)  # (n, m, M)
        M = g.shape[-1]
        K, V1 = fm.exact_kernel(X, Yv), fm.variance(X, Yv) * M  # one product's variance
        z_mean = (g.mean(-1) - K) / np.sqrt(V1 / M + (1e-12 * K) ** 2)
        assert np.abs(z_mean).max() < Z_BOUND, (kernel, z_mean)
        se = sample_variance_se(fm, X, Yv, M)
        if se is None:
            light = V1 <= 8.0 * K * K
            if not light.any():
                continue
            z_var, rel_se = mc_variance_z(g[light], V1[light])
            assert rel_se.max() < 0.2, (kernel, rel_se.max())  # power: 2x error: |z| ~ 5
        else:
            light = se <= 0.05 * V1
            if not light.any():
                continue
            c = g[light] - g[light].mean(-1, keepdims=True)
            z_var = ((c * c).sum(-1) / (M - 1) - V1[light]) / se[light]
        assert np.abs(z_var).max() < Z_BOUND, (kernel, z_var)


@pytest.mark.parametrize("cls", MAPS_AND_RFF, ids=_name)
def test_lengthscale_is_the_map_of_rescaled_inputs(cls):
    """Every value of a map with lengthscale ``l`` (fitted parameters included) is that of
    the unit-lengthscale map on ``X / l``, ``Y / l``: the kernels are ``K(x / l, y / l)``
    and the estimator is the same one. Exact up to the rounding of the division."""
    X, Y = _case("different_distributions")
    ell = 2.5
    kernels = ["gaussian"] if cls is RandomFourierFeatures else ["softmax", "gaussian"]
    for kernel in kernels:
        kw = {} if cls is RandomFourierFeatures else {"kernel": kernel}
        a = cls(16, lengthscale=ell, random_state=0, **kw).fit(X, Y=Y)
        b = cls(16, random_state=0, **kw).fit(X / ell, Y=Y / ell)
        np.testing.assert_allclose(a.transform(X), b.transform(X / ell), rtol=1e-10, atol=1e-14)
        for method in ("approx_kernel", "exact_kernel", "variance", "log_relative_variance"):
            np.testing.assert_allclose(
                getattr(a, method)(X, Y),
                getattr(b, method)(X / ell, Y / ell),
                rtol=1e-10,
                atol=1e-14,
                err_msg=f"{kernel} {method}",
            )


def test_huge_n_tiny_d_fits_equal_the_closed_forms():
    """n = 600 000 rows in d = 1 (the threaded, blocked moments) with X and Y of different
    means and spreads: in one dimension GERF's and SDERF's A is A*(phi) with phi =
    E x^2 + E y^2 + 2 E x E y (Lemma A.1, textbook root), and SADERF's psi =
    (E y^2 / E x^2)^(1/4) gives phi = 2 sqrt(E x^2 E y^2) + 2 E x E y."""
    rng = np.random.default_rng(0)
    X = 0.5 * rng.standard_normal((600_000, 1)) + 0.3
    Y = 0.7 * rng.standard_normal((500_001, 1)) - 0.1
    mx, my = X.mean(), Y.mean()
    sx, sy = (X * X).mean(), (Y * Y).mean()
    a_gerf = textbook_a_star(sx + sy + 2 * mx * my)
    np.testing.assert_allclose(GERF(8).fit(X, Y=Y).A_, [a_gerf], rtol=1e-12)
    np.testing.assert_allclose(SDERF(8).fit(X, Y=Y).A_, [a_gerf], rtol=1e-12)
    fm = SADERF(8, eps=0.0).fit(X, Y=Y)
    np.testing.assert_allclose(fm.psi_, [(sy / sx) ** 0.25], rtol=1e-12)
    a_saderf = textbook_a_star(2 * np.sqrt(sx * sy) + 2 * mx * my)
    np.testing.assert_allclose(fm.A_, [a_saderf], rtol=1e-12)


# ---------------------------------------------------------------------- samplers
def _over_seeds(cls, sampler, X, Y, n_seeds, n_features=8):
    """``(K, V, estimates (n_seeds, n, m))`` of fits with seeds 0 .. n_seeds - 1."""
    Yv = X if Y is None else Y
    kw = {} if cls is RandomFourierFeatures else {"kernel": "gaussian"}
    est = []
    for s in range(n_seeds):
        fm = cls(n_features=n_features, sampler=sampler, random_state=s, **kw).fit(X, Y=Y)
        est.append(fm.approx_kernel(X, Yv))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        V = fm.variance(X, Yv)
    return fm.exact_kernel(X, Yv), V, np.asarray(est)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["orthogonal", "halton"])
@pytest.mark.parametrize("case", ["anisotropic", "far_mean", "correlated", "zero_column"])
@pytest.mark.parametrize("cls", MAPS_AND_RFF, ids=_name)
def test_exact_samplers_unbiased_and_variance_is_an_upper_bound(cls, case, sampler):
    """Block-orthogonal and randomised-Halton rows are exactly N(0, I) each: the estimate
    is unbiased, ``variance`` (the i.i.d. value) bounds its mean squared error (one-sided
    z-score over 600 seeds), and no warning is raised."""
    X, Y = _case(case)
    n_seeds = 600
    K, V, est = _over_seeds(cls, sampler, X, Y, n_seeds)
    # the estimates' standard error is at most sqrt(V / n_seeds) if V bounds the variance
    z_mean = (est.mean(0) - K) / np.sqrt(V / n_seeds + (1e-12 * np.abs(K)) ** 2)
    assert np.abs(z_mean).max() < Z_BOUND, z_mean
    sq = (est - K) ** 2
    # exact pairs (V = 0: x = y for random Fourier features) err by rounding only
    exact = V <= (64 * np.finfo(np.float64).eps * K) ** 2
    assert np.all(sq.mean(0)[exact] <= (64 * np.finfo(np.float64).eps * K[exact]) ** 2)
    se = sq.std(0, ddof=1)[~exact] / np.sqrt(n_seeds)
    exceed = (sq.mean(0)[~exact] - V[~exact]) / se
    assert exceed.max() < Z_BOUND, exceed
    fm = cls(n_features=8, sampler=sampler, random_state=0).fit(X, Y=Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fm.variance(X, Y)


@pytest.mark.parametrize("sampler", ["sorf", "hadamard"])
@pytest.mark.parametrize("cls", MAPS_AND_RFF, ids=_name)
def test_biased_samplers_warn_that_the_variance_is_the_iid_value(cls, sampler):
    """SORF and ORF-Had rows have discrete directions: the estimate is biased and its error
    is not bounded by the i.i.d. variance
    (``test_biased_samplers_error_exceeds_the_iid_variance``). ``variance``,
    ``complex_variance`` and ``log_relative_variance`` say so instead of returning the
    number silently."""
    X, Y = _case("correlated")
    fm = cls(n_features=8, sampler=sampler, random_state=0).fit(X, Y=Y)
    for method in ("variance", "complex_variance", "log_relative_variance"):
        with pytest.warns(UserWarning, match=f"{sampler}.*value for i.i.d. projections"):
            getattr(fm, method)(X, Y)


def test_auto_with_a_biased_sampler_does_not_repeat_the_warning():
    """``RandomFeatures(method="auto")`` compares the i.i.d. relative variances by design
    (its docstring says so): no warning per candidate."""
    X, _ = _case("correlated")
    rf = RandomFeatures(
        method="auto", kernel="gaussian", n_components=16, sampler="sorf", random_state=0
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*value for i.i.d. projections")
        rf.fit(X)
    assert rf.variance_estimates_[rf.method_] == min(rf.variance_estimates_.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cls", "sampler"),
    [(RandomFourierFeatures, "sorf"), (RandomFourierFeatures, "hadamard"), (TrigRF, "sorf")],
)
def test_biased_samplers_error_exceeds_the_iid_variance(cls, sampler):
    """Why they warn: on anisotropic data in d = 4 the mean squared error over 600 seeds
    exceeds the i.i.d. variance by many standard errors, and severalfold (7.3x, 3.2x and
    4.9x over 2000 seeds). Bounded features: the sample moments are reliable.

    How far the structured rows' bias exceeds the variance is a property of the data set,
    not a tolerance: on other draws of it (``KERNELKIT_TEST_RNG_OFFSET=3``) the excess is
    1.2x and 3.8 SE. The data are this golden set, drawn from PCG64 directly (the same
    values as before), which the offset does not reach; the seeds of the fits still move."""
    X, Y = _case("anisotropic", rng=np.random.Generator(np.random.PCG64(1)))
    n_seeds = 600
    K, V, est = _over_seeds(cls, sampler, X, Y, n_seeds)
    sq = (est - K) ** 2
    exceed = (sq.mean(0) - V) / (sq.std(0, ddof=1) / np.sqrt(n_seeds))
    assert exceed.max() > 2 * Z_BOUND
    assert np.max(sq.mean(0) / V) > 2.0


# ---------------------------------------------------------------------- float32
def test_combine_scaled_keeps_subnormal_products():
    """Regression: ``approx_kernel`` beyond exp's range (large norms) formed
    ``log(max(|dot|, tiny))``, so a subnormal product of the two row-normalised bases was
    raised to ``tiny``: the estimate came out up to 2^23 (float32) or 2^52 (float64) times
    too large. Exact reference: the product formed in float64 / in log space."""
    for dtype in (np.float32, np.float64):
        fi = np.finfo(dtype)
        dot = np.array([[1000 * fi.smallest_subnormal, fi.tiny / 8, -fi.tiny / 8, 0.0]], dtype)
        scale = np.full(dot.shape, np.log(fi.max) - 5.0, dtype=dtype)  # past exp's range
        out = combine_scaled(np, dot, scale)
        assert out.dtype == dtype
        dot64 = dot.astype(np.float64)
        ref = np.sign(dot64) * np.exp(np.log(np.where(dot64 != 0, np.abs(dot64), 1.0)) + scale)
        ref[0, 3] = 0.0
        # the log and exp of the dtype: a few ulps of the result per unit of |log|
        tol = 4 * float(fi.eps) * (1.0 + np.abs(np.log(np.abs(ref) + 1e-300)))
        np.testing.assert_allclose(out, ref, rtol=float(tol.max()), atol=0)


@pytest.mark.parametrize("cls", [GERF, SADERF], ids=_name)
def test_float32_approx_kernel_at_large_norms_is_not_inflated(cls):
    """End to end (the case that found the defect above): softmax kernel, |x| ~ 10,
    float32 input. ``approx_kernel`` sums ``M`` positive products of row-normalised bases
    times ``exp(s_i + s_j)``; against the float64 estimate of the same (rounded) inputs it
    errs by the relative rounding of the log-features, plus half a subnormal ulp (2^-150)
    per product where the products leave the normal range. The old code returned up to
    1.2e7 times the estimate."""
    rng = np.random.default_rng(0)
    X = (10 * rng.standard_normal((20, 8)) / np.sqrt(8)).astype(np.float32)
    Y = (10 * rng.standard_normal((20, 8)) / np.sqrt(8)).astype(np.float32)
    fm = cls(1000, random_state=0).fit(X, Y=Y)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    ref = fm.approx_kernel(X64, Y64)
    est = fm.approx_kernel(X, Y)
    assert est.dtype == np.float32
    # |error of a log-feature| <= a few ulps of its largest magnitude, on both sides
    big = np.abs(fm.log_transform(X64)).max() + np.abs(fm.log_transform_y(Y64)).max()
    rtol = 8 * EPS32 * big
    _, sx, _, sy = fm._scaled_pair(X, Y, np)  # the row scales s_i, s_j (n,), (m,)
    subnormal = fm.n_features * 2.0**-150 * np.exp(sx[:, None] + sy[None, :].astype(np.float64))
    inside = ref < np.finfo(np.float32).max / 2  # else inf is the float32 answer
    assert inside.sum() > 300
    err = np.abs(est - ref)[inside]
    bound = (rtol * ref + subnormal)[inside]
    assert np.all(err <= bound), np.max(err / bound)


@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_float32_variance_is_finite_where_representable(cls):
    """Regression: the variance of the FAVOR# maps was ``exp(log m2) (1 - K^2 / m2) / M``,
    so float32 input gave inf where the second moment m2 passes 3.4e38 although the
    variance m2 (1 - K^2 / m2) / M does not (|x| ~ 9: 5 to 9 pairs of 400 per map), with
    an overflow warning. Reference: the float64 variance of the same rounded inputs."""
    rng = np.random.default_rng(0)
    X = (9 * rng.standard_normal((20, 8)) / np.sqrt(8)).astype(np.float32)
    Y = (9 * rng.standard_normal((20, 8)) / np.sqrt(8)).astype(np.float32)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    for kernel in ("softmax", "gaussian"):
        fm = cls(1000, kernel=kernel, random_state=0).fit(X, Y=Y)
        ref = fm.variance(X64, Y64)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warning either
            v = fm.variance(X, Y)
        assert v.dtype == np.float32
        f32 = np.finfo(np.float32)
        inside = (ref < float(f32.max) / 2) & (ref > float(f32.tiny))
        assert np.all(np.isinf(v[ref > 2.0 * float(f32.max)]))
        # log m2 and 2 log K: float32 sums of terms up to 4 (|x|^2 + |y|^2) in size
        sq = (X64 * X64).sum(1)[:, None] + (Y64 * Y64).sum(1)[None, :]
        rtol = 32 * EPS32 * float(sq.max())
        np.testing.assert_allclose(v[inside], ref[inside], rtol=rtol)


@pytest.mark.parametrize("cls", [TrigRF, PositiveRF, HyperbolicRF], ids=_name)
def test_sparse_float32_with_a_lengthscale_stays_float32(cls):
    """Regression: SciPy divides a sparse matrix by the Python float ``lengthscale`` in
    float64, so sparse float32 input with ``lengthscale != 1`` gave float64 features,
    kernels and variances (dense float32 input gives float32). Reference: the dense
    float32 path on the same values; only the summation order of the products differs
    (d = 5 float32 terms of size O(1) in each exponent: a few ulps)."""
    rng = np.random.default_rng(0)
    X = np.maximum(0.4 * rng.standard_normal((6, 5)), 0.0).astype(np.float32)
    Y = (0.3 * rng.standard_normal((4, 5))).astype(np.float32)
    Y[:, 1] = 0.0
    fm = cls(9, kernel="gaussian", lengthscale=0.7, random_state=0).fit(X, Y=Y)
    for method, args in [
        ("transform", (X,)),
        ("transform_y", (Y,)),
        ("approx_kernel", (X, Y)),
        ("exact_kernel", (X, Y)),
        ("variance", (X, Y)),
    ]:
        ref = getattr(fm, method)(*args)
        out = getattr(fm, method)(*(sp.csr_matrix(a) for a in args))
        assert ref.dtype == out.dtype == np.float32, method
        np.testing.assert_allclose(out, ref, rtol=64 * EPS32, atol=0, err_msg=method)


# ---------------------------------------------------------------------- torch
@pytest.mark.torch
@pytest.mark.parametrize("sampler", ["iid", "orthogonal", "halton"])
@pytest.mark.parametrize("cls", MAPS_AND_RFF, ids=_name)
def test_torch_and_numpy_agree_for_every_method(cls, sampler):
    """Every value method on torch float64 (CPU) equals NumPy to round-off, for maps
    fitted on torch tensors with Y != X, a lengthscale, both kernels."""
    torch = pytest.importorskip("torch")
    X, Y = _case("different_distributions")
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    kernels = ["gaussian"] if cls is RandomFourierFeatures else ["softmax", "gaussian"]
    for kernel in kernels:
        kw = {"lengthscale": 1.7, "sampler": sampler, "random_state": 0}
        if cls is not RandomFourierFeatures:
            kw["kernel"] = kernel
        a, b = cls(16, **kw).fit(X, Y=Y), cls(16, **kw).fit(Xt, Y=Yt)
        for method, args in [
            ("transform", (X,)),
            ("transform_y", (Y,)),
            ("approx_kernel", (X, Y)),
            ("exact_kernel", (X, Y)),
            ("expected_kernel", (X, Y)),
            ("variance", (X, Y)),
            ("complex_variance", (X, Y)),
            ("log_relative_variance", (X, Y)),
        ]:
            ref = getattr(a, method)(*args)
            out = getattr(b, method)(*(torch.from_numpy(v) for v in args))
            assert isinstance(out, torch.Tensor), method
            np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=0, err_msg=method)


# ---------------------------------------------------------------------- RandomFeatures
def _full_data_relative_mse(name, kernel, X, Y, n_components):
    """Mean over pairs of ``(Var + (E k_hat - K)^2) / K^2``: the relative variance of an
    unbiased map, plus the squared bias of a Maclaurin map's truncated series."""
    fm = make_feature_map(name, kernel=kernel, n_components=n_components, random_state=0)
    fm.fit(X, Y=Y)
    K = fm.exact_kernel(X, Y)
    rel = (fm.variance(X, Y) + (fm.expected_kernel(X, Y) - K) ** 2) / K**2
    if Y is None:
        rel = rel[~np.eye(len(X), dtype=bool)]
    return float(np.mean(rel))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "case", "expected"),
    [
        ("gaussian", "far_cluster", {"rff", "trig"}),
        ("gaussian", "anisotropic", {"sderf"}),
        ("softmax", "large", {"sderf"}),
    ],
)
@pytest.mark.parametrize("n_components", [64, 63])
def test_auto_picks_the_lowest_variance_candidate(kernel, case, expected, n_components):
    """With all rows in the sample (n <= auto_sample_size) the choice is the candidate of
    lowest mean relative mean squared error on the data, among the expected ones (bounded
    features for a cluster far from the origin, where the Maclaurin series truncated at
    degree 10 is ~0, SDERF for anisotropic data and large softmax inputs); odd
    ``n_components`` is respected exactly."""
    rng = np.random.default_rng(0)
    if case == "far_cluster":
        X = 5.0 + 0.3 * rng.standard_normal((120, 6))
    elif case == "anisotropic":
        X = rng.standard_normal((120, 6)) * np.array([3.0, 0.3, 0.3, 0.3, 0.3, 0.3])
    else:
        X = rng.standard_normal((120, 6))
    rf = RandomFeatures(method="auto", kernel=kernel, n_components=n_components, random_state=0)
    rf.fit(X)
    assert rf.method_ in expected
    full = {c: _full_data_relative_mse(c, kernel, X, None, n_components) for c in expected}
    assert rf.method_ == min(full, key=full.get)
    assert set(rf.variance_estimates_) == set(auto_candidates(kernel))
    assert rf.variance_estimates_[rf.method_] == min(rf.variance_estimates_.values())
    assert rf.feature_map_.output_dim == n_components == rf.transform(X[:3]).shape[1]
    assert rf.get_feature_names_out().shape == (n_components,)
