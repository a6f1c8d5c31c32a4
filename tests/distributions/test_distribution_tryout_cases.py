"""kernelkit.distributions tried by an independent tester with the user guide as the only
map: one regression test per defect found (each failed before its fix)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import (
    ConditionalMeanEmbedding,
    JointDistribution,
)


def _gaussian_pair(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))  # (n, 2)
    Y = 0.8 * X[:, :1] + 0.6 * rng.standard_normal((n, 1))  # (n, 1)
    return X, Y


@pytest.mark.parametrize("model", ["jdl", "cme"])
@pytest.mark.parametrize("form", ["array", "callable"])
def test_conditional_probability_needs_an_indicator(model, form):
    """``conditional_probability`` returned 2.0 for the "event" ``np.full(n, 2.0)`` and
    signed values for ``Y[:, 0]``: any numbers were averaged as if they were an
    indicator. An event must be boolean or 0/1 (a ValueError naming ``event``); a 0/1
    float indicator gives the boolean event's probability."""
    X, Y = _gaussian_pair()
    Est = JointDistribution if model == "jdl" else ConditionalMeanEmbedding
    fitted = Est(lengthscale_x=0.7, lengthscale_y=0.7).fit(X, Y)
    values = Y[:, 0] * 5.0  # not an indicator
    event = (lambda t: t[:, 0] * 5.0) if form == "callable" else values
    with pytest.raises(ValueError, match="event"):
        fitted.conditional_probability(event, X[:3])
    ind = Y[:, 0] <= 0.0
    ref = fitted.conditional_probability(ind, X[:3])
    got = fitted.conditional_probability(
        (lambda t: (t[:, 0] <= 0.0).astype(float)) if form == "callable" else ind * 1.0, X[:3]
    )
    np.testing.assert_array_equal(got, ref)
    # the weighted frequency of the event, from the conditional weights
    if model == "jdl":
        w = fitted.conditional_weights(X[:3])  # (3, n)
        np.testing.assert_allclose(ref, w @ ind, rtol=1e-12, atol=1e-14)
