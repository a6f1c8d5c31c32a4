"""Autograd through ``log_relative_variance`` (torch input) at exact estimates.

Where an estimate is exact (a zero row for the dot-product sketches and Maclaurin maps,
``x = y`` for the Fourier maps, ``y = -x`` for the hyperbolic ones) the log relative
variance is ``-inf``; its torch gradient must still be finite everywhere (0 at those
entries), not ``log'(0) * 0 = nan`` spread over the whole gradient. Away from exact
points the guarded logs change nothing: torch's gradient passes ``gradcheck`` against
finite differences, and the values equal the NumPy ones.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS

torch = pytest.importorskip("torch", reason="torch not installed (the torch extra)")


def _name(cls):
    return cls.__name__


def _make(cls, X):
    kwargs = {"random_state": 0}
    if "n_features" in cls().get_params():
        kwargs["n_features"] = 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**kwargs).fit(X)


def _points(cls, seed=0, zero_row=True):
    g = torch.Generator().manual_seed(seed)
    X = 0.5 * torch.randn(5, 4, dtype=torch.float64, generator=g)
    if zero_row:
        X[0] = 0.0
    if cls.__name__ == "SphericalRandomFeatures":  # unit rows only (zero rows allowed)
        n = X.norm(dim=1, keepdim=True)
        X = X / torch.where(n > 0, n, torch.ones_like(n))
    return X


@pytest.mark.parametrize("cls", PUBLIC_MAPS, ids=_name)
@pytest.mark.parametrize("pair", ["x_x", "x_minus_x"])
def test_log_relative_variance_gradient_finite_at_exact_estimates(cls, pair):
    X = _points(cls)
    fm = _make(cls, X.numpy())
    Xr = X.clone().requires_grad_(True)
    Yr = None if pair == "x_x" else (-X).clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fm.log_relative_variance(Xr, Yr)  # (5, 5)
        ref = fm.log_relative_variance(X.numpy(), None if Yr is None else -X.numpy())
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-10, atol=1e-12)
    finite = torch.isfinite(out)
    out[finite].sum().backward()
    assert torch.isfinite(Xr.grad).all(), Xr.grad
    if Yr is not None:
        assert torch.isfinite(Yr.grad).all(), Yr.grad


@pytest.mark.parametrize("cls", PUBLIC_MAPS, ids=_name)
def test_log_relative_variance_gradient_matches_finite_differences(cls):
    X = _points(cls, seed=1, zero_row=False)[:3]
    Y = _points(cls, seed=2, zero_row=False)[:2]
    fm = _make(cls, X.numpy())

    def f(Xv, Yv):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fm.log_relative_variance(Xv, Yv)

    # no exact pair among these random points: the log relative variance is smooth there
    assert torch.isfinite(f(X, Y)).all()
    Xr, Yr = X.clone().requires_grad_(True), Y.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (Xr, Yr), eps=1e-6, atol=1e-5, rtol=1e-4)
