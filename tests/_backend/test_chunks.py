"""kernelkit._backend.chunks: the one implementation of chunked input and row reductions
shared by the estimators and the distributions."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kernelkit._backend.chunks import (
    as_dask_rows,
    check_block,
    is_chunked,
    iter_block_pairs,
    map_row_chunks,
    reduce_blocks,
    reduce_rows,
)


def _sums(index, Xb, Yb):
    return Xb.T @ Xb, Xb.T @ Yb, len(Xb)  # (d, d), (d, T), rows


def _add(u, v):
    return tuple(a + b for a, b in zip(u, v, strict=True))


def test_is_chunked():
    assert not is_chunked(np.zeros((2, 2))) and not is_chunked([[1.0]])
    assert is_chunked(iter([])) and is_chunked(x for x in ())


def test_check_block_policies_and_messages():
    assert check_block([1, 2], "Y", 0).shape == (2, 1)  # vector="column"
    assert check_block([1.0, 2.0], "y", 0, vector="keep").shape == (2,)
    with pytest.raises(ValueError, match=r"own: X: block 3 must be 2-D"):
        check_block([1.0, 2.0], "X", 3, owner="own", vector="error")
    with pytest.raises(ValueError, match=r"X: block 1 has shape \(2, 3\); expected 2 columns"):
        check_block(np.ones((2, 3)), "X", 1, n_columns=2)
    with pytest.raises(TypeError, match="real numbers"):
        check_block(np.array([["a"]]), "X", 0)
    with pytest.raises(ValueError, match="X: block 2 contains NaN"):
        check_block(np.array([[np.nan]]), "X", 2)
    f32 = np.ones((2, 2), dtype=np.float32)
    assert check_block(f32, "X", 0).dtype == np.float64
    assert check_block(f32, "X", 0, dtype=None).dtype == np.float32
    assert check_block(np.ones((2, 2), dtype=int), "X", 0, dtype=None).dtype == np.float64


def test_iter_block_pairs_checks_every_pair():
    X, Y = np.ones((6, 2)), np.ones(6)
    pairs = list(iter_block_pairs([(X[:4], Y[:4]), (X[4:], Y[4:])], "own"))
    assert [p[1].shape for p in pairs] == [(4, 1), (2, 1)]
    with pytest.raises(ValueError, match="empty"):
        list(iter_block_pairs(iter([]), "own"))
    with pytest.raises(TypeError, match=r"\(X_block, y_block\) pairs; item 0"):
        list(iter_block_pairs([X], "own", ("X", "y")))
    with pytest.raises(ValueError, match="4 rows of X but 3 of Y"):
        list(iter_block_pairs([(X[:4], Y[:3])], "own"))
    with pytest.raises(ValueError, match="columns"):
        list(iter_block_pairs([(X[:2], Y[:2]), (X[2:4, :1], Y[2:4])], "own"))
    with pytest.raises(ValueError, match="block 0 had 1-D blocks"):
        blocks = [(X[:2], Y[:2]), (X[2:4], np.ones((2, 2)))]
        list(iter_block_pairs(blocks, "own", vector=("error", "keep")))


@pytest.mark.parametrize("n_jobs", [1, 2, -1])
def test_reduce_blocks_is_an_ordered_fold(n_jobs):
    x = np.random.default_rng(0).standard_normal(1000)
    total = reduce_blocks(lambda a, b: x[a:b].sum(), len(x), 64, n_jobs=n_jobs)
    want = 0.0
    for a in range(0, len(x), 64):  # block order, left to right: bitwise the same
        want = x[a : a + 64].sum() if a == 0 else want + x[a : a + 64].sum()
    assert total == want


def test_reduce_rows_numpy_and_dask_agree():
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((1000, 3)), rng.standard_normal((1000, 2))
    ref = (X.T @ X, X.T @ Y, 1000)
    one = reduce_rows(_sums, [X, Y], _add, block=128, n_jobs=1)
    two = reduce_rows(_sums, [X, Y], _add, block=128, n_jobs=2)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)  # independent of the threads
    Xd = as_dask_rows(da.from_array(X, chunks=(300, 2)), "X")
    Yd = as_dask_rows(Y, "Y", rows_like=Xd)
    assert Xd.chunks == ((300, 300, 300, 100), (3,)) and Yd.chunks[0] == Xd.chunks[0]
    with dask.config.set(scheduler="threads"):
        lazy = reduce_rows(_sums, [Xd, Yd], _add)
    for got, want, other in zip(lazy, ref, one, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-10)
        np.testing.assert_allclose(other, want, atol=1e-10)


def test_as_dask_rows_checks_lazily_and_map_row_chunks():
    da = pytest.importorskip("dask.array")
    X = da.from_array(np.arange(12.0).reshape(6, 2), chunks=(4, 1))
    with pytest.raises(ValueError, match="y has 5 rows, expected 6"):
        as_dask_rows(np.ones(5), "y", rows_like=X, vector="keep")
    with pytest.raises(ValueError, match="own: X must be 2-D"):
        as_dask_rows(da.ones(4, chunks=2), "X", owner="own", vector="error")
    with pytest.raises(ValueError, match="3 features"):
        as_dask_rows(X, "X", n_features=3)
    y = as_dask_rows(np.ones(6), "y", rows_like=X, vector="keep")
    assert y.ndim == 1 and y.chunks == ((4, 2),)
    sums = map_row_chunks(X, lambda b: b.sum(axis=1))
    pairs = map_row_chunks(X, lambda b: 2 * b, 2)
    np.testing.assert_array_equal(sums.compute(), np.arange(12.0).reshape(6, 2).sum(axis=1))
    assert pairs.shape == (6, 2) and pairs.compute()[5, 1] == 22.0


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_reduce_blocks_folds_as_it_goes(n_jobs):
    """Regression: all block results were kept until the end (a list of n / block
    statistics); now each wave of one block per thread is folded before the next."""
    lock, live = threading.Lock(), [0, 0]  # results alive now, most alive at once

    def fn(a, b):
        with lock:
            live[0] += 1
            live[1] = max(live[1], live[0])
        return b - a

    def combine(u, v):
        with lock:
            live[0] -= 1  # two results in, one out
        return u + v

    assert reduce_blocks(fn, 1000, 50, combine, n_jobs=n_jobs) == 1000  # 20 blocks
    assert live == [1, n_jobs + 1]
