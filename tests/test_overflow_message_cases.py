"""Overflow errors name the parameter the user set, in that user's terms."""

import numpy as np
import pytest

from kernelkit.estimators import NadarayaWatsonClassifier
from kernelkit.kernels import scaled_softmax_kernel


def test_scaled_softmax_kernel_overflow_names_a_positive_alpha():
    X = np.ones((2, 3))
    # exponent alpha (|x|^2 + |y|^2) + x.y = 1e300 * 6 + 3: beyond log(float64 max) ~ 709.8
    with pytest.raises(ValueError, match=r"reduce alpha=1e\+300"):
        scaled_softmax_kernel(X, X, alpha=1e300)
    # alpha = 0: the exponent x.y = 2700 overflows through the data alone; alpha is no remedy
    with pytest.raises(ValueError, match="scale X and Y down or use") as info:
        scaled_softmax_kernel(30 * X, 30 * X, alpha=0.0)
    assert "alpha" not in str(info.value)


@pytest.mark.parametrize("fit_on", ["train", "batch"])
def test_nadaraya_watson_overflow_names_sigma_not_lengthscale(fit_on):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(int)
    # sigma = 1e200 scales the inputs to ~1e200: their squares (the maps' second moments)
    # overflow float64; the estimator has no lengthscale parameter, so the remedy is sigma
    clf = NadarayaWatsonClassifier(sigma=1e200, fit_on=fit_on, random_state=0)
    with pytest.raises(ValueError, match=r"decrease sigma") as info:
        clf.fit(X, y).predict(X)
    assert "increase lengthscale" not in str(info.value)
