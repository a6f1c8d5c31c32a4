"""The estimators with the inputs of a real project: integer and one-hot data, whose
kernel values can be exactly zero.

Expected values are exact references: the same seed gives the same draw, so a choice of
``method="auto"`` is compared with the map of the chosen method fitted directly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.estimators import RandomFeatures


def _integer_data(n=40, d=3, seed=0):
    # integer features (counts, ordinal codes): x.y = -1 for many pairs, so the polynomial
    # kernel (x.y + coef0)^degree with coef0 = 1 is exactly 0 there
    return np.random.default_rng(seed).integers(-2, 3, size=(n, d))


@pytest.mark.parametrize(
    ("X", "coef0"),
    [
        (_integer_data(), 1.0),
        # one-hot rows (a categorical column): different categories have x.y = 0
        (np.eye(4)[np.random.default_rng(1).integers(0, 4, size=30)], 0.0),
    ],
    ids=["integers", "one-hot"],
)
def test_auto_chooses_a_polynomial_map_on_data_with_zero_kernel_values(X, coef0):
    # E (K_hat - K)^2 / K^2 is undefined where K = 0, for every candidate alike: such
    # pairs cannot rank the candidates and must not make every mean infinite
    rf = RandomFeatures(
        method="auto", kernel="polynomial", coef0=coef0, n_components=32, random_state=0
    )
    assert np.any((X @ X.T + coef0) ** 2 == 0)  # the kernel (default degree 2)
    rf.fit(X)
    assert math.isfinite(rf.variance_estimates_[rf.method_])
    assert rf.variance_estimates_[rf.method_] == min(rf.variance_estimates_.values())
    Z = rf.transform(X)
    assert Z.shape == (len(X), rf.feature_map_.output_dim)
    assert np.all(np.isfinite(Z))
    # the chosen map, fitted directly with the same seed, gives the same features
    direct = RandomFeatures(
        method=rf.method_, kernel="polynomial", coef0=coef0, n_components=32, random_state=0
    )
    np.testing.assert_array_equal(direct.fit(X).transform(X), Z)
