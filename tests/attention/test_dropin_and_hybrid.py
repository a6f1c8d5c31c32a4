"""linear_attention as an SDPA drop-in (attn_mask, dropout_p, enable_gqa, shapes), the
hybrid map against kernelkit.features.AngularHybridRF, precision paths and edge cases."""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv  # noqa: E402
from attention_helpers import rel_error as _rel  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    draw_features,
    hybrid_base_size,
    linear_attention,
)
from kernelkit.features import AngularHybridRF, matched_n_features  # noqa: E402
from kernelkit.kernels import softmax_attention  # noqa: E402

ALL = [
    "relu",
    "elu",
    "trig",
    "positive",
    "hyperbolic",
    "gerf",
    "saderf",
    "aderf",
    "sderf",
    "hybrid_angular",
]
CAUSAL_OK = [n for n in ALL if n not in ("trig", "hybrid_angular")]


_qkv = functools.partial(qkv, e=5)  # (q, k, v) of one shape, values of width 5


# ------------------------------------------------------------------ hybrid = AngularHybridRF
@pytest.mark.parametrize("sampler", ["orthogonal", "iid"])
@pytest.mark.parametrize("masked", [False, True])
def test_hybrid_equals_angular_hybrid_rf_on_the_same_draws(sampler, masked):
    """The attention's hybrid_angular map is AngularHybridRF (shared projections) on the
    same random draws: same W and T from one seed, and the attention output equals
    (K_hat v) / (K_hat 1) with K_hat = AngularHybridRF.approx_kernel of the scaled
    queries and keys (the feature maps differ by a constant factor 2m only)."""
    L, S, d, M = 9, 14, 5, 256
    q, _, _ = _qkv((L, d), seed=1)
    k, _, v = _qkv((S, d), e=3, seed=2)
    keep = torch.ones(S, dtype=torch.bool)
    if masked:
        keep[[0, 4, 5]] = False
    m = hybrid_base_size(M, d)
    assert m == matched_n_features(M // 2, d, 8, rule="dimension") == 7
    x, y = q * d**-0.25, k * d**-0.25
    fm = AngularHybridRF(
        n_features=m, n_lambda=8, sampler=sampler, shared_projection=True, random_state=3
    ).fit(x.numpy(), Y=y.numpy())
    params = draw_features("hybrid_angular", M, d, random_state=3, sampler=sampler)
    np.testing.assert_array_equal(params["W"], fm.projection_)
    np.testing.assert_array_equal(params["T"], fm.lambda_projection_)
    K = torch.as_tensor(fm.approx_kernel(x.numpy(), y.numpy())) * keep  # (L, S)
    ref = (K @ v) / K.sum(-1, keepdim=True)
    out = linear_attention(
        q, k, v, "hybrid_angular", M, random_state=3, sampler=sampler, key_padding_mask=~keep
    )
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)


def test_hybrid_n_lambda_through_projection_and_budget():
    """Other n_lambda through draw_features(..., n_lambda=n) -> projection=; the base size
    follows the dimension rule 4 m (n + 1) <= M (m = 1 below the smallest hybrid)."""
    q, k, v = _qkv((1, 1, 12, 4))
    d = 4
    for M, n in ((256, 8), (256, 3), (100, 4), (16, 8)):
        m = hybrid_base_size(M, d, n)
        assert m >= 1 and (4 * m * (n + 1) <= M or m == 1)
        assert 4 * (m + 1) * (n + 1) > M
    p = draw_features("hybrid_angular", 128, d, random_state=0, n_lambda=3)
    assert p["T"].shape == (3, d) and p["W"].shape == (hybrid_base_size(128, d, 3), d)
    x, y = q[0, 0] * d**-0.25, k[0, 0] * d**-0.25
    fm = AngularHybridRF(
        n_features=p["W"].shape[0], n_lambda=3, sampler="orthogonal", random_state=0
    ).fit(x.numpy(), Y=y.numpy())
    K = torch.as_tensor(fm.approx_kernel(x.numpy(), y.numpy()))
    out = linear_attention(q, k, v, "hybrid_angular", 128, projection=p)
    torch.testing.assert_close(out[0, 0], (K @ v[0, 0]) / K.sum(-1, keepdim=True))
    with pytest.raises(ValueError, match="n_lambda"):
        draw_features("hybrid_angular", 128, d, n_lambda=0)


