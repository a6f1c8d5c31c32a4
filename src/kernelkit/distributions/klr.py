"""Low-rank kernel logistic regression (KLR), App. D of the JDL paper."""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from .._backend import caller_stacklevel, chunks, validate_positive_float, validate_positive_int
from .._backend.chunks import as_dask_labels, dask_classes, known_row_chunks
from .._backend.parallel import SingleThreadedBlas, check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE, int_range
from .._backend.sklearn_validation import check_label_list, sorted_class_labels
from .._backend.sklearn_validation import validate_data as sk_validate_data
from ._basis import KERNEL_CONSTRAINT, TOLERANCE_CONSTRAINTS, BasisCache, LowRankBasis, fit_basis
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
from .model_selection import clipped_log_loss

__all__ = ["KernelLogisticRegression"]


class KernelLogisticRegression(ClassifierMixin, BaseEstimator):
    """Binary kernel logistic regression on the low-rank basis (App. D).

    ``cl(x) = sigmoid(psi(x)^T c)`` with ``c`` minimising
    ``-sum_i [t_i log cl(x_i) + (1 - t_i) log(1 - cl(x_i))] + reg ||c||^2`` (no intercept,
    as in the paper; ``||c||`` is the RKHS norm by (17)/(18)). Solved by L-BFGS on the
    ``m`` basis coefficients (library choice), in log space (``logaddexp``).

    Parameters
    ----------
    kernel : str or callable, default="gaussian"
    lengthscale : float, default=1.0
    reg : float, default=1e-3
    tol, rel_tol, max_rank : float, float, int, optional
        Pivoted Cholesky tolerances (see :class:`LowRankBasis`; ``rel_tol`` defaults to
        1e-3). The factorisation stops at the larger of ``tol`` and ``rel_tol trace(K)``:
        pass ``rel_tol=None`` for a ``tol`` below it to take effect.
    max_iter : int, default=500
        L-BFGS iterations at most; a fit that reaches it raises a ``ConvergenceWarning``.
    basis_cache : BasisCache, optional
        Share bases between fits (see :class:`~kernelkit.distributions.BasisCache`).
        Used by exact fits only (NumPy input without ``pivot_sample``).
    pivot_sample : int, optional
        Run Algorithm 1 on this many rows drawn uniformly without replacement (as
        :class:`~kernelkit.distributions.JointDistribution` does); the basis statistics and
        every objective / gradient evaluation then sum over **all** rows in blocks,
        forming the factor rows ``k_piv(x) B[piv]`` of each block (no stored factor).
        ``None``: all rows (exact Algorithm 1) for NumPy input, 50 000 rows for Dask input.
    random_state : int, Generator or None, default=None
        Seed of the pivot sample (used only when it is smaller than n).
    n_jobs : int, optional
        Threads of the blocked passes over the rows (the row blocks of Algorithm 1, each
        objective and gradient evaluation of a ``pivot_sample`` fit, the slabs of a
        prediction), in scikit-learn's convention (None: kernelkit's default, the CPUs
        available unless limited by ``KERNELKIT_NUM_THREADS`` or a BLAS thread limit;
        ``-1``: all CPUs; 0 is invalid). Dask input runs on the Dask scheduler instead.
        The fitted model and its predictions do not depend on it.

    Attributes
    ----------
    classes_ : ndarray, shape (2,)
    coef_ : ndarray, shape (m,)
    basis_ : LowRankBasis
    pivot_rows_ : ndarray of int or None
        Rows of the pivot sample (None: all rows)

    Notes
    -----
    Scale-out: ``fit`` also takes a ``dask.array.Array`` ``X`` (``y`` Dask or NumPy, labels
    of any dtype). Each L-BFGS evaluation of the objective and its gradient
    ``L^T (sigmoid(L u) - t) + 2 reg u`` is one pass over the row chunks on the active
    Dask scheduler (threads, or a ``distributed.Client``), tree-reduced (user guide:
    "Scale-out with Dask"); persist ``X`` first on a cluster. With the same
    ``pivot_sample`` and ``random_state``, NumPy and Dask input give the same objective
    to round-off and the same fit to the optimizer's tolerance. On a Dask ``X``,
    ``decision_function``, ``predict_proba`` and ``predict`` are lazy Dask arrays and
    ``score`` reduces over the chunks.

    Inputs of any real dtype are converted to float64; outputs are float64.
    """

    _parameter_constraints: ClassVar[dict] = {
        "kernel": KERNEL_CONSTRAINT,
        "lengthscale": POSITIVE,
        "reg": POSITIVE,
        **TOLERANCE_CONSTRAINTS,
        "max_iter": int_range(1),
        "basis_cache": [None, BasisCache],
        "pivot_sample": [None, *int_range(2)],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        kernel="gaussian",
        lengthscale: float = 1.0,
        reg: float = 1e-3,
        tol=None,
        rel_tol=1e-3,
        max_rank=None,
        max_iter: int = 500,
        basis_cache=None,
        pivot_sample=None,
        random_state=None,
        n_jobs=None,
    ):
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.reg = reg
        self.tol = tol
        self.rel_tol = rel_tol
        self.max_rank = max_rank
        self.max_iter = max_iter
        self.basis_cache = basis_cache
        self.pivot_sample = pivot_sample
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X, y):
        """Fit on binary labelled samples.

        ``X`` (and ``y``) may be ``dask.array.Array`` (see Notes).

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : array-like of shape (n,)
            Two distinct labels.

        Returns
        -------
        KernelLogisticRegression
            ``self``.
        """
        self._validate_params()
        reg = validate_positive_float(self.reg, "reg")
        max_iter = validate_positive_int(self.max_iter, "max_iter")
        pivot_sample = check_pivot_sample(self.pivot_sample)
        n_jobs = check_n_jobs(self.n_jobs)
        name = type(self).__name__
        dask = is_dask_array(X) or is_dask_array(y)
        if dask:
            X = as_dask_rows(X, "X", owner=name, vector="error", known_rows=False)
            X, y = known_row_chunks(X, y)  # unknown sizes: one pass for both
            y = as_dask_labels(y, X, owner=name)
            classes = dask_classes(y)  # sorted, checked as classification targets
        else:
            check_label_list(y, "y")
            X, y = sk_validate_data(
                self, X, y, dtype=np.float64, accept_sparse=False, ensure_min_samples=2
            )
            classes = sorted_class_labels(y)
        if classes.shape[0] != 2:
            raise ValueError(
                "Only binary classification is supported (KernelLogisticRegression "
                f"is binary): y has {classes.shape[0]} classes."
            )
        self.classes_ = classes
        positive = classes[1]
        if dask:
            t = y.map_blocks(lambda b: (b == positive).astype(np.float64), dtype=np.float64)
        else:
            t = (y == positive).astype(np.float64)
        common = {
            "tol": self.tol,
            "rel_tol": self.rel_tol,
            "max_rank": self.max_rank,
            "n_jobs": n_jobs,
        }
        if dask or (pivot_sample is not None and pivot_sample < X.shape[0]):
            warn_unused_basis_cache(self.basis_cache)
            basis = LowRankBasis(self.kernel, self.lengthscale, **common)
            (X,), self.pivot_rows_, _ = fit_sampled_bases(
                [basis],
                [X],
                ["X"],
                pivot_sample or DEFAULT_PIVOT_SAMPLE,
                self.random_state,
                dask=dask,
                n_jobs=n_jobs,
            )
            if dask:
                self.n_features_in_ = X.shape[1]

            def data_terms(u):  # one pass: factor rows L_b = k_piv(X_b) B[piv] per block
                def fn(Xb, tb):
                    L = basis.pivot_factor(Xb)  # (b, m)
                    a, tb = L @ u, tb[:, 0]  # (b,) = L_b u, targets (b,)
                    return np.sum(np.logaddexp(0.0, a) - tb * a), L.T @ (expit(a) - tb)

                return reduce_rows(fn, [X, t], ["X", "y"], n_jobs=n_jobs)

        else:
            basis = fit_basis(
                self.basis_cache, X, kernel=self.kernel, lengthscale=self.lengthscale, **common
            )
            self.pivot_rows_ = None
            Lt = basis.factor_t_  # (m, n)

            def data_terms(u):
                a = Lt.T @ u  # (n,) = L u
                return np.sum(np.logaddexp(0.0, a) - t * a), Lt @ (expit(a) - t)

        self.basis_ = basis

        # design A = L V: optimise over u = V c with design L (||u|| = ||c||, V orthogonal)
        def fun(u):
            val, grad = data_terms(u)
            return float(val) + reg * u @ u, grad + 2 * reg * u

        with SingleThreadedBlas():  # m-sized products: BLAS threads only synchronise
            res = minimize(
                fun,
                np.zeros(basis.n_components_),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": max_iter, "gtol": 1e-10, "ftol": 1e-14},
            )
        self.coef_ = basis.rotation_.T @ res.x  # c = V^T u
        self.n_iter_ = int(res.nit)
        if res.status == 1:  # L-BFGS-B stopped at its iteration (or evaluation) limit
            warnings.warn(
                f"{name} did not converge in max_iter={max_iter} L-BFGS iterations "
                f"(largest gradient entry {float(np.max(np.abs(res.jac))):.2e}); increase "
                "max_iter, or reg for (nearly) separable classes.",
                ConvergenceWarning,
                stacklevel=caller_stacklevel(),
            )
        return self

    def decision_function(self, X) -> np.ndarray:
        """``psi(x)^T c``, the log-odds of class ``classes_[1]``.

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n,)
            Lazy for a Dask ``X``.
        """
        check_is_fitted(self, "coef_")
        if is_dask_array(X):  # each row chunk validated and mapped when computed
            return lazy_transform(self.basis_, X, "X") @ self.coef_
        X = sk_validate_data(self, X, reset=False, dtype=np.float64, accept_sparse=False)
        # a slab of rows at a time: about 4 MB of basis values, not all (n, m) of them
        return chunks.predict_in_slabs(
            lambda Xs: self.basis_.transform(Xs) @ self.coef_,
            X,
            self.basis_.n_components_,
            n_jobs=check_n_jobs(self.n_jobs),
        )

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities.

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n, 2)
            Columns in ``classes_`` order; lazy for a Dask ``X``.
        """

        def proba(d):  # (b,) -> (b, 2); expit(-d), not 1 - expit(d): no cancellation
            return np.stack([expit(-d), expit(d)], axis=1)

        d = self.decision_function(X)
        if is_dask_array(d):
            return d.map_blocks(
                proba,
                new_axis=1,
                chunks=(d.chunks[0], (2,)),
                dtype=np.float64,
                meta=np.empty((0, 0)),
            )
        return proba(d)

    def predict(self, X) -> np.ndarray:
        """Labels: class 1 where ``cl(x) >= 1/2``.

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n,)
            Entries of ``classes_``; lazy for a Dask ``X``.
        """
        check_is_fitted(self, "coef_")
        classes = self.classes_

        def label(d):
            return classes[(d >= 0).astype(int)]

        d = self.decision_function(X)
        if is_dask_array(d):
            return d.map_blocks(label, dtype=classes.dtype, meta=np.empty(0, classes.dtype))
        return label(d)

    def score(self, X, y) -> float:
        """Negative clipped logistic loss (32) of ``predict_proba`` (higher is better).

        Unlike scikit-learn's default accuracy: the paper validates with (32). Dask
        ``X`` / ``y``: the mean is reduced over the row chunks.

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : array-like of shape (n,)

        Returns
        -------
        float
        """
        check_is_fitted(self, "coef_")
        if not (is_dask_array(X) or is_dask_array(y)):
            y = np.asarray(y)
            self._check_labels(y)
            return -clipped_log_loss(y == self.classes_[1], self.predict_proba(X)[:, 1])
        X = as_dask_rows(X, "X", n_features=self.n_features_in_, vector="error")
        y = as_dask_labels(y, X)

        def total(_, Xb, yb):  # (rows, rows x the chunk's loss (32))
            if len(Xb) == 0:
                return 0, 0.0
            p = self.predict_proba(np.asarray(Xb))[:, 1]
            yb = self._check_labels(np.asarray(yb))
            return len(Xb), len(Xb) * clipped_log_loss(yb == self.classes_[1], p)

        n, loss = chunks.reduce_rows(total, [X, y], lambda u, v: (u[0] + v[0], u[1] + v[1]))
        return -loss / n

    def _check_labels(self, y: np.ndarray) -> np.ndarray:
        """``y`` unchanged if every label is one of ``classes_``; else a ``ValueError``
        (a label unseen at fit would silently count as the negative class in (32))."""
        unseen = np.setdiff1d(np.unique(y), self.classes_)
        if unseen.size:
            raise ValueError(
                f"y contains labels not seen at fit: {unseen[:5].tolist()}; the classes are "
                f"{self.classes_.tolist()}."
            )
        return y

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.classifier_tags.multi_class = False
        return tags
