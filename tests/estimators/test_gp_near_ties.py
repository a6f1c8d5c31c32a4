"""RandomFeatureGPClassifier at near-tied latent means.

The Monte Carlo draws are fixed at fit and column ``k`` goes to the class of the
``k``-th smallest latent mean. With i.i.d. draws the estimate of one column beat the
other's by its Monte Carlo error at *every* point, so where the latent means of two
classes nearly tie (data far below the lengthscale) ``predict`` chose the class of the
lower mean at all of them: training accuracy 6-11% for three of five seeds where the
latent argmax scored 89-94%. The draws are now closed under every permutation of up to
six classes where ``C! <= n_samples`` (antithetic pairs for two classes), so tied
classes get equal probabilities and, with equal variances, classes are ranked as their
latent means; with more classes under the cyclic shifts, and the two largest means'
draws are also swapped.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

from kernelkit.estimators import RandomFeatureGPClassifier
from kernelkit.estimators.gp import mc_softmax, symmetric_normal_draws
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


@pytest.mark.parametrize("C", [2, 3, 4, 5])
def test_tied_classes_get_equal_probabilities(C):
    rng = np.random.default_rng(C)
    X = rng.standard_normal((40, 2))
    y = np.arange(40) % C
    clf = RandomFeatureGPClassifier(random_state=0, n_samples=1000).fit(X, y)
    S = clf.mc_noise_.shape[0]
    G = math.factorial(C)
    assert S == G * -(-1000 // G)  # n_samples rounded up to a multiple of C!
    # every permutation of the columns is a permutation of the rows
    rows = {tuple(r) for r in clf.mc_noise_}
    for perm in itertools.permutations(range(C)):
        assert {tuple(v) for v in clf.mc_noise_[:, perm]} == rows
    # equal latent means and variances, all of them or a subset: equal probabilities to
    # round-off (i.i.d. draws were off by their Monte Carlo error, ~1e-2; cyclic shifts
    # alone by ~5e-4 for a tied subset)
    for sd in (0.1, 1.0, 10.0):
        var = np.full((1, C), sd * sd)
        P = mc_softmax(np.zeros((1, C)), var, clf.mc_noise_, by_rank=True)
        np.testing.assert_allclose(P, 1.0 / C, rtol=0, atol=1e-14)
        mean = np.arange(C, dtype=float)[None, :]
        mean[0, 1] = 0.0  # classes 0 and 1 tied below the others
        P = mc_softmax(mean, var, clf.mc_noise_, by_rank=True)
        np.testing.assert_allclose(P[0, 0], P[0, 1], rtol=1e-13)


@pytest.mark.parametrize("seed", range(6))
def test_near_tied_majority_classes_of_three(seed):
    """Three classes, the two larger nearly tied everywhere (data far below the
    lengthscale): cyclic shifts alone sent every point to the lower of the two in six
    seeds of eight."""
    X, y = make_classification(
        200, 4, n_informative=3, n_redundant=0, n_classes=3, n_clusters_per_class=1,
        weights=[0.1, 0.45, 0.45], random_state=0,
    )  # fmt: skip
    fm = RandomFourierFeatures(n_features=64, lengthscale=1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = RandomFeatureGPClassifier(fm, random_state=seed).fit(X * 1e-6, y)
    mu, _ = clf.predict_latent(X * 1e-6)
    np.testing.assert_array_equal(clf.predict(X * 1e-6), clf.classes_[np.argmax(mu, axis=1)])


@pytest.mark.parametrize("seed", range(20))
def test_many_classes_swap_the_top_two(seed):
    """Seven classes at 1000 samples (7! > 1000): cyclic draws, and the two largest
    means' draws swapped, so a near tie at the top follows the means (equal variances)
    and an exact one ties."""
    C = 7
    E = symmetric_normal_draws(np.random.default_rng(seed), 1000, C)
    assert E.shape == (C * -(-1000 // C), C)
    mean = np.array([[0.0, 1.0, 2.0, 0.5, 3.0 + 1e-9, 1.5, 3.0]])
    var = np.ones((1, C))
    P = mc_softmax(mean, var, E, by_rank=True, swap_top=True)
    assert P[0, 4] > P[0, 6]
    mean[0, 4] = 3.0
    P = mc_softmax(mean, var, E, by_rank=True, swap_top=True)
    np.testing.assert_allclose(P[0, 4], P[0, 6], rtol=1e-13)


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


def test_draws_are_the_permuted_images_of_their_base_rows():
    """Row ``g B + b`` is base row ``b`` under permutation ``g`` (identity first), and
    seven classes or more use the cyclic shifts whatever ``n_samples``."""
    rng = np.random.default_rng(3)
    E = symmetric_normal_draws(np.random.default_rng(3), 12, 3)  # 3! = 6: B = 2
    base = rng.standard_normal((2, 3))
    perms = list(itertools.permutations(range(3)))
    np.testing.assert_array_equal(E, np.concatenate([base[:, p] for p in perms]))
    E7 = symmetric_normal_draws(np.random.default_rng(0), 10**6, 7)
    assert E7.shape == (7 * -(-(10**6) // 7), 7)
