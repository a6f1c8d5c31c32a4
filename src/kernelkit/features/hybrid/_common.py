"""Private helpers of the hybrid random feature maps: numerically stable (log-space)
assembly of the real-form feature blocks and of the analytic MSEs of Sec. 2-3 and App. D-H
of K. Choromanski et al., "Hybrid Random Features" (ICLR 2022).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..._backend import is_numpy_namespace, validate_positive_float
from .._base import _detach, times_exp

#: range of the Gaussian bandwidths ``tau`` and ``lambda_bandwidth`` (used as Python
#: floats, whatever type was given; the upper end bounds ``sigma`` too): their squares,
#: which the lambda estimators divide by, stay normal float64 numbers (a Python float's
#: ``**2`` raises ``OverflowError`` from about 1.3e154, and below about 1e-154 the square
#: is subnormal or 0, so ``|z|^2 / c^2`` turns into ``0 / 0``)
MIN_BANDWIDTH, MAX_BANDWIDTH = 1e-150, 1e150


def validate_bandwidth(value, name: str) -> float:
    """``value`` as a float in ``[MIN_BANDWIDTH, MAX_BANDWIDTH]``, else a ``TypeError`` /
    ``ValueError`` naming ``name``."""
    value = validate_positive_float(value, name)
    if not MIN_BANDWIDTH <= value <= MAX_BANDWIDTH:
        raise ValueError(
            f"{name} must be in [{MIN_BANDWIDTH:g}, {MAX_BANDWIDTH:g}] (its square leaves "
            f"the float64 range), got {value:g}."
        )
    return value


def _combine(xp, dot, scale):
    """``dot * exp(scale)`` without overflow where the product is representable.

    dot, scale : (n, m). Same algorithm as :meth:`FeatureMap.approx_kernel`.
    """
    limit = math.log(float(xp.finfo(dot.dtype).max)) - 10.0
    if dot.shape[0] == 0 or dot.shape[1] == 0 or float(_detach(xp.max(scale))) < limit:
        return dot * xp.exp(scale)
    absdot = xp.abs(dot)
    tiny = xp.asarray(float(xp.finfo(dot.dtype).tiny), dtype=dot.dtype)
    logabs = xp.log(xp.maximum(absdot, tiny)) + scale
    logabs = xp.where(absdot > 0, logabs, xp.full_like(logabs, -math.inf))
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore"):  # +-inf where the estimate itself overflows
            return np.sign(dot) * np.exp(logabs)
    return xp.sign(dot) * xp.exp(logabs)


def _outer(xp, u, phi):
    """Row-wise outer product ``u (x) phi``: (n, p), (n, q) -> (n, p q), index ``i q + j``."""
    n = u.shape[0]
    return xp.reshape(u[:, :, None] * phi[:, None, :], (n, u.shape[1] * phi.shape[1]))


def _assemble(xp, blocks):
    """Concatenate stabilised blocks ``coef * base * exp(log_scale)``.

    blocks : list of ``(base (n, k), log_scale (n,), coef float)``.
    Returns ``(base (n, sum k), log_scale (n,))`` with one common row scale (the largest).
    """
    common = blocks[0][1]
    for _, ls, _ in blocks[1:]:
        common = xp.maximum(common, ls)
    common = _detach(common)
    parts = []
    for base, ls, coef in blocks:
        parts.append(base * (coef * xp.exp(ls - common))[:, None])
    return xp.concat(parts, axis=1), common


def _log_nonneg(xp, v):
    """``log(v)`` of a non-negative array, ``-inf`` where ``v = 0`` (no warning)."""
    pos = v > 0
    return xp.where(pos, xp.log(xp.where(pos, v, xp.ones_like(v))), xp.full_like(v, -math.inf))


def _weighted_exp(xp, w, log_v):
    """``w * exp(log_v)`` with ``0 * inf = 0`` (an exact zero weight wins over overflow)."""
    zero = w == 0
    w_safe = xp.where(zero, xp.ones_like(w), w)
    return xp.where(zero, xp.zeros_like(w), w_safe * xp.exp(log_v))


def _shifted_sum(xp, terms):
    """``sum_k w_k exp(l_k)`` as ``(inner, shift)`` with ``sum = inner * exp(shift)``.

    terms : list of ``(w_k, l_k)``, arrays broadcastable to one shape (``w_k`` may be a
    float). ``shift = max_k l_k`` (finite, elementwise), so every ``exp(l_k - shift) <= 1``
    and ``inner`` never overflows even where the individual terms do; a zero weight gives
    an exact zero term (no ``0 * inf``). Combine with :func:`_combine` (signed results) or
    :func:`_scaled_nonneg` (non-negative ones).
    """
    live = []  # a zero-weight term must not set the shift (its exp could swamp the rest)
    for w, lv in terms:
        if isinstance(w, numbers.Real):
            if w != 0:
                live.append((w, lv))
        else:
            live.append((w, xp.where(w == 0, xp.full_like(lv, -math.inf), lv)))
    if not live:
        zero = xp.zeros_like(terms[0][1])
        return zero, zero
    shift = live[0][1]
    for _, lv in live[1:]:
        shift = xp.maximum(shift, lv)
    shift = xp.where(xp.isfinite(shift), shift, xp.zeros_like(shift))
    inner = 0.0
    for w, lv in live:
        e = xp.exp(lv - shift)  # 0 where lv = -inf (zero weight)
        inner = inner + (
            w * e if isinstance(w, numbers.Real) else xp.where(w == 0, xp.zeros_like(e), w * e)
        )
    return inner, shift


def _scaled_nonneg(xp, inner, log_scale):
    """``max(inner, 0) * exp(log_scale)``: 0 where ``inner <= 0`` (even if the scale
    overflows), ``inf`` only where the product itself exceeds the floating-point range."""
    out = times_exp(xp, xp.where(inner > 0, inner, xp.zeros_like(inner)), log_scale)
    return out.astype(inner.dtype, copy=False) if is_numpy_namespace(xp) else out


def _sq_norms(xp, X):
    return xp.sum(X * X, axis=1)


def _sq_norms3(xp, a):
    return xp.sum(a * a, axis=-1)


def _sum_prod(xp, a, b):
    return xp.sum(a * b, axis=1)


class LogFormVariance:
    """Variance and log relative variance from one log-space form (mixin).

    Subclasses define ``_variance_log_form(X, Y, xp)``: ``(inner, log_scale)``, each (n, m),
    with ``variance = max(inner, 0) exp(log_scale)``; ``_log_kernel`` comes from
    :class:`~kernelkit.features._projection.ProjectionFeatureMap`.
    """

    def _variance(self, X, Y, xp):
        return _scaled_nonneg(xp, *self._variance_log_form(X, Y, xp))

    def _log_relative_variance(self, X, Y, xp):
        # log(variance / K^2) without forming either: finite where both leave the
        # floating-point range together (large norms; the Gaussian kernel); -inf where exact
        inner, log_scale = self._variance_log_form(X, Y, xp)
        return _log_nonneg(xp, inner) + log_scale - 2.0 * self._log_kernel(X, Y, xp)
