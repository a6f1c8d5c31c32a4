"""``RandomFeatures`` as an estimator's ``feature_map`` on chunked input warned that it
was "fitted on the first chunk only" where its method's map reads the dimension only
(its fit on the first chunk is its fit on every row); and ``method="auto"`` answered
inputs and parameters that every candidate refuses with "no candidate has a finite
variance" instead of the candidates' own errors."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.pipeline import make_pipeline

from kernelkit.estimators import RandomFeatureRidge, RandomFeatures

rng = np.random.default_rng(7)
X = rng.standard_normal((41, 4)) / 2
y = X[:, 0] * X[:, 1] + 0.1 * rng.standard_normal(41)


def _rf(method="tensor_sketch", **kw):
    return RandomFeatures(method=method, kernel="polynomial", n_components=12, random_state=0, **kw)


@pytest.mark.parametrize(
    "case", ["generator", "dask_pipeline", "generator_pipeline"], ids=lambda c: c
)
def test_no_first_chunk_warning_for_maps_that_read_the_dimension(case):
    rf = _rf()
    ref = RandomFeatureRidge(feature_map=rf).fit(X, y)
    if case == "generator":
        fm, args = rf, (((X[i : i + 7], y[i : i + 7]) for i in range(0, 41, 7)), None)
    elif case == "generator_pipeline":
        fm = make_pipeline(rf)
        args = (((X[i : i + 7], y[i : i + 7]) for i in range(0, 41, 7)), None)
    else:
        fm, args = make_pipeline(rf), (da.from_array(X, chunks=(7, 4)), y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = RandomFeatureRidge(feature_map=fm).fit(*args)
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=1e-10)


def test_fit_reads_follows_the_method():
    assert _rf("tensor_sketch").fit_reads == "shape"
    assert RandomFeatures(method="sderf", kernel="softmax").fit_reads == "moments"
    assert RandomFeatures(method="OPTIMIZED_MACLAURIN").fit_reads == "all"
    assert _rf("auto").fit_reads == "all"  # the pick depends on the rows
    assert RandomFeatures(method="no such method").fit_reads == "all"  # fit names it


def test_auto_on_a_pipeline_of_chunks_still_warns():
    # "auto" picks on the rows it sees: fitted inside a Pipeline on the first chunk only
    with pytest.warns(UserWarning, match="first non-empty chunk"):
        RandomFeatureRidge(feature_map=make_pipeline(_rf("auto"))).fit(
            da.from_array(X, chunks=(7, 4)), y
        )


Xs = np.random.default_rng(0).standard_normal((20, 3))


@pytest.mark.parametrize(
    ("kw", "data", "match"),
    [
        ({}, da.from_array(Xs, chunks=(5, 3))[:0], "X is empty"),
        ({"lengthscale": 1e200}, Xs, "lengthscale"),
        ({"degree": 10**6}, Xs, "degree"),
    ],
    ids=["empty_dask", "lengthscale", "degree"],
)
def test_auto_reports_what_every_candidate_refuses(kw, data, match):
    rf = RandomFeatures(method="auto", kernel="polynomial", n_components=8, random_state=0, **kw)
    with pytest.raises(ValueError, match=match) as info:
        rf.fit(data)
    assert "finite variance" not in str(info.value)


@pytest.mark.parametrize("method", ["auto", "optimized_maclaurin"])
def test_row_reading_method_on_a_stream_is_fitted_on_the_first_block(method):
    # as the maps that read every row, passed directly (the guide's "Scale-out" page):
    # the first non-empty block of a stream, without a warning
    rf = _rf(method)
    blocks = ((X[i : i + 7], y[i : i + 7]) for i in range(0, 41, 7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = RandomFeatureRidge(feature_map=rf).fit(blocks, None)
    first = _rf(method).fit(X[:7])
    np.testing.assert_array_equal(model.feature_map_.transform(X[:5]), first.transform(X[:5]))
