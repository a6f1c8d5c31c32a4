"""Regression tests from trying the exact kernels as a new user would.

Covers: the Gaussian kernel on data far from the origin (the expanded square cancels)
and with a tiny lengthscale (the diagonal must stay exactly 1), the scaled softmax
kernel at ``alpha = -1/2`` (the Gaussian kernel) far from the origin and for huge
inputs, SciPy sparse input (a clear ``TypeError``), and NumPy ``matrix`` / masked-array
input (treated as the plain array, masked entries rejected).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from kernelkit.kernels import (
    gaussian_kernel,
    log_scaled_softmax_kernel,
    polynomial_kernel,
    scaled_softmax_kernel,
    softmax_attention,
    softmax_kernel,
)


def _gaussian_mpmath(X, Y, ls):
    """exp(-|x - y|^2 / (2 ls^2)) of the given floats at 40 digits, and the exponents q."""
    mpmath = pytest.importorskip("mpmath", reason="mpmath not installed (the test extra)")
    with mpmath.workdps(40):
        q = [
            [
                sum(
                    (mpmath.mpf(float(a)) - mpmath.mpf(float(b))) ** 2
                    for a, b in zip(x, y, strict=True)
                )
                / (2 * mpmath.mpf(ls) ** 2)
                for y in Y
            ]
            for x in X
        ]
        K = np.array([[float(mpmath.exp(-v)) for v in row] for row in q])
        return K, np.array([[float(v) for v in row] for row in q])


@pytest.mark.parametrize(("dtype", "offset"), [(np.float64, 1e6), (np.float32, 1e3)])
def test_gaussian_kernel_accurate_far_from_the_origin(dtype, offset):
    # |x|^2 + |y|^2 - 2 x.y cancels to |x - y|^2 ~ 1 from terms ~ d offset^2: the old
    # expanded square lost ~ eps d offset^2 in the exponent (1e-4 here in float64, 0.1
    # in float32). The direct formula's error: x - y is exact (Sterbenz), the sum of d
    # squares is off by at most (d + 1) eps relative, so the exponent q by (d + 1) eps q,
    # and K by that plus the rounding of exp and of the result.
    rng = np.random.default_rng(0)
    d = 3
    X = (rng.normal(size=(6, d)) + offset).astype(dtype)
    Y = (X + 0.5 * rng.normal(size=X.shape)).astype(dtype)
    ref, q = _gaussian_mpmath(X, Y, 1.0)
    eps = np.finfo(dtype).eps
    rtol = (d + 1) * eps * q.max() + 4 * eps
    np.testing.assert_allclose(gaussian_kernel(X, Y), ref, rtol=rtol, atol=0)


@pytest.mark.parametrize(
    ("dtype", "scale", "ls"), [(np.float64, 1.0, 1e-300), (np.float16, 1e3, 1e-3)]
)
def test_gaussian_kernel_diagonal_exactly_one_for_tiny_lengthscale(dtype, scale, ls):
    # x = y gives exp(0) = 1 exactly for every lengthscale; the old code formed the
    # exponent from rounded norms times 1/l^2 ~ 1e600 and returned 0 on the diagonal.
    # float16: 1/l^2 beyond its range must not turn 0 * inf into NaN.
    X = (np.random.default_rng(6).normal(size=(3, 2)) * scale).astype(dtype)  # old: failed
    K = gaussian_kernel(X, X, lengthscale=ls)
    assert K.dtype == dtype
    np.testing.assert_array_equal(K, np.eye(3))  # off the diagonal exp(-huge) = 0


@pytest.mark.parametrize(
    "func", [gaussian_kernel, softmax_kernel, polynomial_kernel], ids=lambda f: f.__name__
)
def test_pair_kernels_reject_sparse_with_a_clear_message(func):
    X = np.eye(3)
    with pytest.raises(TypeError, match=r"Y is a SciPy sparse csr_matrix.*Y\.toarray\(\)"):
        func(X, scipy.sparse.csr_matrix(X))


def test_attention_rejects_sparse_with_a_clear_message():
    q = np.eye(3)
    with pytest.raises(TypeError, match=r"k is a SciPy sparse"):
        softmax_attention(q, scipy.sparse.csr_array(q), q)


@pytest.mark.parametrize(
    "func", [gaussian_kernel, softmax_kernel, polynomial_kernel], ids=lambda f: f.__name__
)
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix itself
def test_pair_kernels_take_matrix_and_masked_arrays_as_plain_arrays(func):
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    expected = func(X, Y)
    np.testing.assert_array_equal(func(np.matrix(X), np.matrix(Y)), expected)
    np.testing.assert_array_equal(func(np.ma.masked_array(X), Y), expected)
    masked = np.ma.masked_array(X, mask=np.eye(4, 3, dtype=bool))
    with pytest.raises(ValueError, match="X is a masked array with masked entries"):
        func(masked, Y)


def test_log_scaled_softmax_at_minus_half_accurate_far_from_the_origin():
    # alpha = -1/2: alpha |x|^2 + x.y + alpha |y|^2 = -|x - y|^2 / 2 = -q. The old sum of
    # three terms ~ 1e8 lost ~ eps 1e8 = 4e-8 absolute; the direct formula's error is
    # (d + 1) eps q (x - y exact by Sterbenz, d squares summed).
    rng = np.random.default_rng(0)
    d = 3
    X = rng.normal(size=(5, d)) + 1e4
    Y = X + 0.3 * rng.normal(size=X.shape)
    _, q = _gaussian_mpmath(X, Y, 1.0)
    eps = np.finfo(np.float64).eps
    got = log_scaled_softmax_kernel(X, Y, alpha=-0.5)
    np.testing.assert_allclose(got, -q, rtol=(d + 1) * eps + eps, atol=0)


def test_scaled_softmax_at_minus_half_is_the_gaussian_for_huge_inputs():
    # K^(-1/2) <= 1 for all inputs; at |x| ~ 1e200 the old code formed alpha |x|^2 = -inf
    # and |x|^2 terms that overflowed, and raised "overflows float64" (or gave 0 on the
    # diagonal of X, X). Exact: exp(0) = 1 on the diagonal; the Gaussian kernel elsewhere.
    X = np.random.default_rng(2).normal(size=(3, 2)) * 1e200  # a seed where the old raised
    K = scaled_softmax_kernel(X, X, alpha=-0.5)
    np.testing.assert_array_equal(np.diag(K), np.ones(3))
    np.testing.assert_array_equal(K, gaussian_kernel(X, X))