# ------------------------------------------------------------------ SDPA drop-in
def test_sdpa_keyword_arguments_are_accepted():
    """The SDPA call with attn_mask=None, dropout_p=0.0, is_causal, scale works unchanged
    (keywords); outputs approach SDPA's (M = 4096, |q k| / sqrt(d) small)."""
    F = torch.nn.functional
    q, k, v = _qkv((2, 2, 16, 8), scale=0.5)
    for causal in (False, True):
        kw = dict(attn_mask=None, dropout_p=0.0, is_causal=causal, scale=0.3)
        out = linear_attention(q, k, v, "positive", 4096, random_state=0, **kw)
        assert _rel(out, F.scaled_dot_product_attention(q, k, v, **kw)) < 0.05


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_causal_and_padding_attn_masks(kind):
    """SDPA's causal (L, L) mask selects causal mode; a (B, 1, 1, S) mask is a key padding
    mask (bool True = attend, float -inf = blocked), merged with key_padding_mask."""
    q, k, v = _qkv((2, 3, 12, 4))
    mom = attention_moments(q, k)
    kw = dict(random_state=0, moments=mom, chunk_size=4)
    tril = torch.ones(12, 12, dtype=torch.bool).tril()
    attend = torch.ones(2, 1, 1, 12, dtype=torch.bool)
    attend[1, ..., 8:] = False
    if kind == "float":
        tril = torch.zeros(12, 12).masked_fill(~tril, float("-inf")).double()
        attend = torch.zeros(2, 1, 1, 12).masked_fill(~attend, float("-inf")).double()
    causal = linear_attention(q, k, v, "sderf", 32, is_causal=True, **kw)
    torch.testing.assert_close(linear_attention(q, k, v, "sderf", 32, attn_mask=tril, **kw), causal)
    pad = torch.zeros(2, 1, 12, dtype=torch.bool)
    pad[1, :, 8:] = True
    ref = linear_attention(q, k, v, "sderf", 32, key_padding_mask=pad, **kw)
    torch.testing.assert_close(linear_attention(q, k, v, "sderf", 32, attn_mask=attend, **kw), ref)
    # merged with key_padding_mask (union of the padded keys)
    extra = torch.zeros(2, 1, 12, dtype=torch.bool)
    extra[:, :, 0] = True
    both = linear_attention(q, k, v, "sderf", 32, attn_mask=attend, key_padding_mask=extra, **kw)
    torch.testing.assert_close(
        both, linear_attention(q, k, v, "sderf", 32, key_padding_mask=pad | extra, **kw)
    )


def test_sdpa_unsupported_arguments_have_clear_errors():
    q, k, v = _qkv((1, 2, 6, 4))
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        linear_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="arbitrary"):
        linear_attention(q, k, v, attn_mask=torch.rand(6, 6) > 0.5)
    with pytest.raises(ValueError, match="0 \\(attend\\) and -inf"):
        linear_attention(q, k, v, attn_mask=torch.randn(6, 6, dtype=torch.float64))
    with pytest.raises(TypeError, match="attn_mask"):
        linear_attention(q, k, v, attn_mask=torch.ones(6, 6, dtype=torch.long))
    with pytest.raises(TypeError, match="keyword-only"):
        linear_attention(q, k, v, torch.ones(6, 6, dtype=torch.bool))  # SDPA positional mask
    with pytest.raises(ValueError, match="enable_gqa"):
        linear_attention(
            q,
            torch.randn(1, 3, 6, 4, dtype=q.dtype),
            torch.randn(1, 3, 6, 5, dtype=q.dtype),
            enable_gqa=True,
        )


