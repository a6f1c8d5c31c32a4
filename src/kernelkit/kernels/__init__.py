"""Exact reference kernels and exact softmax attention.

Everything here is O(n m d) or O(L^2 d) and exists to check the random-feature
approximations against. All functions accept NumPy arrays or torch tensors
(array API) and keep the input's dtype and device (integer input becomes the default
float; mixed float32 / float64 input is computed in float64).

Input checks (one pass over each input): every array must be real (not complex, bool or
object), at least 2-D, non-empty and finite, and the shapes must agree; scalar
hyperparameters must be finite real numbers (positive where a scale is expected).
SciPy sparse matrices are rejected (the kernels are dense); ``np.matrix`` and masked
arrays without masked entries are used as plain arrays.
Violations raise ``TypeError`` (wrong type or dtype: bool, object, strings) or
``ValueError`` (anything else, complex input included, as in scikit-learn), with a
message that names the argument. The kernels never return NaN for valid input:
where the inputs are so large that the squared norms overflow, the exponent is computed
on inputs rescaled by a power of two (exactly), so the Gaussian kernel stays in [0, 1]
and exact attention stays finite; the unbounded kernels (softmax, scaled softmax,
polynomial) raise ``ValueError`` when their values overflow the floating type. The
Gaussian kernel keeps the accuracy of the direct ``|x - y|^2`` on data far from the
origin and for tiny lengthscales (its diagonal on ``X, X`` is exactly 1). Every kernel's
Gram matrix ``K(X, X)`` (``Y`` the same array as ``X``, or equal values of the same shape;
not an ``X`` broadcast against a batch of copies) is exactly symmetric.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse

from .._backend import (
    check_all_finite,
    float_dtype,
    get_namespace,
    is_torch_array,
    validate_positive_float,
    validate_positive_int,
)
from .._backend.gaussian_exponent import (
    all_finite,
    detached,
    gaussian_log_kernel,
    ldexp_saturating,
    max_abs,
    power_of_two_bound,
    row_sq_norms,
)

__all__ = [
    "gaussian_kernel",
    "log_scaled_softmax_kernel",
    "polynomial_kernel",
    "scaled_softmax_kernel",
    "softmax_attention",
    "softmax_kernel",
]


# ----------------------------------------------------------------------------- validation
def _check_array(x, name: str, shape: str = "(..., n, d)"):
    """One array argument: real numeric, at least 2-D, non-empty, finite.

    Returns ``x`` in its floating dtype (dtype policy of :mod:`kernelkit._backend`), same
    backend and device. Lists and other array-likes become NumPy arrays.
    """
    if x is None:
        raise TypeError(f"{name} must be an array of shape {shape}, got None.")
    if scipy.sparse.issparse(x):
        raise TypeError(
            f"{name} is a SciPy sparse {type(x).__name__}: the exact kernels need dense "
            f"arrays; pass {name}.toarray()."
        )
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        if np.ma.is_masked(x):
            raise ValueError(f"{name} is a masked array with masked entries; fill them first.")
        x = np.asarray(x)  # np.matrix, masked arrays: the plain array (matrix `*`, `@` differ)
    if not (is_torch_array(x) or hasattr(x, "__array_namespace__")):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
    if isinstance(x, np.ndarray) and x.dtype.kind not in "biufc":
        raise TypeError(f"{name} must be a real numeric array, got dtype {x.dtype}.")
    xp = get_namespace(x)
    if xp.isdtype(x.dtype, "complex floating"):
        raise ValueError(
            f"Complex data not supported: {name} must be real-valued, got dtype {x.dtype}."
        )
    if xp.isdtype(x.dtype, "bool"):
        raise TypeError(f"{name} must be a real numeric array, got boolean dtype {x.dtype}.")
    if not xp.isdtype(x.dtype, ("real floating", "integral")):
        raise TypeError(f"{name} must be a real numeric array, got dtype {x.dtype}.")
    if x.ndim < 2:
        raise ValueError(
            f"{name} must be an array of shape {shape} (at least 2-D), got a {x.ndim}-D array "
            f"of shape {tuple(x.shape)}; use {name}.reshape(1, -1) for one point"
            + (f", or {name}.reshape(-1, 1) for one value per key" if name == "v" else "")
            + "."
        )
    if math.prod(x.shape) == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); expected shape {shape}.")
    dtype = float_dtype(xp, x)
    if x.dtype != dtype:
        x = xp.astype(x, dtype)
    check_all_finite(x, name)
    return x


def _common(arrays: dict):
    """Namespace of the validated ``arrays`` ({name: array}) and the arrays in one dtype."""
    names = ", ".join(arrays)
    try:
        xp = get_namespace(*arrays.values())
    except TypeError as exc:
        raise TypeError(f"{names} must be arrays of the same library: {exc}") from exc
    dtype = xp.result_type(*arrays.values())
    return xp, [a if a.dtype == dtype else xp.astype(a, dtype) for a in arrays.values()]


def _check_batch_dims(arrays: dict):
    """The leading (batch) dimensions of ``arrays`` must broadcast."""
    try:
        np.broadcast_shapes(*(tuple(a.shape[:-2]) for a in arrays.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {tuple(a.shape)}" for k, a in arrays.items())
        raise ValueError(
            f"the leading (batch) dimensions of {' and '.join(arrays)} do not broadcast: {shapes}."
        ) from None


def _check_pair(X, Y):
    """Validated ``X`` (..., n, d) and ``Y`` (..., m, d), their namespace and common dtype."""
    X = _check_array(X, "X", "(..., n, d)")
    Y = _check_array(Y, "Y", "(..., m, d)")
    if X.shape[-1] != Y.shape[-1]:
        raise ValueError(
            f"X and Y must have the same number of features (last axis): X has shape "
            f"{tuple(X.shape)}, Y has shape {tuple(Y.shape)}."
        )
    _check_batch_dims({"X": X, "Y": Y})
    xp, (X, Y) = _common({"X": X, "Y": Y})
    return xp, X, Y


def _is_gram(xp, X, Y, same: bool) -> bool:
    """Whether ``K(X, Y)`` is a Gram matrix ``K(X, X)``: ``same`` (the caller passed one
    object twice), or equal values in equal shapes. Tensors that require gradients count
    only when they are the same object: for ``Y`` a copy of ``X``, the gradient with
    respect to ``Y`` alone is not that of a mirrored matrix."""
    if same:
        return True
    if tuple(X.shape) != tuple(Y.shape):
        return False
    if is_torch_array(X) and (X.requires_grad or Y.requires_grad):
        return False
    return bool(xp.all(X == Y))


def _pair_values(X, Y, values):
    """``(xp, values(xp, X, Y))`` on the checked inputs (:func:`_check_pair`), (..., n, m).

    For a Gram matrix ``K(X, X)`` (:func:`_is_gram`) ``values`` gets ``X`` twice (one
    scaled copy and one vector of norms) and its result is mirrored (:func:`_mirror`),
    so that every kernel's Gram matrix is exactly symmetric.
    """
    same = X is Y
    xp, X, Y = _check_pair(X, Y)
    if _is_gram(xp, X, Y, same):
        return xp, _mirror(xp, values(xp, X, X))
    return xp, values(xp, X, Y)


def _mirror(xp, K):
    """``K`` (..., n, n) with its upper triangle copied to the lower one: exactly
    symmetric (the Gram matrix of a kernel is; rounding in the matrix product and in the
    norm terms need not be), each entry one of the two computed values.

    A NumPy array is mirrored in place, by cache-sized tiles (a strided transpose of the
    whole matrix costs half the Gaussian kernel); other arrays (torch, where autograd may
    hold ``K``) out of place.
    """
    n = K.shape[-1]
    if isinstance(K, np.ndarray) and K.flags.writeable:
        b = 128
        for i0 in range(0, n, b):  # tiles, not samples: (n / 128)^2 / 2 steps
            i1 = min(i0 + b, n)
            for j0 in range(0, i0, b):  # below the diagonal: the transposed tile above
                K[..., i0:i1, j0 : j0 + b] = np.swapaxes(K[..., j0 : j0 + b, i0:i1], -1, -2)
            D = K[..., i0:i1, i0:i1]  # (..., b, b): its own upper triangle
            D[...] = np.where(np.tri(i1 - i0, k=-1, dtype=bool), np.swapaxes(D, -1, -2), D)
        return K
    i = xp.arange(n)
    upper = i[:, None] <= i[None, :]  # (n, n)
    if hasattr(K, "device"):
        upper = xp.asarray(upper, device=K.device)
    return xp.where(upper, K, xp.matrix_transpose(K))


def _check_real(value, name: str) -> float:
    """A finite real number (bools rejected), as ``float``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}.")
    return float(value)


