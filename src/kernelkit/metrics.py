"""Error metrics for kernel approximation and approximate GP inference.

From Wacker, Kanagawa & Filippone, "Improved Random Features for Dot Product Kernels",
Sec. 6.1.3 and App. D.5 (equation numbers refer to the paper; errata as numbered in
``docs/derivations/dot_product.md``):

* :func:`relative_frobenius_error` – eq. 58, ``|K - Re K_hat|_F / |K|_F``;
* :func:`gaussian_kl` – eq. 93 corrected (erratum 5): KL between diagonal Gaussians of the
  exact and approximate posterior predictive distributions;
* :func:`mean_negative_log_likelihood` – MNLL of regression (Gaussian predictive with
  noise) or classification (predicted class probabilities);
* :func:`normalized_mse` – MSE divided by the variance of the test targets;
* :func:`error_rate` – fraction of misclassified points (argmax rule).

All functions take NumPy-compatible arrays and return Python floats (or arrays for
``reduction="none"``); shape mismatches raise :class:`ValueError`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ._backend import to_numpy

__all__ = [
    "error_rate",
    "gaussian_kl",
    "mean_negative_log_likelihood",
    "normalized_mse",
    "relative_frobenius_error",
]


def _as_array(a, name: str, *, allow_complex: bool = False) -> np.ndarray:
    if a is None:
        raise ValueError(f"{name} is None.")
    arr = to_numpy(a)
    if arr.dtype == object:
        raise TypeError(f"{name} must be numeric, got dtype object.")
    if np.iscomplexobj(arr) and not allow_complex:
        raise TypeError(f"{name} must be real-valued, got complex dtype {arr.dtype}.")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}.")
    return arr


def _same_shape(arrays: dict) -> tuple:
    shapes = {k: v.shape for k, v in arrays.items()}
    first = next(iter(shapes.values()))
    if any(s != first for s in shapes.values()):
        desc = ", ".join(f"{k} {s}" for k, s in shapes.items())
        raise ValueError(f"Shape mismatch: {desc}; these must have the same shape.")
    return first


def _check_finite(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity.")


# ---------------------------------------------------------------------- kernels
def _scaled_by_max(ref, *arrays, axis=None):
    """``arrays`` times ``2^-e`` with ``2^(e-1) <= max |ref| < 2^e`` (exact: a power of
    two), so that ``ref`` peaks in ``[1/2, 1)``; entries beyond the range become ``inf``,
    without a warning. ``np.ldexp`` on the arrays themselves: the factor ``2^-e`` alone
    overflows for a subnormal ``ref``. ``axis=0``: one ``e`` per column (the maximum over
    the rows), broadcast along them."""
    e = np.frexp(np.max(np.abs(ref), axis=axis))[1]
    with np.errstate(over="ignore"):
        return tuple(np.ldexp(a, -e) for a in arrays)


def relative_frobenius_error(K, K_hat) -> float:
    """Relative Frobenius norm error of an approximate kernel matrix (eq. 58).

    ``sqrt(sum_ij (K_ij - Re K_hat_ij)^2) / sqrt(sum_ij K_ij^2)``. The imaginary part of a
    complex ``K_hat`` is discarded, as in the paper (Sec. 6.1.3).

    Parameters
    ----------
    K : array, shape (n, m)
        Exact (real) kernel matrix.
    K_hat : array, shape (n, m)
        Approximation, real or complex.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Shapes differ, non-2-D or empty input, non-finite entries, or ``K`` is all zeros.
        (The norms are taken at a common power-of-two scale, so the ratio is exact for
        any magnitude of ``K``.)
    """
    K = _as_array(K, "K")
    K_hat = _as_array(K_hat, "K_hat", allow_complex=True)
    if K.ndim != 2:
        raise ValueError(f"K must be a 2-D kernel matrix, got shape {K.shape}.")
    _same_shape({"K": K, "K_hat": K_hat})
    K_hat = np.real(K_hat)
    K = K.astype(np.float64, copy=False)
    _check_finite(K, "K")
    _check_finite(K_hat, "K_hat")
    if K.size == 0:
        raise ValueError(f"K is empty (shape {K.shape}): the relative error is undefined.")
    if not np.any(K):
        raise ValueError("K is all zeros: the relative error is undefined.")
    # the ratio is scale-free: a common power-of-two scale keeps the sums of squares in range
    Ks, K_hats = _scaled_by_max(K, K, K_hat.astype(np.float64, copy=False))
    with np.errstate(over="ignore"):
        diff = Ks - K_hats  # (n, m); inf only where the error is beyond the range
    # the error's own power-of-two scale too: K_hat far larger than K (a blown-up
    # approximation) would overflow the sum of squares of diff
    if not np.all(np.isfinite(diff)) or not np.any(diff):
        return float(np.linalg.norm(diff) / np.linalg.norm(Ks))
    e = int(np.frexp(np.max(np.abs(diff)))[1])
    with np.errstate(over="ignore"):
        return float(np.ldexp(np.linalg.norm(np.ldexp(diff, -e)) / np.linalg.norm(Ks), e))


# ---------------------------------------------------------------------- KL
_DIRECTIONS = ("exact||approx", "approx||exact")


def gaussian_kl(
    mu_e, var_e, mu_a, var_a, direction: str = "exact||approx", reduction: str = "mean"
):
    """KL divergence between diagonal Gaussian posteriors (eq. 93, corrected).

    Erratum 5 (``docs/derivations/dot_product.md``): eq. 93 is labelled ``KL[appr || exact]``
    but its printed terms are not a KL divergence (they can be negative). The default
    here is

    ``KL[N(mu_e, var_e) || N(mu_a, var_a)] = 1/2 (var_e/var_a + log(var_a/var_e) - 1
    + (mu_e - mu_a)^2 / var_a)``

    per point — "exact || approx", which matches the printed terms with the sign of the log
    fixed. ``direction="approx||exact"`` gives ``1/2 (var_a/var_e + log(var_e/var_a) - 1 +
    (mu_e - mu_a)^2 / var_e)``.

    Parameters
    ----------
    mu_e, var_e : array, shape (n,) or (n, C)
        Posterior predictive mean and variance of the exact GP at ``n`` test points (for
        GP classification: the latent GPs of ``C`` classes).
    mu_a, var_a : array, same shape
        Those of the approximate GP.
    direction : {"exact||approx", "approx||exact"}
    reduction : {"mean", "sum", "none"}
        ``"mean"``: average over points and classes (default; independent of the number of
        test points); ``"sum"``: sum over points as in eq. 93, then the average over
        classes (Sec. 6.1.3); ``"none"``: the per-entry array.

    Returns
    -------
    float, or ndarray of the input shape for ``reduction="none"``; always ``>= 0``.

    Raises
    ------
    ValueError
        Shape mismatch, empty input, non-positive variances, non-finite values, unknown
        options.
    """
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}.")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}.")
    arrs = {
        "mu_e": _as_array(mu_e, "mu_e"),
        "var_e": _as_array(var_e, "var_e"),
        "mu_a": _as_array(mu_a, "mu_a"),
        "var_a": _as_array(var_a, "var_a"),
    }
    shape = _same_shape(arrs)
    if len(shape) not in (1, 2):
        raise ValueError(f"Inputs must have shape (n,) or (n, C), got {shape}.")
    m_e, v_e, m_a, v_a = (np.asarray(a, dtype=np.float64) for a in arrs.values())
    for name, a in zip(arrs, (m_e, v_e, m_a, v_a), strict=True):
        _check_finite(a, name)
    if np.any(v_e <= 0) or np.any(v_a <= 0):
        raise ValueError("Variances must be positive (var_e > 0 and var_a > 0).")
    if direction == "approx||exact":  # swap the roles: KL[N(mu_a, v_a) || N(mu_e, v_e)]
        m_e, v_e, m_a, v_a = m_a, v_a, m_e, v_e
    if m_e.size == 0:
        raise ValueError("mu_e, var_e, mu_a and var_a are empty: the KL divergence is undefined.")
    with np.errstate(over="ignore", under="ignore"):
        r = v_e / v_a
        # log r from the two logs: the quotient may overflow or underflow, its log does not
        log_r = np.log(v_e) - np.log(v_a)
        # the mean term as a square of a ratio: (m_e - m_a)^2 alone may overflow
        kl = 0.5 * (r - log_r - 1.0 + ((m_e - m_a) / np.sqrt(v_a)) ** 2)  # r - log r - 1 >= 0
    kl = np.maximum(kl, 0.0)  # rounding
    if reduction == "none":
        return kl
    if reduction == "sum":
        return float(np.mean(np.sum(kl, axis=0)))
    return float(np.mean(kl))


# ---------------------------------------------------------------------- likelihoods
def mean_negative_log_likelihood(
    y_true, y_mean=None, y_var=None, *, proba=None, noise_var=0.0, labels=None
) -> float:
    """Mean negative log likelihood (MNLL) of test targets under a predictive distribution.

    Regression (``y_mean``, ``y_var``):
    ``-mean_i log N(y_i | mu_i, var_i + noise_var)`` (Sec. 6.1.3; the noise variance is
    added to the latent predictive variance).

    Classification (``proba``): ``-mean_i log p_i[y_i]`` with ``p`` the predicted class
    probabilities (for the Milios et al. GP classifier, the average of Monte Carlo softmax
    samples). Probabilities are clipped below at the smallest positive float64, so a
    confidently wrong prediction costs at most ~708.

    Parameters
    ----------
    y_true : array, shape (n,) (or (n, T) for multi-output regression)
        Regression targets, or class labels.
    y_mean : array, same shape as ``y_true``
    y_var : array, shape (n,) or same shape as ``y_true``
        Latent predictive variance (``> 0`` after adding ``noise_var``).
    proba : array, shape (n, C)
        Class probabilities (rows summing to 1 to within the square root of the dtype's
        machine epsilon, else ``ValueError``); give it *instead of* ``y_mean``/``y_var``.
    noise_var : float, default=0.0
        Observation noise variance added to ``y_var``.
    labels : array, shape (C,), optional
        The class of each column of ``proba`` (default ``0 .. C-1``).

    Returns
    -------
    float
    """
    if proba is not None:
        y = to_numpy(y_true)
        if y_mean is not None or y_var is not None:
            raise ValueError(
                "Give either proba (classification) or y_mean and y_var (regression), not both."
            )
        P_in = _as_array(proba, "proba")
        P = np.asarray(P_in, dtype=np.float64)
        if P.ndim != 2:
            raise ValueError(f"proba must have shape (n, C), got {P.shape}.")
        if y.ndim != 1 or y.shape[0] != P.shape[0]:
            raise ValueError(
                f"Shape mismatch: y_true {y.shape}, proba {P.shape}; expected "
                "y_true of shape (n,) for proba of shape (n, C)."
            )
        if P.shape[0] == 0:
            raise ValueError("proba is empty: the MNLL needs at least one point.")
        _check_finite(P, "proba")
        if np.any(P < 0) or np.any(P > 1 + 1e-9):
            raise ValueError("proba must lie in [0, 1].")
        # rows must be distributions (to the rounding of the input's dtype, as scikit-learn's
        # log_loss checks): unnormalised scores would give a silently wrong MNLL
        in_dtype = P_in.dtype if P_in.dtype.kind == "f" else np.dtype(np.float64)
        tol = math.sqrt(float(np.finfo(in_dtype).eps))
        row_sums = np.sum(P, axis=1)  # (n,)
        bad = np.abs(row_sums - 1.0) > tol
        if np.any(bad):
            i = int(np.argmax(bad))
            raise ValueError(
                f"proba rows must sum to 1 (class probabilities); row {i} sums to "
                f"{row_sums[i]:.6g}. Normalise the scores first (e.g. a softmax)."
            )
        idx = _label_index(y, labels, P.shape[1])
        p = P[np.arange(P.shape[0]), idx]
        # in [tiny, 1]: a probability a rounding above 1 (tolerated above) counts as 1,
        # so the loss is never negative
        return float(-np.mean(np.log(np.clip(p, np.finfo(np.float64).tiny, 1.0))))
    if y_mean is None or y_var is None:
        raise ValueError("Regression MNLL needs y_mean and y_var (or give proba).")
    y = _as_array(y_true, "y_true")
    mu = _as_array(y_mean, "y_mean")
    var = np.asarray(_as_array(y_var, "y_var"), dtype=np.float64)
    if mu.shape != y.shape:
        raise ValueError(f"Shape mismatch: y_true {y.shape}, y_mean {mu.shape}.")
    if y.ndim == 0 or y.shape[0] == 0:
        raise ValueError(f"y_true must have shape (n,) or (n, T) with n >= 1, got {y.shape}.")
    if var.shape != y.shape and not (var.ndim == 1 and var.shape[0] == y.shape[0]):
        allowed = f"{y.shape}" if y.ndim == 1 else f"{y.shape} or ({y.shape[0]},)"
        raise ValueError(f"Shape mismatch: y_var {var.shape} must be {allowed}.")
    if var.shape != y.shape:
        var = var.reshape((-1,) + (1,) * (y.ndim - 1))
    y = np.asarray(y, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    for name, a in (("y_true", y), ("y_mean", mu), ("y_var", var)):
        _check_finite(a, name)
    if isinstance(noise_var, np.ndarray) and noise_var.ndim == 0 and noise_var.dtype.kind in "iuf":
        noise_var = noise_var.item()  # a 0-d array of a real number
    if isinstance(noise_var, bool) or not isinstance(noise_var, numbers.Real):
        raise TypeError(f"noise_var must be a real number, got {noise_var!r}.")
    noise_var = float(noise_var)
    if not (math.isfinite(noise_var) and noise_var >= 0):
        raise ValueError(f"noise_var must be a non-negative float, got {noise_var}.")
    s2 = var + noise_var
    if np.any(s2 <= 0):
        raise ValueError("y_var + noise_var must be positive.")
    with np.errstate(over="ignore"):  # inf only where the answer is beyond the range
        nll = 0.5 * (np.log(2.0 * np.pi * s2) + ((y - mu) / np.sqrt(s2)) ** 2)
    return float(np.mean(nll))


def _label_index(y, labels, n_classes: int) -> np.ndarray:
    if labels is None:
        if (
            not np.issubdtype(y.dtype, np.number)
            or y.dtype == bool
            or not np.all(np.equal(np.mod(y, 1), 0))
        ):
            raise ValueError("y_true must hold integer class indices 0..C-1 (or pass labels=).")
        idx = y.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n_classes):
            raise ValueError(
                f"Class indices must lie in 0..{n_classes - 1}; got "
                f"{idx.min()}..{idx.max()} (pass labels= to map classes)."
            )
        return idx
    labels = np.asarray(labels)
    if labels.shape != (n_classes,):
        raise ValueError(f"labels must have shape ({n_classes},), got {labels.shape}.")
    order = np.argsort(labels, kind="stable")
    pos = np.searchsorted(labels[order], y)
    pos = np.clip(pos, 0, n_classes - 1)
    found = labels[order][pos] == y
    if not np.all(found):
        raise ValueError(f"y_true contains classes not in labels: {np.unique(y[~found])}.")
    return order[pos]


def normalized_mse(y_true, y_pred) -> float:
    """Normalised mean squared error, ``mean (y - y_pred)^2 / var(y)``.

    The variance is that of the test targets ``y_true`` (population variance, ddof=0;
    Sec. 6.1.3). For multi-output targets, the NMSE of each output (its MSE over its own
    variance), averaged over the outputs.

    Parameters
    ----------
    y_true : array, shape (n,) or (n, T)
    y_pred : array, same shape

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Shape mismatch, fewer than 2 points, non-finite values or constant targets.
    """
    y = np.asarray(_as_array(y_true, "y_true"), dtype=np.float64)
    p = np.asarray(_as_array(y_pred, "y_pred"), dtype=np.float64)
    _same_shape({"y_true": y, "y_pred": p})
    if y.ndim not in (1, 2) or y.shape[0] < 2 or (y.ndim == 2 and y.shape[1] == 0):
        raise ValueError(
            f"y_true must have shape (n,) or (n, T) with n >= 2 and T >= 1, got {y.shape}."
        )
    _check_finite(y, "y_true")
    _check_finite(p, "y_pred")
    # each output's ratio is scale-free: a power-of-two scale per output (column) keeps
    # its squares in range (one scale for all let a small-scale output underflow)
    y, p = _scaled_by_max(y, y, p, axis=0)
    var = np.var(y, axis=0)
    if np.any(var == 0):
        raise ValueError("y_true is constant: the normalised MSE is undefined.")
    return float(np.mean(np.mean((y - p) ** 2, axis=0) / var))


def error_rate(y_true, y_pred, labels=None) -> float:
    """Fraction of misclassified points (multiply by 100 for the paper's percentage).

    Parameters
    ----------
    y_true : array, shape (n,)
        True labels.
    y_pred : array, shape (n,) or (n, C)
        Predicted labels, or class scores / probabilities, in which case the prediction is
        the argmax (the paper does not state a decision rule; library choice), mapped through
        ``labels`` (default: column index; ``y_true`` must then hold indices ``0 .. C-1``).
    labels : array, shape (C,), optional

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        Shape mismatch, empty input, labels or class scores that are not finite, or a 2-D
        ``y_pred`` with one column (labels or scores? pass labels as shape (n,)).
    """
    y = to_numpy(y_true)  # torch tensors too (detached; bfloat16 as float32)
    p = to_numpy(y_pred)
    if y.ndim != 1:
        raise ValueError(f"y_true must have shape (n,), got {y.shape}.")
    if p.ndim == 2:
        if p.shape[0] != y.shape[0]:
            raise ValueError(f"Shape mismatch: y_true {y.shape}, y_pred {p.shape}.")
        if not (np.issubdtype(p.dtype, np.number) and np.all(np.isfinite(p))):
            raise ValueError(
                "y_pred (class scores) must be finite numbers: argmax of NaN is undefined."
            )
        if p.shape[1] < 2:
            raise ValueError(
                f"y_pred of shape {p.shape} is ambiguous: pass predicted labels of shape "
                f"(n,) (e.g. y_pred.ravel()) or class scores of shape (n, C) with C >= 2."
            )
        idx = np.argmax(p, axis=1)
        if labels is not None:
            labels = np.asarray(labels)
            if labels.shape != (p.shape[1],):
                raise ValueError(f"labels must have shape ({p.shape[1]},), got {labels.shape}.")
            p = labels[idx]
        else:  # column indices: y_true must be indices too (strings never match them)
            if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
                raise ValueError("y_true contains NaN or infinity: not a class label.")
            _label_index(y, None, p.shape[1])
            p = idx
    elif p.shape != y.shape:
        raise ValueError(f"Shape mismatch: y_true {y.shape}, y_pred {p.shape}.")
    if y.shape[0] == 0:
        raise ValueError("y_true is empty.")
    for name, a in (("y_true", y), ("y_pred", p)):  # NaN != NaN: a silent miscount
        if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
            raise ValueError(f"{name} contains NaN or infinity: not a class label.")
    numeric = "biufc"
    if (y.dtype.kind in numeric and p.dtype.kind in "US") or (
        y.dtype.kind in "US" and p.dtype.kind in numeric
    ):  # 1 != "1" everywhere: every point would count as an error
        raise ValueError(
            f"y_true ({y.dtype}) and y_pred ({p.dtype}) mix label types (numbers and "
            "strings): convert one, e.g. y_pred.astype(y_true.dtype)."
        )
    return float(np.mean(p != y))
