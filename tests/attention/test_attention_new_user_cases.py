"""A second new-user sweep of kernelkit.attention: one regression test per case it found
broken (decoding-state copies, empty prefill blocks, empty sequences and batches as SDPA,
is_causal with L != S, nested tensors from nn.Transformer, padded queries in the fitted
parameters, step masks, SDPA-style calls and masks), and the closed-form gradients of
every positive map against autograd through the dense estimator."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv as _qkv  # noqa: E402
from torch import nn  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FITTED_MAPS,
    FavorAttention,
    attention_moments,
    draw_features,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)
from kernelkit.attention._maps import build_log_map  # noqa: E402


# ------------------------------------------------------------------ decoding
def test_deepcopy_of_an_empty_state_is_a_fresh_state():
    """The documented way to share a state between sequences is to step copies of it;
    a copy of an *empty* state used to be refused as stale (copy.deepcopy advances the
    copied tensor's in-place counter). A copy of a stale state stays stale."""
    q, k, v = _qkv((2, 3, 4, 5))
    empty = init_decoding_state((2, 3), 5, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    ref = linear_attention(q, k, v, "positive", 16, random_state=0, is_causal=True)
    with torch.no_grad():
        for _ in range(2):  # two sequences from one shared empty state
            st = copy.deepcopy(empty)
            for t in range(4):
                out, st = linear_attention_step(
                    q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=True
                )
            torch.testing.assert_close(out, ref[..., -1, :], rtol=1e-12, atol=1e-12)
        linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], empty, inplace=True)
    # empty is now stale (stepped in place and not the returned state), and so is its copy
    for st in (empty, copy.deepcopy(empty)):
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], st)


def test_empty_prefill_block_returns_an_empty_output_and_the_same_state():
    """A prompt of length 0 (T = 0) used to raise a shape error."""
    q, k, v = _qkv((2, 3, 4, 5))
    st = init_decoding_state((2, 3), 5, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    out, st2 = linear_attention_step(q[..., :0, :], k[..., :0, :], v[..., :0, :], st)
    assert out.shape == (2, 3, 0, 3) and st2 is st and st2.t == 0
    m = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0).eval()
    x = torch.randn(2, 0, 8)
    y, ms = m.step(x, x, x, m.init_state(2))
    assert y.shape == (2, 0, 8) and ms.t == 0


# ------------------------------------------------------------------ empty sequences
@pytest.mark.parametrize(
    "name,causal",
    [("positive", False), ("positive", True), ("sderf", False), ("sderf", True), ("trig", False)],
)
def test_empty_sequences_give_sdpa_outputs(name, causal):
    """L = 0: an empty output; S = 0: zeros (no visible key), as SDPA; gradients flow
    (zero). Both used to raise 'empty attention input'."""
    q, k, v = _qkv((2, 3, 5, 4), (2, 3, 6, 4), e=3)
    mom = attention_moments(q, k) if causal else None
    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases = [(q[..., :0, :], k, v)]  # L = 0
    if not causal:
        cases.append((q, k[..., :0, :], v[..., :0, :]))  # S = 0
    else:
        cases.append((q[..., :0, :], k[..., :0, :], v[..., :0, :]))  # L = S = 0
    for a, b, c in cases:
        ins = [t.clone().requires_grad_(True) for t in (a, b, c)]
        out = linear_attention(*ins, name, 16, random_state=0, is_causal=causal, moments=mom)
        torch.testing.assert_close(out, sdpa(a, b, c), rtol=0, atol=0)
        out.sum().backward()
        assert all(t.grad is not None and not t.grad.any() for t in ins)
    # module: MultiheadAttention's shapes (S = 0 gives out_proj(0), its bias)
    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map=name, n_features=16, random_state=0).train()
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    m.load_state_dict(mha.state_dict(), strict=False)
    x = torch.randn(2, 5, 8)
    x0 = x[:, :0]
    for a, b in ((x0, x), (x, x0)) if not causal else ((x0, x0),):
        out, _ = m(a, b, b, is_causal=causal)
        torch.testing.assert_close(out, mha(a, b, b, need_weights=False)[0])
    assert int(m.num_batches_tracked) == 0  # an empty batch has no statistics


@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_empty_batch_in_causal_mode_gives_an_empty_output(name):
    """A batch of 0 sequences (as SDPA: an empty output) failed in causal mode with a
    reshape error from the scan; the module must not average 0 batches into NaN running
    statistics."""
    q, k, v = _qkv((0, 3, 5, 4), e=2)
    mom = attention_moments(*_qkv((3, 5, 4))[:2])
    out = linear_attention(q, k, v, name, 16, random_state=0, is_causal=True, moments=mom)
    assert out.shape == (0, 3, 5, 2)
    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map=name, n_features=16, random_state=0).train()
    x = torch.randn(0, 5, 8)
    assert m(x, x, x, is_causal=True)[0].shape == (0, 5, 8)
    assert int(m.num_batches_tracked) == 0
    assert all(torch.isfinite(b).all() for b in m.buffers())


