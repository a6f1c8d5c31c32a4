"""Cases a new user of kernelkit.attention runs into: SDPA's mask and broadcasting forms,
autocast with mixed dtypes, double backward, learnable projections, stale decoding
states, and FavorAttention inside torch's Transformer layers. One regression test per
fix, plus gradient checks for the map / mode pairs not covered elsewhere."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv as _qkv  # noqa: E402
from attention_helpers import rel_error as _rel  # noqa: E402
from torch import nn  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    draw_features,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)
from kernelkit.kernels import softmax_attention  # noqa: E402


# ------------------------------------------------------------------ SDPA attn_mask forms
def _causal_with_padding(pad, L):
    # SDPA boolean mask (True = attend), (B, 1, L, L): causal and not a padded key
    tril = torch.ones(L, L, dtype=torch.bool).tril()
    return tril & ~pad[:, None, None, :]


@pytest.mark.parametrize("name", ["positive", "elu"])
def test_broadcast_causal_and_padding_attn_masks_equal_their_arguments(name):
    """SDPA users pass the causal mask as (1, 1, L, L) or expanded to (B, H, L, L), merged
    with key padding, or a padding row repeated over the queries: each equals the call
    with is_causal / key_padding_mask."""
    B, H, L = 2, 3, 9
    q, k, v = _qkv((B, H, L, 4))
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[0, 6:] = True
    pad[1, 2] = True

    def call(**kw):
        return linear_attention(q, k, v, name, 64, random_state=0, **kw)

    causal = call(is_causal=True)
    tril = torch.ones(L, L, dtype=torch.bool).tril()
    torch.testing.assert_close(call(attn_mask=tril[None, None]), causal, rtol=0, atol=0)
    torch.testing.assert_close(call(attn_mask=tril.expand(B, H, L, L)), causal, rtol=0, atol=0)
    additive = torch.zeros(1, 1, L, L, dtype=q.dtype).masked_fill(~tril, float("-inf"))
    torch.testing.assert_close(call(attn_mask=additive), causal, rtol=0, atol=0)

    both = call(is_causal=True, key_padding_mask=pad[:, None, :])
    torch.testing.assert_close(call(attn_mask=_causal_with_padding(pad, L)), both, rtol=0, atol=0)
    rows = (~pad)[:, None, None, :].expand(B, 1, L, L)  # padding only, every query row
    padded = call(key_padding_mask=pad[:, None, :])
    torch.testing.assert_close(call(attn_mask=rows), padded, rtol=0, atol=0)
    unmasked = call()
    torch.testing.assert_close(call(attn_mask=torch.ones(L, L, dtype=torch.bool)), unmasked)


def test_causal_padding_attn_mask_converges_to_sdpa():
    """The decomposition means what SDPA means: with many features the output approaches
    SDPA's on the same mask (rows with a visible key; M = 8192, d = 2, |q| ~ 0.5, so the
    relative error is a few times M^{-1/2} ~ 0.011)."""
    B, H, L = 2, 2, 12
    q, k, v = _qkv((B, H, L, 2), scale=0.5)
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[0, 8:] = True
    pad[1, 3] = True
    mask = _causal_with_padding(pad, L)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = linear_attention(q, k, v, "positive", 8192, attn_mask=mask, random_state=0)
    assert _rel(out, ref) < 0.05
    exact = softmax_attention(q, k, v, is_causal=True, key_padding_mask=pad[:, None, :])
    torch.testing.assert_close(exact, ref)


def test_masks_that_are_neither_causal_nor_padding_still_raise():
    L = 7
    q, k, v = _qkv((1, 2, L, 4))
    near_causal = torch.ones(L, L, dtype=torch.bool).tril()
    near_causal[5, 2] = False  # one extra blocked pair
    with pytest.raises(ValueError, match="arbitrary"):
        linear_attention(q, k, v, attn_mask=near_causal[None, None])
    sliding = torch.ones(L, L, dtype=torch.bool).tril() & torch.ones(L, L, dtype=torch.bool).triu(
        -2
    )
    with pytest.raises(ValueError, match="arbitrary"):
        linear_attention(q, k, v, attn_mask=sliding)
    with pytest.raises(ValueError, match="does not broadcast"):
        linear_attention(q, k, v, attn_mask=torch.ones(3, 1, 1, L, dtype=torch.bool).tril())


# ------------------------------------------------------------------ broadcasting, dtypes
@pytest.mark.parametrize("causal", [False, True])
def test_batch_dims_broadcast_as_sdpa(causal):
    """SDPA broadcasts the leading dims of q, k, v: keys shared by the batch, (H, S, d)
    keys for (B, H, L, d) queries. The result and the gradients equal those of the
    explicitly expanded inputs (gradients summed over the broadcast dims)."""
    B, H, L, d = 2, 3, 8, 4
    q, _, _ = _qkv((B, H, L, d))
    _, k, v = _qkv((1, H, L, d), seed=1)
    for k_, v_ in ((k, v), (k[0], v[0])):
        kk, vv = k_.clone().requires_grad_(True), v_.clone().requires_grad_(True)
        out = linear_attention(
            q, kk, vv, "sderf" if not causal else "positive", 32, random_state=0, is_causal=causal
        )
        ke = k_.expand(B, H, L, d).clone().requires_grad_(True)
        ve = v_.expand(B, H, L, 3).clone().requires_grad_(True)
        ref = linear_attention(
            q, ke, ve, "sderf" if not causal else "positive", 32, random_state=0, is_causal=causal
        )
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        w = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=ref.dtype)
        (out * w).sum().backward()
        (ref * w).sum().backward()
        torch.testing.assert_close(kk.grad, ke.grad.sum(0).reshape(k_.shape))
        torch.testing.assert_close(vv.grad, ve.grad.sum(0).reshape(v_.shape))
    with pytest.raises(ValueError, match="broadcast"):
        linear_attention(q, torch.cat([k, k, k]), torch.cat([v, v, v]))


def test_mixed_dtypes_under_autocast_compute_in_float32():
    """Under autocast a projected query is bfloat16 while cached keys stay float32, and
    SDPA accepts that; the call computes in float32 and returns q's dtype. Outside
    autocast, mixed dtypes still raise."""
    q, k, v = _qkv((2, 2, 10, 4), dtype=torch.float32)
    qh = q.to(torch.bfloat16)
    ref = linear_attention(qh.float(), k, v, "sderf", 32, random_state=0)
    for causal in (False, True):
        mom = attention_moments(q, k) if causal else None
        ref = linear_attention(
            qh.float(), k, v, "sderf", 32, random_state=0, is_causal=causal, moments=mom
        )
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = linear_attention(
                qh, k, v, "sderf", 32, random_state=0, is_causal=causal, moments=mom
            )
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, ref.to(torch.bfloat16), rtol=0, atol=0)
    with pytest.raises(TypeError, match="one dtype"):
        linear_attention(qh, k, v, "sderf", 32, random_state=0)


# ------------------------------------------------------------------ autograd
@pytest.mark.parametrize("causal", [False, True])
def test_double_backward_raises_instead_of_dropping_second_derivatives(causal):
    """The positive maps' backward is closed-form: with create_graph=True it used to give
    a gradient without a graph (causal: second-order terms silently missing) or an
    in-place autograd error (bidirectional). It now says so; plain-autograd maps keep
    their double backward."""
    q, k, v = (t.requires_grad_(True) for t in _qkv((1, 2, 6, 3)))
    for name in ("positive", "sderf", "elu") if causal else ("positive", "sderf"):
        mom = attention_moments(q.detach(), k.detach())
        out = linear_attention(q, k, v, name, 16, random_state=0, is_causal=causal, moments=mom)
        with pytest.raises(RuntimeError, match="second derivatives"):
            torch.autograd.grad(out.sum(), q, create_graph=True)
        (g,) = torch.autograd.grad(out.square().sum(), q)  # first order unchanged
        assert torch.isfinite(g).all()
    if not causal:
        out = linear_attention(q, k, v, "trig", 16, random_state=0)
        (g,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), k)
        assert torch.isfinite(h).all() and h.abs().sum() > 0


def test_projection_that_requires_grad_raises_for_positive_maps():
    """A learnable W (nn.Parameter) received no gradient (bidirectional) or failed with an
    unrelated autograd error (causal): the positive maps' projections are constants."""
    q, k, v = _qkv((1, 2, 6, 3))
    W = nn.Parameter(torch.as_tensor(draw_features("positive", 16, 3, 0)["W"]))
    for causal in (False, True):
        with pytest.raises(ValueError, match=r"requires grad.*detach"):
            linear_attention(q, k, v, "positive", 16, projection=W, is_causal=causal)
        with torch.no_grad():
            a = linear_attention(q, k, v, "positive", 16, projection=W, is_causal=causal)
        b = linear_attention(q, k, v, "positive", 16, projection=W.detach(), is_causal=causal)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    Wt = nn.Parameter(torch.as_tensor(draw_features("trig", 16, 3, 0)["W"]))
    linear_attention(q, k, v, "trig", 16, projection=Wt).square().sum().backward()
    assert Wt.grad is not None and Wt.grad.abs().sum() > 0  # trig's W is differentiable


