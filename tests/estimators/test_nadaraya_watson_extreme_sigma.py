"""``NadarayaWatsonClassifier`` at extreme ``sigma``: with ``exact=True`` a sigma past
1.34e154 overflowed ``sigma^2`` (NaN scores turned into uniform rows and ``classes_[0]``
everywhere), though the docstring promises stable scores for any sigma and
1-nearest-neighbour in the limit; with random features a sigma below 5.6e-309 raised an
error about SDERF's ``lengthscale``."""

import warnings

import numpy as np
import pytest

from kernelkit.estimators import NadarayaWatsonClassifier
from kernelkit.estimators.nadaraya_watson import exact_nw_scores

rng = np.random.default_rng(0)
X = rng.standard_normal((30, 3))
y = (X[:, 0] > 0).astype(int)
Xn = rng.standard_normal((10, 3))


def _nearest_labels(Q):
    d2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    return y[np.argmin(d2, axis=1)]


@pytest.mark.parametrize("sigma", [1e150, 1e155, 1e200, 1e300])
def test_exact_large_sigma_is_nearest_neighbour(sigma):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid warnings either
        c = NadarayaWatsonClassifier(sigma=sigma, exact=True).fit(X, y)
        proba = c.predict_proba(np.r_[X, Xn])
    np.testing.assert_array_equal(c.predict(X), y)
    np.testing.assert_array_equal(c.predict(Xn), _nearest_labels(Xn))
    assert np.all(np.isfinite(proba)) and np.allclose(proba.max(axis=1), 1.0)


def test_exact_large_sigma_skips_zero_weight_neighbours():
    w = np.ones(30)
    w[0] = 0.0  # the query X[0] itself weighs nothing: its next neighbour decides
    c = NadarayaWatsonClassifier(sigma=1e200, exact=True).fit(X, y, sample_weight=w)
    d2 = ((X[0] - X[1:]) ** 2).sum(-1)
    assert c.predict(X[:1])[0] == y[1:][np.argmin(d2)]


def test_exact_scores_unchanged_at_ordinary_sigma():
    R = np.eye(2)[y]
    for sigma in (0.1, 1.0, 5.0):
        D2 = ((Xn[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        K = np.exp(-0.5 * sigma**2 * D2)
        ref = (K @ R) / K.max(axis=1, keepdims=True)
        np.testing.assert_allclose(exact_nw_scores(Xn, X, R, sigma), ref, rtol=1e-12)


@pytest.mark.parametrize("fit_on", ["train", "batch"])
def test_tiny_sigma_with_features_names_sigma(fit_on):
    with pytest.raises(ValueError, match="sigma"):
        NadarayaWatsonClassifier(sigma=1e-320, fit_on=fit_on).fit(X, y)


def test_tiny_sigma_exact_still_works():
    c = NadarayaWatsonClassifier(sigma=1e-320, exact=True).fit(X, y)
    np.testing.assert_allclose(c.predict_proba(X[:2]), np.tile(np.bincount(y) / 30, (2, 1)))
