"""Matrix-free curvature: product, dense form, diagonal and solves against dense."""

from __future__ import annotations

import numpy as np
import pytest
from optim_helpers import mlr_features

from kernelkit.optim import (
    KroneckerCurvature,
    KroneckerPreconditioner,
    conjugate_gradient,
    multinomial_partition_bound,
    partition_bound,
)


def _operator(seed, m=30, p=6, n=4, lam=1e-2, scale=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, p))
    W = rng.normal(size=(p, n))
    mb = multinomial_partition_bound(W, X)
    scale = 1.0 / m if scale is None else scale
    return X, W, mb, KroneckerCurvature(X, mb.C, lam=lam, scale=scale)


@pytest.mark.parametrize("seed", range(4))
def test_dense_is_scaled_sum_of_alg_b_sigmas(seed):
    """todense() = scale * sum_j Sigma_j (Alg. B on e_y (x) x) + lam I."""
    X, W, _mb, A = _operator(seed, m=7, p=3, n=4, lam=0.3, scale=0.5)
    sig = partition_bound(W.T.ravel(), mlr_features(X, 4)).sigma.sum(0)
    np.testing.assert_allclose(A.todense(), 0.5 * sig + 0.3 * np.eye(12), atol=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_matvec_equals_dense(seed):
    _X, _W, _mb, A = _operator(seed)
    Ad = A.todense()
    V = np.random.default_rng(seed + 10).normal(size=(A.p, A.n))
    np.testing.assert_allclose(A.matvec(V).T.ravel(), Ad @ V.T.ravel(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(A.matvec(V.T.ravel()), Ad @ V.T.ravel(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(A @ V, A.matvec(V))
    np.testing.assert_allclose(A.diagonal().T.ravel(), np.diag(Ad), rtol=1e-12)
    assert A.shape == Ad.shape


@pytest.mark.parametrize("seed", range(3))
def test_matvec_equals_sum_of_kronecker_products(seed):
    """Independent of todense(): A = scale sum_j kron(C_j, x_j x_j^T) + lam I by np.kron."""
    X, _W, mb, A = _operator(seed, m=9, p=3, n=4, lam=0.2, scale=1 / 9)
    dense = sum(np.kron(C, np.outer(x, x)) for C, x in zip(mb.C, X, strict=True)) / 9
    dense += 0.2 * np.eye(12)
    V = np.random.default_rng(seed).normal(size=(3, 4))
    np.testing.assert_allclose(A.matvec(V).T.ravel(), dense @ V.T.ravel(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(A.todense(), dense, rtol=1e-12, atol=1e-14)


def test_float32_operator_stays_float32():
    X, _W, mb, A = _operator(1)
    A32 = KroneckerCurvature(
        X.astype(np.float32), mb.C.astype(np.float32), lam=1e-2, scale=1 / len(X)
    )
    V = np.random.default_rng(0).normal(size=(A.p, A.n))
    out = A32.matvec(V.astype(np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, A.matvec(V), rtol=1e-5, atol=1e-6)
    pre = KroneckerPreconditioner(X.astype(np.float32))
    sol, _ = A32.solve(V.astype(np.float32), rtol=1e-5, maxiter=200, precondition=pre)
    assert sol.dtype == np.float32
    exact = np.linalg.solve(A.todense(), V.T.ravel()).reshape(A.n, A.p).T
    np.testing.assert_allclose(sol, exact, rtol=1e-3, atol=1e-4 * np.abs(exact).max())


def test_per_parameter_ridge():
    X, W, mb, _ = _operator(0)
    lam = np.random.default_rng(1).uniform(0.1, 1.0, size=(X.shape[1], W.shape[1]))
    A = KroneckerCurvature(X, mb.C, lam=lam, scale=1 / len(X))
    V = np.ones_like(lam)
    np.testing.assert_allclose(A.matvec(V).T.ravel(), A.todense() @ V.T.ravel(), rtol=1e-12)


@pytest.mark.parametrize("precondition", [True, False, "jacobi", "kronecker", None])
def test_cg_equals_dense_solve(precondition):
    _X, _W, _mb, A = _operator(2, m=60, p=8, n=5, lam=1e-3)
    G = np.random.default_rng(3).normal(size=(8, 5))
    exact = np.linalg.solve(A.todense(), G.T.ravel()).reshape(5, 8).T
    dense, _ = A.solve(G, method="dense")
    np.testing.assert_allclose(dense, exact, rtol=1e-9, atol=1e-9)
    cg, info = A.solve(G, method="cg", rtol=1e-11, maxiter=1000, precondition=precondition)
    assert info["residual"] <= 1e-11
    np.testing.assert_allclose(cg, exact, rtol=1e-6, atol=1e-8 * np.abs(exact).max())
    # warm start at the solution: no iteration needed
    _, info2 = A.solve(G, method="cg", x0=cg, rtol=1e-9)
    assert info2["iterations"] == 0


def test_dense_solve_of_a_singular_curvature_raises_the_curvature_error():
    """Two samples and lam = 0: rank at most 2 (n - 1) = 6 < n p = 24, so the Cholesky
    factorisation fails; the error is the curvature's (it names the remedy), not
    NumPy's LinAlgError."""
    _X, _W, _mb, A = _operator(0, m=2, lam=0.0)
    with pytest.raises(ValueError, match=r"curvature is not positive definite.*use lam > 0") as e:
        A.solve(np.ones((A.p, A.n)), method="dense")
    assert not isinstance(e.value, np.linalg.LinAlgError)
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_cg_zero_rhs_and_bad_method():
    _, _, _, A = _operator(0)
    x, info = A.solve(np.zeros((A.p, A.n)))
    assert np.all(x == 0) and info["iterations"] == 0
    with pytest.raises(ValueError, match="method"):
        A.solve(np.ones((A.p, A.n)), method="lu")


def test_conjugate_gradient_generic():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(20, 20))
    A = M @ M.T + np.eye(20)
    b = rng.normal(size=20)
    x, _info = conjugate_gradient(lambda v: A @ v, b, rtol=1e-12, maxiter=200)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-8)


def test_operator_bad_shapes():
    with pytest.raises(ValueError, match="C must have shape"):
        KroneckerCurvature(np.ones((3, 2)), np.ones((4, 2, 2)))


def test_kronecker_preconditioner_is_exact_inverse_of_its_approximation():
    """For one sample (C_bar = C_1, M = x x^T) the preconditioner inverts A exactly."""
    X, _, mb, _ = _operator(5, m=1, p=4, n=3, lam=0.2)
    A = KroneckerCurvature(X, mb.C, lam=0.2, scale=1.0)
    apply = KroneckerPreconditioner(X).for_operator(A)
    G = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_allclose(A.matvec(apply(G)), G, rtol=1e-10, atol=1e-12)


def test_kronecker_preconditioner_speeds_up_cg():
    rng = np.random.default_rng(1)
    m, p, n = 400, 30, 6
    X = np.hstack([rng.gamma(0.5, size=(m, p - 1)) * rng.uniform(0.1, 5, p - 1), np.ones((m, 1))])
    mb = multinomial_partition_bound(rng.normal(size=(p, n)) * 0.1, X)
    A = KroneckerCurvature(X, mb.C, lam=1e-4, scale=1 / m)
    G = rng.normal(size=(p, n))
    exact = np.linalg.solve(A.todense(), G.T.ravel()).reshape(n, p).T
    xj, ij = A.solve(G, rtol=1e-8, maxiter=2000, precondition="jacobi")
    np.testing.assert_allclose(xj, exact, rtol=1e-5, atol=1e-6 * np.abs(exact).max())
    for rank in (None, 10):
        pre = KroneckerPreconditioner(X, rank=rank)
        xk, ik = A.solve(G, rtol=1e-8, maxiter=2000, precondition=pre)
        np.testing.assert_allclose(xk, exact, rtol=1e-5, atol=1e-6 * np.abs(exact).max())
        assert ik["iterations"] < ij["iterations"], rank


def test_truncated_preconditioner_is_spd_and_exact_on_leading_space():
    """rank r: symmetric positive definite; equals the full one when the tail of M is flat."""
    rng = np.random.default_rng(2)
    X, _, _, A = _operator(3, m=50, p=6, n=3, lam=0.1)
    apply = KroneckerPreconditioner(X, rank=2).for_operator(A)
    P = np.stack([apply(e.reshape(3, 6).T).T.ravel() for e in np.eye(18)], axis=1)
    np.testing.assert_allclose(P, P.T, atol=1e-12)
    assert np.linalg.eigvalsh(P).min() > 0
    # inputs whose second moment has eigenvalues (9, 4, 1, 1, 1, 1): rank 2 is exact
    Q = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    Xr = np.sqrt(6.0) * np.diag(np.sqrt([9.0, 4, 1, 1, 1, 1])) @ Q.T  # Xr^T Xr / 6 = Q L Q^T
    G = rng.normal(size=(6, 3))
    full = KroneckerPreconditioner(Xr).for_operator(A)(G)
    np.testing.assert_allclose(
        KroneckerPreconditioner(Xr, rank=2).for_operator(A)(G), full, rtol=1e-10, atol=1e-12
    )
    assert not np.allclose(KroneckerPreconditioner(Xr, rank=1).for_operator(A)(G), full)


def test_cg_check_x0_discards_a_bad_warm_start():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(10, 10))
    A = M @ M.T + np.eye(10)
    b = rng.normal(size=10)
    bad = -50 * np.linalg.solve(A, b)
    x1, _ = conjugate_gradient(lambda v: A @ v, b, x0=bad, maxiter=1, check_x0=True)
    x2, _ = conjugate_gradient(lambda v: A @ v, b, maxiter=1)
    np.testing.assert_allclose(x1, x2)


def test_preconditioner_bad_input():
    X, _, _, A = _operator(0)
    with pytest.raises(ValueError, match="precondition"):
        A.solve(np.ones((A.p, A.n)), precondition="ilu")
    with pytest.raises(ValueError, match="p ="):
        KroneckerPreconditioner(X[:, :2]).for_operator(A)
    with pytest.raises(ValueError, match="2-D"):
        KroneckerPreconditioner(np.ones(3))
    with pytest.raises(ValueError, match="rank"):
        KroneckerPreconditioner(X, rank=0)
