"""Backend layer: array namespaces, random-state policy, dtype policy, input checks.

Numerical code in kernelkit is written once against the Python array API standard
through :mod:`array_api_compat`. NumPy is the default; PyTorch tensors go through the
same code (with autograd, on any device).

Policies implemented here:

* **Namespace** – :func:`get_namespace` returns the array-API namespace of the inputs.
* **Random state** – random parameters are always drawn with NumPy from
  :func:`check_random_state` (``None`` / ``int`` / :class:`numpy.random.Generator`), then
  moved with :func:`to_backend` to the backend, device and dtype of the input. The same
  seed gives the same features whatever the backend.
* **Dtype** – float32 in, float32 out; float64 in, float64 out. Integer and boolean inputs
  are promoted to the default float (float64 for NumPy, ``torch.get_default_dtype()``
  for torch); complex inputs are rejected. Non-native byte orders (big-endian ``>f8``)
  become the native one.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import scipy.sparse as sp
from array_api_compat import to_device

from .namespace import (
    array_namespace,
    is_numpy_namespace,
    is_torch_array,
    is_torch_namespace,
)
from .namespace import device as _device

__all__ = [
    "ThreadFlag",
    "caller_stacklevel",
    "check_all_finite",
    "check_random_state",
    "device",
    "float_dtype",
    "get_namespace",
    "is_foreign_array",
    "is_numpy_namespace",
    "is_torch_array",
    "is_torch_namespace",
    "native_byte_order",
    "to_backend",
    "to_device",
    "to_numpy",
    "torch_shareable",
    "validate_data",
    "validate_positive_float",
    "validate_positive_int",
]


def device(x):
    """The device of array ``x`` (``"cpu"`` for SciPy sparse matrices)."""
    if sp.issparse(x):
        return "cpu"
    return _device(x)


def is_foreign_array(X) -> bool:
    """Whether ``X`` is an array-API array other than NumPy (a torch tensor, ...): such
    input keeps its backend and device; NumPy, lists, pandas and SciPy sparse do not."""
    if isinstance(X, np.ndarray) or sp.issparse(X):
        return False
    return is_torch_array(X) or hasattr(X, "__array_namespace__")


def get_namespace(*arrays):
    """Array-API namespace shared by ``arrays`` (NumPy for lists / scalars)."""
    arrays = [a for a in arrays if a is not None]
    if not arrays:
        return array_namespace(np.empty(0))
    converted = [np.asarray(a) if isinstance(a, list | tuple) else a for a in arrays]
    return array_namespace(*converted)


def _fresh_generator() -> np.random.Generator:
    """The generator behind ``random_state=None``: seeded from the operating system's
    entropy, so every call draws anew. The one place it is made (a test harness seeds it
    to make unseeded draws repeatable)."""
    return np.random.default_rng()


def check_random_state(seed) -> np.random.Generator:
    """Turn ``seed`` into a :class:`numpy.random.Generator`.

    ``None`` gives a fresh OS-seeded generator, an ``int`` a seeded one, and a
    ``Generator`` is returned as is. A legacy ``RandomState`` is wrapped by drawing a
    seed from it (so scikit-learn style code that passes one keeps working).
    """
    if seed is None:
        return _fresh_generator()
    if isinstance(seed, numbers.Integral):
        if int(seed) < 0:
            raise ValueError(f"random_state must be a non-negative integer, got {seed}.")
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise TypeError(
        f"random_state must be None, an int or a numpy.random.Generator, got {type(seed).__name__}."
    )


class ThreadFlag:
    """A flag of the calling thread: true inside ``with flag.on():`` (nested uses restore
    the enclosing value), false elsewhere and in every other thread, so that a setting of
    one thread (a per-call mode) never reaches calls that others make meanwhile (as a
    module global, or ``warnings.catch_warnings``, whose process-wide save and restore
    is not thread-safe, would)."""

    def __init__(self):
        self._local = threading.local()

    def __bool__(self) -> bool:
        return getattr(self._local, "on", False)

    @contextmanager
    def on(self):
        """Context: the flag is true in this thread."""
        prev = bool(self)
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = prev


def native_byte_order(a):
    """``a`` itself, or for a NumPy array of another byte order (big-endian ``>f8`` data
    from FITS, HDF5 or network formats) a copy in the native one: every result of
    kernelkit is in the native byte order, and SciPy sparse and torch take no other."""
    if isinstance(a, np.ndarray) and not a.dtype.isnative:
        return a.astype(a.dtype.newbyteorder("="))
    return a


def torch_shareable(a: np.ndarray) -> np.ndarray:
    """A NumPy array that ``torch.as_tensor`` can share: ``a`` in the native byte order
    (torch takes no other) and writeable (torch warns on a read-only array, since a
    tensor cannot be read-only): a read-only one (``setflags(write=False)``, a
    ``mode="r"`` memmap, joblib's memory-mapped inputs) is copied, so that the caller's
    data stays untouched and no warning reaches the caller for a call that writes
    nothing."""
    a = native_byte_order(np.asarray(a))
    if not a.flags.writeable:
        a = np.array(a, copy=True)
    return a


def float_dtype(xp, x):
    """The floating dtype that the output for input ``x`` gets (dtype policy)."""
    if xp.isdtype(x.dtype, "real floating"):
        return x.dtype
    if is_torch_namespace(xp):
        import torch  # only reached with torch inputs

        return torch.get_default_dtype()
    return xp.float64


def to_backend(arr, xp, like=None, dtype=None):
    """Move a NumPy array ``arr`` to namespace ``xp`` on the device of ``like``.

    Parameters
    ----------
    arr : numpy.ndarray
    xp : array namespace of the target.
    like : array, optional
        Supplies the device (and the dtype when ``dtype`` is None).
    dtype : dtype of ``xp``, optional
    """
    if dtype is None and like is not None:
        dtype = like.dtype
    if is_numpy_namespace(xp):
        return np.asarray(arr, dtype=dtype)
    dev = device(like) if like is not None else None
    return xp.asarray(np.ascontiguousarray(torch_shareable(arr)), dtype=dtype, device=dev)


def to_numpy(x, dtype=None) -> np.ndarray:
    """A NumPy copy/view of ``x`` (detached from autograd, on the host); a bfloat16
    tensor, which NumPy has no dtype for, as float32 (which holds each of its values)."""
    if is_torch_array(x):
        import torch  # only reached with torch inputs

        x = x.detach().cpu()
        x = (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    return np.asarray(x, dtype=dtype)


def validate_positive_int(value, name: str, *, minimum: int = 1, maximum: int = 2**31 - 1) -> int:
    """Check that ``value`` is an integer in ``[minimum, maximum]``; return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}.")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value} (too large to allocate).")
    return value


