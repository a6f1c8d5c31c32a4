"""Matrix-free pivoted Cholesky decomposition with the biorthogonal basis (Algorithm 1).

Only ``diag(K)`` and the ``m`` pivot columns of ``K`` are ever evaluated; the factor is
stored row-major as ``L^T`` (m, n): O(m^2 n) time and O(m n) memory in all.

The pivots are Algorithm 1's greedy ones (``argmax`` of the exact residual diagonal,
ties to the lowest row), but the work is done in *panels* so that the factor is read once
per panel instead of once per pivot (a left-looking blocked Cholesky):

1. predict the next ``c <= _PANEL`` pivots by running Algorithm 1 on a pool of the rows
   with the largest residual diagonal (:func:`_predict`; O(c * pool * m) and one
   selection over the n residuals);
2. compute their columns ``K[:, C] - L L[C]^T`` in one matrix product (BLAS-3) plus ``c``
   kernel columns, in column blocks;
3. take the *certain* candidates (predicted while the pool's largest residual was above
   every residual outside the pool, so that Algorithm 1 takes them) in one pass over the
   rows (:class:`_Commit`): their rows of ``L^T`` are ``T^{-1} S`` with ``T`` the new
   factor at the pivot rows, and ``d`` falls by their squares; the pass is cut back to the
   steps whose trace residual is above the threshold (line 2);
4. run the remaining steps of Algorithm 1 one by one: the pivot is the argmax of the exact
   residual diagonal; if it is one of the candidates, its column is the panel column minus
   the panel's own earlier columns (a product with at most ``c`` rows of ``L^T``), the
   residual diagonal is updated over all n rows (line 7), and so on; the first pivot
   that is not a candidate starts the next panel. Each pass over the rows also takes
   the step of the next predicted candidate (:class:`_PairStep`), kept only if that
   candidate is the argmax after the first step.

A wrong prediction costs one unused column or a discarded second step, never a
different pivot. Per pivot this reads O(c) rows of ``L^T`` instead of all ``m``, and the
``O(n m^2)`` products run at BLAS-3 speed (user guide, joint distributions page, for the
measured figures).
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import solve_triangular

from .._backend import to_numpy, validate_data, validate_positive_float, validate_positive_int
from .._backend.parallel import SingleThreadedBlas, effective_n_jobs, pool_map
from ._kernels import Kernel, make_kernel

__all__ = ["PivotedCholesky", "pivoted_cholesky"]

# Stop when the largest remaining diagonal entry is below this fraction of max diag(K):
# further pivots would be round-off (library choice; docs/derivations/joint_distribution.md).
_RANK_EPS = 1e-14
_BLOCK = 1 << 15  # rows per block: the block's vectors stay in cache within a step
_GROWTH = 1.25  # capacity growth of the factor (ndarray.resize zero-fills what it adds)
_PILOT = 1 << 14  # above 4x this many rows, a pilot run on a strided subsample sizes L
_PANEL = 24  # candidate pivots per panel: one product over the factor per panel
_SUB = 2048  # columns of a sub-block of _Commit: (_PANEL, _SUB) squares fit in L2
_POOL = 4096  # rows with the largest residual diagonal that predict a panel's pivots
_POOL_MAX = 1 << 14  # ... grown up to this many rows while the prediction is uncertain
_SPARE = 4  # uncertain predictions kept after the certain ones (most of them miss)


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
    The pivots are computed in panels of up to 24 (module doc): the same pivots and the
    same factor, up to round-off, as one column at a time, with the ``O(n m^2)`` work
    in matrix products. Column and row blocks run in kernelkit's threads with BLAS
    single-threaded.
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


def _predict(k: Kernel, X: np.ndarray, Lt: np.ndarray, m: int, d: np.ndarray, p: int, count: int):
    """Up to ``count`` pivots that Algorithm 1 is expected to choose next, ``p`` first, and
    how many of the first are certain (chosen while the pool's largest residual was above
    every residual outside the pool, so Algorithm 1 takes them, up to round-off).

    Algorithm 1 continued from the factor's first ``m`` rows on a pool of the rows with
    the largest residual diagonal (and ``p``): its choices are Algorithm 1's (up to
    round-off) as long as the pool's largest residual stays above every residual outside
    the pool. The pool starts at ``_POOL`` rows and grows 4x while fewer than ``count``
    choices are certain, up to ``_POOL_MAX`` rows; then ``_SPARE`` uncertain choices follow
    the certain ones (a wrong guess costs one unused column). Costs O(count * pool * m).
    """
    n = d.shape[0]
    if count <= 1:
        return np.array([p]), 1
    if n > _POOL:  # one selection over n for every pool size
        largest = min(n - 1, max(_POOL, _POOL_MAX))
        top = np.argpartition(d, n - largest - 1)[n - largest - 1 :]  # (largest + 1,)
        top = top[np.argsort(-d[top], kind="stable")]  # decreasing residual
    size = _POOL
    while True:
        if n > size:
            outside = float(d[top[size]])  # the largest residual outside the pool
            pool = np.union1d(top[:size], [p])  # sorted: ties go to the lowest row, as in _Step
        else:
            outside, pool = -1.0, np.arange(n)
        if pool.shape[0] < n:
            Xp, Lp = X[pool], Lt[:m, pool]  # (t, dim), (m, t): copies
        else:  # every row: no copies of the factor
            Xp, Lp = X, Lt[:m]
        chosen, certain = _pool_greedy(k, Xp, Lp, d[pool], pool, p, count, outside)
        if 2 * certain >= count or size >= min(n, _POOL_MAX):
            return pool[chosen[: certain + _SPARE]], certain
        size = min(4 * size, _POOL_MAX)


def _pool_greedy(k, Xp, Lp, dp, pool, p, count, outside):
    """Algorithm 1 on the pool rows (``Xp`` (t, dim), their factor rows ``Lp`` (m, t),
    residuals ``dp`` (t,), modified) from the pivot ``p``: the positions in the pool of up to
    ``count`` pivots, and how many of the first were chosen above ``outside``."""
    t, m = pool.shape[0], Lp.shape[0]
    new = np.empty((count, t))  # the pool's rows of the predicted columns
    chosen = [int(np.searchsorted(pool, p))]
    certain = 1
    for j in range(count):
        q = chosen[j]
        l = new[j]
        l[:] = k(Xp, Xp[q : q + 1])[:, 0]  # K[pool, q]
        if m:
            l -= Lp[:, q] @ Lp
        if j:
            l -= new[:j, q] @ new[:j]
        l *= 1.0 / math.sqrt(dp[q])
        dp -= l * l
        dp[q] = 0.0
        np.maximum(dp, 0.0, out=dp)
        if j + 1 < count:
            q = int(np.argmax(dp))
            if dp[q] <= 0.0:
                break
            if dp[q] > outside and certain == len(chosen):
                certain += 1
            chosen.append(q)
    return chosen, certain


def _thread_buffer(scratch: dict, shape) -> np.ndarray:
    """The calling thread's scratch buffer of ``shape`` in ``scratch`` (keyed by thread id;
    made on the thread's first block of a factorisation, reused by its later blocks)."""
    buf = scratch.get(threading.get_ident())
    if buf is None:
        buf = scratch.setdefault(threading.get_ident(), np.empty(shape))
    return buf


