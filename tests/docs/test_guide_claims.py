"""Claims of the user guide (contract, scale, estimators, attention) checked against the
code, one test per claim that a review found false or that nothing else pinned down.

The executed examples of ``test_docs.py`` show that the code blocks run; these tests
check what the prose says around them.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatures


@pytest.mark.parametrize(
    ("estimator", "method"),
    [
        (RandomFeatures, "nope"),
        (NadarayaWatsonClassifier, "foo"),
        # a name of another estimator's list: not one the Nadaraya-Watson classifier takes
        (NadarayaWatsonClassifier, "hybrid_angular"),
    ],
)
def test_unknown_method_is_an_invalid_parameter_error(estimator, method):
    """contract.md, "Parameter validation": an unknown option string raises
    scikit-learn's InvalidParameterError (both a ValueError and a TypeError) whose
    message names the parameter and the values it accepts. ``method`` is checked by
    name (case-insensitive, with aliases), not by a StrOptions constraint."""
    X, y = np.eye(4), [0, 1, 1, 0]
    with pytest.raises(InvalidParameterError, match="'method' parameter") as info:
        estimator(method=method).fit(X, y)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert "sderf" in str(info.value)  # the values it accepts
