"""Gaussian-process regression and classification with random features (App. D).

Wacker, Kanagawa & Filippone, "Improved Random Features for Dot Product Kernels",
App. D (equation numbers refer to it; user guide: "Estimators"; derivations and the
choices the paper leaves open: ``docs/derivations/dot_product.md``):

* :class:`RandomFeatureGPRegressor` – the approximate GP posterior of eq. 84-90 with any
  symmetric (real or complex) feature map, prediction ``GP(Re mu, Re k_N)`` (eq. 86-87),
  in O(N D^2 + D^3) (or the N x N dual form when ``D > N``).
* :class:`RandomFeatureGPClassifier` – GP classification as heteroscedastic multi-output
  regression (Milios et al. 2018; App. D.4): one-hot labels ``y``,
  ``sigma^2 = log(1/(y + alpha) + 1)``, ``y_tilde = log(y + alpha) - sigma^2 / 2``, one GP
  per class, class probabilities from Monte Carlo samples of the latent GPs pushed
  through a softmax.
"""

from __future__ import annotations

import itertools
import math
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import check_random_state, validate_positive_int
from .._backend.chunks import is_block_sequence, is_chunked, is_dask_array, map_row_chunks
from .._backend.fit_state import keep_model_on_error
from .._backend.parallel import block_map, check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE, int_range
from .._backend.sklearn_validation import validate_data
from ._chunked import (
    FeatureStats,
    KnownChunksScore,
    blocked_statistics,
    check_pairs_without_y,
    check_sample_weight,
    chunk_statistics,
    fit_feature_map,
    noise_rows,
    predict_in_slabs,
    prediction_rows,
    scaled_sq_sums,
    training_rows,
    use_blocked_statistics,
    weights_in_solver_errors,
)
from ._chunked_classes import blocked_class_statistics, class_statistics, class_training_rows
from ._feature_map_param import fitted_feature_map, map_features
from ._labels import check_raw_labels, encode_labels, log_proba
from ._posterior import SOLVERS, FeaturePosterior, choose_solver, gram_dual, gram_primal
from .ridge import check_positive_float

__all__ = ["RandomFeatureGPClassifier", "RandomFeatureGPRegressor", "milios_transform"]

#: the classifier's noise of row ``i`` in class ``c``, as its sample-weight errors name it
_MILIOS_NOISE = "the Milios noise sigma^2_{c,i}"


def milios_transform(y, alpha: float):
    """Label transformation of Milios et al. (2018) for Dirichlet-based GP classification.

    ``sigma^2 = log(1 / (y + alpha) + 1)`` and ``y_tilde = log(y + alpha) - sigma^2 / 2``
    (App. D.4). For ``alpha = 0.01``: ``y = 1`` gives ``(y_tilde, sigma^2) = (-0.3341,
    0.6882)``, ``y = 0`` gives ``(-6.9127, 4.6151)``.

    Parameters
    ----------
    y : array
        One-hot labels (0 / 1; any values in [0, 1] are accepted).
    alpha : float > 0

    Returns
    -------
    y_tilde, sigma2 : arrays shaped like ``y``
        ``sigma2`` is formed as ``log1p(1 / (y + alpha))``: positive for any finite
        ``alpha`` (``log(1 / (y + alpha) + 1)`` rounds to 0 from ``alpha ~ 1e16``).
    """
    y = np.asarray(y, dtype=np.float64)
    s2 = np.log1p(1.0 / (y + alpha))
    return np.log(y + alpha) - 0.5 * s2, s2


