"""One step of each solver for L2-regularised multinomial logistic regression (SGB eq. 2.4-2.6).

Objective (mean form, Appendix A; the definition used everywhere in kernelkit)::

    L(W) = (1/T) sum_i [logsumexp(W^T x_i) - w_{y_i}^T x_i] + (lam/2) ||mask * W||_F^2

with ``W`` of shape (p, n) (column ``y`` = class vector ``w_y``; ``theta = vec(W)``) and
``mask`` (p,) selecting the penalised rows (an unpenalised intercept row has mask 0).

Steps (``G`` = mini-batch gradient of ``L``, ``eta_t`` from :func:`step_size`):

* :func:`spfb_step` – eq. 2.5/2.6, mini-batch mean form (default)::

      W <- W - eta_t ((1/m) sum_j Sigma_j + lam I)^{-1} ((1/m) sum_j g_j + lam mask W)

  ``reduction="sum"`` uses ``(sum_j Sigma_j + lam I)^{-1}(sum_j g_j + lam mask W)``, which is
  the mean form with ``lam / m``: its regularisation then depends on the batch size.
  The curvature always carries ``lam I`` (also on an unpenalised intercept): it still
  majorises the objective, so a full-batch step with ``eta = 1`` (:func:`bound_step`,
  eq. 2.4) never increases ``L`` — also with a truncated CG solve, which minimises the
  majoriser over a Krylov subspace (a warm start is used only when it is no worse than 0).
* :func:`lspfb_step` – the same with the low-rank curvature ``D + V^T S V`` (Alg. LB),
  applied by Woodbury.
* :func:`sgd_step` – ``W <- W - eta_t G`` (the paper's baseline).
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import device, is_numpy_namespace, to_backend, to_numpy
from . import _validation as _v
from .bound import _np_float, multinomial_bound_from_logits
from .kronecker import KroneckerCurvature

__all__ = [
    "SCHEDULES",
    "bound_step",
    "multinomial_gradient",
    "multinomial_objective",
    "sgd_step",
    "spfb_step",
    "step_size",
]

SCHEDULES = ("inverse", "inverse_t0", "constant")


def step_size(schedule: str, eta0: float, t: int, t0: float = 1.0) -> float:
    """Step size at step ``t = 1, 2, ...``.

    ``"inverse"``: ``eta0 / t`` (the paper, eq. 2.5); ``"inverse_t0"``:
    ``eta0 / (1 + t / t0)``; ``"constant"``: ``eta0``.

    Parameters
    ----------
    schedule : {"inverse", "inverse_t0", "constant"}
    eta0 : float
        The initial step size, positive.
    t : int
        The step, ``t >= 1``.
    t0 : float, default=1.0
        The time scale of ``"inverse_t0"`` (ignored by the others).

    Returns
    -------
    float
        ``eta_t``.

    Raises
    ------
    TypeError
        ``eta0`` or ``t0`` is not a real number, or ``t`` not an integer (bools rejected).
    ValueError
        Unknown ``schedule``, ``eta0`` or ``t0`` not positive and finite, or ``t < 1``.
    """
    eta0 = _v.validate_positive_float(eta0, "eta0")
    t = _v.validate_positive_int(t, "t", minimum=1)
    t0 = _v.validate_positive_float(t0, "t0")
    if schedule == "inverse":
        return eta0 / t
    if schedule == "inverse_t0":
        return eta0 / (1.0 + t / t0)
    if schedule == "constant":
        return eta0
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}.")


def _ridge(xp, W, Wp, lam) -> float:
    """``(lam / 2) sum(Wp * W)`` for finite ``W``: 0 for ``lam = 0``, and rescaled by
    ``max |W|`` where the squares overflow although the value may not (never NaN)."""
    if lam == 0.0:
        return 0.0
    with np.errstate(over="ignore"):
        total = float(xp.sum(Wp * W))
    if math.isfinite(total):
        return 0.5 * lam * total
    top = max(abs(float(xp.max(W))), abs(float(xp.min(W))))
    return 0.5 * lam * float(xp.sum((Wp / top) * (W / top))) * top * top


def _penalty(W, mask):
    return W if mask is None else W * mask[:, None]


def _onehot(xp, y, n, like):
    """(m, n) one-hot rows of the integer labels ``y``, dtype and device of ``like``."""
    lab = xp.arange(n, device=device(like))
    return xp.astype(y[:, None] == lab[None, :], like.dtype)


def _logsumexp(xp, S):
    """Row-wise log-sum-exp of (m, n) logits, shifted by the row maximum."""
    mx = xp.max(S, axis=1)
    return xp.log(xp.sum(xp.exp(S - mx[:, None]), axis=1)) + mx


def _as_arrays(W, X, y, lam, mask=None):
    """Validated inputs (:func:`~kernelkit.optim._validation.check_problem`) in the compute
    dtype: NumPy float32 if ``W`` and ``X`` both are, else float64; other namespaces as is.

    Returns ``xp, W, X, y, lam, mask``.
    """
    xp, W, X, y, lam, mask = _v.check_problem(W, X, y, lam, mask)
    if is_numpy_namespace(xp):
        W, X = _np_float(W, X), _np_float(X, W)
        if mask is not None:
            mask = mask.astype(W.dtype, copy=False)
    return xp, W, X, y, lam, mask


def _logits(X, W):
    """``S = X W``, shape (m, n), computed as ``(W^T X^T)^T`` (see :meth:`KroneckerCurvature.
    matvec`: BLAS streams the row-major ``X`` about twice as fast in this form)."""
    return (W.T @ X.T).T


def multinomial_objective(W, X, y, lam, mask=None) -> float:
    """``L(W)`` of the module docstring (mean cross-entropy + ridge), a float.

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : ndarray, shape (T, p)
    y : ndarray of int, shape (T,)
        Labels in ``0..n-1``.
    lam : float
    mask : ndarray, shape (p,), optional
        1 for penalised rows of ``W``, 0 for unpenalised ones (default: all penalised).

    Returns
    -------
    float

    Raises
    ------
    TypeError
        ``W``, ``X`` or ``mask`` is not a real numeric array (boolean, object), ``y`` does
        not hold integers, or a scalar argument is not a number.
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty; ``X.shape[1] != W.shape[0]``;
        ``y`` is not 1-D of length ``m`` or has labels outside ``0..n-1``; ``lam < 0``;
        ``mask`` is not of shape (p,); NaN or infinity in ``W``, ``X`` or ``mask`` (or
        logits ``X W`` that overflow); another argument out of range.

    Notes
    -----
    All functions of this module accept NumPy arrays or array-API arrays (torch tensors).
    """
    xp, W, X, y, lam, mask = _as_arrays(W, X, y, lam, mask)
    S = _logits(X, W)  # (T, n)
    _v.check_logits(xp, S, W, X)
    data = float(xp.mean(_logsumexp(xp, S) - xp.sum(S * _onehot(xp, y, W.shape[1], S), axis=1)))
    Wp = _penalty(W, mask)
    return data + _ridge(xp, W, Wp, lam)


def _data_gradient(prob, X, Y, scale):
    """``scale X^T (P - Y)``, shape (p, n), from probabilities and one-hot labels (m, n)."""
    return scale * ((prob - Y).T @ X).T  # X^T R computed as (R^T X)^T (see _logits)


def _batch_loss(xp, log_z, S, Y, W, Wp, lam):
    """Mini-batch objective at ``W``: mean of ``log Z - s_y`` plus the ridge."""
    s_y = xp.sum(S * Y, axis=1)
    return float(xp.mean(log_z - s_y)) + _ridge(xp, W, Wp, lam)


def multinomial_gradient(W, X, y, lam, mask=None):
    """Gradient of :func:`multinomial_objective`: ``X^T (P - Y) / T + lam mask W``.

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : ndarray, shape (T, p)
    y : ndarray of int, shape (T,)
        Labels in ``0..n-1``.
    lam : float
    mask : ndarray, shape (p,), optional
        1 for penalised rows of ``W``, 0 for unpenalised ones (default: all penalised).

    Returns
    -------
    ndarray, shape (p, n)

    Raises
    ------
    TypeError
        ``W``, ``X`` or ``mask`` is not a real numeric array (boolean, object), ``y`` does
        not hold integers, or a scalar argument is not a number.
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty; ``X.shape[1] != W.shape[0]``;
        ``y`` is not 1-D of length ``m`` or has labels outside ``0..n-1``; ``lam < 0``;
        ``mask`` is not of shape (p,); NaN or infinity in ``W``, ``X`` or ``mask`` (or
        logits ``X W`` that overflow); another argument out of range.
    """
    xp, W, X, y, lam, mask = _as_arrays(W, X, y, lam, mask)
    S = _logits(X, W)
    _v.check_logits(xp, S, W, X)
    P = xp.exp(S - _logsumexp(xp, S)[:, None])
    Y = _onehot(xp, y, W.shape[1], S)
    return _data_gradient(P, X, Y, 1.0 / y.shape[0]) + lam * _penalty(W, mask)


def _scales(m, lam, reduction):
    if reduction == "mean":
        return 1.0 / m, lam
    if reduction == "sum":
        return 1.0, lam
    raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")


def spfb_step(
    W,
    X,
    y,
    lam,
    eta=1.0,
    *,
    mask=None,
    reduction="mean",
    linear_solver="cg",
    rtol=1e-4,
    maxiter=None,
    x0=None,
    preconditioner="jacobi",
):
    """One SPFB step (eq. 2.5/2.6) on the mini-batch ``(X, y)``.

    With the defaults the step solves eq. 2.6 to a relative residual ``rtol`` (the
    paper's step up to that tolerance). :class:`~kernelkit.optim.BoundLogisticRegression`
    instead truncates CG at a few warm-started iterations by default (``maxiter=3``,
    ``x0`` = the previous direction, the Kronecker preconditioner); see its
    ``cg_maxiter``. NumPy float32 ``W`` and ``X`` are computed in float32, except the
    dense solve: its system (the bound's ``C_j``, the gradient and the Cholesky factor)
    is formed in float64 from the float32 logits, and the direction returned in float32
    (so for float32 torch tensors, whose dense solve is NumPy's).

    Parameters
    ----------
    W : ndarray, shape (p, n)
        Current parameters (also the bound's expansion point ``theta~``).
    X : ndarray, shape (m, p)
    y : ndarray of int, shape (m,)
    lam : float
        Mean-form ridge ``lam`` (> 0 for ``linear_solver="cg"``).
    eta : float
        Step size ``eta_t``.
    mask : ndarray, shape (p,), optional
        Penalised rows of ``W`` (gradient only; the curvature has ``lam I``).
    reduction : {"mean", "sum"}
    linear_solver : {"cg", "dense"}
        Matrix-free CG (:meth:`KroneckerCurvature.solve`) or the dense ``(np) x (np)``
        Cholesky solve.
    rtol : float, default=1e-4
        CG tolerance.
    maxiter : int, optional
        CG iteration cap (None: that of :meth:`KroneckerCurvature.solve`).
    x0 : ndarray, shape (p, n), optional
        CG warm start (e.g. the previous direction).
    preconditioner : {"jacobi", "kronecker", None} or KroneckerPreconditioner
        CG preconditioner (see :meth:`KroneckerCurvature.solve`); a prebuilt
        :class:`~kernelkit.optim.KroneckerPreconditioner` (from the training inputs) is the
        fastest choice for large ``p``.

    Returns
    -------
    W_new : ndarray, shape (p, n)
    info : dict
        ``direction`` (the solved ``Delta``, ``W_new = W - eta Delta``), ``iterations``,
        ``residual`` (CG), ``batch_loss`` (objective of the batch at ``W``).

    Raises
    ------
    TypeError
        ``W``, ``X`` or ``mask`` is not a real numeric array (boolean, object), ``y`` does
        not hold integers, or a scalar argument is not a number.
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty; ``X.shape[1] != W.shape[0]``;
        ``y`` is not 1-D of length ``m`` or has labels outside ``0..n-1``; ``lam < 0``;
        ``mask`` is not of shape (p,); NaN or infinity in ``W``, ``X`` or ``mask`` (or
        logits ``X W`` that overflow); another argument out of range.
    """
    xp, W, X, y, lam, mask = _as_arrays(W, X, y, lam, mask)
    eta = _v.validate_positive_float(eta, "eta")
    if x0 is not None:
        x0 = _v.check_array(x0, "x0", "(p, n)")
        if tuple(x0.shape) != tuple(W.shape):
            raise ValueError(
                f"x0 must have the shape of W {tuple(W.shape)}, got shape {tuple(x0.shape)}."
            )
    m = y.shape[0]
    scale, lam_c = _scales(m, lam, reduction)
    S = _logits(X, W)  # (m, n)
    bnd = multinomial_bound_from_logits(S, W, X)  # log_z (m,), prob (m, n), C (m, n, n)
    Y = _onehot(xp, y, W.shape[1], S)  # (m, n)
    Wp = _penalty(W, mask)
    G = _data_gradient(bnd.prob, X, Y, scale) + lam * Wp  # (p, n)
    C, Xs, Gs = bnd.C, X, G
    if linear_solver == "dense" and xp.finfo(S.dtype).bits < 64:
        # the dense solve runs in float64, and so must the system it solves: C_j is ~0
        # along the classes' common direction, where its float32 rounding (~1e-8) times
        # |x|^2 summed over the batch can outweigh lam (pixels 0..255, lam = 1e-4) and
        # make the matrix indefinite, and the float32 rounding of the gradient there is
        # amplified by 1 / lam. The expansion point stays the float32 logits; the
        # direction is returned in float32. (Torch tensors too: the dense solve is NumPy.)
        b64 = multinomial_bound_from_logits(to_numpy(S, np.float64))
        Xs = to_numpy(X, np.float64)
        C = b64.C
        Gs = _data_gradient(b64.prob, Xs, to_numpy(Y, np.float64), scale) + lam * to_numpy(
            Wp, np.float64
        )
    A = KroneckerCurvature._trusted(Xs, C, lam=lam_c, scale=scale)
    # the warm start is used only where the majoriser is lower there than at 0
    delta, info = A.solve(
        Gs,
        method=linear_solver,
        x0=x0,
        rtol=rtol,
        maxiter=maxiter,
        precondition=preconditioner,
        check_x0=True,
    )
    if not is_numpy_namespace(xp):
        delta = to_backend(to_numpy(delta), xp, like=W)
    else:
        delta = delta.astype(S.dtype, copy=False)  # float32 data: a float32 step
    info = dict(info, direction=delta, batch_loss=_batch_loss(xp, bnd.log_z, S, Y, W, Wp, lam))
    return W - eta * delta, info


def bound_step(
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
    """Full-batch bound majorisation step (eq. 2.4, Alg. B) with ``eta = 1``.

    Minimises the quadratic majoriser of ``L`` at ``W`` over the whole data set, so ``L``
    never increases. :func:`spfb_step` with ``eta = 1`` and ``reduction="mean"``; errors
    as there.

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : ndarray, shape (T, p)
    y : ndarray of int, shape (T,)
    lam : float
    mask : ndarray, shape (p,), optional
    linear_solver : {"cg", "dense"}
    rtol : float, default=1e-10
        CG tolerance (tighter than :func:`spfb_step`'s).
    maxiter : int, optional
    preconditioner : {"jacobi", "kronecker", None} or KroneckerPreconditioner
        As in :func:`spfb_step`.

    Returns
    -------
    W_new : ndarray, shape (p, n)
    info : dict
        As :func:`spfb_step` returns.
    """
    return spfb_step(
        W,
        X,
        y,
        lam,
        1.0,
        mask=mask,
        reduction="mean",
        linear_solver=linear_solver,
        rtol=rtol,
        maxiter=maxiter,
        preconditioner=preconditioner,
    )


def _line_search(S, U, y, W, D, lam, mask, eta=1.0, maxiter=30):
    """``argmin_{eta > 0} L(W - eta D)`` along a descent direction ``D`` (float64).

    ``L`` of the module docstring restricted to the line is convex in ``eta``; its logits
    are ``S - eta U`` with ``S = X W`` and ``U = X D``, both (T, n), so each trial costs
    O(T n) and no product with ``X``. Safeguarded Newton on ``phi'(eta)`` inside a bracket
    ``[lo, hi]`` (bisection, or doubling while no upper end is known); stops when
    ``|phi'(eta)| <= 1e-10 |phi'(0)|``. Needs ``phi'(0) = -<G, D> < 0``.

    Parameters
    ----------
    S, U : ndarray, shape (T, n)
    y : ndarray of int, shape (T,)
    W, D : ndarray, shape (p, n)
    lam : float
    mask : ndarray, shape (p,)
    eta : float
        First trial step.

    Returns
    -------
    float
        The step ``eta > 0``.
    """
    S = np.asarray(S, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    rows = np.arange(len(y))
    u_y = float(np.mean(U[rows, y]))
    Dm = D * mask[:, None]  # (p, n)
    a2 = lam * float(np.sum(Dm * D))  # ridge curvature along D
    a1 = lam * float(np.sum(Dm * W))  # ridge slope at eta = 0 (with sign)

    def derivatives(e):
        Z = S - e * U  # (T, n) logits at W - e D
        P = np.exp(Z - Z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        EU = np.sum(P * U, axis=1)  # (T,)
        d1 = u_y - float(np.mean(EU)) + e * a2 - a1
        d2 = float(np.mean(np.sum(P * U * U, axis=1) - EU * EU)) + a2
        return d1, d2

    d1_0 = derivatives(0.0)[0]
    if not d1_0 < 0:
        return 0.0  # not a descent direction (or at the optimum): no step
    lo, hi = 0.0, math.inf
    for _ in range(maxiter):
        d1, d2 = derivatives(eta)
        if abs(d1) <= 1e-10 * abs(d1_0):
            return eta
        if d1 < 0:
            lo = eta
        else:
            hi = eta
        nxt = eta - d1 / d2 if d2 > 0 else math.inf
        if not lo < nxt < hi:
            nxt = 2.0 * eta if math.isinf(hi) else 0.5 * (lo + hi)
        eta = nxt
    return lo if lo > 0 else eta  # phi decreases on [0, lo]


def sgd_step(W, X, y, lam, eta, *, mask=None, reduction="mean"):
    """One mini-batch SGD step ``W <- W - eta G`` (the paper's baseline).

    ``G = scale X^T (P - Y) + lam mask W`` with ``scale = 1/m`` (mean) or 1 (sum).

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : ndarray, shape (m, p)
    y : ndarray of int, shape (m,)
    lam : float
    eta : float
        Step size, positive and finite.
    mask : ndarray, shape (p,), optional
        Penalised rows of ``W``, as in :func:`spfb_step`.
    reduction : {"mean", "sum"}

    Returns
    -------
    W_new : ndarray, shape (p, n)
    info : dict
        ``direction`` (``G``), ``iterations`` (0), ``residual`` (0.0), ``batch_loss``
        (objective of the batch at ``W``).

    Raises
    ------
    TypeError
        ``W``, ``X`` or ``mask`` is not a real numeric array (boolean, object), ``y`` does
        not hold integers, or a scalar argument is not a number.
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty; ``X.shape[1] != W.shape[0]``;
        ``y`` is not 1-D of length ``m`` or has labels outside ``0..n-1``; ``lam < 0``;
        ``mask`` is not of shape (p,); NaN or infinity in ``W``, ``X`` or ``mask`` (or
        logits ``X W`` that overflow); another argument out of range.
    """
    xp, W, X, y, lam, mask = _as_arrays(W, X, y, lam, mask)
    eta = _v.validate_positive_float(eta, "eta")
    m = y.shape[0]
    scale, _ = _scales(m, lam, reduction)
    S = _logits(X, W)  # (m, n)
    _v.check_logits(xp, S, W, X)
    log_z = _logsumexp(xp, S)  # (m,)
    P = xp.exp(S - log_z[:, None])
    Y = _onehot(xp, y, W.shape[1], S)
    Wp = _penalty(W, mask)
    G = _data_gradient(P, X, Y, scale) + lam * Wp  # (p, n)
    return W - eta * G, {
        "direction": G,
        "iterations": 0,
        "residual": 0.0,
        "batch_loss": _batch_loss(xp, log_z, S, Y, W, Wp, lam),
    }
