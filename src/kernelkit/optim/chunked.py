"""The SGB full-batch bound as sums over the row chunks of a Dask array.

At ``W`` (p, n) the full-batch bound of multinomial logistic regression (eq. 2.3, in the
Kronecker form ``Sigma_j = C_j (x) x_j x_j^T`` of
docs/derivations/sgb.md) and the mean-form objective of :mod:`kernelkit.optim.solvers` are sums over
the T samples::

    L(W) = (1/T) sum_j [log Z_j(W) - s_{j, y_j}] + (lam/2) ||mask * W||_F^2
    G    = (1/T) sum_j x_j (p_j - e_{y_j})^T + lam mask * W              (p, n)
    A    = (1/T) sum_j C_j (x) x_j x_j^T + lam I                          (n p, n p)

so every quantity the full-batch bound step (eq. 2.4) needs is reduced over the row
chunks of ``X`` the way the ridge / GP / joint-distribution fits reduce theirs (user
guide: "Scale-out with Dask"): one task per row chunk on the active Dask scheduler
(threads, or a ``distributed.Client``), the chunk results added in a binary tree
(:func:`kernelkit._backend.chunks.reduce_rows`). Each task forms its chunk's logits and
bound factors ``C_b`` (:func:`~kernelkit.optim.bound.multinomial_bound_from_logits`) and
returns the in-memory operator's result on its rows: a chunk's curvature is the
:class:`~kernelkit.optim.KroneckerCurvature` of its rows, so no formula is written twice.

* :func:`chunked_bound` -- objective and gradient in one pass, and the curvature as a
  :class:`ChunkedCurvature`;
* :class:`ChunkedCurvature` -- ``A`` matrix-free, one pass per product (``matvec``,
  ``diagonal``, ``class_sum``) or summed dense (``todense``), with the same ``solve``
  (dense Cholesky, or conjugate gradients with Jacobi / Kronecker preconditioning) as the
  in-memory operator;
* :func:`chunked_bound_step` -- one full-batch bound step (:func:`bound_step` on Dask);
* :func:`fit_bound` -- ``BoundLogisticRegression(solver="bound").fit`` on Dask input.

Per-chunk work runs in the data's dtype (float32 stays float32, as in memory), except
for the dense solve, whose system (``C_b`` and the gradient) float32 chunks form in
float64 from their logits, as :func:`~kernelkit.optim.spfb_step` does; the chunk
results are added in float64. Results equal the in-memory ones to round-off: only the
order of the sums differs.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._backend import caller_stacklevel
from .._backend.chunks import (
    as_dask_labels,
    as_dask_rows,
    check_block,
    checked_chunks,
    dask_classes,
    known_row_chunks,
    reduce_rows,
)
from .._backend.sklearn_validation import validate_data
from .._backend.spd_solve import spd_solve_vec
from . import _validation as _v
from . import solvers as _s
from .bound import multinomial_bound_from_logits
from .kronecker import (
    KroneckerCurvature,
    KroneckerPreconditioner,
    _not_positive_definite,
    conjugate_gradient,
    inverse_preconditioner,
)

__all__ = ["ChunkedBound", "ChunkedCurvature", "chunked_bound", "chunked_bound_step", "fit_bound"]


# ------------------------------------------------------------------------------ inputs
def _dask_rows(X, p=None, owner=None):
    """``X`` as a Dask array of whole-row chunks (NumPy is wrapped), real, 2-D, p columns."""
    X = as_dask_rows(X, "X", owner=owner, vector="error")
    if p is not None and X.shape[1] != p:
        raise ValueError(
            f"W must have shape (p, n) and X shape (T, p) with the same p; got W with "
            f"p = {p}, X shape {X.shape}."
        )
    if X.shape[0] == 0:
        raise ValueError(f"X is empty (shape {X.shape}); it needs >= 1 row.")
    return X


def _check_weights(W):
    W = _v.check_array(W, "W", "(p, n)")
    if not isinstance(W, np.ndarray):
        raise TypeError(f"W must be a NumPy array for Dask input, got {type(W).__name__}.")
    return W.astype(np.float64, copy=False)


def _add(u, v):
    """Elementwise sum of two tuples of chunk results; ``None`` is an empty chunk."""
    if u is None or v is None:
        return v if u is None else u
    return tuple(a + b for a, b in zip(u, v, strict=True))


class _Rows:
    """The checked rows of one chunk with their logits and bound at ``W``."""

    def __init__(self, W, index, Xb, yb=None):
        self.X = Xb  # (b, p), checked
        self.W = W.astype(Xb.dtype, copy=False)
        self.S = _s._logits(Xb, self.W)  # (b, n)
        _v.check_logits(np, self.S, self.W, Xb)
        self.y = None
        if yb is not None:
            self.y = _v.check_labels(np.asarray(yb), W.shape[1], len(Xb), name=f"y: block {index}")

    def curvature(self, float64: bool = False):
        """This chunk's ``sum_j C_j (x) x_j x_j^T`` (a :class:`KroneckerCurvature`);
        ``float64``: ``C_j`` from the logits in float64 (for the dense solve, as in
        :func:`~kernelkit.optim.spfb_step`: float32 ``C_j`` made it indefinite)."""
        S, X = self.S, self.X
        if float64:
            S, X = S.astype(np.float64, copy=False), X.astype(np.float64, copy=False)
        C = multinomial_bound_from_logits(S).C  # (b, n, n)
        return KroneckerCurvature._trusted(X, C, 0.0, 1.0)


def _block(W, Xb, index, owner, yb=None):
    """:class:`_Rows` of a chunk (float32 kept, other reals as float64), or None if empty."""
    if len(Xb) == 0:
        return None
    Xb = check_block(Xb, "X", index, owner=owner, n_columns=W.shape[0], vector="error", dtype=None)
    return _Rows(W, index, Xb, yb)


# ----------------------------------------------------------------------- the curvature
class ChunkedCurvature:
    """``scale * sum_j C_j (x) x_j x_j^T + lam I`` over the row chunks of a Dask ``X``
    (the bound's ``Sigma`` of eq. 2.3 summed over the samples; the matrix of eq. 2.4).

    The :class:`~kernelkit.optim.KroneckerCurvature` of all T rows of ``X`` at the
    expansion point ``W``, never holding them: every product is one pass over the chunks,
    each chunk forming its bound factors ``C_b`` from its logits ``X_b W`` and applying
    its own :class:`~kernelkit.optim.KroneckerCurvature`, the results tree-reduced.

    Parameters
    ----------
    W : ndarray, shape (p, n)
        Expansion point of the bound.
    X : dask.array.Array or ndarray, shape (T, p)
        Samples (a NumPy array is wrapped in one chunk per ``"auto"`` rows).
    lam : float
        Ridge on the diagonal (``>= 0``).
    scale : float
        ``1/T`` for the mean form (what :func:`chunked_bound` uses), ``1`` for the sum.

    Raises
    ------
    TypeError
        ``W`` or ``X`` not real, or ``lam`` / ``scale`` not numbers.
    ValueError
        Shapes that do not match, ``X`` empty, NaN or infinity in ``W``, ``lam`` negative,
        ``scale`` not positive; NaN or infinity in a chunk of ``X`` (or logits that
        overflow) when a product computes it, naming the chunk.
    """

    def __init__(self, W, X, lam=0.0, scale=1.0):
        self.W = _check_weights(W)
        self.X = _dask_rows(X, self.W.shape[0])
        self.lam = _v.check_nonneg_float(lam, "lam")
        self.scale = _v.validate_positive_float(scale, "scale")
        self.p, self.n = self.W.shape
        self._class_sum = None
        self._owner = None  # the estimator named in the messages of chunk checks

    @property
    def shape(self) -> tuple[int, int]:
        d = self.p * self.n
        return (d, d)

    def _reduce(self, piece):
        """``sum`` over the chunks of ``piece(rows)`` (float64), rows a :class:`_Rows`."""
        W = self.W

        def fn(index, Xb):
            rows = _block(W, Xb, index, self._owner)
            return None if rows is None else (np.asarray(piece(rows), dtype=np.float64),)

        return reduce_rows(fn, [self.X], _add)[0]

    def matvec(self, V) -> np.ndarray:
        """``A vec(V)``: one pass.

        Parameters
        ----------
        V : ndarray, shape (p, n) or (n p,)
            ``V``, or ``vec(V)``.

        Returns
        -------
        ndarray, shape (p, n) or (n p,)
            The shape of ``V``.
        """
        shape = tuple(np.shape(V))
        if shape not in ((self.p, self.n), (self.p * self.n,)):
            raise ValueError(
                f"V must have shape (p, n) = ({self.p}, {self.n}) or ({self.p * self.n},), "
                f"got {shape}."
            )
        V = np.asarray(V, dtype=np.float64)
        flat = V.ndim == 1
        if flat:
            V = V.reshape(self.n, self.p).T
        out = self.scale * self._reduce(lambda r: r.curvature().matvec(V.astype(r.X.dtype)))
        out = out + self.lam * V  # (p, n)
        return out.T.ravel() if flat else out

    __matmul__ = matvec

    def diagonal(self) -> np.ndarray:
        """Diagonal of ``A`` (one pass).

        Returns
        -------
        ndarray, shape (p, n)
        """
        return self.scale * self._reduce(lambda r: r.curvature().diagonal()) + self.lam

    def class_sum(self) -> np.ndarray:
        """``scale * sum_j C_j``: the class factor of the Kronecker preconditioner (one
        pass, then cached).

        Returns
        -------
        ndarray, shape (n, n)
        """
        if self._class_sum is None:
            self._class_sum = self.scale * self._reduce(lambda r: r.curvature().C.sum(axis=0))
        return self._class_sum

    def todense(self) -> np.ndarray:
        """The ``(n p) x (n p)`` matrix, the chunks' dense curvatures summed (one pass;
        each chunk O(b n^2 p^2) flops, and an (n p)^2 result per task).

        Returns
        -------
        ndarray, shape (n p, n p)
        """
        # always in float64, as the in-memory dense solve: a float32 C_j is ~0 along the
        # classes' common direction, where its rounding times |x|^2 summed over the rows
        # can outweigh lam and make the matrix indefinite
        A = self.scale * self._reduce(lambda r: r.curvature(float64=True).todense())
        A[np.diag_indices_from(A)] += self.lam
        return A

    def _proxy(self) -> KroneckerCurvature:
        """An in-memory operator with this one's ``scale sum_j C_j``, ``lam`` and ``p``:
        what :meth:`KroneckerPreconditioner.for_operator` reads (its ``X`` is unused)."""
        C = self.class_sum()[None]  # (1, n, n), already scaled
        return KroneckerCurvature._trusted(np.zeros((1, self.p)), C, self.lam, 1.0)

    def second_moment_preconditioner(self, rank=None) -> KroneckerPreconditioner:
        """The :class:`~kernelkit.optim.KroneckerPreconditioner` of all rows of ``X``.

        ``M = X^T X / T`` is reduced in one pass and handed over as a (p, p) square root
        ``R`` with ``R^T R / p = M`` (the preconditioner only uses the second moment).

        Parameters
        ----------
        rank : int, optional
            As the ``rank`` of :class:`~kernelkit.optim.KroneckerPreconditioner`.

        Returns
        -------
        KroneckerPreconditioner
        """

        def piece(index, Xb):
            Xb = check_block(Xb, "X", index, owner=self._owner, n_columns=self.p, vector="error")
            return (Xb.T @ Xb,) if len(Xb) else None

        M = reduce_rows(piece, [self.X], _add)[0] / self.X.shape[0]  # (p, p)
        lam_m, U = np.linalg.eigh((M + M.T) / 2)
        R = np.sqrt(self.p * np.clip(lam_m, 0.0, None))[:, None] * U.T  # (p, p)
        return KroneckerPreconditioner(R, rank=rank)

    def solve(
        self, G, method="cg", x0=None, rtol=1e-5, maxiter=None, precondition=True, check_x0=False
    ):
        """Solve ``A vec(D) = vec(G)`` for ``D`` of shape (p, n).

        Arguments, returns and errors as :meth:`KroneckerCurvature.solve`: ``"dense"``
        factorises :meth:`todense` (one pass); ``"cg"`` costs one pass per iteration (and
        one for the Jacobi diagonal or the class sum of the Kronecker preconditioner).
        ``precondition="kronecker"`` takes the second moment of all rows
        (:meth:`second_moment_preconditioner`, one pass); pass a prebuilt
        :class:`~kernelkit.optim.KroneckerPreconditioner` to reuse one.

        Parameters
        ----------
        G : ndarray, shape (p, n)
        method, x0, rtol, maxiter, precondition, check_x0
            As in :meth:`KroneckerCurvature.solve`.

        Returns
        -------
        D : ndarray, shape (p, n)
        info : dict
            ``{"iterations": int, "residual": float}``.
        """
        G = _v.check_array(G, "G", "(p, n)")
        if tuple(G.shape) != (self.p, self.n):
            raise ValueError(
                f"G must have shape (p, n) = ({self.p}, {self.n}), got {tuple(G.shape)}."
            )
        G = np.asarray(G, dtype=np.float64)
        if method == "dense":
            D = spd_solve_vec(self.todense(), G, lambda exc: _not_positive_definite(exc, self.lam))
            return D, {"iterations": 0, "residual": 0.0}
        if method != "cg":
            raise ValueError(f"method must be 'cg' or 'dense', got {method!r}.")
        M = inverse_preconditioner(
            precondition,
            self._proxy,
            self.second_moment_preconditioner,
            self.diagonal,
            "on every row",
        )
        return conjugate_gradient(
            self.matvec,
            G,
            x0=x0,
            rtol=rtol,
            maxiter=500 if maxiter is None else maxiter,
            Minv=M,
            check_x0=check_x0,
        )


# ------------------------------------------------------------------------- the bound
class ChunkedBound(NamedTuple):
    """The full-batch bound (eq. 2.3) at ``W`` over the chunks of ``X`` (module docstring).

    Attributes
    ----------
    loss : float
        ``L(W)``, the mean-form objective (mean cross-entropy plus the ridge).
    gradient : ndarray, shape (p, n)
        ``G = (1/T) X^T (P - Y) + lam mask * W``.
    curvature : ChunkedCurvature
        ``(1/T) sum_j C_j (x) x_j x_j^T + lam I`` at ``W`` (lazy: each product one pass).
    n_samples : int
        ``T``.
    """

    loss: float
    gradient: np.ndarray
    curvature: ChunkedCurvature
    n_samples: int


def chunked_bound(W, X, y, lam, *, mask=None) -> ChunkedBound:
    """The full-batch bound (eq. 2.3) and objective at ``W`` from the chunks of ``X``.

    One pass over the row chunks gives the objective and its gradient; the curvature is
    returned as a :class:`ChunkedCurvature` (each of its products one more pass).

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : dask.array.Array or ndarray, shape (T, p)
        Samples (an ndarray is wrapped as a Dask array: Dask is needed for it too, the
        ``dask`` extra).
    y : dask.array.Array or ndarray of int, shape (T,)
        Labels in ``0..n-1`` (aligned to the row chunks of ``X``).
    lam : float
        Mean-form ridge.
    mask : ndarray, shape (p,), optional
        Penalised rows of ``W`` (gradient and objective only; the curvature has ``lam I``).

    Returns
    -------
    ChunkedBound

    Raises
    ------
    ModuleNotFoundError
        Dask is not installed (``pip install "kernelkit[dask]"``).
    TypeError
        ``W``, ``X`` not real; ``y`` not integer; ``lam`` not a number.
    ValueError
        Shapes that do not match; NaN or infinity in ``W`` or ``mask``; ``lam < 0``; in
        the pass, NaN or infinity in a chunk of ``X``, labels outside ``0..n-1`` or logits
        that overflow (each message naming the chunk).
    """
    return _bound(W, X, y, lam, mask, None)


def _bound(W, X, y, lam, mask, owner, float64: bool = False) -> ChunkedBound:
    """:func:`chunked_bound`; ``owner`` (an estimator's name) prefixes chunk messages;
    ``float64``: float32 chunks' gradients formed in float64 from their logits (for the
    dense solve, whose float64 system amplifies their rounding by ``1 / lam``)."""
    W = _check_weights(W)
    X = _dask_rows(X, W.shape[0], owner)
    y = as_dask_labels(y, X, owner=owner)
    if y.dtype.kind not in "iu":
        raise TypeError(
            f"y must hold integer class indices 0..{W.shape[1] - 1}, got dtype {y.dtype}."
        )
    lam = _v.check_nonneg_float(lam, "lam")
    mask = _v.check_mask(mask, W.shape[0])
    Wp = _s._penalty(W, None if mask is None else np.asarray(mask, dtype=np.float64))
    T, n = X.shape[0], W.shape[1]

    def fn(index, Xb, yb):  # (sum_j log Z_j - s_{j, y_j}, X_b^T (P_b - Y_b)) of one chunk
        rows = _block(W, Xb, index, owner, yb=yb)
        if rows is None:
            return None
        S, Xb = rows.S, rows.X
        if float64:
            S, Xb = S.astype(np.float64, copy=False), Xb.astype(np.float64, copy=False)
        log_z = _s._logsumexp(np, S)  # (b,)
        Y = _s._onehot(np, rows.y, n, S)  # (b, n)
        P = np.exp(S - log_z[:, None])
        data = np.sum(log_z - np.sum(S * Y, axis=1), dtype=np.float64)
        return data, _s._data_gradient(P, Xb, Y, 1.0).astype(np.float64)

    data, grad = reduce_rows(fn, [X, y], _add)
    loss = float(data) / T + _s._ridge(np, W, Wp, lam)
    curvature = ChunkedCurvature(W, X, lam, 1.0 / T)
    curvature._owner = owner
    return ChunkedBound(loss, grad / T + lam * Wp, curvature, T)


def chunked_bound_step(
    W,
    X,
    y,
    lam,
    *,
    mask=None,
    linear_solver="cg",
    rtol=1e-10,
    maxiter=None,
    preconditioner="jacobi",
):
    """Full-batch bound majorisation step (eq. 2.4) with ``eta = 1`` over Dask chunks.

    :func:`~kernelkit.optim.bound_step` for a ``dask.array.Array`` ``X`` (and ``y``):
    the gradient in one pass (:func:`chunked_bound`), the curvature solved by
    :meth:`ChunkedCurvature.solve`. Errors as :func:`~kernelkit.optim.bound_step`.

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : dask.array.Array, shape (T, p)
    y : array_like, shape (T,)
    lam, mask, linear_solver, rtol, maxiter, preconditioner
        As in :func:`~kernelkit.optim.bound_step` (all but ``lam`` keyword-only).

    Returns
    -------
    W_new : ndarray, shape (p, n)
    info : dict
        As :func:`~kernelkit.optim.bound_step` returns.
    """
    bnd = _bound(W, X, y, lam, mask, None, float64=linear_solver == "dense")
    delta, info = bnd.curvature.solve(
        bnd.gradient,
        method=linear_solver,
        rtol=rtol,
        maxiter=maxiter,
        precondition=preconditioner,
    )
    info = dict(info, direction=delta, batch_loss=bnd.loss)
    return bnd.curvature.W - delta, info


# ----------------------------------------------------------------- the estimator's fit
def _augment(X, fit_intercept):
    """Lazily append the constant bias column to every row chunk of ``X`` (T, p)."""
    if not fit_intercept:
        return X
    p = X.shape[1]

    def with_ones(Xb):
        return np.hstack([Xb, np.ones((len(Xb), 1), dtype=Xb.dtype)])

    return X.map_blocks(with_ones, chunks=(X.chunks[0], (p + 1,)), dtype=X.dtype)


def fit_bound(est, X, y, schedule):
    """``est.fit(X, y)`` for a :class:`~kernelkit.optim.BoundLogisticRegression` with
    ``solver="bound"`` and a Dask ``X`` (``y`` Dask or NumPy), in place; returns ``est``.

    The in-memory fit's epochs, step sizes, preconditioner, stopping rule, callback,
    histories and warnings, with every sum over samples reduced over the row chunks:
    each epoch takes one pass for the objective and gradient (:func:`chunked_bound`)
    and solves with the :class:`ChunkedCurvature` (one pass for ``"dense"``, one per
    CG iteration). The objective after an epoch comes from the pass that also forms the
    next gradient, so that pass counts as training time. Stochastic solvers need random
    mini-batches of rows and raise ``ValueError`` on Dask input.
    """
    from .logistic import _DENSE_MAX_DIM, _PRECOND_RANK

    owner = type(est).__name__
    if est.solver != "bound":
        raise ValueError(
            f"{owner}: solver={est.solver!r} draws random mini-batches of rows and needs "
            "NumPy input; a dask.array.Array is fitted by solver='bound' (the full-batch "
            "bound, summed over the row chunks). Use solver='bound' or X.compute()."
        )
    X = as_dask_rows(X, "X", owner=owner, vector="error", known_rows=False)
    X, y = known_row_chunks(X, y)  # unknown sizes (a filter): one pass for both
    y = as_dask_labels(y, X, owner=owner)
    # scikit-learn's checks and n_features_in_ on the first row (dtype: float32 or float64)
    X0, y0 = (a.compute() for a in (X[:1], y[:1]))
    X0, _ = validate_data(est, X0, y0, dtype=[np.float64, np.float32], accept_sparse=False)
    classes = dask_classes(y)  # sorted labels, checked
    est._start(classes, X.shape[1])
    yi = y.map_blocks(lambda b: np.searchsorted(classes, b), dtype=np.intp)
    # each chunk's width checked before the bias column is appended (a chunk of other
    # width was reported with the augmented shapes: "(20, 3); expected 4 columns")
    X = checked_chunks(X, f"{owner}: X")
    X1 = _augment(X.astype(X0.dtype) if X.dtype != X0.dtype else X, est.fit_intercept)
    est._dtype = X1.dtype
    _train(est, X1, yi, schedule, int(est.max_epochs), _DENSE_MAX_DIM, _PRECOND_RANK, owner)
    return est


def _train(est, X1, yi, schedule, epochs, dense_max_dim, precond_rank, owner):
    """The epochs of the in-memory full-batch fit (``BoundLogisticRegression._train``
    with ``solver="bound"``) on Dask rows ``X1`` (T, p + 1) and class indices ``yi``."""
    T, p1 = X1.shape
    n = est._W.shape[1]
    lam = est._lam()
    lin = est.linear_solver
    if lin == "auto":
        lin = "dense" if p1 * n <= dense_max_dim else "cg"
    track = est.compute_loss or est.tol is not None
    t0 = float(est.t0) if est.t0 is not None else 1.0  # one step per epoch
    maxiter = est.cg_maxiter if est.cg_maxiter is not None else 500
    precond = est.preconditioner
    if precond == "kronecker" and lin == "cg":
        tic = time.perf_counter()
        if est._precond is None or est._precond.p != p1:
            rows = np.arange(T) if T <= 10_000 else est._rng.choice(T, 10_000, replace=False)
            sub = X1[rows].compute() if T > 10_000 else X1.compute()
            est._precond = KroneckerPreconditioner(
                sub, rank=precond_rank if p1 > 2 * precond_rank else None
            )
        precond = est._precond
        est._train_time += time.perf_counter() - tic
    est._precond_arg = precond

    def bound_at(W):
        return _bound(W, X1, yi, lam, est._mask, owner, float64=lin == "dense")

    start = est._train_time
    tic = time.perf_counter()
    bnd = bound_at(est._W)  # X is checked chunk by chunk here: its errors stay ValueErrors
    est._train_time += time.perf_counter() - tic
    g_ref = 1.0
    if track:  # ||grad L|| at W = 0 and its rounding floor, as in the in-memory fit
        G0 = bound_at(np.zeros_like(est._W)).gradient if np.any(est._W) else bnd.gradient
        g_ref = float(np.linalg.norm(G0))
        colsum = np.asarray(abs(X1).sum(axis=0).compute(), dtype=np.float64)  # (p + 1,)
        noise = np.finfo(X1.dtype).eps * math.sqrt(n) * float(np.linalg.norm(colsum))
        g_ref = g_ref if g_ref > noise else 1.0
    if track and not est.loss_history_:  # entry 0: before any step (time 0)
        est.loss_history_.append(bnd.loss)
        est.grad_norm_history_.append(float(np.linalg.norm(bnd.gradient)) / g_ref)
        est.time_history_.append(start)
    rel = est.grad_norm_history_[-1] if est.grad_norm_history_ else math.inf
    # eq. 2.4 with eta <= 1 never increases L in exact arithmetic (majorisation)
    monotone = schedule == "constant" and float(est.eta0) <= 1.0
    converged = False
    prev_loss = bnd.loss  # L at the start of this call: of this data and alpha
    for _ in range(epochs):
        tic = time.perf_counter()
        est.t_ += 1
        eta = _s.step_size(schedule, float(est.eta0), est.t_, t0)
        try:
            delta, _ = bnd.curvature.solve(
                bnd.gradient,
                method=lin,
                rtol=float(est.cg_rtol),
                maxiter=maxiter,
                precondition=precond,
                check_x0=True,
            )
            est._W = est._W - eta * delta
            est._x0 = delta
            bnd = bound_at(est._W)
        except ValueError as exc:  # X is finite (pass 0): non-finite logits = divergence
            raise FloatingPointError(
                f"{est.solver} diverged at step {est.t_} (epoch {est.n_iter_ + 1})"
                f": {exc} Decrease eta0 or increase alpha."
            ) from exc
        est._train_time += time.perf_counter() - tic
        est.n_iter_ += 1
        if not np.all(np.isfinite(est._W)):
            raise FloatingPointError(
                f"{est.solver} diverged (non-finite parameters at epoch {est.n_iter_}); "
                "decrease eta0 or increase alpha."
            )
        loss = None
        if track:
            loss = bnd.loss
            if monotone:
                est._check_descent(loss, prev_loss, X1.dtype)
            prev_loss = loss
            rel = float(np.linalg.norm(bnd.gradient)) / g_ref
            est.loss_history_.append(loss)
            est.grad_norm_history_.append(rel)
            est.time_history_.append(est._train_time)
        est._sync_coef()
        stop = False
        if est.callback is not None:
            info = {
                "epoch": est.n_iter_,
                "loss": loss,
                "grad_norm": rel if track else None,
                "time": est._train_time,
                "steps": est.t_,
                "phase": "stochastic",
            }
            stop = bool(est.callback(est, info))
        # the in-memory stopping rule: ||grad L|| <= tol ||grad L(0)||
        if (est.tol is not None and rel <= float(est.tol)) or stop:
            converged = True
            break
    if est.tol is not None and not converged:
        warnings.warn(
            f"{owner} ({est.solver}) did not converge in {epochs} "
            f"epoch{'s' * (epochs != 1)}: ||grad L|| is {rel:.2e} times its value at "
            f"coef_ = 0, above tol={est.tol:g}; increase "
            "max_epochs.",
            ConvergenceWarning,
            stacklevel=caller_stacklevel(),
        )
    est._sync_coef()
