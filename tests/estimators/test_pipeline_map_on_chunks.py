"""A Pipeline as feature_map on chunked input says that it is fitted on the first chunk.

kernelkit fits its own maps from every chunk of a Dask array or a re-readable sequence of
blocks (the dimension, or the FAVOR# moments of all rows), so those fits equal the
in-memory ones. A ``Pipeline`` or ``FeatureUnion`` has no such contract: it was fitted on
the first non-empty chunk, silently (a ``StandardScaler``'s means were the first chunk's,
and predictions differed from the in-memory fit by 0.2-0.9). It still is, with a warning.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline, make_union
from sklearn.preprocessing import StandardScaler

from kernelkit.estimators import RandomFeatureRidge
from kernelkit.features import SDERF, RandomFourierFeatures

da = pytest.importorskip("dask.array")


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((800, 3)) + np.r_[np.ones((400, 1)), np.zeros((400, 1))]
    return X, np.sin(X[:, 0])


def _maps():
    rff = RandomFourierFeatures(n_features=16, random_state=0)
    return [
        make_pipeline(StandardScaler(), rff),
        make_union(rff, SDERF(n_features=16, kernel="gaussian", random_state=0)),
    ]


@pytest.mark.parametrize("case", [0, 1], ids=["pipeline", "union"])
@pytest.mark.parametrize("layout", ["dask", "blocks", "stream"])
def test_chunked_fit_of_a_pipeline_warns(case, layout):
    X, y = _data()
    est = RandomFeatureRidge(_maps()[case], alpha=1.0)
    pairs = [(X[i : i + 200], y[i : i + 200]) for i in range(0, 800, 200)]
    if layout == "dask":
        args = (da.from_array(X, chunks=(200, 3)), y)
    elif layout == "blocks":
        args = (pairs, None)
    else:  # a generator, read once
        args = ((p for p in pairs), None)
    with pytest.warns(UserWarning, match=r"fitted on the first non-empty chunk .*\(200 rows\)"):
        est.fit(*args)


def test_kernelkit_maps_and_in_memory_fits_do_not_warn():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RandomFeatureRidge(SDERF(n_features=16, random_state=0)).fit(
            da.from_array(X, chunks=(200, 3)), y
        )
        RandomFeatureRidge(_maps()[0]).fit(X, y)


def test_a_pipeline_of_maps_that_read_only_the_dimension_does_not_warn():
    """Its fit on the first chunk is its fit on all rows."""
    X, y = _data()
    fm = make_pipeline(RandomFourierFeatures(n_features=16, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RandomFeatureRidge(fm).fit(da.from_array(X, chunks=(200, 3)), y)
