"""Kernel ridge regression with random features (any symmetric kernelkit feature map)."""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ._chunked import (
    fit_chunked_statistics,
    in_memory_stats,
    is_chunked,
    is_dask_array,
    lazy_predict,
    use_streaming,
)
from ._feature_map_param import fitted_feature_map, map_features
from ._posterior import FeaturePosterior

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


class RandomFeatureRidge(RegressorMixin, BaseEstimator):
    """Ridge regression on random features: kernel ridge regression with ``k_hat``.

    ``coef = argmin_w |Y - Phi w|^2 + alpha |w|^2 = (Phi^H Phi + alpha I)^-1 Phi^H Y`` and
    ``predict(X) = Re(phi(X) coef) + intercept``, i.e. the posterior mean of the random-
    feature GP (App. D, eq. 88) with noise variance ``alpha``. Complex feature maps are
    handled as in App. D (real part of the complex predictor). Solved by Cholesky in the
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

    Out of core
    -----------
    ``fit`` also takes ``X`` as a ``dask.array.Array`` (with ``y`` a Dask or NumPy array)
    or as an iterable of ``(X_block, y_block)`` NumPy pairs (then ``y=None``). Each chunk
    of rows is mapped to features and reduced to ``Phi^H Phi``, ``Phi^H Y`` and sums
    (:mod:`kernelkit.estimators._chunked`), in parallel on the active Dask scheduler or
    ``distributed.Client``; only the ``D x D`` primal system is solved. Data-dependent
    feature maps are fitted on the first chunk. ``predict`` on a Dask array is lazy.

    Attributes
    ----------
    feature_map_ : the fitted feature map
    coef_ : ndarray, shape (D,) or (D, T), float64 or complex128
    intercept_ : float or ndarray of shape (T,)
    n_features_in_ : int
    """

    def __init__(
        self,
        feature_map=None,
        alpha: float = 1.0,
        fit_intercept: bool = True,
        solver: str = "auto",
        random_state=None,
    ):
        self.feature_map = feature_map
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the feature map on ``X`` and solve the ridge problem.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self
        """
        alpha = check_positive_float(self.alpha, "alpha")
        if is_chunked(X):
            return self._fit_chunked(X, y, alpha)
        X, y = validate_data(
            self,
            X,
            y,
            dtype=[np.float64, np.float32],
            multi_output=True,
            y_numeric=True,
            accept_sparse=False,
        )
        y = np.asarray(y, dtype=np.float64)
        Y = y.reshape(len(y), -1)
        self.feature_map_ = fitted_feature_map(
            self.feature_map, self.random_state, X, type(self).__name__
        )
        if use_streaming(self.feature_map_, X, self.solver):  # large n x D, primal
            stats = in_memory_stats(self.feature_map_, X, Y)
            return self._fit_from_stats(stats, y.ndim, alpha)
        Phi = map_features(self.feature_map_, X)
        if self.fit_intercept:
            phi_mean = Phi.mean(axis=0)
            y_mean = Y.mean(axis=0)
            Phi = Phi - phi_mean
            Yc = Y - y_mean
        else:
            phi_mean, y_mean, Yc = None, np.zeros(Y.shape[1]), Y
        post = FeaturePosterior.fit(Phi, Yc, np.full(len(Y), alpha), self.solver)
        coef = post.coef  # (D, T)
        intercept = y_mean.copy()
        if phi_mean is not None:
            intercept = intercept - np.real(phi_mean @ coef)
        self._single = y.ndim == 1
        self.coef_ = coef[:, 0] if self._single else coef
        self.intercept_ = float(intercept[0]) if self._single else intercept
        return self

    def _fit_chunked(self, X, y, alpha: float):
        stats, y_ndim = fit_chunked_statistics(self, X, y, 1.0)
        return self._fit_from_stats(stats, y_ndim, alpha)

    def _fit_from_stats(self, stats, y_ndim: int, alpha: float):
        """Primal solve from the reduced statistics (:class:`FeatureStats`)."""
        y_mean = stats.s_y / stats.n if self.fit_intercept else np.zeros_like(stats.s_y)
        G, R = stats.centred(y_mean, np.ones_like(y_mean), self.fit_intercept)
        G = G / alpha
        G[np.diag_indices_from(G)] += 1.0
        coef = FeaturePosterior.from_primal(G, R / alpha).coef  # (D, T)
        intercept = y_mean.copy()
        if self.fit_intercept:
            intercept = intercept - np.real((stats.s_phi / stats.n) @ coef)
        self._single = y_ndim == 1
        self.coef_ = coef[:, 0] if self._single else coef
        self.intercept_ = float(intercept[0]) if self._single else intercept
        self.n_samples_seen_ = stats.n
        return self

    def predict(self, X):
        """``Re(phi(X) coef_) + intercept_``, shape (n,) or (n, T); lazy on Dask arrays."""
        check_is_fitted(self)
        if is_dask_array(X):
            return lazy_predict(X, self.predict, None if self._single else len(self.intercept_))
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False, accept_sparse=False)
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