def test_gqa_repeats_key_heads_as_sdpa():
    """enable_gqa: k, v with 2 heads serve 6 query heads; equals explicit repetition and
    approaches SDPA(enable_gqa=True)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 10, 8, generator=g, dtype=torch.float64) * 0.5
    k = torch.randn(2, 2, 10, 8, generator=g, dtype=torch.float64) * 0.5
    v = torch.randn(2, 2, 10, 3, generator=g, dtype=torch.float64)
    out = linear_attention(
        q, k, v, "positive", 4096, random_state=0, is_causal=True, enable_gqa=True
    )
    rep = linear_attention(
        q,
        k.repeat_interleave(3, 1),
        v.repeat_interleave(3, 1),
        "positive",
        4096,
        random_state=0,
        is_causal=True,
    )
    torch.testing.assert_close(out, rep)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    assert _rel(out, sdpa) < 0.05


# ------------------------------------------------------------------ non-positive maps
@pytest.mark.parametrize("name", ["trig", "hybrid_angular"])
def test_non_positive_maps_refuse_causal_mode(name):
    q, k, v = _qkv((1, 1, 8, 4))
    with pytest.raises(ValueError, match="bidirectional only"):
        linear_attention(q, k, v, name, 64, is_causal=True)
    tril = torch.ones(8, 8, dtype=torch.bool).tril()
    with pytest.raises(ValueError, match="bidirectional only"):
        linear_attention(q, k, v, name, 64, attn_mask=tril)
    m = FavorAttention(8, 2, feature_map=name, n_features=64, random_state=0)
    x = torch.randn(1, 8, 8)
    with pytest.raises(ValueError, match="bidirectional only"):
        m(x, x, x, is_causal=True)


def test_causal_fitted_map_error_says_what_to_pass():
    q, k, v = _qkv((1, 2, 8, 4))
    with pytest.raises(
        ValueError,
        match=r"moments=kernelkit\.attention\.attention_moments"
        r"\(q_calib, k_calib\)",
    ) as err:
        linear_attention(q, k, v, "gerf", 32, is_causal=True)
    assert "FavorAttention" in str(err.value) and "'positive'" in str(err.value)
    # following the message works: moments from other data, per head (H, d) broadcast
    q2, k2, _ = _qkv((4, 2, 8, 4), seed=5)
    mom = attention_moments(q2, k2)
    per_head = type(mom)(*(t.mean(0) for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)))
    out = linear_attention(q, k, v, "gerf", 32, is_causal=True, moments=per_head, random_state=0)
    assert out.shape == v.shape and torch.isfinite(out).all()


# ------------------------------------------------------------------ precision / edge cases
@pytest.mark.parametrize("causal", [False, True])
def test_float32_agrees_with_float64(causal):
    """Same draws in float32 and float64: positive maps agree to ~1e-6 relative (measured
    1e-7 - 1.2e-6); the non-positive trig / hybrid estimators lose digits to cancellation
    in their normaliser (measured 1.5e-4, 1.6e-3 at |x|^2 ~ 3.6) and get 1e-2."""
    q, k, v = _qkv((2, 3, 50, 13))
    mom = attention_moments(q, k)
    for name in CAUSAL_OK if causal else ALL:
        kw = dict(random_state=0, is_causal=causal, moments=mom if causal else None, chunk_size=16)
        a = linear_attention(q, k, v, name, 64, **kw)
        b = linear_attention(q.float(), k.float(), v.float(), name, 64, **kw)
        assert b.dtype == torch.float32
        tol = 1e-2 if name in ("trig", "hybrid_angular") else 1e-5
        assert _rel(b.double(), a) < tol, name


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_autocast_on_cpu_runs_in_float32(causal):
    """Under CPU bf16 autocast float32 inputs are computed in float32 (not bf16): equal to
    the call without autocast, forward and gradients (backward outside the autocast
    region, as torch recommends)."""
    q, k, v = _qkv((1, 2, 20, 8), dtype=torch.float32)
    mom = attention_moments(q, k)

    def run(autocast):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = linear_attention(
                qq, kk, vv, "sderf", 64, random_state=0, is_causal=causal, moments=mom, chunk_size=8
            )
        out.square().sum().backward()
        return out, qq.grad, kk.grad, vv.grad

    ref = run(False)
    got = run(True)
    assert got[0].dtype == torch.float32
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", CAUSAL_OK)
def test_all_keys_masked_in_causal_mode_gives_zeros_and_zero_gradients(name):
    q, k, v = _qkv((1, 2, 10, 4))
    mom = attention_moments(q, k)
    mask = torch.ones(1, 2, 10, dtype=torch.bool)
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = linear_attention(
        qq,
        kk,
        vv,
        name,
        16,
        random_state=0,
        is_causal=True,
        key_padding_mask=mask,
        moments=mom,
        chunk_size=4,
    )
    assert torch.all(out == 0)
    out.sum().backward()
    for t in (qq, kk, vv):
        assert torch.all(t.grad == 0)


@pytest.mark.parametrize("name", ALL)
def test_length_one_returns_the_value(name):
    """L = S = 1: softmax attention returns v exactly; so does every map (one key)."""
    q, k, v = _qkv((2, 3, 1, 13))
    for causal in (False, True) if name in CAUSAL_OK else (False,):
        out = linear_attention(
            q, k, v, name, 32, random_state=0, is_causal=causal, moments=attention_moments(q, k)
        )
        torch.testing.assert_close(out, v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_unbatched_and_extra_batch_dims_equal_the_4d_call(causal):
    """(L, d) and (B1, B2, H, L, d) inputs give the per-slice results of the (B, H, L, d)
    call (odd d = 13, L = 21 not a multiple of the chunk)."""
    q, k, v = _qkv((2, 3, 21, 13))
    mom = attention_moments(q, k)
    kw = dict(random_state=0, is_causal=causal, chunk_size=8)
    full = linear_attention(q, k, v, "sderf", 24, moments=mom if causal else None, **kw)
    one_mom = attention_moments(q[1, 2], k[1, 2]) if causal else None
    if causal:  # the 4-D call's moments for slice (1, 2)
        one_mom = type(mom)(
            mom.mean_x[1, 2], mom.second_x[1, 2], mom.mean_y[1, 2], mom.second_y[1, 2]
        )
    one = linear_attention(q[1, 2], k[1, 2], v[1, 2], "sderf", 24, moments=one_mom, **kw)
    torch.testing.assert_close(one, full[1, 2])
    q5, k5, v5 = (t.reshape(2, 1, 3, 21, -1) for t in (q, k, v))
    mom5 = attention_moments(q5, k5) if causal else None
    five = linear_attention(q5, k5, v5, "sderf", 24, moments=mom5, **kw)
    torch.testing.assert_close(five.reshape(full.shape), full)
    exact = softmax_attention(q[1, 2], k[1, 2], v[1, 2], is_causal=causal)
    assert one.shape == exact.shape


def test_module_keeps_its_dtype_across_redraws():
    m = FavorAttention(
        8, 2, feature_map="positive", n_features=16, redraw_interval=1, random_state=0
    ).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    for _ in range(3):
        out, _ = m(x, x, x)
    assert m.projection.dtype == torch.float64 and out.dtype == torch.float64


@pytest.mark.parametrize("name", ["trig", "hybrid_angular"])
def test_non_positive_maps_stay_finite_at_large_norms(name):
    """|q|, |k| ~ 40 sqrt(d) in float32: the key-side stabilisers (one global constant per
    instance, exactly cancelling) keep outputs and gradients finite. The estimate itself is
    not a convex combination (signed features), so only finiteness is asserted."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 48, 16, generator=g) * 40.0 for _ in range(3))
    q.requires_grad_(True)
    k.requires_grad_(True)
    out = linear_attention(q, k, v, name, 64, random_state=0)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
