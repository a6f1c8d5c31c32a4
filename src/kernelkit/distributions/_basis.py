"""Orthonormal low-rank basis ``Psi = Phi Q`` from a pivoted Cholesky factor (Sec. 4.2),
and :class:`BasisCache`, which shares fitted bases between the fits of a grid search."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import weakref
from numbers import Real
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._backend import to_numpy, validate_data
from .._backend.chunks import is_dask_array
from .._backend.parallel import SingleThreadedBlas, check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, CaseInsensitiveStrOptions, int_range
from .._backend.sklearn_validation import validate_data as sk_validate_data
from . import _chunked
from ._cholesky import _check_tolerances, _pivoted_cholesky
from ._kernels import _ALIASES, KERNEL_NAMES, make_kernel
from ._linalg import cross, gram_and_sums, left_matmul, product_extremes, right_matmul

__all__ = ["BasisCache", "LowRankBasis"]

_BLOCK = 1 << 14  # rows per block when evaluating new points


def _as_2d(X, name, n_features=None, allow_empty=False):
    X, _ = validate_data(X, name, n_features=n_features, allow_empty=allow_empty)
    return np.ascontiguousarray(to_numpy(X, dtype=np.float64))


def _sk_2d(est, X, reset):
    """scikit-learn's validation (standard messages, ``n_features_in_``), float64."""
    X = sk_validate_data(
        est,
        X,
        reset=reset,
        dtype=np.float64,
        accept_sparse=False,
        ensure_min_samples=1 if reset else 0,
    )
    return np.ascontiguousarray(X)


# ---------------------------------------------------------------- training-point products
# A basis (LowRankBasis or PolynomialBasis) stores its training features A = L V (n, m)
# factored: ``factor_t_`` = L^T (m, n), row-major, and ``rotation_`` = V (m, m). The
# products below never form A: each is one pass over L^T plus O(m^2) work. A basis
# fitted without its factor (sampled pivots / out of core, ``factor_t_ = None``) keeps its
# training samples ``train_data_`` instead, and each product is a pass over those
# (:mod:`kernelkit.distributions._chunked`). ``n_jobs``: threads of the blocked passes.
def _lex_order(X: np.ndarray) -> np.ndarray:
    """``np.lexsort(X.T[::-1])`` (stable, first column first) for ``X`` (n, d), reading
    column ``j`` only for the rows still tied on columns ``0 .. j - 1``: one sort of the
    first column for data without ties, where ``np.lexsort`` made d passes over n rows."""
    n, d = X.shape
    if d == 0 or n < 2:
        return np.arange(n)
    order = np.argsort(X[:, 0], kind="stable")
    col = X[order, 0]
    group = np.concatenate([[0], np.cumsum(col[1:] != col[:-1])])  # ties share a group
    for j in range(1, d):
        size = np.bincount(group)
        tied = np.flatnonzero(size[group] > 1)  # positions in order (whole runs of them)
        if tied.size == 0:
            break
        rows = order[tied]
        perm = np.lexsort((X[rows, j], group[tied]))  # within each run, by column j
        order[tied] = rows[perm]
        g, v = group[tied][perm], X[rows[perm], j]
        new = np.zeros(n, dtype=bool)  # a run starts where the group or column j changes
        new[tied[1:]] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
        new[0] = False
        new[1:] |= group[1:] != group[:-1]
        group = np.cumsum(new)
    return order


def _in_row_order(X: np.ndarray, factorise):
    """``factorise(X)`` (a :class:`PivotedCholesky`) run on the rows of ``X`` (n, d) in
    lexicographic order, returned in the order of ``X``.

    Algorithm 1 breaks ties in the residual diagonal by the lowest row, and ties are the
    rule, not the exception: every stationary kernel has a constant diagonal (the first
    pivot), and ``1 - k(x, p)^2`` rounds to exactly 1 at every point far from the
    pivots. On sorted rows the lowest row is the lexicographically smallest point, so
    the pivots, the factor and every model on it do not depend on the order of the rows
    (identical points are interchangeable). Costs a sort and a permuted copy of ``X``
    and a gather of each row of ``L^T`` (in place, O(n) extra memory).
    """
    n = X.shape[0]
    order = _lex_order(X)
    if np.all(order[1:] > order[:-1]):  # already sorted
        return factorise(X)
    chol = factorise(np.ascontiguousarray(X[order]))
    inv = np.empty_like(order)
    inv[order] = np.arange(n)
    Lt = chol.Lt
    for i in range(Lt.shape[0]):  # row i of L^T back in the order of X
        Lt[i] = Lt[i, inv]
    return dataclasses.replace(
        chol, pivots=order[chol.pivots], diag_residual=chol.diag_residual[inv]
    )


