"""Causal kernel internals: blocks of several chunks (batched one-pivot path, per-chunk
fallback where keys jump), the analytic backward and feature VJPs, stabilisers under
huge late keys (FAVOR# eq. 4 computed densely as the reference)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import (  # noqa: E402
    LinearLogFeatures,
    batched_block_paths,
    causal_inputs,
    fused_features,
)

from kernelkit.attention import _linear as lin  # noqa: E402
from kernelkit.attention.functional import _FusedFeatures  # noqa: E402


def _dense(feat, q, k, v, keep=None):
    # FAVOR# eq. 4 with the same features, causal, masked keys dropped
    lq, lk = feat.fmap.log_features(q, "q"), feat.fmap.log_features(k, "k")
    A = torch.exp(lq) @ torch.exp(lk).mT  # (BH, L, L)
    A = A * torch.tril(torch.ones_like(A[0]))
    if keep is not None:
        A = A * keep[:, None, :]
    den = A.sum(-1, keepdim=True)
    return torch.where(den > 0, A @ v / torch.where(den > 0, den, 1.0), 0.0)


class _NoVJP:
    """The same features without ``vjp``: the kernel falls back to autograd."""

    def __init__(self, feat):
        self.n_out = feat.n_out
        self.log_features = feat.log_features


MAPS = ["positive", "sderf", "saderf", "aderf"]  # B: none, orthogonal, diagonal, full


@pytest.mark.parametrize("name", MAPS)
@pytest.mark.parametrize("chunk,block", [(4, 16), (8, 8), (2, 32)])
def test_blocks_equal_dense_formula(name, chunk, block):
    """Several chunks per block (and a ragged last block) give the dense causal formula."""
    q, k, v = causal_inputs(L=40)
    keep = torch.rand(3, 40, generator=torch.Generator().manual_seed(2)) > 0.3
    feat = fused_features(name, q, k)
    out = lin.causal_exp(q, k, v, keep, feat, chunk, block)
    torch.testing.assert_close(out, _dense(feat, q, k, v, keep.double()), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", MAPS)
def test_feature_vjp_matches_autograd(name):
    """Analytic ``dx = dl W^T - (sum dl) B^T B x`` of the fused features equals autograd."""
    q, k, _ = causal_inputs(L=12)
    feat = fused_features(name, q, k)
    dl = torch.randn(3, 12, feat.n_out, dtype=torch.float64)
    for side, x in (("q", q), ("k", k)):
        xc = x.clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(feat.log_features(xc, side), xc, dl)
        torch.testing.assert_close(
            feat.vjp(x, side, dl, torch.empty_like(x)), ref, rtol=1e-12, atol=1e-12
        )
        acc = torch.ones_like(x)
        feat.vjp(x, side, dl, acc, accumulate=True)
        torch.testing.assert_close(acc, ref + 1.0, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MAPS)
def test_fused_block_features_equal_log_features(name):
    """Keys: ``[x, |B x|^2, 1] @ [W; -1/2; c]`` into a buffer equals the map's log
    features; masked keys give exactly -1e30. Queries: ``[x, 1] @ [W; c]``, the map's log
    features less their row term ``-|B x|^2 / 2`` (it cancels in the attention output)."""
    q, k, _ = causal_inputs(L=12)
    feat = fused_features(name, q, k)
    keep = torch.rand(3, 12, generator=torch.Generator().manual_seed(6)) > 0.4
    for side, x, kb in (("q", q, None), ("k", k, keep)):
        out = feat.log_features_into(x, side, kb, torch.empty(3, 12, feat.n_out, dtype=x.dtype))
        ref = feat.fmap.log_features(x, side)
        if side == "q":
            ref = ref - feat.fmap._row(x, "q")
            torch.testing.assert_close(feat.log_features(x, "q"), ref, rtol=1e-12, atol=1e-10)
        if kb is not None:
            assert torch.all(out[~kb] == -1e30)
            out, ref = out[kb], ref[kb]
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("name", MAPS)
def test_gradcheck_multi_chunk_blocks(name):
    """The analytic backward (prefix scan, suffix scan, feature VJPs) matches finite
    differences with several chunks per block, masked keys and an empty first row."""
    q, k, v = causal_inputs(BH=2, L=14, d=3, e=2)
    feat = fused_features(name, q, k, M=6)
    keep = torch.ones(2, 14, dtype=torch.bool)
    keep[:, 0] = False
    keep[0, 9] = False
    args = (q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True))
    assert torch.autograd.gradcheck(
        lambda a, b, c: lin.causal_exp(a, b, c, keep, feat, 2, 8), args, fast_mode=True
    )


def test_autograd_feature_fallback_agrees_with_analytic_vjp():
    """Features without ``vjp`` (autograd on recomputed features) give the same gradients."""
    q, k, v = causal_inputs(L=24)
    feat = fused_features("aderf", q, k)
    grads = []
    for f in (feat, _NoVJP(feat)):
        a, b, c = (x.clone().requires_grad_(True) for x in (q, k, v))
        lin.causal_exp(a, b, c, None, f, 4, 16).sin().sum().backward()
        grads.append((a.grad, b.grad, c.grad))
    for x, y in zip(*grads, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_late_key_inside_a_block_changes_no_earlier_output(dtype):
    """A key of huge norm late in a block (its chunk, and the block, leave the one-pivot
    path) changes neither earlier outputs nor their gradients beyond rounding, and no
    row under- or overflows."""
    q, k, v = causal_inputs(BH=2, L=64, d=8, dtype=dtype)
    feat = fused_features("positive", q, k, M=32)
    t = 37  # inside the second chunk of 8 of the block [32, 64)
    k2 = k.clone()
    k2[:, t + 1] *= 40.0  # log features ~1e3 above the others
    w = torch.randn(2, t + 1, 3, dtype=dtype, generator=torch.Generator().manual_seed(4))

    def run(kk):
        a, b, c = (x.clone().requires_grad_(True) for x in (q, kk, v))
        out = lin.causal_exp(a, b, c, None, feat, 8, 32)
        (out[:, : t + 1] * w).sum().backward()
        return out.detach(), a.grad, b.grad, c.grad

    r1, r2 = run(k), run(k2)
    tol = 1e-11 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(r1[0][:, : t + 1], r2[0][:, : t + 1], rtol=tol, atol=tol)
    for g1, g2 in zip(r1[1:], r2[1:], strict=True):
        torch.testing.assert_close(g1, g2, rtol=tol, atol=tol)
    assert torch.isfinite(r2[0]).all()
    # later rows attend to the huge key: convex combinations of the values, finite
    lo, hi = v.amin(dim=1, keepdim=True), v.amax(dim=1, keepdim=True)
    assert torch.all(r2[0] >= lo - 1e-4) and torch.all(r2[0] <= hi + 1e-4)


def test_block_and_chunk_paths_agree_at_moderate_growth():
    """Keys growing by less than the bound inside chunks (one-pivot, batched per block)
    and the per-chunk dyadic scheme give the same outputs and gradients."""
    q, k, v = causal_inputs(L=48, scale=2.0)
    feat = fused_features("sderf", q, k)
    res = []
    for bound in (1e300, -1.0):
        saved = lin._growth_bound
        lin._growth_bound = lambda dtype, b=bound: b
        try:
            a, b, c = (x.clone().requires_grad_(True) for x in (q, k, v))
            out = lin.causal_exp(a, b, c, None, feat, 4, 16)
            out.cos().sum().backward()
        finally:
            lin._growth_bound = saved
        res.append((out.detach(), a.grad, b.grad, c.grad))
    for x, y in zip(*res, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_key_jump_mid_block_takes_the_exact_path_and_stays_causal(dtype, monkeypatch):
    """A key whose log features jump by far more than the growth bound in the middle of a
    block sends that block chunk by chunk (the dyadic scheme for its chunk): earlier
    outputs and gradients unchanged, later rows finite convex combinations."""
    q, k, v = causal_inputs(BH=2, L=64, d=8, dtype=dtype)
    W = torch.randn(8, 32, dtype=dtype, generator=torch.Generator().manual_seed(5)) * 3.0

    class Linear:  # log features x @ W (no row term): a scaled key raises them directly
        n_out = 32

        @staticmethod
        def log_features(x, side, keep=None):
            lf = x @ W
            return lf if keep is None else torch.where(keep[..., None], lf, -1e30)

    feat = Linear()
    t = 37
    k2 = k.clone()
    k2[:, t + 1] *= 30.0 if dtype == torch.float32 else 200.0  # jump >> the growth bound
    calls = []
    for fn in ("_fwd_chunks", "_bwd_chunks"):
        orig = getattr(lin, fn)
        monkeypatch.setattr(lin, fn, lambda *a, _f=orig, _n=fn: calls.append(_n) or _f(*a))
    w = torch.randn(2, t + 1, 3, dtype=dtype, generator=torch.Generator().manual_seed(4))

    def run(kk):
        a, b, c = (x.clone().requires_grad_(True) for x in (q, kk, v))
        out = lin.causal_exp(a, b, c, None, feat, 8, 32)
        (out[:, : t + 1] * w).sum().backward()
        return out.detach(), a.grad, b.grad, c.grad

    r1 = run(k)
    assert not calls  # bounded growth everywhere: batched one-pivot blocks
    r2 = run(k2)
    assert calls == ["_fwd_chunks", "_bwd_chunks"]
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(r1[0][:, : t + 1], r2[0][:, : t + 1], rtol=tol, atol=tol)
    for g1, g2 in zip(r1[1:], r2[1:], strict=True):
        torch.testing.assert_close(g1, g2, rtol=tol, atol=tol)
    assert torch.isfinite(r2[0]).all()
    lo, hi = v.amin(dim=1, keepdim=True), v.amax(dim=1, keepdim=True)
    assert torch.all(r2[0] >= lo - 1e-4) and torch.all(r2[0] <= hi + 1e-4)


def test_input_scale_folded_per_block_equals_scaled_inputs():
    """Features of unscaled inputs with ``input_scale = r`` (``x = r q`` formed per block)
    give the outputs of the scaled inputs and the gradients w.r.t. the unscaled ones."""
    q, k, v = causal_inputs(L=24)
    keep = torch.rand(3, 24, generator=torch.Generator().manual_seed(7)) > 0.2
    r = 0.7
    feat = fused_features("aderf", q * r, k * r)
    feat_r = _FusedFeatures(feat.fmap, input_scale=r)
    res = []
    for f, s in ((feat, r), (feat_r, 1.0)):
        a, b, c = (x.clone().requires_grad_(True) for x in (q, k, v))
        out = lin.causal_exp(a * s, b * s, c, keep, f, 4, 16)
        out.sin().sum().backward()
        res.append((out.detach(), a.grad, b.grad, c.grad))
    for x, y in zip(*res, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-11, atol=1e-12)


def _dense_grads(feat, q, k, v, w, keep=None):
    # gradients of sum(w * dense causal output) by autograd on the dense formula
    a, b, c = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    (_dense(feat, a, b, c, keep) * w).sum().backward()
    return a.grad, b.grad, c.grad


@pytest.mark.parametrize("name", MAPS)
def test_backward_over_many_blocks_without_mask_equals_dense_autograd(name):
    """No mask (every row sees its own key, so the suffix scan runs unmasked) and six
    blocks, processed in one reverse pass from the block states the forward kept: the
    gradients equal autograd through the dense formula."""
    q, k, v = causal_inputs(BH=2, L=96, d=4, e=3, seed=3)
    feat = fused_features(name, q, k)
    w = torch.randn(2, 96, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    a, b, c = (x.clone().requires_grad_(True) for x in (q, k, v))
    (lin.causal_exp(a, b, c, None, feat, 4, 16) * w).sum().backward()
    for got, ref in zip((a.grad, b.grad, c.grad), _dense_grads(feat, q, k, v, w), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)


def test_backward_with_a_chunk_by_chunk_block_between_batched_ones_equals_dense(monkeypatch):
    """A key jump beyond the float32 growth bound in the middle block sends that block
    chunk by chunk (local autograd) while the blocks around it stay batched; with a mask,
    the gradients equal autograd through the dense formula computed in float64."""
    q, k, v = causal_inputs(BH=2, L=48, d=6, e=3, seed=11)
    W = torch.randn(6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(12))

    k = k.clone()
    k[:, 21] *= 40.0  # log features jump by about 85 > 60 (float32 bound) in block 2 of 3
    keep = torch.rand(2, 48, generator=torch.Generator().manual_seed(13)) > 0.2
    keep[:, 0] = True  # a masked first key would send the first block chunk by chunk too
    paths = batched_block_paths(monkeypatch)
    w = torch.randn(2, 48, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(14))

    class Dense:  # _dense reads feat.fmap.log_features(x, side)
        fmap = LinearLogFeatures(W)

    ref = _dense_grads(Dense, q, k, v, w, keep.double())
    f32 = LinearLogFeatures(W.float())
    a, b, c = (x.float().requires_grad_(True) for x in (q, k, v))
    (lin.causal_exp(a, b, c, keep, f32, 4, 16) * w.float()).sum().backward()
    assert paths == [True, False, True]  # blocks 3, 2, 1 (reverse pass)
    for got, want in zip((a.grad, b.grad, c.grad), ref, strict=True):
        scale = want.abs().max()
        torch.testing.assert_close(got.double() / scale, want / scale, rtol=0, atol=2e-5)


def test_forward_without_autograd_keeps_no_block_states():
    """Under ``no_grad`` (or with no input requiring gradients) the forward saves no
    per-block states: the extra memory of inference is the output's and a few blocks'."""
    q, k, v = causal_inputs(L=64)
    feat = fused_features("sderf", q, k)
    seen = []
    orig = lin._CausalExp.forward

    def spy(ctx, *args):
        seen.append(args[-1])
        return orig(ctx, *args)

    lin._CausalExp.forward = staticmethod(spy)
    try:
        with torch.no_grad():
            lin.causal_exp(q.requires_grad_(True), k, v, None, feat, 4, 16)
        lin.causal_exp(q.detach(), k, v, None, feat, 4, 16)
        lin.causal_exp(q.requires_grad_(True), k, v, None, feat, 4, 16)
    finally:
        lin._CausalExp.forward = staticmethod(orig)
    assert seen == [False, False, True]


def test_faint_keys_get_their_gradients_from_later_queries_to_round_off(monkeypatch):
    """Keys whose log features lie tens of nats below their chunk's maxima: their
    gradients come almost only from later queries (the suffix side, whose key features
    the batched path takes as the prefix ones times ``exp(c_end - rho_n) <= 1``). Each
    key's gradient equals autograd through the dense formula to round-off relative to
    its own size, not only to the largest gradient."""
    q, k, v = causal_inputs(BH=2, L=64, d=4, e=3, scale=1.5, seed=21)
    k = k.clone()
    k[:, 1::4] *= -4.0  # every fourth key far from the queries: log features far lower
    feat = fused_features("positive", q, k)
    lk = feat.fmap.log_features(k, "k")
    assert float((lk.amax(-1)[:, 1::4] - lk.amax(-1)[:, 0::4]).median()) < -20.0
    w = torch.randn(2, 64, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(22))
    paths = batched_block_paths(monkeypatch)
    b = k.clone().requires_grad_(True)
    c = v.clone().requires_grad_(True)
    (lin.causal_exp(q, b, c, None, feat, 4, 16) * w).sum().backward()
    assert paths == [True] * 4  # every block on the batched path
    _, dk, dv = _dense_grads(feat, q, k, v, w)
    for got, ref in ((b.grad, dk), (c.grad, dv)):
        err = (got - ref).norm(dim=-1) / ref.norm(dim=-1)  # (BH, L) per key
        faint = ref.norm(dim=-1)[:, 1::4] / ref.norm(dim=-1).max()
        assert float(faint.median()) < 1e-8  # the faint keys' gradients are tiny ...
        assert float(err.max()) < 1e-9  # ... and exact to round-off all the same
