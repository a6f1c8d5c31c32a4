"""Class labels of the classifiers: missing labels and labels of several types named, and
the log of class probabilities."""

from __future__ import annotations

import numpy as np
from sklearn.utils.multiclass import check_classification_targets

from .._backend.sklearn_validation import unsortable_label_types

__all__ = ["check_label_targets", "check_raw_labels", "encode_labels", "log_proba"]


def check_raw_labels(owner: str, y) -> None:
    """Checks of the labels ``y`` as given, before any conversion to an array.

    ``ValueError`` naming ``y`` if a list or object array of labels holds ``None``, NaN or
    ``pandas.NA`` (scikit-learn would fail in a sort, say only "Input contains NaN", or,
    for ``pandas.NA``, "boolean value of NA is ambiguous"); ``TypeError`` naming ``y`` and
    the types if they cannot be sorted together (numbers with strings): a list of them
    would otherwise become an array of strings, the int ``1`` and the string ``"1"`` one
    class, and ``predict`` would return strings for the numbers."""
    if not (isinstance(y, list | tuple) or getattr(getattr(y, "dtype", None), "kind", "") == "O"):
        return
    labels = np.asarray(y, dtype=object).ravel()
    try:
        missing = (labels == None) | (labels != labels)  # noqa: E711 (elementwise): None, NaN
    except TypeError:  # pandas.NA (a nullable string column's gap) compares to NA, not a bool
        missing = np.fromiter((_is_missing(label) for label in labels), bool, len(labels))
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise ValueError(
            f"{owner}: y contains a missing label ({labels[i]!r} at index {i}); drop those "
            "samples or give them a class of their own."
        )
    if len(unsortable_label_types(labels)) > 1:
        raise _label_type_error(owner, labels, TypeError("unsortable labels"))


def _is_missing(label) -> bool:
    """``None``, NaN, or a value whose self-comparison is no bool (``pandas.NA``)."""
    if label is None:
        return True
    try:
        return bool(label != label)
    except TypeError:
        return True


def encode_labels(owner: str, y, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, indices)`` of validated labels ``y`` (n,): the sorted distinct labels
    (C,) and each sample's index into them (n,), as ``np.unique(y, return_inverse=True)``
    after scikit-learn's check of classification targets (``check=False``: without it);
    a ``TypeError`` naming ``y`` and its types when the labels cannot be sorted (strings
    mixed with numbers), or scikit-learn's reason for labels of one type it refuses
    (bytes): :func:`check_label_targets`."""
    if check:
        check_label_targets(owner, y)
    try:
        return np.unique(y, return_inverse=True)
    except TypeError as exc:
        raise _label_type_error(owner, y, exc) from None


def check_label_targets(owner: str, y) -> None:
    """scikit-learn's ``check_classification_targets(y)`` with its ``TypeError`` naming
    ``owner`` and ``y``: labels of several types that cannot be sorted say so and name
    the types, whichever comes first
    (:func:`~kernelkit._backend.sklearn_validation.unsortable_label_types`); labels it
    refuses otherwise keep scikit-learn's reason (bytes: a ``TypeError`` naming both;
    continuous numbers, or numbers of several types in an object array: its
    ``ValueError``)."""
    try:
        check_classification_targets(y)
    except TypeError as exc:
        raise _label_type_error(owner, y, exc) from None
    except ValueError as exc:
        if len(unsortable_label_types(y)) < 2:
            raise
        raise _label_type_error(owner, y, exc) from None


def _label_type_error(owner: str, y, exc: Exception) -> TypeError:
    types = sorted({type(label).__name__ for label in np.asarray(y, dtype=object).ravel()})
    if len(types) == 1:  # one type, refused as such (bytes): scikit-learn's reason
        return TypeError(f"{owner}: y: {exc}")
    return TypeError(
        f"{owner}: y: class labels must be of one type that can be sorted (all "
        f"strings or all numbers), got {', '.join(types)}; convert them, e.g. "
        "y.astype(str)."
    )


def log_proba(P):
    """``log P`` of class probabilities (n, C), ``-inf`` where a probability is zero
    (without a divide-by-zero warning): the classifiers' ``predict_log_proba``."""
    with np.errstate(divide="ignore"):
        return np.log(P)
