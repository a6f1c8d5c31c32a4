"""Pivoted Cholesky (Algorithm 1) guarantees (15)-(18) against the explicit kernel matrix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit.distributions import LowRankBasis, pivoted_cholesky


def _data(n=150, d=2, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


def _gram(kind, X, ls):
    if kind == "gaussian":
        return rbf_kernel(X, X, gamma=0.5 / ls**2)
    return np.exp(-np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)) / ls)


@pytest.mark.parametrize("kind", ["gaussian", "laplacian"])
@pytest.mark.parametrize("rel_tol", [1e-1, 1e-3, 1e-6])
def test_guarantees(kind, rel_tol):
    X = _data()
    K = _gram(kind, X, 1.0)
    res = pivoted_cholesky(kind, X, lengthscale=1.0, rel_tol=rel_tol)
    L, B, piv = res
    m = L.shape[1]
    assert L.shape == (len(X), m) and B.shape == (len(X), m) and piv.shape == (m,)
    R = K - L @ L.T
    # K - L L^T is PSD (up to round-off relative to |K|)
    assert np.linalg.eigvalsh(R).min() > -1e-10
    # (15) trace below the tolerance, and the reported residual is the true one
    assert np.trace(R) <= rel_tol * np.trace(K) + 1e-10
    assert res.trace_residual == pytest.approx(np.trace(R), abs=1e-9)
    # (17) B^T L = I and (18) K B = L
    np.testing.assert_allclose(B.T @ L, np.eye(m), atol=1e-8)
    np.testing.assert_allclose(K @ B, L, atol=1e-8)
    # (16) B lives on the pivot rows; pivot blocks are triangular
    Bd = B.toarray()
    others = np.setdiff1d(np.arange(len(X)), piv)
    assert np.all(Bd[others] == 0)
    np.testing.assert_allclose(np.triu(L[piv]), np.diag(np.diag(L[piv])), atol=1e-12)
    np.testing.assert_allclose(np.tril(res.B_piv, -1), 0.0)
    assert len(np.unique(piv)) == m


def test_absolute_tol_and_max_rank():
    X = _data(100)
    K = _gram("gaussian", X, 0.7)
    res = pivoted_cholesky("gaussian", X, lengthscale=0.7, tol=0.5)
    assert np.trace(K - res.L @ res.L.T) <= 0.5 + 1e-10
    res = pivoted_cholesky("gaussian", X, lengthscale=0.7, rel_tol=1e-12, max_rank=7)
    assert res.rank == 7


def test_callable_kernel_matches_named():
    X = _data(80)
    res_named = pivoted_cholesky("gaussian", X, lengthscale=0.8, rel_tol=1e-4)
    res_call = pivoted_cholesky(lambda A, B: rbf_kernel(A, B, gamma=0.5 / 0.8**2), X, rel_tol=1e-4)
    np.testing.assert_array_equal(res_named.pivots, res_call.pivots)
    np.testing.assert_allclose(res_named.L, res_call.L, atol=1e-10)


def test_numerical_rank_stop():
    # 5 distinct points repeated: rank 5, Algorithm 1 must stop there without NaN
    X = np.repeat(_data(5), 4, axis=0)
    res = pivoted_cholesky("gaussian", X, rel_tol=1e-15)
    assert res.rank == 5 and np.all(np.isfinite(res.B_piv))


@pytest.mark.parametrize("rotate", [True, False])
def test_low_rank_basis(rotate):
    X = _data(200)
    Xn = _data(30, seed=1)
    ls = 1.3
    basis = LowRankBasis("gaussian", ls, rel_tol=1e-6, rotate=rotate).fit(X)
    # the basis is Algorithm 1 on the rows in lexicographic order (ties, such as the
    # first pivot of the constant diagonal, to the smallest point), mapped back
    order = np.lexsort(X.T[::-1])
    res = pivoted_cholesky("gaussian", X[order], lengthscale=ls, rel_tol=1e-6)
    np.testing.assert_array_equal(basis.pivots_, order[res.pivots])
    B = np.zeros((len(X), res.rank))
    B[order] = res.B.toarray()  # rows of B in the order of X
    K = _gram("gaussian", X, ls)
    A = basis.train_features_
    if rotate:
        # A^T A = Lambda (diagonal), Q^T K Q = I with Q = B V
        np.testing.assert_allclose(A.T @ A, np.diag(basis.eigenvalues_), atol=1e-8)
        V = np.linalg.solve(res.B_piv, basis.coef_)
        Q = B @ V
        np.testing.assert_allclose(Q.T @ K @ Q, np.eye(basis.n_components_), atol=1e-8)
        np.testing.assert_allclose(K @ Q, A, atol=1e-8)
    # pivot-only evaluation: Psi(x) = Phi(x) Q equals k_piv(x) T, at train and new points
    np.testing.assert_allclose(basis.transform(X), A, atol=1e-9)
    Q = B @ np.linalg.solve(res.B_piv, basis.coef_)
    Kn = rbf_kernel(Xn, X, gamma=0.5 / ls**2)
    np.testing.assert_allclose(basis.transform(Xn), Kn @ Q, atol=1e-9)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bad_input(bad):
    X = _data(10)
    X[3, 1] = bad
    with pytest.raises(ValueError, match="X"):
        pivoted_cholesky("gaussian", X)


def test_bad_tolerances_and_kernels():
    X = _data(10)
    for kw in ({"tol": 0.0}, {"rel_tol": -1.0}, {"tol": np.nan}):
        with pytest.raises(ValueError, match="tol"):
            pivoted_cholesky("gaussian", X, **kw)
    with pytest.raises(ValueError, match="lengthscale"):
        pivoted_cholesky("gaussian", X, lengthscale=0.0)
    with pytest.raises(ValueError, match="kernel"):
        pivoted_cholesky("polynomial-ish", X)
    with pytest.raises(ValueError, match="2-D"):
        pivoted_cholesky("gaussian", X[:, 0])


def test_blocked_threaded_path(monkeypatch):
    """Several row blocks (threaded when CPUs allow): same guarantees, same factor."""
    from kernelkit.distributions import _cholesky

    n = 2 * _cholesky._BLOCK + 1234
    X = np.random.default_rng(3).standard_normal((n, 2))
    res = pivoted_cholesky("gaussian", X, lengthscale=1.5, rel_tol=1e-3)
    L, m = res.L, res.rank
    Kp = rbf_kernel(X, X[res.pivots], gamma=0.5 / 1.5**2)  # K[:, piv], (n, m)
    np.testing.assert_allclose(Kp @ res.B_piv, L, atol=1e-8)  # (18)
    np.testing.assert_allclose(res.B_piv.T @ L[res.pivots], np.eye(m), atol=1e-8)  # (17)
    trace_res = n - np.sum(L**2)
    assert trace_res == pytest.approx(res.trace_residual, rel=1e-8)
    assert trace_res <= 1e-3 * n
    monkeypatch.setattr(_cholesky, "_n_threads", lambda n, n_jobs=None: 1)
    serial = pivoted_cholesky("gaussian", X, lengthscale=1.5, rel_tol=1e-3)
    np.testing.assert_array_equal(serial.pivots, res.pivots)
    np.testing.assert_allclose(serial.L, L, atol=1e-12)


@settings(max_examples=25)
@given(
    n=st.integers(2, 40),
    d=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    ls=st.floats(0.05, 5.0),
    rel_tol=st.sampled_from([1e-1, 1e-4, 1e-10]),
    kind=st.sampled_from(["gaussian", "laplacian", "matern32", "matern52", "cauchy"]),
)
def test_guarantees_property(n, d, seed, ls, rel_tol, kind):
    """(15)-(18) for any data (duplicates included), kernel, lengthscale and tolerance."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((n, d)), 1)  # rounding creates duplicate points
    res = pivoted_cholesky(kind, X, lengthscale=ls, rel_tol=rel_tol)
    assert np.all(np.isfinite(res.L)) and np.all(np.isfinite(res.B_piv))
    from kernelkit.distributions._kernels import Kernel

    r = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)) / ls
    K = {
        "gaussian": np.exp(-0.5 * r**2),
        "laplacian": np.exp(-r),
        "matern32": (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r),
        "matern52": (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r),
        "cauchy": 1 / (1 + r**2),
    }[kind]
    np.testing.assert_allclose(Kernel(kind, ls)(X, X), K, atol=1e-12)
    L, B, _ = res
    m = res.rank
    R = K - L @ L.T
    assert np.linalg.eigvalsh(R).min() > -1e-8
    assert np.trace(R) <= max(rel_tol * n, 1e-12 * n) + 1e-8
    scale = max(1.0, np.abs(res.B_piv).max())
    np.testing.assert_allclose(B.T @ L, np.eye(m), atol=1e-9 * scale)
    np.testing.assert_allclose(K @ B, L, atol=1e-9 * scale)


