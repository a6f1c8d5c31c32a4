"""The multinomial bound, matrix-free curvature and solver steps on NumPy and torch alike."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.optim import (
    KroneckerCurvature,
    KroneckerPreconditioner,
    beta,
    multinomial_gradient,
    multinomial_objective,
    multinomial_partition_bound,
    sgd_step,
    spfb_step,
)


def _data(seed=0, m=40, p=5, n=4):
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.normal(size=(m, p - 1)) * 2, np.ones((m, 1))])
    y = rng.integers(0, n, size=m)
    return X, y, rng.normal(size=(p, n))


def test_bound_and_operator_match_numpy(backend):
    X, _, W = _data()
    ref = multinomial_partition_bound(W, X)
    out = multinomial_partition_bound(backend.asarray(W), backend.asarray(X))
    for a, b in zip(out, ref, strict=True):
        np.testing.assert_allclose(backend.to_numpy(a), b, rtol=1e-12, atol=1e-14)
    A_ref = KroneckerCurvature(X, ref.C, lam=1e-2, scale=1 / 40)
    A = KroneckerCurvature(backend.asarray(X), out.C, lam=1e-2, scale=1 / 40)
    V = np.random.default_rng(1).normal(size=(5, 4))
    np.testing.assert_allclose(
        backend.to_numpy(A.matvec(backend.asarray(V))), A_ref.matvec(V), rtol=1e-12
    )
    np.testing.assert_allclose(backend.to_numpy(A.diagonal()), A_ref.diagonal(), rtol=1e-12)
    np.testing.assert_allclose(A.todense(), A_ref.todense(), rtol=1e-12)
    exact = np.linalg.solve(A_ref.todense(), V.T.ravel()).reshape(4, 5).T
    for pre in ("jacobi", KroneckerPreconditioner(backend.asarray(X), rank=3)):
        sol, _ = A.solve(backend.asarray(V), rtol=1e-11, maxiter=500, precondition=pre)
        np.testing.assert_allclose(backend.to_numpy(sol), exact, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("linear_solver", ["cg", "dense"])
def test_steps_match_numpy(backend, linear_solver):
    X, y, W = _data(2)
    Xb, yb, Wb = backend.asarray(X), backend.asarray(y), backend.asarray(W)
    ref, _ = spfb_step(W, X, y, 1e-2, 0.5, linear_solver=linear_solver, rtol=1e-12, maxiter=500)
    out, info = spfb_step(
        Wb, Xb, yb, 1e-2, 0.5, linear_solver=linear_solver, rtol=1e-12, maxiter=500
    )
    np.testing.assert_allclose(backend.to_numpy(out), ref, rtol=1e-8, atol=1e-10)
    assert info["batch_loss"] == pytest.approx(multinomial_objective(W, X, y, 1e-2), rel=1e-12)
    np.testing.assert_allclose(
        backend.to_numpy(sgd_step(Wb, Xb, yb, 1e-2, 0.3)[0]),
        sgd_step(W, X, y, 1e-2, 0.3)[0],
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        backend.to_numpy(multinomial_gradient(Wb, Xb, yb, 0.1)),
        multinomial_gradient(W, X, y, 0.1),
        rtol=1e-12,
    )


def test_float32_stays_float32(backend):
    X, y, W = _data(3)
    X32, W32 = backend.asarray(X, "float32"), backend.asarray(W, "float32")
    bnd = multinomial_partition_bound(W32, X32)
    assert backend.dtype_name(bnd.C) == "float32"
    np.testing.assert_allclose(
        backend.to_numpy(bnd.C), multinomial_partition_bound(W, X).C, atol=1e-4
    )
    ref, _ = spfb_step(W, X, y, 1e-2, 1.0, rtol=1e-6, maxiter=500)
    for solver in ("cg", "dense"):  # dense factorises in float64, returns float32
        out, info = spfb_step(
            W32, X32, backend.asarray(y), 1e-2, 1.0, rtol=1e-6, maxiter=500, linear_solver=solver
        )
        assert backend.dtype_name(out) == "float32"
        assert backend.dtype_name(info["direction"]) == "float32"
        np.testing.assert_allclose(backend.to_numpy(out), ref, rtol=1e-3, atol=1e-4)
    out, _ = sgd_step(W32, X32, backend.asarray(y), 1e-2, 0.3)
    assert backend.dtype_name(out) == "float32"


def test_beta_on_backend(backend):
    u = np.array([-np.inf, -3.0, 0.0, 1e-6, 2.0, np.inf])
    np.testing.assert_allclose(backend.to_numpy(beta(backend.asarray(u))), beta(u), rtol=1e-14)