# ----------------------------------------------------------------------------- numerics
def _scaled_product(xp, X, Y, alpha, a):
    """``a^2 (x^T y + alpha |x|^2 + alpha |y|^2)`` for all pairs, without overflow inside.

    ``X`` and ``Y`` are divided by a common power of two ``2**e`` (exact) so that every
    entry is at most 1 in magnitude; the bracket is then at most ``d (1 + 2 |alpha|)``, and
    the factor ``(a 2**e)^2`` is applied last (an exact zero stays zero, the rest may
    saturate to +-inf, which is the correctly rounded value).
    """
    e = power_of_two_bound(xp, X, Y)
    t = math.ldexp(1.0, -e)
    Xs = X * t
    Ys = Xs if Y is X else Y * t
    inner = Xs @ xp.matrix_transpose(Ys)
    if alpha != 0.0:
        inner = inner + alpha * (
            row_sq_norms(xp, Xs)[..., :, None] + row_sq_norms(xp, Ys)[..., None, :]
        )
    # capped at the largest float: the same values (inner f f saturates either way) and
    # autograd never meets inf * 0
    f = min(ldexp_saturating(a, e), float(xp.finfo(inner.dtype).max))
    with np.errstate(over="ignore", invalid="ignore"):
        out = (inner * f) * f
    return xp.where(inner == 0, xp.zeros_like(inner), out)


