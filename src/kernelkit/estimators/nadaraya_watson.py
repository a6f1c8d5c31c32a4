"""Nadaraya-Watson kernel classification with random features (FAVOR# Sec. 5.2).

Training points ``u_i`` (``i = 1..L``) with one-hot labels ``r_i`` (``n`` classes); a query
``u*`` gets the class ``argmax_l r*_l`` of

    r* = sum_i K^(-1/2)(sigma u*, sigma u_i) r_i,          K^(-1/2)(x, y) = exp(-|x - y|^2 / 2)

(Gaussian kernel with lengthscale ``1 / sigma``). Random features replace the kernel by
``K ~ P S^T`` (``P``: queries, ``S``: training points, ``M`` columns), so
``r* ~ P (S^T R)``: ``O(L M n)`` preprocessing for ``S^T R`` and ``O(M n)`` per query
instead of ``O(L n)``.

Numerical stability (library choice; ``docs/derivations/favor_sharp.md``, "Library choices").
Positive features are handled in log space. With ``log S`` (L, D) and ``log P`` (Q, D):

* a per-*feature* constant ``c_m = max_i log S_im`` is moved from the key side to the
  query side: ``P_qm S_im = (P_qm e^{c_m}) (S_im e^{-c_m})`` exactly;
* ``T = exp(log S - c)^T R`` (D, n) then has entries in ``[0, L]`` and every row of ``T``
  sums to at least 1 (the maximising key contributes ``e^0``);
* a per-*query* constant ``z_q = max_m (log P_qm + c_m)`` is subtracted before the
  exponential, which scales row ``q`` of ``r*`` by ``e^{-z_q} > 0`` and leaves the argmax
  unchanged.

So every row of the stabilised ``r*`` is finite with sum ``>= 1``, whatever ``sigma`` and
the norms. (A per-*key* constant would change the argmax and is never used.)
Trigonometric features (random Fourier features for the Gaussian kernel) are bounded by
``sqrt(2/M)`` and need no stabilisation; their ``r*`` may be negative.

Centring (library choice). The Gaussian kernel depends on ``u* - u_i`` only, so the
estimator subtracts the mean of the training points from every input, training points
and queries, before any kernel or feature is evaluated. The exact estimate is unchanged,
but (a) the exact scores' squared distances ``|q|^2 + |t|^2 - 2 q.t`` keep their digits
for inputs with a large common offset (timestamps, projected coordinates), instead of an
absolute error of ``|x|^2 eps`` (~2000 for three coordinates near 1.7e9), and (b) the
random features' variance, which grows with the norms of the inputs (positive features:
relative variance ``(exp(sigma^2 |x + y|^2) - 1) / M``, FAVOR# Sec. 2; GERF, ADERF,
SDERF and the hyperbolic features grow too), is that of the centred inputs, so the
estimate does not degrade when the data are shifted.
"""

from __future__ import annotations

import math
import numbers
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import check_random_state, validate_positive_int
from .._backend.fit_state import keep_model_on_error
from .._backend.gaussian_exponent import (
    gaussian_log_kernel,
    ldexp_saturating,
    power_of_two_bound,
)
from .._backend.parallel import check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE, int_range
from .._backend.sklearn_validation import validate_data
from ..features.sampling import SAMPLERS
from ._chunked import (
    KnownChunksScore,
    check_sample_weight,
    predict_in_slabs,
    reject_block_iterable,
)
from ._labels import check_raw_labels, encode_labels, log_proba
from ._methods import DATA_DEPENDENT, FEATURE_MAPS, make_feature_map, resolve_method
from ._weighted_fit import weighted_moments

__all__ = [
    "NadarayaWatsonClassifier",
    "exact_nw_scores",
    "log_features",
    "nw_key_summary",
    "nw_query_scores",
    "sq_distances",
]

_CHUNK_ELEMENTS = 1 << 22  # ~32 MB of float64 per (queries x training points) block


