"""NumPy / PyTorch parity, dtype policy and autograd for the softmax-family maps."""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import ALL_MAPS, DERF_MAPS, make_xy

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _name(cls):
    return cls.__name__


def _np(a):
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_same_seed_same_features_numpy_and_torch_float64(cls, kernel):
    X, Y = make_xy(60, n=7, m=9)
    fm_n = cls(n_features=64, kernel=kernel, lengthscale=1.3, random_state=3).fit(X, Y=Y)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    fm_t = cls(n_features=64, kernel=kernel, lengthscale=1.3, random_state=3).fit(Xt, Y=Yt)
    # fitted on torch tensors: same parameters as on NumPy
    np.testing.assert_array_equal(fm_t.projection_, fm_n.projection_)
    for attr in ("A_", "B_x_", "B_y_", "offset_", "psi_"):
        if hasattr(fm_n, attr) and getattr(fm_n, attr) is not None:
            np.testing.assert_allclose(getattr(fm_t, attr), getattr(fm_n, attr), rtol=1e-14)
    pairs = [
        (fm_t.transform(Xt), fm_n.transform(X)),
        (fm_t.transform_y(Yt), fm_n.transform_y(Y)),
        (fm_t.approx_kernel(Xt, Yt), fm_n.approx_kernel(X, Y)),
        (fm_t.variance(Xt, Yt), fm_n.variance(X, Y)),
    ]
    bt, st = fm_t.transform_scaled(Yt, "y")
    bn, sn = fm_n.transform_scaled(Y, "y")
    pairs.append((bt * torch.exp(st)[:, None], bn * np.exp(sn)[:, None]))
    for got, ref in pairs:
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        np.testing.assert_allclose(_np(got), ref, rtol=1e-11, atol=1e-14)
    assert fm_t.log_objective(Xt, Yt) == pytest.approx(fm_n.log_objective(X, Y), rel=1e-12)


@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_float32_in_float32_out(cls, backend):
    X, Y = make_xy(61, n=6, m=5)
    fm = cls(n_features=128, kernel="gaussian", random_state=0).fit(X, Y=Y)
    X32, Y32 = backend.asarray(X, "float32"), backend.asarray(Y, "float32")
    outs = {
        "transform": fm.transform(X32),
        "transform_y": fm.transform_y(Y32),
        "approx_kernel": fm.approx_kernel(X32, Y32),
        "variance": fm.variance(X32, Y32),
        "base": fm.transform_scaled(X32)[0],
        "log_scale": fm.transform_scaled(X32)[1],
    }
    if hasattr(fm, "log_transform"):
        outs["log_transform"] = fm.log_transform(X32)
    refs = {
        "transform": fm.transform(X),
        "transform_y": fm.transform_y(Y),
        "approx_kernel": fm.approx_kernel(X, Y),
        "variance": fm.variance(X, Y),
    }
    for name, out in outs.items():
        assert backend.dtype_name(out) == "float32", name
        if name in refs:
            np.testing.assert_allclose(
                backend.to_numpy(out), refs[name], rtol=2e-4, atol=1e-6, err_msg=name
            )
    # float64 in: float64 out
    assert backend.dtype_name(fm.approx_kernel(backend.asarray(X), backend.asarray(Y))) == "float64"


def test_fit_on_float32_torch_and_grad_tensors():
    X, Y = make_xy(62, n=20, m=20)
    Xt = torch.tensor(X, dtype=torch.float32, requires_grad=True)
    Yt = torch.tensor(Y, dtype=torch.float32)
    for cls in ALL_MAPS:
        fm = cls(n_features=32, random_state=0).fit(Xt, Y=Yt)
        ref = cls(n_features=32, random_state=0).fit(X.astype(np.float32), Y=Y.astype(np.float32))
        if hasattr(fm, "A_"):
            np.testing.assert_allclose(fm.A_, ref.A_, rtol=1e-12)
            assert fm.A_.dtype == np.float64  # parameters are fitted in float64
        K = fm.approx_kernel(Xt, Yt)
        assert K.dtype == torch.float32 and K.requires_grad


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_gradcheck_approx_kernel(cls, kernel):
    X, Y = make_xy(63, n=3, m=2, d=3)
    fm = cls(n_features=8, kernel=kernel, lengthscale=0.9, random_state=1).fit(X, Y=Y)
    Xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    Yt = torch.tensor(Y, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fm.approx_kernel, (Xt, Yt), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_gradcheck_transform(cls):
    X, Y = make_xy(64, n=3, m=2, d=3)
    fm = cls(n_features=5, kernel="gaussian", random_state=1).fit(X, Y=Y)
    Xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fm.transform, (Xt,), eps=1e-6, atol=1e-7, rtol=1e-5)
    Yt = torch.tensor(Y, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fm.transform_y, (Yt,), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradient_of_positive_rf_kernel_matches_analytic_form():
    """d/dx sum_j K_hat(x, y_j) for PositiveRF: sum_m (w_m - x) f(w_m, x) f(w_m, y_j) / M."""
    X, Y = make_xy(65, n=2, m=3)
    from kernelkit.features import PositiveRF

    fm = PositiveRF(n_features=50, random_state=2).fit(X, Y=Y)
    Xt = torch.tensor(X, requires_grad=True)
    fm.approx_kernel(Xt, torch.from_numpy(Y)).sum().backward()
    W = fm.projection_
    fx = np.exp(X @ W.T - 0.5 * np.sum(X * X, 1)[:, None])  # (n, M)
    fy = np.exp(Y @ W.T - 0.5 * np.sum(Y * Y, 1)[:, None])  # (m, M)
    coef = fx * fy.sum(0)[None, :] / 50  # (n, M)
    ref = coef @ W - coef.sum(1)[:, None] * X
    np.testing.assert_allclose(Xt.grad.numpy(), ref, rtol=1e-10)


@pytest.mark.parametrize("cls", DERF_MAPS, ids=_name)
def test_gradcheck_variance_and_log_transform(cls):
    X, Y = make_xy(66, n=2, m=2, d=3)
    fm = cls(n_features=4, random_state=1).fit(X, Y=Y)
    Xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    Yt = torch.tensor(Y, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fm.variance, (Xt, Yt), eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradcheck(fm.log_transform, (Xt,), eps=1e-6, atol=1e-7, rtol=1e-5)
