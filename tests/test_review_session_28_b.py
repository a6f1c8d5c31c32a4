"""Second review of this change set: Dask weights of unknown length in ``moments``,
warning locations through scikit-learn's joblib calls, ``normalized_mse`` of targets
with no outputs, ``BasisCache`` of a huge integral ``Fraction``, and list weights that
take ``X``'s dtype."""

import fractions
import warnings

import dask.array as da
import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernelkit.distributions import BasisCache
from kernelkit.estimators import RandomFeatures
from kernelkit.features.favor import moments
from kernelkit.metrics import normalized_mse

rng = np.random.default_rng(0)


def test_moments_of_dask_rows_of_unknown_length():
    X = rng.random((50, 4))
    Xd = da.from_array(X, chunks=10)
    keep = Xd[:, 0] > -1  # all rows, of unknown count
    Xu = Xd[keep]
    w = da.full(50, 0.02, chunks=10)[keep]
    m = moments(Xu, Xu, query_weights=w)
    np.testing.assert_allclose(np.asarray(m.mean_x.compute()), X.mean(0), rtol=1e-12)


def _too_small_rf():
    return RandomFeatures(method="hyperbolic", kernel="softmax", n_components=1)


@pytest.mark.parametrize("how", ["pipeline", "grid"])
def test_warnings_point_at_the_caller_through_sklearn(how):
    X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    pipe = make_pipeline(StandardScaler(), _too_small_rf(), Ridge())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if how == "pipeline":
            pipe.fit(X, y)
        else:
            GridSearchCV(pipe, {"ridge__alpha": [1.0]}, cv=2).fit(X, y)
    ours = [w for w in caught if "smallest output" in str(w.message)]
    assert ours and all(w.filename == __file__ for w in ours)


def test_normalized_mse_of_no_outputs_is_an_error():
    with pytest.raises(ValueError, match="y_true"):
        normalized_mse(np.zeros((3, 0)), np.zeros((3, 0)))


def test_basis_cache_of_a_huge_integral_fraction():
    assert BasisCache(fractions.Fraction(10**400, 1)).max_entries == 10**400
    with pytest.raises(ValueError, match="max_entries"):
        BasisCache(fractions.Fraction(5, 2))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_list_weights_take_the_dtype_of_x(backend):
    X = rng.random((6, 3)).astype(np.float32)
    if backend == "torch":
        X = torch.from_numpy(X)
    w = [1 / 6] * 6
    m = moments(X, X, key_weights=w)
    assert m.mean_y.dtype == m.mean_x.dtype
