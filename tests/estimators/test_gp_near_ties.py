"""RandomFeatureGPClassifier at near-tied latent means.

The Monte Carlo draws are fixed at fit and column ``k`` goes to the class of the
``k``-th smallest latent mean. With i.i.d. draws the estimate of one column beat the
other's by its Monte Carlo error at *every* point, so where the latent means of two
classes nearly tie (data far below the lengthscale) ``predict`` chose the class of the
lower mean at all of them: training accuracy 6-11% for three of five seeds where the
latent argmax scored 89-94%. The draws are now closed under cyclic shifts of their
columns (antithetic pairs for two classes), so tied classes get equal probabilities
and, with equal variances, two classes are ranked as their latent means.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

from kernelkit.estimators import RandomFeatureGPClassifier
from kernelkit.estimators.gp import mc_softmax
from kernelkit.features import RandomFourierFeatures


@pytest.mark.parametrize("seed", range(5))
def test_near_tied_binary_predictions_follow_the_latent_means(seed):
    X, y = make_classification(120, 4, random_state=0)
    X = X * 1e-6  # far below the lengthscale: the latent means of the classes nearly tie
    fm = RandomFourierFeatures(n_features=64, lengthscale=1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = RandomFeatureGPClassifier(fm, random_state=seed).fit(X, y)
    mu, var = clf.predict_latent(X)
    np.testing.assert_allclose(var[:, 0], var[:, 1], rtol=1e-9)
    assert np.all(mu[:, 0] != mu[:, 1])
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[np.argmax(mu, axis=1)])


@pytest.mark.parametrize("C", [2, 3, 5])
def test_tied_classes_get_equal_probabilities(C):
    rng = np.random.default_rng(C)
    X = rng.standard_normal((40, 2))
    y = np.arange(40) % C
    clf = RandomFeatureGPClassifier(random_state=0, n_samples=1000).fit(X, y)
    S = clf.mc_noise_.shape[0]
    assert S == C * -(-1000 // C)  # n_samples rounded up to a multiple of C
    # every cyclic shift of the columns is a permutation of the rows
    rows = {tuple(r) for r in clf.mc_noise_}
    for r in range(1, C):
        assert {tuple(v) for v in np.roll(clf.mc_noise_, r, axis=1)} == rows
    # equal latent means and variances: equal probabilities to round-off (i.i.d. draws
    # were off by their Monte Carlo error, ~1e-2)
    for sd in (0.1, 1.0, 10.0):
        P = mc_softmax(np.zeros((1, C)), np.full((1, C), sd * sd), clf.mc_noise_, by_rank=True)
        np.testing.assert_allclose(P, 1.0 / C, rtol=0, atol=1e-14)


def test_draws_stay_standard_normal():
    """Each row is still a standard-normal vector (the estimator stays unbiased): the
    means, variances and correlations of the draws' columns, within their sampling
    error for 10^5 draws."""
    X = np.random.default_rng(0).standard_normal((30, 2))
    y = np.arange(30) % 3
    E = RandomFeatureGPClassifier(random_state=1, n_samples=100_000).fit(X, y).mc_noise_
    n = E.shape[0] / 3  # independent draws per column (the rest are its shifts)
    tol = 5.0 / np.sqrt(n)
    np.testing.assert_allclose(E.mean(0), 0.0, atol=tol)
    np.testing.assert_allclose(E.var(0), 1.0, atol=tol * np.sqrt(2))
    np.testing.assert_allclose(np.corrcoef(E.T)[np.triu_indices(3, 1)], 0.0, atol=tol)
