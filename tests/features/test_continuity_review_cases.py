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