def test_projection_and_scale_validation():
    q, k, v = _qkv((1, 2, 6, 3))
    P = draw_features("hybrid_angular", 128, 3, 0)
    with pytest.raises(ValueError, match="'T'"):  # was a bare KeyError
        linear_attention(q, k, v, "hybrid_angular", 128, projection={"W": P["W"]})
    with pytest.raises(ValueError, match="'T'"):
        linear_attention(q, k, v, "hybrid_angular", 128, projection={**P, "T": P["T"][:, :2]})
    with pytest.raises(ValueError, match="scale"):  # bool is not a scale (was 1.0)
        linear_attention(q, k, v, scale=True)


@pytest.mark.parametrize(
    "name,causal",
    [("gerf", False), ("gerf", True), ("aderf", False), ("saderf", True), ("hyperbolic", False)],
)
def test_gradcheck_remaining_maps_cross_and_single_query(name, causal):
    """float64 gradcheck of the map / mode pairs test_linear_attention leaves out, with
    fixed fitted parameters (moments), a padded key, S != L (bidirectional) and a
    single-query instance."""
    S = 7 if causal else 9
    q, k, v = _qkv((2, 7, 3), (2, S, 3), e=2, scale=0.8)
    mom = attention_moments(q, k)
    mask = torch.zeros(2, S, dtype=torch.bool)
    mask[:, 2] = True

    def f(q, k, v):
        return linear_attention(
            q,
            k,
            v,
            name,
            6,
            random_state=0,
            is_causal=causal,
            moments=mom,
            key_padding_mask=mask,
            chunk_size=2,
        )

    ins = tuple(t.clone().requires_grad_(True) for t in (q, k, v))
    assert torch.autograd.gradcheck(f, ins)
    if not causal:  # L = 1
        ins = (ins[0][:, :1].detach().requires_grad_(True), *ins[1:])
        assert torch.autograd.gradcheck(f, ins)


