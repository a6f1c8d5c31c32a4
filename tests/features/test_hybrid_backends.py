"""Hybrid feature maps on NumPy and PyTorch, float32 and float64: same seed, same
features; dtype kept; autograd; empty input; sklearn parameters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.base import clone

from kernelkit.features import (
    AngularHybridRF,
    ClusteredHybridRF,
    ComplexExponentialRF,
    GaussianHybridRF,
    NormalizedGaussianHybridRF,
)


def _maps():
    return [
        AngularHybridRF(4, 3, random_state=0),
        AngularHybridRF(
            4, 3, shared_projection=False, sampler="orthogonal", kernel="gaussian", random_state=0
        ),
        GaussianHybridRF(4, 3, random_state=0),
        GaussianHybridRF(4, 3, lambda_features="trig", kernel="gaussian", random_state=0),
        NormalizedGaussianHybridRF(4, 3, lengthscale=1.5, random_state=0),
        ComplexExponentialRF(5, A=np.array([0.9j, 1.1, 0.8 + 0.3j, 1.0, -1.2]), random_state=0),
        ComplexExponentialRF(
            5, A=np.array([0.9, 1.1, 0.8, 1.0, 1.2]), kernel="gaussian", random_state=0
        ),
        ClusteredHybridRF(3, n_clusters=2, random_state=0),
        ClusteredHybridRF(3, n_clusters=(2, 3), mixture="gaussian", n_lambda=2, random_state=0),
    ]


def _ids():
    return [f"{type(m).__name__}-{i}" for i, m in enumerate(_maps())]


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(12, 5)) * 0.4, rng.normal(size=(10, 5)) * 0.4


@pytest.mark.parametrize("idx", range(len(_maps())), ids=_ids())
def test_backends_and_dtypes_agree(backend, idx):
    X, Y = _data()
    fm = _maps()[idx].fit(X, Y=Y)
    ref = {"P": fm.transform(X), "S": fm.transform_y(Y), "K": fm.approx_kernel(X, Y)}
    assert ref["P"].shape == (12, fm.output_dim) and ref["S"].shape == (10, fm.output_dim)
    np.testing.assert_allclose(ref["P"] @ ref["S"].T, ref["K"], rtol=1e-10, atol=1e-14)
    ref["V"] = fm.variance(X, Y)
    assert np.all(ref["V"] >= 0) and np.all(np.isfinite(ref["V"]))
    for dtype, rtol in (("float64", 1e-10), ("float32", 2e-4)):
        Xb, Yb = backend.asarray(X, dtype), backend.asarray(Y, dtype)
        out = {
            "P": fm.transform(Xb),
            "S": fm.transform_y(Yb),
            "K": fm.approx_kernel(Xb, Yb),
            "V": fm.variance(Xb, Yb),
        }
        for key, val in out.items():
            assert backend.dtype_name(val) == dtype, key
            assert type(val) is type(Xb), key
            scale = np.abs(ref[key]).max()
            np.testing.assert_allclose(
                backend.to_numpy(val), ref[key], rtol=rtol, atol=rtol * scale, err_msg=key
            )


@pytest.mark.parametrize("idx", range(len(_maps())), ids=_ids())
def test_gaussian_kernel_is_the_rescaled_softmax_estimator(idx):
    """kernel="gaussian" multiplies every feature by exp(-|u|^2/2) (hybrid paper Sec. 2; lambda_hat
    unchanged), so for the same draws its estimate is the softmax estimate times
    exp(-(|x|^2+|y|^2)/2) and its variance the softmax variance times exp(-|x|^2-|y|^2).
    With this identity the softmax Monte Carlo tests cover the Gaussian kernel too."""
    X, Y = _data()
    base = _maps()[idx]
    sm = clone(base).set_params(kernel="softmax").fit(X, Y=Y)
    ga = clone(base).set_params(kernel="gaussian").fit(X, Y=Y)
    Xs, Ys = X / base.lengthscale, Y / base.lengthscale
    f = np.exp(-0.5 * ((Xs**2).sum(1)[:, None] + (Ys**2).sum(1)[None]))
    np.testing.assert_allclose(
        ga.approx_kernel(X, Y), sm.approx_kernel(X, Y) * f, rtol=1e-10, atol=1e-14
    )
    np.testing.assert_allclose(ga.variance(X, Y), sm.variance(X, Y) * f**2, rtol=1e-10, atol=1e-14)
    exact = np.exp(-0.5 * ((Xs[:, None] - Ys[None]) ** 2).sum(-1))
    np.testing.assert_allclose(np.exp(Xs @ Ys.T) * f, exact, rtol=1e-12)


def test_torch_autograd_through_angular_hybrid(torch):
    X, Y = _data()
    fm = AngularHybridRF(4, 3, random_state=0).fit(X, Y=Y)
    Xt = torch.tensor(X, requires_grad=True)
    Yt = torch.tensor(Y)
    K = fm.approx_kernel(Xt, Yt)
    K.sum().backward()
    assert torch.isfinite(Xt.grad).all()
    # gradient of the features route equals the approx_kernel route
    Xt2 = torch.tensor(X, requires_grad=True)
    (fm.transform(Xt2) @ fm.transform_y(Yt).T).sum().backward()
    np.testing.assert_allclose(Xt.grad.numpy(), Xt2.grad.numpy(), rtol=1e-8)


@pytest.mark.parametrize("idx", range(len(_maps())), ids=_ids())
def test_empty_input_and_clone(idx):
    X, Y = _data()
    fm = _maps()[idx]
    params = fm.get_params()
    assert clone(fm).get_params().keys() == params.keys()
    fm.fit(X, Y=Y)
    assert fm.transform(X[:0]).shape == (0, fm.output_dim)
    assert fm.transform_y(Y[:0]).shape == (0, fm.output_dim)
    assert fm.approx_kernel(X[:0], Y).shape == (0, 10)
    assert fm.approx_kernel(X, Y[:0]).shape == (12, 0)
    assert fm.variance(X[:0], Y).shape == (0, 10)
    assert fm.variance(X, Y[:0]).shape == (12, 0)
    assert fm.symmetric is False


@pytest.mark.parametrize("idx", range(len(_maps())), ids=_ids())
def test_bad_data_errors(idx):
    X, Y = _data()
    fm = _maps()[idx]
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        fm.fit(bad, Y=Y)
    with pytest.raises(ValueError, match="2-D"):
        fm.fit(X[0], Y=Y)
    with pytest.raises(ValueError, match="Y has 4 features"):
        fm.fit(X, Y=Y[:, :4])
    with pytest.raises(ValueError, match="real-valued"):
        fm.fit(X + 1j, Y=Y)
    fm.fit(X, Y=Y)
    with pytest.raises(ValueError, match="Y contains NaN"):
        fm.transform_y(np.full((2, 5), np.inf))
    with pytest.raises(ValueError, match="features"):
        fm.approx_kernel(X, Y[:, :3])


def test_large_norms_stay_finite():
    """Log-space combination: approx_kernel finite where raw features overflow."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3, 4))
    X *= 12.0 / np.linalg.norm(X, axis=1, keepdims=True)
    Y = -X * 0.98  # near theta = pi: SM small, the trig part's scale e^{|x|^2} ~ e^{144}
    for fm in (
        AngularHybridRF(8, 4, random_state=0),
        AngularHybridRF(8, 4, kernel="gaussian", random_state=0),
    ):
        fm.fit(X, Y=Y)
        K = fm.approx_kernel(X, Y)
        assert np.all(np.isfinite(K))
        assert np.all(np.isfinite(fm.variance(X, Y)))
    X32, Y32 = X.astype(np.float32) * 0.5, Y.astype(np.float32) * 0.5
    fm = AngularHybridRF(8, 4, random_state=0).fit(X32, Y=Y32)
    assert np.all(np.isfinite(fm.approx_kernel(X32, Y32)))


@given(
    X=hnp.arrays(np.float64, (3, 4), elements=st.floats(-2.0, 2.0)),
    Y=hnp.arrays(np.float64, (2, 4), elements=st.floats(-2.0, 2.0)),
    seed=st.integers(0, 2**16),
    shared=st.booleans(),
)
def test_property_angular_features_dot_and_lambda_range(X, Y, seed, shared):
    fm = AngularHybridRF(3, 2, shared_projection=shared, random_state=seed).fit(X, Y=Y)
    lam, kp, kt = fm.approx_components(X, Y)
    assert np.all((lam >= 0) & (lam <= 1))
    assert np.all(kp > 0)
    K = fm.approx_kernel(X, Y)
    np.testing.assert_allclose(
        fm.transform(X) @ fm.transform_y(Y).T,
        K,
        rtol=1e-9,
        atol=1e-9 * np.abs(kp).max() + 1e-9 * np.abs(kt).max(),
    )
    V = fm.variance(X, Y)
    assert np.all(np.isfinite(V)) and np.all(V >= 0)