# ------------------------------------------------------------------ SDPA parity
@pytest.mark.parametrize("S", [4, 9])
@pytest.mark.parametrize("how", ["is_causal", "attn_mask"])
def test_causal_with_l_not_s_is_top_left_aligned_as_sdpa(S, how):
    """SDPA's is_causal for L != S lets query i see keys j <= i (top left); it used to
    raise (and the explicit (L, S) mask was refused as 'neither causal nor padding').
    Exact check: the first min(L, S) rows are the causal call on the common prefix, the
    rows i >= S see every key (the bidirectional call, same features); then the
    orientation against SDPA itself with many features."""
    L = 6
    q, k, v = _qkv((2, 3, L, 2), (2, 3, S, 2), e=3, scale=0.5)
    pad = torch.zeros(2, 1, S, dtype=torch.bool)
    pad[1, :, 1] = True
    n = min(L, S)
    blocked = torch.ones(L, S, dtype=torch.bool).triu(1)
    kw = {"is_causal": True} if how == "is_causal" else {"attn_mask": ~blocked}
    out = linear_attention(q, k, v, "positive", 64, random_state=0, key_padding_mask=pad, **kw)
    head = linear_attention(
        q[..., :n, :],
        k[..., :n, :],
        v[..., :n, :],
        "positive",
        64,
        random_state=0,
        is_causal=True,
        key_padding_mask=pad[..., :n],
    )
    torch.testing.assert_close(out[..., :n, :], head, rtol=1e-12, atol=1e-12)
    if L > S:
        tail = linear_attention(
            q[..., S:, :], k, v, "positive", 64, random_state=0, key_padding_mask=pad
        )
        torch.testing.assert_close(out[..., S:, :], tail, rtol=1e-12, atol=1e-12)
    # against SDPA: the M = 2^14 estimate is within a few 1e-3 (d = 2, |q|, |k| ~ 0.7),
    # the other alignment (bottom right) differs by O(1)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ref = sdpa(q, k, v, attn_mask=~(blocked | pad[..., None, :]))
    approx = linear_attention(
        q, k, v, "positive", 2**14, random_state=0, key_padding_mask=pad, **kw
    )
    assert float((approx - ref).norm() / ref.norm()) < 0.02
    # FavorAttention: the same (L, S) causal mask as MultiheadAttention
    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map="positive", n_features=2**14, random_state=0).eval()
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    m.load_state_dict(mha.state_dict(), strict=False)
    x, y = 0.3 * torch.randn(2, L, 8), 0.3 * torch.randn(2, S, 8)
    with torch.no_grad():
        got = m(x, y, y, attn_mask=blocked)[0]
        assert torch.equal(got, m(x, y, y, is_causal=True)[0])
        ref = mha(x, y, y, attn_mask=blocked)[0]
    assert float((got - ref).norm() / ref.norm()) < 0.02


# ------------------------------------------------------------------ torch Transformers
def test_transformer_eval_with_padding_takes_nested_tensors():
    """nn.TransformerEncoder (enable_nested_tensor=True, the default, also inside
    nn.Transformer) passes a padded batch as a nested tensor in eval mode; FavorAttention
    raised, and nn.Transformer gives no constructor argument to avoid it. The nested
    call equals the padded one on every real row (the padded rows are zero there)."""
    torch.manual_seed(0)
    E, H, N, L = 8, 2, 3, 6
    model = nn.Transformer(E, H, 2, 1, 16, dropout=0.0, batch_first=True)
    for i, layer in enumerate([*model.encoder.layers, *model.decoder.layers]):
        layer.self_attn = FavorAttention(E, H, feature_map="sderf", n_features=32, random_state=i)
    model.eval()
    src, tgt = torch.randn(N, L, E), torch.randn(N, 4, E)
    pad = torch.zeros(N, L, dtype=torch.bool)
    pad[0, 4:] = True
    pad[2, 1:] = True
    kw = {"src_key_padding_mask": pad, "memory_key_padding_mask": pad}
    with torch.no_grad():
        memory = model.encoder(src, src_key_padding_mask=pad)
        out = model(src, tgt, **kw)
        model.encoder.use_nested_tensor = False  # the padded path
        memory_ref = model.encoder(src, src_key_padding_mask=pad)
        out_ref = model(src, tgt, **kw)
    torch.testing.assert_close(memory[~pad], memory_ref[~pad], rtol=1e-5, atol=1e-6)
    assert not memory[pad].any()  # nested: padded rows are zero
    torch.testing.assert_close(out, out_ref, rtol=1e-5, atol=1e-6)
    # the nested path only serves TransformerEncoder's call
    nested = torch.nested.as_nested_tensor([src[0], src[1, :2]])
    with pytest.raises(ValueError, match="nested"):
        model.encoder.layers[0].self_attn(nested, nested, nested, attn_mask=torch.ones(6, 6))


