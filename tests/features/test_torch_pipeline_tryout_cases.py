"""Try-out of the positive (softmax-family) maps with CPU torch tensors, as the feature-map
contract documents them: ``set_output(transform="pandas")`` of a tensor that requires
grad, a scikit-learn ``Pipeline`` fed tensors, ``approx_kernel`` against the exact kernel,
autograd through ``transform`` against finite differences, and strided or empty tensors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.features import (  # noqa: E402
    ADERF,
    GERF,
    SADERF,
    SDERF,
    HyperbolicRF,
    PositiveRF,
)

MAPS = [PositiveRF, HyperbolicRF, GERF, SADERF, ADERF, SDERF]
DTYPES = [torch.float32, torch.float64]


def _xy(n=30, m=20, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return 0.5 * rng.standard_normal((n, d)), 0.5 * rng.standard_normal((m, d))


@pytest.mark.parametrize("cls", MAPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pandas_output_of_a_tensor_that_requires_grad(cls, dtype):
    # The DataFrame holds the features' values (it cannot hold a graph): scikit-learn's
    # set_output wrapper raised torch's "Can't call numpy() on Tensor that requires grad"
    # from transform and fit_transform. Same values as without grad (exact), the input's
    # dtype; without a container the tensor keeps its graph.
    X, _ = _xy()
    Xt = torch.tensor(X, dtype=dtype)
    fm = cls(16, kernel="gaussian", random_state=0).set_output(transform="pandas").fit(Xt)
    ref = fm.transform(Xt)
    got = fm.transform(Xt.clone().requires_grad_(True))
    assert got.dtypes.iloc[0] == Xt.numpy().dtype
    np.testing.assert_array_equal(got.to_numpy(), ref.to_numpy())
    fitted = fm.fit_transform(Xt.clone().requires_grad_(True))
    np.testing.assert_array_equal(fitted.to_numpy(), ref.to_numpy())
    fm.set_output(transform="default")
    assert fm.transform(Xt.clone().requires_grad_(True)).requires_grad


@pytest.mark.parametrize("cls", MAPS)
def test_pipeline_with_tensors_matches_numpy(cls):
    # The contract: without array API dispatch the next scikit-learn step converts the
    # (CPU) tensors to NumPy, so the pipeline on float64 tensors is the pipeline on the
    # same float64 arrays; the map's torch and NumPy features agree to a few float64 ulp
    # (~1e-15 relative, measured) and Ridge's solve of 64 features amplifies that by its
    # condition number: 1e-8 absolute on predictions of order 1.
    X, _ = _xy()
    y = np.sin(X[:, 0])
    Xt, yt = torch.tensor(X), torch.tensor(y)
    a = make_pipeline(cls(64, kernel="gaussian", random_state=0), Ridge(alpha=1e-3))
    b = make_pipeline(cls(64, kernel="gaussian", random_state=0), Ridge(alpha=1e-3))
    pa = a.fit(Xt, yt).predict(Xt)
    pb = b.fit(X, y).predict(X)
    assert isinstance(pa, np.ndarray) and pa.dtype == np.float64
    np.testing.assert_allclose(pa, pb, rtol=0, atol=1e-8)


@pytest.mark.parametrize("cls", MAPS)
def test_approx_kernel_of_tensors_within_the_variance(cls):
    # Unbiased estimate of the exact kernel: |K_hat - K| <= 6 sigma with sigma^2 the map's
    # own per-pair variance (for 600 pairs, 6 sigma is exceeded with probability < 1e-6
    # under a normal approximation of the 256-feature mean).
    X, Y = _xy()
    Xt, Yt = torch.tensor(X), torch.tensor(Y)
    fm = cls(256, kernel="softmax", random_state=0).fit(Xt, Y=Yt)
    K = fm.approx_kernel(Xt, Yt)
    assert isinstance(K, torch.Tensor) and K.dtype == torch.float64
    exact = np.asarray(fm.exact_kernel(X, Y))
    var = np.asarray(fm.variance(X, Y))
    assert np.all(np.abs(K.numpy() - exact) <= 6 * np.sqrt(var) + 1e-12 * exact)


@pytest.mark.parametrize("cls", MAPS)
def test_transform_gradient_matches_finite_differences(cls):
    # float64 gradcheck (central differences, eps 1e-6, torch's atol 1e-5 / rtol 1e-3)
    # of both sides' features on a few rows.
    X, Y = _xy(n=4, m=3, d=3)
    fm = cls(8, kernel="softmax", random_state=0).fit(torch.tensor(X), Y=torch.tensor(Y))
    Xg = torch.tensor(X, requires_grad=True)
    assert torch.autograd.gradcheck(fm.transform, (Xg,))
    assert torch.autograd.gradcheck(fm.transform_y, (Xg,))


@pytest.mark.parametrize("cls", MAPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_and_empty_tensors(cls, dtype):
    # A strided view and its contiguous copy hold the same values: same features to the
    # order of the projection's d = 4 term sum (16 eps relative); an empty tensor maps to
    # (0, output_dim) in the input's dtype, with a graph when it requires grad.
    X, _ = _xy()
    wide = torch.tensor(np.repeat(X, 2, axis=1), dtype=dtype)
    Xs = wide[:, ::2]
    fm = cls(16, kernel="gaussian", random_state=0).fit(Xs)
    ref = fm.transform(Xs.contiguous())
    eps = float(torch.finfo(dtype).eps)
    for view in (Xs, Xs.contiguous().T.contiguous().T):
        torch.testing.assert_close(fm.transform(view), ref, rtol=16 * eps, atol=0)
    empty = fm.transform(torch.zeros((0, 4), dtype=dtype, requires_grad=True))
    assert empty.shape == (0, fm.output_dim) and empty.dtype == dtype
    assert empty.requires_grad
