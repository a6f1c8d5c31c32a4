"""Inputs a new user brings that the contract suite does not: extreme scales, degenerate
data, unusual layouts. Each test is the regression test of a fixed defect; values are
compared with the exact kernel (or a closed form), tolerances derived from the analytic
variance and the rounding of the dtype."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.estimators import RandomFeatures
from kernelkit.features import (
    GaussianSketch,
    HyperbolicRF,
    NormalizedGaussianHybridRF,
    RandomFourierFeatures,
    RandomMaclaurin,
    TensorSketch,
    TensorSRHT,
)
from kernelkit.features.hybrid.bipolar import _BipolarHybrid


def _unit_rows(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# ---------------------------------------------------------------------- tiny norms
@pytest.mark.parametrize(("dtype", "scale"), [(np.float32, 1e-6), (np.float64, 1e-12)])
def test_normalized_gaussian_hybrid_tiny_inputs_keep_their_digits(dtype, scale):
    """With the fitted radius r ~ scale, rho = 1 - e^{-2 r^2} ~ 2 scale^2 and the feature
    form lambda_hat = (1 - u(x).u(y)) / rho cancels to an error ~ eps / rho: the estimate of
    K ~ 1 was off by 1e-2 (float32 at 1e-6) and 6e-8 (float64 at 1e-12), while its
    standard deviation is ~ scale^2. approx_kernel now sums sin^2 terms instead."""
    X = (scale * _unit_rows(6, 4, 0)).astype(dtype)
    Y = (0.8 * scale * _unit_rows(5, 4, 1)).astype(dtype)
    fm = NormalizedGaussianHybridRF(n_features=4, n_lambda=2, random_state=0).fit(X, Y=Y)
    assert fm.rho_ < np.sqrt(np.finfo(dtype).eps)  # the regime of the fix
    K = fm.exact_kernel(X.astype(np.float64), Y.astype(np.float64))
    sd = np.sqrt(fm.variance(X.astype(np.float64), Y.astype(np.float64)))
    Kh = fm.approx_kernel(X, Y)
    assert Kh.dtype == dtype
    # 6 sd of the random error plus the rounding of the two base estimates (each within a
    # few eps of K ~ 1) mixed by lambda_hat = O(1)
    tol = 6.0 * sd + 32.0 * np.finfo(dtype).eps * np.abs(K)
    np.testing.assert_array_less(np.abs(Kh - K), tol)


def test_normalized_gaussian_hybrid_stable_lambda_is_the_same_estimator():
    """At scale 1e-5 (float64) the feature form still has ~eps / rho ~ 1e-6 relative
    accuracy and the sin^2 form is used: both give the same lambda_hat of the same draw."""
    X, Y = 1e-5 * _unit_rows(6, 4, 0), 0.7e-5 * _unit_rows(5, 4, 1)
    fm = NormalizedGaussianHybridRF(n_features=4, n_lambda=3, random_state=0).fit(X, Y=Y)
    assert fm.rho_ < np.sqrt(np.finfo(np.float64).eps)
    stable = fm.approx_components(X, Y)[0]
    feature_form = _BipolarHybrid._lambda_hat(fm, X, Y, np)  # a + c u(x)^T v(y)
    eps_over_rho = np.finfo(np.float64).eps / fm.rho_
    np.testing.assert_allclose(stable, feature_form, rtol=0, atol=16.0 * eps_over_rho)
    assert stable.min() > 100 * 16.0 * eps_over_rho  # the comparison has digits to spare


def test_normalized_gaussian_hybrid_radius_of_tiny_inputs():
    """The root-mean-square norm was computed from squared norms, which underflow below
    ~1e-154: inputs of norm 1e-160 were reported as 'all zero'. Now the radius is exact and
    the error names the real limit (rho below the float64 range)."""
    X, Y = _unit_rows(6, 4, 0), 0.5 * _unit_rows(5, 4, 1)
    ref = NormalizedGaussianHybridRF(n_features=4, n_lambda=2).fit(X, Y=Y).radius_
    fm = NormalizedGaussianHybridRF(n_features=4, n_lambda=2).fit(1e-150 * X, Y=1e-150 * Y)
    np.testing.assert_allclose(fm.radius_, 1e-150 * ref, rtol=1e-12)
    with pytest.raises(ValueError, match=r"radius \* sigma .* too small .*raise sigma"):
        NormalizedGaussianHybridRF(n_features=4, n_lambda=2).fit(1e-160 * X, Y=1e-160 * Y)
    with pytest.raises(ValueError, match="all zero"):
        NormalizedGaussianHybridRF(n_features=4, n_lambda=2).fit(np.zeros((3, 4)))


# ---------------------------------------------------------------------- large norms
def test_maclaurin_gaussian_weight_does_not_underflow():
    """Gaussian kernel: variance and expected kernel are the softmax series' times
    e_x^2 e_y^2 resp. e_x e_y with e_x = e^{-|x|^2 / 2}. The factors were formed one
    point at a time, and e^{-|x|^2} = 0 for |x|^2 = 760 zeroed a representable variance
    (~1e-300) and gave log_relative_variance = -inf: RandomFeatures(method="auto") picked
    random_maclaurin as 'exact' on unscaled data. The two kernels' maps share their
    draw, so the softmax map is the reference (OptimizedMaclaurin shares the code, but
    its softmax fit overflows on such data)."""
    rng = np.random.default_rng(0)
    X = np.sqrt(760.0) * _unit_rows(3, 4, 0)  # |x|^2 = 760
    Y = 0.1 * X + rng.normal(size=(3, 4))  # x.y ~ 80: a large polynomial part
    kw = {"n_features": 64, "random_state": 0, "gamma": 1.0}
    g = RandomMaclaurin(kernel="gaussian", **kw).fit(X, Y=Y)
    s = RandomMaclaurin(kernel="softmax", **kw).fit(X, Y=Y)
    np.testing.assert_array_equal(g.n_features_per_degree_, s.n_features_per_degree_)
    log_w = -0.5 * ((X * X).sum(1)[:, None] + (Y * Y).sum(1)[None, :])  # log e_x e_y
    Vg, Vs = g.variance(X, Y), s.variance(X, Y)
    assert np.all(Vg > 0) and np.all(np.isfinite(Vg))
    # log-space comparison: the relative rounding of exponents ~ 800 is ~1e-13 (rtol
    # 1e-12). A variance below exp(-708.4) is subnormal: float64 holds it only to within
    # half the smallest subnormal s, a relative error up to (s / 2) / (Vg - s / 2) (1.5e-5
    # at exp(-734), the correctly rounded value of a pair drawn with offset 1), which the
    # log takes over as an absolute error (|log(1 + r)| <= r / (1 - r))
    ref = np.log(Vs) + 2.0 * log_w
    tiny = np.nextafter(0.0, 1.0)  # s; s / 2 itself rounds to 0: halve the ratio instead
    r = 0.5 * (tiny / (Vg - tiny))  # Vg - s <= Vg - s / 2: an upper bound of r
    bound = 1e-12 * np.abs(ref) + r / (1.0 - r)
    err = np.abs(np.log(Vg) - ref)
    assert np.all(err <= bound), (err, bound)
    Ks = s.expected_kernel(X, Y)
    Kg = g.expected_kernel(X, Y)
    np.testing.assert_allclose(np.log(np.abs(Kg)), np.log(np.abs(Ks)) + log_w, rtol=1e-12)
    np.testing.assert_array_equal(np.sign(Kg), np.sign(Ks))
    np.testing.assert_allclose(
        g.log_relative_variance(X, Y), s.log_relative_variance(X, Y), rtol=1e-12
    )


def test_maclaurin_gaussian_subnormal_variance_is_correctly_rounded():
    """The pair of the test above that KERNELKIT_TEST_RNG_OFFSET=1 drew (x.y = 3.66,
    |x|^2 = 760): its Gaussian variance, exp(-734.06), is subnormal, and float64 holds
    it to within half the smallest subnormal s, a relative 1.5e-5. The value is the
    softmax variance (accurate to ~1e-15) times e_x^2 e_y^2, in 50-digit arithmetic;
    the map returns its nearest float64 (relative error ~1e-13 in the reference: 3e-9 s
    at 32 000 s)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, 1])))
    X = rng.standard_normal((3, 4))
    X = np.sqrt(760.0) * X / np.linalg.norm(X, axis=1, keepdims=True)
    Y = 0.1 * X + np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, 1]))).normal(
        size=(3, 4)
    )
    x, y = X[:1], Y[2:3]
    seed = np.random.SeedSequence([0, 1])  # what random_state=0 became with offset 1
    kw = {
        "n_features": 64,
        "random_state": np.random.Generator(np.random.PCG64(seed)),
        "gamma": 1.0,
    }
    g = RandomMaclaurin(kernel="gaussian", **kw).fit(X, Y=Y)
    kw["random_state"] = np.random.Generator(np.random.PCG64(seed))
    s = RandomMaclaurin(kernel="softmax", **kw).fit(X, Y=Y)
    vg, vs = float(g.variance(x, y)[0, 0]), float(s.variance(x, y)[0, 0])
    tiny = np.nextafter(0.0, 1.0)
    assert 0.0 < vg < np.finfo(float).tiny  # subnormal
    sq = mp.fsum(mp.mpf(float(v)) ** 2 for v in np.concatenate([x[0], y[0]]))
    ref = mp.mpf(vs) * mp.e ** (-sq) / mp.mpf(tiny)  # in units of s
    assert vg / tiny == 32162.0  # the value the offset-1 run gave (reference 32161.63)
    assert abs(mp.mpf(vg / tiny) - ref) <= 0.5 + 1e-6