def train_dot(basis, F: np.ndarray, n_jobs=None) -> np.ndarray:
    """``A^T F`` (m, k) for ``F`` (n, k): ``V^T (L^T F)``."""
    if basis.factor_t_ is None:
        return _chunked.train_moments(basis, F, n_jobs)[0]
    return basis.rotation_.T @ right_matmul(basis.factor_t_, F, n_jobs)


def dot_train(basis, P: np.ndarray, n_jobs=None) -> np.ndarray:
    """``P A^T`` (k, n) for ``P`` (k, m): ``(P V^T) L^T`` (lazy if Dask is involved)."""
    if basis.factor_t_ is None:
        return _chunked.dot_train(basis, P, n_jobs)
    if is_dask_array(P):  # lazy (k, n) rows against the in-memory factor
        return (P @ basis.rotation_.T) @ basis.factor_t_
    return left_matmul(P @ basis.rotation_.T, basis.factor_t_, n_jobs)


def train_cross(basis_a, basis_b, n_jobs=None) -> np.ndarray:
    """``A_a^T A_b`` (m_a, m_b) = ``V_a^T (L_a^T L_b) V_b`` (one BLAS-3 pass over both)."""
    L_ab = cross(basis_a.factor_t_, basis_b.factor_t_, n_jobs)  # (m_a, m_b)
    return basis_a.rotation_.T @ L_ab @ basis_b.rotation_


def train_extremes(basis, n_jobs=None) -> tuple[np.ndarray, np.ndarray]:
    """Column minima and maxima of ``A = L V`` over the training points, each (m,).

    Computed block by block (``V^T L^T[:, block]``): A is never stored.
    """
    if basis.factor_t_ is None:
        return _chunked.train_extremes(basis, n_jobs)
    Lt = basis.factor_t_  # (m, n)
    m, n = Lt.shape
    if m == 0 or n == 0:
        return np.zeros(m), np.zeros(m)
    return product_extremes(np.ascontiguousarray(basis.rotation_.T), Lt, n_jobs)


#: ``kernel``: a name of :data:`~kernelkit.distributions._kernels.KERNEL_NAMES` or an
#: alias (case-insensitive), or a callable
KERNEL_CONSTRAINT = [CaseInsensitiveStrOptions({*KERNEL_NAMES, *_ALIASES}), callable]

#: the pivoted-Cholesky tolerances of :func:`pivoted_cholesky` (``rel_tol`` is the
#: fraction ``epsilon`` of ``trace(K)`` left: below 1, or the factor is empty)
TOLERANCE_CONSTRAINTS = {
    "tol": [None, *POSITIVE],
    "rel_tol": [None, Interval(Real, 0, 1, closed="neither")],
    "max_rank": [None, *int_range(1)],
}