def test_factored_statistics_match_rotated_features():
    """A = L V is never stored: A^T 1, column extremes, A^T F and P A^T from the factor."""
    from kernelkit.distributions._basis import dot_train, train_cross, train_dot, train_extremes

    X, Y = _data(300), _data(300, seed=2)
    bx = LowRankBasis("gaussian", 0.9, rel_tol=1e-5).fit(X)
    by = LowRankBasis("gaussian", 1.4, rel_tol=1e-5).fit(Y)
    # A computed independently: pivot-column kernel matrix times T = B[piv] V
    Ax = _gram("gaussian", X, 0.9)[:, bx.pivots_] @ bx.coef_
    Ay = _gram("gaussian", Y, 1.4)[:, by.pivots_] @ by.coef_
    np.testing.assert_allclose(bx.train_features_, Ax, atol=1e-9)
    np.testing.assert_allclose(bx.train_sums_, Ax.sum(axis=0), atol=1e-8)
    lo, hi = train_extremes(bx)
    np.testing.assert_allclose(lo, Ax.min(axis=0), atol=1e-9)
    np.testing.assert_allclose(hi, Ax.max(axis=0), atol=1e-9)
    F = np.random.default_rng(0).standard_normal((300, 4))
    np.testing.assert_allclose(train_dot(bx, F), Ax.T @ F, atol=1e-8)
    P = F[:7, :1] * np.ones((1, bx.n_components_))
    np.testing.assert_allclose(dot_train(bx, P), P @ Ax.T, atol=1e-8)
    np.testing.assert_allclose(train_cross(by, bx), Ay.T @ Ax, atol=1e-8)


def test_blocked_products_threaded_and_deterministic(monkeypatch):
    """Several column blocks: the block sums equal one product, whatever the threads."""
    from kernelkit.distributions import _linalg

    rng = np.random.default_rng(4)
    n = 2 * _linalg._BLOCK + 777
    A, B, F = rng.standard_normal((5, n)), rng.standard_normal((3, n)), rng.standard_normal((n, 2))
    G, s = _linalg.gram_and_sums(A)
    np.testing.assert_allclose(G, A @ A.T, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(s, A.sum(axis=1), atol=1e-9)
    C = _linalg.cross(A, B)
    np.testing.assert_allclose(C, A @ B.T, atol=1e-9)
    np.testing.assert_allclose(_linalg.right_matmul(A, F), A @ F, atol=1e-9)
    P = rng.standard_normal((4, 5))
    np.testing.assert_allclose(_linalg.left_matmul(P, A), P @ A, atol=1e-12)
    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "1")  # one thread: bitwise the same sums
    np.testing.assert_array_equal(_linalg.gram_and_sums(A)[0], G)
    np.testing.assert_array_equal(_linalg.cross(A, B), C)
