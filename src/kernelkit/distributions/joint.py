"""Adaptive joint distribution learning (JDL): low-rank tensor RKHS density ratio."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from sklearn.utils._param_validation import StrOptions

from .._backend import validate_positive_float
from .._backend.chunks import is_block_sequence
from .._backend.parallel import check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE, int_range
from ._base import TensorJointModel, check_constraint, check_xy
from ._basis import (
    KERNEL_CONSTRAINT,
    TOLERANCE_CONSTRAINTS,
    BasisCache,
    LowRankBasis,
    fit_basis,
    train_cross,
    train_extremes,
)
from ._chunked import (
    DEFAULT_PIVOT_SAMPLE,
    check_pivot_sample,
    concat_blocks,
    fit_sampled_bases,
    is_chunked,
    is_dask_array,
    warn_unused_basis_cache,
)
from ._positive import interval_bounds, solve_positive

__all__ = ["JointDistribution", "solve_low_rank"]


def solve_low_rank(G, s_x, s_y, lam_x, lam_y, n, reg, constraint=None, bounds=None):
    """Solve problem (22) in its diagonal form (docs/derivations/joint_distribution.md).

    ``R(H) = sum_kl W_kl H_kl^2 - 2 c_kl H_kl`` with ``W_kl = lam_Y_k lam_X_l / n^2 + reg``
    and ``c = G / n - S / n^2``, ``S = s_Y s_X^T``.

    Parameters
    ----------
    G : ndarray, shape (m_Y, m_X)       ``A_Y^T A_X``
    s_x, s_y : ndarray, shapes (m_X,), (m_Y,)   ``A^T 1``
    lam_x, lam_y : ndarray              eigenvalues of ``L^T L``
    n : int
    reg : float                         ``lambda > 0``
    constraint : None, "normalized" or "positive"
    bounds : (C_lo, C_hi), needed for "positive"

    Returns
    -------
    H : ndarray, shape (m_Y, m_X)
    info : dict
    """
    W = np.multiply.outer(lam_y, lam_x) / n**2 + reg  # (m_Y, m_X)
    S = np.multiply.outer(s_y, s_x)  # (m_Y, m_X)
    if constraint is None:
        return (G / n - S / n**2) / W, {}
    if constraint == "normalized":
        SW = S / W
        denom = n * float(np.sum(S * SW))
        mu = float(np.sum(SW * G)) / denom if denom > 0 else 0.0
        return (G / n - mu * S) / W, {"mu": mu}
    C_lo, C_hi = bounds
    return solve_positive(W, G / n - S / n**2, S, C_lo, C_hi, normalized=True)


class JointDistribution(TensorJointModel):
    """Joint distribution learning (JDL) with low-rank kernel bases.

    Estimates ``dQ = (1 + h) d(P_X x P_Y)`` on the grid of the empirical marginals (1),
    with ``h`` in the tensor RKHS ``H_X (x) H_Y``, by minimising
    ``||h_hat - h||^2 + reg ||h||^2`` (8) over the low-rank bases of :class:`LowRankBasis`
    (problem (22)): ``h(x, y) = psi_Y(y)^T H psi_X(x)``. Fit costs O(n m^2) time and
    O(n m) memory (pivoted Cholesky of both kernels, one ``A_Y^T A_X``), then an O(m^2)
    closed form or the exact dual (docs/derivations/joint_distribution.md).

    Parameters
    ----------
    kernel_x, kernel_y : str or callable, default="gaussian"
        See :mod:`kernelkit.distributions._kernels`.
    lengthscale_x, lengthscale_y : float, default=1.0
        Gaussian kernel ``exp(-|x - x'|^2 / (2 l^2))`` (a library choice).
    reg : float, default=1e-3
        Regularisation ``lambda`` of (8).
    tol : float, optional
        Absolute pivoted-Cholesky tolerance on ``trace(K - L L^T)`` (15). With
        ``rel_tol`` also set, the factorisation stops at the larger of the two thresholds,
        so a ``tol`` below ``rel_tol trace(K)`` has no effect: pass ``rel_tol=None`` to stop
        at ``tol`` alone.
    rel_tol : float or None, default=1e-3
        Relative tolerance ``epsilon``: stop at ``trace(K - L L^T) <= epsilon trace(K)``
        (the paper uses 1e-3 up to n = 1e5, 1e-2 at 1e6, 1e-1 at 1e7).
    max_rank : int, optional
        Cap on each basis size.
    constraint : {None, "normalized", "positive"}, default=None
        ``None``: closed form; ``"normalized"``: with (20) (one multiplier);
        ``"positive"``: with (20) and the positivity tightening (29), which implies
        ``1 + h >= 0`` on the training grid (Lemma 4.3), solved exactly (the exact dual).
    basis_cache : BasisCache, optional
        Reuse the bases of earlier fits on the same data with the same kernel,
        lengthscale and tolerances (e.g. in a grid search over ``reg``); see
        :class:`~kernelkit.distributions.BasisCache`. Used by exact fits only (NumPy
        input without ``pivot_sample``).
    pivot_sample : int, optional
        Run Algorithm 1 on this many rows drawn uniformly without replacement, then
        reduce the statistics of problem (22) over **all** rows in one blocked pass
        (:mod:`kernelkit.distributions._chunked`): O(s m^2 + n m (m + d)) time and
        O(n d + s m) memory instead of O(n m) for the factor. The tolerances apply to
        the sample's kernel matrix; ``basis_x_.trace_residual_`` reports
        ``trace(K - L L^T)`` over all n rows. ``None``: all rows (exact Algorithm 1) for
        NumPy input, ``DEFAULT_PIVOT_SAMPLE`` (50 000) rows for chunked input.
    random_state : int, Generator or None, default=None
        Seed of the pivot sample (used only when it is smaller than n).
    n_jobs : int, optional
        Threads of the fit's blocked passes (the row blocks of Algorithm 1, the
        statistics ``L^T L``, ``A_Y^T A_X``, ... and the column extremes of the positivity
        bounds), in scikit-learn's convention (None: kernelkit's default, the CPUs
        available unless limited by ``KERNELKIT_NUM_THREADS`` or a BLAS thread limit;
        ``-1``: all CPUs; 0 is invalid). Dask input runs on the Dask scheduler instead.
        The fitted model does not depend on it.

    Attributes
    ----------
    coef_ : ndarray, shape (m_Y, m_X)
        ``H~`` of (22)
    basis_x_, basis_y_ : LowRankBasis
    s_x_, s_y_ : ndarray, shape (m_X,), (m_Y,)
        ``A_X^T 1``, ``A_Y^T 1``
    X_fit_, Y_fit_ : ndarray
        Training samples, (n, d_X), (n, d_Y)
    n_samples_ : int
    solver_info_ : dict
        Multipliers of the constrained solves
    n_features_in_ : int
        ``d_X``
    pivot_rows_ : ndarray of int or None
        Rows of the pivot sample (None: all rows)

    Notes
    -----
    Scale-out: ``fit`` also takes a ``dask.array.Array`` pair (``Y`` NumPy or Dask;
    rows aligned to ``X``'s chunks) or an iterable of ``(X_block, Y_block)`` NumPy pairs
    with ``Y=None``.
    Feature blocks are formed per chunk in parallel (the active Dask scheduler: threads,
    or a ``distributed.Client``), the m-sized statistics are tree-reduced and the small
    problem is solved once; no more than one chunk of features per worker is alive. The
    model keeps its training samples (``X_fit_``/``Y_fit_``: Dask arrays stay lazy;
    blocks of an iterable are concatenated, O(n d) memory) and every later product over
    them is again one pass. On Dask input, ``conditional_expectation``,
    ``marginal_ratio``, ``density_ratio`` and ``conditional_weights`` return lazy Dask
    arrays (the mass warning is raised when they are computed); ``validation_loss``
    reduces over the chunks. A callable ``f`` receives the training targets as they were
    given (a Dask array for Dask input). With the same ``pivot_sample`` and
    ``random_state``, NumPy, Dask and block input give the same model up to round-off.

    Dtypes: inputs of any real dtype are converted to float64 NumPy arrays; every output
    (weights, expectations, probabilities, density ratios) is float64.

    Memory: exact fits keep the two factors ``L_X``, ``L_Y`` (8 n (m_X + m_Y) bytes)
    and the training samples; sampled / chunked fits keep only the samples. No (n, n)
    array is formed. ``conditional_weights`` returns an (n_new, n) array;
    ``conditional_expectation`` does not.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.distributions import JointDistribution
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((500, 1)); Y = 0.8 * X + 0.6 * rng.standard_normal((500, 1))
    >>> model = JointDistribution(lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4).fit(X, Y)
    >>> mean = model.conditional_expectation(Y, [[-1.0], [1.0]])  # E[Y | X = x], (2, 1)
    >>> bool(mean[0, 0] < 0 < mean[1, 0])
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        "kernel_x": KERNEL_CONSTRAINT,
        "kernel_y": KERNEL_CONSTRAINT,
        "lengthscale_x": POSITIVE,
        "lengthscale_y": POSITIVE,
        "reg": POSITIVE,
        **TOLERANCE_CONSTRAINTS,
        "constraint": [None, StrOptions({"normalized", "positive"})],
        "basis_cache": [None, BasisCache],
        "pivot_sample": [None, *int_range(2)],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        kernel_x="gaussian",
        kernel_y="gaussian",
        lengthscale_x: float = 1.0,
        lengthscale_y: float = 1.0,
        reg: float = 1e-3,
        tol=None,
        rel_tol=1e-3,
        max_rank=None,
        constraint=None,
        basis_cache=None,
        pivot_sample=None,
        random_state=None,
        n_jobs=None,
    ):
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.lengthscale_x = lengthscale_x
        self.lengthscale_y = lengthscale_y
        self.reg = reg
        self.tol = tol
        self.rel_tol = rel_tol
        self.max_rank = max_rank
        self.constraint = constraint
        self.basis_cache = basis_cache
        self.pivot_sample = pivot_sample
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X, Y=None):
        """Fit on paired samples.

        Parameters
        ----------
        X : array_like, shape (n, d_X); a ``dask.array.Array``; or an iterable of
            ``(X_block, Y_block)`` pairs (then ``Y=None``)
        Y : array_like, shape (n, d_Y) or (n,); NumPy or Dask

        Returns
        -------
        self
        """
        self._validate_params()
        reg = validate_positive_float(self.reg, "reg")
        constraint = check_constraint(self.constraint)
        pivot_sample = check_pivot_sample(self.pivot_sample)
        check_n_jobs(self.n_jobs)  # the threads of every blocked pass below
        if is_block_sequence(X):  # a list of (X_block, Y_block) pairs is an iterable of them
            X = iter(X)
        if is_chunked(X) and not is_dask_array(X):
            if Y is not None:
                raise ValueError(
                    "JointDistribution: with an iterable of (X_block, Y_block) pairs, pass Y=None."
                )
            X, Y = concat_blocks(X, "JointDistribution")
            pivot_sample = pivot_sample or DEFAULT_PIVOT_SAMPLE
        if is_dask_array(X) or is_dask_array(Y):
            G = self._fit_sampled(X, Y, pivot_sample or DEFAULT_PIVOT_SAMPLE, dask=True)
        else:
            X, Y = check_xy(X, Y, estimator=self)
            if pivot_sample is not None and pivot_sample < X.shape[0]:
                G = self._fit_sampled(X, Y, pivot_sample, dask=False)
            else:
                G = self._fit_exact(X, Y)
        n = self.n_samples_
        bounds = None
        if constraint == "positive":
            (cmin_x, cmax_x), (cmin_y, cmax_y) = (
                train_extremes(self.basis_x_, self.n_jobs),
                train_extremes(self.basis_y_, self.n_jobs),
            )
            bounds = interval_bounds(
                None, None, cmin_y=cmin_y, cmax_y=cmax_y, cmin_x=cmin_x, cmax_x=cmax_x
            )
        self.coef_, self.solver_info_ = solve_low_rank(
            G,
            self.s_x_,
            self.s_y_,
            self.basis_x_.eigenvalues_,
            self.basis_y_.eigenvalues_,
            n,
            reg,
            constraint,
            bounds,
        )
        return self

    # -- the two fits ------------------------------------------------------------------
    def _common(self):
        """Parameters shared by both bases (``n_jobs``: threads of their Algorithm 1)."""
        return {
            "tol": self.tol,
            "rel_tol": self.rel_tol,
            "max_rank": self.max_rank,
            "n_jobs": self.n_jobs,
        }

    def _fit_exact(self, X, Y):
        """Algorithm 1 on all rows (factors kept); returns ``A_Y^T A_X``."""
        self.basis_x_ = fit_basis(
            self.basis_cache,
            X,
            kernel=self.kernel_x,
            lengthscale=self.lengthscale_x,
            **self._common(),
        )
        self.basis_y_ = fit_basis(
            self.basis_cache,
            Y,
            kernel=self.kernel_y,
            lengthscale=self.lengthscale_y,
            **self._common(),
        )
        self.X_fit_, self.Y_fit_, self.n_samples_ = X, Y, X.shape[0]
        self.pivot_rows_ = None
        self._finish_fit()
        return train_cross(self.basis_y_, self.basis_x_, self.n_jobs)  # A_Y^T A_X (m_Y, m_X)

    def _fit_sampled(self, X, Y, pivot_sample: int, dask: bool):
        """Pivots from a uniform row sample, statistics from one pass over all rows
        (module doc of :mod:`kernelkit.distributions._chunked`); returns ``A_Y^T A_X``."""
        warn_unused_basis_cache(self.basis_cache, stacklevel=4)  # fit -> _fit_sampled
        bx = LowRankBasis(self.kernel_x, self.lengthscale_x, **self._common())
        by = LowRankBasis(self.kernel_y, self.lengthscale_y, **self._common())
        (X, Y), rows, cross_yx = fit_sampled_bases(
            [bx, by],
            [X, Y],
            ["X", "Y"],
            pivot_sample,
            self.random_state,
            dask=dask,
            n_jobs=self.n_jobs,
        )
        if dask:
            self.n_features_in_ = X.shape[1]
        n = X.shape[0]
        self.basis_x_, self.basis_y_ = bx, by
        self.X_fit_, self.Y_fit_, self.n_samples_ = X, Y, n
        self.pivot_rows_ = rows
        self._finish_fit()
        return by.rotation_.T @ cross_yx @ bx.rotation_  # A_Y^T A_X = V_Y^T L_Y^T L_X V_X
