"""Matrix-free pivoted Cholesky decomposition with the biorthogonal basis (Algorithm 1).

Only ``diag(K)`` and the ``m`` pivot columns of ``K`` are ever evaluated; the factor is
stored row-major as ``L^T`` (m, n), so each step is one kernel column, one matrix-vector
product over the rows found so far and a few O(n) vector operations: O(m^2 n) time and
O(m n) memory in total.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._backend import to_numpy, validate_data, validate_positive_float, validate_positive_int
from .._backend.parallel import SingleThreadedBlas, effective_n_jobs, pool_map
from ._kernels import Kernel, make_kernel

__all__ = ["PivotedCholesky", "pivoted_cholesky"]

# Stop when the largest remaining diagonal entry is below this fraction of max diag(K):
# further pivots would be round-off (library choice; user guide, joint distributions page).
_RANK_EPS = 1e-14
_BLOCK = 1 << 15  # rows per block: the block's vectors stay in cache within a step
_GROWTH = 1.25  # capacity growth of the factor (ndarray.resize zero-fills what it adds)
_PILOT = 1 << 14  # above 4x this many rows, a pilot run on a strided subsample sizes L


@dataclass(frozen=True, eq=False)
class PivotedCholesky:
    """Result of :func:`pivoted_cholesky`.

    Unpacks as ``L, B, pivots = pivoted_cholesky(...)``.

    Attributes
    ----------
    Lt : ndarray, shape (m, n)
        The factor, row-major (``L = Lt.T``).
    pivots : ndarray of int, shape (m,)
        ``p_1, ..., p_m`` in the order they were chosen.
    B_piv : ndarray, shape (m, m)
        The pivot rows of ``B`` (``B[pivots, :]``), upper triangular: ``B`` is zero outside
        the pivot rows (16).
    diag_residual : ndarray, shape (n,)
        ``diag(K - L L^T)`` (clipped at 0, exactly 0 at the pivots).
    trace_residual : float
        ``trace(K - L L^T) = sum(diag_residual)`` (15).
    trace : float
        ``trace(K)``.
    """

    Lt: np.ndarray
    pivots: np.ndarray
    B_piv: np.ndarray
    diag_residual: np.ndarray
    trace_residual: float
    trace: float

    @property
    def L(self) -> np.ndarray:
        """The factor ``L``, shape (n, m) (a transposed view of :attr:`Lt`)."""
        return self.Lt.T

    @property
    def rank(self) -> int:
        return int(self.pivots.shape[0])

    @property
    def n_samples(self) -> int:
        return int(self.Lt.shape[1])

    @property
    def B(self) -> sp.csr_array:
        """The biorthogonal basis ``B`` (n, m) as a sparse array (only m^2 / 2 nonzeros).

        Satisfies ``B.T @ L = I`` (17) and ``K @ B = L`` (18).
        """
        m, n = self.rank, self.n_samples
        rows = np.repeat(self.pivots, m)
        cols = np.tile(np.arange(m), m)
        return sp.csr_array((self.B_piv.ravel(), (rows, cols)), shape=(n, m))

    def __iter__(self):
        return iter((self.L, self.B, self.pivots))


def _check_tolerances(tol, rel_tol, max_rank, n):
    if tol is None and rel_tol is None:
        rel_tol = 1e-6
    if tol is not None:
        tol = validate_positive_float(tol, "tol")
    if rel_tol is not None:
        rel_tol = validate_positive_float(rel_tol, "rel_tol")
    if max_rank is None:
        max_rank = n
    else:
        max_rank = validate_positive_int(max_rank, "max_rank")
    return tol, rel_tol, min(max_rank, n)


def pivoted_cholesky(
    kernel,
    X,
    *,
    lengthscale: float = 1.0,
    tol: float | None = None,
    rel_tol: float | None = None,
    max_rank: int | None = None,
) -> PivotedCholesky:
    """Greedy pivoted Cholesky ``K ~ L L^T`` with the biorthogonal basis (Algorithm 1).

    Matrix-free: the kernel matrix ``K = [k(x_i, x_j)]`` (n x n) is never formed; only its
    diagonal and the ``m`` pivot columns are evaluated. At step ``k`` the pivot is
    ``p = argmax diag(K - L L^T)`` and

    ``l = (K[:, p] - L L[p]^T) / sqrt(d_p)``,  ``b = (e_p - B L[p]^T) / sqrt(d_p)``.

    Guarantees (Thm 4.1): ``K - L L^T`` is PSD, ``trace(K - L L^T) <= threshold`` (15) (or
    the rank hit ``max_rank`` / the numerical rank), ``B^T L = I`` (17), ``K B = L`` (18),
    and ``B`` is zero outside the pivot rows (16).

    Parameters
    ----------
    kernel : str, callable or Kernel
        ``"gaussian"``, ``"laplacian"`` / ``"exponential"``, ``"matern32"``,
        ``"matern52"``, ``"cauchy"``, or a callable ``k(A, B) -> (len(A), len(B))``.
    X : array_like, shape (n, d)
    lengthscale : float, default=1.0
        Lengthscale of a named kernel (ignored for callables).
    tol : float, optional
        Absolute tolerance on ``trace(K - L L^T)``.
    rel_tol : float, optional
        Relative tolerance: stop when ``trace(K - L L^T) <= rel_tol * trace(K)`` (the
        experiments' rule, Sec. 5). If both are given, the larger threshold applies;
        if neither, ``rel_tol = 1e-6``.
    max_rank : int, optional
        Upper bound on ``m``.

    Returns
    -------
    PivotedCholesky
        With ``L`` (n, m), ``B`` (n, m, sparse), ``B_piv`` (m, m), ``pivots`` (m,);
        unpacks as ``L, B, pivots``.

    Notes
    -----
    Round-off guard (a library choice): the residual diagonal is clipped at 0, set to 0 at each
    pivot, and the iteration stops once ``max(d) <= 1e-14 max(diag K)``.

    ``X`` of any real dtype is converted to float64; all outputs are float64 (``B``
    grows like ``1 / sqrt(d_p)`` at small pivots, so lower precision would break (17)).
    Each step is memory bound (one pass over the m rows found so far): the row blocks
    run in kernelkit's threads with BLAS single-threaded.
    """
    X, _ = validate_data(X, "X")
    X = to_numpy(X, dtype=np.float64)
    X = np.ascontiguousarray(X)
    n = X.shape[0]
    tol, rel_tol, max_rank = _check_tolerances(tol, rel_tol, max_rank, n)
    k = make_kernel(kernel, lengthscale)
    return _pivoted_cholesky(k, X, tol, rel_tol, max_rank)


def _n_threads(n: int, n_jobs=None) -> int:
    """Worker threads for the row blocks: ``n_jobs`` in scikit-learn's convention (None:
    kernelkit's thread count, the CPUs this process may use, ``KERNELKIT_NUM_THREADS``,
    or 1 inside a ``threadpoolctl.threadpool_limits(1)`` block), at most 8 and one per
    block."""
    return max(1, min(effective_n_jobs(n_jobs), 8, n // _BLOCK))


class _Step:
    """One Algorithm 1 step on a block of rows ``[a, b)``, fused so that the block's
    vectors stay in cache: kernel column, ``l = (col - L L[p]^T) / sqrt(d_p)`` (line 4),
    ``d -= l^2`` (line 7, clipped at 0), then the block's sum and argmax of ``d``."""

    def __init__(self, k, Xt, col, Lt, d, scratch):
        self.k, self.Xt, self.col, self.Lt, self.d = k, Xt, col, Lt, d
        self.scratch = scratch  # per-thread (2, _BLOCK) buffers, keyed by thread id

    def set(self, m, p, xp, lp, s):
        self.m, self.p, self.xp, self.lp, self.s = m, p, xp, lp, s

    def __call__(self, a):
        b = min(a + _BLOCK, self.d.shape[0])
        buf = self.scratch.get(threading.get_ident())
        if buf is None:
            buf = self.scratch.setdefault(threading.get_ident(), np.empty((2, _BLOCK)))
        t1, t2 = buf[0, : b - a], buf[1, : b - a]
        l = self.Lt[self.m, a:b]
        if self.Xt is not None:
            self.k.column(self.Xt[:, a:b], self.xp, l, t1)  # K[a:b, p]
        else:
            l[:] = self.col[a:b]
        if self.m:
            np.matmul(self.lp, self.Lt[: self.m, a:b], out=t2)  # (L L[p]^T)[a:b]
            l -= t2
        l *= self.s
        d = self.d[a:b]
        np.square(l, out=t1)
        d -= t1
        if a <= self.p < b:
            d[self.p - a] = 0.0
        np.maximum(d, 0.0, out=d)
        j = int(np.argmax(d))
        return float(d.sum()), float(d[j]), a + j