def validate_positive_float(value, name: str) -> float:
    """Check that ``value`` is a positive, finite real number; return it as ``float``.

    Raises ``TypeError`` for non-real values (bools included) and ``ValueError`` for
    zero, negative, NaN or infinite ones, both naming the argument.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive float, got {value!r}.")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value}.")
    return float(value)


def _pandas_na(X):
    """Mask of the ``pandas.NA`` entries of an object array, or None if there are none (or
    other non-numeric entries remain)."""
    if X.dtype != object:
        return None
    missing = np.asarray(np.frompyfunc(lambda v: type(v).__name__ == "NAType", 1, 1)(X), bool)
    if not missing.any():
        return None
    try:
        np.where(missing, 0.0, X).astype(np.float64)
    except (TypeError, ValueError):
        return None
    return missing


def validate_data(
    X,
    name: str = "X",
    *,
    n_features: int | None = None,
    allow_empty: bool = False,
    check_finite: bool = True,
):
    """Validate a 2-D real data matrix and apply the dtype policy.

    Parameters
    ----------
    X : array_like, shape (n_samples, n_features)
        NumPy array, torch tensor, or anything :func:`numpy.asarray` accepts.
    name : str
        Argument name used in error messages.
    n_features : int, optional
        Expected number of columns (the one seen at ``fit``).
    allow_empty : bool
        Whether zero rows are accepted.
    check_finite : bool
        Check for NaN and infinity (a caller that sums the data anyway may check the sums
        instead and call :func:`check_all_finite` only when they are not finite).

    Returns
    -------
    X : array, shape (n_samples, n_features)
        Floating point (float32 stays float32, float64 stays float64, integers become the
        namespace's default float), same backend and device as the input.
    xp : the array namespace.

    Raises
    ------
    TypeError
        Non-numeric input, or a sparse torch tensor.
    ValueError
        Complex input, not 2-D, empty, NaN/inf entries, or the wrong number of columns.
    """
    if X is None:
        raise ValueError(f"{name} is None; expected a 2-D array.")
    if isinstance(X, Iterator):  # a generator would become a 0-d object array
        raise TypeError(
            f"{name} is an iterator ({type(X).__name__}); expected a 2-D array. Materialise "
            f"it first, e.g. numpy.asarray(list({name}))."
        )
    if is_torch_array(X) and str(X.layout) != "torch.strided":
        raise TypeError(
            f"{name} is a sparse torch tensor (layout {X.layout}), which is not supported; "
            f"pass {name}.to_dense(), or a SciPy sparse matrix to a map that accepts sparse "
            "input."
        )
    if not (is_torch_array(X) or hasattr(X, "__array_namespace__")):
        try:
            X = np.asarray(X)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
    if isinstance(X, np.matrix):  # its products stay matrices: rejected, as in scikit-learn
        raise TypeError(
            f"{name} is a numpy.matrix, which is not supported; convert it with "
            f"numpy.asarray({name})."
        )
    if isinstance(X, np.ndarray) and (X.dtype == object or X.dtype.kind in "USV"):
        try:
            X = X.astype(np.float64)
        except (TypeError, ValueError) as exc:
            missing = _pandas_na(X)  # nullable pandas columns: pandas.NA is missing data
            if missing is None:
                raise TypeError(f"{name} must be numeric, got dtype {X.dtype}: {exc}") from exc
            X = np.where(missing, np.nan, X).astype(np.float64)  # reported as NaN below
    # big-endian data: computed and returned in the native byte order (the output's dtype
    # and the float16 promotion of the maps compare native dtypes)
    X = native_byte_order(X)
    xp = array_namespace(X)
    if xp.isdtype(X.dtype, "complex floating"):
        raise ValueError(
            f"Complex data not supported: {name} must be real-valued, got complex dtype {X.dtype}."
        )
    if not xp.isdtype(X.dtype, ("real floating", "integral", "bool")):
        raise TypeError(f"{name} must be numeric, got dtype {X.dtype}.")
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_samples, n_features), got {X.ndim}-D "
            f"array with shape {tuple(X.shape)}. Reshape your data: {name}.reshape(-1, 1) "
            f"(one feature) or {name}.reshape(1, -1) (one sample)."
        )
    if X.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is empty: found 0 samples (shape {tuple(X.shape)}).")
    if X.shape[1] == 0:
        raise ValueError(
            f"{name} has 0 feature(s) (shape={tuple(X.shape)}) while a minimum of 1 is required."
        )
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but this object was fitted with "
            f"{n_features} features."
        )
    dtype = float_dtype(xp, X)
    if X.dtype != dtype:
        X = xp.astype(X, dtype)
    if check_finite and not _all_finite(xp, X):
        raise ValueError(f"{name} contains NaN or infinity.")
    return X, xp


def check_all_finite(X, name: str = "X") -> None:
    """Raise the ``ValueError`` of :func:`validate_data` if ``X`` holds NaN or infinity."""
    xp = get_namespace(X)
    if not _all_finite(xp, X):
        raise ValueError(f"{name} contains NaN or infinity.")


def _all_finite(xp, X) -> bool:
    """Whether every entry of ``X`` is finite.

    Fast path (as scikit-learn's ``_assert_all_finite``): NaN and inf propagate into the
    float64 sum, so a finite sum proves all entries finite without a boolean temporary;
    only an infinite or NaN sum (bad entries, or an overflowing sum) needs the full check.
    """
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(np.sum(X, dtype=np.float64)):
                return True
    return bool(xp.all(xp.isfinite(X)))


def caller_stacklevel() -> int:
    """The ``stacklevel`` of ``warnings.warn`` that points at the first frame outside
    kernelkit, scikit-learn and joblib (the user's call, whatever path led to the
    warning: a transform is wrapped by scikit-learn's ``set_output``, and a Pipeline or
    GridSearchCV fits its steps through joblib). Call it from the function that warns."""
    import os
    import sys

    skip = tuple(
        os.path.dirname(os.path.abspath(m.__file__)) + os.sep
        for m in (sys.modules["kernelkit"], sys.modules.get("sklearn"), sys.modules.get("joblib"))
        if m is not None and getattr(m, "__file__", None)
    )
    frame, level = sys._getframe(1), 1  # the caller of this function: stacklevel 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skip):
        frame, level = frame.f_back, level + 1
    return level
