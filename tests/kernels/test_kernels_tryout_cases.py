"""The exact kernels as an independent tester meets them: a Gram matrix ``K(X, X)`` must
be exactly symmetric (``K == K.T``: eigh and Cholesky read one triangle, and a tester's
``np.array_equal(K, K.T)`` fails on an ulp), yet the scaled softmax kernel (the norm terms
added in two steps) and, for larger ``n``, the Gaussian and softmax kernels (a general
matrix product of two differently scaled copies) were not. Each value is also checked
against the formula; gradients through a Gram matrix and with respect to a copy of ``X``
are those of the formula. The symmetry tests failed before the fix; the
positive-semidefiniteness, gradient and unequal-input tests guard the fix (they held
before it too)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.kernels import (
    gaussian_kernel,
    log_scaled_softmax_kernel,
    polynomial_kernel,
    scaled_softmax_kernel,
    softmax_kernel,
)


def _sq(X):
    return (X**2).sum(-1)


# (kernel, formula on float64 NumPy arrays X (n, d), Y (m, d)): the from-the-formula
# references
CASES = {
    "gaussian": (
        lambda X, Y: gaussian_kernel(X, Y, 0.7),
        lambda X, Y: np.exp(-((X[:, None] - Y[None]) ** 2).sum(-1) / (2 * 0.49)),
    ),
    "softmax": (
        lambda X, Y: softmax_kernel(X, Y, 2.0),
        lambda X, Y: np.exp(X @ Y.T / 4.0),
    ),
    "scaled_softmax": (
        lambda X, Y: scaled_softmax_kernel(X, Y, -0.2),
        lambda X, Y: np.exp(-0.2 * _sq(X)[:, None] + X @ Y.T - 0.2 * _sq(Y)[None]),
    ),
    "scaled_softmax_below_half": (
        lambda X, Y: scaled_softmax_kernel(X, Y, -0.7),
        lambda X, Y: np.exp(-0.7 * _sq(X)[:, None] + X @ Y.T - 0.7 * _sq(Y)[None]),
    ),
    "log_scaled_softmax": (
        lambda X, Y: log_scaled_softmax_kernel(X, Y, 0.3),
        lambda X, Y: 0.3 * _sq(X)[:, None] + X @ Y.T + 0.3 * _sq(Y)[None],
    ),
    "polynomial": (
        lambda X, Y: polynomial_kernel(X, Y, 3, 1.0, 0.1),
        lambda X, Y: (0.1 * X @ Y.T + 1.0) ** 3,
    ),
}


def _data(n=513, d=17, seed=0):
    return 0.4 * np.random.default_rng(seed).standard_normal((n, d))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("backend", ["numpy", "float32", "torch"])
@pytest.mark.parametrize("copy", [False, True], ids=["same", "copy"])
def test_gram_matrix_is_exactly_symmetric_and_matches_the_formula(name, backend, copy):
    kernel, formula = CASES[name]
    X = _data()
    if backend == "torch":
        torch = pytest.importorskip("torch", reason="torch not installed (the torch extra)")
        A = torch.tensor(X)
    else:
        A = {"numpy": X, "float32": X.astype(np.float32)}[backend]
    B = (A.clone() if backend == "torch" else A.copy()) if copy else A
    K = kernel(A, B)
    K = K.numpy() if backend == "torch" else K
    np.testing.assert_array_equal(K, K.T)
    ref = formula(X, X)
    # float64: a few ulps of the exponent (at most |log K| <= 10 here); float32: its eps
    eps = np.finfo(np.float32 if backend == "float32" else np.float64).eps
    scale = np.abs(ref) if name == "log_scaled_softmax" else 1.0
    np.testing.assert_allclose(K, ref, rtol=0, atol=200 * eps * np.max(np.maximum(scale, ref)))


@pytest.mark.parametrize("name", [n for n in CASES if n != "log_scaled_softmax"])
def test_gram_matrix_is_positive_semidefinite(name):
    kernel, _ = CASES[name]
    X = _data(n=80, d=5, seed=1)
    K = kernel(X, X)
    lam = np.linalg.eigvalsh(K)  # reads one triangle: K is exactly symmetric
    assert lam[0] >= -len(X) * np.finfo(float).eps * np.abs(K).max()


@pytest.mark.parametrize("name", ["gaussian", "softmax", "scaled_softmax", "polynomial"])
def test_gradients_through_a_gram_matrix_and_a_copy(name):
    torch = pytest.importorskip("torch", reason="torch not installed (the torch extra)")
    kernel, _ = CASES[name]
    X = torch.tensor(_data(n=6, d=3, seed=2), requires_grad=True)
    # the same tensor twice: the total derivative (gradcheck against finite differences)
    assert torch.autograd.gradcheck(lambda a: kernel(a, a), (X,))
    # a copy that requires grad on its own: the gradient with respect to Y alone must be
    # that of K(x_i, y_j), not of a mirrored matrix (gradcheck in Y with X fixed)
    X0 = X.detach()
    Y = X0.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda b: kernel(X0, b), (Y,))
    W = torch.tensor(np.random.default_rng(3).standard_normal((6, 6)))
    (kernel(X0, Y) * W).sum().backward()
    Y2 = X0.clone().requires_grad_(True)
    (kernel(X0 + 0.0 * Y2[:1].sum(), Y2) * W).sum().backward()  # X0 a different object
    torch.testing.assert_close(Y.grad, Y2.grad)


def test_unequal_inputs_are_not_mirrored():
    X = _data(n=5, d=3, seed=4)
    Y = X.copy()
    Y[4, 0] += 1.0  # the last point differs: K(X, Y) is not symmetric
    K = gaussian_kernel(X, Y)
    ref = np.exp(-((X[:, None] - Y[None]) ** 2).sum(-1) / 2)
    np.testing.assert_allclose(K, ref, rtol=1e-14)
    assert not np.allclose(K, K.T)


@pytest.mark.parametrize("name", ["gaussian", "scaled_softmax", "log_scaled_softmax"])
def test_batched_gram_matrices_are_exactly_symmetric(name):
    # (2, 300, 7): NumPy mirrors in tiles of 128 over the last two axes
    kernel, formula = CASES[name]
    X = 0.4 * np.random.default_rng(5).standard_normal((2, 300, 7))
    K = kernel(X, X)
    np.testing.assert_array_equal(K, np.swapaxes(K, -1, -2))
    for b in range(2):
        ref = formula(X[b], X[b])
        np.testing.assert_allclose(K[b], ref, rtol=1e-13, atol=1e-13 * np.abs(ref).max())