class LowRankBasis(TransformerMixin, BaseEstimator):
    """Low-rank orthonormal basis of the RKHS from pivoted Cholesky (Alg. 1 + Sec. 4.2).

    ``fit(X)`` runs :func:`pivoted_cholesky` (``K ~ L L^T``, ``B``) on the rows of ``X``
    in lexicographic order (the factor and ``pivots_`` are returned in the order of
    ``X``), so that its ties go to the smallest point rather than the first row and the
    basis does not depend on the order of the rows; then it rotates:
    ``L^T L = V Lambda V^T``, ``Q = B V`` (19), ``A = L V = K Q``. The basis functions
    ``Psi(.) = Phi(.) Q`` are orthonormal in the RKHS (25) and have Gram matrix
    ``Lambda / n`` in ``L^2`` of the empirical measure; on the training points
    ``Psi(x_i) = A[i, :]``.

    Because ``B`` vanishes outside the pivot rows (16), ``Psi(x)^T = k_piv(x) T`` with
    ``k_piv(x) = [k(x_{p_1}, x), ..., k(x_{p_m}, x)]`` and ``T = B[piv] V`` (m, m):
    :meth:`transform` costs m kernel evaluations plus O(m^2) per point and needs only the
    pivot points (``docs/derivations/joint_distribution.md``, "Derived formulas").

    The rotated training features ``A`` (n, m) are not stored: the fit keeps the factor
    ``L^T`` (m, n) and ``V`` (m, m), and every statistic the estimators need
    (``A^T A = Lambda``, ``A^T 1``, ``A_Y^T A_X``, ``A^T F``) is a product of ``L`` with
    an m-sized matrix, so a fit makes two passes over the (n, m) factor after the
    pivoted Cholesky (one for ``L^T L`` and ``L^T 1``, one for the cross products).

    Parameters
    ----------
    kernel : str or callable, default="gaussian"
    lengthscale : float, default=1.0
    tol, rel_tol, max_rank : float, float, int, optional
        See :func:`pivoted_cholesky` (all None: ``rel_tol=1e-6``).
    rotate : bool, default=True
        If False, ``V = I``: ``Psi(x) = k_piv(x) B[piv]`` and the training features are
        ``L`` itself (still orthonormal in the RKHS by (17)/(18)).
    n_jobs : int, optional
        Threads of :meth:`fit` (the row blocks of each Algorithm 1 step and the column
        blocks of ``L^T L``), in scikit-learn's convention (None: kernelkit's default;
        ``-1``: all CPUs; 0 is invalid). The fitted basis does not depend on it.

    Attributes
    ----------
    pivots_ : ndarray of int, shape (m,)
    centers_ : ndarray, shape (m, d)
        The pivot points ``x_{p_j}``
    coef_ : ndarray, shape (m, m)
        ``T = B[piv] V``
    eigenvalues_ : ndarray, shape (m,)
        ``Lambda`` (descending; ``A^T A``). With ``rotate=False``: ``diag(L^T L)``, the
        squared norms of the columns of ``L`` in pivot order (``A^T A`` is then not
        diagonal)
    factor_t_ : ndarray, shape (m, n)
        ``L^T``, the pivoted Cholesky factor, row-major
    rotation_ : ndarray, shape (m, m)
        ``V`` (the identity if ``rotate=False``)
    train_sums_ : ndarray, shape (m,)
        ``A^T 1``
    trace_residual_ : float
        ``trace(K - L L^T)``
    n_components_ : int
        ``m``
    n_features_in_ : int

    Notes
    -----
    Inputs of any real dtype are converted to float64; all outputs are float64 NumPy
    arrays (the factor's round-off grows like ``1 / sqrt(d_p)`` at small pivots; a library choice).
    """

    _parameter_constraints: ClassVar[dict] = {
        "kernel": KERNEL_CONSTRAINT,
        "lengthscale": POSITIVE,
        **TOLERANCE_CONSTRAINTS,
        "rotate": ["boolean"],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        kernel="gaussian",
        lengthscale: float = 1.0,
        tol=None,
        rel_tol=None,
        max_rank=None,
        rotate: bool = True,
        n_jobs=None,
    ):
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.tol = tol
        self.rel_tol = rel_tol
        self.max_rank = max_rank
        self.rotate = rotate
        self.n_jobs = n_jobs

    def fit(self, X, y=None):
        """Factorise the kernel matrix of ``X`` and build the basis.

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : None
            Ignored (scikit-learn's transformer signature).

        Returns
        -------
        LowRankBasis
            ``self``.
        """
        self._validate_params()
        X = _sk_2d(self, X, reset=True)
        chol = self._fit_pivots(X)
        gram, sums = gram_and_sums(chol.Lt, self.n_jobs)  # L^T L (m, m), L^T 1 (m,)
        self._set_statistics(
            gram, sums, chol.trace_residual, chol.trace, X.shape[0], factor_t=chol.Lt
        )
        return self

    # -- the two halves of a fit (the sampled / out-of-core fit of
    #    :mod:`kernelkit.distributions._chunked` runs them on different data) ------------
    def _fit_pivots(self, X: np.ndarray):
        """Algorithm 1 on the rows ``X`` (validated float64; row blocks on ``n_jobs``
        threads): sets the pivots, the pivot points ``centers_`` and ``pivot_coef_`` =
        ``B[piv]`` (m, m); returns the :class:`~kernelkit.distributions.PivotedCholesky`."""
        n_jobs = check_n_jobs(self.n_jobs)
        tol, rel_tol, max_rank = _check_tolerances(
            self.tol, self.rel_tol, self.max_rank, X.shape[0]
        )
        self.kernel_ = make_kernel(self.kernel, self.lengthscale)
        chol = _in_row_order(
            X, lambda Xs: _pivoted_cholesky(self.kernel_, Xs, tol, rel_tol, max_rank, n_jobs=n_jobs)
        )
        self.pivots_ = chol.pivots
        self.pivot_coef_ = chol.B_piv
        self.centers_ = X[chol.pivots].copy()
        self.n_components_ = chol.rank
        return chol

    def pivot_factor(self, X: np.ndarray) -> np.ndarray:
        """Rows of the factor ``L`` at validated points ``X``: ``k_piv(X) B[piv]``.

        By (16) and (18) (``K B = L``, ``B`` zero off the pivot rows) these are the rows
        of Algorithm 1's ``L`` at training points, for any point set.

        Parameters
        ----------
        X : ndarray of shape (b, d)
            Validated (float64) points.

        Returns
        -------
        ndarray of shape (b, m)
        """
        Kp = self.kernel_(X, self.centers_)  # (b, m)
        return Kp @ self.pivot_coef_

    def _set_statistics(self, gram, sums, trace_residual, trace, n, factor_t=None):
        """Rotate (Sec. 4.2) from ``L^T L`` (m, m) and ``L^T 1`` (m,) over the n training
        points: ``L^T L = V Lambda V^T``, ``T = B[piv] V``, ``A^T 1 = V^T L^T 1``.
        ``factor_t`` is ``L^T`` (m, n) when it is kept (in-memory fits), else None."""
        m = self.n_components_
        with SingleThreadedBlas():  # m x m work: BLAS threads would only synchronise
            if self.rotate:
                lam, V = np.linalg.eigh(gram)
                lam, V = lam[::-1].copy(), np.ascontiguousarray(V[:, ::-1])
                # sign convention: each eigenvector's largest entry is positive, so fits
                # whose statistics differ by round-off (block order) agree in coef_ too
                if V.size:
                    big = V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])]
                    V *= np.where(big < 0, -1.0, 1.0)
            else:
                lam, V = np.diag(gram).copy(), np.eye(m)
            self.coef_ = self.pivot_coef_ @ V
        self.eigenvalues_ = np.maximum(lam, 0.0)
        self.rotation_ = V
        self.factor_t_ = factor_t
        self.train_sums_ = V.T @ sums  # A^T 1 = V^T L^T 1
        self.trace_residual_ = float(trace_residual)
        self.trace_ = float(trace)
        self.n_samples_fit_ = int(n)

    @property
    def train_features_t_(self) -> np.ndarray:
        """``A^T = V^T L^T``, shape (m, n): formed on access (O(n m^2) time, n m memory)."""
        check_is_fitted(self, "coef_")
        return (
            dot_train(self, np.eye(self.n_components_))
            if self.n_components_
            else np.zeros((0, self.n_samples_fit_))
        )

    @property
    def train_features_(self) -> np.ndarray:
        """``A = L V`` = ``transform`` of the training points, shape (n, m) (formed on access)."""
        return self.train_features_t_.T

    def kernel_pivots(self, X) -> np.ndarray:
        """``[k(x_i, x_{p_j})]``, the kernel between the points and the pivots.

        Parameters
        ----------
        X : array-like of shape (b, d)

        Returns
        -------
        ndarray of shape (b, m)
        """
        check_is_fitted(self, "coef_")
        X = _sk_2d(self, X, reset=False)
        return self.kernel_(X, self.centers_)

    def transform(self, X) -> np.ndarray:
        """``Psi(X) = k_piv(X) T``, the basis functions at the points.

        Parameters
        ----------
        X : array-like of shape (b, d)

        Returns
        -------
        ndarray of shape (b, m)
        """
        check_is_fitted(self, "coef_")
        X = _sk_2d(self, X, reset=False)
        out = np.empty((X.shape[0], self.n_components_))
        for s in range(0, X.shape[0], _BLOCK):
            Kp = self.kernel_(X[s : s + _BLOCK], self.centers_)
            np.matmul(Kp, self.coef_, out=out[s : s + _BLOCK])
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.requires_fit = True
        return tags