class _Panel:
    """Columns ``K[:, c] - L L[c]^T`` (line 4 before the division) of the candidate pivots
    ``C``, as rows of ``S`` (c, n), over a block of columns ``[a, b)``: the ``c`` kernel
    columns, then one matrix product ``L[C] L^T`` over the factor's first ``m`` rows
    (BLAS-3: the factor is read once per panel instead of once per pivot)."""

    def __init__(self, k, X, Xt, Kc, Lt, m, cand, S):
        self.k, self.X, self.Xt, self.Kc, self.Lt, self.m = k, X, Xt, Kc, Lt, m
        self.cand, self.S = cand, S
        self.Lc = Lt[:m, cand].T.copy()  # L[C, :m], (c, m)

    def __call__(self, a):
        b = min(a + _BLOCK, self.S.shape[1])
        S = self.S[:, a:b]  # (c, b - a)
        if not self.m:
            S[:] = 0.0
        else:
            np.matmul(self.Lc, self.Lt[: self.m, a:b], out=S)  # (c, m) @ (m, b - a)
        if self.Kc is None:
            col, tmp = np.empty(b - a), np.empty(b - a)
            for i, c in enumerate(self.cand):
                self.k.column(self.Xt[:, a:b], self.X[c], col, tmp)  # K[a:b, c]
                np.subtract(col, S[i], out=S[i])
        else:
            np.subtract(self.Kc[a:b].T, S, out=S)


