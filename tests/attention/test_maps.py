"""Torch feature parameters of kernelkit.attention: batched parameters equal the per-instance
NumPy fits of kernelkit.features.favor, padded keys are excluded from the moments, and the
log features are unbiased for the softmax kernel (MC)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention._maps import build_log_map, fit_moments  # noqa: E402
from kernelkit.features import favor  # noqa: E402
from kernelkit.features.sampling import gaussian_projection  # noqa: E402

FITTED = ["gerf", "saderf", "aderf", "sderf"]


def _data(seed=0, batch=(2, 3), n=40, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((*batch, n, d)) * 0.7
    Y = rng.standard_normal((*batch, n + 7, d)) * rng.uniform(0.3, 1.5, size=d) + 0.4
    return X, Y


@pytest.mark.parametrize("name", FITTED)
def test_batched_parameters_equal_per_instance_numpy_fits(name):
    """build_log_map on batched torch moments (one fit per (batch, head)) equals
    fit_derf + derf_log_weights of every instance on NumPy data: W_q, W_k, c and the
    row-term transforms (SADERF psi, ADERF B~1 / B~2; none for GERF and SDERF)."""
    X, Y = _data()
    d = X.shape[-1]
    full = name in ("aderf", "sderf")
    W = gaussian_projection(16, d, 0)
    fmap = build_log_map(
        name, torch.as_tensor(W), fit_moments(torch.as_tensor(X), torch.as_tensor(Y), None, full), d
    )
    assert fmap.W_q.shape == (2, 3, d, 16) and fmap.c.shape == (2, 3, 16)
    assert (fmap.B_q is None) == (name in ("gerf", "sderf"))
    for i in np.ndindex(2, 3):
        params = favor.fit_derf(name, favor.moments(X[i], Y[i], full=full))
        W_x, W_y, const = favor.derf_log_weights(params, W)
        np.testing.assert_allclose(fmap.W_q[i].numpy(), W_x, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(fmap.W_k[i].numpy(), W_y, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(fmap.c[i].numpy(), const, rtol=1e-10, atol=1e-12)
        if fmap.B_q is not None:
            np.testing.assert_allclose(fmap.B_q[i].numpy(), params.B_x, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(fmap.B_k[i].numpy(), params.B_y, rtol=1e-10, atol=1e-12)


def test_padded_keys_excluded_from_moments():
    X, Y = _data(batch=(1,))
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    keep = torch.ones(Yt.shape[:-1], dtype=torch.float64)
    keep[..., 30:] = 0
    w = keep / keep.sum(-1, keepdim=True)
    m1 = fit_moments(Xt, Yt, w)
    m2 = fit_moments(Xt, Yt[..., :30, :])
    assert isinstance(m1, favor.Moments)
    for a, b in ((m1.mean_y, m2.mean_y), (m1.second_y, m2.second_y)):
        torch.testing.assert_close(a, b)


def test_moments_are_detached_float64():
    X, Y = _data(batch=(1,))
    Xt = torch.as_tensor(X, dtype=torch.float32).requires_grad_(True)
    Yt = torch.as_tensor(Y, dtype=torch.float32)
    mom = fit_moments(Xt, Yt)
    for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y):
        assert t.dtype == torch.float64 and not t.requires_grad
    W = torch.as_tensor(gaussian_projection(8, X.shape[-1], 0))
    fmap = build_log_map("aderf", W, mom, X.shape[-1])
    assert not any(t.requires_grad for t in (fmap.W_q, fmap.W_k, fmap.c, fmap.B_q, fmap.B_k))


@pytest.mark.parametrize("name", ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf"])
def test_log_features_are_unbiased_for_the_softmax_kernel(name):
    """M' mean_m exp(lq_m + lk_m) estimates exp(x.y) (M' = number of features; the
    constant c includes sum_l log(1 - 4 a_l)/4 - log(M')/2): |mean - K| < 4 SE, 2e5
    i.i.d. projections, d = 4, |x|, |y| <= 1."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4)) * 0.4
    Y = rng.standard_normal((30, 4)) * 0.3 + 0.2
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    mom = fit_moments(Xt, Yt)
    M = 200_000
    W = torch.as_tensor(gaussian_projection(M, 4, 2))
    fm = build_log_map(name, W, mom, 4)
    x, y = Xt[:3], Yt[:3]  # three pairs (x_i, y_i)
    lq, lk = fm.log_features(x, "q"), fm.log_features(y, "k")  # (3, M')
    prod = (torch.exp(lq + lk) * fm.n_out).numpy()  # (3, M')
    if name == "hyperbolic":
        prod = 0.5 * (prod[:, :M] + prod[:, M:])  # antithetic pair = one sample
    K = np.exp((X[:3] * Y[:3]).sum(1))
    mean, se = prod.mean(1), prod.std(1) / np.sqrt(prod.shape[1])
    assert np.all(np.abs(mean - K) < 4 * se + 1e-12), (mean, K, se)
