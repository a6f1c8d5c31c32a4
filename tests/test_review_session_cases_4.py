"""Review of the day's changes, fourth session: cases the merged changes missed.

- The low-rank bases sort the rows lexicographically before the pivoted Cholesky; the
  sort was ``np.lexsort`` over all d columns, d stable passes over n rows whatever the
  ties: at n = 20000, d = 200 it doubled ``LowRankBasis.fit``. Columns after the first
  are now read only for the rows still tied on the ones before.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import LowRankBasis, _basis


def _sorted_rows_seen(X):
    """The rows ``_in_row_order`` hands to the factorisation."""
    seen = []

    def factorise(Xs):
        seen.append(Xs.copy())
        return LowRankBasis(lengthscale=1.0, max_rank=5)._fit_pivots(Xs)

    _basis._in_row_order(X, factorise)
    return seen[0]


@pytest.mark.parametrize("shape", [(1, 3), (2, 1), (50, 4), (200, 6)])
def test_row_order_is_lexicographic_with_ties_in_every_column(shape):
    # small integers: many rows tie on the first columns, some on all (duplicates)
    X = np.random.default_rng(0).integers(0, 3, size=shape).astype(np.float64)
    X[len(X) // 2 :, 0] = -0.0 * X[len(X) // 2 :, 0]  # -0.0 ties with 0.0, as in lexsort
    expected = X[np.lexsort(X.T[::-1])]
    np.testing.assert_array_equal(_sorted_rows_seen(X), expected)  # exact: a permutation


def test_row_order_reads_later_columns_only_for_tied_rows(monkeypatch):
    # continuous data: no two rows tie on the first column, so the sort must not pass
    # over the other d - 1 columns of all n rows (np.lexsort of all the columns did)
    n, d = 3000, 50
    X = np.random.default_rng(1).standard_normal((n, d))
    X[:10, 0] = X[10:20, 0]  # 20 rows tie (in pairs) on the first column
    read = []
    lexsort = np.lexsort

    def spy(keys, *args, **kwargs):
        keys = np.asarray(keys)
        read.append(keys.size)
        return lexsort(keys, *args, **kwargs)

    monkeypatch.setattr(np, "lexsort", spy)
    Xs = _sorted_rows_seen(X)
    monkeypatch.undo()
    np.testing.assert_array_equal(Xs, X[np.lexsort(X.T[::-1])])
    # at most two keys (group, column) for the 20 tied rows per further column read
    assert sum(read) <= 2 * 20 * (d - 1)
