"""The fast Walsh-Hadamard transform against the dense Sylvester matrix."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import hadamard as scipy_hadamard

from kernelkit._backend.fwht import fwht, hadamard, is_power_of_two, next_power_of_two


@pytest.mark.parametrize("d", [1, 2, 4, 8, 16, 64, 128, 256, 2048])
def test_fwht_equals_dense_hadamard(d, backend):
    X = np.random.default_rng(d).standard_normal((5, d))
    out = backend.to_numpy(fwht(backend.asarray(X)))
    np.testing.assert_allclose(out, X @ scipy_hadamard(d), rtol=1e-12, atol=1e-12 * d)


def test_fwht_sylvester_recursion_three_factors():
    """d = 8192 (three Kronecker factors): fwht([a, b]) = [fwht(a + b), fwht(a - b)]."""
    X = np.random.default_rng(3).standard_normal((3, 8192))
    a, b = X[:, :4096], X[:, 4096:]
    expected = np.concatenate([fwht(a + b), fwht(a - b)], axis=1)
    np.testing.assert_allclose(fwht(X), expected, rtol=1e-12, atol=1e-9)


def test_fwht_float32_complex_integer_dtypes(backend):
    rng = np.random.default_rng(0)
    H = scipy_hadamard(16)
    X = rng.standard_normal((3, 16))
    out32 = fwht(backend.asarray(X, "float32"))
    assert backend.dtype_name(out32) == "float32"
    np.testing.assert_allclose(backend.to_numpy(out32), X @ H, rtol=1e-5, atol=1e-5)
    Xc = X + 1j * rng.standard_normal((3, 16))
    outc = fwht(backend.asarray(Xc))
    assert backend.dtype_name(outc) == "complex128"
    np.testing.assert_allclose(backend.to_numpy(outc), Xc @ H, atol=1e-12)
    Xi = rng.integers(-5, 5, size=(3, 16))
    outi = backend.to_numpy(fwht(backend.asarray(Xi)))
    assert outi.dtype.kind == "i"
    np.testing.assert_array_equal(outi, Xi @ H)


def test_fwht_axis_and_batch_dimensions():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 32, 3))
    out = fwht(X, axis=1)
    np.testing.assert_allclose(out, np.einsum("ajc,jk->akc", X, scipy_hadamard(32)), atol=1e-12)
    Y = rng.standard_normal((2, 3, 256))
    np.testing.assert_allclose(fwht(Y), Y @ scipy_hadamard(256), atol=1e-11)
    np.testing.assert_allclose(fwht(Y, axis=-1), fwht(Y, axis=2))
    v = rng.standard_normal(8)
    np.testing.assert_allclose(fwht(v), scipy_hadamard(8) @ v, atol=1e-12)


def test_fwht_twice_is_d_times_identity_and_input_untouched():
    X = np.random.default_rng(2).standard_normal((4, 512))
    X0 = X.copy()
    np.testing.assert_allclose(fwht(fwht(X)), 512 * X, rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(X, X0)


def test_fwht_rejects_bad_lengths_and_axes():
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(np.ones((2, 6)))
    with pytest.raises(ValueError, match="out of bounds"):
        fwht(np.ones((2, 4)), axis=2)
    with pytest.raises(ValueError, match="at least one dimension"):
        fwht(np.float64(1.0))


def test_helpers():
    assert [is_power_of_two(n) for n in (0, 1, 2, 3, 4, 6, 8)] == [
        False,
        True,
        True,
        False,
        True,
        False,
        True,
    ]
    assert [next_power_of_two(n) for n in (1, 2, 3, 5, 8, 9, 784)] == [1, 2, 4, 8, 8, 16, 1024]
    np.testing.assert_array_equal(hadamard(32), scipy_hadamard(32))
    with pytest.raises(ValueError):
        hadamard(12)
    with pytest.raises(ValueError):
        next_power_of_two(0)


def test_fwht_torch_gradcheck(torch):
    X = torch.randn(2, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fwht(t), (X,))
    Xc = torch.randn(1, 8, dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fwht(t), (Xc,))
    # the gradient of sum(fwht(X) * G) is fwht(G) (H is symmetric)
    G = torch.randn(2, 16, dtype=torch.float64)
    (fwht(X) * G).sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), G.numpy() @ scipy_hadamard(16), atol=1e-10)
