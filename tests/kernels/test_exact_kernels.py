"""Exact reference kernels and exact softmax attention against direct loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kernelkit.kernels import (
    gaussian_kernel,
    log_scaled_softmax_kernel,
    scaled_softmax_kernel,
    softmax_attention,
    softmax_kernel,
)


def _data(seed=0, n=4, m=5, d=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * 0.7, rng.standard_normal((m, d)) * 0.7


def _loop(f, X, Y):
    return np.array([[f(x, y) for y in Y] for x in X])


# ------------------------------------------------------------------ kernels
@pytest.mark.parametrize("alpha", [0.0, -0.5, 0.3])
def test_scaled_softmax_kernel_against_loop(alpha, backend):
    X, Y = _data(1)
    ref = _loop(lambda x, y: math.exp(alpha * x @ x + x @ y + alpha * y @ y), X, Y)
    got = scaled_softmax_kernel(backend.asarray(X), backend.asarray(Y), alpha)
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=1e-13)
    logk = log_scaled_softmax_kernel(backend.asarray(X), backend.asarray(Y), alpha)
    np.testing.assert_allclose(backend.to_numpy(logk), np.log(ref), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("ls", [1.0, 0.5, 2.3])
def test_softmax_and_gaussian_kernels_against_loop(ls, backend):
    X, Y = _data(2)
    Xb, Yb = backend.asarray(X), backend.asarray(Y)
    ref_s = _loop(lambda x, y: math.exp(x @ y / ls**2), X, Y)
    ref_g = _loop(lambda x, y: math.exp(-np.sum((x - y) ** 2) / (2 * ls**2)), X, Y)
    np.testing.assert_allclose(backend.to_numpy(softmax_kernel(Xb, Yb, ls)), ref_s, rtol=1e-13)
    np.testing.assert_allclose(backend.to_numpy(gaussian_kernel(Xb, Yb, ls)), ref_g, rtol=1e-12)
    assert backend.to_numpy(softmax_kernel(Xb, Yb)).shape == (4, 5)


def test_gaussian_kernel_diagonal_is_one_and_bounded(backend):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 8)) * 100.0  # large norms: expanded square rounds
    K = backend.to_numpy(gaussian_kernel(backend.asarray(X), backend.asarray(X), 7.0))
    # |x|^2 / l^2 ~ 1600: the expanded square |x|^2 - 2 x.y + |y|^2 leaves ~1e-13 on the
    # diagonal; the clip at 1 removes the positive side of that rounding
    np.testing.assert_allclose(np.diag(K), 1.0, rtol=1e-11)
    assert np.all(K <= 1.0) and np.all(K >= 0.0)


def test_kernels_batched_leading_dims(backend):
    rng = np.random.default_rng(4)
    X, Y = rng.standard_normal((2, 3, 4, 5)) * 0.5, rng.standard_normal((2, 3, 6, 5)) * 0.5
    got = backend.to_numpy(gaussian_kernel(backend.asarray(X), backend.asarray(Y), 1.5))
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(
                got[i, j], gaussian_kernel(X[i, j], Y[i, j], 1.5), rtol=1e-13
            )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernels_keep_dtype(dtype, backend):
    X, Y = _data(5)
    Xb, Yb = backend.asarray(X, dtype), backend.asarray(Y, dtype)
    for f in (softmax_kernel, gaussian_kernel, scaled_softmax_kernel):
        out = f(Xb, Yb)
        assert backend.dtype_name(out) == dtype


@given(
    hnp.arrays(np.float64, (3, 4), elements=st.floats(-5, 5)),
    hnp.arrays(np.float64, (2, 4), elements=st.floats(-5, 5)),
    st.floats(0.1, 10.0),
)
def test_gaussian_kernel_properties(X, Y, ls):
    K = gaussian_kernel(X, Y, ls)
    assert np.all((K >= 0) & (K <= 1))
    # symmetric in its arguments and equal to exp(-|x-y|^2 / 2l^2)
    np.testing.assert_allclose(K, gaussian_kernel(Y, X, ls).T, rtol=1e-12, atol=1e-300)
    D2 = np.sum((X[:, None] - Y[None]) ** 2, -1)
    np.testing.assert_allclose(K, np.exp(-D2 / (2 * ls**2)), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ attention
def _naive_attention(q, k, v, causal=False, mask=None, scale=None):
    """Loop over queries; masked or future keys are skipped; all-masked rows give 0."""
    L, d = q.shape
    S = k.shape[0]
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = np.zeros((L, v.shape[1]))
    for i in range(L):
        keys = [
            j for j in range(S) if not (causal and j > i) and not (mask is not None and mask[j])
        ]
        if not keys:
            continue
        logits = np.array([q[i] @ k[j] * scale for j in keys])
        w = np.exp(logits - logits.max())
        out[i] = (w / w.sum()) @ v[keys]
    return out


def _qkv(seed=6, L=5, S=5, d=4, dv=3, batch=()):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((*batch, L, d)),
        rng.standard_normal((*batch, S, d)),
        rng.standard_normal((*batch, S, dv)),
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_softmax_attention_against_naive(causal, masked, backend):
    q, k, v = _qkv()
    mask = np.array([False, True, False, False, True]) if masked else None
    ref = _naive_attention(q, k, v, causal, mask)
    got = softmax_attention(
        backend.asarray(q),
        backend.asarray(k),
        backend.asarray(v),
        is_causal=causal,
        key_padding_mask=None if mask is None else backend.asarray(mask),
    )
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=1e-12, atol=1e-14)


def test_softmax_attention_batched_masks_and_scale(backend):
    q, k, v = _qkv(7, L=4, S=6, batch=(2, 3))
    mask = np.random.default_rng(8).random((2, 3, 6)) < 0.3
    mask[0, 1] = True  # a fully padded sequence
    got = backend.to_numpy(
        softmax_attention(
            backend.asarray(q),
            backend.asarray(k),
            backend.asarray(v),
            key_padding_mask=backend.asarray(mask),
            scale=0.3,
        )
    )
    for b in range(2):
        for h in range(3):
            ref = _naive_attention(q[b, h], k[b, h], v[b, h], False, mask[b, h], 0.3)
            np.testing.assert_allclose(got[b, h], ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(got[0, 1], 0.0)  # fully masked rows give zeros


def test_fully_masked_rows_give_zeros_with_causal():
    q, k, v = _qkv(9)
    mask = np.array([True, True, False, False, False])
    out = softmax_attention(q, k, v, is_causal=True, key_padding_mask=mask)
    np.testing.assert_array_equal(out[:2], 0.0)  # rows 0, 1 see only padded keys
    assert np.all(np.isfinite(out)) and np.all(out[2:] != 0.0)


def test_softmax_attention_large_logits_are_stable():
    q, k, v = _qkv(10)
    out = softmax_attention(q * 300, k * 300, v)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, _naive_attention(q * 300, k * 300, v), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("L", "S"), [(3, 5), (5, 3)])
def test_causal_with_l_not_s_is_top_left(L, S):
    """As scaled_dot_product_attention: query i sees keys j <= i (was a ValueError)."""
    q, k, v = _qkv(11, L=L, S=S)
    out = softmax_attention(q, k, v, is_causal=True)
    for i in range(L):
        j = min(i, S - 1) + 1  # keys 0 .. min(i, S - 1)
        np.testing.assert_allclose(out[i], _naive_attention(q[i : i + 1], k[:j], v[:j])[0])


def test_softmax_attention_matches_torch_sdpa(torch):
    q, k, v = _qkv(12, L=6, S=6, batch=(2,))
    qt, kt, vt = (torch.from_numpy(a) for a in (q, k, v))
    for causal in (False, True):
        ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        got = softmax_attention(qt, kt, vt, is_causal=causal)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)
    for L in (3, 6):  # causal with L != S: top-left aligned, as SDPA
        ref = torch.nn.functional.scaled_dot_product_attention(
            qt[:, :L], kt[:, : 9 - L], vt[:, : 9 - L], is_causal=True
        )
        got = softmax_attention(qt[:, :L], kt[:, : 9 - L], vt[:, : 9 - L], is_causal=True)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)
    mask = torch.tensor([[False, False, True, False, True, False]] * 2)
    ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=~mask[:, None, :])
    got = softmax_attention(qt, kt, vt, key_padding_mask=mask)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)