# ====================================================================== building blocks
def log_features(fm, X, side: str = "x"):
    """Exact logarithm of positive random features, or ``None`` for signed maps.

    Parameters
    ----------
    fm : fitted kernelkit.features.FeatureMap
    X : ndarray, shape (n, d)
    side : {"x", "y"}
        Query (``f1``) or key (``f2``) side.

    Returns
    -------
    ndarray, shape (n, fm.output_dim), or None
        ``log fm.transform(X)`` (``log fm.transform_y(X)`` for ``side="y"``) computed
        without ever exponentiating, so finite for any input norm; ``None`` when the map
        is not positive (TrigRF).
    """
    if not fm.positive:
        return None
    if hasattr(fm, "log_transform"):
        return fm.log_transform(X) if side == "x" else fm.log_transform_y(X)
    base, log_scale = fm.transform_scaled(X, side)  # generic positive map
    with np.errstate(divide="ignore"):
        return np.log(base) + log_scale[:, None]


def nw_key_summary(log_S, R):
    """Key-side preprocessing ``S^T R`` in stabilised form, ``O(L D n)``.

    Parameters
    ----------
    log_S : ndarray, shape (L, D)
        Log features of the training points (:func:`log_features`, ``side="y"``).
    R : ndarray, shape (L, n)
        One-hot (or weighted) labels.

    Returns
    -------
    c : ndarray, shape (D,)
        Per-feature shift ``max_i log S_im`` (moved to the query side).
    T : ndarray, shape (D, n)
        ``exp(log S - c)^T R``; each row sums to >= 1 for one-hot ``R``.
    """
    c = log_S.max(axis=0)  # (D,)
    c = np.where(np.isfinite(c), c, 0.0)
    E = np.exp(log_S - c)  # (L, D), entries in [0, 1]
    return c, E.T @ R


def nw_query_scores(log_P, c, T):
    """Stabilised ``r*`` for queries, ``O(Q D n)`` (FAVOR# Sec. 5.2).

    Parameters
    ----------
    log_P : ndarray, shape (Q, D)
        Log features of the queries (:func:`log_features`, ``side="x"``).
    c, T : from :func:`nw_key_summary`.

    Returns
    -------
    ndarray, shape (Q, n)
        ``r*`` with row ``q`` divided by a positive constant ``exp(z_q + const)``; finite,
        non-negative, row sums >= 1 for one-hot labels.
    """
    Z = log_P + c  # (Q, D)
    z = Z.max(axis=1, keepdims=True)
    z = np.where(np.isfinite(z), z, 0.0)
    return np.exp(Z - z) @ T


def sq_distances(Xq, Xt):
    """Squared Euclidean distances ``|q - t|^2``, shape (Q, L), accurate for every pair.

    One matrix product of the points centred on the mean of ``Xq``, and the pairs whose
    expanded square ``|q|^2 + |t|^2 - 2 q.t`` is within its rounding error of the distance
    (near points far from that centre: a fine cluster beside distant ones) formed again
    from ``q - t`` (:func:`kernelkit._backend.gaussian_exponent.gaussian_log_kernel`).
    ``inf`` where the distance exceeds the float64 range (coordinates beyond ~1e154;
    :func:`exact_nw_scores` rescales such points first).
    """
    if Xq.shape[0] == 0 or Xt.shape[0] == 0:
        return np.zeros((Xq.shape[0], Xt.shape[0]))
    with np.errstate(over="ignore"):  # inf: a distance beyond the range
        return -2.0 * gaussian_log_kernel(np, Xq, Xt, 1.0, exact_zero=True)


def _row_relative(D2, Xq, Xt):
    """``D2`` (Q, L), or ``D2 - |q|^2 = |t|^2 - 2 q.t`` on the rows where that is the more
    accurate: the scores depend on each row's differences ``D2_i - D2_min`` only.

    Accurate distances err by ``eps D2``, so a query far from every training point (``|q|``
    beyond their spread) loses the differences to the rounding of its large ``D2``; the
    form without ``|q|^2`` errs by ``eps (|t|^2 + 2 |q| |t|)`` instead. Each row takes the
    form of the smaller bound.
    """
    sq_t = np.einsum("ij,ij->i", Xt, Xt)  # (L,)
    norm_q = np.sqrt(np.einsum("ij,ij->i", Xq, Xq))  # (Q,)
    bound = sq_t.max() + 2.0 * norm_q * np.sqrt(sq_t.max())  # (Q,) error of the form / eps
    far = D2.min(axis=1) > bound  # (Q,)
    if not far.any():
        return D2
    Xf = Xq[far]
    D2 = D2.copy()
    D2[far] = sq_t[None, :] - 2.0 * (Xf @ Xt.T)
    return D2