class _Step:
    """One Algorithm 1 step on a block of rows ``[a, b)``, fused so that the block's
    vectors stay in cache: ``l = (S[i] - L[:, j0:m] L[p, j0:m]^T) / sqrt(d_p)`` (line 4,
    ``S[i]`` the panel column of the pivot, reduced by the factor's rows before the
    panel), ``d -= l^2`` (line 7, clipped at 0), then the block's sum and argmax of
    ``d``."""

    def __init__(self, Lt, d, scratch):
        self.Lt, self.d = Lt, d
        self.scratch = scratch  # per-thread (2, _BLOCK) buffers, keyed by thread id

    def set(self, col, j0, m, p, lp, s):
        self.col, self.j0, self.m, self.p, self.lp, self.s = col, j0, m, p, lp, s

    def __call__(self, a):
        b = min(a + _BLOCK, self.d.shape[0])
        buf = _thread_buffer(self.scratch, (2, min(_BLOCK, self.d.shape[0])))
        t1, t2 = buf[0, : b - a], buf[1, : b - a]
        l = self.Lt[self.m, a:b]
        if self.m > self.j0:
            np.matmul(self.lp, self.Lt[self.j0 : self.m, a:b], out=t2)  # the panel's part
            np.subtract(self.col[a:b], t2, out=l)
        else:
            l[:] = self.col[a:b]
        l *= self.s
        d = self.d[a:b]
        np.square(l, out=t1)
        d -= t1
        if a <= self.p < b:
            d[self.p - a] = 0.0
        np.maximum(d, 0.0, out=d)
        j = int(np.argmax(d))
        return float(d.sum()), float(d[j]), a + j


class _PairStep(_Step):
    """Two Algorithm 1 steps in one pass over a block of rows ``[a, b)``: pivot ``p`` and
    the predicted next pivot ``q``, sharing the read of the panel's rows of ``L^T``.

    ``l1`` and ``d1 = d - l1^2`` (written to ``d``) as in :class:`_Step`; then
    ``l2 = (S[q] - L[:, j0:m] L[q, j0:m]^T - l1 l1[q]) / sqrt(d1[q])`` (line 4 at step
    m + 1, with ``l1[q]`` and ``d1[q]`` from the pivot row beforehand) and
    ``d2 = d1 - l2^2`` (written to ``spare``). Returns the sums and argmaxes of ``d1`` and
    ``d2``: the second step stands only if ``q`` is the argmax of ``d1`` (Algorithm 1's
    choice); otherwise ``d`` holds ``d1`` and the second column is discarded."""

    def set_pair(self, cols, j0, m, p, q, lpq, s, s2, l1q, spare):
        self.cols, self.j0, self.m, self.p, self.q = cols, j0, m, p, q
        self.lpq, self.s, self.s2, self.l1q, self.spare = lpq, s, s2, l1q, spare

    def __call__(self, a):
        b = min(a + _BLOCK, self.d.shape[0])
        buf = _thread_buffer(self.scratch, (3, min(_BLOCK, self.d.shape[0])))
        t1, t2 = buf[0, : b - a], buf[1:, : b - a]
        m, j0 = self.m, self.j0
        l1, l2 = self.Lt[m, a:b], self.Lt[m + 1, a:b]
        if m > j0:
            np.matmul(self.lpq, self.Lt[j0:m, a:b], out=t2)  # (2, b - a), one read of L^T
            np.subtract(self.cols[0][a:b], t2[0], out=l1)
            np.subtract(self.cols[1][a:b], t2[1], out=l2)
        else:
            l1[:] = self.cols[0][a:b]
            l2[:] = self.cols[1][a:b]
        l1 *= self.s
        d = self.d[a:b]
        np.square(l1, out=t1)
        d -= t1
        if a <= self.p < b:
            d[self.p - a] = 0.0
        np.maximum(d, 0.0, out=d)
        j1 = int(np.argmax(d))
        np.multiply(l1, self.l1q, out=t1)
        l2 -= t1
        l2 *= self.s2
        d2 = self.spare[a:b]
        np.square(l2, out=t1)
        np.subtract(d, t1, out=d2)
        if a <= self.q < b:
            d2[self.q - a] = 0.0
        np.maximum(d2, 0.0, out=d2)
        j2 = int(np.argmax(d2))
        return float(d.sum()), float(d[j1]), a + j1, float(d2.sum()), float(d2[j2]), a + j2


