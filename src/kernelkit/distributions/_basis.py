"""Orthonormal low-rank basis ``Psi = Phi Q`` from a pivoted Cholesky factor (Sec. 4.2)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted
from sklearn.utils.validation import validate_data as sk_validate_data

from .._backend import to_numpy, validate_data
from ._cholesky import _check_tolerances, _pivoted_cholesky
from ._kernels import make_kernel

__all__ = ["LowRankBasis"]

_BLOCK = 1 << 14  # rows per block when evaluating new points


def _as_2d(X, name, n_features=None, allow_empty=False):
    X, _ = validate_data(X, name, n_features=n_features, allow_empty=allow_empty)
    return np.ascontiguousarray(to_numpy(X, dtype=np.float64))


def _sk_2d(est, X, reset):
    """scikit-learn's validation (standard messages, ``n_features_in_``), float64."""
    X = sk_validate_data(est, X, reset=reset, dtype=np.float64, accept_sparse=False,
                         ensure_min_samples=1 if reset else 0)
    return np.ascontiguousarray(X)


class LowRankBasis(TransformerMixin, BaseEstimator):
    """Low-rank orthonormal basis of the RKHS from pivoted Cholesky (Alg. 1 + Sec. 4.2).

    ``fit(X)`` runs :func:`pivoted_cholesky` (``K ~ L L^T``, ``B``), then rotates:
    ``L^T L = V Lambda V^T``, ``Q = B V`` (19), ``A = L V = K Q``. The basis functions
    ``Psi(.) = Phi(.) Q`` are orthonormal in the RKHS (25) and have Gram matrix
    ``Lambda / n`` in ``L^2`` of the empirical measure; on the training points
    ``Psi(x_i) = A[i, :]``.

    Because ``B`` vanishes outside the pivot rows (16), ``Psi(x)^T = k_piv(x) T`` with
    ``k_piv(x) = [k(x_{p_1}, x), ..., k(x_{p_m}, x)]`` and ``T = B[piv] V`` (m, m):
    :meth:`transform` costs m kernel evaluations plus O(m^2) per point and needs only the
    pivot points (note §2).

    Parameters
    ----------
    kernel : str or callable, default="gaussian"
    lengthscale : float, default=1.0
    tol, rel_tol, max_rank : see :func:`pivoted_cholesky` (default ``rel_tol=1e-6``).
    rotate : bool, default=True
        If False, ``V = I``: ``Psi(x) = k_piv(x) B[piv]`` and the training features are
        ``L`` itself (still orthonormal in the RKHS by (17)/(18)).

    Attributes
    ----------
    pivots_ : ndarray of int, shape (m,)
    centers_ : ndarray, shape (m, d)          the pivot points ``x_{p_j}``
    coef_ : ndarray, shape (m, m)             ``T = B[piv] V``
    eigenvalues_ : ndarray, shape (m,)        ``Lambda`` (descending; ``A^T A``)
    train_features_ : ndarray, shape (n, m)   ``A = L V`` (a view of ``train_features_t_``)
    train_features_t_ : ndarray, shape (m, n) ``A^T``, row-major
    trace_residual_ : float                  ``trace(K - L L^T)``
    n_components_ : int                      ``m``
    n_features_in_ : int
    """

    def __init__(self, kernel="gaussian", lengthscale: float = 1.0, tol=None, rel_tol=None,
                 max_rank=None, rotate: bool = True):
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.tol = tol
        self.rel_tol = rel_tol
        self.max_rank = max_rank
        self.rotate = rotate

    def fit(self, X, y=None):
        """Factorise the kernel matrix of ``X`` (n, d) and build the basis. Returns self."""
        X = _sk_2d(self, X, reset=True)
        n = X.shape[0]
        tol, rel_tol, max_rank = _check_tolerances(self.tol, self.rel_tol, self.max_rank, n)
        self.kernel_ = make_kernel(self.kernel, self.lengthscale)
        chol = _pivoted_cholesky(self.kernel_, X, tol, rel_tol, max_rank)
        At = chol.Lt  # (m, n), overwritten with A^T below
        if self.rotate:
            gram = At @ At.T  # L^T L, (m, m)
            lam, V = np.linalg.eigh(gram)
            lam, V = lam[::-1].copy(), np.ascontiguousarray(V[:, ::-1])
            Vt = np.ascontiguousarray(V.T)
            for s in range(0, n, _BLOCK):  # A^T = V^T L^T, in place by column blocks
                At[:, s:s + _BLOCK] = Vt @ At[:, s:s + _BLOCK]
            self.coef_ = chol.B_piv @ V
        else:
            lam = np.einsum("ij,ij->i", At, At)
            self.coef_ = chol.B_piv.copy()
        self.eigenvalues_ = np.maximum(lam, 0.0)
        self.train_features_t_ = At
        self.pivots_ = chol.pivots
        self.centers_ = X[chol.pivots].copy()
        self.center_sq_norms_ = np.einsum("ij,ij->i", self.centers_, self.centers_)
        self.trace_residual_ = chol.trace_residual
        self.trace_ = chol.trace
        self.n_components_ = chol.rank
        self.n_samples_fit_ = n
        return self

    @property
    def train_features_(self) -> np.ndarray:
        return self.train_features_t_.T

    def kernel_pivots(self, X) -> np.ndarray:
        """``[k(x_i, x_{p_j})]``, shape (len(X), m)."""
        check_is_fitted(self, "coef_")
        X = _sk_2d(self, X, reset=False)
        return self.kernel_(X, self.centers_, None, self.center_sq_norms_)

    def transform(self, X) -> np.ndarray:
        """``Psi(X) = k_piv(X) T``, shape (len(X), m)."""
        check_is_fitted(self, "coef_")
        X = _sk_2d(self, X, reset=False)
        out = np.empty((X.shape[0], self.n_components_))
        for s in range(0, X.shape[0], _BLOCK):
            Kp = self.kernel_(X[s:s + _BLOCK], self.centers_, None, self.center_sq_norms_)
            np.matmul(Kp, self.coef_, out=out[s:s + _BLOCK])
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.requires_fit = True
        return tags
