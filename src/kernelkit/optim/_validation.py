"""Input checks shared by the public functions of :mod:`kernelkit.optim`.

Every check costs at most one pass over its array (most are O(1) shape checks; data
matrices are checked through their logits, see :func:`check_logits`). A violation raises
``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape, value or range) whose
message names the argument.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import (
    check_all_finite,
    device,
    float_dtype,
    get_namespace,
    is_torch_array,
    to_numpy,
    validate_positive_float,
    validate_positive_int,
)

__all__ = [
    "check_array",
    "check_labels",
    "check_logits",
    "check_mask",
    "check_nonneg_float",
    "check_problem",
    "namespace",
    "validate_positive_float",
    "validate_positive_int",
]


def _as_array(a, name: str):
    """``a`` itself if it is an array-API array (NumPy, torch, ...), else ``np.asarray(a)``."""
    if a is None:
        raise TypeError(f"{name} must be an array, got None.")
    if is_torch_array(a) or hasattr(a, "__array_namespace__"):
        return a
    try:
        return np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} could not be converted to an array: {exc}") from exc


def check_array(
    a,
    name: str,
    shape: str,
    *,
    ndim: int | tuple[int, ...] | None = 2,
    allow_empty: bool = False,
    check_finite: bool = True,
):
    """A real floating array: not complex, bool or object; ``ndim`` dimensions; finite.

    Parameters
    ----------
    a : array_like
    name : str
        Argument name for the messages.
    shape : str
        The expected shape, for the messages (e.g. ``"(m, p)"``).
    ndim : int or tuple of int or None
        Accepted numbers of dimensions (None: any).
    allow_empty : bool
        Whether a size-0 array is accepted.
    check_finite : bool
        Check for NaN and infinity (callers that see the data through finite logits
        pass False; see :func:`check_logits`).

    Returns
    -------
    array
        Same backend and device; floating dtype (float32 and float64 are kept, integers
        become the default float).
    """
    a = _as_array(a, name)
    if isinstance(a, np.ndarray) and a.dtype.kind not in "biufc":
        raise TypeError(f"{name} must be a real numeric array, got dtype {a.dtype}.")
    xp = get_namespace(a)
    if xp.isdtype(a.dtype, "complex floating"):
        raise ValueError(
            f"Complex data not supported: {name} must be real-valued, got dtype {a.dtype}."
        )
    if xp.isdtype(a.dtype, "bool") or not xp.isdtype(a.dtype, ("real floating", "integral")):
        raise TypeError(f"{name} must be a real numeric array, got dtype {a.dtype}.")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if dims is not None and a.ndim not in dims:
        raise ValueError(
            f"{name} must have shape {shape}, got a {a.ndim}-D array of shape {tuple(a.shape)}."
        )
    if not allow_empty and math.prod(a.shape) == 0:
        raise ValueError(f"{name} is empty (shape {tuple(a.shape)}); expected shape {shape}.")
    dtype = float_dtype(xp, a)
    if a.dtype != dtype:
        a = xp.astype(a, dtype)
    if check_finite:
        try:
            check_all_finite(a, name)
        except ValueError:
            raise ValueError(f"{name} is not finite: it contains NaN or infinity.") from None
    return a


def namespace(arrays: dict):
    """The common array namespace of ``arrays`` ({name: array}); ``TypeError`` if mixed."""
    try:
        return get_namespace(*arrays.values())
    except TypeError as exc:
        raise TypeError(f"{', '.join(arrays)} must be arrays of the same library: {exc}") from exc


def check_nonneg_float(value, name: str) -> float:
    """A finite real number ``>= 0`` (bools rejected), as ``float``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a non-negative float, got {value!r}.")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be non-negative and finite, got {value}.")
    return float(value)


