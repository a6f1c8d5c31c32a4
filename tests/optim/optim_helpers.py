"""Shared helpers for the optim tests: MLR feature tensors and exact log-partition quantities."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp, softmax


def mlr_features(X, n):
    """``F[j, y] = e_y (x) x_j`` in the layout ``theta = vec(W) = W.T.ravel()``; (m, n, n p)."""
    m, p = X.shape
    F = np.zeros((m, n, n * p))
    for y in range(n):
        F[:, y, y * p : (y + 1) * p] = X
    return F


def log_z(theta, F):
    """Exact ``log Z_{x_j}(theta)``, shape (m,)."""
    return logsumexp(F @ theta, axis=-1)


def moments(theta, F):
    """Exact ``E_p f`` (m, d) and ``Cov_p f`` (m, d, d)."""
    P = softmax(F @ theta, axis=-1)  # (m, n)
    mean = np.einsum("jy,jyd->jd", P, F)
    Fc = F - mean[:, None, :]
    cov = np.einsum("jy,jya,jyb->jab", P, Fc, Fc)
    return mean, cov


def random_problem(rng, m=None, n=None, d=None, scale=None):
    m = int(rng.integers(1, 6)) if m is None else m
    n = int(rng.integers(2, 8)) if n is None else n
    d = int(rng.integers(1, 10)) if d is None else d
    scale = float(rng.choice([0.1, 1.0, 5.0, 30.0])) if scale is None else scale
    return rng.normal(size=d) * 0.3, rng.normal(size=(m, n, d)) * scale
