"""Quadratic upper bound on the log-partition function (Alg. B; Jebara & Choromanska 2012).

Equation and theorem numbers are those of the SGB paper (Wang & Choromanska, "SGB:
Stochastic Gradient Bound Method for Optimizing Partition Functions"), which restates
the bound. For a log-linear model ``p(y | x, theta) = exp(theta^T f_x(y)) / Z_x(theta)``
(eq. 2.1), its Theorem 1 gives, for all ``theta`` and ``delta = theta - theta~``,

    Z_x(theta) <= z exp(delta^T mu + delta^T Sigma delta / 2)            (eq. 2.3)

with ``z = Z_x(theta~)``, ``mu = grad log Z_x(theta~)`` and ``Sigma >= Hessian``. Everything
here runs in log space (docs/derivations/sgb.md, "Derived formulas"):
``alpha = exp(s)`` is never formed, so logits of order 1e3 are fine.

Two forms:

* :func:`partition_bound` – any feature function ``F[j, y] = f_{x_j}(y)``; O(m n d^2).
* :func:`multinomial_partition_bound` – multinomial logistic regression, ``f_x(y) = e_y (x)
  x``, where ``Sigma_j = C_j (x) x_j x_j^T`` (its Kronecker structure, derived on the user
  guide's partition-function bound page) and only the ``(m, n, n)`` factors ``C_j`` are
  built (O(m n^3)); the curvature of a batch is applied matrix-free by
  :class:`kernelkit.optim.KroneckerCurvature`.

Parameter layout for multinomial models: ``W`` has shape ``(p, n)`` (column ``y`` is the
class vector ``w_y``) and ``theta = vec(W)`` column-major, i.e. ``theta = W.T.ravel()``,
so ``theta[y * p + i] = W[i, y]`` and ``f_x(y) = e_y (x) x``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import expit

from .._backend import device, get_namespace, is_numpy_namespace
from . import _validation as _v

__all__ = [
    "MultinomialBound",
    "PartitionBound",
    "beta",
    "multinomial_partition_bound",
    "partition_bound",
]

_SERIES = 1e-4


def _np_float(a, *others):
    """NumPy float array: float32 stays float32 (if ``others`` are float32 too), else f64."""
    a = np.asarray(a)
    f32 = a.dtype == np.float32 and all(np.asarray(o).dtype == np.float32 for o in others)
    return a if f32 else a.astype(np.float64, copy=False)


def beta(u):
    """``beta(u) = tanh(u / 2) / (2 u)`` (Alg. B), elementwise, with ``beta(0) = 1/4``.

    Even, at most 1/4, and ``beta(+-inf) = 0`` (the ``z -> 0+`` limit of the first label).
    For ``|u| < 1e-4`` the series ``1/4 - u^2/48`` avoids 0/0.

    Parameters
    ----------
    u : float or array of any shape
        NumPy or any array-API floating array (e.g. a torch tensor).

    Returns
    -------
    array shaped like ``u``
        The same kind as ``u`` (a 0-d NumPy array for a Python float).

    Raises
    ------
    TypeError
        ``u`` is not real numeric (boolean, object, strings).
    ValueError
        ``u`` is complex or contains NaN (infinities are allowed).
    """
    u = _v.check_array(u, "u", "(...)", ndim=None, allow_empty=True, check_finite=False)
    xp = get_namespace(u)
    if bool(xp.any(xp.isnan(u))):
        raise ValueError("u contains NaN.")
    if is_numpy_namespace(xp):
        u = _np_float(u)
    return _beta(u)


def _beta(u):
    """:func:`beta` without input checks (floating ``u``; NaN propagates)."""
    xp = get_namespace(u)
    small = xp.abs(u) < _SERIES
    safe = xp.where(small, xp.ones_like(u), u)
    with np.errstate(over="ignore", invalid="ignore"):
        out = xp.tanh(0.5 * safe) / (2.0 * safe)
    us = xp.where(small, u, xp.zeros_like(u))  # the series only where it is used
    out = xp.where(small, 0.25 - us * us / 48.0, out)
    return xp.where(xp.isinf(u), xp.zeros_like(u), out)


class PartitionBound(NamedTuple):
    """Quadratic bound of eq. 2.3 for each sample of a batch.

    Attributes
    ----------
    log_z : ndarray, shape (m,)
        ``log Z_{x_j}(theta~)`` (exact: the bound is tight at ``theta~``).
    mu : ndarray, shape (m, d)
        ``grad log Z_{x_j}(theta~) = E_p[f_{x_j}(y)]``.
    sigma : ndarray, shape (m, d, d)
        ``Sigma_j``, which dominates the Hessian ``Cov_p[f_{x_j}(y)]``.
    """

    log_z: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray

    def log_bound(self, theta_tilde, theta) -> np.ndarray:
        """Log of the right-hand side of eq. 2.3 at ``theta``.

        Parameters
        ----------
        theta_tilde : array_like, shape (d,)
            The expansion point the bound was computed at.
        theta : array_like, shape (d,)

        Returns
        -------
        ndarray, shape (m,)

        Raises
        ------
        TypeError
            ``theta_tilde`` or ``theta`` is not a real numeric array.
        ValueError
            ``theta_tilde`` or ``theta`` is not finite or not of shape (d,).
        """
        d = self.mu.shape[1]
        args = {"theta_tilde": theta_tilde, "theta": theta}
        for name, a in args.items():
            a = np.asarray(_v.check_array(a, name, f"(d,) = ({d},)", ndim=1), dtype=np.float64)
            if a.shape != (d,):
                raise ValueError(f"{name} must have shape (d,) = ({d},), got {a.shape}.")
            args[name] = a
        delta = args["theta"] - args["theta_tilde"]
        quad = np.einsum("jab,a,b->j", self.sigma, delta, delta)
        return self.log_z + self.mu @ delta + 0.5 * quad


def _check_logits(xp, S):
    """ValueError unless the (m, n) logits are finite (:func:`_validation.check_logits`)."""
    _v.check_logits(xp, S)


def _check_features(theta, F):
    """Validated ``theta`` (d,) and ``F`` (m, n, d) (a 2-D ``F`` becomes m = 1), float64."""
    theta = _v.check_array(theta, "theta", "(d,)", ndim=1, allow_empty=True)
    F = _v.check_array(F, "F", "(m, n, d) or (n, d)", ndim=(2, 3))
    theta = np.asarray(theta, dtype=np.float64)
    F = np.asarray(F, dtype=np.float64)
    if F.ndim == 2:
        F = F[None]
    if theta.shape[0] != F.shape[2]:
        raise ValueError(
            f"theta must have shape (d,) = ({F.shape[2]},) to match F of shape {F.shape}, got "
            f"shape {theta.shape}."
        )
    return theta, F


def partition_bound(theta, F) -> PartitionBound:
    """Alg. B (Fig. 1) in log space for a batch: ``z``, ``mu``, ``Sigma`` at ``theta~``.

    Parameters
    ----------
    theta : array_like, shape (d,)
        The expansion point ``theta~``.
    F : array_like, shape (m, n, d) or (n, d)
        ``F[j, y] = f_{x_j}(y)``: the ``n`` feature vectors of each of ``m`` samples.

    Returns
    -------
    PartitionBound
        ``log_z`` (m,), ``mu`` (m, d), ``sigma`` (m, d, d); a 2-D ``F`` gives m = 1.

    Raises
    ------
    TypeError
        ``theta`` or ``F`` is not a real numeric array (boolean, object).
    ValueError
        ``theta`` or ``F`` is complex, has the wrong number of dimensions, is empty or
        not finite, or their ``d`` differ; or the logits ``F theta`` or the curvature
        ``Sigma`` overflow float64.

    Notes
    -----
    Label loop of Alg. B in log space (vectorized over the batch; the loop runs over the
    ``n`` labels)::

        log z = s_1; mu = f(1); Sigma = 0
        y >= 2: u = s_y - log z; l = f(y) - mu; Sigma += beta(u) l l^T;
                mu += expit(u) l; log z = logaddexp(log z, s_y)

    ``Sigma`` depends on the label order (all orders are valid bounds); ``z`` and ``mu``
    do not. Cost O(m n d^2).
    """
    theta, F = _check_features(theta, F)
    m, n, d = F.shape
    with np.errstate(over="ignore", invalid="ignore"):
        s = F @ theta  # (m, n) logits
    if not np.all(np.isfinite(s)):  # theta and F are finite (checked): an overflow
        raise ValueError(
            "the logits F theta are not finite: theta and F are finite but F theta "
            "overflows float64; rescale them."
        )
    log_z = s[:, 0].copy()  # (m,)
    mu = F[:, 0].copy()  # (m, d)
    sigma = np.zeros((m, d, d))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is raised below
        for y in range(1, n):
            u = s[:, y] - log_z  # (m,)
            ell = F[:, y] - mu  # (m, d)
            sigma += _beta(u)[:, None, None] * ell[:, :, None] * ell[:, None, :]
            mu += expit(u)[:, None] * ell
            log_z = np.logaddexp(log_z, s[:, y])
    if not (np.all(np.isfinite(sigma)) and np.all(np.isfinite(mu))):
        raise ValueError(
            "the bound's curvature Sigma overflows float64: the feature vectors F are finite "
            f"but their differences are too large (max |F| = {float(np.max(np.abs(F))):.3g}); "
            "rescale F (and theta inversely)."
        )
    return PartitionBound(log_z, mu, sigma)


class MultinomialBound(NamedTuple):
    """Kronecker form of Alg. B for multinomial logistic regression (derived;
    docs/derivations/sgb.md).

    ``Sigma_j = C_j (x) x_j x_j^T`` and ``mu_j = p_j (x) x_j`` in the layout
    ``theta = vec(W)`` (column-major, ``W`` of shape (p, n)).

    Attributes
    ----------
    log_z : ndarray, shape (m,)
        ``logsumexp`` of the logits ``s_j = W^T x_j``.
    prob : ndarray, shape (m, n)
        Softmax probabilities ``p_j`` (``mu_j = p_j (x) x_j``).
    C : ndarray, shape (m, n, n)
        ``C_j = sum_{i>=2} beta(u_i) (e_i - w_{i-1})(e_i - w_{i-1})^T``; ``C_j 1 = 0``.
    """

    log_z: np.ndarray
    prob: np.ndarray
    C: np.ndarray

    def mu(self, X) -> np.ndarray:
        """``mu_j = p_j (x) x_j`` as vectors of length ``n p``.

        Parameters
        ----------
        X : ndarray, shape (m, p)
            The finite batch of the bound.

        Returns
        -------
        ndarray, shape (m, n p)
        """
        X = self._check_x(X)
        return (self.prob[:, :, None] * X[:, None, :]).reshape(len(X), -1)

    def sigma(self, X) -> np.ndarray:
        """Dense ``Sigma_j = kron(C_j, x_j x_j^T)``; small problems only.

        Parameters
        ----------
        X : ndarray, shape (m, p)
            The finite batch of the bound.

        Returns
        -------
        ndarray, shape (m, n p, n p)
        """
        X = self._check_x(X)
        m, n = self.prob.shape
        p = X.shape[1]
        out = self.C[:, :, None, :, None] * (X[:, None, :, None, None] * X[:, None, None, None, :])
        return out.reshape(m, n * p, n * p)

    def _check_x(self, X):
        X = np.asarray(_v.check_array(X, "X", "(m, p)"), dtype=np.float64)
        if X.shape[0] != self.prob.shape[0]:
            raise ValueError(
                f"X must have the m = {self.prob.shape[0]} rows of the bound, got shape {X.shape}."
            )
        return X


def multinomial_partition_bound(W, X) -> MultinomialBound:
    """Alg. B for multinomial logistic regression, ``f_x(y) = e_y (x) x`` (Fig. 1, Lemma 1).

    ``Sigma_j = C_j (x) x_j x_j^T`` has rank at most ``n - 1``, so the curvature constants
    of Lemma 1 are, corrected (docs/derivations/sgb.md), ``mu_2 = 1/lam`` and
    ``mu_1 = 1/(lam + ((n - 1)/2) max |x_j|^2)`` (``tr C_j <= (n - 1)/2``); the lemma's
    proof bounds only the largest eigenvalue.

    Parameters
    ----------
    W : array_like, shape (p, n)
        Expansion point; column ``y`` holds the class vector ``w_y``.
    X : array_like, shape (m, p)
        Samples (append a constant column for a bias).

    Returns
    -------
    MultinomialBound
        ``log_z`` (m,), ``prob`` (m, n), ``C`` (m, n, n).

    Raises
    ------
    TypeError
        ``W`` or ``X`` is not a real numeric array (boolean, object).
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty, ``X.shape[1] != W.shape[0]``, or
        the logits ``X W`` are not finite (NaN or infinity in ``W`` or ``X``, or overflow).

    Notes
    -----
    With ``s = W^T x`` and ``c_i = logsumexp(s_1..s_i)``: ``w_{i-1} = exp(s_{1..i-1} -
    c_{i-1})`` zero-padded, ``u_i = s_i - c_{i-1}``, ``l_i = e_i - w_{i-1}`` and ``C =
    sum_i beta(u_i) l_i l_i^T``. All labels are processed at once as an ``(m, n-1, n)``
    array, then one batched matmul; cost O(m n^3). Written against the array API: torch
    tensors (any device, autograd) work as NumPy arrays do, and keep their dtype.
    """
    W, X = _check_weights_data(W, X)
    return multinomial_bound_from_logits(X @ W, W, X)


def _check_weights_data(W, X):
    """Validated ``W`` (p, n) and ``X`` (m, p), m >= 1 (``X`` is checked through the
    logits); NumPy: float32 if both are, else float64."""
    W = _v.check_array(W, "W", "(p, n)")
    X = _v.check_array(X, "X", "(m, p)", check_finite=False)
    xp = _v.namespace({"W": W, "X": X})
    if X.shape[1] != W.shape[0]:
        raise ValueError(
            f"W must have shape (p, n) and X shape (m, p) with the same p; got W shape "
            f"{tuple(W.shape)}, X shape {tuple(X.shape)}."
        )
    if is_numpy_namespace(xp):
        W, X = _np_float(W, X), _np_float(X, W)
    return W, X


def multinomial_bound_from_logits(S, W=None, X=None) -> MultinomialBound:
    """:func:`multinomial_partition_bound` from the logits ``S = X W``, shape (m, n).

    ``W`` and ``X``, if given, only name the culprit when ``S`` is not finite.
    """
    xp = get_namespace(S)
    if is_numpy_namespace(xp):
        S = _np_float(S)
    _v.check_logits(xp, S, W, X)
    m, n = S.shape
    dev = device(S)
    if is_numpy_namespace(xp):  # (m, n): c_i = logsumexp(s_1..s_i), one ufunc call
        cum = np.logaddexp.accumulate(S, axis=1)
    else:
        cols = [S[:, 0]]
        for i in range(1, n):  # prefix log-sum-exp over the n labels (not the samples)
            cols.append(xp.logaddexp(cols[-1], S[:, i]))
        cum = xp.stack(cols, axis=1)
    log_z = cum[:, -1]
    prob = xp.exp(S - log_z[:, None])  # (m, n)
    if n == 1:
        return MultinomialBound(log_z, prob, xp.zeros((m, 1, 1), dtype=S.dtype, device=dev))
    # previous-prefix softmax w_{i-1} for i = 2..n: (m, n-1, n), zero for labels k >= i
    lab = xp.arange(n, device=dev)
    row = xp.arange(n - 1, device=dev)
    mask = lab[None, :] <= row[:, None]  # row i-2 keeps labels 0..i-2
    expo = S[:, None, :] - cum[:, :-1, None]  # <= 0 where masked in
    Wprev = xp.where(mask, xp.exp(xp.where(mask, expo, xp.zeros_like(expo))), xp.zeros_like(expo))
    onehot = xp.astype(lab[None, :] == (row[:, None] + 1), S.dtype)  # e_i, (n-1, n)
    L = onehot - Wprev  # l_i = e_i - w_{i-1}
    b = _beta(S[:, 1:] - cum[:, :-1])  # (m, n-1)
    C = xp.matmul(xp.permute_dims(L * b[:, :, None], (0, 2, 1)), L)  # (m, n, n)
    return MultinomialBound(log_z, prob, C)
