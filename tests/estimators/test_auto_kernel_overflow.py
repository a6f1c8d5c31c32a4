"""``RandomFeatures(method="auto")`` where the exact kernel of a sampled pair overflows.

The Maclaurin candidates' ranking adds their relative bias, which reads the exact kernel
of the sample; for the softmax kernel one outlier (``exp(x.x)`` past float64) made that
read raise "RandomMaclaurin.exact_kernel(X) overflows float64", and ``fit`` failed with
an error about a map the user never chose, although the FAVOR# candidates fit and rank
on the same sample. A candidate whose error cannot be computed now scores ``inf``, as
documented for one that cannot be fitted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.estimators import RandomFeatures


def _outlier_data():
    rng = np.random.default_rng(42)
    X = 0.5 * rng.standard_normal((50, 3))
    X[0] = [27.0, 0.0, 0.0]  # exp(x.x) = e^729 overflows float64
    return X


def test_auto_skips_a_candidate_whose_error_overflows():
    X = _outlier_data()
    rf = RandomFeatures(method="auto", kernel="softmax", n_components=64, random_state=0)
    rf.fit(X)
    est = rf.variance_estimates_
    assert est["random_maclaurin"] == math.inf
    assert math.isfinite(est[rf.method_])
    assert rf.method_ == min(est, key=est.get)
    assert rf.transform(X).shape == (50, 64)


@pytest.mark.parametrize("method", ["sderf", "gerf", "positive"])
def test_the_chosen_candidates_fit_that_data_alone(method):
    """Control: the maps "auto" ranks fit the same data by name."""
    X = _outlier_data()
    RandomFeatures(method=method, kernel="softmax", n_components=64, random_state=0).fit(X)