def check_labels(y, n_classes: int, n_samples: int, *, xp=None, like=None, name: str = "y"):
    """Integer class indices ``0..n_classes-1``, shape (n_samples,).

    Two reductions (min and max); the offending labels are listed only on failure. With
    ``xp`` and ``like`` given, labels of another library are moved to ``xp`` on the device
    of ``like``.
    """
    y = _as_array(y, name)
    if isinstance(y, np.ndarray) and y.dtype.kind not in "biufc":
        raise TypeError(f"{name} must hold integer class indices, got dtype {y.dtype}.")
    yxp = get_namespace(y)
    if yxp.isdtype(y.dtype, "bool") or not yxp.isdtype(y.dtype, "integral"):
        raise TypeError(
            f"{name} must hold integer class indices 0..{n_classes - 1}, got dtype {y.dtype}."
        )
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n_samples,), got shape {tuple(y.shape)}.")
    if y.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {y.shape[0]} labels but X has {n_samples} rows (samples); they must match."
        )
    lo, hi = int(yxp.min(y)), int(yxp.max(y))
    if lo < 0 or hi >= n_classes:
        yn = to_numpy(y)
        bad = np.unique(yn[(yn < 0) | (yn >= n_classes)])[:5]
        raise ValueError(
            f"{name} contains labels {bad.tolist()} outside 0..{n_classes - 1} "
            f"(the {n_classes} classes of W)."
        )
    if xp is not None and yxp is not xp:  # labels follow the data's library and device
        y = to_numpy(y)
        if not isinstance(like, np.ndarray):
            y = xp.asarray(y, device=device(like))
    return y


def check_mask(mask, p: int):
    """``mask`` (p,): real and finite (1 for penalised rows, 0 for unpenalised ones)."""
    if mask is None:
        return None
    mask = check_array(mask, "mask", "(p,)", ndim=1, allow_empty=True)
    if mask.shape[0] != p:
        raise ValueError(
            f"mask must have shape (p,) = ({p},) to match W, got shape {tuple(mask.shape)}."
        )
    return mask


def check_problem(W, X, y, lam, mask=None):
    """Validate a multinomial batch ``W`` (p, n), ``X`` (m, p), ``y`` (m,), ``lam``, ``mask``.

    ``mask`` is checked for NaN and infinity here; ``W`` and ``X`` only through the
    logits (:func:`check_logits`), which the callers form anyway.

    Returns
    -------
    xp, W, X, y, lam, mask
    """
    W = check_array(W, "W", "(p, n)", check_finite=False)
    X = check_array(X, "X", "(m, p)", allow_empty=True, check_finite=False)
    xp = namespace({"W": W, "X": X})
    if X.shape[1] != W.shape[0]:
        raise ValueError(
            f"X and W do not match: X has shape {tuple(X.shape)} (m, p) and W shape "
            f"{tuple(W.shape)} (p, n); X.shape[1] must equal W.shape[0]."
        )
    if X.shape[0] == 0:
        raise ValueError(f"X is an empty batch (shape {tuple(X.shape)}); it needs >= 1 row.")
    y = check_labels(y, W.shape[1], X.shape[0], xp=xp, like=X)
    lam = check_nonneg_float(lam, "lam")
    mask = check_mask(mask, W.shape[0])
    return xp, W, X, y, lam, mask


def check_logits(xp, S, W=None, X=None):
    """``ValueError`` unless the (m, n) logits ``S = X W`` are finite.

    NaN or infinity in ``W`` or ``X`` (or an overflow of ``X W``) shows up here at O(m n)
    cost instead of O(m p); only on failure are ``W`` and ``X`` inspected to name the
    culprit.
    """
    if bool(xp.all(xp.isfinite(S))):
        return
    culprit = "W or X contains NaN or infinity (or X W overflows)"
    if W is not None and X is not None:
        if not bool(xp.all(xp.isfinite(W))):
            culprit = "W contains NaN or infinity"
        elif not bool(xp.all(xp.isfinite(X))):
            culprit = "X contains NaN or infinity"
        else:
            culprit = "X and W are finite but X W overflows; scale X or W down"
    raise ValueError(f"the logits X W are not finite: {culprit}.")
