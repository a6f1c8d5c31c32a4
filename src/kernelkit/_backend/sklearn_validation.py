"""scikit-learn's ``validate_data`` with errors that name the argument.

scikit-learn reports complex input as "Complex data not supported" followed by the data,
and non-numeric strings with NumPy's bare conversion error; kernelkit's estimators say
which argument is at fault instead, before delegating everything else to
:func:`sklearn.utils.validation.validate_data`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_feature_names, _get_feature_names
from sklearn.utils.validation import validate_data as _sk_validate_data

from . import caller_stacklevel, is_torch_array, to_numpy
from .chunks import checked_chunks, is_dask_array, reject_sparse

__all__ = [
    "check_feature_names_of",
    "check_frame_columns",
    "check_label_list",
    "check_lazy_output",
    "check_positional_keys",
    "for_container",
    "host_array",
    "sorted_class_labels",
    "unsortable_label_types",
    "unsortable_labels_error",
    "validate_data",
]


def unsortable_label_types(y) -> list[str]:
    """The sorted names of the Python types of the labels in ``y`` where it is a list, a
    tuple or an object array whose labels cannot be ordered together (strings with
    numbers, say); an empty list otherwise (other arrays, whose labels share their dtype,
    and labels that sort, such as ``int`` with ``numpy.int64``).

    scikit-learn's ``check_classification_targets`` reads an object array by its first
    label: strings first are "multiclass" (mixed labels then fail to sort, a
    ``TypeError``), a number first is of "unknown" type (a ``ValueError`` suggesting a
    continuous regression target). A non-empty list here tells the classifiers that
    either error means labels of several types that cannot be sorted; otherwise
    scikit-learn's own reason stands."""
    if not (isinstance(y, list | tuple) or getattr(getattr(y, "dtype", None), "kind", "") == "O"):
        return []
    labels = np.asarray(y, dtype=object).ravel()
    try:
        np.unique(labels)
    except TypeError:
        return sorted({type(label).__name__ for label in labels})
    return []


def sorted_class_labels(y, name: str = "y", check: bool = True) -> np.ndarray:
    """The sorted distinct labels of ``y`` (after scikit-learn's check of classification
    targets if ``check``). Labels that cannot be sorted together (numbers mixed with
    strings or None), whichever comes first (:func:`unsortable_label_types`), raise a
    ``TypeError`` naming ``name`` (:func:`unsortable_labels_error`) instead of NumPy's
    bare comparison error or scikit-learn's "unknown label type"; labels scikit-learn
    refuses otherwise keep its ``ValueError``."""
    try:  # both sort the labels
        if check:
            check_classification_targets(y)
        return np.unique(y)
    except (TypeError, ValueError) as exc:
        types = unsortable_label_types(y)
        if isinstance(exc, ValueError) and len(types) < 2:
            raise
        got = f"labels of types {', '.join(types)}" if len(types) > 1 else f"{exc}"
        raise unsortable_labels_error(name, got) from exc


def check_feature_names_of(est, X, name: str, reset: bool) -> None:
    """scikit-learn's ``_check_feature_names`` of ``X``, the argument ``name``. Its warnings
    and error speak of ``X``: for another argument (``Y``) the two warnings are issued
    here with its name (UserWarning at the caller's line; no change to the warning
    filters), and the name-mismatch error is raised again with it."""
    if name == "X" or reset:
        _check_feature_names(est, X, reset=reset)
        return
    named = _get_feature_names(X) is not None
    fitted = getattr(est, "feature_names_in_", None) is not None
    if named != fitted:  # scikit-learn's two warnings, naming the argument
        owner = type(est).__name__
        message = (
            f"{name} has feature names, but {owner} was fitted without feature names"
            if named
            else f"{name} does not have valid feature names, but {owner} was fitted with "
            "feature names"
        )
        warnings.warn(message, UserWarning, stacklevel=caller_stacklevel())
        return
    try:  # both named (or neither): scikit-learn compares them
        _check_feature_names(est, X, reset=False)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def check_label_list(y, name: str = "y") -> None:
    """``TypeError`` naming ``name`` (:func:`unsortable_labels_error`) if ``y`` is a list or
    tuple of labels that cannot be sorted together (numbers with strings): converted to
    an array, as scikit-learn's validation does, they would all become strings, the int
    ``1`` and the string ``"1"`` one class."""
    if isinstance(y, list | tuple):
        types = unsortable_label_types(y)
        if len(types) > 1:
            raise unsortable_labels_error(name, f"labels of types {', '.join(types)}")


def unsortable_labels_error(name: str, got: str) -> TypeError:
    """The ``TypeError`` for labels ``name`` that cannot be sorted together; ``got`` says
    what they were."""
    return TypeError(
        f"{name}: the labels must be mutually comparable (all strings or all numbers), "
        f"got {got}; convert them, e.g. {name}.astype(str)."
    )


