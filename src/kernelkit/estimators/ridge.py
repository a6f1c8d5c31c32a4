"""Kernel ridge regression with random features (any symmetric kernelkit feature map)."""

from __future__ import annotations

import math
import numbers
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend.chunks import is_dask_array, map_row_chunks
from .._backend.fit_state import keep_model_on_error
from .._backend.parallel import check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE
from .._backend.sklearn_validation import validate_data
from ._chunked import (
    FeatureStats,
    KnownChunksScore,
    blocked_statistics,
    chunk_statistics,
    fit_feature_map,
    noise_rows,
    predict_in_slabs,
    prediction_rows,
    training_rows,
    use_blocked_statistics,
    weights_in_solver_errors,
)
from ._feature_map_param import map_features
from ._posterior import SOLVERS, FeaturePosterior, choose_solver

__all__ = ["RandomFeatureRidge", "check_positive_float"]


def check_positive_float(value, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive float, got {value!r}.")
    value = float(value)
    ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and ok):
        raise ValueError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'} "
            f"and finite, got {value}."
        )
    return value


class RandomFeatureRidge(KnownChunksScore, RegressorMixin, BaseEstimator):
    """Ridge regression on random features: kernel ridge regression with ``k_hat``.

    ``coef = argmin_w |Y - Phi w|^2 + alpha |w|^2 = (Phi^H Phi + alpha I)^-1 Phi^H Y`` and
    ``predict(X) = Re(phi(X) coef) + intercept`` (weighted least squares with
    ``sample_weight``: :meth:`fit`), i.e. the posterior mean of the random-
    feature GP (App. D, eq. 88 of Wacker, Kanagawa & Filippone, "Improved Random Features
    for Dot Product Kernels") with noise variance ``alpha``. Complex feature maps are
    handled as in that App. D (real part of the complex predictor). Solved by Cholesky in the
    primal (``D x D``, O(N D^2 + D^3)) or dual (``N x N``, O(N^2 D + N^3)) form, whichever
    is smaller (``solver="auto"``).

    Parameters
    ----------
    feature_map : kernelkit feature map, optional
        Any *symmetric* map (:class:`~kernelkit.features.RandomFourierFeatures`, the
        dot-product sketches, the softmax family, ...); cloned and fitted on ``X`` at
        :meth:`fit`. Default: ``RandomFourierFeatures(n_features=256, lengthscale=1.0)``.
        Asymmetric maps (``symmetric = False``) are rejected.
    alpha : float, default=1.0
        Ridge penalty (> 0).
    fit_intercept : bool, default=True
        Centre ``Y`` and the features (complex mean for complex features) before solving.
    solver : {"auto", "primal", "dual"}, default="auto"
    random_state : None, int or numpy.random.Generator
        Seed of the default feature map, or of a given map whose ``random_state`` is None.
    n_jobs : int, optional
        Threads of the fit, in scikit-learn's convention (None: kernelkit's default, the
        CPUs available unless limited by ``KERNELKIT_NUM_THREADS`` or a BLAS thread limit;
        ``-1``: all CPUs; ``-2``: all but one; 0 is invalid). Used by the row-block
        reduction of large in-memory fits and, when its own ``n_jobs`` is None, by the
        (cloned) feature map. The fitted model does not depend on it beyond round-off.

    Notes
    -----
    Out of core: ``fit`` also takes ``X`` as a ``dask.array.Array`` (with ``y`` a Dask or
    NumPy array) or as an iterable of ``(X_block, y_block)`` NumPy pairs (then
    ``y=None``: a list, tuple or other sequence of pairs, or a generator). Each chunk of
    rows is mapped to features and reduced to ``Phi^H Phi``, ``Phi^H Y`` and sums
    (:mod:`kernelkit.estimators._chunked`), in parallel on the active Dask scheduler or
    ``distributed.Client``; only the ``D x D`` primal system is solved. The feature map
    is fitted as in memory when it reads only the dimension of its data, or its FAVOR#
    moments (``fit_reads``) and ``X`` is a Dask array or a sequence of blocks (one extra
    pass of chunk sums); else on the first non-empty chunk or block (a generator or
    iterator is read once). ``predict`` on a Dask array is lazy. See the user guide page
    "Scale-out with Dask".

    Attributes
    ----------
    feature_map_ : FeatureMap
        The fitted feature map.
    coef_ : ndarray, shape (D,) or (D, T), float64 or complex128
    intercept_ : float or ndarray of shape (T,)
    n_features_in_ : int
    n_samples_seen_ : int
        Rows the model was fitted on (all rows given, whatever their ``sample_weight``).
    """

    _parameter_constraints: ClassVar[dict] = {
        "feature_map": [None, HasMethods(["fit", "transform"])],
        "alpha": POSITIVE,
        "fit_intercept": ["boolean"],
        "solver": [StrOptions(set(SOLVERS))],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        feature_map=None,
        alpha: float = 1.0,
        fit_intercept: bool = True,
        solver: str = "auto",
        random_state=None,
        n_jobs=None,
    ):
        self.feature_map = feature_map
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.random_state = random_state
        self.n_jobs = n_jobs

    @keep_model_on_error
    def fit(self, X, y, sample_weight=None):
        """Fit the feature map on ``X`` and solve the (weighted) ridge problem.

        With weights ``w_i`` (``sample_weight``; 1 when None) and ``phi_i = phi(x_i)``,

        ``coef, intercept = argmin_{b, c} sum_i w_i |y_i - phi_i^T b - c|^2 + alpha |b|^2``

        as scikit-learn's ``Ridge``: ``alpha`` is not scaled by the weights, and with
        ``fit_intercept`` the features and targets are centred at their weighted means
        (``c = ybar_w - phibar_w^T b``, ``intercept_ = Re c``). For complex features ``b``
        and ``c`` are complex and the square is the modulus of the complex residual, its
        imaginary part included (the complex GP's posterior mean, App. D), not the square
        of its real part, which would be ridge on ``[Re Phi, -Im Phi]``, another model;
        :meth:`predict` takes the real part. An integer weight ``k`` is the row repeated
        ``k`` times; a zero weight drops the row. A feature map that reads the FAVOR#
        moments (GERF, SADERF, ADERF, SDERF) is fitted on the weighted moments, so this
        holds for it too; other maps are fitted on ``X`` as without weights.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Or a ``dask.array.Array`` / an iterable of ``(X_block, y_block)`` pairs
            (``y=None``), fitted chunk by chunk (see "Out of core" above).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,) or float, optional
            Non-negative, finite, not all zero (a ``ValueError`` naming ``sample_weight``
            otherwise); NumPy, a torch tensor, or with a Dask ``X`` a Dask array or NumPy
            vector (rechunked to ``X``'s rows, checked chunk by chunk). Not supported with
            an iterable of blocks (``ValueError``).

        Returns
        -------
        self
        """
        self._validate_params()
        alpha = check_positive_float(self.alpha, "alpha")
        choose_solver(self.solver, 1, 1)  # validates the name
        n_jobs = check_n_jobs(self.n_jobs)
        # 1. NumPy arrays and weights, or chunks (Dask / iterable)
        rows = training_rows(self, X, y, sample_weight)
        fm = self.feature_map_ = fit_feature_map(self, rows, n_jobs)  # 2. the map
        # 3.-4. features or their statistics, and the solve: the fit's only branch
        with weights_in_solver_errors(type(self).__name__, rows.w, "alpha", ("alpha", self.alpha)):
            if rows.chunked:  # statistics reduced over the chunks
                coef, intercept, n = self._solve_statistics(chunk_statistics(fm, rows), alpha)
            elif use_blocked_statistics(fm, rows.X, self.solver):  # primal, large n x D
                stats = blocked_statistics(fm, rows.X, rows.Y, n_jobs=n_jobs, w=rows.w)
                coef, intercept, n = self._solve_statistics(stats, alpha)
            else:  # all features (n, D), primal or dual
                Phi = map_features(fm, rows.X)
                coef, intercept, n = self._solve_features(Phi, rows.Y, alpha, rows.w)
        self._single = rows.y_ndim == 1
        self.coef_ = coef[:, 0] if self._single else coef  # (D,) or (D, T)
        self.intercept_ = float(intercept[0]) if self._single else intercept
        self.n_samples_seen_ = n
        return self

    def _solve_features(self, Phi, Y, alpha: float, w=None):
        """``(coef (D, T), intercept (T,), n)`` from features ``Phi`` (n, D), ``Y`` (n, T)
        and weights ``w`` (n,) or None: Cholesky in the primal or dual form, after
        centring both at their weighted means. The weighted problem is the GP posterior
        mean with noise ``alpha / w_i`` (``sum_i w_i |r_i|^2 + alpha |b|^2`` is ``alpha``
        times ``sum_i |r_i|^2 / (alpha / w_i) + |b|^2``); rows of zero weight drop out."""
        n = len(Y)
        if self.fit_intercept:
            phi_mean, y_mean = np.average(Phi, 0, w), np.average(Y, 0, w)  # (D,), (T,)
            Phi, Y = Phi - phi_mean, Y - y_mean
        else:
            phi_mean, y_mean = None, np.zeros(Y.shape[1])
        noise = np.full(n, alpha)
        if w is not None:
            keep = noise_rows(w, alpha)  # (zero weights and those of overflowing noise)
            Phi, Y, noise = Phi[keep], Y[keep], alpha / w[keep]
        coef = FeaturePosterior.fit(Phi, Y, noise, self.solver).coef
        intercept = y_mean if phi_mean is None else y_mean - np.real(phi_mean @ coef)
        return coef, intercept, n

    def _solve_statistics(self, stats: FeatureStats, alpha: float):
        """``(coef (D, T), intercept (T,), n)`` from the statistics: the primal system
        ``(G_c / alpha + I) coef = R_c / alpha`` of the centred (weighted) sums."""
        y_mean = stats.y_mean if self.fit_intercept else np.zeros_like(stats.s_y)
        G, R = stats.centred(self.fit_intercept, np.ones_like(y_mean), self.fit_intercept)
        G = G / alpha
        G[np.diag_indices_from(G)] += 1.0
        coef = FeaturePosterior.from_primal(G, R / alpha).coef  # (D, T)
        intercept = y_mean.copy()
        if self.fit_intercept:
            intercept = intercept - np.real((stats.s_phi / stats.w_sum) @ coef)
        return coef, intercept, stats.n

    def predict(self, X):
        """``Re(phi(X) coef_) + intercept_``.

        Parameters
        ----------
        X : array-like of shape (n, n_features_in_)

        Returns
        -------
        ndarray of shape (n,) or (n, T)
            (n, T) for a ``y`` of ``T`` targets at fit; lazy on Dask arrays.
        """
        check_is_fitted(self)
        if is_dask_array(X):  # checked now (rank, dtype, width), mapped lazily
            X = prediction_rows(self, X)
            return map_row_chunks(X, self.predict, None if self._single else len(self.intercept_))
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False, accept_sparse=False)
        return predict_in_slabs(self._predict_rows, X, self.feature_map_, self.n_jobs)

    def _predict_rows(self, X):
        Phi = map_features(self.feature_map_, X)
        coef = self.coef_
        if np.iscomplexobj(Phi):
            out = Phi.real @ np.real(coef) - Phi.imag @ np.imag(coef)
        else:
            out = Phi @ np.real(coef)
        return out + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.target_tags.multi_output = True
        return tags
