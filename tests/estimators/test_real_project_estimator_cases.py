"""The estimators with the inputs of a real project: integer and one-hot data, whose
kernel values can be exactly zero, SciPy sparse rows in Dask chunks or blocks, and
DataFrames with non-numeric columns.

Expected values are exact references: the same seed gives the same draw, so a choice of
``method="auto"`` is compared with the map of the chosen method fitted directly.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import RandomFourierFeatures


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


ESTIMATORS = [
    RandomFeatureRidge(RandomFourierFeatures(8), random_state=0),
    RandomFeatureGPRegressor(RandomFourierFeatures(8), random_state=0),
    RandomFeatureGPClassifier(RandomFourierFeatures(8), random_state=0),
    NadarayaWatsonClassifier(method="sderf", n_components=8, random_state=0),
]
CHUNKED = ESTIMATORS[:3]  # the estimators that fit an iterable of blocks


def _sparse_rows():
    da = pytest.importorskip("dask.array", reason="dask not installed (the dask extra)")
    S = sp.random(60, 5, density=0.4, format="csr", random_state=0)
    return S, da.from_array(S, chunks=(20, 5), asarray=False), np.arange(60) % 2


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_a_dask_array_of_sparse_chunks_is_refused_by_name(est):
    # The estimators need dense rows, as for a SciPy matrix in memory; a Dask array of
    # sparse chunks gave "X must be numeric; setting an array element with a sequence"
    # at fit and "sparse array length is ambiguous" at predict.
    S, dS, y = _sparse_rows()
    sparse_chunks = r"X is a Dask array of SciPy sparse chunks"
    with pytest.raises(TypeError, match=sparse_chunks):
        clone(est).fit(dS, y)
    fitted = clone(est).fit(S.toarray(), y)
    with pytest.raises(TypeError, match=sparse_chunks):
        np.asarray(fitted.predict(dS))


@pytest.mark.parametrize("est", CHUNKED, ids=lambda e: type(e).__name__)
def test_sparse_blocks_of_an_iterable_are_refused_by_name(est):
    # they were read as 0-d object arrays: "X: block 0 must be 2-D ..., got shape ()"
    S, _, y = _sparse_rows()
    with pytest.raises(TypeError, match=r"X: block 1 is a SciPy sparse csr_matrix"):
        clone(est).fit([(S[:30].toarray(), y[:30]), (S[30:], y[30:])], None)


def _frame_with(column):
    X = np.random.default_rng(0).standard_normal((10, 2))
    frame = pd.DataFrame(X, columns=["a", "b"])
    frame["c"] = column
    return frame


@pytest.mark.parametrize(
    "est",
    [*ESTIMATORS, RandomFeatures(method="trig", n_components=8, random_state=0)],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize(
    "column",
    [
        ["x", "y"] * 5,
        pd.Categorical(["x", "y"] * 5),
        pd.date_range("2020-01-01", periods=10),
    ],
    ids=["strings", "categorical", "datetime"],
)
def test_a_dataframe_with_a_non_numeric_column_is_a_type_error_naming_x(est, column):
    # as a NumPy array of strings and the feature maps' own fit: it was scikit-learn's
    # bare "could not convert string to float: 'x'" (a ValueError) or NumPy's
    # DTypePromotionError, naming neither X nor the column
    y = np.arange(10) % 2
    with pytest.raises(TypeError, match=r"^X must be numeric; column 'c' has dtype"):
        clone(est).fit(_frame_with(column), y)


@pytest.mark.parametrize("est", ESTIMATORS[:2], ids=lambda e: type(e).__name__)
def test_a_dataframe_with_numeric_object_and_categorical_columns_fits(est):
    # guard: object columns of numbers (pandas.NA aside), numeric categoricals and numeric
    # strings are numbers, as for scikit-learn: the same model as the float frame, to the
    # last bit (the same float64 rows reach the same computation)
    y = np.arange(10) % 2
    ref = clone(est).fit(_frame_with(np.arange(10.0)), y).predict(_frame_with(np.arange(10.0)))
    for column in (np.arange(10.0).astype(object), pd.Categorical(np.arange(10.0))):
        frame = _frame_with(column)
        np.testing.assert_array_equal(clone(est).fit(frame, y).predict(frame), ref)
    with_na = _frame_with(pd.array([1, pd.NA, *range(8)], dtype=object))
    with pytest.raises(ValueError, match="NaN"):  # missing data, not a non-numeric column
        clone(est).fit(with_na, y)
