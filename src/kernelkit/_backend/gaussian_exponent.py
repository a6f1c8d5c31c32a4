"""The exponent of the Gaussian kernel, accurate for any input, and the scaling helpers
it shares with :mod:`kernelkit.kernels`.

:func:`gaussian_log_kernel` is the one implementation of ``-|x - y|^2 / (2 l^2)`` behind
:func:`kernelkit.kernels.gaussian_kernel` and the exact kernels and variances of the
Gaussian feature maps (:mod:`kernelkit.features`): the expanded square on centred inputs
rescaled by a power of two, with the pairs where it cancels recomputed from ``x - y``
(user guide: "The feature-map contract").
"""

from __future__ import annotations

import math

import numpy as np

from . import is_torch_array

__all__ = [
    "all_finite",
    "detached",
    "gaussian_log_kernel",
    "ldexp_saturating",
    "max_abs",
    "power_of_two_above",
    "power_of_two_bound",
    "row_sq_norms",
]


def row_sq_norms(xp, X):
    """Squared norms of the rows of ``X`` (..., n, d); shape (..., n)."""
    return xp.sum(X * X, axis=-1)


def all_finite(xp, a) -> bool:
    """Whether every entry of the array ``a`` (any shape) is finite (a host read)."""
    return bool(xp.all(xp.isfinite(a)))


def ldexp_saturating(x: float, e: int) -> float:
    """``x * 2**e`` saturating at +-inf instead of raising ``OverflowError``."""
    try:
        return math.ldexp(x, e)
    except OverflowError:
        return math.copysign(math.inf, x)


def detached(x):
    """``x`` without autograd history (for host-side scalars such as scale factors)."""
    return x.detach() if is_torch_array(x) else x


def max_abs(xp, a) -> float:
    """``max |a|`` of a finite, non-empty array (two reductions, no temporary)."""
    a = detached(a)
    return max(abs(float(xp.max(a))), abs(float(xp.min(a))))


def power_of_two_bound(xp, *arrays) -> int:
    """``e`` with ``max |a| < 2**e`` over the (finite, non-empty) ``arrays``, and at least
    ``2 - maxexp`` of their dtype (``fmax < 2**maxexp``), so that the factor ``2**-e`` the
    callers scale by is itself finite there: for entries below ``2**-maxexp`` (subnormal
    float64, float32 or bfloat16 values) it would overflow to ``inf`` (``0 * inf = NaN``
    in the kernel) or raise ``OverflowError`` in :func:`math.ldexp`. The scaled entries
    are below 1 either way (below 1/2 where the bound is the larger)."""
    e = max(math.frexp(max_abs(xp, a))[1] for a in arrays)
    # np.frexp: the limit in its own dtype (float() of an extended-precision maximum is inf)
    return max(e, 2 - int(np.frexp(xp.finfo(arrays[0].dtype).max)[1]))