class _Commit:
    """The certified pivots ``P`` (k,) of a panel, all in one pass over a block of rows
    ``[a, b)``: their rows of the factor ``Lt[m:m + k, a:b] = T^{-1} S[:k, a:b]``, with
    ``T`` (k, k) the new factor at the pivot rows (``T[i, j] = l_j[P_i]``, lower
    triangular: ``S[i] = sum_{j <= i} T[i, j] l_j`` is line 4 unrolled over the panel),
    then ``d -= sum_i l_i^2`` (line 7 for the k steps), 0 at the pivots, clipped at 0.
    Returns the rows' squared norms (k,) and the block's sum, max and argmax of ``d``."""

    def __init__(self, Lt, d, S, Tinv, m, P, scratch):
        self.Lt, self.d, self.S, self.Tinv, self.m = Lt, d, S, Tinv, m
        self.P = np.sort(P)  # the pivots in row order (blocks find theirs by bisection)
        self.scratch = scratch
        self.ones = np.ones(max(Tinv.shape[0], _SUB))

    def __call__(self, a):
        b = min(a + _BLOCK, self.d.shape[0])
        k = self.Tinv.shape[0]
        buf = _thread_buffer(self.scratch, (_PANEL, _SUB))
        norms = np.zeros(k)
        for c in range(a, b, _SUB):  # sub-blocks: the squares stay in the core's cache
            e = min(c + _SUB, b)
            rows = self.Lt[self.m : self.m + k, c:e]  # (k, e - c)
            np.matmul(self.Tinv, self.S[:, c:e], out=rows)
            sq = buf[:k, : e - c]
            np.square(rows, out=sq)
            self.d[c:e] -= self.ones[:k] @ sq  # (e - c,)
            norms += sq @ self.ones[: e - c]
        d = self.d[a:b]
        lo, hi = np.searchsorted(self.P, [a, b])
        d[self.P[lo:hi] - a] = 0.0
        np.maximum(d, 0.0, out=d)
        j = int(np.argmax(d))
        return norms, float(d.sum()), float(d[j]), a + j


def _panel_factor(S, P, dP, d_floor):
    """``T`` (k', k') of :class:`_Commit` from the panel columns ``S`` (k, n) at the pivot
    rows ``P`` (k,): Algorithm 1's steps on those rows (line 4 with ``d_p`` from the tracked
    residuals ``dP`` (k,)), stopped before a pivot whose residual is not above
    ``d_floor`` (the round-off guard)."""
    k = P.shape[0]
    A = S[:, P].T  # A[r, i] = S[i][P_r], (k, k)
    T = np.zeros((k, k))
    for i in range(k):
        di = dP[i] - T[i, :i] @ T[i, :i]
        if not di > d_floor:
            return T[:i, :i]
        col = A[i:, i] - T[i:, :i] @ T[i, :i]
        T[i:, i] = col / math.sqrt(di)
        T[i, i] = math.sqrt(di)
    return T


