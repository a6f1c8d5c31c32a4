"""scikit-learn's ``validate_data`` with errors that name the argument.

scikit-learn reports complex input as "Complex data not supported" followed by the data,
and non-numeric strings with NumPy's bare conversion error; kernelkit's estimators say
which argument is at fault instead, before delegating everything else to
:func:`sklearn.utils.validation.validate_data`.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import validate_data as _sk_validate_data

__all__ = ["check_lazy_output", "validate_data"]


def _check_real(a, name: str) -> None:
    if isinstance(a, str) or a is None:
        return
    dtype = getattr(a, "dtype", None)
    if dtype is None:
        return
    if name == "X" and isinstance(dtype, np.dtype) and dtype.kind in "OUS":  # strings
        try:
            np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be numeric; {exc}.") from None
        return
    try:
        complex_ = np.issubdtype(np.dtype(dtype), np.complexfloating)
    except TypeError:  # torch dtypes and other non-NumPy dtypes
        complex_ = bool(getattr(dtype, "is_complex", False))
    if complex_:
        raise ValueError(
            f"Complex data not supported: {name} has dtype {dtype}; kernelkit's estimators "
            "take real input."
        )


def validate_data(_estimator, /, X="no_validation", y="no_validation", **kwargs):
    """:func:`sklearn.utils.validation.validate_data` (same arguments and return value),
    with complex ``X`` or ``y`` and non-numeric ``X`` reported by name (class labels
    ``y`` may be strings)."""
    _check_real(X, "X")
    _check_real(y, "y")
    return _sk_validate_data(_estimator, X, y, **kwargs)


def check_lazy_output(est):
    """``ValueError`` if ``est.set_output`` asks ``transform`` for a container (pandas,
    polars): it would compute the lazy features of a Dask array into memory at once."""
    from sklearn.utils._set_output import _get_output_config

    dense = _get_output_config("transform", est)["dense"]
    if dense != "default":
        raise ValueError(
            f"{type(est).__name__}.transform of a Dask X returns a lazy Dask array, which "
            f"set_output(transform={dense!r}) would compute into one in-memory DataFrame. "
            "Pass X.compute(), or use set_output(transform='default') and convert lazily "
            "(dask.dataframe.from_dask_array(features, columns=get_feature_names_out()))."
        )
