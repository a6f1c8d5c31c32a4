"""``BoundLogisticRegression``: SPFB / LSPFB / full-batch bound / SGD as a scikit-learn classifier.

Objective (explicit, and identical to scikit-learn's ``LogisticRegression`` divided by
``C T``)::

    L(coef, intercept) = (1/T) sum_i -log p(y_i | x_i) + (alpha / 2) ||coef_||_F^2

with the intercept unpenalised. Multinomial (>= 3 classes): softmax over ``coef_`` (n, p);
binary: ``p(y=classes_[1] | x) = expit(coef_ x + intercept_)`` with one ``coef_`` row.
Hence **``alpha = 1 / (C T)``**, i.e. ``LogisticRegression(C=1 / (alpha * T))`` (``T`` the
number of training samples) minimises the same function, for binary and multinomial
problems alike; :func:`logistic_objective` evaluates it for any ``(coef, intercept)``, e.g.
scikit-learn's optimum.

Internally the model is the log-linear model of the paper with ``n`` classes (``n = 2``
for a binary problem, parametrised as ``W = [-w/2, w/2]`` with ridge ``2 alpha``, which
equals ``(alpha/2)||w||^2``), ``W`` of shape (p + 1, n) with the bias in the last row.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings
from typing import ClassVar

import numpy as np
from scipy.special import expit, logsumexp, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model._base import LinearClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import caller_stacklevel, check_random_state
from .._backend.chunks import is_dask_array
from .._backend.fit_state import keep_model_on_error
from .._backend.params import NON_NEGATIVE, POSITIVE, RANDOM_STATE, int_range
from .._backend.sklearn_validation import check_label_list, sorted_class_labels, validate_data
from . import _validation as _v
from . import solvers as _s
from .bound import multinomial_bound_from_logits
from .kronecker import KroneckerCurvature, KroneckerPreconditioner, _SingularCurvature

__all__ = ["BoundLogisticRegression", "logistic_objective"]

SOLVERS = ("spfb", "lspfb", "bound", "sgd")
_DEFAULT_SCHEDULE = {
    "spfb": "inverse_t0",
    "lspfb": "inverse_t0",
    "bound": "constant",
    "sgd": "inverse_t0",
}
_PRECOND_RANK = 100  # leading eigenvectors of the input second moment kept (p > 200)
_DENSE_MAX_DIM = 1500  # linear_solver="auto": dense Cholesky up to this parameter dimension
_SPFB_CG_MAXITER = 3  # default CG iteration cap of solver="spfb" (cg_maxiter=None)
_SWITCH_RATIO = 0.5  # a stochastic epoch "makes progress" if it at least halves ||grad L||
_FINISH_CG_MAXITER = 200  # CG cap of a full-batch step of the finishing phase
_FINISH_RTOL = 0.5  # its CG tolerance (relative residual)
#: ||grad L|| still above this fraction of its value at coef_ = 0 after every epoch of a fit:
#: the steps did not move (the non-convergence warning then points at the scale of X)
_NO_PROGRESS_RATIO = 0.9


def _augment(X, fit_intercept):
    """``X`` (float32 or float64, kept) with a constant column appended for the bias."""
    X = np.asarray(X)
    if X.dtype != np.float32:
        X = X.astype(np.float64, copy=False)
    if fit_intercept:
        return np.hstack([X, np.ones((len(X), 1), dtype=X.dtype)])
    return X


def _internal_from_coef(coef, intercept, n_classes, p):
    """(coef_, intercept_) -> internal W of shape (p + 1, n)."""
    coef = np.asarray(coef, dtype=np.float64).reshape(-1, p)
    intercept = np.broadcast_to(np.asarray(intercept, dtype=np.float64), (coef.shape[0],))
    full = np.vstack([coef.T, intercept[None, :]])  # (p + 1, k)
    if n_classes == 2:
        return np.hstack([-0.5 * full, 0.5 * full])
    return full


def logistic_objective(coef, intercept, X, y, alpha, classes=None) -> float:
    """The objective minimised by :class:`BoundLogisticRegression` (module docstring).

    Parameters
    ----------
    coef : array_like, shape (n_classes, p) or (1, p) for a binary problem
        As scikit-learn's ``coef_``.
    intercept : array_like, shape (n_classes,) or (1,), or a float
    X : array_like, shape (T, p)
    y : array_like, shape (T,)
    alpha : float
        Mean-form ridge (``alpha = 1 / (C T)`` for scikit-learn's ``C``).
    classes : array_like, shape (n_classes,), optional
        Sorted class labels (default ``np.unique(y)``); labels of ``y`` must be among them.

    Returns
    -------
    float
        ``(1/T) sum_i -log p(y_i | x_i) + (alpha/2) ||coef||_F^2``.

    Raises
    ------
    TypeError
        ``X``, ``coef`` or ``intercept`` is not a real numeric array, ``alpha`` not a
        number, or the labels of ``y`` cannot be sorted (numbers mixed with strings).
    ValueError
        ``X`` not a non-empty 2-D array; ``y`` not 1-D of length ``T`` or with labels
        not in ``classes``; ``classes`` not sorted and unique or with fewer than 2
        labels; ``coef`` not of shape (n_classes, p) or (1, p) (binary), ``intercept``
        not of matching length; NaN or infinity in ``X``, ``coef`` or ``intercept``;
        ``alpha`` negative or not finite.
    """
    X = np.asarray(_v.check_array(X, "X", "(T, p)"), dtype=np.float64)
    alpha = _v.check_nonneg_float(alpha, "alpha")
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(X):
        raise ValueError(
            f"y must have shape (T,) = ({len(X)},) to match X {X.shape}, got shape {y.shape}."
        )
    classes = sorted_class_labels(y, "y", check=False) if classes is None else np.asarray(classes)
    if classes.ndim != 1 or len(classes) < 2 or np.any(classes[1:] <= classes[:-1]):
        raise ValueError(
            f"classes must be sorted, unique and hold >= 2 labels, got {classes.tolist()}."
        )
    try:
        yi = np.searchsorted(classes, y)
    except TypeError as exc:  # labels that cannot be compared with the classes
        raise TypeError(f"y: the labels cannot be compared with classes: {exc}") from exc
    yi = np.clip(yi, 0, len(classes) - 1)
    if not np.array_equal(classes[yi], y):
        unknown = np.unique(y[classes[yi] != y])[:5]
        raise ValueError(f"y contains labels {unknown.tolist()} that are not in classes.")
    coef = np.asarray(_v.check_array(coef, "coef", "(n_classes, p)", ndim=(1, 2)), np.float64)
    k = 1 if len(classes) == 2 else len(classes)
    if coef.size != k * X.shape[1]:
        raise ValueError(
            f"coef must have shape ({k}, {X.shape[1]}) for {len(classes)} classes and X "
            f"{X.shape}, got shape {coef.shape}."
        )
    coef = coef.reshape(k, X.shape[1])
    intercept = np.asarray(
        _v.check_array(intercept, "intercept", f"({k},) or a float", ndim=(0, 1)), np.float64
    )
    if intercept.size not in (1, k):
        raise ValueError(f"intercept must be a float or of shape ({k},), got {intercept.shape}.")
    intercept = np.broadcast_to(intercept.reshape(-1), (k,))
    scores = X @ coef.T + intercept  # (T, k)
    if coef.shape[0] == 1:  # binary: -log p = logaddexp(0, -/+ score)
        sgn = np.where(yi == 1, -1.0, 1.0)
        data = float(np.mean(np.logaddexp(0.0, sgn * scores[:, 0])))
    else:
        from scipy.special import logsumexp

        data = float(np.mean(logsumexp(scores, axis=1) - scores[np.arange(len(y)), yi]))
    return data + _s._ridge(np, coef, coef, alpha)


class BoundLogisticRegression(LinearClassifierMixin, ClassifierMixin, BaseEstimator):
    """L2-regularised logistic regression trained with partition-function bounds.

    Minimises ``L = (1/T) sum_i -log p(y_i | x_i) + (alpha/2) ||coef_||_F^2`` (intercept
    unpenalised; same function as ``LogisticRegression(C=1/(alpha T))``, see the module
    docstring) with

    * ``"spfb"``: stochastic partition-function bound, eq. 2.5/2.6 in mini-batch mean form,
      ``W <- W - eta_t ((1/m) sum_j Sigma_j + alpha I)^{-1} G_batch``, by default solved
      approximately (3 warm-started, preconditioned CG iterations; see ``cg_maxiter``);
    * ``"lspfb"``: the same with the low-rank bound ``D + V^T S V`` (Alg. LB, rank
      ``rank``; variant ``low_rank``) and a Woodbury solve;
    * ``"bound"``: full-batch bound majorisation (eq. 2.4), monotone with ``eta0 = 1``;
    * ``"sgd"``: mini-batch SGD, the paper's baseline.

    **Convergence.** Stochastic steps with a decaying step stall at a distance from the
    optimum that shrinks only like O(1/t) (Theorem 2). By default (``finish="auto"``)
    ``"spfb"`` and ``"lspfb"`` therefore run stochastic epochs only while they make
    progress -- while each epoch at least halves the norm of the full gradient
    ``||grad L||`` -- and then finish with full-batch bound steps (see ``finish``), which
    converge to the optimum. Training stops when ``||grad L(W)|| <= tol ||grad L(0)||``,
    checked once per epoch; a run that ends on ``max_epochs`` first raises a
    ``ConvergenceWarning`` stating that ratio. The paper's SPFB as printed (no finishing
    phase, ``eta0 / t``, an exact solve) is ``finish=None, schedule="inverse",
    cg_maxiter=500``.

    Parameters
    ----------
    solver : {"spfb", "lspfb", "bound", "sgd"}, default="spfb"
    rank : int, default=10
        Rank ``k`` of the low-rank bound (``"lspfb"`` only); must not exceed the
        parameter dimension ``n_classes (n_features + fit_intercept)`` (``2 (p + 1)`` when
        binary).
    alpha : float, default=1e-4
        Mean-form ridge, ``alpha = 1 / (C T)``.
    batch_size : int, default=1000
        Mini-batch size ``m`` (the paper's); clipped to the number of samples. Ignored by
        ``"bound"``.
    max_epochs : int, default=100
        Epochs at most; an epoch is one pass of mini-batch steps, or one full-batch step.
    tol : float or None, default=1e-5
        Stop when the Frobenius norm of the gradient of the full training objective has
        fallen to ``tol`` times its value at ``coef_ = 0, intercept_ = 0``, checked after
        every epoch (the ratio is recorded in ``grad_norm_history_``; where that value is
        at rounding level, ``coef_ = 0`` is optimal and the norm itself is used), on Dask
        input too. Not met within ``max_epochs``: ``ConvergenceWarning``. ``None``: run
        ``max_epochs``, no warning.
        The gradient norm bounds the distance to the optimum: without an intercept ``L``
        is ``alpha``-strongly convex, so ``L - L* <= ||grad L||^2 / (2 alpha)``.
    n_iter_no_change : int, default=1
        The finishing phase (``finish``) starts after ``n_iter_no_change`` consecutive
        stochastic epochs that each failed to halve ``||grad L||``.
    eta0 : float, default=1.0
        Initial step size (``eta_t = eta0 / (1 + t / t0)`` with the default schedule).
    schedule : {"inverse", "inverse_t0", "constant"} or None, default=None
        ``eta0 / t`` (the paper's, eq. 2.5), ``eta0 / (1 + t / t0)`` or ``eta0``;
        ``None`` picks ``"constant"`` for ``"bound"`` and ``"inverse_t0"`` otherwise.
        ``t`` counts steps from 1 over the whole training (``partial_fit`` included), so
        the paper's ``eta0 / t`` has shrunk ``T / m``-fold after one epoch; with
        ``t0`` = one epoch, ``"inverse_t0"`` keeps the O(1/t) decay of Theorem 2 without
        that (default ``eta0 = 1``, 100 epochs, ``alpha = 1e-4``: relative gap 2.6 vs 12.6
        on standardised digits and 0.22 vs 0.77 on 10 000 Fashion-MNIST images for SPFB;
        SGD alike).
    t0 : float or None, default=None
        For ``"inverse_t0"``; ``None`` = the number of steps in one epoch (for
        ``partial_fit``: in its first call, kept for the stream).
    finish : {"auto", "bound"} or None, default="auto"
        ``"bound"``: once stochastic epochs stop making progress (``n_iter_no_change``),
        every further epoch is one full-batch bound step: the direction ``Z`` solves eq.
        2.4, ``(sum_i Sigma_i / T + alpha I) Z = grad L``, by preconditioned CG to the
        relative residual 0.5 (at most 200 iterations; any CG iterate from 0 is a descent
        direction, and the outer iteration corrects the rest: on 2000 Fashion-MNIST images
        a tolerance that tightens as the iterate settles, ``sqrt(||grad L|| / ||grad
        L(0)||)`` clipped to [0.1, 0.5], took 125 epochs to a 1e-6 gap instead of 132, and
        3.2 times the seconds), is combined with the previous direction as in
        preconditioned nonlinear conjugate gradients (Polak-Ribiere+, the bound's
        curvature as the preconditioner; restarted when not a descent direction), and the
        step length minimises ``L`` exactly along it (a 1-D convex problem on the logits),
        so ``L`` never increases. The plain bound step (``eta = 1``, ``solver="bound"``)
        converges too, but slowly, because the bound over-estimates the curvature of
        confidently classified samples (``beta(u) ~ 1/(2|u|)`` against ``p (1 - p) ~
        exp(-|u|)``): on digits (``alpha = 1e-3``) its relative gap is still 1.5e-3 after
        100 steps. ``"lspfb"`` finishes with the same (Kronecker) bound. ``None``:
        stochastic steps only, as in the paper. ``"auto"``: ``"bound"`` for ``"spfb"`` and
        ``"lspfb"``, ``None`` for ``"sgd"`` (the baseline stays plain SGD); ignored by
        ``"bound"``. ``partial_fit`` always takes stochastic steps.
    fit_intercept : bool, default=True
    reduction : {"mean", "sum"}, default="mean"
        Mini-batch form of SPFB/LSPFB/SGD (docs/derivations/sgb.md);
        ``"sum"`` equals ``"mean"`` with ``alpha / m`` in the preconditioner and step, so
        its effective regularisation depends on the batch size.
    linear_solver : {"auto", "cg", "dense"}, default="auto"
        How SPFB / bound steps solve with the curvature: matrix-free conjugate gradients
        or a dense Cholesky factorization of the ``(n (p+1))^2`` matrix (float64).
        ``"auto"``: CG for ``"spfb"``; for ``"bound"``, dense up to 1500 parameters and
        CG above.
    cg_rtol : float, default=1e-4
        CG stops at a relative residual ``cg_rtol`` (or at ``cg_maxiter``).
    cg_maxiter : int or None, default=None
        CG iteration cap. ``None``: 500 for ``"bound"`` and **3 for ``"spfb"``**: SPFB's
        default step is a *truncated* solve of eq. 2.6 -- the bound's quadratic model
        minimised over a 3-dimensional Krylov subspace around a warm start at the previous
        direction (kept only where the model is lower there than at 0), with the
        Kronecker preconditioner. Its direction is not the exact one (on the
        Fashion-MNIST batch of ``kernelkit bench sgb``, m = 1000, it is 69% off the dense
        solve in norm; 10 iterations: 26%), but it makes *more* progress per epoch than
        the exact solve at a fraction of the cost (plausibly because the warm start
        carries the previous direction, like momentum, while the exact step of a
        mini-batch fits that batch and is short where the bound over-estimates the
        Hessian, ``C >= diag(p) - p p^T``). Relative gap (L - L*)/L* at the best
        ``eta0`` in {0.3, 1, 3} (schedule ``"inverse_t0"``, one seed, ``random_state=0``),
        for caps 2 / 3 / 10 / an exact solve (CG to 1e-4, 25-70 iterations, or dense):
        Fashion-MNIST (T = 60000, alpha = 1e-4, m = 1000, 3 epochs) 0.092 / 0.103 / 0.18
        / 0.23 (eta0 = 3 diverges with the exact solve); digits (alpha = 1e-3, m = 100,
        10 epochs) 0.045 / 0.088 / 0.19 / 0.19; the MNIST sample (alpha = 1e-4,
        m = 1000, 5 epochs) 0.86 / 0.76 / 0.90 / 0.96; income: equal. One SPFB epoch on
        all of Fashion-MNIST (m = 1000, one BLAS thread) then takes 0.61 CPU-seconds,
        2.9 SGD epochs (0.21 s); the exact step by CG to 1e-4 takes 11.4 s (53 SGD
        epochs). Use ``cg_maxiter=500`` (or ``linear_solver="dense"``) for the paper's
        exact step.
    preconditioner : {"kronecker", "jacobi", None}, default="kronecker"
        CG preconditioner: ``"kronecker"`` inverts ``C_bar (x) M + alpha I`` exactly, with
        ``M`` the second moment of (up to 10 000 rows of) the training inputs, computed
        once per ``fit`` (O(p^3), counted in the training time; its 100 leading
        eigenvectors when p > 200); ``"jacobi"`` is the diagonal of the curvature.
    low_rank : {"exact", "eig", "paper"}, default="exact"
        Variant of the low-rank bound for ``"lspfb"`` (see
        :func:`~kernelkit.optim.low_rank_partition_bound`). ``"paper"`` is Alg. LB as
        printed (with corrections (a)-(e) of docs/derivations/sgb.md); ``"exact"`` (the
        variant without the cross term, applied to blocks of about ``rank`` rows) is the
        default
        because it is both the tightest and the fastest. On one Fashion-MNIST mini-batch
        (m = 1000, p = 785, n = 10, d = 7850, at W = 0, one BLAS thread) the bound takes
        4.3 CPU-seconds at k = 100 against 52 for ``"paper"`` (whose O(k^2 d) rotation
        runs after each of the m (n-1) = 9000 rows) and 10 for ``"eig"``; the median
        diagonal ``D_ii`` is 6.9e3 against 1.6e5 (``"paper"``, ``"eig"``): the paper's
        isotropic ``||g|| ||a||`` terms add up and grow with ``k`` (Alg. LB, Lemma 4), so
        LSPFB-``"paper"`` with a large rank behaves like SGD with a step ``eta / D``. At
        k = 10: 1.0 / 1.3 / 0.7 s and D 2.1e4 / 2.1e5 / 2.2e5.
    shuffle : bool, default=True
        Reshuffle the samples every epoch.
    warm_start : bool, default=False
        ``fit`` continues from the previous solution (and its histories) when the classes,
        the number of features and ``fit_intercept`` are unchanged; otherwise it starts
        from zero.
    callback : callable or None, default=None
        Called after every epoch as ``callback(estimator, info)`` with ``info`` a dict
        (``epoch``, ``loss``, ``grad_norm``, ``time``, ``steps``, ``phase``); returning
        ``True`` stops training (without a warning). Its run time is excluded from
        ``time_history_``.
    compute_loss : bool, default=True
        Evaluate the training objective and gradient after each epoch (always done when
        ``tol`` is set or a finishing phase may run, which need them).
    random_state : None, int or numpy.random.Generator / RandomState

    Attributes
    ----------
    classes_ : ndarray, shape (n_classes,)
    coef_ : ndarray, shape (1, n_features) (binary) or (n_classes, n_features)
    intercept_ : ndarray, shape (1,) or (n_classes,)
        With more than two classes only defined up to a common shift; the one summing
        to zero is reported, as by scikit-learn.
    loss_history_ : list of float
        Training objective before training (entry 0) and after every epoch.
    grad_norm_history_ : list of float
        ``||grad L(W)|| / ||grad L(0)||`` (Frobenius norms) at each entry of
        ``loss_history_``, the quantity ``tol`` bounds.
    time_history_ : list of float
        Cumulative training seconds at each entry of ``loss_history_`` (0 for entry 0;
        set-up such as the preconditioner counts, and so does the per-epoch evaluation of
        the full objective and gradient whenever ``tol`` or the finishing phase uses it;
        callbacks, and the evaluation when it only serves ``compute_loss``, are excluded).
    switch_epoch_ : int or None
        Epochs taken before the finishing phase started (``None``: it did not start).
    n_iter_ : int
        Epochs run (cumulative over ``partial_fit`` calls).
    t_ : int
        Optimisation steps taken.
    n_features_in_ : int

    Notes
    -----
    **Data types.** float32 ``X`` gives float32 ``coef_``, ``intercept_`` and
    probabilities (as scikit-learn's ``LogisticRegression``), and the per-batch work --
    logits, gradient, the bound's ``C_j``, the curvature products of CG, the
    preconditioner -- runs in float32 (SPFB on Fashion-MNIST: about 1.3x less CPU time;
    the loss path agrees with a float64 fit to ~1e-6). Two things stay in float64
    on purpose: the parameters the steps are added to (a float32 sum of thousands of
    steps ``eta_t Delta`` of size 1e-4 relative would lose them) and the objective and
    gradient of the full training set (means over ``T`` samples; ``tol`` compares the
    gradient's norm to 1e-5 of its initial value).
    The dense Cholesky solve (its system too: the bound's ``C_j`` and the batch gradient,
    from the float32 logits) and the low-rank bound of ``"lspfb"`` always run in float64
    (an ill-conditioned factorization and a sequential eigen-update). Other inputs are
    converted to float64.
    """

    _parameter_constraints: ClassVar[dict] = {
        "solver": [StrOptions(set(SOLVERS))],
        "rank": int_range(1),
        "alpha": POSITIVE,
        "batch_size": int_range(1),
        "max_epochs": int_range(1),
        "tol": [None, *NON_NEGATIVE],
        "n_iter_no_change": int_range(1),
        "eta0": POSITIVE,
        "schedule": [None, StrOptions(set(_s.SCHEDULES))],
        "t0": [None, *POSITIVE],
        "finish": [None, StrOptions({"auto", "bound"})],
        "fit_intercept": ["boolean"],
        "reduction": [StrOptions({"mean", "sum"})],
        "linear_solver": [StrOptions({"auto", "cg", "dense"})],
        "cg_rtol": POSITIVE,
        "cg_maxiter": [None, *int_range(1, 2**31 - 1)],  # the solvers' maxiter bound
        "preconditioner": [None, StrOptions({"kronecker", "jacobi"})],
        "low_rank": [StrOptions({"paper", "eig", "exact"})],
        "shuffle": ["boolean"],
        "warm_start": ["boolean"],
        "callback": [None, callable],
        "compute_loss": ["boolean"],
        "random_state": RANDOM_STATE,
    }

    def __init__(
        self,
        solver="spfb",
        rank=10,
        alpha=1e-4,
        batch_size=1000,
        max_epochs=100,
        tol=1e-5,
        n_iter_no_change=1,
        eta0=1.0,
        schedule=None,
        t0=None,
        finish="auto",
        fit_intercept=True,
        reduction="mean",
        linear_solver="auto",
        cg_rtol=1e-4,
        cg_maxiter=None,
        preconditioner="kronecker",
        low_rank="exact",
        shuffle=True,
        warm_start=False,
        callback=None,
        compute_loss=True,
        random_state=None,
    ):
        self.solver = solver
        self.rank = rank
        self.alpha = alpha
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.eta0 = eta0
        self.schedule = schedule
        self.t0 = t0
        self.finish = finish
        self.fit_intercept = fit_intercept
        self.reduction = reduction
        self.linear_solver = linear_solver
        self.cg_rtol = cg_rtol
        self.cg_maxiter = cg_maxiter
        self.preconditioner = preconditioner
        self.low_rank = low_rank
        self.shuffle = shuffle
        self.warm_start = warm_start
        self.callback = callback
        self.compute_loss = compute_loss
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _check_params(self):
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}.")
        _pos_float(self.alpha, "alpha")
        _pos_float(self.eta0, "eta0")
        _pos_int(self.batch_size, "batch_size")
        _pos_int(self.max_epochs, "max_epochs")
        _pos_int(self.n_iter_no_change, "n_iter_no_change")
        if self.tol is not None:
            _pos_float(self.tol, "tol", allow_zero=True)
        schedule = self.schedule if self.schedule is not None else _DEFAULT_SCHEDULE[self.solver]
        if schedule not in _s.SCHEDULES:
            raise ValueError(
                f"schedule must be one of {_s.SCHEDULES} or None, got {self.schedule!r}."
            )
        if self.t0 is not None:
            _pos_float(self.t0, "t0")
        if self.finish not in ("auto", "bound", None):
            raise ValueError(f"finish must be 'auto', 'bound' or None, got {self.finish!r}.")
        if self.reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {self.reduction!r}.")
        if self.linear_solver not in ("auto", "cg", "dense"):
            raise ValueError(
                f"linear_solver must be 'auto', 'cg' or 'dense', got {self.linear_solver!r}."
            )
        _pos_float(self.cg_rtol, "cg_rtol")
        if self.cg_maxiter is not None:
            _pos_int(self.cg_maxiter, "cg_maxiter")
        if self.preconditioner not in ("kronecker", "jacobi", None):
            raise ValueError(
                "preconditioner must be 'kronecker', 'jacobi' or None, got "
                f"{self.preconditioner!r}."
            )
        if self.low_rank not in ("paper", "eig", "exact"):
            raise ValueError(f"low_rank must be 'paper', 'eig' or 'exact', got {self.low_rank!r}.")
        if self.solver == "lspfb":
            _pos_int(self.rank, "rank")
        if self.callback is not None and not callable(self.callback):
            raise TypeError(f"callback must be callable or None, got {type(self.callback)}.")
        return schedule

    def _encode(self, y):
        """Labels -> indices into ``classes_``; ValueError for unknown labels."""
        y = np.asarray(y)
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        bad = self.classes_[idx] != y
        if np.any(bad):
            unknown = np.unique(y[bad])[:5]
            raise ValueError(
                f"y contains labels {unknown.tolist()} that are not in classes_ "
                f"{self.classes_.tolist()}."
            )
        return idx

    # ------------------------------------------------------------------ fitting
    @keep_model_on_error
    def fit(self, X, y):
        """Fit on the labelled samples. A fit that raises (a bad chunk late in a Dask
        array, say) leaves the estimator as it was.

        ``X`` (and ``y``) may be Dask arrays with ``solver="bound"``: every sum
        over samples is then reduced over the row chunks
        (:func:`kernelkit.optim.chunked.fit_bound`; the same model to round-off).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)

        Returns
        -------
        BoundLogisticRegression
            ``self``.
        """
        self._validate_params()
        schedule = self._check_params()
        from .._backend.chunks import is_dask_array

        if is_dask_array(X) or is_dask_array(y):  # sums over the row chunks
            from .chunked import fit_bound

            return fit_bound(self, X, y, schedule)
        check_label_list(y, "y")
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], accept_sparse=False)
        self._start(sorted_class_labels(y, "y"), X.shape[1])
        # an int (np.int64 passes the constraints): its count words the warning below
        self._train(X, self._encode(y), schedule, int(self.max_epochs), stopping=True)
        return self

    def _start(self, classes, n_features: int) -> None:
        """Set ``classes_`` (sorted labels, at least 2) and start from zero coefficients
        unless ``warm_start`` continues a fit on the same classes and number of features
        (with the same ``fit_intercept``)."""
        if len(classes) < 2:
            raise ValueError(
                f"y has only one class ({classes.tolist()}); this classifier "
                "needs samples of at least 2 classes."
            )
        warm = (
            self.warm_start
            and hasattr(self, "coef_")
            and np.array_equal(getattr(self, "classes_", None), classes)
            and self._W.shape[0] == n_features + int(self.fit_intercept)
            # (p, intercept) and (p + 1, none) have as many rows: the mask tells them apart
            and self._fits_intercept() == bool(self.fit_intercept)
        )
        self.classes_ = classes
        if not warm:
            self._init_state(n_features)

    @keep_model_on_error
    def partial_fit(self, X, y, classes=None):
        """One epoch over ``(X, y)``. A call that raises leaves the estimator as it was
        (unfitted after a failed first call).

        With ``schedule="inverse_t0"`` and ``t0=None``, the time scale is the number of
        steps of the *first* call, kept for the later calls: the step sizes then depend
        only on the steps taken, not on how the stream is cut into calls. Pass ``t0``
        when the first call holds one mini-batch.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), optional
            All the class labels; required on the first call.

        Returns
        -------
        BoundLogisticRegression
            ``self``.
        """
        self._validate_params()
        schedule = self._check_params()
        first = not hasattr(self, "coef_")
        check_label_list(y, "y")
        check_label_list(classes, "classes")
        X, y = validate_data(
            self, X, y, dtype=[np.float64, np.float32], accept_sparse=False, reset=first
        )
        sorted_class_labels(y, "y")
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit.")
            classes = sorted_class_labels(np.asarray(classes), "classes", check=False)
            if len(classes) < 2:
                raise ValueError(
                    f"classes has only one class ({classes.tolist()}); this "
                    "classifier needs at least 2 classes."
                )
            unknown = np.setdiff1d(np.unique(y), classes)
            if unknown.size:
                raise ValueError(
                    f"y contains labels {unknown[:5].tolist()} that are not in classes "
                    f"{classes.tolist()}."
                )
            self.classes_ = classes
            self._init_state(X.shape[1])
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(
                f"classes {np.unique(classes).tolist()} differ from classes_ "
                f"{self.classes_.tolist()} of the first partial_fit call."
            )
        elif self._fits_intercept() != bool(self.fit_intercept):
            raise ValueError(
                f"fit_intercept={self.fit_intercept!r} differs from that of the model being "
                f"fitted ({self._fits_intercept()}): set it back, or call fit to start again."
            )
        self._train(X, self._encode(y), schedule, 1, stopping=False)
        return self

    def _fits_intercept(self) -> bool:
        """Whether the coefficients being fitted include an intercept row (the unpenalised
        last row of the mask), whatever ``fit_intercept`` says now."""
        return bool(self._mask.size) and self._mask[-1] == 0.0

    def _init_state(self, p):
        n = len(self.classes_)
        k = 2 if n == 2 else n
        self._W = np.zeros((p + int(self.fit_intercept), k))
        self._mask = np.ones(p + int(self.fit_intercept))
        if self.fit_intercept:
            self._mask[-1] = 0.0
        self._x0 = None
        self._precond = None
        self._stream_t0 = None  # partial_fit's default t0 (its first call's steps)
        self._rng = check_random_state(self.random_state)
        self.loss_history_ = []
        self.grad_norm_history_ = []
        self.time_history_ = []
        self.switch_epoch_ = None
        self._phase = "stochastic"
        self.n_iter_ = 0
        self.t_ = 0
        self._train_time = 0.0
        self._sync_coef()

    def _compute_W(self, dtype):
        """The parameters in the compute dtype (the float64 master copy for float64 data)."""
        return self._W if dtype == self._W.dtype else self._W.astype(dtype)

    def _lam(self):
        return float(self.alpha) * (2.0 if len(self.classes_) == 2 else 1.0)

    def _sync_coef(self):
        W, p = self._W, self.n_features_in_
        if len(self.classes_) == 2:
            w = W[:, 1] - W[:, 0]
            coef, icpt = w[None, :p], (w[p:] if self.fit_intercept else np.zeros(1))
        else:
            # softmax is unchanged by a shift common to all intercepts, which are not
            # penalised: report the zero-sum one (scikit-learn's); the steps of "spfb" and
            # "bound" keep it, the low-rank steps of "lspfb" drift along it
            icpt = W[p] - np.mean(W[p]) if self.fit_intercept else np.zeros(W.shape[1])
            coef = W[:p].T
        dtype = getattr(self, "_dtype", np.float64)
        self.coef_ = np.ascontiguousarray(coef, dtype=dtype)
        self.intercept_ = np.array(icpt, dtype=dtype)

    def _finish_on(self):
        """Whether ``fit`` may switch to the full-batch finishing phase."""
        if self.solver == "bound":
            return False
        if self.finish == "auto":
            return self.solver in ("spfb", "lspfb")
        return self.finish == "bound"

    def _full_state(self, X1, yi):
        """Objective (float64), its gradient (p + 1, n) (float64) and the logits (T, n)
        (data dtype) at the current parameters; the gradient reuses the logits."""
        T = len(yi)
        S = _s._logits(X1, self._compute_W(X1.dtype))  # (T, n)
        S64 = S.astype(np.float64, copy=False)
        lse = logsumexp(S64, axis=1)  # (T,)
        rows = np.arange(T)
        R = np.exp(S64 - lse[:, None])  # (T, n) probabilities ...
        R[rows, yi] -= 1.0  # ... minus the one-hot labels
        Wm = self._W * self._mask[:, None]
        loss = float(np.mean(lse - S64[rows, yi])) + 0.5 * self._lam() * float(np.sum(Wm * self._W))
        G = (
            np.asarray((R.astype(X1.dtype, copy=False).T @ X1).T, dtype=np.float64) / T
            + self._lam() * Wm
        )
        return loss, G, S

    def _train(self, X, yi, schedule, epochs, *, stopping):
        """``epochs`` epochs on ``(X, yi)``: ``fit`` (``stopping``: the finishing phase,
        ``tol`` and its ConvergenceWarning, also for ``max_epochs=1``) or ``partial_fit``
        (one epoch of stochastic steps only)."""
        X1 = _augment(X, self.fit_intercept)
        self._dtype = X1.dtype
        T, p1 = X1.shape
        n = self._W.shape[1]
        d = p1 * n
        x_max = float(np.max(np.abs(X1)))
        if x_max > math.sqrt(float(np.finfo(X1.dtype).max) / (T * p1)):  # sums of x x^T overflow
            raise ValueError(
                f"X is too large for the bound's curvature: max |X| = {x_max:.3g}, and sums "
                f"of the products x_i x_i^T over {T} rows overflow {X1.dtype}; scale X "
                "down (e.g. with StandardScaler)."
            )
        lam = self._lam()
        if self.solver == "lspfb" and self.rank > d:
            raise ValueError(
                f"rank={self.rank} exceeds the parameter dimension {d} "
                f"(= {n} classes x {p1} coefficients)."
            )
        full = self.solver == "bound"
        m = T if full else min(int(self.batch_size), T)
        steps_per_epoch = int(np.ceil(T / m))
        if self.t0 is not None:
            t0 = float(self.t0)
        elif stopping:  # fit: one epoch's steps
            t0 = float(steps_per_epoch)
        else:  # partial_fit: the steps of the stream's first call, kept for the stream
            if getattr(self, "_stream_t0", None) is None:
                self._stream_t0 = float(steps_per_epoch)
            t0 = self._stream_t0
        lin = self.linear_solver
        if lin == "auto":
            lin = "dense" if (self.solver == "bound" and d <= _DENSE_MAX_DIM) else "cg"
        rng = self._rng
        finish = self._finish_on() and stopping  # partial_fit: stochastic steps only
        # the per-epoch full objective and gradient: part of the algorithm (timed) when
        # the stopping rule or the finishing phase uses them, else monitoring only
        timed_eval = self.tol is not None or finish
        track = self.compute_loss or timed_eval
        g_ref = 1.0
        if track:  # ||grad L|| at W = 0: ||X^T (1/n - Y)|| / T (the ridge term vanishes)
            R0 = np.full((T, n), 1.0 / n)
            R0[np.arange(T), yi] -= 1.0
            g_ref = float(np.linalg.norm((R0.astype(X1.dtype, copy=False).T @ X1).T)) / T
            # its rounding error is at most ~eps sum_i |x_i| per entry (|R0| <= 1): below
            # that, W = 0 is optimal (e.g. every row present once per class) and a ratio
            # of rounding errors could never reach tol; use absolute norms then
            noise = (
                np.finfo(X1.dtype).eps
                * math.sqrt(n)
                * float(np.linalg.norm(np.abs(X1).sum(axis=0)))
            )
            g_ref = g_ref if g_ref > noise else 1.0
        self._state = None  # (logits, gradient) at the current W for this X
        self._ncg = None  # previous (gradient, bound direction, direction) of the finish
        # eq. 2.4 with eta <= 1 never increases L in exact arithmetic (majorisation)
        monotone = full and schedule == "constant" and float(self.eta0) <= 1.0
        descent_ref = None  # L at the start of this call: of this data and alpha
        if track and (monotone or not self.loss_history_):
            loss, G, S = self._full_state(X1, yi)
            self._state = (S, G)
            descent_ref = loss
            if not self.loss_history_:  # entry 0: before any work (time 0)
                self.loss_history_.append(loss)
                self.grad_norm_history_.append(float(np.linalg.norm(G)) / g_ref)
                self.time_history_.append(self._train_time)
        precond = self.preconditioner
        if precond == "kronecker" and lin == "cg" and (self.solver in ("spfb", "bound") or finish):
            tic = time.perf_counter()
            if self._precond is None or self._precond.p != p1:
                sub = X1 if T <= 10_000 else X1[rng.choice(T, 10_000, replace=False)]
                self._precond = KroneckerPreconditioner(
                    sub, rank=_PRECOND_RANK if p1 > 2 * _PRECOND_RANK else None
                )
            precond = self._precond
            self._train_time += time.perf_counter() - tic
        self._precond_arg = precond  # its setup time is part of the first epoch
        no_progress = 0
        converged = False
        rel = self.grad_norm_history_[-1] if self.grad_norm_history_ else math.inf
        for _ in range(epochs):
            tic = time.perf_counter()
            if finish and self._phase == "full":
                self._finish_step(X1, yi, lam, lin)
            else:
                self._stochastic_epoch(X1, yi, full, m, schedule, t0, lam, lin)
            self._train_time += time.perf_counter() - tic
            self.n_iter_ += 1
            self._state = None
            if not np.all(np.isfinite(self._W)):
                raise FloatingPointError(
                    f"{self.solver} diverged (non-finite parameters at epoch {self.n_iter_}); "
                    "decrease eta0 or increase alpha."
                )
            loss, prev_rel = None, rel
            if track:
                tic = time.perf_counter()
                loss, G, S = self._full_state(X1, yi)
                if timed_eval:
                    self._train_time += time.perf_counter() - tic
                self._state = (S, G)
                rel = float(np.linalg.norm(G)) / g_ref
                if monotone:
                    self._check_descent(loss, descent_ref, X1.dtype)
                    descent_ref = loss
                self.loss_history_.append(loss)
                self.grad_norm_history_.append(rel)
                self.time_history_.append(self._train_time)
            self._sync_coef()
            stop = False
            if self.callback is not None:
                stop = bool(
                    self.callback(
                        self,
                        {
                            "epoch": self.n_iter_,
                            "loss": loss,
                            "grad_norm": rel if track else None,
                            "time": self._train_time,
                            "steps": self.t_,
                            "phase": self._phase if finish else "stochastic",
                        },
                    )
                )
            if self.tol is not None and stopping and rel <= float(self.tol):
                converged = True
                break
            if finish and self._phase == "stochastic":
                no_progress = no_progress + 1 if rel > _SWITCH_RATIO * prev_rel else 0
                if no_progress >= self.n_iter_no_change:
                    self._phase = "full"
                    self.switch_epoch_ = self.n_iter_
            if stop:
                converged = True
                break
        if self.tol is not None and stopping and not converged:
            hint = " or set finish='bound'" if self.solver != "bound" and not finish else ""
            advice = f"increase max_epochs{hint}"
            L = self.loss_history_
            if L and L[-1] > L[0]:  # worse than coef_ = 0: more epochs will not help
                advice = "increase max_epochs" + (
                    f". But the objective rose from {L[0]:.3g} (coef_ = 0) to {L[-1]:.3g}: "
                    "the steps are too long for the scale of X; standardise X (e.g. with "
                    "StandardScaler) or decrease eta0"
                )
            elif epochs > 1 and rel > _NO_PROGRESS_RATIO:
                # every epoch left ||grad L|| where coef_ = 0 has it: the steps do not move
                # (X of scale 1e60: products of the curvature leave the float range)
                advice = (
                    f"the gradient barely moved in {epochs} epochs, so more epochs rarely "
                    f"help: check the scale of X (max |X| = {float(np.max(np.abs(X1))):.3g})"
                    f" and standardise it (e.g. with StandardScaler), or {advice}"
                )
            warnings.warn(
                f"{type(self).__name__} ({self.solver}) did not converge in {epochs} "
                f"epoch{'s' * (epochs != 1)}: ||grad L|| is {rel:.2e} times its value at "
                f"coef_ = 0, above tol={self.tol:g}; {advice}.",
                ConvergenceWarning,
                stacklevel=caller_stacklevel(),
            )
        self._sync_coef()

    def _check_descent(self, loss, prev, dtype):
        """FloatingPointError if a full-batch bound step raised ``L`` from ``prev`` (its
        value before the step, on the same data and ``alpha``) beyond round-off."""
        if loss > prev + math.sqrt(np.finfo(dtype).eps) * max(1.0, abs(prev)):
            raise FloatingPointError(
                f"{self.solver}: the objective rose from {prev:.6g} to {loss:.6g} at epoch "
                f"{self.n_iter_}; the bound step (eq. 2.4, eta0 <= 1) cannot do that in "
                f"exact arithmetic, so X is too badly scaled for {np.dtype(dtype).name} "
                f"against alpha={self.alpha:g}: standardise X (e.g. with StandardScaler)"
                f"{', use float64' if dtype == np.float32 else ''} or increase alpha."
            )

    def _stochastic_epoch(self, X1, yi, full, m, schedule, t0, lam, lin):
        """One pass of mini-batch steps (one full-batch step for ``"bound"``)."""
        T = len(yi)
        order = self._rng.permutation(T) if (self.shuffle and not full) else np.arange(T)
        for start in range(0, T, m):
            idx = order[start : start + m]
            Xb, yb = (X1, yi) if full else (X1[idx], yi[idx])
            self.t_ += 1
            eta = _s.step_size(schedule, float(self.eta0), self.t_, t0)
            # float64 master parameters; the step's products run in the data's dtype
            try:
                self._W = self._W - eta * self._step(Xb, yb, lam, lin)
            except _SingularCurvature as exc:  # a limit of the data's scale, no divergence
                raise ValueError(
                    f"{self.solver}: the {lin} solve at step {self.t_} failed: {exc} "
                    "(lam is alpha, or 2 alpha for two classes: standardise X, e.g. with "
                    "StandardScaler, or increase alpha.)"
                ) from exc
            except ValueError as exc:  # X is validated: non-finite logits = divergence
                raise FloatingPointError(
                    f"{self.solver} diverged at step {self.t_} (epoch {self.n_iter_ + 1})"
                    f": {exc} Decrease eta0 or increase alpha."
                ) from exc

    def _finish_step(self, X1, yi, lam, lin):
        """One full-batch step of the finishing phase (``finish``): the bound direction of
        eq. 2.4 (inexact CG), made conjugate to the previous direction (Polak-Ribiere+),
        and an exact line search on ``L``."""
        T = len(yi)
        if self._state is None:
            _, G, S = self._full_state(X1, yi)
        else:
            S, G = self._state
        W = self._compute_W(X1.dtype)
        Ss, Xs = S, X1
        if lin == "dense" and X1.dtype != np.float64:
            # the dense solve is float64, and so must its system be (as spfb_step's): a
            # float32 C_j, ~0 along the classes' common direction, made it indefinite
            Ss, Xs = S.astype(np.float64), X1.astype(np.float64)
        bnd = multinomial_bound_from_logits(Ss, W, X1)  # C (T, n, n)
        A = KroneckerCurvature._trusted(Xs, bnd.C, lam=lam, scale=1.0 / T)
        try:
            Z, _ = A.solve(
                G.astype(Xs.dtype, copy=False),
                method=lin,
                rtol=_FINISH_RTOL,
                maxiter=_FINISH_CG_MAXITER,
                precondition=self._precond_arg,
            )
        except ValueError as exc:  # X is validated: CG's iterates left the float range
            raise ValueError(
                f"{self.solver}: the bound step of the finishing phase failed at epoch "
                f"{self.n_iter_ + 1} ({exc}): the curvature X^T C X / T, with entries up to "
                f"~max |X|^2 = {float(np.max(np.abs(X1))) ** 2:.3g}, is too ill-conditioned "
                f"against lam = {float(np.max(lam)):.3g} for floating point; standardise X "
                "(e.g. with StandardScaler) or increase alpha."
            ) from exc
        Z = np.asarray(Z, dtype=np.float64)  # (p + 1, n) the bound step of eq. 2.4
        if not float(np.sum(Z * G)) > 0.0:
            # CG stopped before its first update (the curvature is not positive
            # definite in floating point, e.g. float32 features of scale 1e4): Z = 0 would
            # stall the iteration, so take the steepest-descent direction instead
            Z = G
        D = Z
        if self._ncg is not None:
            G_old, Z_old, D_old = self._ncg
            den = float(np.sum(Z_old * G_old))  # > 0, or 0 where G_old = 0
            beta = max(0.0, float(np.sum(Z * (G - G_old))) / den) if den > 0.0 else 0.0
            D = Z + beta * D_old
            if not float(np.sum(G * D)) > 0.0:  # not a descent direction: restart
                D = Z
        U = _s._logits(X1, D.astype(X1.dtype))  # (T, n) logits of the direction
        eta = _s._line_search(S, U, yi, self._W, D, lam, self._mask)
        self._W = self._W - eta * D
        self._ncg = (G, Z, D)

    def _step(self, Xb, yb, lam, lin):
        """The step direction ``Delta`` (``W <- W - eta_t Delta``) on one mini-batch."""
        W = self._compute_W(Xb.dtype)
        if self.solver in ("spfb", "bound"):
            rtol = float(self.cg_rtol)
            maxiter = (
                self.cg_maxiter
                if self.cg_maxiter is not None
                else (_SPFB_CG_MAXITER if self.solver == "spfb" else 500)
            )
            _, info = _s.spfb_step(
                W,
                Xb,
                yb,
                lam,
                1.0,
                mask=self._mask,
                reduction="mean" if self.solver == "bound" else self.reduction,
                linear_solver=lin,
                rtol=rtol,
                maxiter=maxiter,
                x0=None if self.solver == "bound" else self._x0,
                preconditioner=self._precond_arg,
            )
            self._x0 = info["direction"]
            return info["direction"]
        if self.solver == "sgd":
            return _s.sgd_step(W, Xb, yb, lam, 1.0, mask=self._mask, reduction=self.reduction)[1][
                "direction"
            ]
        from .low_rank import lspfb_step

        return lspfb_step(
            self._W,
            Xb,
            yb,
            lam,
            1.0,
            rank=int(self.rank),
            mask=self._mask,
            reduction=self.reduction,
            variant=self.low_rank,
        )[1]["direction"]

    # ------------------------------------------------------------------ prediction
    def _lazy(self, X, method, n_outputs):
        # a Dask X: ``method`` on every row chunk, lazily (float64 Dask array out)
        from .._backend.chunks import map_row_chunks

        return map_row_chunks(X, getattr(self, method), n_outputs)

    def decision_function(self, X):
        """Class scores ``X coef_^T + intercept_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes) or (n_samples,)
            (n_samples,) for two classes. Lazy (a Dask array) for a Dask ``X``.
        """
        check_is_fitted(self)
        if is_dask_array(X):
            binary = len(self.classes_) == 2
            return self._lazy(X, "decision_function", None if binary else len(self.classes_))
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        # not super().decision_function: it validates again, and the validated array has
        # lost a DataFrame's column names (a spurious feature-names warning)
        with np.errstate(over="ignore", invalid="ignore"):
            scores = X @ self.coef_.T + self.intercept_  # (n_samples, k)
        if not np.all(np.isfinite(scores)):  # X is finite (validated)
            raise ValueError(
                "X is finite but its scores X coef_^T + intercept_ overflow "
                f"{scores.dtype} (max |X| = {np.abs(X).max():.3g}); scale X down."
            )
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict(self, X):
        """Class labels.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
            Entries of ``classes_``; lazy for a Dask ``X``.
        """
        check_is_fitted(self)
        if not is_dask_array(X):
            return super().predict(X)
        classes = self.classes_

        def label(scores):
            idx = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
            return classes[idx]

        scores = self.decision_function(X)
        return scores.map_blocks(
            label,
            drop_axis=1 if scores.ndim == 2 else None,
            dtype=classes.dtype,
            meta=np.empty(0, classes.dtype),
        )

    def predict_proba(self, X):
        """Class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns in ``classes_`` order; lazy for a Dask ``X``.
        """
        if is_dask_array(X):
            check_is_fitted(self)
            return self._lazy(X, "predict_proba", len(self.classes_))
        scores = self.decision_function(X)
        if scores.ndim == 1:  # expit(-s), not 1 - expit(s): exact for confident rows
            return np.column_stack([expit(-scores), expit(scores)])
        return softmax(scores, axis=1)

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`, computed in log space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Lazy for a Dask ``X``.
        """
        if is_dask_array(X):
            check_is_fitted(self)
            return self._lazy(X, "predict_log_proba", len(self.classes_))
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return -np.logaddexp(0.0, -np.column_stack([-scores, scores]))
        from scipy.special import log_softmax

        return log_softmax(scores, axis=1)

    def score(self, X, y, sample_weight=None):
        """Mean accuracy on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        float

        Raises
        ------
        ValueError
            ``y`` has labels not in ``classes_``.
        """
        check_is_fitted(self)
        if is_dask_array(X) or is_dask_array(y):  # one pass over the chunks
            import dask.array as da

            from .._backend.chunks import as_dask_labels, as_dask_rows

            X = as_dask_rows(X, "X", owner=type(self).__name__)
            y = as_dask_labels(y, X, owner=type(self).__name__)
            self._encode(np.asarray(da.unique(y).compute()))
            hit = (self.predict(X) == y).astype(np.float64)
            if sample_weight is None:
                return float(hit.mean().compute())
            w = da.asarray(sample_weight)
            return float(((hit * w).sum() / w.sum()).compute())
        self._encode(np.asarray(y).ravel())
        return super().score(X, y, sample_weight=sample_weight)

    def objective(self, X, y) -> float:
        """Training objective (module docstring) of the fitted model on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)

        Returns
        -------
        float
            As :func:`logistic_objective` with the fitted ``coef_``, ``intercept_``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        self._encode(y)
        return logistic_objective(
            self.coef_, self.intercept_, X, y, float(self.alpha), self.classes_
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags


def _pos_float(value, name, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {value!r}.")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'} and "
            f"finite, got {value}."
        )
    return value


def _pos_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}.")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value}.")
    return int(value)
