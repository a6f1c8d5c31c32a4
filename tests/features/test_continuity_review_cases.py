"""Review cases: SDERF's features stay continuous in its fitted attributes.

SDERF turns its projections by ``B_x_`` (``Q3^T``). A user who edits ``B_x_``, ``B_y_``
and calls ``_build()`` must not switch the features to another convention when the edit
leaves ``B_x_`` orthogonal only to rounding, or ``B_y_`` a copy of ``B_x_`` rather than
the same array: that would be another draw of the projections, an O(1) change of the log
features for an edit of relative size 1e-12.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kernelkit.features import SDERF

D = 6


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X, Y = 0.4 * rng.standard_normal((50, D)), 0.3 * rng.standard_normal((40, D))
    return SDERF(32, random_state=0).fit(X, Y=Y), X


def _rebuilt(fm, B_x, B_y):
    out = copy.deepcopy(fm)
    out.B_x_, out.B_y_ = B_x, B_y
    out._build()
    return out


def test_sderf_features_unchanged_when_B_y_is_a_copy(fitted):
    """``B_y_ = B_x_.copy()`` is the same parameters: the same features, to rounding
    (log features O(10), a few d x d products in float64: 1e-12)."""
    fm, X = fitted
    base = fm.log_transform(X)
    edited = _rebuilt(fm, fm.B_x_, fm.B_x_.copy())
    np.testing.assert_allclose(edited.log_transform(X), base, rtol=0, atol=1e-12)
    np.testing.assert_allclose(edited.log_transform_y(X), base, rtol=0, atol=1e-12)


@pytest.mark.parametrize("size", [1e-12, 1e-9, 1e-7])
def test_sderf_features_move_linearly_with_an_edit_of_the_rotation(fitted, size):
    """A perturbation of relative size ``size`` of the rotation (past the 1e-12
    orthogonality tolerance for every size here; float32 rounding of it is 6e-8) moves
    the log features by about ``size`` times their sensitivity: ``|w| |x|`` for the
    linear term and ``|a| |w|^2`` for the constant, both below 20 here, so at most
    ``100 size`` (with room for the first-order constant), not O(1)."""
    fm, X = fitted
    base = fm.log_transform(X)
    E = np.random.default_rng(1).standard_normal((D, D))
    B = fm.B_x_ + size * E / np.linalg.norm(E, 2)
    for edited in (_rebuilt(fm, B, B), _rebuilt(fm, B, B.copy())):
        moved = np.max(np.abs(edited.log_transform(X) - base))
        assert moved < 100 * size, moved


def _spectrum_data(eigenvalues, n=400):
    """Rows whose second moment is exactly ``diag(eigenvalues) / 4`` in a random basis
    (centred Gaussian rows whitened, then scaled). Fitted with ``Y = X``, SDERF's ``N =
    2 M_x`` has eigenvalues ``eigenvalues / 2``: their ratios and gaps relative to the
    largest are those of ``eigenvalues``."""
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((n, D))
    Z -= Z.mean(0)
    Z = Z @ np.linalg.inv(np.linalg.cholesky(Z.T @ Z / n)).T
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return (Z * np.sqrt(eigenvalues) * 0.5) @ Q.T


def _sderf_log_features(eigenvalues, X0):
    X = _spectrum_data(np.asarray(eigenvalues, dtype=np.float64))
    return SDERF(64, random_state=3).fit(X, Y=X).log_transform(X0)


@pytest.mark.parametrize(
    "spectrum",
    [
        # two eigenvalues 1e-5 of the largest apart: the fit's cluster threshold
        # (gap / largest = delta / (1 + delta) = 1e-5 at delta = 1e-5 / (1 - 1e-5))
        lambda s: [1.0, 1.0 + s * 1e-5 / (1.0 - 1e-5), 0.7, 0.5, 0.4, 0.3],
        # the smallest eigenvalue 1e-5 of the largest: the fit's null-space threshold
        lambda s: [1.0, 0.9, 0.7, 0.5, 0.4, s * 1e-5],
    ],
    ids=["cluster", "null"],
)
def test_sderf_features_are_continuous_across_the_fit_thresholds(spectrum):
    """Moving one eigenvalue by a relative 2e-7 across a threshold of the fit (an absolute
    2e-12 of the largest eigenvalue, 1) moves the log features by first order: ``a`` by
    at most 2 (the fit's slope there) times |A*'| <= 1 times that, the log features by
    ``|w|^2`` (about d = 6, at most 30 over 64 draws) times it: below 1.2e-10; 1e-8 leaves
    room for the rounding of the whitened data (4e-12 seen). A hard threshold (cluster
    values set to their mean, null values to 0) moved them by 1e-5 and 2e-5: a jump of
    1e-5 of the largest eigenvalue's ``a`` whatever the data change."""
    X0 = _spectrum_data(np.array([1.0, 1.0, 0.7, 0.5, 0.4, 0.3]))
    below = _sderf_log_features(spectrum(1.0 - 1e-7), X0)
    above = _sderf_log_features(spectrum(1.0 + 1e-7), X0)
    assert np.max(np.abs(above - below)) < 1e-8