# ------------------------------------------------------------------ decoding
def test_stale_state_after_an_inplace_step_raises():
    """Reusing a state after an inplace=True step advanced its tensors used to give
    silently wrong outputs (e.g. one empty state shared by two sequences)."""
    q, k, v = _qkv((2, 3, 6, 4))
    empty = init_decoding_state((2, 3), 4, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    _, st = linear_attention_step(q[..., :3, :], k[..., :3, :], v[..., :3, :], empty)
    shared = copy.deepcopy(st)  # a copy is a fresh state
    with torch.no_grad():
        out, st2 = linear_attention_step(q[..., 3, :], k[..., 3, :], v[..., 3, :], st, inplace=True)
        linear_attention_step(q[..., 4, :], k[..., 4, :], v[..., 4, :], st2, inplace=True)
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 3, :], k[..., 3, :], v[..., 3, :], st)
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 3, :], k[..., 3, :], v[..., 3, :], st2)
        again, _ = linear_attention_step(q[..., 3, :], k[..., 3, :], v[..., 3, :], shared)
        torch.testing.assert_close(again, out, rtol=0, atol=0)
        linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], empty, inplace=True)
    with pytest.raises(ValueError, match="stale"):
        linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], empty)


def test_module_step_rejects_non_finite_input_by_name():
    m = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0).eval()
    x = torch.randn(2, 8)
    bad = x.clone()
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match="key_t contains NaN"):
        m.step(x, bad, x, m.init_state(2))