@pytest.mark.parametrize("name", ["gerf", "saderf", "aderf", "sderf"])
def test_padded_self_attention_rows_do_not_depend_on_the_padding(name):
    """In self-attention, FavorAttention(x, x, x, key_padding_mask=pad), the padded
    positions are queries too. Their content entered the fitted parameters (the default
    map sderf included), so the real rows changed with the padding (by 0.1 here),
    unlike MultiheadAttention; the causal running statistics took them in too. Now the
    real rows equal those of the unpadded sequence."""
    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map=name, n_features=32, random_state=0)
    m = m.to(torch.float64).eval()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    x2 = x.clone()
    x2[1, 4:] = 5.0 * torch.randn(2, 8, dtype=torch.float64)  # other padding content
    with torch.no_grad():
        a = m(x, x, x, key_padding_mask=pad)[0][1, :4]
        b = m(x2, x2, x2, key_padding_mask=pad)[0][1, :4]
        ref = m(x[1:, :4], x[1:, :4], x[1:, :4])[0][0]
    torch.testing.assert_close(a, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(b, ref, rtol=1e-10, atol=1e-12)
    # causal training: the running statistics ignore the padded queries as well
    bufs = []
    for inp in (x, x2):
        mm = copy.deepcopy(m).train()
        mm(inp, inp, inp, key_padding_mask=pad, is_causal=True)
        bufs.append([mm.running_mean_q, mm.running_second_q, mm.running_second_k])
    for got, want in zip(*bufs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # attention_moments(query_padding_mask=...) equals the moments of the truncated rows
    q, k = torch.randn(2, 2, 2, 6, 3, dtype=torch.float64).unbind(0)
    mom = attention_moments(q, k, key_padding_mask=pad[:, None], query_padding_mask=pad[:, None])
    cut = attention_moments(q[1, :, :4], k[1, :, :4])
    for f in ("mean_x", "second_x", "mean_y", "second_y"):
        torch.testing.assert_close(getattr(mom, f)[1], getattr(cut, f), rtol=1e-12, atol=1e-14)


def test_step_padding_mask_broadcasts_and_bool_scale_is_refused():
    """The step's key_padding_mask had to have the exact shape (*batch_shape, T): the
    (N, 1, T) mask used with linear_attention raised. init_decoding_state took
    scale=True as 1.0 (linear_attention refuses a bool scale)."""
    q, k, v = _qkv((2, 3, 5, 4))
    pad = torch.zeros(2, 1, 5, dtype=torch.bool)
    pad[1, :, :2] = True  # left-padded prompt
    st = init_decoding_state((2, 3), 4, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    out, _ = linear_attention_step(q, k, v, st, key_padding_mask=pad)
    full = linear_attention(
        q, k, v, "positive", 16, random_state=0, is_causal=True, key_padding_mask=pad
    )
    torch.testing.assert_close(out, full, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="broadcast"):
        linear_attention_step(q, k, v, st, key_padding_mask=pad[..., :4])
    with pytest.raises(ValueError, match="broadcast"):  # no dims added: (3,) is not (2, 3)
        linear_attention_step(
            q[..., 0, :], k[..., 0, :], v[..., 0, :], st, key_padding_mask=pad[0, 0, :3]
        )
    with pytest.raises(ValueError, match="scale"):
        init_decoding_state((2, 3), 4, "positive", 16, scale=True)


def test_sdpa_positional_call_and_nonpositive_scale_say_what_differs():
    """SDPA's positional attn_mask=None (linear_attention(q, k, v, None, ...)) gave no
    hint that attn_mask is keyword-only here; a scale <= 0, which SDPA takes, gave no
    reason and no way out."""
    q, k, v = _qkv((1, 2, 5, 4))
    with pytest.raises(TypeError, match="keyword-only"):
        linear_attention(q, k, v, None)
    for scale in (0.0, -0.5):
        with pytest.raises(ValueError, match="pass -q and -scale"):
            linear_attention(q, k, v, scale=scale)


def test_additive_masks_with_the_dtype_minimum_block_as_minus_infinity():
    """Many libraries build additive masks with torch.finfo(dtype).min instead of -inf
    (SDPA gives those keys weight exactly 0); they were refused as 'a bias'."""
    q, k, v = _qkv((2, 3, 5, 4), (2, 3, 7, 4), e=2)
    pad = torch.zeros(2, 1, 1, 7, dtype=torch.bool)
    pad[1, ..., 4:] = True
    low = torch.zeros(pad.shape, dtype=q.dtype).masked_fill(pad, torch.finfo(q.dtype).min)
    out = linear_attention(q, k, v, "sderf", 32, random_state=0, attn_mask=low)
    ref = linear_attention(q, k, v, "sderf", 32, random_state=0, attn_mask=~pad)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map="sderf", n_features=16, random_state=0).eval()
    x = torch.randn(2, 6, 8)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[0, 3:] = True
    kpm_low = torch.zeros(2, 6).masked_fill(kpm, torch.finfo(torch.float32).min)
    causal_low = torch.zeros(6, 6).masked_fill(
        torch.ones(6, 6, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min
    )
    with torch.no_grad():
        a = m(x, x, x, key_padding_mask=kpm_low, attn_mask=causal_low)[0]
        b = m(x, x, x, key_padding_mask=kpm, is_causal=True)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="bias"):  # other large negatives stay a bias
        linear_attention(q, k, v, attn_mask=low / 2)


def test_module_takes_the_per_head_causal_mask_of_multihead_attention():
    """MultiheadAttention takes a 3-D attn_mask (N * num_heads, L, S); the causal one was
    refused by shape. A 3-D mask that is not causal in every slice still raises."""
    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0).eval()
    x = torch.randn(3, 5, 8)
    upper = torch.ones(5, 5, dtype=torch.bool).triu(1)
    with torch.no_grad():
        ref = m(x, x, x, is_causal=True)[0]
        for mask in (
            upper,
            upper.expand(6, 5, 5),
            torch.zeros(6, 5, 5).masked_fill(upper, -torch.inf),
        ):
            torch.testing.assert_close(m(x, x, x, attn_mask=mask)[0], ref, rtol=0, atol=0)
        torch.testing.assert_close(
            m(x[0], x[0], x[0], attn_mask=upper.expand(2, 5, 5))[0], ref[0], rtol=1e-5, atol=1e-6
        )  # unbatched: (num_heads, L, S); float32 rounding of another batch shape
        bad = upper.expand(6, 5, 5).clone()
        bad[4, 0, 1] = False
        with pytest.raises(ValueError, match="only the causal"):
            m(x, x, x, attn_mask=bad)
        with pytest.raises(ValueError, match="num_heads"):
            m(x, x, x, attn_mask=upper.expand(4, 5, 5))


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf"])
def test_closed_form_gradients_equal_autograd_through_the_dense_estimator(name, causal):
    """The streamed kernels' closed-form q, k, v gradients equal autograd through the
    dense estimator diag(P S^T 1)^-1 P S^T v (FAVOR# eq. 4) with the same projections
    and the fitted parameters held constant, padded keys and S != L included; in
    bidirectional mode the parameters are the call's own per-instance fit (which
    gradcheck cannot hold constant), in causal mode those of calibration moments."""
    L, S = 7, 7 if causal else 9
    q, k, v = _qkv((2, 2, L, 3), (2, 2, S, 3), e=2, scale=0.8, seed=3)
    pad = torch.zeros(2, 2, S, dtype=torch.bool)
    pad[1, :, -3:] = True
    pad[0, 0, 1] = True
    if causal:  # moments of other data
        mom = attention_moments(*_qkv((2, 2, 5, 3), seed=4)[:2])
    else:  # the per-instance fit of the call: unpadded keys, every query
        mom = attention_moments(q, k, key_padding_mask=pad)
    W = torch.as_tensor(draw_features(name, 16, 3, 0)["W"])
    fmap = build_log_map(name, W, mom if name in FITTED_MAPS else None, 3)

    def dense(q, k, v):
        x, y = q * 3**-0.25, k * 3**-0.25
        A = torch.exp(fmap.log_features(x, "q")) @ torch.exp(fmap.log_features(y, "k")).mT
        A = A * (~pad)[..., None, :]
        if causal:
            A = A * torch.ones(L, S, dtype=A.dtype).tril()
        return (A @ v) / A.sum(-1, keepdim=True)

    w = torch.randn(2, 2, L, 2, generator=torch.Generator().manual_seed(5), dtype=q.dtype)
    ins = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = linear_attention(
        *ins,
        name,
        16,
        random_state=0,
        is_causal=causal,
        key_padding_mask=pad,
        moments=mom if causal else None,
        chunk_size=2,
    )
    ref_ins = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = dense(*ref_ins)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    got = torch.autograd.grad((out * w).sum(), ins)
    want = torch.autograd.grad((ref * w).sum(), ref_ins)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
