"""Try-out of the estimators with CPU torch tensors as ``X`` and ``y``, as the estimator
guide documents them (converted to NumPy; predictions float64 NumPy arrays): agreement
with the same estimator on the equivalent NumPy arrays, tensors with ``requires_grad``,
non-contiguous tensors, and ``RandomFeatures`` with ``set_output(transform="pandas")``."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.estimators import (  # noqa: E402
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import GERF, SDERF, PositiveRF  # noqa: E402

DTYPES = [torch.float32, torch.float64]


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = 0.5 * rng.standard_normal((n, d))
    return X, np.sin(X[:, 0]), (X[:, 0] > 0).astype(np.int64)


def _estimators():
    return [
        ("regressor", RandomFeatureGPRegressor(PositiveRF(64, kernel="gaussian"), noise=0.01)),
        ("regressor", RandomFeatureRidge(SDERF(64, kernel="gaussian"), alpha=0.1)),
        ("classifier", RandomFeatureGPClassifier(GERF(64, kernel="gaussian"))),
        ("classifier", NadarayaWatsonClassifier(method="sderf", n_components=64)),
        ("classifier", NadarayaWatsonClassifier(method="aderf", n_components=64, fit_on="batch")),
    ]


def _predict(kind, est, X):
    return est.predict(X) if kind == "regressor" else est.predict_proba(X)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(_estimators())))
def test_tensor_inputs_match_numpy(case, dtype):
    # The guide: CPU tensors are converted to NumPy, so a tensor and the NumPy array of
    # the same values (and dtype) take the same path: predictions equal to rounding. The
    # float32 features are mapped in float32 either way and solved in float64, so the
    # only difference allowed is the order of float64 reductions: 1e3 float64 eps.
    kind, est = _estimators()[case]
    X, y, yc = _data()
    target = y if kind == "regressor" else yc
    Xt = torch.tensor(X, dtype=dtype)
    yt = torch.tensor(target, dtype=dtype if kind == "regressor" else torch.int64)
    a = est.set_params(random_state=0).fit(Xt, yt)
    pa = _predict(kind, a, Xt)
    b = clone(est).fit(Xt.numpy(), yt.numpy())
    pb = _predict(kind, b, Xt.numpy())
    assert isinstance(pa, np.ndarray) and pa.dtype == np.float64
    np.testing.assert_allclose(pa, pb, rtol=0, atol=1e3 * np.finfo(np.float64).eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(_estimators())))
def test_tensors_that_require_grad_are_converted(case, dtype):
    # A tensor with requires_grad (a batch from a model, say) is converted to NumPy like
    # any other CPU tensor: it raised torch's "Can't call numpy() on Tensor that requires
    # grad" from inside scikit-learn's validation, in fit and in predict. The values are
    # the same, so the predictions are identical (tolerance 0).
    kind, est = _estimators()[case]
    X, y, yc = _data()
    target = y if kind == "regressor" else yc
    Xt = torch.tensor(X, dtype=dtype)
    Xg = Xt.clone().requires_grad_(True)
    if kind == "regressor":
        yt = torch.tensor(target, dtype=dtype)
        yg = yt.clone().requires_grad_(True)
    else:
        yt = yg = torch.tensor(target)
    ref = _predict(kind, clone(est).set_params(random_state=0).fit(Xt, yt), Xt)
    got = _predict(kind, clone(est).set_params(random_state=0).fit(Xg, yg), Xg)
    np.testing.assert_array_equal(got, ref)
    assert Xg.grad is None  # nothing was differentiated


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_tensors_match_contiguous(dtype):
    # A strided view (every other column) and a column-major view hold the same values as
    # the contiguous copy: the same predictions up to the order of the BLAS sums over
    # 40 rows and 32 features in the input's dtype, bounded by 1e3 eps of that dtype
    # relative to the largest prediction.
    X, y, _ = _data(d=6)
    Xs = torch.tensor(X, dtype=dtype)[:, ::2]
    Xc = Xs.contiguous()
    yt = torch.tensor(y, dtype=dtype)
    est = RandomFeatureGPRegressor(SDERF(32, kernel="gaussian"), random_state=0)
    ref = est.fit(Xc, yt).predict(Xc, return_std=True)
    got = est.fit(Xs.T.contiguous().T, yt).predict(Xs, return_std=True)
    eps = float(torch.finfo(dtype).eps)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e3 * eps * np.abs(r).max())


@pytest.mark.parametrize("method", ["sderf", "auto"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_features_pandas_output_of_a_tensor_that_requires_grad(method, dtype):
    # set_output(transform="pandas") of a tensor with requires_grad: the DataFrame holds
    # the values (it cannot hold a graph); scikit-learn's wrapper raised torch's "Can't
    # call numpy() on Tensor that requires grad". Same values as without grad (exact).
    X, _, _ = _data()
    Xt = torch.tensor(X, dtype=dtype)
    rf = RandomFeatures(method=method, kernel="gaussian", n_components=16, random_state=0)
    rf.set_output(transform="pandas").fit(Xt)
    ref = rf.transform(Xt)
    got = rf.transform(Xt.clone().requires_grad_(True))
    assert got.dtypes.iloc[0] == ref.dtypes.iloc[0] == Xt.numpy().dtype
    np.testing.assert_array_equal(got.to_numpy(), ref.to_numpy())
    fitted = rf.fit_transform(Xt.clone().requires_grad_(True))
    np.testing.assert_array_equal(fitted.to_numpy(), ref.to_numpy())
    # without a container, the tensor keeps its graph
    rf.set_output(transform="default")
    assert rf.transform(Xt.clone().requires_grad_(True)).requires_grad
