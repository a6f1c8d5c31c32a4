"""Torch feature parameters of kernelkit.attention: batched closed-form fits against the
NumPy fits of kernelkit.features.softmax, and unbiasedness of the log features (MC)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention._maps import _fit_sderf, build_log_map, moments  # noqa: E402
from kernelkit.features.sampling import gaussian_projection  # noqa: E402
from kernelkit.features.softmax import fit_aderf, fit_gerf, fit_saderf, fit_sderf  # noqa: E402


def _bc(A, like):
    return np.broadcast_to(np.asarray(A)[..., None], tuple(like.shape))


def _data(seed=0, batch=(2, 3), n=40, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((*batch, n, d)) * 0.7
    Y = rng.standard_normal((*batch, n + 7, d)) * rng.uniform(0.3, 1.5, size=d) + 0.4
    return X, Y


def test_batched_fits_match_numpy_closed_forms():
    X, Y = _data()
    d = X.shape[-1]
    mom = moments(torch.as_tensor(X), torch.as_tensor(Y))
    W = torch.as_tensor(gaussian_projection(16, d, 0))
    # GERF (FAVOR++ Sec. 3.1): A = A*(phi)
    A_np = fit_gerf(X, Y)
    c = build_log_map("gerf", W, mom, d).c  # (..., M) = A |w_m|^2
    np.testing.assert_allclose(c.numpy() / (W**2).sum(1).numpy(), _bc(A_np, c), rtol=1e-10)
    # SADERF (eq. 20): psi and A
    psi_np, A_np = fit_saderf(X, Y)
    fm = build_log_map("saderf", W, mom, d)
    np.testing.assert_allclose(fm.T_q.numpy(), psi_np, rtol=1e-10)
    np.testing.assert_allclose(fm.T_k.numpy(), 1.0 / psi_np, rtol=1e-10)
    np.testing.assert_allclose(fm.c.numpy() / (W**2).sum(1).numpy(), _bc(A_np, fm.c), rtol=1e-10)
    # ADERF (Thm 4.2): B1, B2 up to the sign of each row, A exactly
    B1_np, B2_np, A_np = fit_aderf(X, Y)
    fm = build_log_map("aderf", W, mom, d)
    B1, B2 = fm.T_q.mT.numpy(), fm.T_k.mT.numpy()
    signs = np.sign((B1 * B1_np).sum(-1, keepdims=True))
    np.testing.assert_allclose(B1 * signs, B1_np, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(B2 * signs, B2_np, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        np.swapaxes(B1, -1, -2) @ B2, np.broadcast_to(np.eye(d), B1.shape), atol=1e-10
    )
    np.testing.assert_allclose(fm.c.numpy() / (W**2).sum(1).numpy(), _bc(A_np, fm.c), rtol=1e-10)
    # SDERF (Thm 4.3): a_l and the eigenvectors Q3 (torch: ascending order, NumPy:
    # descending; columns up to sign)
    Q3t_np, a_np = fit_sderf(X, Y)
    Q3, a = _fit_sderf(mom)
    np.testing.assert_allclose(a.numpy()[..., ::-1], a_np, rtol=1e-8, atol=1e-12)
    Q3_np = np.swapaxes(Q3t_np, -1, -2)
    Q3r = Q3.numpy()[..., ::-1]
    col_signs = np.sign((Q3r * Q3_np).sum(-2, keepdims=True))
    np.testing.assert_allclose(Q3r * col_signs, Q3_np, atol=1e-7)
    fm = build_log_map("sderf", W, mom, d)
    s = np.sqrt(1.0 - 4.0 * a.numpy())
    np.testing.assert_allclose(
        fm.W_q.numpy(), Q3.numpy() @ (s[..., :, None] * W.numpy().T), rtol=1e-12, atol=1e-12
    )


def test_padded_keys_excluded_from_moments():
    X, Y = _data(batch=(1,))
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    keep = torch.ones(Yt.shape[:-1], dtype=torch.float64)
    keep[..., 30:] = 0
    w = keep / keep.sum(-1, keepdim=True)
    m1 = moments(Xt, Yt, w)
    m2 = moments(Xt, Yt[..., :30, :])
    for a, b in ((m1.mean_y, m2.mean_y), (m1.second_y, m2.second_y)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf"])
def test_log_features_are_unbiased_for_the_softmax_kernel(name):
    """mean_m exp(lq_m + lk_m) * D^2 estimates exp(x.y) (D = det(I - 4A)^{1/4}, the
    feature-independent constant the attention drops): |mean - K| < 4 SE, 2e5 i.i.d.
    features, d = 4, |x|, |y| <= 1."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4)) * 0.4
    Y = rng.standard_normal((30, 4)) * 0.3 + 0.2
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    mom = moments(Xt, Yt)
    M = 200_000
    W = torch.as_tensor(gaussian_projection(M, 4, 2))
    fm = build_log_map(name, W, mom, 4)
    x, y = Xt[:3], Yt[:3]  # three pairs (x_i, y_i)
    lq, lk = fm.log_features(x, "q"), fm.log_features(y, "k")  # (3, M')
    if name in ("positive", "hyperbolic"):
        logD2 = 0.0
    else:
        # recover the dropped constant: c_m = sum_l a_l w_ml^2, s_l = sqrt(1 - 4 a_l)
        a = _diag_a(name, fm, W)
        logD2 = 0.5 * np.log1p(-4.0 * a).sum()
    prod = torch.exp(lq + lk + logD2).numpy()  # (3, M')
    if name == "hyperbolic":
        prod = 0.5 * (prod[:, :M] + prod[:, M:])  # antithetic pair = one sample
    K = np.exp((X[:3] * Y[:3]).sum(1))
    mean, se = prod.mean(1), prod.std(1) / np.sqrt(prod.shape[1])
    assert np.all(np.abs(mean - K) < 4 * se + 1e-12), (mean, K, se)


def _diag_a(name, fm, W):
    # A (scalar maps) from c = A |w|^2, or a_l for SDERF from c = a . w^2 (least squares)
    w2 = (W**2).numpy()
    c = fm.c.numpy()
    if name == "sderf":
        return np.linalg.lstsq(w2[:200], c[:200], rcond=None)[0]
    return np.full(W.shape[1], c[0] / w2[0].sum())