def power_of_two_above(a):
    """The powers of two ``2^e`` with ``|a| < 2^e`` elementwise, a NumPy array of ``a``'s
    shape (1 where ``a`` is 0; inf where it is not finite): the exact rescaling factors of
    sums of squares whose terms would under- or overflow (:func:`power_of_two_bound` is
    the one exponent of whole arrays)."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    e = np.frexp(np.where(np.isfinite(a), a, 0.0))[1]
    return np.where(np.isfinite(a), np.ldexp(1.0, e), np.inf)


def gaussian_log_kernel(xp, X, Y, lengthscale, exact_zero: bool = False):
    """``-|x - y|^2 / (2 l^2)`` for all pairs of rows of ``X`` (..., n, d) and ``Y``
    (..., m, d), shape (..., n, m): accurate, ``<= 0`` (the exponent of the Gaussian
    kernel behind the random features' estimators, e.g. FAVOR+'s ``K_gauss``).

    The expanded square ``|x|^2 + |y|^2 - 2 x^T y`` (one matrix product) is formed on
    inputs centred on the mean of ``X`` (the kernel is translation invariant) and rescaled
    by a power of two so that no sum overflows. Its rounding error is at most
    ``(d + 2) eps (|x|^2 + |y|^2)``; pairs where that bound is not small next to the
    distance itself (near-duplicates far from the centre, or a tiny lengthscale), and
    where the kernel has not certainly underflowed, are recomputed from ``x - y`` directly.
    ``exact_zero``: also recompute the pairs whose expanded square is within its rounding
    error of 0 even where that moves the exponent by less than ``eps``, so that equal rows
    give exactly 0 (where a variance formula needs the exact zero of ``x = y``).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        c = xp.mean(X * 0.5, axis=-2, keepdims=True) * 2.0  # (..., 1, d)
        Xc, Yc = X - c, Y - c  # two objects: a general product (faster than syrk here)
    if not (all_finite(xp, Xc) and all_finite(xp, Yc)):
        Xc, Yc = X, Y
    fmax = float(xp.finfo(X.dtype).max)
    eps = float(xp.finfo(X.dtype).eps)

    def scaled(A, B):  # A, B scaled by 2**-e (entries below 1) and f = 2**e / l, capped
        e = power_of_two_bound(xp, A, B)
        t = math.ldexp(1.0, -e)
        # 2**e / l as (1 / m) 2**(e - k) for l = m 2**k: 1 / l alone overflows for a
        # subnormal lengthscale (the kernel of inputs on its scale is still moderate)
        m, k = math.frexp(lengthscale)
        return A * t, B * t, min(ldexp_saturating(1.0 / m, e - k), fmax)

    def exponent(d2, f):  # -d2 f^2 / 2 without overflow inside (d2 >= 0)
        h = -0.5 * f * f  # a Python float: must also be in the array's range
        with np.errstate(over="ignore"):
            return d2 * h if abs(h) <= fmax else -((d2 * f) * (0.5 * f))

    Xs, Ys, f = scaled(Xc, Yc)
    nx, ny = row_sq_norms(xp, Xs), row_sq_norms(xp, Ys)  # (..., n), (..., m)
    s = nx[..., :, None] + ny[..., None, :]  # (..., n, m)
    d2 = xp.clip(s - 2.0 * (Xs @ xp.matrix_transpose(Ys)), min=0.0)
    logk = exponent(d2, f)
    # Rounding error of d2 <= gamma s. A pair is recomputed where that bound exceeds a
    # quarter of d2 (cancellation), moves the exponent by more than eps, and the kernel
    # has not certainly underflowed (exp(-limit) == 0).
    gamma = (X.shape[-1] + 2) * eps
    # np.log: in the limit's own dtype (an extended-precision one underflows in float())
    limit = -1.2 * float(np.log(xp.finfo(X.dtype).smallest_normal))
    worst = gamma * (float(xp.max(detached(nx))) + float(xp.max(detached(ny))))
    if 0.5 * worst * f * f <= eps and not exact_zero:  # Python floats: saturates at inf
        return logk
    redo = s > 4.0 * d2  # (..., n, m)
    if not bool(xp.any(redo)):
        return logk
    b, i, j = xp.nonzero(xp.reshape(redo, (-1, *redo.shape[-2:])))
    s_r = xp.reshape(s, (-1, *s.shape[-2:]))[b, i, j]
    d2_r = xp.reshape(d2, (-1, *d2.shape[-2:]))[b, i, j]
    moves = -exponent(gamma * s_r, f) > eps
    if exact_zero:  # d2 indistinguishable from 0: x = y gives exactly 0
        moves = moves | (d2_r <= 4.0 * gamma * s_r)
    keep = moves & (-exponent(d2_r - gamma * s_r, f) < limit)
    b, i, j = b[keep], i[keep], j[keep]
    if b.shape[0] == 0:
        return logk
    n, m, d = X.shape[-2], Y.shape[-2], X.shape[-1]
    batch = tuple(logk.shape[:-2])
    Xr, Yr, f0 = scaled(X, Y)  # the uncentred inputs: x - y rounded once
    Xr = xp.reshape(xp.broadcast_to(Xr, (*batch, n, d)), (-1, n, d))  # (B, n, d)
    Yr = xp.reshape(xp.broadcast_to(Yr, (*batch, m, d)), (-1, m, d))  # (B, m, d)
    logk = xp.reshape(logk, (-1, n, m))
    step = max(1, 2**22 // d)  # pairs per chunk: memory step * d
    for lo in range(0, b.shape[0], step):
        bb, ii, jj = b[lo : lo + step], i[lo : lo + step], j[lo : lo + step]
        diff = Xr[bb, ii, :] - Yr[bb, jj, :]  # (k, d)
        logk[bb, ii, jj] = exponent(xp.sum(diff * diff, axis=-1), f0)
    return xp.reshape(logk, (*batch, n, m))