@pytest.mark.parametrize("batch_first", [True, False])
def test_module_step_takes_the_forward_key_padding_mask(batch_first):
    """FavorAttention.step had no key_padding_mask, so a left-padded batch of prompts
    could not be decoded as forward(..., key_padding_mask=..., is_causal=True) runs it.
    Prefill (N, T) with a bool mask, then single tokens with a float (-inf) one."""
    torch.manual_seed(0)
    m = FavorAttention(
        8, 2, feature_map="sderf", n_features=16, random_state=0, batch_first=batch_first
    )
    m = m.double()
    x = torch.randn(3, 7, 8, dtype=torch.float64)  # (N, L, E)
    m(x, x, x, is_causal=True)  # running statistics for the causal fitted map
    m.eval()
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[0, :3] = True  # left padding
    pad[2, :1] = True
    pad[1, 5] = True
    xs = x if batch_first else x.transpose(0, 1)
    with torch.no_grad():
        full, _ = m(xs, xs, xs, key_padding_mask=pad, is_causal=True)
        full = full if batch_first else full.transpose(0, 1)
        st = m.init_state(3)
        pre = xs[:, :4] if batch_first else xs[:4]
        y, st = m.step(pre, pre, pre, st, key_padding_mask=pad[:, :4])
        y = y if batch_first else y.transpose(0, 1)
        steps = []
        for t in range(4, 7):
            fpad = torch.zeros(3, dtype=torch.float64).masked_fill(pad[:, t], float("-inf"))
            y_t, st = m.step(x[:, t], x[:, t], x[:, t], st, key_padding_mask=fpad)
            steps.append(y_t)
    torch.testing.assert_close(y, full[:, :4], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 4:], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="key_padding_mask"):
        m.step(x[:, 0], x[:, 0], x[:, 0], st, key_padding_mask=pad[:2, 0])


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("name,causal,redraw", [("positive", False, 1), ("sderf", True, None)])
def test_activation_checkpointing_recomputes_with_the_same_features(
    name, causal, redraw, reentrant
):
    """torch.utils.checkpoint reruns forward during backward: a training-mode redraw
    there drew new features (gradients off by ~80%), and a causal fitted map updated its
    running statistics again and refitted from them. The recomputation now uses the
    original call's features and statistics: gradients, buffers and counters equal
    those of the same steps without checkpointing."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    m = FavorAttention(
        8, 2, feature_map=name, n_features=16, random_state=0, redraw_interval=redraw
    )
    ref = copy.deepcopy(m)
    g = torch.Generator().manual_seed(1)
    x0, x1 = (torch.randn(2, 5, 8, generator=g) for _ in range(2))
    for mod in (m, ref):  # a first step: statistics / redraw counter move
        mod(x0, x0, x0, is_causal=causal)[0].sum().backward()

    def attend(x):
        return m(x, x, x, is_causal=causal)[0]

    xa, xb = x1.clone().requires_grad_(True), x1.clone().requires_grad_(True)
    out = checkpoint(attend, xa, use_reentrant=reentrant)
    out.square().sum().backward()
    expected = ref(xb, xb, xb, is_causal=causal)[0]
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(m.in_proj_weight.grad, ref.in_proj_weight.grad)
    for key, buf in ref.state_dict().items():
        torch.testing.assert_close(m.state_dict()[key], buf, rtol=0, atol=0, msg=key)


# ------------------------------------------------------------------ torch Transformer layers
def test_encoder_layer_in_eval_runs_favor_attention_not_the_fused_fast_path():
    """nn.TransformerEncoderLayer in eval mode without grad takes a fused fast path that
    reads self_attn's in_proj weights and computes exact softmax attention (with
    FavorAttention it failed on a missing ``merge_masks``). The layer now runs the
    module's own forward, as with the fast path disabled."""
    torch.manual_seed(0)
    E, H = 8, 2
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, batch_first=True, dropout=0.0)
    fav = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=0)
    fav.load_state_dict(layer.self_attn.state_dict(), strict=False)
    exact_layer = copy.deepcopy(layer).eval()
    layer.self_attn = fav
    layer.eval()
    x = torch.randn(2, 5, E)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 3:] = True
    with torch.no_grad():
        out = layer(x, src_key_padding_mask=pad)
        exact = exact_layer(x, src_key_padding_mask=pad)
        enabled = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            slow = layer(x, src_key_padding_mask=pad)
        finally:
            torch.backends.mha.set_fastpath_enabled(enabled)
    torch.testing.assert_close(out, slow, rtol=0, atol=0)
    assert _rel(out[1], exact[1]) > 1e-3  # M = 16 features: not the exact attention

    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    with torch.no_grad():
        assert torch.isfinite(encoder(x, src_key_padding_mask=pad)).all()


