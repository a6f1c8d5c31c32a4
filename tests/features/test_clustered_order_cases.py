"""ClusteredHybridRF's fit is a function of the set of rows: the k-means input is put in
a canonical row order first (bytes of each row, negative zeros mapped to zeros)."""

import numpy as np
import pytest

from kernelkit.features import ClusteredHybridRF


def _data(seed=0):
    rng = np.random.default_rng(seed)
    # no cluster structure (k-means' local optimum depends on its start, so on the order
    # of the rows it seeds from), with exact zeros and duplicated rows (ties in a sort)
    X = rng.uniform(-1.0, 1.0, (150, 3))
    X[::3, 0] = 0.0
    X[::5, 1] = 0.0
    return np.concatenate([X, X[:20]])


@pytest.mark.parametrize("seed", [0, 1])
def test_fit_ignores_row_order_with_duplicates_and_zeros(seed):
    X = _data(seed)
    perm = np.random.default_rng(seed + 10).permutation(len(X))
    a = ClusteredHybridRF(n_clusters=6, n_init=1, random_state=0).fit(X)
    b = ClusteredHybridRF(n_clusters=6, n_init=1, random_state=0).fit(X[perm])
    # same centres in the same order (k-means on the same ordered rows: bit for bit)
    np.testing.assert_array_equal(a.centers_x_, b.centers_x_)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))


def test_negative_zeros_fit_as_zeros():
    X = _data()
    Xn = X.copy()
    rows = np.flatnonzero(X[:, 0] == 0.0)[::2]
    Xn[rows, 0] = -0.0  # equal values, other bytes: half of column 0's zeros
    assert np.signbit(Xn[rows, 0]).all()
    a = ClusteredHybridRF(n_clusters=6, n_init=1, random_state=0).fit(X)
    b = ClusteredHybridRF(n_clusters=6, n_init=1, random_state=0).fit(Xn)
    np.testing.assert_array_equal(a.centers_x_, b.centers_x_)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_canonical_row_order_is_the_lexicographic_order_of_the_values(dtype):
    from kernelkit.features.hybrid.clustered import _canonical_row_order

    rng = np.random.default_rng(5)
    X = np.concatenate(
        [
            rng.standard_normal((200, 4)),  # both signs
            np.round(rng.standard_normal((200, 4))),  # ties in leading columns, zeros
            np.eye(4)[rng.integers(0, 4, 50)],  # one-hot
            [[-0.0, 1.0, -1e-300, 1e300], [0.0, 1.0, 0.0, -1e300]],  # signed zeros, extremes
        ]
    ).astype(dtype)
    order = _canonical_row_order(X)
    ref = np.lexsort(X.astype(np.float64).T[::-1])  # numeric, column 0 first
    np.testing.assert_array_equal(X[order], X[ref])
