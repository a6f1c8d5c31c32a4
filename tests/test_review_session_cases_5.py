"""Review of the day's changes, fifth session: cases the merged changes missed.

- ``sample_weight`` of a row so small that the noise variance of the row, ``alpha /
  w_i`` (ridge), ``noise / w_i`` (GP regressor) or ``sigma^2 / w_i`` (GP classifier,
  dual), overflows to infinity (``w_i = 1e-310``, a positive finite weight) made the fit
  fail with "The noise variances must be positive and finite." (or, in the classifier,
  an infinite diagonal), although such a row adds less than ``1 / DBL_MAX`` to ``B =
  I + Phi^H W Phi / noise``: it is now dropped, as a zero weight is.
- With a float32 ``X`` the weights were checked (and rounded) in float32 before the
  float64 sums: weights all below ``1e-45`` were refused as all zero, weights above
  ``3.4e38`` as infinite (with NumPy's cast warning), where a float64 ``X`` (and
  ``NadarayaWatsonClassifier``, which validates ``X`` as float64) fitted them. The
  weights are now checked in float64 whatever ``X``'s dtype.
- The chunked (Dask, and in-memory blocked) statistics combined the blocks' weighted
  sums of squares with the harmonic weight ``a b / (a + b)`` of the blocks' weight
  totals, whose product overflows for weights from ~1e155: ``normalize_y=True`` then
  refused the fit ("the variance of y overflows"), where the in-memory fit of the same
  weights, and the chunked fit of the same problem with weights and noise scaled down,
  gave the posterior. It is formed as ``a (b / (a + b))``.
- The dot-product maps' overflow check of ``exact_kernel`` and ``approx_kernel`` was a
  pass over the whole (n, m) output, and the Maclaurin maps' overflow-safe exact kernel
  reduced ``max |Y|`` over all of ``Y`` for every row block of ``X``:
  ``RandomMaclaurin.exact_kernel`` had become ~50 % slower at n = m = 3000, d = 16, the
  sketches' ``exact_kernel`` ~12 %, ``approx_kernel`` 3-7 % and the Maclaurin maps'
  ``expected_kernel`` (which also looked for an overflow of the raw series) ~10 %
  (process time, 1 BLAS thread, alternating runs against the previous release). A
  bound from the inputs (``|x . y| <= d max |X| max |Y|``, ``|phi_x . phi_y| <= D max
  |phi_X| max |phi_Y|`` times the row scales, ``sum_n |b_n| (s d max |X| max |Y|)^n``
  for the series) now says once per call whether a value can leave the range;
  only then are the safe blocks and the pass used.
- ``NadarayaWatsonClassifier`` is a ratio of weighted kernel sums, so a common factor
  of the weights cancels; but weights whose total overflows (400 weights of 1e306)
  made the weighted centre ``X_mean_`` inf (the inputs were then not centred, another
  estimate) and, for the bounded ``trig`` features, the key sums ``S^T W R`` inf. Both
  now take the weights relative to the largest.
- ``OptimizedMaclaurin.fit`` at norms ~1e160 raised its "Maclaurin terms overflow"
  ``ValueError`` after NumPy's "invalid value encountered in divide" (``|x|^2 = inf``
  divided by itself) had reached the caller; it now raises before.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.features import (
    OptimizedMaclaurin,
    RandomFourierFeatures,
    RandomMaclaurin,
    TensorSketch,
    TensorSRHT,
)


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X[:, 0] + 0.1 * rng.standard_normal(n)
    return X, y, (X[:, 1] > 0).astype(int)


def _ridge(solver, **kw):
    # a data-independent map (fit reads the shape only): fits on X and on X[1:] draw the
    # same features, so dropping a row is the only difference between them
    fm = RandomFourierFeatures(n_features=16)
    return RandomFeatureRidge(feature_map=fm, random_state=0, solver=solver, **kw)


def _gpr(solver, **kw):
    fm = RandomFourierFeatures(n_features=16)
    kw.setdefault("noise", 1.0)  # noise / 5e-309 overflows as alpha / 5e-309 does
    return RandomFeatureGPRegressor(feature_map=fm, random_state=0, solver=solver, **kw)


def _gpc(solver, **kw):
    fm = RandomFourierFeatures(n_features=16)
    return RandomFeatureGPClassifier(feature_map=fm, random_state=0, solver=solver, **kw)


# 1e-310 (subnormal): 1 / w overflows; 5e-309: noise / w overflows for noise >= ~1
@pytest.mark.parametrize("tiny", [1e-310, 5e-309])
@pytest.mark.parametrize("solver", ["primal", "dual"])
@pytest.mark.parametrize("make", [_ridge, _gpr], ids=["ridge", "gp_regressor"])
def test_a_vanishing_weight_is_a_dropped_row(make, solver, tiny):
    X, y, _ = _data()
    w = np.ones(len(X))
    w[0] = tiny
    got = make(solver).fit(X, y, w).predict(X)
    want = make(solver).fit(X[1:], y[1:]).predict(X)
    # the row adds w / noise < 1 / DBL_MAX next to the prior's 1: the fits differ by the
    # rounding of the weighted means and of the solve only (O(1) predictions, a
    # 16 x 16 / 40 x 40 system of condition <= 1 + |Phi|^2 / noise ~ 1e3: 1e-12 is
    # ~4000 ulps)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("solver", ["primal", "dual"])
@pytest.mark.parametrize("alpha", [0.01, 10.0])
def test_gp_classifier_vanishing_weight_is_a_dropped_row(solver, alpha):
    # alpha = 10: the Milios noises log(1 / alpha + 1) ~ 0.09 are below 1, so 1 / w
    # overflows where sigma^2 / w does not (an infinite diagonal of K_hat + diag)
    X, _, yc = _data()
    w = np.ones(len(X))
    w[0] = 1e-309
    got = _gpc(solver, alpha=alpha).fit(X, yc, w).predict_proba(X)
    want = _gpc(solver, alpha=alpha).fit(X[1:], yc[1:]).predict_proba(X)
    # same Monte Carlo draws (same seed): probabilities in [0, 1] differ by the
    # rounding of the posteriors only
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [1e-50, 1e39])
@pytest.mark.parametrize("make", [_ridge, _gpr], ids=["ridge", "gp_regressor"])
def test_float32_x_takes_weights_beyond_float32_range(make, scale):
    X, y, _ = _data()
    X32 = X.astype(np.float32)
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(X))
    param = "alpha" if make is _ridge else "noise"
    # weights scale * w with alpha (noise) scale * a are the problem of weights w with
    # alpha a: the noise variances alpha / w_i are the same numbers (to one rounding)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy cast warning either
        got = make("primal", **{param: 0.5 * scale}).fit(X32, y, scale * w).predict(X32)
    want = make("primal", **{param: 0.5}).fit(X32, y, w).predict(X32)
    # float32 features: the two fits differ by the rounding of a / w_i (1 ulp of
    # float64) and of the weighted means, far below float32's eps 1.2e-7 of the
    # features; 1e-6 relative leaves 8 eps32 of room for the solve
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("scale", [1e160, 1e300])
def test_dask_normalize_y_takes_large_weights(scale):
    da = pytest.importorskip("dask.array")
    X, y, _ = _data(n=60)
    y = 3.0 * y + 5.0
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(X))
    Xd, yd = da.from_array(X, chunks=20), da.from_array(y, chunks=20)  # three blocks
    # weights scale * w with noise scale * 0.1: the noise variances of weights w with
    # noise 0.1, and the weighted mean and standard deviation of y do not change
    got = _gpr("primal", noise=0.1 * scale, normalize_y=True).fit(Xd, yd, scale * w)
    want = _gpr("primal", noise=0.1, normalize_y=True).fit(Xd, yd, w)
    # predictions ~5-10 through a 16 x 16 solve of condition <= 1 + |Phi|^2 / noise
    # ~ 600: ~10 * 600 * eps = 1.3e-12 of rounding; 1e-11 leaves a factor 8
    np.testing.assert_allclose(got.predict(X), want.predict(X), rtol=0, atol=1e-11)


def _dot_product_maps():
    return [
        TensorSketch(n_features=64, degree=3, random_state=0),
        TensorSRHT(n_features=64, degree=3, complex=True, random_state=0),
        RandomMaclaurin(n_features=64, kernel="polynomial", degree=3, random_state=0),
        RandomMaclaurin(n_features=64, kernel="softmax", random_state=0),
        RandomMaclaurin(n_features=64, kernel="gaussian", random_state=0),
        OptimizedMaclaurin(n_features=64, kernel="softmax", random_state=0),
    ]


_MAP_IDS = ["sketch", "srht-complex", "rm-poly", "rm-softmax", "rm-gauss", "om-softmax"]


@pytest.mark.parametrize("fm", _dot_product_maps(), ids=_MAP_IDS)
def test_pairwise_overflow_check_is_no_pass_over_the_output(fm, monkeypatch):
    xpn = pytest.importorskip("array_api_compat.numpy")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 5)) / 3
    Y = rng.standard_normal((200, 5)) / 3
    fm.fit(X)
    seen = []
    isfinite = xpn.isfinite

    def spy(a, *args, **kwargs):
        seen.append(getattr(a, "shape", None))
        return isfinite(a, *args, **kwargs)

    monkeypatch.setattr(xpn, "isfinite", spy)
    fm.approx_kernel(X, Y)
    assert (300, 200) not in seen  # no pass over the (n, m) estimate
    seen.clear()
    fm.exact_kernel(X, Y)
    # the sketches' exact kernel is kernels.polynomial_kernel, which looks for an
    # overflow itself (and raises): one pass; the Maclaurin maps' none
    passes = seen.count((300, 200))
    assert passes == (1 if isinstance(fm, (TensorSketch, TensorSRHT)) else 0)
    if isinstance(fm, (RandomMaclaurin, OptimizedMaclaurin)):
        seen.clear()
        fm.expected_kernel(X, Y)  # the truncated series: neither a raw-series check
        assert (300, 200) not in seen  # nor an overflow pass


@pytest.mark.parametrize("scale", [0.3, 3.0, 10.0])
@pytest.mark.parametrize("fm", _dot_product_maps(), ids=_MAP_IDS)
def test_pairwise_bounds_hold(fm, scale):
    from kernelkit._backend import array_namespace
    from kernelkit.features._base import log_gram_bound

    rng = np.random.default_rng(4)
    X = scale * rng.standard_normal((40, 6)) / np.sqrt(6)
    Y = scale * rng.standard_normal((30, 6)) / np.sqrt(6)
    fm.fit(X)
    xp = array_namespace(X)
    Xp, Yp, _, _ = fm._check_pair_half_widened(X, Y)
    _, bound = fm._exact_kernel_plan(fm._densify(Xp), fm._densify(Yp), xp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            K = fm.exact_kernel(X, Y)
        except ValueError:  # an overflow: the bound must allow one
            assert bound >= np.log(np.finfo(np.float64).max) - 1.0
        else:
            # a bound of |K|: (d max|X| max|Y| + c)^p, exp(s d max|X| max|Y|), 1; the
            # values are computed to a few ulps (1e-12 relative in the log)
            assert np.log(np.max(np.abs(K))) <= bound + 1e-12
        A = fm.approx_kernel(X, Y)
    est = np.log(np.max(np.abs(A[np.isfinite(A)]))) if np.isfinite(A).any() else -np.inf
    gram = log_gram_bound(xp, *fm._scaled_pair(Xp, Yp, xp))
    assert est <= gram + 1e-12  # Cauchy-Schwarz by the largest entries
    if isinstance(fm, (RandomMaclaurin, OptimizedMaclaurin)):
        E = fm.expected_kernel(X, Y)  # sum_n |b_n| (s d max|X| max|Y|)^n bounds it
        assert np.log(np.max(np.abs(E))) <= fm._log_series_bound(Xp, Yp, xp) + 1e-12


@pytest.mark.parametrize("scale", [1e306, 1e308])  # totals 4e308, 4e310: overflow
@pytest.mark.parametrize("method", ["trig", "positive", "sderf"])
def test_nadaraya_watson_weights_are_relative(method, scale):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((400, 3))
    y = (X[:, 1] > 0).astype(int)
    Q = rng.standard_normal((5, 3))
    make = NadarayaWatsonClassifier
    got = make(method=method, random_state=0).fit(X, y, np.full(len(X), scale))
    want = make(method=method, random_state=0).fit(X, y)
    # constant weights: the same estimate up to the rounding of the weighted mean
    # (1 ulp of X_mean_) carried through the features: probabilities to ~1e-15
    np.testing.assert_allclose(got.predict_proba(Q), want.predict_proba(Q), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "A",
    [
        np.array([[np.nan, 1.0]]),
        np.array([[1.0, np.nan]]),
        np.array([[1.0 + 0j, complex(0.0, np.nan)]]),  # the NaN in the second part
    ],
)
def test_bound_of_a_nan_is_no_bound(A):
    # a NaN feature must leave the overflow pass to look at the values, not be read as
    # "all entries small" (Python's max drops a NaN met after a number)
    xpn = pytest.importorskip("array_api_compat.numpy")
    from kernelkit.features._base import log_max_abs

    assert log_max_abs(xpn, A) == np.inf


def test_optimized_maclaurin_fit_at_huge_norms_raises_without_numpy_warning():
    # |x|^2 = inf at norms ~1e160: the fit's ValueError said so, after NumPy's
    # "invalid value encountered in divide" (inf / inf) had reached the caller
    X = np.random.default_rng(6).standard_normal((5, 8)) * 1e160
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="Maclaurin terms overflow"):
            OptimizedMaclaurin(n_features=16, random_state=0).fit(X)