# ---------------------------------------------------------------- finite checks
# positive maps check eager CPU inputs through their output (one pass instead of one per
# input) and the fitted maps through their moments: the error must still name the input


@pytest.mark.parametrize(
    "name, causal", [("positive", False), ("sderf", False), ("saderf", False), ("positive", True)]
)
@pytest.mark.parametrize("bad", ["q", "k", "v"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_input_is_named_by_the_positive_maps(name, causal, bad, value):
    q, k, v = _qkv((2, 3, 12, 4))
    keep = torch.ones(2, 3, 12, dtype=torch.bool)
    t = {"q": q, "k": k, "v": v}[bad]
    t[1, 2, 11, 0] = value  # the last position: in causal mode only the last query sees it
    with pytest.raises(ValueError, match=f"^{bad} contains NaN or inf"):
        linear_attention(q, k, v, name, 16, is_causal=causal, random_state=0)
    if bad != "q":  # a padded key / value position is checked as well
        keep[1, 2, 11] = False
        with pytest.raises(ValueError, match=f"^{bad} contains NaN or inf"):
            linear_attention(
                q, k, v, name, 16, is_causal=causal, key_padding_mask=~keep, random_state=0
            )


@pytest.mark.parametrize("causal", [False, True])
def test_keys_that_overflow_the_features_raise_instead_of_nan(causal):
    # finite float32 keys whose squared norm overflows: every key feature is exp(-inf),
    # which the old input check let through as a NaN (bidirectional) or all-zero
    # (causal: every key dropped) output
    q, k, v = _qkv((1, 2, 8, 4), dtype=torch.float32)
    with pytest.raises(ValueError, match="overflow the input dtype"):
        linear_attention(q, k * 1e20, v, "positive", 16, is_causal=causal, random_state=0)
    out = linear_attention(
        q, k * 1e20, v, "positive", 16, is_causal=causal, random_state=0, check_finite=False
    )
    assert not torch.isfinite(out).all() or torch.all(out == 0)
    # one such key among normal ones would be silently dropped: raised as well
    k[0, 1, 5] *= 1e20
    with pytest.raises(ValueError, match="squared norm of a key is not finite"):
        linear_attention(q, k, v, "positive", 16, is_causal=causal, random_state=0)


@pytest.mark.parametrize("causal", [False, True])
def test_huge_finite_queries_give_finite_convex_outputs(causal):
    # the query row term -|x|^2/2 cancels in the ratio and is never formed: queries whose
    # squared norm overflows float32 still give rows inside the convex hull of the values
    q, k, v = _qkv((1, 2, 8, 4), dtype=torch.float32)
    out = linear_attention(q * 1e20, k, v, "positive", 16, is_causal=causal, random_state=0)
    assert torch.isfinite(out).all()
    lo, hi = v.amin(dim=-2, keepdim=True), v.amax(dim=-2, keepdim=True)
    assert torch.all(out >= lo - 1e-5) and torch.all(out <= hi + 1e-5)
