"""Review of the day's changes, fourth session: cases the merged changes missed.

- The low-rank bases sort the rows lexicographically before the pivoted Cholesky; the
  sort was ``np.lexsort`` over all d columns, d stable passes over n rows whatever the
  ties: at n = 20000, d = 200 it doubled ``LowRankBasis.fit``. Columns after the first
  are now read only for the rows still tied on the ones before.
- ``TrigRF.transform`` of a float16 tensor formed the row scale ``exp(|x|^2)`` in float16,
  which overflows from ``|x|^2 ~ 11`` where the features, ``cos(.) exp(|x|^2) /
  sqrt(M / 2)``, are still representable: they came out inf, and the new overflow
  warning said the features overflow. The product is now formed in float32 and rounded
  once; the warning fires where a rounded feature is inf.
- The bipolar hybrids' overflow warning was raised inside each row block of
  ``transform`` (blocks of ~2^19 features, on kernelkit's threads): a 6000-row transform
  warned 94 times, from worker threads pointing at ``concurrent/futures/thread.py``
  rather than the user's line. The blocks now report and ``transform`` warns once.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.distributions import LowRankBasis, _basis
from kernelkit.features import AngularHybridRF, GaussianHybridRF, NormalizedGaussianHybridRF
from kernelkit.features.softmax import TrigRF


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


def _rows_of_sq_norm(sq_norm, n=6, d=3, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    return X * np.sqrt(sq_norm) / np.linalg.norm(X, axis=1, keepdims=True)


def test_trigrf_float16_tensor_features_finite_where_representable(recwarn):
    torch = pytest.importorskip("torch")
    # |x|^2 = 24: the scale exp((1/2 + alpha) |x|^2) = exp(12) ~ 1.6e5 is
    # above float16's max (65504), but the features, scale / sqrt(M / 2) = 1.6e5 / 16,
    # are below it
    X = _rows_of_sq_norm(24.0)
    fm = TrigRF(n_features=512, random_state=0).fit(X)
    X16 = torch.tensor(X, dtype=torch.float16)
    F = fm.transform(X16)
    assert F.dtype == torch.float16
    assert not [w for w in recwarn if "overflow" in str(w.message)]
    ref = fm.transform(X16.double().numpy())  # float64 features of the rounded input
    assert np.abs(ref).max() < 65504 / 2
    # the cosines are float16's: the phase [x, 1] . [w; theta] (d + 1 products, and
    # W rounded to float16) is off by at most (d + 2) u (|x| . |w| + |theta|), the cosine
    # by that plus its own rounding (u); the scale (float32) is off by ~1e-6 relative,
    # and the product is rounded once more (u |feature|). u = 2^-11
    u = 2.0**-11
    Xa = np.abs(X16.double().numpy())
    dp = (X.shape[1] + 2) * u * (Xa @ np.abs(fm.projection_).T + np.abs(fm.offset_))
    scale = np.exp(0.5 * np.sum(X16.double().numpy() ** 2, axis=1))[:, None]
    bound = (dp + 2 * u) * scale * np.sqrt(2.0 / fm.n_features) + u * np.abs(ref)
    assert np.all(np.abs(F.double().numpy() - ref) <= bound)


def test_trigrf_float16_tensor_warns_where_features_overflow():
    torch = pytest.importorskip("torch")
    X = _rows_of_sq_norm(40.0)  # exp(20) / 16 ~ 3e7: beyond float16
    fm = TrigRF(n_features=512, random_state=0).fit(X)
    with pytest.warns(RuntimeWarning, match="overflow torch.float16 to inf"):
        F = fm.transform(torch.tensor(X, dtype=torch.float16))
    assert not bool(torch.isfinite(F).all())


@pytest.mark.parametrize(
    "cls", [AngularHybridRF, GaussianHybridRF, NormalizedGaussianHybridRF], ids=lambda c: c.__name__
)
@pytest.mark.parametrize("side", ["transform", "transform_y"])
def test_bipolar_overflow_warns_once_at_the_user_line_over_many_row_blocks(cls, side):
    # pixel values: every row's trigonometric block overflows float64; 3000 rows of
    # ~2000+ features are several row blocks of the NumPy path
    X = np.random.default_rng(0).integers(0, 256, (3000, 16)).astype(float)
    fm = cls(random_state=0).fit(X[:20])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = getattr(fm, side)(X)
    assert out.shape[0] * out.shape[1] > 4 * (1 << 19)  # several blocks indeed
    assert np.isinf(out).any()
    assert [(w.filename, w.category) for w in caught] == [(__file__, RuntimeWarning)]