class RandomFeatureGPRegressor(KnownChunksScore, RegressorMixin, BaseEstimator):
    """GP regression with random features (App. D.2-D.3, eq. 84-90).

    Prior ``f ~ GP(0, amplitude * k_hat)``, ``k_hat(x, x') = phi(x)^T conj(phi(x'))``, and
    Gaussian noise of variance ``noise``. With ``Phi`` the (scaled) training features,
    ``B = Phi^H Phi / noise + I`` is factorised by Cholesky (complex features: ``B`` formed
    from three real products) and

    ``mu(x) = Re phi(x)^T B^-1 Phi^H y / noise``, ``var(x) = Re phi(x)^T B^-1 conj phi(x)``

    (eq. 86-89), or the equivalent ``N x N`` function-space form (eq. 84-85) when ``D > N``
    (``solver="auto"``). Fit O(N D^2 + D^3), prediction O(D^2) per point.

    Parameters
    ----------
    feature_map : kernelkit feature map, optional
        Any symmetric map, cloned and fitted on ``X``. Default:
        ``RandomFourierFeatures(n_features=256, lengthscale=1.0)``. Asymmetric maps are
        rejected.
    noise : float, default=0.1
        Observation noise variance ``sigma^2_noise`` (> 0).
    amplitude : float, default=1.0
        Kernel amplitude ``sigma^2``: features are multiplied by ``sqrt(amplitude)``.
    normalize_y : bool, default=False
        Subtract the mean and divide by the standard deviation of ``y`` before fitting
        (``noise`` and ``amplitude`` then refer to the normalised targets); predictions
        are mapped back.
    solver : {"auto", "primal", "dual"}, default="auto"
    random_state : None, int or numpy.random.Generator
        Seed of the default feature map, or of a given map whose ``random_state`` is None.
    n_jobs : int, optional
        Threads of the fit, in scikit-learn's convention (None: kernelkit's default, the
        CPUs available unless limited by ``KERNELKIT_NUM_THREADS`` or a BLAS thread limit;
        ``-1``: all CPUs; ``-2``: all but one; 0 is invalid). Used by the row-block
        reduction of large in-memory primal fits and, when its own ``n_jobs`` is None, by
        the (cloned) feature map. The fitted model does not depend on it beyond round-off.

    Attributes
    ----------
    feature_map_ : FeatureMap
        The fitted feature map.
    posterior_ : object
        The fitted posterior (``mode`` is ``"primal"`` or ``"dual"``).
    n_features_in_ : int
    n_samples_seen_ : int
        Rows the model was fitted on (all rows given, whatever their ``sample_weight``).
    """

    _parameter_constraints: ClassVar[dict] = {
        "feature_map": [None, HasMethods(["fit", "transform"])],
        "noise": POSITIVE,
        "amplitude": POSITIVE,
        "normalize_y": ["boolean"],
        "solver": [StrOptions(set(SOLVERS))],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        feature_map=None,
        noise: float = 0.1,
        amplitude: float = 1.0,
        normalize_y: bool = False,
        solver: str = "auto",
        random_state=None,
        n_jobs=None,
    ):
        self.feature_map = feature_map
        self.noise = noise
        self.amplitude = amplitude
        self.normalize_y = normalize_y
        self.solver = solver
        self.random_state = random_state
        self.n_jobs = n_jobs

    @keep_model_on_error
    def fit(self, X, y, sample_weight=None):
        """Fit the feature map on ``X`` and compute the posterior.

        ``sample_weight`` ``w_i`` scales the noise of row ``i``: its variance is
        ``noise / w_i``, so the posterior is that of

        ``y_i = f(x_i) + eps_i``, ``eps_i ~ N(0, noise / w_i)``, i.e. ``B = Phi^H W Phi /
        noise + I``, ``mu(x) = Re phi(x)^T B^-1 Phi^H W y / noise`` with ``W = diag(w)``

        (the posterior of the row repeated ``k`` times for an integer weight ``k``; a
        zero weight, infinite noise, drops the row). With ``normalize_y`` the targets
        are scaled by their weighted mean and standard deviation. ``include_noise`` in
        :meth:`predict` adds ``noise``, the variance of a row of weight 1. A feature map
        that reads the FAVOR# moments (GERF, SADERF, ADERF, SDERF) is fitted on the
        weighted moments, as by :meth:`RandomFeatureRidge.fit
        <kernelkit.estimators.RandomFeatureRidge.fit>`, so the repeated row is the same
        model for it too.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Or a ``dask.array.Array`` / an iterable of ``(X_block, y_block)`` pairs
            (``y=None``): fitted out of core in the primal form, chunk by chunk, as
            :class:`~kernelkit.estimators.RandomFeatureRidge` (the feature map fitted
            as there); predictions on Dask arrays are lazy.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,) or float, optional
            Non-negative, finite, not all zero; accepted as by
            :meth:`RandomFeatureRidge.fit <kernelkit.estimators.RandomFeatureRidge.fit>`
            (NumPy, torch, Dask with a Dask ``X``; not with an iterable of blocks).

        Returns
        -------
        self
        """
        self._validate_params()
        noise = check_positive_float(self.noise, "noise")
        amp = check_positive_float(self.amplitude, "amplitude")
        choose_solver(self.solver, 1, 1)  # validates the name
        n_jobs = check_n_jobs(self.n_jobs)
        # 1. NumPy arrays and weights, or chunks (Dask / iterable)
        rows = training_rows(self, X, y, sample_weight)
        fm = self.feature_map_ = fit_feature_map(self, rows, n_jobs)  # 2. the map
        # 3.-4. features or their statistics, and the posterior: the fit's only branch
        with weights_in_solver_errors(type(self).__name__, rows.w, "noise", ("noise", self.noise)):
            if rows.chunked:  # statistics reduced over the chunks
                self._solve_statistics(chunk_statistics(fm, rows, amp), noise)
            elif use_blocked_statistics(fm, rows.X, self.solver):  # primal, large n x D
                stats = blocked_statistics(fm, rows.X, rows.Y, amp, n_jobs, rows.w)
                self._solve_statistics(stats, noise)
            else:  # all features (n, D), primal (eq. 88-90) or dual (eq. 84-85)
                self._solve_features(map_features(fm, rows.X, amp), rows.Y, noise, rows.w)
        self._single, self._amp, self._noise = rows.y_ndim == 1, amp, noise
        return self

    def _scale_targets(self, mean: np.ndarray, sd: np.ndarray, n: int) -> None:
        """``_y_mean``, ``_y_std`` (T,): the target scaling of ``normalize_y`` (or none).

        A target whose standard deviation ``sd`` of ``n`` values is within the round-off
        of computing it about its ``mean`` (``sd^2 <= n eps sd^2 + (n eps mean)^2``, as
        scikit-learn's scalers test) is constant and scaled by 1, not by the round-off.
        """
        if self.normalize_y:
            if not np.all(np.isfinite(sd)):
                raise ValueError(
                    "normalize_y=True: the variance of y overflows float64; scale y down "
                    "(e.g. divide it by its largest absolute value)."
                )
            eps = np.finfo(np.float64).eps
            # sd^2 <= n eps sd^2 + (n eps mean)^2, divided by m^2 (no square underflows)
            m = np.maximum(sd, np.abs(mean))
            m = np.where(m > 0, m, 1.0)
            r, q = sd / m, mean / m
            constant = r**2 <= n * eps * r**2 + (n * eps * q) ** 2  # (T,)
            self._y_mean, self._y_std = mean, np.where(constant, 1.0, sd)
        else:
            self._y_mean, self._y_std = np.zeros(len(mean)), np.ones(len(mean))

    def _solve_features(self, Phi, Y, noise: float, w=None) -> None:
        """The posterior of features ``Phi`` (n, D), targets ``Y`` (n, T) and weights
        ``w`` (n,) or None: noise variances ``noise / w_i``, rows of zero weight dropped."""
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            # an overflowing std is reported by name; the deviations are scaled by a power
            # of two above the largest, so that their squares neither underflow (targets of
            # 1e-170 had sd 0, "constant", and a std scaled by 1) nor overflow
            mean = np.average(Y, 0, w)  # (T,)
            ss_rel, scale = scaled_sq_sums(Y - mean, w)
            sd = scale * np.sqrt(ss_rel / (len(Y) if w is None else np.sum(w)))
            self._scale_targets(mean, sd, len(Y))
        Yn = (Y - self._y_mean) / self._y_std  # (n, T)
        noises = np.full(len(Y), noise)
        if w is not None:
            keep = noise_rows(w, noise)  # (zero weights and those of overflowing noise)
            Phi, Yn, noises = Phi[keep], Yn[keep], noise / w[keep]
        self.posterior_ = FeaturePosterior.fit(Phi, Yn, noises, self.solver)
        self.n_samples_seen_ = len(Y)

    def _solve_statistics(self, stats: FeatureStats, noise: float) -> None:
        """The primal posterior (eq. 88-90) from the reduced (weighted) statistics:
        ``B = G / noise + I``, right-hand side ``R / noise`` of the scaled targets."""
        self._scale_targets(stats.y_mean, stats.y_std, stats.n)
        G, R = stats.centred(bool(self.normalize_y), self._y_std, centre_features=False)
        B = G / noise
        B[np.diag_indices_from(B)] += 1.0
        self.posterior_ = FeaturePosterior.from_primal(B, R / noise)
        self.n_samples_seen_ = stats.n

    def _features(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False, accept_sparse=False)
        return map_features(self.feature_map_, X, self._amp)

    def predict(
        self, X, return_std: bool = False, return_cov: bool = False, include_noise: bool = False
    ):
        """Predictive mean (eq. 86) and optionally standard deviation or covariance (eq. 87).

        Parameters
        ----------
        X : array-like of shape (n, n_features)
        return_std : bool
            Also return the predictive standard deviation.
        return_cov : bool
            Also return the predictive covariance matrix (n, n).
        include_noise : bool
            Add the noise variance (predictive distribution of ``y`` instead of the latent
            ``f``; default: latent, as scikit-learn's ``GaussianProcessRegressor``).

        Returns
        -------
        y_mean : ndarray, shape (n,) or (n, T)
        y_std : ndarray, shape (n,) or (n, T), only with ``return_std``
        y_cov : ndarray, shape (n, n) or (n, n, T), only with ``return_cov``
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        if is_dask_array(X):  # lazy, chunk by chunk
            if return_cov:
                raise ValueError(
                    "return_cov=True needs all points in memory (an n x n "
                    "matrix); not available for Dask arrays."
                )
            check_is_fitted(self)
            X = prediction_rows(self, X)  # checked now, mapped lazily
            T = len(self._y_mean)
            if not return_std:
                return map_row_chunks(X, self.predict, None if self._single else T)

            def mean_and_std(Xb):  # one task per chunk maps its rows once: (b, 2 T)
                m, s = self.predict(Xb, return_std=True, include_noise=include_noise)
                return np.hstack([m.reshape(len(Xb), T), s.reshape(len(Xb), T)])

            both = map_row_chunks(X, mean_and_std, 2 * T)  # (n, 2 T)
            mean, std = both[:, :T], both[:, T:]
            return (mean[:, 0], std[:, 0]) if self._single else (mean, std)
        noise = self._noise if include_noise else 0.0  # the fitted noise variance
        if not return_cov:  # row by row: one slab of features at a time
            check_is_fitted(self)
            X = validate_data(
                self, X, dtype=[np.float64, np.float32], reset=False, accept_sparse=False
            )
            return predict_in_slabs(
                lambda Xb: self._mean_std(Xb, return_std, noise), X, self.feature_map_, self.n_jobs
            )
        Phi = self._features(X)
        mean = self._mean(Phi)
        cov = self.posterior_.cov(Phi)
        cov[np.diag_indices_from(cov)] += noise
        cov = cov[:, :, None] * self._y_std**2
        return mean, (cov[:, :, 0] if self._single else cov)

    def _mean(self, Phi):
        mean = self.posterior_.mean(Phi) * self._y_std + self._y_mean  # (n, T)
        return mean[:, 0] if self._single else mean

    def _mean_std(self, X, return_std: bool, noise: float):
        """Predictive mean (and standard deviation) of validated rows ``X``."""
        Phi = map_features(self.feature_map_, X, self._amp)
        mean = self._mean(Phi)
        if not return_std:
            return mean
        var = self.posterior_.var(Phi) + noise  # (n,)
        std = np.sqrt(var)[:, None] * self._y_std  # (n, T)
        return mean, (std[:, 0] if self._single else std)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.target_tags.multi_output = True
        return tags


class RandomFeatureGPClassifier(KnownChunksScore, ClassifierMixin, BaseEstimator):
    """GP classification with random features (Milios et al. 2018; App. D.4).

    Labels are one-hot encoded and transformed per class ``c`` to
    ``sigma^2_{c,i} = log(1/(y_{c,i} + alpha) + 1)``,
    ``y_tilde_{c,i} = log(y_{c,i} + alpha) - sigma^2_{c,i} / 2``; an independent
    heteroscedastic GP regression ``y_tilde_c = f_c + eps``, ``eps_i ~ N(0, sigma^2_{c,i})``
    with prior ``f_c ~ GP(0, amplitude * k_hat)`` is fitted per class (App. D.2-D.3, so
    complex feature maps work). Because ``sigma^2`` takes two values per class, all class
    posteriors share one Gram matrix ``Phi^H Phi`` plus a per-class part: O(N D^2 + C D^3)
    in total (primal), or ``C`` Cholesky factorisations of ``N x N`` (dual, ``D > N``).

    Class probabilities (:meth:`predict_proba`) average ``softmax(z)`` over ``n_samples``
    draws ``z_c = mu_c + sd_c eps_c`` of the latent posteriors (approximating the
    Dirichlet marginals); the standard-normal ``eps`` are drawn once at :meth:`fit` from
    ``random_state`` and shared by all test points, so predictions are deterministic and
    independent of batching. They are closed under every permutation of the classes for
    up to six classes where ``C! <= n_samples`` (antithetic pairs for two), so
    tied classes get equal probabilities and, with equal variances, every pair of classes
    is ranked as its latent means: near ties are not all decided one way by the draws'
    Monte Carlo error. With more classes they are closed under the cyclic shifts, and
    :meth:`predict_proba` also averages over a swap of the draws of the two largest
    means, so that :meth:`predict` follows the latent means at near ties of the top two
    (:func:`symmetric_normal_draws`, :func:`mc_softmax` ``swap_top``). At each point, column ``k``
    of the draws goes to the class with the ``k``-th smallest latent mean (the columns
    are exchangeable, so this is the same estimator), not to the ``k``-th class of
    ``classes_``: renaming the classes (``y`` mapped to ``1 - y``, strings, any
    permutation of the labels) permutes the columns of :meth:`predict_proba` to
    round-off (sums over the classes taken in another order, ~1e-16) instead of changing
    them by the Monte Carlo error. :meth:`predict` is the argmax of :meth:`predict_proba`.

    Parameters
    ----------
    feature_map : kernelkit feature map, optional
        Any symmetric map, cloned and fitted on ``X``. Default:
        ``RandomFourierFeatures(n_features=256, lengthscale=1.0)``.
    alpha : float, default=0.01
        Milios et al.'s ``alpha_eps`` (> 0); the paper selects it from
        ``{1e-5, ..., 1}`` by validation MNLL.
    amplitude : float, default=1.0
        Kernel amplitude: features are multiplied by ``sqrt(amplitude)``.
    n_samples : int, default=1000
        Monte Carlo samples for :meth:`predict_proba`, rounded up to a multiple of
        ``C!`` (``C <= 6`` classes with ``C! <= n_samples``) or else of ``C``: the draws
        are closed under the permutations, or the cyclic shifts, of the classes.
    solver : {"auto", "primal", "dual"}, default="auto"
    random_state : None, int or numpy.random.Generator
        Seeds the default feature map (or a given map whose ``random_state`` is None) and
        the Monte Carlo draws.
    n_jobs : int, optional
        Threads of the (cloned) feature map when its own ``n_jobs`` is None, in
        scikit-learn's convention (None: kernelkit's default; ``-1``: all CPUs; 0 is
        invalid). The fitted model does not depend on it beyond round-off.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    feature_map_ : FeatureMap
        The fitted feature map.
    posteriors_ : list
        One fitted posterior per class.
    mc_noise_ : ndarray, shape (n_draws, n_classes)
        The fixed Monte Carlo draws (``n_samples``, the parameter, not the data size,
        rounded up as described there): standard-normal rows closed under the
        permutations or the cyclic shifts of the columns (:func:`symmetric_normal_draws`);
        column ``k`` is applied to the class of the ``k``-th smallest latent mean at each
        point (:func:`mc_softmax` with ``by_rank=True``).
    n_features_in_ : int
    """

    #: n_samples of the fit (its Monte Carlo draws); None for a model pickled before it
    #: was kept, which reads n_samples
    _n_samples = None

    _parameter_constraints: ClassVar[dict] = {
        "feature_map": [None, HasMethods(["fit", "transform"])],
        "alpha": POSITIVE,
        "amplitude": POSITIVE,
        "n_samples": int_range(1, 10**7),
        "solver": [StrOptions(set(SOLVERS))],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        feature_map=None,
        alpha: float = 0.01,
        amplitude: float = 1.0,
        n_samples: int = 1000,
        solver: str = "auto",
        random_state=None,
        n_jobs=None,
    ):
        self.feature_map = feature_map
        self.alpha = alpha
        self.amplitude = amplitude
        self.n_samples = n_samples
        self.solver = solver
        self.random_state = random_state
        self.n_jobs = n_jobs

    @keep_model_on_error
    def fit(self, X, y, sample_weight=None):
        """Fit the feature map and one heteroscedastic GP per class.

        ``sample_weight`` ``w_i`` divides the Milios noise of row ``i`` in every class's
        regression: ``eps_{c,i} ~ N(0, sigma^2_{c,i} / w_i)``, so
        ``B_c = I + Phi^H diag(w_i / sigma^2_{c,i}) Phi`` and the right-hand side
        ``Phi^H diag(w_i / sigma^2_{c,i}) y_tilde_c`` (a row repeated ``k`` times is a
        weight ``k``; a zero weight drops the row from the posteriors, its label stays
        in ``classes_``, as in scikit-learn's classifiers). A feature map that reads the
        FAVOR# moments (GERF, SADERF, ADERF, SDERF) is fitted on the weighted moments, so
        this holds for it too.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Or a ``dask.array.Array`` / an iterable of ``(X_block, labels)`` pairs
            (``y=None``): fitted out of core in the primal form, each chunk reduced to
            the Gram matrix and column sums of each class's features (the feature map
            fitted as :class:`~kernelkit.estimators.RandomFeatureRidge` fits it);
            predictions on Dask arrays are lazy.
        y : array-like of shape (n_samples,)
            Class labels (any sortable type), or a Dask array of them.
        sample_weight : array-like of shape (n_samples,) or float, optional
            Non-negative, finite, not all zero; accepted as by
            :meth:`RandomFeatureRidge.fit <kernelkit.estimators.RandomFeatureRidge.fit>`
            (NumPy, torch, Dask with a Dask ``X``; not with an iterable of blocks).

        Returns
        -------
        self
        """
        self._validate_params()
        alpha = check_positive_float(self.alpha, "alpha")
        amp = check_positive_float(self.amplitude, "amplitude")
        S = validate_positive_int(self.n_samples, "n_samples", maximum=10**7)
        n_jobs = check_n_jobs(self.n_jobs)
        labels = milios_transform(np.array([0.0, 1.0]), alpha)  # ((y~0, y~1), (s0, s1))
        # solver failures name alpha, which sets the noise log1p(1 / (y + alpha)) inversely
        param = (
            "alpha",
            self.alpha,
            "Here the noise is log1p(1 / (y + alpha)), which shrinks as alpha grows: lower alpha.",
        )
        # the feature map is seeded by the generator that then draws the Monte Carlo noise
        rng = check_random_state(self.random_state)
        check_pairs_without_y(X, y, type(self).__name__)
        if is_chunked(X) or (y is None and is_block_sequence(X)):  # Dask / blocks:
            # the per-class sums, chunk by chunk
            rows = class_training_rows(self, X, y, sample_weight)
            fm = self.feature_map_ = fit_feature_map(self, rows, n_jobs, random_state=rng)
            self.classes_, grams = class_statistics(fm, rows, amp)  # (C,), [(G_c, s_c)]
            self._check_classes()
            with weights_in_solver_errors(type(self).__name__, None, _MILIOS_NOISE, param):
                self.posteriors_ = _posteriors_from_grams(grams, *labels)
        else:
            # 1. validate: labels -> class indices y_idx (n,)
            check_raw_labels(type(self).__name__, y)
            X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], accept_sparse=False)
            w = check_sample_weight(sample_weight, X, type(self).__name__)  # (n,) or None
            self.classes_, y_idx = encode_labels(type(self).__name__, y)
            self._check_classes()
            # 2. feature map, 3. features (n, D)
            self.feature_map_ = fitted_feature_map(
                self.feature_map, rng, X, type(self).__name__, n_jobs, weights=w
            )
            # 4. one heteroscedastic GP per class, with the noise of the Milios transform
            C = len(self.classes_)
            if use_blocked_statistics(self.feature_map_, X, self.solver):
                # n x D beyond STREAM_ENTRIES: the per-class sums over row blocks, as a
                # chunked fit (one slab of features at a time, never all of them)
                grams = blocked_class_statistics(self.feature_map_, X, y_idx, C, amp, n_jobs, w)
                with weights_in_solver_errors(type(self).__name__, w, _MILIOS_NOISE, param):
                    self.posteriors_ = _posteriors_from_grams(grams, *labels)
                self.mc_noise_ = symmetric_normal_draws(rng, S, C)
                self._amp, self._n_samples = amp, S
                return self
            Phi = map_features(self.feature_map_, X, amp)
            with weights_in_solver_errors(type(self).__name__, w, _MILIOS_NOISE, param):
                if choose_solver(self.solver, *Phi.shape) == "primal":
                    self.posteriors_ = _class_posteriors_primal(Phi, y_idx, C, *labels, w)
                else:
                    self.posteriors_ = _class_posteriors_dual(Phi, y_idx, C, *labels, w)
        self.mc_noise_ = symmetric_normal_draws(rng, S, len(self.classes_))
        self._amp, self._n_samples = amp, S
        return self

    def _check_classes(self) -> None:
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"but the data contain only one class: {self.classes_[0]!r}."
            )

    def predict_latent(self, X):
        """Posterior mean and variance of the latent GPs ``f_c`` (before the softmax).

        Parameters
        ----------
        X : array-like of shape (n, n_features)

        Returns
        -------
        mean, var : ndarrays of shape (n, n_classes)
            Lazy Dask arrays for a Dask ``X`` (one task per row chunk).
        """
        check_is_fitted(self)
        if is_dask_array(X):  # checked now, mapped lazily: (n, 2 C) split in two
            C = len(self.classes_)
            both = map_row_chunks(
                prediction_rows(self, X), lambda Xb: np.hstack(self.predict_latent(Xb)), 2 * C
            )
            return both[:, :C], both[:, C:]
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False, accept_sparse=False)
        return predict_in_slabs(self._latent_rows, X, self.feature_map_, self.n_jobs)

    def _latent_rows(self, X):
        Phi = map_features(self.feature_map_, X, self._amp)
        mean = np.column_stack([p.mean(Phi)[:, 0] for p in self.posteriors_])
        var = np.column_stack([p.var(Phi) for p in self.posteriors_])
        return mean, var

    def predict_proba(self, X):
        """Class probabilities: Monte Carlo average of ``softmax(mu + sd * eps)``.

        Parameters
        ----------
        X : array-like of shape (n, n_features)

        Returns
        -------
        ndarray of shape (n, n_classes), rows summing to 1 (lazy for a Dask ``X``).
        """
        if is_dask_array(X):  # checked now, mapped lazily
            check_is_fitted(self)
            return map_row_chunks(prediction_rows(self, X), self.predict_proba, len(self.classes_))
        mean, var = self.predict_latent(X)
        C = len(self.classes_)
        # draws closed under the cyclic shifts only (more classes than n_samples! allows):
        # also the swap of the two largest means' draws (predict's near ties)
        # (of the fitted draws: n_samples set after fit takes effect at the next fit)
        S = self.n_samples if self._n_samples is None else self._n_samples  # older pickles
        swap = not draws_are_fully_symmetric(S, C)
        return mc_softmax(
            mean, var, self.mc_noise_, n_jobs=self.n_jobs, by_rank=True, swap_top=swap
        )

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n, n_features)

        Returns
        -------
        ndarray of shape (n, n_classes)
            ``-inf`` for a zero probability; lazy for a Dask ``X``.
        """
        P = self.predict_proba(X)
        if is_dask_array(P):
            return P.map_blocks(log_proba, dtype=P.dtype)
        return log_proba(P)

    def predict(self, X):
        """Class labels: argmax of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n, n_features)

        Returns
        -------
        ndarray of shape (n,)
            Entries of ``classes_``; lazy for a Dask ``X``.
        """
        check_is_fitted(self)
        P = self.predict_proba(X)  # (n, C)
        if is_dask_array(P):
            dtype = self.classes_.dtype
            return P.map_blocks(
                lambda p: self.classes_[np.argmax(p, axis=1)],
                drop_axis=1,
                dtype=dtype,
                meta=np.empty(0, dtype=dtype),
            )
        return self.classes_[np.argmax(P, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags


def _class_posteriors_primal(Phi, y_idx, C: int, y_tilde, s2, w=None) -> list:
    """Primal posteriors of the ``C`` class GPs (eq. 88-90) of features ``Phi`` (n, D),
    class indices ``y_idx`` (n,) and weights ``w`` (n,) or None:
    :func:`_posteriors_from_grams` of each class's (weighted) Gram matrix and column
    sums."""
    parts = []
    for c in range(C):
        on = y_idx == c
        Pc = Phi[on]  # (n_c, D)
        if w is None:
            parts.append((gram_primal(Pc), np.conj(Pc).sum(axis=0)))
        else:
            parts.append((gram_primal(Pc, w[on]), np.conj(Pc).T @ w[on]))
    return _posteriors_from_grams(parts, y_tilde, s2)


def _posteriors_from_grams(parts, y_tilde, s2) -> list:
    """Primal posteriors of the class GPs from ``parts = [(G_c, s_c)]``: the Gram matrix
    ``G_c = Phi_c^H Phi_c`` (D, D) and the column sums ``s_c = Phi_c^H 1`` (D,) of the
    rows of each class (with sample weights ``Phi_c^H W_c Phi_c`` and ``Phi_c^H w_c``:
    the noise of row ``i`` divided by ``w_i``), sharing one Gram matrix.

    The noise of class ``c`` is ``s1`` on its rows and ``s0`` elsewhere, so
    ``B_c = I + Phi^H W_c Phi = I + G_all / s0 + (1/s1 - 1/s0) G_c`` with
    ``G_all = sum_c G_c``, and the right-hand side ``Phi^H W_c y~_c`` is built from the
    column sums the same way.
    """
    (yt0, yt1), (s0, s1) = y_tilde, s2
    D = parts[0][0].shape[0]
    G_all = sum(Gc for Gc, _ in parts)  # (D, D) Phi^H Phi
    s_all = sum(sc for _, sc in parts)  # (D,) Phi^H 1
    posteriors = []
    for Gc, sc in parts:
        B = G_all / s0 + (1.0 / s1 - 1.0 / s0) * Gc
        B[np.diag_indices(D)] += 1.0
        rhs = (yt0 / s0) * s_all + (yt1 / s1 - yt0 / s0) * sc  # (D,)
        posteriors.append(FeaturePosterior.from_primal(B, rhs[:, None]))
    return posteriors


def _class_posteriors_dual(Phi, y_idx, C: int, y_tilde, s2, w=None) -> list:
    """Dual posteriors of the ``C`` class GPs (eq. 84-85): ``K_hat + diag(sigma^2_c / w)``
    (n, n) per class from one ``K_hat = Phi Phi^H`` (``w``: sample weights (n,) or None;
    rows of zero weight, of infinite noise, dropped)."""
    (yt0, yt1), (s0, s1) = y_tilde, s2
    w_kept = 1.0
    if w is not None:
        keep = noise_rows(w, max(s0, s1))  # (zero weights, overflowing noise)
        Phi, y_idx, w_kept = Phi[keep], y_idx[keep], w[keep]
    n = Phi.shape[0]
    K = gram_dual(Phi)  # (n, n)
    posteriors = []
    for c in range(C):
        on = y_idx == c
        Kc = K.copy()
        Kc[np.diag_indices(n)] += np.where(on, s1, s0) / w_kept
        target = np.where(on, yt1, yt0)[:, None]  # (n, 1)
        posteriors.append(FeaturePosterior.from_dual(Kc, target, Phi))
    return posteriors


#: the most classes whose Monte Carlo draws are closed under every permutation
_MAX_SYMMETRIC_CLASSES = 6


def symmetric_normal_draws(rng, n_samples: int, C: int) -> np.ndarray:
    """Standard-normal draws (G ceil(n_samples / G), C) closed under a group of ``G``
    permutations of the columns: ``ceil(n_samples / G)`` i.i.d. rows and their images;
    the ``eps`` of the Monte Carlo class probabilities of the Dirichlet-based GP
    classifier (Milios et al. 2018, App. D.4), :func:`mc_softmax`.

    The group is every permutation of the ``C`` columns for ``C <= 6`` with ``C! <=
    n_samples`` (at most 720 permutations), else the ``C`` cyclic shifts
    (:func:`draws_are_fully_symmetric`). Every row is a standard-normal vector, so
    :func:`mc_softmax` stays an unbiased estimator. With i.i.d. rows one column's
    estimate exceeds another's by their Monte Carlo error, and as the classifier gives
    column ``k`` to the class of the ``k``-th smallest mean (``by_rank``), that error
    decided every near tie the same way: all points with nearly tied classes went to the
    lower mean in about half the seeds. Closed under every permutation, the draws give
    classes with equal latent means and variances equal probabilities (to round-off),
    and with equal variances they rank every pair of classes as their latent means
    (pair each draw with its image under the transposition of the two columns:
    ``softmax`` of the larger mean gains). For two classes the group is the antithetic
    pairs ``(e0, e1)``, ``(e1, e0)``, whose Monte Carlo variance is no larger than that of
    independent pairs. Under the cyclic shifts only classes tied all together are equal;
    :func:`mc_softmax` then also swaps the two largest means' draws (``swap_top``).
    """
    if draws_are_fully_symmetric(n_samples, C):
        perms = np.array(list(itertools.permutations(range(C))))  # (C!, C), identity first
    else:
        perms = np.array([np.roll(np.arange(C), r) for r in range(C)])  # (C, C)
    G = len(perms)
    base = rng.standard_normal((-(-int(n_samples) // G), C))  # (B, C)
    # image of row b under permutation g at row g B + b: (B, G, C) -> (G B, C)
    return base[:, perms].transpose(1, 0, 2).reshape(-1, C)


def draws_are_fully_symmetric(n_samples: int, C: int) -> bool:
    """Whether :func:`symmetric_normal_draws` closes ``n_samples`` draws of ``C`` classes
    under every permutation (``C <= 6`` and ``C! <= n_samples``: at most 720 images of
    each row) rather than the cyclic shifts."""
    return C <= 1 or (C <= _MAX_SYMMETRIC_CLASSES and math.factorial(C) <= int(n_samples))


def mc_softmax(
    mean, var, eps, max_elements: int = 1 << 20, n_jobs=None, by_rank=False, swap_top=False
):
    """``mean_s softmax(mean + sqrt(var) * eps_s)`` per row.

    Parameters
    ----------
    mean, var : ndarray, shape (n, C)
    eps : ndarray, shape (S, C)
    max_elements : int
        Entries of the (rows, S, C) draws of one row block (8 MB of float64 by default).
    n_jobs : int or None
        kernelkit's threads for the row blocks (rows are independent: the result does
        not depend on it).
    by_rank : bool, default=False
        ``False``: column ``c`` of ``eps`` goes to column ``c`` of ``mean``. ``True``: in
        each row, column ``k`` of ``eps`` goes to the column of the ``k``-th smallest
        ``mean`` (ties to the lower column), so that permuting the columns of ``mean``
        and ``var`` permutes the result's columns (to the round-off of the softmax's
        sum over the columns, taken in another order; the classifier's labels do not
        choose the draws). Tied means with different ``var`` are the exception: their
        draws follow the column order. The draws' columns are i.i.d., so both are the same
        Monte Carlo estimator.
    swap_top : bool, default=False
        With ``by_rank`` and three or more columns: also the estimate with the draws of
        the two largest means swapped, and the mean of both (twice the work), so that
        draws not closed under that transposition (:func:`symmetric_normal_draws` with
        cyclic shifts) still rank a near tie of the two largest means as the means, and
        tie them exactly, with equal variances.

    Returns
    -------
    ndarray, shape (n, C)
    """
    n, C = mean.shape
    S = eps.shape[0]
    sd = np.sqrt(np.maximum(var, 0.0))
    out = np.empty((n, C))
    rows = max(1, max_elements // max(1, S * C))

    def probs(lo, hi, rank):
        if rank is None:
            E = eps[None, :, :]
        else:
            E = eps[:, rank].transpose(1, 0, 2)  # (rows, S, C): E[i, s, c] = eps[s, rank]
        Z = mean[lo:hi, None, :] + sd[lo:hi, None, :] * E
        Z -= Z.max(axis=2, keepdims=True)
        np.exp(Z, out=Z)
        Z /= Z.sum(axis=2, keepdims=True)
        return Z.mean(axis=1)

    def block(lo, hi):
        if not by_rank:
            out[lo:hi] = probs(lo, hi, None)
            return
        # rank[i, c]: the rank of mean[i, c] in its row
        rank = np.argsort(np.argsort(mean[lo:hi], axis=1, kind="stable"), axis=1)
        P = probs(lo, hi, rank)
        if swap_top and C >= 3:  # the two largest means exchange their draws
            top = np.where(rank == C - 1, C - 2, np.where(rank == C - 2, C - 1, rank))
            P = 0.5 * (P + probs(lo, hi, top))
        out[lo:hi] = P

    block_map(block, n, rows, n_jobs)
    return out
