"""Fast Walsh-Hadamard transform (unnormalised, Sylvester order), array-API.

``fwht(X)`` multiplies the last axis of ``X`` by the Sylvester Hadamard matrix
``H_d`` (``H_1 = [1]``, ``H_2k = [[H_k, H_k], [H_k, -H_k]]``; symmetric, ``H_d H_d = d I``,
the matrix of :func:`scipy.linalg.hadamard`), so ``fwht(X) == X @ H_d``, in
``O(d log d)``-style work per row.

Implementation. The Sylvester matrix factorises as a Kronecker product,
``H_{ab} = H_a (x) H_b``, so the transform of a row reshaped to ``(a, b)`` (row-major) is
``H_a @ row @ H_b``. ``d`` is split into factors of at most :data:`_MAX_FACTOR`
(``d <= 64``: one factor, a single matmul), and each factor is applied along its axis as
one batched matmul. A matmul by a small ``H_f`` does ``f`` multiply-adds per element
instead of the ``log2 f`` additions of the butterfly, but in BLAS (or on a GPU) that is
several times faster than ``log2 f`` passes of elementwise array operations, and it
works unchanged on every array-API backend, with autograd on torch. Complex input is
transformed as is (the real matrix is cast to the input dtype); integer input stays
integer.
"""

from __future__ import annotations

import functools

import numpy as np

from . import to_backend
from .namespace import array_namespace, is_numpy_namespace

__all__ = ["fwht", "hadamard", "hadamard_factors", "is_power_of_two", "next_power_of_two"]

#: largest Hadamard factor applied as one dense matmul
_MAX_FACTOR = 64


def is_power_of_two(n: int) -> bool:
    """Whether the integer ``n`` is a (positive) power of two."""
    n = int(n)
    return n >= 1 and (n & (n - 1)) == 0


def next_power_of_two(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    return 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=32)
def _hadamard_np(d: int) -> np.ndarray:
    H = np.ones((1, 1), dtype=np.int8)
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    H.flags.writeable = False
    return H


def hadamard(d: int, dtype=np.float64) -> np.ndarray:
    """The ``d x d`` Sylvester Hadamard matrix (``d`` a power of two) as a NumPy array."""
    if not is_power_of_two(d):
        raise ValueError(f"Hadamard size must be a power of two, got {d}.")
    return _hadamard_np(int(d)).astype(dtype)


def hadamard_factors(d: int) -> list[int]:
    """Split ``d = 2^k`` into powers of two ``<= _MAX_FACTOR``, as equal as possible."""
    k = d.bit_length() - 1
    kmax = _MAX_FACTOR.bit_length() - 1
    parts = -(-k // kmax) if k else 1
    base, extra = divmod(k, parts)
    return [1 << (base + (i < extra)) for i in range(parts)]


def fwht(X, axis: int = -1):
    """Unnormalised Walsh-Hadamard transform along ``axis`` (Sylvester order).

    Parameters
    ----------
    X : array, shape (..., d, ...)
        NumPy array or any array-API array (torch tensors keep autograd and device);
        real, complex or integer. ``X.shape[axis]`` must be a power of two.
    axis : int
        The axis to transform (default: the last one).

    Returns
    -------
    array, same shape, dtype, backend and device as ``X``
        ``Y`` with ``Y[..., k] = sum_j H_d[j, k] X[..., j]`` along ``axis``, i.e.
        ``X @ scipy.linalg.hadamard(d)`` for the last axis. Applying it twice gives
        ``d * X``.

    Raises
    ------
    ValueError
        If the length along ``axis`` is not a power of two.
    """
    xp = array_namespace(X)
    ndim = X.ndim
    if ndim == 0:
        raise ValueError("fwht needs an array with at least one dimension.")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for an array of dimension {ndim}.")
    axis = axis % ndim
    moved = axis != ndim - 1
    if moved:
        X = xp.moveaxis(X, axis, -1)
    shape = tuple(X.shape)
    d = shape[-1]
    if not is_power_of_two(d):
        raise ValueError(f"fwht needs a power-of-two length along axis {axis}, got {d}.")
    if d == 1:
        Y = xp.asarray(X, copy=True) if is_numpy_namespace(xp) else X + 0
    else:
        Y = _fwht_last(X, xp, d)
    Y = xp.reshape(Y, shape)
    if moved:
        Y = xp.moveaxis(Y, -1, axis)
    return Y


def _h(xp, f: int, like):
    H = _hadamard_np(f)
    if is_numpy_namespace(xp):
        return H.astype(like.dtype, copy=False)
    return to_backend(np.asarray(H, dtype=np.float64), xp, like=like, dtype=like.dtype)


def _fwht_last(X, xp, d: int):
    factors = hadamard_factors(d)
    # numpy bool -> int; torch matmul needs a floating/complex or integer dtype
    if xp.isdtype(X.dtype, "bool"):
        X = xp.astype(X, xp.int64)
    lead = 1
    for s in X.shape[:-1]:
        lead *= int(s)
    Y = xp.reshape(X, (lead, d))
    # last factor: a plain (rows, f) @ (f, f) matmul
    f = factors[-1]
    Y = xp.reshape(xp.reshape(Y, (-1, f)) @ _h(xp, f, Y), (lead, d))
    # earlier factors: H_f applied along a middle axis of (lead * outer, f, inner)
    inner = f
    for f in reversed(factors[:-1]):
        Y = xp.reshape(Y, (-1, f, inner))
        Y = _h(xp, f, Y) @ Y
        inner *= f
    return xp.reshape(Y, (lead, d))