def check_frame_columns(frame, name: str) -> None:
    """``TypeError`` naming ``name`` and the column if a DataFrame column is not numeric
    (strings, categories of strings, datetimes). Columns of numbers in another dtype (an
    object column of numbers and missing values, a categorical of numbers, numeric
    strings) convert to float, as in scikit-learn; a missing value in one (``None``,
    ``pandas.NA``, on which scikit-learn's conversion raises a ``TypeError``) is NaN: a
    ``ValueError``."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    # each distinct dtype tested once: a wide frame of numbers costs no per-column loop
    dtypes = frame.dtypes
    other = [dt for dt in dtypes.unique() if not (is_numeric_dtype(dt) or is_bool_dtype(dt))]
    if not other:
        return
    for i, (column, dtype) in enumerate(dtypes.items()):
        if not any(dtype == dt for dt in other):
            continue
        values = frame.iloc[:, i].to_numpy(dtype=object, na_value=np.nan)
        try:
            values = values.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name} must be numeric; column {column!r} has dtype {dtype}: {exc}."
            ) from None
        if np.isnan(values).any():
            raise ValueError(f"Input {name} contains NaN (missing values in column {column!r}).")


def _check_real(a, name: str) -> None:
    if isinstance(a, str) or a is None:
        return
    if name == "X" and hasattr(a, "columns") and hasattr(a, "dtypes"):  # a DataFrame
        check_frame_columns(a, name)
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


def host_array(a):
    """A torch tensor as the NumPy array scikit-learn would make of it, detached from
    autograd and with its float dtype kept (scikit-learn converts a tensor that requires
    grad with ``numpy()``, which raises, and reads a float32 tensor as float64 where a
    float32 array stays float32). Converted under ``array_api_dispatch`` too: the callers
    compute in NumPy and pass NumPy dtypes, which scikit-learn's validation of a tensor
    under dispatch cannot take (torch's ``asarray`` raised a ``TypeError``)."""
    if is_torch_array(a):
        return to_numpy(a)
    return a


def validate_data(_estimator, /, X="no_validation", y="no_validation", **kwargs):
    """:func:`sklearn.utils.validation.validate_data` (same arguments and return value),
    with complex ``X`` or ``y`` and non-numeric ``X`` reported by name (class labels
    ``y`` may be strings), and torch tensors converted as NumPy arrays of their dtype
    (detached from autograd), with array API dispatch on or off."""
    if is_dask_array(X):  # NumPy would make its computed sparse matrix an object array
        reject_sparse(X, "X")
        X = checked_chunks(X, "X").compute()  # each chunk's width named, not Dask's join error
    _check_real(X, "X")
    _check_real(y, "y")
    X, y = host_array(X), host_array(y)
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
            "(dask.dataframe.from_dask_array(features, columns=get_feature_names_out()), "
            "with dask[dataframe] installed)."
        )


def for_container(est, Z):
    """``Z`` as a container can hold it where ``est.set_output`` asks ``transform`` for
    one (pandas, polars): detached from autograd (a DataFrame holds values, not a graph,
    and building one from a tensor that requires grad raises in torch's ``numpy()``), and
    a bfloat16 tensor as float32 (NumPy has no bfloat16; float32 holds each value)."""
    if not is_torch_array(Z):
        return Z
    import torch  # only reached with torch tensors

    if Z.requires_grad or Z.dtype == torch.bfloat16:
        from sklearn.utils._set_output import _get_output_config

        if _get_output_config("transform", est)["dense"] != "default":
            Z = Z.detach()
            return Z.float() if Z.dtype == torch.bfloat16 else Z
    return Z


def check_positional_keys(owner: str, X, y, reads_data: bool, stacklevel: int = 4) -> None:
    """The check of ``owner.fit(X, y)`` (a map, or ``RandomFeatures``) on a second data
    set passed positionally, which a scikit-learn transformer would silently ignore.

    A 2-D floating ``y`` of ``X``'s width with another number of rows is keys, not a
    ``Pipeline``'s target: ``TypeError`` naming ``fit(X, Y=keys)``. With as many rows it
    may be a target (ignored): a ``UserWarning`` when the fit reads the data
    (``reads_data``), as it would then have fitted without it. ``stacklevel`` points the
    warning at the line that called ``fit``.
    """
    if y is None or not hasattr(y, "shape") or len(y.shape) != 2 or y.shape[1] != X.shape[1]:
        return
    floating = getattr(y.dtype, "is_floating_point", None)  # torch dtypes
    if floating is None:
        dtype = y.dtype if is_dask_array(y) else np.asarray(y[:0]).dtype
        floating = np.issubdtype(dtype, np.floating)
    if not floating:
        return
    rows = (X.shape[0], y.shape[0])  # Dask: NaN where unknown, then not compared
    if rows[0] != rows[1] and not any(math.isnan(r) for r in rows):
        raise TypeError(
            f"{owner}.fit got a second data set of shape {tuple(y.shape)} "
            "as its positional argument y, which a scikit-learn transformer ignores. "
            "The kernel's y side (keys) is keyword-only: fit(X, Y=keys)."
        )
    if reads_data:
        warnings.warn(
            f"{owner}.fit ignores its positional argument y (a Pipeline's "
            "target). If it holds the kernel's y-side points (keys), pass them as "
            "fit(X, Y=keys).",
            UserWarning,
            stacklevel=stacklevel,
        )
