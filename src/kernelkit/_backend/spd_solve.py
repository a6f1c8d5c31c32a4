"""Dense symmetric positive definite solves in float64: one Cholesky factorisation.

The optimisers' exact reference step (``method="dense"`` of the in-memory and the
chunked curvature) solves its ``(n p, n p)`` system this way; a failed factorisation
is reported by the caller's own error, which knows why the matrix should have been
positive definite.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

__all__ = ["spd_solve_vec"]


def spd_solve_vec(A, G, not_positive_definite):
    """``D`` with ``A vec(D) = vec(G)``, ``vec`` stacking the columns (column-major).

    One Cholesky factorisation of ``A`` (no jitter, no fallback: a matrix that is not
    numerically positive definite is an error) and its two triangular solves.

    Parameters
    ----------
    A : ndarray, shape (n p, n p), float64
        Symmetric positive definite (only its lower triangle is read). Overwritten by
        its factor: pass a matrix the caller no longer needs.
    G : ndarray, shape (p, n), float64
    not_positive_definite : callable
        ``not_positive_definite(exc)`` for the ``numpy.linalg.LinAlgError`` of a failed
        factorisation returns the exception to raise instead (without the LinAlgError
        as its context).

    Returns
    -------
    D : ndarray, shape (p, n), float64
    """
    p, n = G.shape
    try:
        factor = scipy.linalg.cho_factor(A, lower=True, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError as exc:
        raise not_positive_definite(exc) from None
    sol = scipy.linalg.cho_solve(factor, G.T.ravel(), check_finite=False)  # (n p,)
    return sol.reshape(n, p).T
