"""Low-rank conditional mean embedding (CME) baseline, App. C of the JDL paper."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.optimize import nnls
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import validate_positive_float
from .._backend.chunks import map_row_chunks
from .._backend.parallel import check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE, int_range
from .._backend.sklearn_validation import validate_data as sk_validate_data
from ._base import check_constraint, check_indicator, check_xy
from ._basis import (
    KERNEL_CONSTRAINT,
    TOLERANCE_CONSTRAINTS,
    BasisCache,
    LowRankBasis,
    fit_basis,
    train_cross,
)
from ._chunked import (
    DEFAULT_PIVOT_SAMPLE,
    as_dask_rows,
    check_pivot_sample,
    fit_sampled_bases,
    is_dask_array,
    lazy_transform,
    reduce_rows,
    warn_unused_basis_cache,
)

__all__ = ["ConditionalMeanEmbedding"]


def _simplex_ls(M, v0, total):
    """``min ||M u - v0||^2`` s.t. ``u >= 0``, ``sum(u) = total`` (exact active set).

    Lawson-Hanson NNLS on the system augmented by a heavily weighted row ``w 1^T u = w
    total`` finds the support; the equality-constrained least squares problem on that
    support is then solved exactly through its KKT system, dropping indices that turn
    negative, until the KKT conditions hold.
    """
    m = M.shape[1]
    w = 1e6 * max(1.0, float(np.linalg.norm(M, 2)))
    u, _ = nnls(
        np.vstack([M, w * np.ones((1, m))]), np.concatenate([v0, [w * total]]), maxiter=50 * m
    )
    support = u > 0
    for _ in range(m + 1):
        idx = np.flatnonzero(support)
        Ms = M[:, idx]
        k = idx.size
        kkt = np.block([[2 * Ms.T @ Ms, np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
        sol = np.linalg.lstsq(kkt, np.concatenate([2 * Ms.T @ v0, [total]]), rcond=None)[0]
        us, mult = sol[:k], sol[k]
        if np.all(us >= 0):
            u = np.zeros(m)
            u[idx] = us
            # dual feasibility on the zero set: gradient + multiplier >= 0
            grad = 2 * M.T @ (M @ u - v0) + mult
            off = ~support
            if not np.any(off) or grad[off].min() >= -1e-9 * max(1.0, np.abs(grad).max()):
                return u
            support[np.flatnonzero(off)[np.argmin(grad[off])]] = True
        else:
            support[idx[np.argmin(us)]] = False
    return u  # pragma: no cover - NNLS support already optimal in practice


class ConditionalMeanEmbedding(BaseEstimator):
    """Low-rank conditional mean embedding (App. C, (44)-(46); baseline of Sec. 5).

    ``E[f(Y) | x] ~ f^T Q_Y F psi_X(x)`` with ``F`` minimising
    ``-2 tr(A_Y F A_X^T) + tr(F Lambda_X F^T + n reg F F^T)`` (44). Closed form (derived;
    docs/derivations/joint_distribution.md):
    ``F_kl = (A_Y^T A_X)_kl / (lambda_X_l + n reg)``. The weights ``Q_Y F psi(x)`` vanish
    outside the pivots of the Y basis (16), so only the ``m_Y`` pivot y's are used.

    Parameters
    ----------
    kernel_x, kernel_y, lengthscale_x, lengthscale_y, reg, tol, rel_tol, max_rank :
        as :class:`~kernelkit.distributions.JointDistribution`.
    constraint : {None, "normalized", "positive"}, default=None
        ``"normalized"``: (51) ``1^T Q_Y F s_X / n = 1`` (normalisation at the mean
        feature); ``"positive"``: (51) and (52) ``B_Y V_Y F s_X >= 0``. Both are solved
        exactly: the problem reduces to a projection of ``F s_X`` (one multiplier, or a
        simplex-constrained least-squares problem in ``m_Y`` unknowns).
    basis_cache : BasisCache, optional
        Share bases between fits (see :class:`~kernelkit.distributions.BasisCache`).
        Used by exact fits only (NumPy input without ``pivot_sample``).
    pivot_sample : int, optional
        Run Algorithm 1 on this many rows drawn uniformly without replacement and reduce
        the statistics of (44) (``A_Y^T A_X``, ``Lambda_X``, ``s_X``) over **all** rows in
        one blocked pass, as :class:`~kernelkit.distributions.JointDistribution` does.
        ``None``: all rows (exact Algorithm 1) for NumPy input, 50 000 rows for Dask input.
    random_state : int, Generator or None, default=None
        Seed of the pivot sample (used only when it is smaller than n).
    n_jobs : int, optional
        Threads of the fit's blocked passes (the row blocks of Algorithm 1 and the
        statistics ``A_Y^T A_X``, ``Lambda_X``, ``s_X``), as
        :class:`~kernelkit.distributions.JointDistribution`'s ``n_jobs`` (None:
        kernelkit's default; ``-1``: all CPUs; 0 is invalid). Dask input runs on the Dask
        scheduler instead. The fitted model does not depend on it.

    Attributes
    ----------
    coef_ : ndarray, shape (m_Y, m_X)
        ``F~``
    weights_map_ : ndarray, shape (m_Y, m_X)
        ``B_Y[piv] V_Y F~``: pivot weights are
        ``weights_map_ @ psi_X(x)``
    basis_x_, basis_y_ : LowRankBasis
    Y_pivots_ : ndarray, shape (m_Y, d_Y)
        The pivot y's
    pivot_rows_ : ndarray of int or None
        Rows of the pivot sample (None: all rows)

    Notes
    -----
    Scale-out: ``fit`` also takes ``dask.array.Array`` inputs (``X`` and / or ``Y``; rows
    aligned to ``X``'s chunks). The pivots come from the pivot sample; the factor rows
    of every chunk are formed in parallel on the active Dask scheduler (threads, or a
    ``distributed.Client``) and reduced to the m-sized statistics in a tree (user guide:
    "Scale-out with Dask"). With the same ``pivot_sample`` and ``random_state``, NumPy
    and Dask input give the same model up to round-off. The model keeps its training
    samples (``Y_fit_`` stays a lazy Dask array). On Dask ``X_new`` every prediction
    (``pivot_weights``, ``conditional_weights``, ``normalization``,
    ``conditional_expectation``, ``conditional_probability``) is a lazy Dask array;
    ``validation_loss`` and ``score`` reduce over the chunks.

    Inputs of any real dtype are converted to float64; outputs are float64 NumPy arrays
    (Dask arrays for Dask ``X_new``).
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

    def fit(self, X, Y):
        """Fit on paired samples.

        ``X`` and ``Y`` may be NumPy or ``dask.array.Array`` (see Notes).

        Parameters
        ----------
        X : array-like of shape (n, d_X)
        Y : array-like of shape (n, d_Y) or (n,)

        Returns
        -------
        ConditionalMeanEmbedding
            ``self``.
        """
        self._validate_params()
        reg = validate_positive_float(self.reg, "reg")
        constraint = check_constraint(self.constraint)
        pivot_sample = check_pivot_sample(self.pivot_sample)
        n_jobs = check_n_jobs(self.n_jobs)
        common = {
            "tol": self.tol,
            "rel_tol": self.rel_tol,
            "max_rank": self.max_rank,
            "n_jobs": n_jobs,
        }
        dask = is_dask_array(X) or is_dask_array(Y)
        if not dask:
            X, Y = check_xy(X, Y, estimator=self)
        if dask or (pivot_sample is not None and pivot_sample < X.shape[0]):
            if Y is None:
                check_xy(X, Y, estimator=self)  # the message of a missing Y
            warn_unused_basis_cache(self.basis_cache)
            bx = LowRankBasis(self.kernel_x, self.lengthscale_x, **common)
            by = LowRankBasis(self.kernel_y, self.lengthscale_y, **common)
            (X, Y), self.pivot_rows_, cross = fit_sampled_bases(
                [bx, by],
                [X, Y],
                ["X", "Y"],
                pivot_sample or DEFAULT_PIVOT_SAMPLE,
                self.random_state,
                dask=dask,
                n_jobs=n_jobs,
            )
            G = by.rotation_.T @ cross @ bx.rotation_  # A_Y^T A_X = V_Y^T L_Y^T L_X V_X
            if dask:
                self.n_features_in_ = X.shape[1]
        else:
            bx = fit_basis(
                self.basis_cache, X, kernel=self.kernel_x, lengthscale=self.lengthscale_x, **common
            )
            by = fit_basis(
                self.basis_cache, Y, kernel=self.kernel_y, lengthscale=self.lengthscale_y, **common
            )
            G = train_cross(by, bx, n_jobs)  # A_Y^T A_X, (m_Y, m_X)
            self.pivot_rows_ = None
        n = X.shape[0]
        D = bx.eigenvalues_ + n * reg  # (m_X,)
        F = G / D
        T = by.coef_  # B_Y[piv] V_Y, (m_Y, m_Y)
        if constraint is not None:
            s = bx.train_sums_  # s_X = A_X^T 1
            sigma = float(np.sum(s * s / D))
            v0 = F @ s  # unconstrained F s_X, (m_Y,)
            q = T.sum(axis=0)  # 1^T Q_Y restricted to the basis, (m_Y,)
            if constraint == "normalized":
                v = v0 + (n - q @ v0) / (q @ q) * q
            else:
                Tinv = np.linalg.inv(T)
                u = _simplex_ls(Tinv, v0, float(n))
                v = Tinv @ u
            # rows: F_k = (G_k + alpha_k s) / D with alpha_k = (v_k - v0_k) / sigma
            F = (G + np.multiply.outer((v - v0) / sigma, s)) / D
        self.basis_x_, self.basis_y_ = bx, by
        self.coef_ = F
        self.weights_map_ = T @ F
        self.Y_pivots_ = by.centers_.copy()  # Y[pivot rows], (m_Y, d_Y)
        self.Y_fit_ = Y
        self.n_samples_ = n
        self.s_x_ = bx.train_sums_
        return self

    def _pivot_train_rows(self) -> np.ndarray:
        """Training rows of the pivot y's, (m_Y,) (pivots index the pivot sample)."""
        piv = self.basis_y_.pivots_
        return piv if self.pivot_rows_ is None else self.pivot_rows_[piv]

    def pivot_weights(self, X_new) -> np.ndarray:
        """Weights over the pivot y's, ``B_Y[piv] V_Y F psi(x)``.

        Parameters
        ----------
        X_new : array-like of shape (n_new, d_X)

        Returns
        -------
        ndarray of shape (n_new, m_Y)
            Lazy for a Dask ``X_new``.
        """
        check_is_fitted(self, "coef_")
        if is_dask_array(X_new):  # each row chunk validated and mapped when computed
            return lazy_transform(self.basis_x_, X_new, "X_new") @ self.weights_map_.T
        X_new = sk_validate_data(
            self, X_new, reset=False, dtype=np.float64, accept_sparse=False, ensure_min_samples=0
        )
        psi = self.basis_x_.transform(X_new)  # (n_new, m_X)
        return psi @ self.weights_map_.T

    def conditional_weights(self, X_new) -> np.ndarray:
        """Weights ``Q_Y F psi(x)`` over all n training y's (zero off the pivots).

        They need not sum to one: the normalisation error is ``|sum_j w_j - 1|``.

        Parameters
        ----------
        X_new : array-like of shape (n_new, d_X)

        Returns
        -------
        ndarray of shape (n_new, n)
        """
        Wp = self.pivot_weights(X_new)
        cols, n = self._pivot_train_rows(), self.n_samples_

        def spread(Wb):  # (b, m_Y) -> (b, n)
            out = np.zeros((Wb.shape[0], n))
            out[:, cols] = Wb
            return out

        if is_dask_array(Wp):
            return map_row_chunks(Wp, spread, n)
        return spread(Wp)

    def normalization(self, X_new) -> np.ndarray:
        """``E[1 | x] = sum_j w_j(x)`` (1 for a normalised conditional).

        Parameters
        ----------
        X_new : array-like of shape (n_new, d_X)

        Returns
        -------
        ndarray of shape (n_new,)
        """
        return self.pivot_weights(X_new).sum(axis=1)

    def conditional_expectation(self, f, X_new) -> np.ndarray:
        """``E[f(Y) | x] ~ f^T Q_Y F psi(x)``, using f at the pivot y's only.

        Parameters
        ----------
        f : callable or array_like, shape (n, ...)
            Values at the n training y's (NumPy or Dask: only the m_Y pivot rows are
            read), or a vectorised callable (called on the pivots).
        X_new : array_like, shape (n_new, d_X)

        Returns
        -------
        ndarray, shape (n_new, ...)  (a lazy Dask array for a Dask ``X_new``)
        """
        return self._expectation(f, X_new, "f")

    def _expectation(self, f, X_new, name):
        """:meth:`conditional_expectation`, naming ``f`` as ``name`` in errors."""
        check_is_fitted(self, "coef_")
        if callable(f):
            F = np.asarray(f(self.Y_pivots_))
            if F.ndim == 0 or F.shape[0] != self.Y_pivots_.shape[0]:
                raise ValueError(
                    f"a callable {name} must return one value per sample (vectorised)."
                )
        else:
            F = f if is_dask_array(f) else np.asarray(f)
            if F.ndim == 0 or F.shape[0] != self.n_samples_:
                raise ValueError(
                    f"{name} must give one value per training sample: expected first "
                    f"dimension {self.n_samples_}, got shape {F.shape}."
                )
            F = np.asarray(F[self._pivot_train_rows()])  # (m_Y, ...): Dask computes m_Y rows
        if F.dtype != bool and (not np.issubdtype(F.dtype, np.number) or np.iscomplexobj(F)):
            raise TypeError(f"{name} values must be real numbers, got dtype {F.dtype}.")
        F = F.astype(np.float64)
        if not np.all(np.isfinite(F)):
            raise ValueError(f"{name} values contain NaN or infinity.")
        Wp = self.pivot_weights(X_new)  # (n_new, m_Y)
        out = Wp @ F.reshape(F.shape[0], -1)
        return out.reshape((Wp.shape[0], *F.shape[1:]))

    def conditional_probability(self, event, X_new) -> np.ndarray:
        """``P(Y in event | x)`` as the expectation of the indicator.

        Parameters
        ----------
        event : array-like of shape (n,), or callable
            Boolean or 0 / 1 values at the n training targets, or a vectorised callable
            returning them from the targets.
        X_new : array-like of shape (n_new, d_X)

        Returns
        -------
        ndarray of shape (n_new,)

        Raises
        ------
        ValueError
            ``event`` has values other than 0 / 1.
        """

        def one_per_sample(values):  # (n,) or (n, 1) 0 / 1 values -> (n,)
            ind = check_indicator(values)
            if ind.ndim == 2 and ind.shape[1] == 1:
                ind = ind[:, 0]
            if ind.ndim > 1:  # (a scalar is refused by _expectation, by length)
                raise ValueError(f"event must give one indicator per sample, got {ind.shape}.")
            return ind

        if callable(event):
            return self._expectation(lambda t: one_per_sample(event(t)), X_new, "event")
        return self._expectation(one_per_sample(event), X_new, "event")

    def validation_loss(self, X, Y) -> float:
        """Held-out CME loss ``mean_i ||k_Y(y_i, .) - mu(x_i)||^2_{H_Y}`` (O(n' m^2));
        Dask ``X`` / ``Y`` are reduced over their row chunks.

        Parameters
        ----------
        X : array-like of shape (n', d_X)
        Y : array-like of shape (n', d_Y) or (n',)

        Returns
        -------
        float
        """
        check_is_fitted(self, "coef_")
        by = self.basis_y_
        Kpp = by.kernel_(by.centers_, by.centers_)  # (m_Y, m_Y)

        def total(Xb, Yb):  # (n', sum_i ||k_Y(y_i, .) - mu(x_i)||^2) of validated rows
            Wp = self.basis_x_.transform(Xb) @ self.weights_map_.T  # (n', m_Y)
            Ky = by.kernel_pivots(Yb)  # (n', m_Y)
            diag = by.kernel_.diag(Yb)
            loss = diag - 2 * np.einsum("ij,ij->i", Wp, Ky) + np.einsum("ij,ij->i", Wp @ Kpp, Wp)
            return Xb.shape[0], float(loss.sum())

        d_y = self.Y_fit_.shape[1]
        if is_dask_array(X) or is_dask_array(Y):  # one pass over the held-out chunks
            X = as_dask_rows(X, "X", n_features=self.n_features_in_)
            Y = as_dask_rows(Y, "Y", n_features=d_y, rows_like=X)
            n, loss = reduce_rows(total, [X, Y], ["X", "Y"])
            if n < 1:
                raise ValueError("validation_loss needs at least one sample.")
        else:
            X, Y = check_xy(X, Y, estimator=self, reset=False, min_samples=1, n_features_y=d_y)
            n, loss = total(X, Y)
        return loss / n

    def score(self, X, Y=None, y=None) -> float:
        """``-validation_loss(X, Y)`` (higher is better), for scikit-learn model selection.

        Parameters
        ----------
        X : array-like of shape (n', d_X)
        Y : array-like of shape (n', d_Y) or (n',)
        y : array-like of shape (n', d_Y) or (n',), optional
            An alias of ``Y`` (scikit-learn passes it by that name).

        Returns
        -------
        float
        """
        return -self.validation_loss(X, Y if Y is not None else y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.target_tags.required = True
        tags.target_tags.multi_output = True
        return tags