#: every live :class:`BasisCache`, so that a forked child can give each a fresh lock
_CACHES: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A child forked while another thread of the parent held a cache's lock would wait
    for it for ever on its first fit through that cache: every cache gets a new lock (its
    entries, fitted in the parent, stay valid)."""
    for cache in list(_CACHES):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class BasisCache:
    """Share fitted :class:`LowRankBasis` objects between estimators.

    Pass one cache as ``basis_cache=`` to several :class:`JointDistribution`,
    :class:`ConditionalMeanEmbedding` or :class:`KernelLogisticRegression` fits: a fit on
    the same data (same bytes, compared by a BLAKE2 hash) with the same kernel,
    lengthscale and tolerances reuses the basis of the first fit instead of running the
    pivoted Cholesky again. A grid over ``reg`` then costs one factorisation per
    (data, lengthscale) and side. The fitted basis is a deterministic function of those
    inputs, so results are identical to uncached fits.

    Cached bases are shared, not copied: their arrays are made read-only, and the
    estimators that use them reference the same object (do not refit it). Under
    :func:`sklearn.base.clone` (``GridSearchCV``) the cache is shared too (``copy`` and
    ``deepcopy`` return the cache itself); pickling gives an empty cache (so joblib
    workers each start their own); a forked child keeps the entries and gets a lock of its
    own (one another thread held at the fork is not waited for). Memory: each entry holds
    an (n, m) factor; call :meth:`clear` when done.

    Parameters
    ----------
    max_entries : int, optional
        Keep at most this many bases (least recently used dropped first).

    Attributes
    ----------
    hits, misses : int
        Fits served from the cache / computed (cumulative; :meth:`clear` keeps them).

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.distributions import BasisCache, JointDistribution
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 1)); Y = X + rng.standard_normal((200, 1))
    >>> cache = BasisCache()
    >>> models = [JointDistribution(reg=r, basis_cache=cache).fit(X, Y) for r in (1e-4, 1e-2)]
    >>> (cache.misses, cache.hits)
    (2, 2)
    """

    def __init__(self, max_entries: int | None = None):
        if max_entries is not None:
            message = f"max_entries must be a positive integer or None, got {max_entries!r}."
            if isinstance(max_entries, bool) or not isinstance(max_entries, Real):
                raise TypeError(message)
            try:  # exact for ints of any size and Fraction(3, 1); 2.0 passes too
                value = int(max_entries)
            except (OverflowError, ValueError):  # inf, NaN
                raise ValueError(message) from None
            if value != max_entries or value < 1:
                raise ValueError(message)
            max_entries = value
        self.max_entries = max_entries
        self._store: dict = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        _CACHES.add(self)

    def __len__(self) -> int:
        return len(self._store)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        # a cache is not persisted: pickling an estimator that holds one (or sending it
        # to a joblib worker) must not serialise every cached (n, m) factor
        state = dict(self.__dict__)
        del state["_lock"]
        state["_store"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _CACHES.add(self)

    def clear(self) -> None:
        """Drop every cached basis."""
        with self._lock:
            self._store.clear()

    @staticmethod
    def _key(X: np.ndarray, kernel, lengthscale, tol, rel_tol, max_rank, rotate):
        digest = hashlib.blake2b(
            np.ascontiguousarray(X).view(np.uint8).ravel(), digest_size=16
        ).hexdigest()
        kern = kernel.lower() if isinstance(kernel, str) else kernel  # callables: identity
        return (digest, X.shape, kern, float(lengthscale), tol, rel_tol, max_rank, bool(rotate))

    def fit(
        self,
        X,
        *,
        kernel="gaussian",
        lengthscale: float = 1.0,
        tol=None,
        rel_tol=None,
        max_rank=None,
        rotate: bool = True,
        n_jobs=None,
    ) -> LowRankBasis:
        """``LowRankBasis(kernel, lengthscale, ...).fit(X)``, or the cached equal fit.

        ``n_jobs`` (threads of a fit that runs) is not part of the key: the fitted basis
        does not depend on it.

        Parameters
        ----------
        X : array-like of shape (n, d)
        kernel, lengthscale, tol, rel_tol, max_rank, rotate, n_jobs
            Keyword-only; the parameters of :class:`LowRankBasis`.

        Returns
        -------
        LowRankBasis
            Fitted, shared with the other users of the cache (read-only arrays).
        """
        X = np.ascontiguousarray(X, dtype=np.float64) if isinstance(X, np.ndarray) else X
        basis = LowRankBasis(
            kernel,
            lengthscale,
            tol=tol,
            rel_tol=rel_tol,
            max_rank=max_rank,
            rotate=rotate,
            n_jobs=n_jobs,
        )
        if not isinstance(X, np.ndarray):
            return basis.fit(X)  # nothing to hash (e.g. lists): no caching
        key = self._key(X, kernel, lengthscale, tol, rel_tol, max_rank, rotate)
        with self._lock:
            hit = self._store.pop(key, None)
            if hit is not None:
                self._store[key] = hit  # most recently used last
                self.hits += 1
                return hit
        basis.fit(X)
        for v in vars(basis).values():
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        with self._lock:
            self.misses += 1
            self._store[key] = basis
            while self.max_entries is not None and len(self._store) > self.max_entries:
                self._store.pop(next(iter(self._store)))
        return basis


def fit_basis(cache, X, **kwargs) -> LowRankBasis:
    """Fit a :class:`LowRankBasis` on ``X``, through ``cache`` (a :class:`BasisCache`) if
    it is not None."""
    if cache is None:
        return LowRankBasis(**kwargs).fit(X)
    if not isinstance(cache, BasisCache):
        raise TypeError(f"basis_cache must be a BasisCache or None, got {type(cache).__name__}.")
    return cache.fit(X, **kwargs)