def _log_kernel(xp, X, Y, alpha, lengthscale=1.0):
    """``alpha |x/l|^2 + (x/l)^T y/l + alpha |y/l|^2``, never NaN for finite input.

    Direct formula when the squared norms of ``X / l`` and ``Y / l`` are finite (then no
    partial sum can overflow: ``|x^T y| <= |x| |y|``); otherwise :func:`_scaled_product`.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        Xl = X if lengthscale == 1.0 else X / lengthscale
        Yl = Xl if Y is X else Y if lengthscale == 1.0 else Y / lengthscale
        nx = row_sq_norms(xp, Xl)
        ny = nx if Yl is Xl else row_sq_norms(xp, Yl)
    if not (all_finite(xp, nx) and all_finite(xp, ny)):
        return _scaled_product(xp, X, Y, alpha, 1.0 / lengthscale)
    out = Xl @ xp.matrix_transpose(Yl)  # (..., n, m)
    if alpha != 0.0:
        with np.errstate(over="ignore"):  # alpha |x|^2 may saturate: the exact value does
            out = out + alpha * nx[..., :, None] + alpha * ny[..., None, :]
    return out


def _log_scaled(xp, X, Y, alpha):
    """``alpha |x|^2 + x^T y + alpha |y|^2`` for all pairs, shape (..., n, m).

    For ``alpha <= -1/2`` it is written as ``-|x - y|^2 / 2 + (alpha + 1/2)(|x|^2 +
    |y|^2)``: two terms of one sign, the first from :func:`gaussian_log_kernel`, so no
    cancellation (``alpha = -1/2`` is the Gaussian kernel, exactly ``0`` at ``x = y``).
    Otherwise :func:`_log_kernel`.
    """
    if alpha > -0.5:
        return _log_kernel(xp, X, Y, alpha)
    logk = gaussian_log_kernel(xp, X, Y, 1.0)
    beta = alpha + 0.5  # <= 0
    if beta == 0.0:
        return logk
    e = power_of_two_bound(xp, X, Y)
    t = math.ldexp(1.0, -e)
    s = row_sq_norms(xp, X * t)[..., :, None] + row_sq_norms(xp, Y * t)[..., None, :]  # (..., n, m)
    f = min(ldexp_saturating(1.0, e), float(xp.finfo(X.dtype).max))
    with np.errstate(over="ignore", invalid="ignore"):  # saturates at -inf (correct)
        term = (s * max(beta * f, -float(xp.finfo(X.dtype).max))) * f
    return logk + xp.where(s == 0, xp.zeros_like(term), term)


def _exp_checked(xp, logk, func: str, hint: str):
    """``exp(logk)``; ``ValueError`` when a value overflows the floating type."""
    with np.errstate(over="ignore"):
        K = xp.exp(logk)
    if not all_finite(xp, K):
        top = float(xp.max(detached(logk)))
        raise ValueError(
            f"{func} overflows {K.dtype}: the largest exponent is {top:.6g} > "
            f"{math.log(float(xp.finfo(K.dtype).max)):.6g}; {hint}"
        )
    return K


def log_scaled_softmax_kernel(X, Y, alpha: float = 0.0):
    """Logarithm of the scaled softmax kernel, ``alpha*|x|^2 + x.y + alpha*|y|^2``.

    FAVOR# paper, Sec. 2.1: ``K^(alpha)(x, y) = exp(alpha |x|^2 + x^T y + alpha |y|^2)``.

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    alpha : float
        Any finite real; ``0`` gives the softmax kernel, ``-1/2`` the Gaussian kernel.
        For ``alpha <= -1/2`` the value is formed as ``-|x - y|^2 / 2 + (alpha + 1/2)
        (|x|^2 + |y|^2)``, two terms of one sign (no cancellation far from the origin).

    Returns
    -------
    array, shape (..., n, m)
        Never NaN: finite unless the value exceeds the floating range, where it is
        ``+-inf`` (inputs whose squared norms overflow are rescaled exactly). The dot
        product carries the usual rounding error, up to about ``d eps |x| |y|``: where
        that bound itself exceeds the range (``|x| |y|`` beyond ``1e300`` in float64), a
        product whose exact value is small can still round to ``+-inf``.

    Raises
    ------
    TypeError
        ``X`` or ``Y`` has a boolean, object or other non-numeric dtype, or a
        hyperparameter is not a real number (bools included).
    ValueError
        ``X`` or ``Y`` is complex, less than 2-D, empty or not finite; their feature
        dimensions (last axis) differ or their batch dimensions do not broadcast; a
        hyperparameter is out of range (see above).
    """
    alpha = _check_real(alpha, "alpha")
    return _pair_values(X, Y, lambda xp, X, Y: _log_scaled(xp, X, Y, alpha))[1]


def scaled_softmax_kernel(X, Y, alpha: float = 0.0):
    """Scaled softmax kernel ``K^(alpha)(x, y) = exp(alpha|x|^2 + x^T y + alpha|y|^2)``.

    FAVOR# paper, Sec. 2.1 (eq. 1 and the definition of ``K^(alpha)``).

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    alpha : float
        Any finite real.

    Returns
    -------
    array, shape (..., n, m)
        Finite: a value beyond the floating range raises ``ValueError`` (use
        :func:`log_scaled_softmax_kernel` for such inputs).

    Raises
    ------
    TypeError
        ``X`` or ``Y`` has a boolean, object or other non-numeric dtype, or a
        hyperparameter is not a real number (bools included).
    ValueError
        ``X`` or ``Y`` is complex, less than 2-D, empty or not finite; their feature
        dimensions (last axis) differ or their batch dimensions do not broadcast; a
        hyperparameter is out of range (see above).
    """
    alpha = _check_real(alpha, "alpha")
    xp, logk = _pair_values(X, Y, lambda xp, X, Y: _log_scaled(xp, X, Y, alpha))
    return _exp_checked(
        xp,
        logk,
        "scaled_softmax_kernel",
        "scale X and Y down"
        + (f", reduce alpha={alpha:g}" if alpha > 0 else "")
        + " or use log_scaled_softmax_kernel.",
    )


def softmax_kernel(X, Y, lengthscale: float = 1.0):
    """Softmax kernel ``exp(x^T y / lengthscale^2)``, shape (..., n, m).

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    lengthscale : float
        Positive and finite.

    Returns
    -------
    array, shape (..., n, m)
        Finite: a value beyond the floating range raises ``ValueError`` (use
        :func:`log_scaled_softmax_kernel` on ``X / lengthscale``, ``Y / lengthscale``).

    Raises
    ------
    TypeError
        ``X`` or ``Y`` has a boolean, object or other non-numeric dtype, or a
        hyperparameter is not a real number (bools included).
    ValueError
        ``X`` or ``Y`` is complex, less than 2-D, empty or not finite; their feature
        dimensions (last axis) differ or their batch dimensions do not broadcast; a
        hyperparameter is out of range (see above).
    """
    lengthscale = validate_positive_float(lengthscale, "lengthscale")
    xp, logk = _pair_values(X, Y, lambda xp, X, Y: _log_kernel(xp, X, Y, 0.0, lengthscale))
    return _exp_checked(
        xp,
        logk,
        "softmax_kernel",
        "increase lengthscale, scale X and Y down or use log_scaled_softmax_kernel.",
    )


def gaussian_kernel(X, Y, lengthscale: float = 1.0):
    """Gaussian kernel ``exp(-|x - y|^2 / (2 lengthscale^2))``, shape (..., n, m).

    Computed from the expanded square on centred, exactly rescaled inputs (one matrix
    product); pairs where the expansion cancels (near-duplicates far from the data's mean,
    tiny lengthscales) are recomputed from ``x - y``, so every entry carries the accuracy
    of the direct formula.

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    lengthscale : float
        Positive and finite.

    Returns
    -------
    array, shape (..., n, m)
        Entries in [0, 1] for all finite inputs, however large (the exponent is computed
        on exactly rescaled inputs where the squared norms would overflow).

    Raises
    ------
    TypeError
        ``X`` or ``Y`` has a boolean, object or other non-numeric dtype, or a
        hyperparameter is not a real number (bools included).
    ValueError
        ``X`` or ``Y`` is complex, less than 2-D, empty or not finite; their feature
        dimensions (last axis) differ or their batch dimensions do not broadcast; a
        hyperparameter is out of range (see above).
    """
    lengthscale = validate_positive_float(lengthscale, "lengthscale")
    xp, logk = _pair_values(X, Y, lambda xp, X, Y: gaussian_log_kernel(xp, X, Y, lengthscale))
    return xp.exp(logk)


def polynomial_kernel(X, Y, degree: int = 2, coef0: float = 1.0, gamma: float = 1.0):
    """Polynomial kernel ``(gamma x^T y + coef0)^degree``, shape (..., n, m).

    The kernel of the dot-product random features (Wacker et al., eq. 37), with
    scikit-learn's parameter names.

    Parameters
    ----------
    X : array, shape (..., n, d)
    Y : array, shape (..., m, d)
    degree : int
        ``>= 1``.
    coef0 : float
        Any finite real.
    gamma : float
        Positive and finite.

    Returns
    -------
    array, shape (..., n, m)
        Finite: a value beyond the floating range raises ``ValueError``.

    Raises
    ------
    TypeError
        ``X`` or ``Y`` has a boolean, object or other non-numeric dtype, or a
        hyperparameter is not a real number (bools included).
    ValueError
        ``X`` or ``Y`` is complex, less than 2-D, empty or not finite; their feature
        dimensions (last axis) differ or their batch dimensions do not broadcast; a
        hyperparameter is out of range (see above).
    """
    degree = validate_positive_int(degree, "degree", minimum=1)
    coef0 = _check_real(coef0, "coef0")
    gamma = validate_positive_float(gamma, "gamma")

    def values(xp, X, Y):
        with np.errstate(over="ignore", invalid="ignore"):
            return (gamma * (X @ xp.matrix_transpose(Y)) + coef0) ** degree

    xp, K = _pair_values(X, Y, values)
    if not all_finite(xp, K):
        raise ValueError(
            f"polynomial_kernel overflows {K.dtype} for these X, Y, degree={degree}, "
            f"gamma={gamma}, coef0={coef0}; scale X and Y down or lower gamma or degree."
        )
    return K


def _check_mask(mask, S: int):
    """``key_padding_mask``: bool or integer array of shape (..., S); returned as is."""
    if not (is_torch_array(mask) or hasattr(mask, "__array_namespace__")):
        try:
            mask = np.asarray(mask)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"key_padding_mask could not be converted to an array: {exc}") from exc
    if isinstance(mask, np.ndarray) and mask.dtype.kind not in "biu":
        raise TypeError(f"key_padding_mask must be a boolean array, got dtype {mask.dtype}.")
    xp = get_namespace(mask)
    if not xp.isdtype(mask.dtype, ("bool", "integral")):
        raise TypeError(f"key_padding_mask must be a boolean array, got dtype {mask.dtype}.")
    if mask.ndim < 1 or mask.shape[-1] != S:
        raise ValueError(
            f"key_padding_mask must have shape (..., S) with S = {S} keys, got shape "
            f"{tuple(mask.shape)}."
        )
    return mask


def softmax_attention(q, k, v, *, is_causal: bool = False, key_padding_mask=None, scale=None):
    """Exact softmax attention, the reference for linear attention.

    Same convention as :func:`torch.nn.functional.scaled_dot_product_attention`:
    ``softmax(q k^T * scale) v`` with ``scale = 1/sqrt(d)`` by default; the row maximum
    is subtracted before exponentiation. The output is finite for all finite inputs: it is
    a convex combination of the rows of ``v`` (where the logits would overflow, they are
    formed from exactly rescaled ``q`` and ``k`` and the row maximum is subtracted before
    the scale is applied).

    Parameters
    ----------
    q : array, shape (..., L, d)
    k : array, shape (..., S, d)
    v : array, shape (..., S, d_v)
    is_causal : bool
        Query ``i`` attends to keys ``j <= i`` only: the mask ``tril(ones(L, S))``, aligned
        top left as in ``scaled_dot_product_attention`` when ``L != S`` (with ``L > S``
        the last queries see every key).
    key_padding_mask : array of bool, shape (..., S), optional
        ``True`` marks a padded key that no query may attend to. Rows with every key
        masked give zeros.
    scale : float, optional
        Positive and finite.

    Returns
    -------
    array, shape (..., L, d_v)

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` is not a real numeric array (boolean, object), ``is_causal``
        is not a bool, ``scale`` is not a real number, or ``key_padding_mask`` is not a
        boolean (or integer) array.
    ValueError
        ``q``, ``k`` or ``v`` is complex, less than 2-D, empty or not finite; ``q`` and
        ``k`` differ in ``d`` or ``k`` and ``v`` in ``S``; the batch dimensions do not
        broadcast; ``scale`` is not positive and finite; ``key_padding_mask`` does not end
        in ``S``.
    """
    if not isinstance(is_causal, bool | np.bool_):
        raise TypeError(f"is_causal must be a bool, got {is_causal!r}.")
    q = _check_array(q, "q", "(..., L, d)")
    k = _check_array(k, "k", "(..., S, d)")
    v = _check_array(v, "v", "(..., S, d_v)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature dimension d (last axis): q has shape "
            f"{tuple(q.shape)}, k has shape {tuple(k.shape)}."
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length S (axis -2): k has shape {tuple(k.shape)}, "
            f"v has shape {tuple(v.shape)}."
        )
    _check_batch_dims({"q": q, "k": k, "v": v})
    xp, (q, k, v) = _common({"q": q, "k": k, "v": v})
    d = q.shape[-1]
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(d) if scale is None else validate_positive_float(scale, "scale")
    if key_padding_mask is not None:
        key_padding_mask = _check_mask(key_padding_mask, S)
        batch = np.broadcast_shapes(*(tuple(a.shape[:-2]) for a in (q, k, v)))
        try:
            np.broadcast_shapes((*key_padding_mask.shape[:-1], 1, S), (*batch, L, S))
        except ValueError:
            raise ValueError(
                f"the batch dimensions of key_padding_mask (shape "
                f"{tuple(key_padding_mask.shape)}) do not broadcast against those of q, k, v "
                f"{batch}."
            ) from None
    # |q_i^T k_j| <= d max|q| max|k|: with that bound in range no partial sum overflows
    if d * max_abs(xp, q) * max_abs(xp, k) * max(scale, 1.0) < float(xp.finfo(q.dtype).max):
        logits, factor = (q @ xp.matrix_transpose(k)) * scale, 1.0  # (..., L, S)
    else:  # logits = factor * (q 2^-e)(k 2^-e)^T, the product at most d in magnitude
        e = power_of_two_bound(xp, q, k)
        t = math.ldexp(1.0, -e)
        logits = (q * t) @ xp.matrix_transpose(k * t)
        # capped at the largest float: the forward value is the same (exp gives 0 for all
        # but the row maximum), and autograd never meets inf * 0
        factor = min(ldexp_saturating(scale, 2 * e), float(xp.finfo(q.dtype).max))
    allowed = None
    if is_causal:
        i = xp.arange(L)[:, None]
        j = xp.arange(S)[None, :]
        allowed = j <= i  # (L, S)
        if hasattr(logits, "device"):
            allowed = xp.asarray(allowed, device=logits.device)
    if key_padding_mask is not None:
        keep = xp.logical_not(xp.asarray(key_padding_mask, dtype=xp.bool))[..., None, :]
        if hasattr(logits, "device"):
            keep = xp.asarray(keep, device=logits.device)
        allowed = keep if allowed is None else xp.logical_and(allowed, keep)
    if allowed is not None:
        neg = xp.asarray(-xp.inf, dtype=logits.dtype)
        logits = xp.where(allowed, logits, neg)
    row_max = xp.max(logits, axis=-1, keepdims=True)
    row_max = xp.where(xp.isfinite(row_max), row_max, xp.zeros_like(row_max))
    z = logits - row_max  # <= 0, -inf where masked
    if factor != 1.0:  # the row maximum stays 0 (0 * inf would be NaN)
        with np.errstate(over="ignore", invalid="ignore"):
            z = xp.where(z == 0, z, z * factor)
    w = xp.exp(z)  # (..., L, S)
    denom = xp.sum(w, axis=-1, keepdims=True)
    denom = xp.where(denom > 0, denom, xp.ones_like(denom))
    return (w / denom) @ v
