"""Low-rank kernel logistic regression (KLR), App. D of the JDL paper."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._backend import validate_positive_float, validate_positive_int
from .._backend.parallel import SingleThreadedBlas
from .._backend.params import POSITIVE, int_range
from .._backend.sklearn_validation import validate_data as sk_validate_data
from ._basis import KERNEL_CONSTRAINT, TOLERANCE_CONSTRAINTS, BasisCache, fit_basis
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
    tol, rel_tol, max_rank : pivoted Cholesky tolerances (see ``LowRankBasis``).
    max_iter : int, default=500
    basis_cache : BasisCache, optional
        Share bases between fits (see :class:`~kernelkit.distributions.BasisCache`).

    Attributes
    ----------
    classes_ : ndarray, shape (2,)
    coef_ : ndarray, shape (m,)
    basis_ : LowRankBasis

    Notes
    -----
    Inputs of any real dtype are converted to float64; outputs are float64.
    """

    _parameter_constraints: ClassVar[dict] = {
        "kernel": KERNEL_CONSTRAINT,
        "lengthscale": POSITIVE,
        "reg": POSITIVE,
        **TOLERANCE_CONSTRAINTS,
        "max_iter": int_range(1),
        "basis_cache": [None, BasisCache],
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
    ):
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.reg = reg
        self.tol = tol
        self.rel_tol = rel_tol
        self.max_rank = max_rank
        self.max_iter = max_iter
        self.basis_cache = basis_cache

    def fit(self, X, y):
        """Fit on ``X`` (n, d) and binary labels ``y`` (n,). Returns self."""
        self._validate_params()
        reg = validate_positive_float(self.reg, "reg")
        max_iter = validate_positive_int(self.max_iter, "max_iter")
        X, y = sk_validate_data(
            self, X, y, dtype=np.float64, accept_sparse=False, ensure_min_samples=2
        )
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.shape[0] != 2:
            raise ValueError(
                "Only binary classification is supported (KernelLogisticRegression "
                f"is binary): y has {self.classes_.shape[0]} classes."
            )
        t = (y == self.classes_[1]).astype(np.float64)
        self.basis_ = fit_basis(
            self.basis_cache,
            X,
            kernel=self.kernel,
            lengthscale=self.lengthscale,
            tol=self.tol,
            rel_tol=self.rel_tol,
            max_rank=self.max_rank,
        )
        # design A = L V: optimise over u = V c with design L (||u|| = ||c||, V orthogonal)
        Lt = self.basis_.factor_t_  # (m, n)

        def fun(u):
            a = Lt.T @ u  # (n,) = A c
            val = np.sum(np.logaddexp(0.0, a) - t * a) + reg * u @ u
            grad = Lt @ (expit(a) - t) + 2 * reg * u
            return val, grad

        with SingleThreadedBlas():  # m-sized products: BLAS threads only synchronise
            res = minimize(
                fun,
                np.zeros(Lt.shape[0]),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": max_iter, "gtol": 1e-10, "ftol": 1e-14},
            )
        self.coef_ = self.basis_.rotation_.T @ res.x  # c = V^T u
        self.n_iter_ = int(res.nit)
        return self

    def decision_function(self, X) -> np.ndarray:
        """``psi(x)^T c``, shape (n,)."""
        check_is_fitted(self, "coef_")
        X = sk_validate_data(self, X, reset=False, dtype=np.float64, accept_sparse=False)
        return self.basis_.transform(X) @ self.coef_

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n, 2) (columns in ``classes_`` order)."""
        p = expit(self.decision_function(X))
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X) -> np.ndarray:
        """Class 1 where ``cl(x) >= 1/2``."""
        check_is_fitted(self, "coef_")
        return self.classes_[(self.decision_function(X) >= 0).astype(int)]

    def score(self, X, y) -> float:
        """Negative clipped logistic loss (32) of ``predict_proba`` (higher is better).

        Unlike scikit-learn's default accuracy: the paper validates with (32).
        """
        y = np.asarray(y)
        return -clipped_log_loss(y == self.classes_[1], self.predict_proba(X)[:, 1])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.classifier_tags.multi_class = False
        return tags
