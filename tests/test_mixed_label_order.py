"""Class labels of mixed types are named whatever label comes first.

scikit-learn's target check reads an object array whose first label is a string as
"multiclass" (the sort then fails with a ``TypeError``, which the classifiers named),
but one whose first label is a number as of "unknown" type: a ``ValueError`` saying
"Unknown label type: unknown. Maybe you are trying to fit a classifier, which expects
discrete classes on a regression target with continuous values", which named neither
``y`` nor its types and sent users after the wrong cause.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import KernelLogisticRegression
from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatureGPClassifier
from kernelkit.optim import BoundLogisticRegression

_X = np.random.default_rng(0).standard_normal((20, 2))

#: (classifier, the start of its message for labels of several types)
_CASES = [
    (RandomFeatureGPClassifier, r"RandomFeatureGPClassifier: y: class labels must be of one type"),
    (NadarayaWatsonClassifier, r"NadarayaWatsonClassifier: y: class labels must be of one type"),
    (BoundLogisticRegression, r"y: the labels must be mutually comparable"),
    (KernelLogisticRegression, r"y: the labels must be mutually comparable"),
]


@pytest.mark.parametrize("cls, message", _CASES, ids=[c[0].__name__ for c in _CASES])
@pytest.mark.parametrize("first", ["string", "number"])
def test_mixed_labels_are_named_in_either_order(cls, message, first):
    pair = ["a", 1] if first == "string" else [1, "a"]
    y = np.array(pair * 10, dtype=object)
    with pytest.raises(TypeError, match=message) as info:
        cls().fit(_X, y)
    assert "int" in str(info.value) and "str" in str(info.value)


@pytest.mark.parametrize("cls", [c[0] for c in _CASES], ids=[c[0].__name__ for c in _CASES])
def test_labels_of_one_refused_type_keep_their_reason(cls):
    """Control: floats with a fractional part are continuous targets, one type, and keep
    scikit-learn's ValueError (not the several-types message)."""
    y = np.linspace(0.0, 1.0, 20)
    with pytest.raises(ValueError, match="Unknown label type"):
        cls().fit(_X, y)


@pytest.mark.parametrize("cls", [c[0] for c in _CASES], ids=[c[0].__name__ for c in _CASES])
@pytest.mark.parametrize(
    "pair", [[1, np.int64(2)], [0.5, 1], [np.float64(1.0), 2.0]], ids=["int64", "float", "f64"]
)
def test_numbers_of_several_types_are_not_called_unsortable(cls, pair):
    """Control: numbers of several Python types in an object array sort; scikit-learn
    refuses them as of "unknown" type, and that reason stands (not the several-types
    message, which would advise converting them to strings)."""
    y = np.array(pair * 10, dtype=object)
    with pytest.raises(ValueError, match="Unknown label type"):
        cls().fit(_X, y)


@pytest.mark.parametrize(
    "cls",
    [lambda: BoundLogisticRegression(solver="bound"), KernelLogisticRegression],
    ids=["BoundLogisticRegression", "KernelLogisticRegression"],
)
@pytest.mark.parametrize("layout", ["alternating", "one type per chunk"])
def test_mixed_dask_labels_name_y(cls, layout):
    """Dask labels: each chunk's labels are sorted, then merged; strings with numbers
    (in one chunk, or across chunks) raised NumPy's bare "'<' not supported between
    instances of 'str' and 'int'"."""
    da = pytest.importorskip("dask.array")
    import dask

    y = (
        np.array([1, "a"] * 10, dtype=object)
        if layout == "alternating"
        else np.array([1] * 10 + ["a"] * 10, dtype=object)
    )
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(TypeError, match=r"^y: the labels must be mutually comparable"):
            cls().fit(da.from_array(_X, chunks=10), da.from_array(y, chunks=10))
