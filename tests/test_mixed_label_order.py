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