#: largest ``|e|`` of ``max |x| < 2^e`` at which :func:`exact_nw_scores` takes squared
#: distances of the points as given (their squares stay within ~2^-1000 and 2^1000)
_RESCALE_EXPONENT = 500


def exact_nw_scores(Xq, Xt, R, sigma, sq_dist=None, log_w=None):
    """Exact Nadaraya-Watson scores with the Gaussian kernel (reference), ``O(Q L (d + n))``.

    ``r*_q = sum_i w_i exp(-sigma^2 |u*_q - u_i|^2 / 2) r_i``, row ``q`` divided by
    ``max_i`` of its weighted kernel values (so the largest term weighs 1: no underflow
    for large ``sigma``).

    Parameters
    ----------
    Xq : ndarray, shape (Q, d)
    Xt : ndarray, shape (L, d)
    R : ndarray, shape (L, n)
    sigma : float
    sq_dist : ndarray, shape (Q, L), optional
        Precomputed :func:`sq_distances` (reused across ``sigma`` values). Accurate per
        pair, but without ``Xq`` the scores cannot take a far query's differences from
        ``|t|^2 - 2 q.t`` nor rescale points beyond ~1e150: pass the points for those.
    log_w : ndarray, shape (L,), optional
        Logarithms of the training points' weights ``w_i`` (None: all ``w_i = 1``).

    Returns
    -------
    ndarray, shape (Q, n), non-negative, row sums >= 1 for one-hot ``R``.
    """
    Q = Xq.shape[0] if sq_dist is None else sq_dist.shape[0]
    L = Xt.shape[0] if sq_dist is None else sq_dist.shape[1]
    out = np.empty((Q, R.shape[1]))
    if sq_dist is None and Q and L and Xq.shape[1]:
        # the kernel depends on sigma (q - t) only: rows whose squared distances would
        # overflow (coordinates from ~1e150) or be subnormal (below ~1e-150) are scored
        # with the points scaled by 2^-e and sigma by 2^e, exactly, e the bound of the
        # query row and the training points (a scale per row: one huge query must not
        # push the others' squares to underflow)
        e_t = power_of_two_bound(np, Xt)
        e_q = np.frexp(np.max(np.abs(Xq), axis=1))[1]  # (Q,) max |q| < 2^e_q
        e_row = np.maximum(e_q, e_t)
        big = (e_row > _RESCALE_EXPONENT) | (e_row < -_RESCALE_EXPONENT)  # or subnormal
        if big.any():
            plain = ~big
            if plain.any():
                out[plain] = _scores(Xq[plain], Xt, R, sigma, None, log_w)
            for e in np.unique(e_row[big]):
                rows = e_row == e
                t = math.ldexp(1.0, -int(e))
                sig = ldexp_saturating(sigma, int(e))
                out[rows] = _scores(Xq[rows] * t, Xt * t, R, sig, None, log_w)
            return out
    return _scores(Xq, Xt, R, sigma, sq_dist, log_w, out)


