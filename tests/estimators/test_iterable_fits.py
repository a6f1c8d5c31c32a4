"""Ridge / GP fits on an iterable of ``(X_block, y_block)`` pairs, and the feature map.

A sequence of blocks (list, tuple, any ``collections.abc.Sequence``) can be read again:
a FAVOR# map that reads the moments of its data (GERF, SDERF) is fitted on the moments of
every block (one pass), then the statistics take the usual pass, so the model is the
in-memory fit on the concatenated blocks to rounding. A generator or iterator is read
once: its map is fitted on the first non-empty block, as before. Maps that read the
dimension only, and FAVOR# maps that need no moments, never read a sequence twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from sklearn.base import clone

from kernelkit.estimators import RandomFeatureGPRegressor, RandomFeatureRidge
from kernelkit.features import GERF, SDERF, PositiveRF, RandomFourierFeatures

ESTIMATORS = {
    "ridge": lambda fm: RandomFeatureRidge(fm, alpha=0.1),
    "gp": lambda fm: RandomFeatureGPRegressor(fm, noise=0.1, amplitude=1.5),
}
FAVOR_MAPS = {
    "SDERF": SDERF(n_features=32, kernel="gaussian", random_state=0),
    "GERF": GERF(n_features=32, lengthscale=1.7, random_state=0),  # inputs / lengthscale
}


class Blocks(Sequence):
    """A sequence of pairs (not a list) that counts how often it is read from the start."""

    def __init__(self, pairs):
        self.pairs, self.passes = list(pairs), 0

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        self.passes += i == 0
        return self.pairs[i]


def _data(n=1200, d=4, seed=5):
    rng = np.random.default_rng(seed)
    X = 0.3 * rng.standard_normal((n, d))
    X[400:] = 2.5 * X[400:] + 0.2  # later blocks change the moments
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    return X, y


def _pairs(X, y):
    # an empty block first, then blocks of uneven size
    cuts = [0, 0, 400, 700, len(X)]
    return [(X[a:b], y[a:b]) for a, b in itertools.pairwise(cuts)]


@pytest.mark.parametrize("container", ["list", "tuple", "Sequence"])
@pytest.mark.parametrize("fm_name", FAVOR_MAPS)
@pytest.mark.parametrize("est_name", ESTIMATORS)
def test_a_sequence_of_blocks_fits_a_favor_map_on_the_moments_of_every_block(
    est_name, fm_name, container
):
    """The map equals the in-memory fit on all rows, not the fit on the first block (which
    the sequence got before: a list or tuple was even refused as array-like X)."""
    X, y = _data()
    pairs = _pairs(X, y)
    given = {"list": pairs, "tuple": tuple(pairs), "Sequence": Blocks(pairs)}[container]
    est = ESTIMATORS[est_name](FAVOR_MAPS[fm_name])
    model = clone(est).fit(given, None)
    ref = clone(est).set_params(solver="primal").fit(X, y)
    if container == "Sequence":
        assert given.passes == 2  # the moments, then the statistics
    # moments summed block by block instead of in the in-memory row blocks: relative
    # round-off ~ n eps = 3e-13, through the d x d fit (eigendecomposition for SDERF)
    np.testing.assert_allclose(model.feature_map_.A_, ref.feature_map_.A_, rtol=1e-11)
    if ref.feature_map_.B_x_ is not None:  # SDERF: a rotation, up to the signs of its rows
        np.testing.assert_allclose(
            np.abs(model.feature_map_.B_x_), np.abs(ref.feature_map_.B_x_), atol=1e-10
        )
    # the same model up to the order of the sums (cond(G) n eps, G the regularised 32 x 32
    # Gram of the features)
    np.testing.assert_allclose(model.predict(X[::20]), ref.predict(X[::20]), atol=1e-8)
    first = clone(FAVOR_MAPS[fm_name]).fit(X[:400])  # the first non-empty block only
    assert np.abs(first.A_ - ref.feature_map_.A_).max() > 1e-3  # the test can fail
    assert (
        np.abs(model.predict(X[::20]) - clone(est).fit(iter(pairs), None).predict(X[::20])).max()
        > 1e-4
    )


@pytest.mark.parametrize("est_name", ESTIMATORS)
def test_a_generator_is_read_once_and_its_map_fitted_on_the_first_block(est_name):
    """A one-shot iterable cannot give the moments before the statistics: each block is
    read once, and the map is the fit on the first non-empty block."""
    X, y = _data()
    pairs = _pairs(X, y)
    read = []

    def blocks():
        for i, pair in enumerate(pairs):
            read.append(i)
            yield pair

    fm = FAVOR_MAPS["SDERF"]
    model = ESTIMATORS[est_name](fm).fit(blocks(), None)
    assert read == [0, 1, 2, 3]
    first = clone(fm).fit(X[:400])
    np.testing.assert_array_equal(model.feature_map_.A_, first.A_)
    np.testing.assert_array_equal(model.feature_map_.B_x_, first.B_x_)
    assert model.n_samples_seen_ == len(X)


@pytest.mark.parametrize(
    "fm",
    [
        RandomFourierFeatures(n_features=32, random_state=0),
        PositiveRF(n_features=32, random_state=0),
    ],
    ids=["RandomFourierFeatures", "PositiveRF"],
)
def test_maps_that_read_no_moments_read_a_sequence_once(fm):
    """RandomFourierFeatures reads the dimension only and PositiveRF needs no moments
    (``fit_reads`` "shape" / "moments" without moments): one pass, and the model of the
    sequence is bit for bit that of the iterator over it."""
    X, y = _data()
    pairs = _pairs(X, y)
    sequence = Blocks(pairs)
    model = RandomFeatureRidge(fm, alpha=0.1).fit(sequence, None)
    assert sequence.passes == 1
    once = RandomFeatureRidge(fm, alpha=0.1).fit(iter(pairs), None)
    np.testing.assert_array_equal(model.coef_, once.coef_)
    np.testing.assert_array_equal(model.intercept_, once.intercept_)


def test_a_bad_block_of_a_sequence_is_named_by_the_moment_pass():
    """The moment pass checks every block as the statistics pass does."""
    X, y = _data()
    pairs = _pairs(X, y)
    bad = X[700:].copy()
    bad[5, 1] = np.nan
    pairs[3] = (bad, y[700:])
    with pytest.raises(ValueError, match="X: block 3 contains NaN"):
        RandomFeatureRidge(FAVOR_MAPS["SDERF"]).fit(pairs, None)
    pairs[3] = (X[700:, :3], y[700:])
    with pytest.raises(ValueError, match="block 3 has shape"):
        RandomFeatureRidge(FAVOR_MAPS["SDERF"]).fit(pairs, None)