def _initial_capacity(k: Kernel, X: np.ndarray, tol, rel_tol, max_rank: int, n_jobs=None) -> int:
    """Rows to reserve for ``L^T``: 128, or for large n 3 x the rank of a pilot run on
    every (n / 16384)-th point (same relative tolerance; the subsample's rank runs low:
    at n = 10^6, d = 3 the full rank was 1.6-1.8 x the pilot's), at most a quarter of the
    machine's memory. Rows reserved but never written are never touched, so they cost no
    physical memory, and the final shrink releases them; growing a (cap, n) buffer instead
    zero-fills the new rows on one thread and may move the whole buffer (measured: 5 s of
    a 24 s fit at n = 10^6 with the old 1.5 x margin)."""
    n = X.shape[0]
    cap = 128
    if n > 4 * _PILOT:
        sub = X[:: n // _PILOT]
        sub_tol = None if tol is None else tol * sub.shape[0] / n
        m0 = _pivoted_cholesky(
            k, np.ascontiguousarray(sub), sub_tol, rel_tol, max_rank, pilot=False, n_jobs=n_jobs
        ).rank
        cap = max(cap, min(3 * m0 + 64, _memory_rows(n)))
    return min(cap, max_rank)


def _memory_rows(n: int) -> int:
    """Rows of ``n`` float64 that fill a quarter of the physical memory (or 2 GB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = 8 << 30
    return max(1, int(total // (4 * 8 * max(1, n))))


def _pivoted_cholesky(
    k: Kernel, X: np.ndarray, tol, rel_tol, max_rank: int, pilot: bool = True, n_jobs=None
) -> PivotedCholesky:
    """Algorithm 1 on validated float64 ``X`` (n, d), in panels (module doc); the column
    blocks of the panel products and the row blocks of each step run on ``n_jobs``
    threads (:func:`_n_threads`)."""
    n = X.shape[0]
    d = k.diag(X)  # (n,)
    if np.any(d < 0):
        raise ValueError("the kernel has a negative diagonal entry: it is not PSD.")
    trace = float(d.sum())
    thresholds = [t for t in (tol, None if rel_tol is None else rel_tol * trace) if t is not None]
    threshold = max(thresholds)
    d_floor = _RANK_EPS * float(d.max())
    Xt = np.ascontiguousarray(X.T) if k.stationary else None  # (d, n) for the columns

    cap = _initial_capacity(k, X, tol, rel_tol, max_rank, n_jobs) if pilot else min(max_rank, 128)
    Lt = np.empty((cap, n))  # rows of L^T, grown in place
    B_piv = np.zeros((cap, cap))  # B[pivots, :] in pivot order (upper triangular)
    pivots = np.empty(max_rank, dtype=np.intp)
    S_buf = np.empty((min(_PANEL, max_rank), n))  # the panel's columns, (c, n)
    resid = trace
    p = int(np.argmax(d))
    starts = range(0, n, _BLOCK)
    n_threads = _n_threads(n, n_jobs)
    step = _Step(Lt, d, {})
    pair = _PairStep(Lt, d, {})
    spare = np.empty(n) if max_rank > 1 else None  # d after a pair's second step
    commit_scratch = {}  # per-thread (_PANEL, _BLOCK) buffers of _Commit
    m = 0

    def more(p):  # the loop condition of Algorithm 1 and the round-off guard
        return resid > threshold and m < max_rank and d[p] > d_floor

    def grow(need):  # the buffers, to at least ``need`` rows (C order: rows keep their place)
        nonlocal cap, Lt, B_piv
        cap = min(max(int(_GROWTH * cap), cap + 32, need), max_rank)
        Lt.resize((cap, n), refcheck=False)
        step.Lt = pair.Lt = Lt
        B_new = np.zeros((cap, cap))
        B_new[:m, :m] = B_piv[:m, :m]
        B_piv = B_new

    def commit(T, cand, S, dP, resid):
        """The first ``len(T)`` candidates' steps in one pass (:class:`_Commit`), cut
        back to the steps that Algorithm 1 takes (line 2: the trace residual before each
        step above the threshold; ``len(T) <= max_rank - m``). ``dP``: the pivots'
        residuals before the panel. Returns the steps kept, the residual trace and the
        next pivot."""
        kc = T.shape[0]
        P = cand[:kc]
        Tinv = solve_triangular(T, np.eye(kc), lower=True)  # (kc, kc)
        parts = pool_map(_Commit(Lt, d, S[:kc], Tinv, m, P, commit_scratch), starts, n_threads)
        norms = np.sum([part[0] for part in parts], axis=0)  # (kc,) |l_i|^2
        before = resid - np.concatenate([[0.0], np.cumsum(norms)[:-1]])  # trace before step i
        kept = next((i for i in range(1, kc) if not before[i] > threshold), kc)
        if kept == kc:
            total = math.fsum(part[1] for part in parts)
            return kc, total, max(parts, key=lambda part: part[2])[3]
        # rare (the last panel): undo the steps after ``kept``, then the residuals as
        # Algorithm 1 leaves them after step ``kept``
        rows = Lt[m + kept : m + kc]  # (kc - kept, n)
        np.add(d, np.einsum("ij,ij->j", rows, rows), out=d)
        d[P[kept:]] = dP[kept:] - np.sum(T[kept:, :kept] ** 2, axis=1)
        d[P[:kept]] = 0.0
        np.maximum(d, 0.0, out=d)
        return kept, float(d.sum()), int(np.argmax(d))

    # the per-step products are matrix-vector (memory bound): BLAS threads only add
    # synchronisation (measured 5x the CPU time on a loaded 2-core machine), so BLAS
    # runs single-threaded and the blocks are spread over our own threads
    with SingleThreadedBlas():  # threadpoolctl, reference counted
        while more(p):
            # a panel: candidate pivots, their columns in one product over the factor
            cand, certain = _predict(k, X, Lt, m, d, p, min(_PANEL, max_rank - m))
            S = S_buf[: cand.shape[0]]
            Kc = None if Xt is not None else k(X, X[cand])  # callables: (n, c), this thread
            pool_map(_Panel(k, X, Xt, Kc, Lt, m, cand, S), starts, n_threads)
            slot = {int(c): i for i, c in enumerate(cand)}
            nxt = 0  # position in cand of the next predicted pivot
            j0 = m
            # the certain candidates: all their steps in one pass over the rows
            T = _panel_factor(S[:certain], cand[:certain], d[cand[:certain]], d_floor)
            if T.shape[0] >= 2:
                if m + T.shape[0] > cap:
                    grow(m + T.shape[0])
                kept, resid, p = commit(T, cand, S, d[cand[: T.shape[0]]], resid)
                for i in range(kept):
                    lp = Lt[: m + i, cand[i]].copy()  # L[p, :m + i]
                    s_i = 1.0 / T[i, i]
                    if m + i:
                        B_piv[: m + i, m + i] = -(B_piv[: m + i, : m + i] @ lp) * s_i
                    B_piv[m + i, m + i] = s_i
                    pivots[m + i] = cand[i]
                    del slot[int(cand[i])]
                m += kept
                nxt = kept
            # the panel's steps, while the greedy pivot is a candidate (line 3 unchanged)
            while more(p) and p in slot:
                i = slot.pop(p)
                dp = float(d[p])
                lp = Lt[:m, p].copy()  # L[p, :m], (m,)
                s = 1.0 / math.sqrt(dp)
                # the predicted next pivot q, stepped in the same pass if it stays valid
                while nxt < len(cand) and int(cand[nxt]) not in slot:
                    nxt += 1
                q = int(cand[nxt]) if nxt < len(cand) and m + 1 < max_rank else -1
                if q >= 0:  # L[q, m] and d1[q] of step m, from the pivot row
                    l1q = (S[i, q] - lp[j0:] @ Lt[j0:m, q]) * s
                    d1q = float(d[q]) - l1q * l1q
                    if not d1q > d_floor:
                        q = -1
                if m + 1 + (q >= 0) > cap:
                    grow(m + 1 + (q >= 0))
                if q >= 0:
                    lpq = np.stack([lp[j0:], Lt[j0:m, q]])  # (2, m - j0)
                    s2 = 1.0 / math.sqrt(d1q)
                    pair.set_pair((S[i], S[slot[q]]), j0, m, p, q, lpq, s, s2, l1q, spare)
                    parts = pool_map(pair, starts, n_threads)
                else:
                    step.set(S[i], j0, m, p, lp[j0:], s)
                    parts = pool_map(step, starts, n_threads)
                # line 5 in pivot coordinates: b = (e_m - B L[p]^T) / sqrt(d_p)
                if m:
                    B_piv[:m, m] = -(B_piv[:m, :m] @ lp) * s
                B_piv[m, m] = s
                pivots[m] = p
                m += 1
                resid = math.fsum(part[0] for part in parts)
                p = max(parts, key=lambda part: part[1])[2]
                if q >= 0 and p == q and more(q):  # Algorithm 1 takes q next: keep step 2
                    slot.pop(q)
                    lp = Lt[:m, q].copy()
                    B_piv[:m, m] = -(B_piv[:m, :m] @ lp) * s2
                    B_piv[m, m] = s2
                    pivots[m] = q
                    m += 1
                    d, spare = spare, d
                    step.d = pair.d = d
                    resid = math.fsum(part[3] for part in parts)
                    p = max(parts, key=lambda part: part[4])[5]
    Lt.resize((m, n), refcheck=False)
    return PivotedCholesky(
        Lt=Lt,
        pivots=pivots[:m].copy(),
        B_piv=B_piv[:m, :m].copy(),
        diag_residual=d,
        trace_residual=resid,
        trace=trace,
    )
