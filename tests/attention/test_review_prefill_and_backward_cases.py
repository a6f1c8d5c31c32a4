"""Review cases for the prefill through the causal kernel's forward (a block given to
``linear_attention_step`` without autograd) and for the causal backward's folded suffix
side: each against the causal full-sequence pass (float64) or autograd through it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import LinearLogFeatures, qkv, spy_paths, step_in_blocks  # noqa: E402
from attention_helpers import rel_error as _rel  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)


def test_block_from_a_state_that_requires_grad_keeps_the_graph():
    """A state that carries autograd (a token whose key requires grad) then a 149-token
    block of plain inputs with grad enabled: the block cannot run the in-place kernel
    forward (it raised torch's in-place-on-a-view error); it steps with autograd, and
    the output and the key's gradient equal the causal pass."""
    q, k, v = qkv((2, 3, 150, 8), e=8, seed=4)
    w = torch.randn(2, 3, 149, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    kw = dict(random_state=0)
    k0 = k[..., 0, :].clone().requires_grad_(True)
    st = init_decoding_state((2, 3), 8, "positive", 16, dtype=torch.float64, **kw)
    _, st = linear_attention_step(q[..., 0, :], k0, v[..., 0, :], st)
    out, st = linear_attention_step(q[..., 1:, :], k[..., 1:, :], v[..., 1:, :], st)
    (out * w).sum().backward()
    kr = torch.cat([k0.detach()[..., None, :], k[..., 1:, :]], dim=-2).requires_grad_(True)
    ref = linear_attention(q, kr, v, "positive", 16, is_causal=True, **kw)[..., 1:, :]
    (ref * w).sum().backward()
    assert st.t == 150 and _rel(out.detach(), ref.detach()) < 1e-12
    assert _rel(k0.grad, kr.grad[..., 0, :]) < 1e-10


@pytest.mark.parametrize("name", ["positive", "hyperbolic"])
def test_prefill_with_a_key_jump_then_batched_blocks_equals_causal_pass(name, monkeypatch):
    """Huge keys (norm x24) for the first 110 tokens, then ordinary ones: the log key
    maxima (``-|k|^2 / 2`` dominates) jump by about 750 nats inside a chunk (beyond the
    float64 bound of 500), so the first 512-row block of a 697-token prefill runs chunk
    by chunk with one chunk on the exact dyadic path, and the next blocks batched; left
    padding over 90 tokens in one row (chunks whose first key is masked, from an empty
    state: their first visible key bounds the growth) and a masked tail in the other, in
    place from a three-token state: equal to the causal pass in float64."""
    from kernelkit.attention import _linear as lin
    from kernelkit.attention import decoding

    paths = spy_paths(monkeypatch, decoding, "_fwd_block")
    levels = spy_paths(monkeypatch, lin, "_levels")  # the exact dyadic scheme
    T = 700
    q, k, v = qkv((2, 2, T, 8), e=8, seed=3)
    k[..., :110, :] *= 24.0
    pad = torch.zeros(2, T, dtype=torch.bool)
    pad[1, :90], pad[0, 650:] = True, True
    kw = dict(random_state=0)
    ref = linear_attention(q, k, v, name, 16, is_causal=True, key_padding_mask=pad[:, None], **kw)
    st = init_decoding_state((2, 2), 8, name, 16, dtype=torch.float64, **kw)
    with torch.no_grad():
        outs, st = step_in_blocks(q, k, v, st, [3, T - 3], pad=pad[:, None], inplace=True)
    assert paths == [False, True, True] and levels and st.t == T
    assert _rel(outs, ref) < 1e-13


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_prefill_is_as_accurate_as_the_chunk_path(dtype, monkeypatch):
    """A 1290-token block (three kernel blocks, the last ragged) in float32 / bfloat16
    after five tokens whose keys sit 8 above the rest (state maxima above the new keys),
    with left padding over 100 tokens and a padded tail: the kernel prefill's error
    against the float64 causal pass is that of the chunk path's (the prefill before the
    kernel, forced here) to within 10 %, and within the input rounding's tolerance."""
    from kernelkit.attention import decoding

    T = 1300
    q, k, v = qkv((2, 2, T, 8), e=8, seed=6)
    k[..., :5, :] += 8.0
    pad = torch.zeros(2, T, dtype=torch.bool)
    pad[0, :100], pad[1, 1200:] = True, True
    kw = dict(random_state=0)
    # the reference from the inputs as rounded to dtype: the error is the computation's
    q, k, v = (t.to(dtype).double() for t in (q, k, v))
    ref = linear_attention(
        q, k, v, "hyperbolic", 16, is_causal=True, key_padding_mask=pad[:, None], **kw
    )
    errs = []
    for kernel in (True, False):
        if not kernel:
            monkeypatch.setattr(decoding, "_runs_the_kernel", lambda *a: False)
        st = init_decoding_state((2, 2), 8, "hyperbolic", 16, dtype=torch.float32, **kw)
        with torch.no_grad():
            args = (t.to(dtype) for t in (q, k, v))
            outs, st = step_in_blocks(*args, st, [1] * 5 + [1290, 5], pad=pad[:, None])
        errs.append(_rel(outs.double(), ref))
    # the float32 computation (~1e-6) plus the output rounded to dtype (2^-24, 2^-9)
    tol = 1e-5 if dtype == torch.float32 else 2.0**-8
    assert errs[0] < tol and errs[0] < 1.1 * errs[1]


def test_a_prefilled_state_is_independent_of_later_steps():
    """A state returned by a prefill (inplace=False) keeps its tensors when it is stepped
    again out of place (twice, the same block) and when the results are stepped in place:
    the two out-of-place continuations are equal and share no storage."""
    q, k, v = qkv((2, 3, 260, 8), e=8, seed=7)
    st0 = init_decoding_state((2, 3), 8, "positive", 16, dtype=torch.float64, random_state=0)
    with torch.no_grad():
        _, s1 = linear_attention_step(q[..., :130, :], k[..., :130, :], v[..., :130, :], st0)
        kvz, c = s1.kvz.clone(), s1.c.clone()
        blk = (t[..., 130:, :] for t in (q, k, v))
        q2, k2, v2 = blk
        o2, s2 = linear_attention_step(q2, k2, v2, s1)
        o3, s3 = linear_attention_step(q2, k2, v2, s1)
        linear_attention_step(q2[..., 0, :], k2[..., 0, :], v2[..., 0, :], s2, inplace=True)
    assert torch.equal(s1.kvz, kvz) and torch.equal(s1.c, c) and torch.equal(o2, o3)
    assert not torch.equal(s2.kvz, s3.kvz)  # s2 stepped in place, s3 untouched
    ptrs = {t.untyped_storage().data_ptr() for t in (st0.kvz, s1.kvz, s3.kvz, s1.c, s3.c)}
    assert len(ptrs) == 5


def _dense_linear(W, q, k, v, keep):
    # FAVOR# eq. 4 densely with the features exp(x @ W), causal, masked keys dropped
    A = torch.exp(q @ W) @ torch.exp(k @ W).mT  # (B, L, L)
    A = A * torch.tril(torch.ones_like(A[0])) * keep[:, None, :]
    den = A.sum(-1, keepdim=True)
    return torch.where(den > 0, A @ v / torch.where(den > 0, den, 1.0), 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_folded_suffix_factor_stays_at_most_one_and_gradients_equal_dense(seed, monkeypatch):
    """The batched backward takes the suffix key features as the prefix ones times
    ``f = exp(c_end - rho_n)``, assuming ``c_end <= rho_n``. Float32, 75 rows (a ragged
    last block), a key jump beyond the float32 bound in block 1 and a row left-padded over
    20 rows (rows with no visible key; a chunk whose first key is masked after them):
    blocks 1 (and 2 for some seeds) run chunk by chunk in both passes, the later ones
    batched; queries scaled by 4 (a wide range of ``lq``), random masked keys. On every
    batched block ``c_end - rho_n`` stays at rounding level, and the gradients equal
    autograd through the dense formula in float64."""
    from kernelkit.attention import _linear as lin

    g = torch.Generator().manual_seed(40 + seed)
    L = 75
    q, k, v = qkv((2, L, 6), e=3, seed=40 + seed)
    q = q * 4.0
    W = torch.randn(6, 16, dtype=torch.float64, generator=g)
    k[:, 5] *= 40.0  # log features jump by about 100 > 60 in block 1
    keep = torch.rand(2, L, generator=g) > 0.25
    keep[0, :20] = False
    keep[1, 4] = True  # the jump is a visible key in one row
    w = torch.randn(2, L, 3, dtype=torch.float64, generator=g)

    gaps, pivots, paths = [], [], []
    bwd_block, suffix = lin._bwd_block, lin._suffix_states

    def spy_block(lq, lk, va, gr, R, c, S, G, *rest):
        pivots.append(lin._block_pivots(lk.clone(), c, G))
        res = bwd_block(lq, lk, va, gr, R, c, S, G, *rest)
        pivots.pop()
        paths.append(res is not None)
        return res

    def spy_suffix(*args):
        res = suffix(*args)
        if pivots and pivots[-1] is not None:  # inside a batched block
            c_end, rho_n = pivots[-1][1], res[1]
            seen = (rho_n < 1e29) & (c_end > -1e29)  # a later visible query, a key
            gaps.append(float((c_end - rho_n)[seen].max()))
        return res

    monkeypatch.setattr(lin, "_bwd_block", spy_block)
    monkeypatch.setattr(lin, "_suffix_states", spy_suffix)
    a, b, c = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    (_dense_linear(W, a, b, c, keep.double()) * w).sum().backward()
    ref = (a.grad, b.grad, c.grad)
    a, b, c = (x.float().requires_grad_(True) for x in (q, k, v))
    (
        lin.causal_exp(a, b, c, keep, LinearLogFeatures(W.float()), 4, 16) * w.float()
    ).sum().backward()
    assert paths[-1] is False and paths[:2] == [True, True]  # last block first
    assert len(gaps) >= 2 and max(gaps) < 1e-3  # f <= 1 to float32 rounding of R - lq
    for got, want in zip((a.grad, b.grad, c.grad), ref, strict=True):
        scale = want.abs().max()
        torch.testing.assert_close(got.double() / scale, want / scale, rtol=0, atol=2e-5)


def test_block_with_a_projection_that_requires_grad_differentiates_it():
    """A state whose projection requires grad, a 130-token block with grad enabled: the
    features carry autograd, so the block cannot run the in-place kernel forward (it
    raised torch's out= error); it steps with autograd. The output equals the causal pass
    (projection detached) and the projection's gradient that of 130 single-token steps
    (another path, the token update)."""
    q, k, v = qkv((1, 2, 130, 8), e=8, seed=9)
    P = torch.randn(16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(10))
    P.requires_grad_(True)
    w = torch.randn(1, 2, 130, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    st = init_decoding_state((1, 2), 8, "positive", 16, dtype=torch.float64, projection=P)
    out, _ = linear_attention_step(q, k, v, st)
    (grad_block,) = torch.autograd.grad((out * w).sum(), P, retain_graph=True)
    toks, _ = step_in_blocks(q, k, v, st, [1] * 130)
    (grad_tokens,) = torch.autograd.grad((toks * w).sum(), P)
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, projection=P.detach())
    assert _rel(out.detach(), ref) < 1e-12
    assert _rel(grad_block, grad_tokens) < 1e-10 and grad_tokens.norm() > 0
