"""A list of (X_block, y_block) pairs passed together with y.

``fit(iter(pairs), y)`` said to pass ``y=None``; ``fit(pairs, y)`` with a list or tuple
gave NumPy's "setting an array element with a sequence. The requested array has an
inhomogeneous shape", naming neither the estimator nor the mistake.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.estimators import (
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)


@pytest.mark.parametrize(
    "cls", [RandomFeatureRidge, RandomFeatureGPRegressor, RandomFeatureGPClassifier]
)
@pytest.mark.parametrize("container", [list, tuple])
def test_pairs_with_y_say_pass_y_none(cls, container):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    y = (X[:, 0] > 0).astype(int)
    pairs = container((X[i : i + 20], y[i : i + 20]) for i in range(0, 60, 20))
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: X is a sequence of .* pass y=None"):
        cls().fit(pairs, y)
    cls().fit(pairs, None)  # control: the documented form
