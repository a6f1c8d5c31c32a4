"""The paper's losses (31) and (32) and its 4/5-1/5 hold-out selection (Sec. 5)."""

from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone

from .._backend import check_random_state
from ._base import _as_float2d, check_xy
from ._basis import BasisCache

__all__ = ["HoldoutResult", "clipped_log_loss", "holdout_select", "second_moment_loss"]


def _real_array(a, name: str) -> np.ndarray:
    """``a`` as a float64 array; ``TypeError`` naming ``name`` unless real numbers."""
    a = np.asarray(a)
    if a.dtype != bool and (not np.issubdtype(a.dtype, np.number) or np.iscomplexobj(a)):
        raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}.")
    return a.astype(np.float64)


def second_moment_loss(M_true, M_pred) -> float:
    """Loss (31): ``mean_i ||M(x_i) - M_hat(x_i)||_F^2 / ||M(x_i)||_F^2``.

    Parameters
    ----------
    M_true, M_pred : array_like, shape (n, ...)
        True and predicted conditional moments (e.g. (n, d, d) second moments).

    Returns
    -------
    float
    """
    M_true = _real_array(M_true, "M_true")
    M_pred = _real_array(M_pred, "M_pred")
    if M_true.shape != M_pred.shape or M_true.ndim == 0:
        raise ValueError(
            f"M_true and M_pred must have the same shape (n, ...), got "
            f"{M_true.shape} and {M_pred.shape}."
        )
    if not (np.all(np.isfinite(M_true)) and np.all(np.isfinite(M_pred))):
        raise ValueError("M_true and M_pred must be finite.")
    n = M_true.shape[0]
    if n == 0:
        raise ValueError("M_true and M_pred are empty: the mean loss (31) is undefined.")
    num = ((M_true - M_pred) ** 2).reshape(n, -1).sum(axis=1)
    den = (M_true**2).reshape(n, -1).sum(axis=1)
    if np.any(den == 0):
        raise ValueError("M_true has a zero row: the relative loss (31) is undefined.")
    return float(np.mean(num / den))


def clipped_log_loss(labels, proba, eta: float = 1e-12) -> float:
    """Loss (32), the clipped logistic loss for probabilities that may leave [0, 1]::

        -mean[ I log min(1, max(p, eta)) + (1 - I) log max(eta, min(1 - p, 1)) ]

    Parameters
    ----------
    labels : array_like of {0, 1} or bool, shape (n,)
    proba : array_like, shape (n,)
        Predicted ``P(I = 1 | x)`` (possibly signed)
    eta : float, default=1e-12
        Clipping level in (0, 1).

    Returns
    -------
    float
    """
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
        raise TypeError(f"eta must be a float in (0, 1), got {eta!r}.")
    if not 0.0 < eta < 1.0:
        raise ValueError(f"eta must lie in (0, 1) (a clipping level of (32)), got {eta}.")
    labels = np.asarray(labels)
    if not (np.issubdtype(labels.dtype, np.number) or labels.dtype == bool):
        raise TypeError(f"labels must be 0/1 or bool, got dtype {labels.dtype}.")
    labels = labels.astype(np.float64).reshape(-1)
    proba = _real_array(proba, "proba").reshape(-1)
    if labels.shape != proba.shape:
        raise ValueError(
            f"labels and proba must have the same length, got {labels.shape} and {proba.shape}."
        )
    if labels.size == 0:
        raise ValueError("labels and proba are empty: the mean loss (32) is undefined.")
    if not np.all(np.isfinite(proba)):
        raise ValueError("proba contains NaN or infinity.")
    if not np.all((labels == 0) | (labels == 1)):
        raise ValueError("labels must be 0/1.")
    pos = np.log(np.minimum(1.0, np.maximum(proba, eta)))
    neg = np.log(np.maximum(eta, np.minimum(1.0 - proba, 1.0)))
    return float(-np.mean(labels * pos + (1.0 - labels) * neg))


@dataclass
class HoldoutResult:
    """Outcome of :func:`holdout_select`.

    Attributes
    ----------
    best_params : dict
    best_loss : float
    best_estimator : estimator (refit on all data if ``refit``, else on the 4/5 split)
    results : list of (params, loss), in grid order
    """

    best_params: dict
    best_loss: float
    best_estimator: object
    results: list = field(default_factory=list)