def test_auto_on_unscaled_data_sees_no_exact_candidate():
    """Unscaled data (|x| ~ 60) and the Gaussian kernel: every candidate's relative
    variance is positive (none is exact off the diagonal); random_maclaurin's was 0."""
    X = 30.0 * np.random.default_rng(0).standard_normal((40, 4))
    rf = RandomFeatures(method="auto", kernel="gaussian", n_components=32, random_state=0)
    rf.fit(X)
    est = rf.variance_estimates_
    assert all(v > 0 for v in est.values()), est
    assert est["random_maclaurin"] > 1.0  # a truncated series far outside its range


# ---------------------------------------------------------------------- nearby points
@pytest.mark.parametrize("complex_", [False, True])
def test_rff_variance_of_nearby_points(complex_):
    """Eq. 59 / 60: Var = ((1 + k^4)/2 - k^2) / (D/2) = (1 - k^2)^2 / D for the real map.
    Evaluated as written it cancels to 0 for |x - y| ~ 1e-6 (true value ~ 1e-24 / D), so
    that RandomFeatures(method="auto") saw rff as exact on data of tiny scale. Reference:
    the same closed forms in 50-digit arithmetic."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    X, Y = 1e-6 * _unit_rows(4, 3, 0), 1e-6 * _unit_rows(3, 3, 1)
    D = 16
    fm = RandomFourierFeatures(n_features=D, complex=complex_, random_state=0).fit(X, Y=Y)
    V, Vc = fm.variance(X, Y), fm.complex_variance(X, Y)
    for (i, j), v in np.ndenumerate(V):
        sq = mp.fsum(
            (mp.mpf(float(a)) - mp.mpf(float(b))) ** 2 for a, b in zip(X[i], Y[j], strict=True)
        )
        k2 = mp.e ** (-sq)
        d_eff = 2 * D if complex_ else D  # eq. 60's real part is eq. 59 with 2D features
        ref = (1 + k2 * k2 - 2 * k2) / d_eff
        # the Gram-based |x - y|^2 has relative error ~ eps |x|^2 / |x - y|^2 ~ 1e-15
        assert abs(v - float(ref)) <= 1e-9 * float(ref), (i, j, v, ref)
        if complex_:  # E|k_hat - k|^2 = (1 - k^2) / D
            assert abs(Vc[i, j] - float((1 - k2) / D)) <= 1e-9 * float((1 - k2) / D)


# ---------------------------------------------------------------------- float32
def test_rff_log_relative_variance_float32_far_apart():
    """k = e^{-|delta|^2 / 2} underflows float32 for |delta| > ~14, where log(Var / k^2) =
    log Var + |delta|^2 is still ~ 200: it was +inf. Reference: eq. 59 in float64 from
    the rounded float32 inputs, log Var = 2 log(1 - k^2) - log D for even D."""
    X = 12.0 * _unit_rows(5, 3, 0)
    Y = -12.0 * _unit_rows(4, 3, 1)
    D = 16
    fm = RandomFourierFeatures(n_features=D, random_state=0).fit(X)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    lrv = fm.log_relative_variance(X32, Y32)
    assert lrv.dtype == np.float32
    X64, Y64 = X32.astype(np.float64), Y32.astype(np.float64)
    sq = ((X64[:, None, :] - Y64[None, :, :]) ** 2).sum(-1)
    want = 2.0 * np.log(-np.expm1(-sq)) - np.log(D) + sq
    assert want.max() > 200  # k^2 = e^{-sq} is far below float32's range
    # float32 Gram-based |delta|^2 (~ 500) has absolute rounding ~ 500 * 4 eps32
    np.testing.assert_allclose(lrv, want, rtol=0, atol=2e-4 * want.max())


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_maclaurin_float32_variance_is_the_float64_one_rounded(kernel):
    """The variance holds (x.y)^(2n) and (|x|^2 |y|^2)^n up to degree 10, which overflow
    float32 (inf, or inf - inf = NaN) where the variance itself is representable (softmax,
    ~1e33) or tiny (Gaussian, ~1e-81, which rounds to 0 in float32)."""
    X, Y = 12.0 * _unit_rows(6, 3, 0), 10.8 * _unit_rows(5, 3, 1)
    fm = RandomMaclaurin(n_features=16, kernel=kernel, random_state=0).fit(X, Y=Y)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    X64, Y64 = X32.astype(np.float64), Y32.astype(np.float64)  # the same points
    for method in ("variance", "expected_kernel"):
        got = getattr(fm, method)(X32, Y32)
        assert got.dtype == np.float32
        with np.errstate(over="ignore"):
            want = getattr(fm, method)(X64, Y64).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=method)
    lrv = fm.log_relative_variance(X32, Y32)
    np.testing.assert_allclose(lrv, fm.log_relative_variance(X64, Y64), rtol=1e-6)
    assert np.all(np.isfinite(lrv))


@pytest.mark.parametrize(("dtype", "scale"), [(np.float32, 1e-3), (np.float64, 1e-7)])
def test_hyperbolic_variance_of_small_inputs(dtype, scale):
    """Antithetic features: Var / K^2 = (cosh|x+y|^2 - 1) / M ~ |x+y|^4 / (2M). Formed as
    log m2 - 2 log K it cancelled (float32 at |x| ~ 1e-3: 3e-10 instead of 4e-15, or
    -0 and a log relative variance of -inf). Reference: the closed form in 50 digits."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    X = (scale * _unit_rows(4, 3, 0)).astype(dtype)
    Y = (0.9 * scale * _unit_rows(3, 3, 1)).astype(dtype)
    M = 16
    fm = HyperbolicRF(n_features=M, random_state=0).fit(X.astype(np.float64))
    V, lrv = fm.variance(X, Y), fm.log_relative_variance(X, Y)
    assert V.dtype == dtype and lrv.dtype == dtype
    for (i, j), v in np.ndenumerate(V):
        x = [mp.mpf(float(t)) for t in X[i]]
        y = [mp.mpf(float(t)) for t in Y[j]]
        z2 = mp.fsum((a + b) ** 2 for a, b in zip(x, y, strict=True))
        rel = (mp.cosh(z2) - 1) / M
        ref = rel * mp.e ** (2 * mp.fsum(a * b for a, b in zip(x, y, strict=True)))
        # |x+y|^2 = |x|^2 + |y|^2 + 2 x.y from the Gram matrix (sums of d = 3 products, two
        # additions): relative error <= (d + 2) eps times the cancellation
        # sum(a^2 + b^2 + 2|a b|) / |x+y|^2, doubled in the variance ~ z2^2; a few eps more
        # from exp / expm1 / log
        cancel = mp.fsum(a * a + b * b + 2 * abs(a * b) for a, b in zip(x, y, strict=True)) / z2
        eps = float(np.finfo(dtype).eps)
        # (the variance is exp(2 log K + log rel): the rounding of the log, ~ eps |log rel|,
        # becomes relative error)
        want = float(mp.log(rel))
        tol = 2 * 5 * eps * float(cancel) + 8 * eps + 4 * eps * abs(want)
        assert abs(float(v) - float(ref)) <= tol * float(ref), (i, j, v, ref)
        assert abs(float(lrv[i, j]) - want) <= tol, (i, j, lrv[i, j])


@pytest.mark.parametrize("cls", [GaussianSketch, TensorSketch, TensorSRHT])
def test_dot_product_log_relative_variance_float32_tiny_inputs(cls):
    """Degree 2 on inputs of norm 1e-6: K ~ 1e-24 and its variance ~ 1e-48 (below float32's
    range, so 0 in float32), but their ratio is ~ 1: log_relative_variance was -inf."""
    X, Y = 1e-6 * _unit_rows(5, 3, 0), 1e-6 * _unit_rows(4, 3, 1)
    fm = cls(n_features=16, random_state=0).fit(X)
    got = fm.log_relative_variance(X.astype(np.float32), Y.astype(np.float32))
    assert got.dtype == np.float32
    want = fm.log_relative_variance(
        X.astype(np.float32).astype(np.float64), Y.astype(np.float32).astype(np.float64)
    )
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