def _initial_capacity(k: Kernel, X: np.ndarray, tol, rel_tol, max_rank: int, n_jobs=None) -> int:
    """Rows to reserve for ``L^T``: 128, or for large n 1.5 x the rank of a pilot run on
    every (n / 16384)-th point (same relative tolerance). Growing a (cap, n) buffer
    zero-fills and page-faults the new rows (0.65 s per 256 MB); rows reserved but never
    written are never touched, so they cost no physical memory, and are released by the
    final shrink."""
    n = X.shape[0]
    cap = 128
    if n > 4 * _PILOT:
        sub = X[:: n // _PILOT]
        sub_tol = None if tol is None else tol * sub.shape[0] / n
        m0 = _pivoted_cholesky(
            k, np.ascontiguousarray(sub), sub_tol, rel_tol, max_rank, pilot=False, n_jobs=n_jobs
        ).rank
        cap = max(cap, int(1.5 * m0) + 16)
    return min(cap, max_rank)


def _pivoted_cholesky(
    k: Kernel, X: np.ndarray, tol, rel_tol, max_rank: int, pilot: bool = True, n_jobs=None
) -> PivotedCholesky:
    """Algorithm 1 on validated float64 ``X`` (n, d); the row blocks of each step run on
    ``n_jobs`` threads (:func:`_n_threads`)."""
    n = X.shape[0]
    d = k.diag(X)  # (n,)
    if np.any(d < 0):
        raise ValueError("the kernel has a negative diagonal entry: it is not PSD.")
    trace = float(d.sum())
    thresholds = [t for t in (tol, None if rel_tol is None else rel_tol * trace) if t is not None]
    threshold = max(thresholds)
    d_floor = _RANK_EPS * float(d.max())
    Xt = np.ascontiguousarray(X.T) if k.stationary else None  # (d, n) for the columns
    col = None if Xt is not None else np.empty(n)

    cap = _initial_capacity(k, X, tol, rel_tol, max_rank, n_jobs) if pilot else min(max_rank, 128)
    Lt = np.empty((cap, n))  # rows of L^T, grown in place
    B_piv = np.zeros((cap, cap))  # B[pivots, :] in pivot order (upper triangular)
    pivots = np.empty(max_rank, dtype=np.intp)
    resid = trace
    p = int(np.argmax(d))
    starts = range(0, n, _BLOCK)
    n_threads = _n_threads(n, n_jobs)
    step = _Step(k, Xt, col, Lt, d, {})
    m = 0
    # the per-step products are matrix-vector (memory bound): BLAS threads only add
    # synchronisation (measured 5x the CPU time on a loaded 2-core machine), so BLAS
    # runs single-threaded and the row blocks are spread over our own threads
    with SingleThreadedBlas():  # threadpoolctl, reference counted
        while resid > threshold and m < max_rank:
            dp = float(d[p])
            if dp <= d_floor:
                break
            if m == cap:  # grow the buffers (C order: existing rows keep their place)
                cap = min(max(int(_GROWTH * cap), cap + 32), max_rank)
                Lt.resize((cap, n), refcheck=False)
                step.Lt = Lt
                B_new = np.zeros((cap, cap))
                B_new[:m, :m] = B_piv[:m, :m]
                B_piv = B_new
            if col is not None:  # callables: evaluated in the calling thread
                col[:] = k(X, X[p : p + 1])[:, 0]
            lp = Lt[:m, p].copy()  # L[p, :m], (m,)
            s = 1.0 / math.sqrt(dp)
            step.set(m, p, X[p], lp, s)
            parts = pool_map(step, starts, n_threads)
            # line 5 in pivot coordinates: b = (e_m - B L[p]^T) / sqrt(d_p)
            if m:
                B_piv[:m, m] = -(B_piv[:m, :m] @ lp) * s
            B_piv[m, m] = s
            pivots[m] = p
            m += 1
            resid = math.fsum(part[0] for part in parts)
            p = max(parts, key=lambda part: part[1])[2]
    Lt.resize((m, n), refcheck=False)
    return PivotedCholesky(
        Lt=Lt,
        pivots=pivots[:m].copy(),
        B_piv=B_piv[:m, :m].copy(),
        diag_residual=d,
        trace_residual=resid,
        trace=trace,
    )