def _check_labels(X, Y):
    """``X`` (n, d) as float64 and the labels ``Y`` (n,) (or (n, 1)) as given, n >= 5."""
    X = _as_float2d(X, "X")
    y = np.asarray(Y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(
            f"Y must hold one class label per sample for a classifier, shape (n,) or (n, 1), "
            f"got shape {y.shape}."
        )
    if y.shape[0] != X.shape[0]:
        raise ValueError(
            f"X and Y must have the same number of rows (samples), got X with {X.shape[0]} "
            f"and Y with {y.shape[0]}."
        )
    if X.shape[0] < 5:
        raise ValueError(f"at least 5 samples are needed, got n_samples = {X.shape[0]}.")
    return X, y


def _grid(param_grid):
    if isinstance(param_grid, dict):
        param_grid = [param_grid]
    if isinstance(param_grid, (str, bytes)) or not hasattr(param_grid, "__iter__"):
        raise TypeError(
            f"param_grid must be a dict or a list of dicts, got {type(param_grid).__name__}."
        )
    for g in param_grid:
        if not isinstance(g, dict):
            raise TypeError(
                f"param_grid must be a dict or a list of dicts, got an item of type "
                f"{type(g).__name__}."
            )
        for k, v in g.items():
            if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                raise TypeError(
                    f"param_grid[{k!r}] must be a list (or array) of values, got {v!r}; wrap "
                    "a single value in a list."
                )
        keys = list(g)
        for values in itertools.product(*(list(g[k]) for k in keys)):
            yield dict(zip(keys, values, strict=True))


def _check_two_classes(labels, what: str, event: bool) -> None:
    """A ``ValueError`` naming ``what`` (the training split, or all samples) where the
    labels a classifier would be fitted on hold a single class."""
    try:
        classes = np.unique(labels)
    except TypeError:  # labels that cannot be sorted: the classifier names them
        return
    if classes.size >= 2:
        return
    if event:
        raise ValueError(
            f"{what} holds only samples with the event Y[:, 0] <= threshold "
            f"{'true' if classes[0] else 'false'}, so the classifier cannot be fitted on it: "
            "choose a threshold inside the range of Y[:, 0] with samples on both sides in "
            "the training split (another random_state or test_fraction moves the split)."
        )
    raise ValueError(
        f"{what} holds only the label {classes.tolist()[0]!r}, so the classifier cannot be fitted "
        "on it: each label needs samples in the training split (another random_state or "
        "test_fraction moves the split)."
    )


def _is_classifier_like(est):
    return hasattr(est, "predict_proba") and not hasattr(est, "conditional_probability")


def _loss(est, X, Y, loss, threshold, true_moment):
    if callable(loss):
        return float(loss(est, X, Y))
    if loss is None:
        return est.validation_loss(X, Y) if hasattr(est, "validation_loss") else -est.score(X, Y)
    if loss == "second_moment":
        M_true = np.asarray(true_moment(X), dtype=np.float64)
        M_pred = est.conditional_expectation(lambda t: t[:, :, None] * t[:, None, :], X)
        return second_moment_loss(M_true, M_pred)
    # classification: event {y_1 <= threshold}
    labels = Y[:, 0] <= threshold
    if _is_classifier_like(est):
        proba = est.predict_proba(X)[:, list(est.classes_).index(True)]
    else:
        proba = est.conditional_probability(lambda t: t[:, 0] <= threshold, X)
    return clipped_log_loss(labels, proba)


def holdout_select(
    estimator,
    param_grid,
    X,
    Y,
    *,
    loss=None,
    threshold=None,
    true_moment=None,
    test_fraction: float = 0.2,
    random_state=0,
    refit: bool = True,
) -> HoldoutResult:
    """The paper's hold-out selection: fit on 4/5 of the data, validate on 1/5 (Sec. 5).

    Parameters
    ----------
    estimator : JointDistribution, ConditionalMeanEmbedding, PolynomialJointDistribution
        or KernelLogisticRegression (cloned for every grid point).
    param_grid : dict or list of dicts of lists (as scikit-learn's ``ParameterGrid``)
    X : array_like, shape (n, d_X)
    Y : array_like, shape (n, d_Y) or (n,)
        For a classifier (KLR) with ``loss`` None or a callable: its class labels (any
        type), passed to ``fit`` and ``score`` as given.
    loss : None, "second_moment", "classification" or callable
        * ``None``: the estimator's own held-out loss (``-score``; for JDL the L2 loss
          of (8) up to a constant).
        * ``"second_moment"``: loss (31) of ``E[Y Y^T | x]`` against ``true_moment(X_val)``
          (callable returning (n_val, d_Y, d_Y)).
        * ``"classification"``: loss (32) for the event ``Y[:, 0] <= threshold``;
          classifiers (KLR) are fitted on the labels ``Y[:, 0] <= threshold``.
        * callable ``loss(fitted_estimator, X_val, Y_val) -> float``.
    threshold : float, for ``loss="classification"`` (Sec. 5.2: the 1% quantile of y)
    true_moment : callable, for ``loss="second_moment"``
    test_fraction : float, default=0.2
    random_state : int, Generator or None
        Seed of the random split.
    refit : bool, default=True
        Refit the best parameters on all n points (the paper does not say; library choice).

    Returns
    -------
    HoldoutResult

    Raises
    ------
    ValueError
        Among others: a classifier (KLR) whose training split (or, for the refit, the
        whole data) holds a single class, e.g. an event ``Y[:, 0] <= threshold`` whose
        few samples all fell into the validation fifth.

    Notes
    -----
    Estimators with a ``basis_cache`` parameter left at None share a temporary
    :class:`~kernelkit.distributions.BasisCache` over the grid, so a grid over ``reg``
    factorises each kernel matrix once; results are unchanged.
    """
    # a classifier (KLR) with its own or a callable loss is fitted on the labels as given
    labels = _is_classifier_like(estimator) and loss != "classification"
    if labels and loss == "second_moment":
        raise ValueError(
            f"loss='second_moment' needs conditional expectations, which the classifier "
            f"{type(estimator).__name__} does not give; use loss=None, 'classification' "
            "or a callable."
        )
    X, Y = _check_labels(X, Y) if labels else check_xy(X, Y, min_samples=5)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real):
        raise TypeError(f"test_fraction must be a real number in (0, 1), got {test_fraction!r}.")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}.")
    if loss == "second_moment" and not callable(true_moment):
        raise ValueError("loss='second_moment' needs a callable true_moment(X) -> (n, d, d).")
    if loss == "classification":
        if threshold is None:
            raise ValueError("loss='classification' needs a threshold.")
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
            raise TypeError(f"threshold must be a real number, got {threshold!r}.")
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold}.")
    if not (loss is None or callable(loss) or loss in ("second_moment", "classification")):
        raise ValueError(f"unknown loss {loss!r}.")
    n = X.shape[0]
    rng = check_random_state(random_state)
    perm = rng.permutation(n)
    n_val = max(1, round(test_fraction * n))
    if n - n_val < 2:
        raise ValueError(
            f"test_fraction={test_fraction} of n = {n} samples holds out {n_val}, leaving "
            f"{n - n_val} to train on (at least 2 are needed): lower test_fraction."
        )
    val, tr = perm[:n_val], perm[n_val:]

    def fit(est, Xf, Yf, what):
        if loss == "classification" and _is_classifier_like(est):
            _check_two_classes(Yf[:, 0] <= threshold, what, event=True)
            return est.fit(Xf, Yf[:, 0] <= threshold)
        if labels:
            _check_two_classes(Yf, what, event=False)
        return est.fit(Xf, Yf)

    split = (
        f"the training split ({tr.size} of {n} samples; test_fraction={test_fraction}, "
        f"random_state={random_state!r})"
    )

    # the grid fits share their kernel bases (one pivoted Cholesky per side and
    # lengthscale) unless the caller passed a cache of their own
    own_cache = None
    if (
        "basis_cache" in estimator.get_params(deep=False)
        and estimator.get_params(deep=False)["basis_cache"] is None
    ):
        own_cache = BasisCache()
    results = []
    best = (np.inf, None, None)
    for params in _grid(param_grid):
        est = clone(estimator).set_params(**params)
        if own_cache is not None and "basis_cache" not in params:
            est.set_params(basis_cache=own_cache)
        fit(est, X[tr], Y[tr], split)
        value = _loss(est, X[val], Y[val], loss, threshold, true_moment)
        results.append((params, value))
        if np.isfinite(value) and value < best[0]:
            best = (value, params, est)
    if not results:
        raise ValueError(
            f"param_grid has no grid points (a list of values is empty): {param_grid!r}."
        )
    if best[1] is None:
        raise ValueError("every grid point gave a non-finite validation loss.")
    best_est = best[2]
    if own_cache is not None and best_est.get_params(deep=False)["basis_cache"] is own_cache:
        best_est.set_params(basis_cache=None)  # the fitted bases stay; the cache is freed
    if refit:
        best_est = fit(clone(estimator).set_params(**best[1]), X, Y, f"all {n} samples")
    return HoldoutResult(
        best_params=best[1], best_loss=best[0], best_estimator=best_est, results=results
    )