def _scores(Xq, Xt, R, sigma, sq_dist, log_w, out=None):
    """:func:`exact_nw_scores` of points whose squared distances stay in range."""
    Q = Xq.shape[0] if sq_dist is None else sq_dist.shape[0]
    L = Xt.shape[0] if sq_dist is None else sq_dist.shape[1]
    out = np.empty((Q, R.shape[1])) if out is None else out
    step = max(1, _CHUNK_ELEMENTS // max(L, 1))
    for start in range(0, Q, step):
        sl = slice(start, start + step)
        D2 = sq_distances(Xq[sl], Xt) if sq_dist is None else sq_dist[sl]
        if sq_dist is None:
            D2 = _row_relative(D2, Xq[sl], Xt)
        # relative to each row's nearest point of positive weight, and sigma applied
        # twice: sigma^2 overflows past 1.34e154, and inf * 0 at the nearest point gave
        # NaN; this way the large-sigma limit is 1-nearest-neighbour (the far terms -inf)
        near = D2 if log_w is None else np.where(np.isfinite(log_w), D2, np.inf)
        logK = D2 - near.min(axis=1, keepdims=True)
        np.maximum(logK, 0.0, out=logK)  # (zero-weight points nearer: -inf below anyway)
        with np.errstate(over="ignore"):  # -inf: a term below every float64
            logK *= sigma
            logK *= -0.5 * sigma
        if log_w is not None:
            logK += log_w
        logK -= logK.max(axis=1, keepdims=True)
        np.exp(logK, out=logK)
        out[sl] = logK @ R
    return out


def _normalise_rows(S):
    """``S / sum_l |S_l|`` row-wise; all-zero rows stay zero."""
    tot = np.abs(S).sum(axis=1, keepdims=True)
    return np.divide(S, tot, out=np.zeros_like(S), where=tot > 0)


# ====================================================================== estimator
class NadarayaWatsonClassifier(KnownChunksScore, ClassifierMixin, BaseEstimator):
    """Nadaraya-Watson (kernel regression) classifier with random features.

    FAVOR# paper (Likhosherstov et al., ICML 2023), Sec. 5.2 and App. B.2: training points
    ``u_i`` with one-hot labels ``r_i``; a query ``u*`` is assigned ``argmax_l r*_l`` with

        r* = sum_i K^(-1/2)(sigma u*, sigma u_i) r_i,    K^(-1/2)(x, y) = exp(-|x - y|^2 / 2),

    i.e. the Gaussian kernel with lengthscale ``1 / sigma``. With ``exact=False`` the
    kernel is replaced by an unbiased random-feature estimate ``P S^T`` (queries on the
    x side, training points on the y side): ``O(L M n)`` preprocessing ``S^T R`` and
    ``O(M n)`` per query (``L`` training points, ``M`` features, ``n`` classes).

    Parameters
    ----------
    method : str, default="sderf"
        Random-feature mechanism: ``"trig"`` (random Fourier features), ``"positive"``
        (FAVOR+), ``"hyperbolic"``, ``"gerf"`` (FAVOR++), ``"saderf"``, ``"aderf"``,
        ``"sderf"`` (FAVOR#); case-insensitive, aliases ``"favor+"``, ``"favor++"``,
        ``"favor#"``. Asymmetric maps (SADERF, ADERF) are allowed: queries use ``f1``,
        training points ``f2``.
    n_components : int, default=64
        Number of feature columns, as in :class:`~kernelkit.estimators.RandomFeatures`
        (``M`` random features; ``M = n_components // 2`` projections for
        ``"hyperbolic"``).
    sigma : float, default=1.0
        Input scale; the kernel is ``exp(-sigma^2 |u* - u_i|^2 / 2)``. Large ``sigma``
        approaches 1-nearest-neighbour, small ``sigma`` the majority class.
    sampler : str, default="orthogonal"
        How the projections are drawn (:func:`~kernelkit.features.draw_projection`);
        block-orthogonal, as for all RF types in FAVOR# App. B.2.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the random features. An int is passed to the feature map as is (so the
        features equal ``kernelkit.features.SDERF(..., random_state=seed)``'s of the
        centred inputs ``X - X_mean_``); otherwise
        one seed is drawn at :meth:`fit` and reused by every prediction. Same seed, same
        predictions.
    exact : bool, default=False
        Use the exact kernel (``O(L n)`` per query) instead of random features; the
        reference. ``method``, ``n_components`` and ``sampler`` are then ignored.
    fit_on : {"train", "batch"}, default="train"
        Where the *data-dependent* parameters (GERF, SADERF, ADERF, SDERF; FAVOR# Sec. 3.1,
        Thm 4.2, 4.3, eq. 20) are fitted:

        * ``"train"`` (default): once at :meth:`fit`, on ``(sigma X_train, sigma
          X_train)`` (centred, as every input: Notes); predictions are row-wise (a
          point's prediction does not depend on the other points of the batch) and each
          costs ``O(M (d + n))``.
        * ``"batch"`` (the paper's protocol, FAVOR# App. B.2): at each :meth:`predict` /
          :meth:`predict_proba` / :meth:`decision_function` call on the pair
          ``(sigma X_query, sigma X_train)`` -- the query batch is the x side, the training
          set the y side. The parameters then depend on the whole query batch, so the
          prediction for one point can change with the other points in the batch, and
          each call redoes the ``O(L M (d + n))`` key-side preprocessing
          (``O(L d^2 + d^3)`` more for ADERF / SDERF).

        Methods without data-dependent parameters (trig, positive, hyperbolic) are always
        fitted once at :meth:`fit`.
    n_jobs : int, optional
        Threads of the feature evaluation (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when ``X`` had string column names.
    X_fit_ : ndarray of shape (L, n_features_in_)
        The training points (float64).
    X_mean_ : ndarray of shape (n_features_in_,)
        Their mean (weighted by ``sample_weight``), subtracted from every input (training
        points and queries) before the kernel or the features are evaluated (Notes).
    feature_map_ : kernelkit.features.FeatureMap or None
        The feature map fitted at :meth:`fit` (``None`` with ``exact=True`` or when the
        parameters are fitted per query batch).

    Notes
    -----
    Scores are computed stably for any ``sigma`` (see the module docstring): positive
    features in log space with a per-feature constant moved from the key to the query
    side and a per-query constant removed; neither changes the argmax.
    Every input is centred at ``X_mean_`` first: the Gaussian kernel does not change, and
    neither the exact scores' squared distances nor the random features' variance then
    depend on a common offset of the data (module docstring, "Centring").
    :meth:`decision_function` returns these scores scaled to unit L1 norm per row, so for
    positive features it equals the Nadaraya-Watson class-probability estimate.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from kernelkit.estimators import NadarayaWatsonClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = NadarayaWatsonClassifier(sigma=1.0, n_components=128, random_state=0)
    >>> clf.fit(X, y).score(X, y) > 0.9
    True
    """

    #: log sample weights of the kept training points (None: unweighted); a class default
    #: so that a model pickled before sample weights existed loads and predicts unweighted
    _log_w = None
    #: the checked parameter values of the fit (see fit); None for a model pickled before
    #: they were kept, which predicts with its parameters as they are
    _fitted = None

    _parameter_constraints: ClassVar[dict] = {
        # a FAVOR# method name or alias, case-insensitive: resolve_method checks the name
        # (its message lists the names and aliases)
        "method": [str],
        "n_components": int_range(1, 2**26),
        "sigma": POSITIVE,
        "sampler": [StrOptions(set(SAMPLERS))],
        "random_state": RANDOM_STATE,
        "exact": ["boolean"],
        "fit_on": [StrOptions({"batch", "train"})],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        method: str = "sderf",
        n_components: int = 64,
        sigma: float = 1.0,
        sampler: str = "orthogonal",
        random_state=None,
        exact: bool = False,
        fit_on: str = "train",
        n_jobs=None,
    ):
        self.method = method
        self.n_components = n_components
        self.sigma = sigma
        self.sampler = sampler
        self.random_state = random_state
        self.exact = exact
        self.fit_on = fit_on
        self.n_jobs = n_jobs

    # ------------------------------------------------------------------ helpers
    def _check_params(self):
        s = self.sigma
        if (
            isinstance(s, bool)
            or not isinstance(s, numbers.Real)
            or not (math.isfinite(s) and s > 0)
        ):
            raise ValueError(f"sigma must be a positive finite float, got {s!r}.")
        if not isinstance(self.exact, bool | np.bool_):
            raise ValueError(f"exact must be a bool, got {self.exact!r}.")
        if not self.exact and not math.isfinite(1.0 / s):
            raise ValueError(
                f"sigma={s!r} is too small for random features: their lengthscale 1 / sigma "
                "overflows float64 (use sigma >= 1e-300, or exact=True)."
            )
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {self.sampler!r}; expected one of {sorted(SAMPLERS)}."
            )
        check_n_jobs(self.n_jobs)
        if self.fit_on not in ("batch", "train"):
            raise ValueError(f"fit_on must be 'batch' or 'train', got {self.fit_on!r}.")
        name = resolve_method(self.method, allowed=FEATURE_MAPS, owner="NadarayaWatsonClassifier")
        validate_positive_int(self.n_components, "n_components", maximum=2**26)
        return name

    def _params_now(self) -> dict:
        """The parameters that predictions use, as they are now."""
        return {
            "sigma": float(self.sigma),
            "exact": bool(self.exact),
            "n_components": int(self.n_components),
            "sampler": self.sampler,
            "fit_on": self.fit_on,
        }

    def _cfg(self) -> dict:
        """The parameter values of the fit (the current ones for an older pickle)."""
        return self._params_now() if self._fitted is None else self._fitted

    def _new_map(self):
        cfg = self._cfg()
        return make_feature_map(
            self._method,
            kernel="gaussian",
            n_components=cfg["n_components"],
            lengthscale=1.0 / cfg["sigma"],
            sampler=cfg["sampler"],
            random_state=self._feature_seed,
            n_jobs=self.n_jobs,
        )

    def _fit_map(self, X, Y=None):
        """A new feature map fitted on ``(X, Y)``; its errors in this estimator's terms
        (the map's lengthscale is ``1 / sigma``). With sample weights, the FAVOR# moments
        of the training points (``X`` at :meth:`fit`, ``Y`` per query batch) are the
        weighted ones (:func:`~kernelkit.estimators._weighted_fit.weighted_moments`)."""
        fm = self._new_map()
        p = self._relative_weights()  # the training points' (weighted_moments normalises)
        wx, wy = (p, p) if Y is None else (None, p)  # Y None: X is the training points
        try:
            with weighted_moments(fm, X, Y, wx, wy):
                return fm.fit(X, Y=Y)
        except ValueError as exc:
            if "increase lengthscale" not in str(exc):
                raise
            raise ValueError(
                f"NadarayaWatsonClassifier(sigma={self._cfg()['sigma']:g}): "
                + str(exc).replace(
                    "increase lengthscale", "decrease sigma (the kernel's lengthscale is 1 / sigma)"
                )
            ) from exc

    def _key_side(self, fm):
        """``S^T W R`` (weights ``W = diag(w)``, 1 unweighted), positive features in the
        stabilised form of :func:`nw_key_summary` with ``log w_i`` added to the keys' log
        features (each feature's largest weighted key then still contributes 1)."""
        log_S = log_features(fm, self._X_centred, "y")
        if log_S is not None:
            if self._log_w is not None:
                log_S = log_S + self._log_w[:, None]
            return ("log", *nw_key_summary(log_S, self._R))
        S = fm.transform_y(self._X_centred)  # (L, D), bounded (trig)
        w = self._relative_weights()
        R = self._R if w is None else self._R * w[:, None]
        return ("signed", S.T @ R)

    def _relative_weights(self):
        """The kept training points' weights divided by the largest, ``(L,)`` in (0, 1],
        or None unweighted. The estimate is a ratio of weighted sums, so the common
        factor drops out, and sums of weights ~1e306 (``sum_i w_i S_i``) cannot overflow."""
        return None if self._log_w is None else np.exp(self._log_w - self._log_w.max())

    # ------------------------------------------------------------------ API
    @keep_model_on_error
    def fit(self, X, y, sample_weight=None):
        """Store the training set; draw / fit the features where possible.

        With weights ``w_i`` (``sample_weight``; 1 when None) the class scores are the
        weighted kernel sums

            r*_l(u*) = sum_i w_i K(u*, u_i) [y_i = l],

        so :meth:`decision_function` and :meth:`predict_proba` are the weighted
        Nadaraya-Watson estimates ``sum_i w_i K(u*, u_i) r_i / sum_i w_i K(u*, u_i)``
        (kernel or random-feature estimate ``P S^T`` alike). An integer weight ``k`` is
        the point repeated ``k`` times; points of zero weight are dropped (their labels
        stay in ``classes_``). The centre ``X_mean_`` is the weighted mean, and the
        data-dependent parameters (GERF, SADERF, ADERF, SDERF) are fitted on the weighted
        FAVOR# moments of the training points.

        Parameters
        ----------
        X : array-like of shape (L, d)
        y : array-like of shape (L,)
            Class labels (any hashable, sortable type).
        sample_weight : array-like of shape (L,) or float, optional
            Non-negative, finite, not all zero (a ``ValueError`` naming
            ``sample_weight`` otherwise); NumPy or a torch tensor.

        Returns
        -------
        self : NadarayaWatsonClassifier
        """
        self._validate_params()
        self._method = self._check_params()
        # the checked values the predictions use: a set_params after fit takes effect at
        # the next fit (scikit-learn's convention), never unchecked at predict time
        self._fitted = self._params_now()
        reject_block_iterable(self, X)
        check_raw_labels(type(self).__name__, y)
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse=False)
        w = check_sample_weight(sample_weight, X, type(self).__name__)  # (L,) or None
        self.classes_, y_idx = encode_labels(type(self).__name__, y)
        R = np.zeros((X.shape[0], len(self.classes_)))
        R[np.arange(X.shape[0]), y_idx] = 1.0
        self.X_fit_ = X
        # the kernel depends on differences only: centred inputs keep the exact scores'
        # distances and the features' variance free of a common offset (module docstring)
        with np.errstate(over="ignore"):  # a sum that overflows: no centring
            # (the weights relative to the largest: their sum cannot overflow)
            centre = np.average(X, axis=0, weights=None if w is None else w / w.max())
        self.X_mean_ = np.where(np.isfinite(centre), centre, 0.0)
        self._log_w = None
        if w is not None:  # the points of positive weight, and their log-weights
            keep = w > 0
            X, R, self._log_w = X[keep], R[keep], np.log(w[keep])
        self._X_centred = X - self.X_mean_
        self._R = R  # (L, n) one-hot
        rs = self.random_state
        if isinstance(rs, numbers.Integral) and not isinstance(rs, bool):
            self._feature_seed = int(rs)
        else:  # None / Generator / RandomState: one seed per fit, reused by predictions
            self._feature_seed = int(check_random_state(rs).integers(0, 2**31 - 1))
        self.feature_map_ = None
        self._keys = None
        cfg = self._fitted
        if not cfg["exact"] and (self._method not in DATA_DEPENDENT or cfg["fit_on"] == "train"):
            self.feature_map_ = self._fit_map(self._X_centred)  # (X_train, X_train)
            self._keys = self._key_side(self.feature_map_)
        return self

    def _scores(self, X):
        """Stabilised ``r*`` (Q, n): each row a positive multiple of the true scores."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, accept_sparse=False, reset=False)
        X = X - self.X_mean_  # centred as the training points
        cfg = self._cfg()
        if cfg["exact"]:
            return exact_nw_scores(X, self._X_centred, self._R, cfg["sigma"], log_w=self._log_w)
        if self.feature_map_ is not None:  # rows independent: one slab of features at a time
            fm, keys = self.feature_map_, self._keys
            return predict_in_slabs(
                lambda Xb: self._feature_scores(fm, keys, Xb), X, fm, self.n_jobs
            )
        # paper protocol: x side = query batch, y side = training points
        fm = self._fit_map(X, Y=self._X_centred)
        return self._feature_scores(fm, self._key_side(fm), X)

    @staticmethod
    def _feature_scores(fm, keys, X):
        if keys[0] == "log":
            return nw_query_scores(log_features(fm, X, "x"), keys[1], keys[2])
        return fm.transform(X) @ keys[1]

    def decision_function(self, X):
        """Nadaraya-Watson scores ``r*`` normalised to unit L1 norm per row.

        Parameters
        ----------
        X : array-like of shape (Q, d)

        Returns
        -------
        ndarray of shape (Q, n_classes), or (Q,) for two classes
            Row ``q`` is ``r*_q / sum_l |r*_ql|`` (for positive features and the exact
            kernel: the kernel-weighted class frequencies). For two classes the
            difference ``class 1 - class 0``, positive where class 1 is predicted.
        """
        D = _normalise_rows(self._scores(X))
        if D.shape[1] == 2:
            return D[:, 1] - D[:, 0]
        return D

    def predict_proba(self, X):
        """Class probabilities ``max(r*, 0)`` renormalised per row.

        For positive features and the exact kernel these are the Nadaraya-Watson
        estimates ``r*_l / sum_k r*_k``. Trigonometric features can give negative scores:
        they are clipped at 0; a row with no positive score falls back to
        ``r* - min(r*)`` (same argmax), and to uniform if all scores are equal.

        Parameters
        ----------
        X : array-like of shape (Q, d)
            The query points.

        Returns
        -------
        ndarray of shape (Q, n_classes), rows sum to 1, ``argmax`` equals :meth:`predict`.
        """
        S = self._scores(X)
        P = np.maximum(S, 0.0)
        tot = P.sum(axis=1)
        bad = ~(tot > 0)
        if np.any(bad):
            shifted = S[bad] - S[bad].min(axis=1, keepdims=True)
            flat = ~(shifted.sum(axis=1) > 0)
            shifted[flat] = 1.0
            P[bad] = shifted
            tot = P.sum(axis=1)
        return P / tot[:, None]

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (Q, d)
            The query points.

        Returns
        -------
        ndarray of shape (Q, n_classes)
            ``-inf`` for zero probabilities.
        """
        return log_proba(self.predict_proba(X))

    def predict(self, X):
        """Predicted classes ``classes_[argmax_l r*_l]``.

        Parameters
        ----------
        X : array-like of shape (Q, d)
            The query points.

        Returns
        -------
        ndarray of shape (Q,)
            Entries of ``classes_``.
        """
        scores = self._scores(X)  # checks is-fitted first
        return self.classes_[np.argmax(scores, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
