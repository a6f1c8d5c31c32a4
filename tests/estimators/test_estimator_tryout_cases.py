"""Regression tests from an independent try-out of the estimators with the guide as map.

Lazy predictions of a filtered Dask array (an empty row chunk), refits that fail part
way, a ``Pipeline`` as ``feature_map``, class labels of mixed types, DataFrame blocks,
and the method names the classifier lists. Each test fails on the code before its fix.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.estimators import (
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.features import RandomFourierFeatures

da = pytest.importorskip("dask.array")

FM = RandomFourierFeatures(n_features=32, lengthscale=1.5, random_state=0)


def _data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize(
    "est", [RandomFeatureRidge(FM, alpha=0.3), RandomFeatureGPRegressor(FM, noise=0.2)]
)
@pytest.mark.parametrize("keep", ["some", "none"])
def test_lazy_predictions_of_a_filtered_dask_array_with_empty_chunks(est, keep):
    """A boolean filter that empties a row chunk (or all of them) gave a chunk of 0 rows,
    which ``predict`` refused at ``compute`` ("0 sample(s)"); an empty chunk now maps to
    no rows, and the other rows equal the in-memory predictions."""
    X, y = _data()
    X[:30, 0] = -1.0  # the first chunk of 30 rows is filtered out entirely
    est.fit(X, y)
    Xd = da.from_array(X, chunks=(30, 3))
    mask = X[:, 0] > (0.0 if keep == "some" else 100.0)
    Xf = Xd[Xd[:, 0] > (0.0 if keep == "some" else 100.0)]  # unknown chunk sizes
    np.testing.assert_allclose(
        est.predict(Xf).compute(),
        est.predict(X[mask]) if mask.any() else np.empty(0),
        rtol=1e-12,
        atol=1e-14,
    )
    if isinstance(est, RandomFeatureGPRegressor):
        mean, std = (a.compute() for a in est.predict(Xf, return_std=True))
        assert mean.shape == std.shape == (mask.sum(),)
        if mask.any():
            m_ref, s_ref = est.predict(X[mask], return_std=True)
            np.testing.assert_allclose(mean, m_ref, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(std, s_ref, rtol=1e-12, atol=1e-14)
