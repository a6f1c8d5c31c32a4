"""Exact reference kernels and exact softmax attention.

Everything here is O(n m d) or O(L^2 d) and exists to check the random-feature
approximations against. All functions accept NumPy arrays or torch tensors
(array API) and keep the input's dtype and device.
"""

from __future__ import annotations

import math

from .._backend import get_namespace

__all__ = [
    "gaussian_kernel",
    "log_scaled_softmax_kernel",
    "polynomial_kernel",
    "scaled_softmax_kernel",
    "softmax_attention",
    "softmax_kernel",
]


def _sq_norms(xp, X):
    # X: (..., n, d) -> (..., n)
    return xp.sum(X * X, axis=-1)


def log_scaled_softmax_kernel(X, Y, alpha: float = 0.0):
    """Logarithm of the scaled softmax kernel, ``alpha*|x|^2 + x.y + alpha*|y|^2``.

    FAVOR# paper, Sec. 2.1: ``K^(alpha)(x, y) = exp(alpha |x|^2 + x^T y + alpha |y|^2)``.

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    alpha : float
        ``0`` gives the softmax kernel, ``-1/2`` the Gaussian kernel.

    Returns
    -------
    array, shape (..., n, m)
    """
    xp = get_namespace(X, Y)
    out = X @ xp.matrix_transpose(Y)  # (..., n, m)
    if alpha != 0.0:
        out = out + alpha * _sq_norms(xp, X)[..., :, None] + alpha * _sq_norms(xp, Y)[..., None, :]
    return out


def scaled_softmax_kernel(X, Y, alpha: float = 0.0):
    """Scaled softmax kernel ``K^(alpha)(x, y) = exp(alpha|x|^2 + x^T y + alpha|y|^2)``.

    FAVOR# paper, Sec. 2.1 (eq. 1 and the definition of ``K^(alpha)``).

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    alpha : float

    Returns
    -------
    array, shape (..., n, m)
    """
    xp = get_namespace(X, Y)
    return xp.exp(log_scaled_softmax_kernel(X, Y, alpha))


def softmax_kernel(X, Y, lengthscale: float = 1.0):
    """Softmax kernel ``exp(x^T y / lengthscale^2)``, shape (..., n, m)."""
    return scaled_softmax_kernel(X / lengthscale, Y / lengthscale, 0.0)


def gaussian_kernel(X, Y, lengthscale: float = 1.0):
    """Gaussian kernel ``exp(-|x - y|^2 / (2 lengthscale^2))``, shape (..., n, m).

    Computed as ``K^(-1/2)(x / l, y / l)``; entries are clipped at 1 to remove the
    rounding of the expanded square.
    """
    xp = get_namespace(X, Y)
    logk = log_scaled_softmax_kernel(X / lengthscale, Y / lengthscale, -0.5)
    return xp.exp(xp.minimum(logk, xp.zeros_like(logk)))


def polynomial_kernel(X, Y, degree: int = 2, coef0: float = 1.0, gamma: float = 1.0):
    """Polynomial kernel ``(gamma x^T y + coef0)^degree``, shape (..., n, m).

    The kernel of the dot-product random features (Wacker et al., eq. 37), with
    scikit-learn's parameter names.
    """
    xp = get_namespace(X, Y)
    return (gamma * (X @ xp.matrix_transpose(Y)) + coef0) ** int(degree)


def softmax_attention(q, k, v, *, is_causal: bool = False, key_padding_mask=None, scale=None):
    """Exact softmax attention, the reference for linear attention.

    Same convention as :func:`torch.nn.functional.scaled_dot_product_attention`:
    ``softmax(q k^T * scale) v`` with ``scale = 1/sqrt(d)`` by default; the row maximum
    is subtracted before exponentiation.

    Parameters
    ----------
    q : array, shape (..., L, d)
    k : array, shape (..., S, d)
    v : array, shape (..., S, d_v)
    is_causal : bool
        Query ``i`` attends to keys ``j <= i`` only (requires ``L == S``).
    key_padding_mask : array of bool, shape (..., S), optional
        ``True`` marks a padded key that no query may attend to. Rows with every key
        masked give zeros.
    scale : float, optional

    Returns
    -------
    array, shape (..., L, d_v)
    """
    xp = get_namespace(q, k, v)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    logits = (q @ xp.matrix_transpose(k)) * scale  # (..., L, S)
    L, S = logits.shape[-2], logits.shape[-1]
    allowed = None
    if is_causal:
        if L != S:
            raise ValueError(f"is_causal needs L == S, got L={L}, S={S}.")
        i = xp.arange(L)[:, None]
        j = xp.arange(S)[None, :]
        allowed = j <= i  # (L, S)
        if hasattr(logits, "device"):
            allowed = xp.asarray(allowed, device=logits.device)
    if key_padding_mask is not None:
        keep = xp.logical_not(xp.asarray(key_padding_mask, dtype=xp.bool))[..., None, :]
        allowed = keep if allowed is None else xp.logical_and(allowed, keep)
    if allowed is not None:
        neg = xp.asarray(-xp.inf, dtype=logits.dtype)
        logits = xp.where(allowed, logits, neg)
    row_max = xp.max(logits, axis=-1, keepdims=True)
    row_max = xp.where(xp.isfinite(row_max), row_max, xp.zeros_like(row_max))
    w = xp.exp(logits - row_max)  # (..., L, S)
    denom = xp.sum(w, axis=-1, keepdims=True)
    denom = xp.where(denom > 0, denom, xp.ones_like(denom))
    return (w / denom) @ v
