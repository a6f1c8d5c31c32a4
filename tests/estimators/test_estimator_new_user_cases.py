"""Regression tests for inputs a new user brings to the estimators.

Targets with a large offset, no spread, an overflowing variance, None or strings;
regularisation so small that the system overflows; ``n_components`` below one random
feature; asymmetric ``RandomFeatures``, classes and scikit-learn maps as ``feature_map``;
a bad ``Y`` for ``method="auto"``. Each test fails on the code before its fix (a few
parameters are controls that pass on both).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone

import kernelkit.estimators._chunked as chunked
from kernelkit.estimators import (
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import RandomFourierFeatures

EPS = np.finfo(np.float64).eps


def _offset_data(n=600, offset=1e8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = offset + np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n)  # spread ~1, mean 1e8
    return X, y


def _direct_and_chunked(est, X, y, path, monkeypatch):
    """``est`` fitted in memory (all features) and from statistics: an iterable of blocks
    of 97 rows (``"blocks"``) or the blocked in-memory path (``"streamed"``)."""
    monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1 << 62)
    direct = clone(est).fit(X, y)
    if path == "blocks":
        blocks = ((X[i : i + 97], y[i : i + 97]) for i in range(0, len(X), 97))
        return direct, clone(est).fit(blocks, None)
    monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1000)
    assert chunked.use_blocked_statistics(direct.feature_map_, X, "primal")
    return direct, clone(est).fit(X, y)


@pytest.mark.parametrize("path", ["blocks", "streamed"])
def test_normalize_y_variance_of_offset_targets_in_chunked_fits(path, monkeypatch):
    """``normalize_y`` with ``y = 1e8 + O(1)``: the chunked / blocked fit's target scale is
    the in-memory ``y.std()``. The one-pass ``sum y^2 / n - ybar^2`` has an error of order
    ``eps ybar^2 ~ 2`` against a variance of ~0.6, so predictive standard deviations were
    off by a factor ~2; the pairwise (Chan) combination is exact to ``n eps`` relative."""
    X, y = _offset_data()
    est = RandomFeatureGPRegressor(
        RandomFourierFeatures(n_features=64, lengthscale=1.0, random_state=0),
        noise=0.1,
        normalize_y=True,
        solver="primal",
    )
    direct, other = _direct_and_chunked(est, X, y, path, monkeypatch)
    mean_d, std_d = direct.predict(X[:50], return_std=True)
    mean_o, std_o = other.predict(X[:50], return_std=True)
    # same features and Gram to round-off: the std agree to a few hundred n eps relative
    np.testing.assert_allclose(std_o, std_d, rtol=1e-9)
    # means: a few roundings of the 1e8 offset (the statistics keep y relative to a block
    # mean, so nothing cancels the offset's digits)
    np.testing.assert_allclose(mean_o, mean_d, rtol=0, atol=16 * EPS * 1e8)


@pytest.mark.parametrize("path", ["blocks", "streamed"])
@pytest.mark.parametrize("estimator", ["ridge", "gp"])
def test_chunked_fit_keeps_the_digits_of_offset_targets(estimator, path, monkeypatch):
    """``y = 1e10 + O(1)``: the chunked and blocked fits formed the centred right-hand side
    ``sum_i phi_i (y_i - ybar)`` from the raw ``Phi^T y``, cancelling the offset's digits:
    predictions differed from the in-memory fit by ~1e-13 x offset (9e-4 for the ridge,
    1e-4 for the GP at 1e10), where the in-memory fit is exact to a few roundings of the
    offset (``eps x 1e10 ~ 2e-6``). The sums are now kept relative to a block mean."""
    offset = 1e10
    X, y = _offset_data(offset=offset)
    fm = RandomFourierFeatures(n_features=64, lengthscale=1.0, random_state=0)
    if estimator == "ridge":
        est = RandomFeatureRidge(fm, alpha=1e-2, solver="primal")
    else:
        est = RandomFeatureGPRegressor(fm, noise=0.1, normalize_y=True, solver="primal")
    direct, other = _direct_and_chunked(est, X, y, path, monkeypatch)
    pred_d, pred_o = direct.predict(X[:50]), other.predict(X[:50])
    np.testing.assert_allclose(pred_o, pred_d, rtol=0, atol=16 * EPS * offset)
    if estimator == "ridge":  # the intercept carries the offset
        assert abs(other.intercept_ - direct.intercept_) <= 16 * EPS * offset


@pytest.mark.parametrize("value", [1e6 + 0.3, -123.456789, 0.1])
def test_normalize_y_constant_target_scaled_by_one(value):
    """A constant target whose ``y.std()`` is round-off (``1e6 + 0.3`` gives ~2e-10, not
    0) is constant: scaled by 1 as an exactly constant one, so the predictive standard
    deviation is the latent one (it was multiplied by the round-off, ~1e-12) and the
    mean is the constant."""
    X, _ = _offset_data(n=200)
    est = RandomFeatureGPRegressor(
        RandomFourierFeatures(n_features=64, random_state=0), noise=0.1, normalize_y=True
    )
    ref = clone(est).fit(X, np.zeros(len(X)))  # std exactly 0: scaled by 1
    gp = clone(est).fit(X, np.full(len(X), value))
    mean, std = gp.predict(X[:20], return_std=True)
    _, std_ref = ref.predict(X[:20], return_std=True)
    np.testing.assert_allclose(std, std_ref, rtol=1e-12)  # the same latent posterior
    np.testing.assert_allclose(mean, value, rtol=0, atol=100 * EPS * abs(value))


@pytest.mark.parametrize(
    ("method", "n_components", "width"),
    [("hybrid_gaussian", 64, 66), ("hybrid_normalized", 64, 68), ("hyperbolic", 1, 2)],
)
def test_random_features_below_one_feature_warns_with_the_width(method, n_components, width):
    """Asking for fewer columns than one random feature gives (66 for the Gaussian hybrid
    with its default parameters) returned that many columns silently; it now warns, and
    the warning names the width that ``transform`` then has."""
    X = np.random.default_rng(0).standard_normal((20, 3))
    rf = RandomFeatures(method=method, n_components=n_components, random_state=0)
    with pytest.warns(UserWarning, match=rf"n_components={n_components} .* {width} columns"):
        Z = rf.fit_transform(X)
    assert Z.shape == (20, width)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning where one feature fits
        assert RandomFeatures(method=method, n_components=width, random_state=0).fit_transform(
            X
        ).shape == (20, width)


@pytest.mark.parametrize("method", ["saderf", "hybrid_angular"])
@pytest.mark.parametrize(
    "estimator", [RandomFeatureRidge, RandomFeatureGPRegressor, RandomFeatureGPClassifier]
)
def test_random_features_of_an_asymmetric_method_rejected_as_feature_map(estimator, method):
    """``RandomFeatures(method="saderf")`` only knows it is asymmetric once fitted; it was
    accepted and its query-side features used on both sides, ``k_hat(x, x') =
    f1(x)^T f1(x')``, which estimates no kernel. Now rejected as the maps themselves are,
    while a symmetric method's transformer gives the same model as its map."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(int)
    rf = RandomFeatures(method=method, n_components=128, random_state=0)
    with pytest.raises(ValueError, match=r"symmetric feature map.*RandomFeatures's"):
        estimator(feature_map=rf).fit(X, y)
    # random_state seeds the classifier's Monte Carlo draws
    sym = estimator(RandomFeatures(method="rff", n_components=64, random_state=0), random_state=0)
    ref = estimator(RandomFourierFeatures(n_features=64, random_state=0), random_state=0)
    np.testing.assert_allclose(sym.fit(X, y).predict(X), ref.fit(X, y).predict(X), atol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda fm: RandomFeatureGPClassifier(fm, n_samples=100, random_state=0),
        lambda fm: RandomFeatureRidge(fm, random_state=np.random.default_rng(0)),
    ],
    ids=["gpc-int", "ridge-generator"],
)
def test_scikit_learn_feature_map_gets_an_int_seed(make):
    """scikit-learn's feature maps reject a ``Generator`` random_state: the classifier
    (which always seeds its map from a Generator) and a ridge given one crashed with
    RBFSampler's parameter error. They now pass an int drawn from it: same seed, same
    map and the same predictions."""
    from sklearn.kernel_approximation import RBFSampler

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(int)
    a = make(RBFSampler(n_components=64)).fit(X, y)
    b = make(RBFSampler(n_components=64)).fit(X, y)
    assert isinstance(a.feature_map_.random_state, int)
    np.testing.assert_array_equal(a.feature_map_.random_weights_, b.feature_map_.random_weights_)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


def test_auto_skips_candidates_wider_than_n_components():
    """``method="auto"`` compared the hybrids at ``n_components=32`` although one of their
    random features is 36-68 columns wide (so they could win with more columns than
    asked for). They are now out of the comparison (variance ``inf``), silently, and the
    output has ``n_components`` columns. (The hybrids compete only when keys are given:
    without them a transformer's Gram matrix is not their estimate.)"""
    X = np.random.default_rng(0).standard_normal((50, 3))
    rf = RandomFeatures(method="auto", n_components=32, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        Z = rf.fit_transform(X, Y=X)
    assert Z.shape == (50, 32)
    wide = ["hybrid_angular", "hybrid_gaussian", "hybrid_normalized"]
    assert all(rf.variance_estimates_[m] == np.inf for m in wide if m in rf.variance_estimates_)
    assert any(m in rf.variance_estimates_ for m in wide)
    assert np.isfinite(rf.variance_estimates_[rf.method_])


@pytest.mark.parametrize("estimator", [RandomFeatureRidge, RandomFeatureGPClassifier])
def test_feature_map_class_instead_of_instance_is_named(estimator):
    """A class has ``fit`` and ``transform`` attributes, so it passed the parameter check
    and failed in ``clone`` with "get_params() missing 1 required positional argument"."""
    X = np.random.default_rng(0).standard_normal((20, 2))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(TypeError, match=r"feature_map .* the class RandomFourierFeatures"):
        estimator(feature_map=RandomFourierFeatures).fit(X, y)


def test_include_noise_uses_the_fitted_noise():
    """``predict(include_noise=True)`` read ``self.noise`` at prediction time, so
    ``set_params(noise=...)`` without a refit mixed a new noise into a posterior fitted
    with the old one; it now adds the noise the posterior was fitted with, ``var_y =
    var_f + noise`` (eq. 87 plus the noise), as the latent posterior itself does."""
    X = np.random.default_rng(0).standard_normal((30, 2))
    gp = RandomFeatureGPRegressor(noise=0.1, random_state=0).fit(X, np.sin(X[:, 0]))
    _, sd_f = gp.predict(X[:5], return_std=True)
    gp.set_params(noise=100.0)  # not refitted
    _, sd_y = gp.predict(X[:5], return_std=True, include_noise=True)
    np.testing.assert_allclose(sd_y**2, sd_f**2 + 0.1, rtol=1e-12)


@pytest.mark.parametrize("chunked", [False, True])
def test_normalize_y_overflowing_variance_is_a_clear_error(chunked):
    """Targets whose deviations from their mean overflow: ``normalize_y`` divided them by
    ``inf``, so every prediction was NaN. A ValueError says so. ``y = 1e200 x`` raised it
    too while the sums of squares overflowed; they are scaled now, and its posterior is
    that of ``x`` times 1e200."""
    X = np.random.default_rng(0).standard_normal((30, 2))

    def data(y):
        return (
            (((X[i : i + 10], y[i : i + 10]) for i in range(0, 30, 10)), None)
            if chunked
            else (X, y)
        )

    huge = np.where(X[:, 0] > 0, 1.5e308, -1.5e308)  # |y - mean| up to 3e308
    with pytest.raises(ValueError, match="normalize_y=True: the variance of y overflows"):
        RandomFeatureGPRegressor(normalize_y=True, solver="primal").fit(*data(huge))
    ref = RandomFeatureGPRegressor(normalize_y=True, solver="primal", random_state=0)
    mean, sd = ref.fit(*data(X[:, 0])).predict(X[:5], return_std=True)
    big = RandomFeatureGPRegressor(normalize_y=True, solver="primal", random_state=0)
    mean_b, sd_b = big.fit(*data(1e200 * X[:, 0])).predict(X[:5], return_std=True)
    np.testing.assert_allclose(mean_b, 1e200 * mean, rtol=1e-10)
    np.testing.assert_allclose(sd_b, 1e200 * sd, rtol=1e-10)


@pytest.mark.parametrize("estimator", [RandomFeatureRidge, RandomFeatureGPRegressor])
def test_none_in_an_object_y_is_rejected(estimator):
    """``y = [None, 1.0, ...]`` (object dtype) passes scikit-learn's finiteness check and is
    then cast to float, None to NaN: every prediction was NaN, silently."""
    X = np.random.default_rng(0).standard_normal((20, 2))
    y = np.array([None, *X[1:, 0]], dtype=object)
    with pytest.raises(ValueError, match="y contains NaN, infinity or None"):
        estimator().fit(X, y)
    y[0] = X[0, 0]  # the same object array without None fits
    assert np.all(np.isfinite(estimator(random_state=0).fit(X, y).predict(X)))


@pytest.mark.parametrize(
    ("Y", "error", "match"),
    [
        (np.zeros((20, 2)), ValueError, "Y has 2 features"),
        (np.full((20, 3), np.nan), ValueError, "Y contains NaN"),
        (np.zeros(20), ValueError, "Y must be a 2-D array"),
    ],
    ids=["other-d", "nan", "1-d"],
)
def test_auto_names_a_bad_Y(Y, error, match):
    """``method="auto"`` swallowed each candidate's error about ``Y`` and reported "no
    candidate ... has a finite variance on this data"; a list ``Y`` raised an
    AttributeError. ``Y`` is now checked first, as the maps check it."""
    X = np.random.default_rng(0).standard_normal((30, 3))
    with pytest.raises(error, match=match):
        RandomFeatures(method="auto", n_components=64, random_state=0).fit(X, Y=Y)
    keys = np.random.default_rng(1).standard_normal((20, 3))
    rf = RandomFeatures(method="auto", n_components=64, random_state=0)
    assert rf.fit(X, Y=keys.tolist()).transform_y(keys).shape == (20, 64)


@pytest.mark.parametrize(
    ("estimator", "param"),
    [
        (RandomFeatureRidge, "alpha"),
        (RandomFeatureGPRegressor, "noise"),
        (RandomFeatureGPClassifier, "alpha"),
    ],
)
@pytest.mark.parametrize("value", [5e-324, np.finfo(np.float64).tiny])
def test_overflowing_primal_system_is_an_error(estimator, param, value):
    """A positive ``alpha`` / ``noise`` so small that ``Phi^H Phi / noise`` (or
    ``1 / noise`` itself, for the subnormal 5e-324) overflows passed the positivity
    check; Cholesky of the infinite ``B`` gave NaN factors and every prediction was NaN
    (the classifier's ``alpha`` enters through ``log(1 / (y + alpha) + 1)``). Now an
    error says the system overflows."""
    X = np.random.default_rng(0).standard_normal((100, 2))
    y = (X[:, 0] > 0).astype(int)
    est = estimator(RandomFourierFeatures(n_features=16, random_state=0), solver="primal")
    est.set_params(**{param: value})
    if estimator is RandomFeatureGPClassifier and value > 5e-324:  # log(1/tiny) is finite
        assert np.all(np.isfinite(est.fit(X, y).predict_proba(X)))
        return
    with pytest.raises(np.linalg.LinAlgError, match="overflows float64"):
        est.fit(X, y)


@pytest.mark.parametrize(
    "y",
    [np.array(list("pqpqpq")), list("pqpqpq"), "categorical"],
    ids=["str-array", "str-list", "categorical"],
)
def test_string_regression_target_is_named(y):
    """String targets to a regressor failed with NumPy's bare "could not convert string to
    float: 'p'", which does not say that y is at fault (X may hold strings as well)."""
    import pandas as pd

    if isinstance(y, str):
        y = pd.Series(pd.Categorical(list("pqpqpq")))
    X = np.random.default_rng(0).standard_normal((6, 2))
    with pytest.raises(ValueError, match="RandomFeatureRidge: y must be numeric"):
        RandomFeatureRidge().fit(X, y)


@pytest.mark.parametrize("method", ["saderf", "rff"])
def test_transform_y_names_Y_on_a_wrong_width(method):
    """``transform_y(Y)`` with the wrong number of columns said "X has 2 features"."""
    X = np.random.default_rng(0).standard_normal((20, 3))
    rf = RandomFeatures(method=method, n_components=32, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"^Y has 2 features, but RandomFeatures is expecting 3"):
        rf.transform_y(X[:, :2])


def test_transform_y_names_y_in_its_nan_error():
    # scikit-learn's validation always says "Input X"; transform_y's argument is Y (checked
    # as the maps check their keys)
    X = np.random.default_rng(0).standard_normal((20, 4))
    Y = X.copy()
    Y[0, 0] = np.nan
    rf = RandomFeatures(n_components=16, method="saderf", random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"^Y contains NaN"):
        rf.transform_y(Y)
    with pytest.raises(ValueError, match=r"^Input X contains NaN"):
        rf.transform(Y)
