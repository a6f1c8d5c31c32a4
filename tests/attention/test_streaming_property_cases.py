"""Property-based checks of the streaming attention kernels against a dense reference.

For fixed features (a given projection and, for the fitted maps, given ``moments``), the
bidirectional stream, the causal block scan and the decoding step must compute the
*dense* estimator of the same features: ``A = phi(q) phi(k)^T`` (causal mask top left
aligned, padded keys removed), ``out = A v / A 1``. The reference below forms ``A`` in
float64 from the log features with a row max-shift, so it is exact to rounding at any
input norm; hypothesis searches lengths around the chunk and block sizes, batch shapes,
small and odd ``d`` / ``M`` / ``e``, masks, GQA, scales and input norms.

Tolerance (:func:`_tol`): every weight ``exp(l)`` is computed from log features of
magnitude at most ``Lam`` (the largest ``|lq| + |lk|``), whose absolute rounding
``~Lam eps`` becomes a relative error ``~Lam eps`` of the weight; the sums over at most a
few hundred keys and features add ``~n eps``. The outputs are convex combinations of the
values, so ``1e3 (1 + Lam) eps max|v|`` bounds the difference with a margin: about
``2e-13 max|v|`` at unit norms, ``6e-10 max|v|`` at the largest ``Lam`` here (rows of
norm 30 at ``scale = 2.5``: ``|x|^2 / 2 ~ 1100`` per side). The errors seen in the
searches stayed below a thousandth of it.
"""

from __future__ import annotations

import math
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    _bidirectional,
    _linear,
    attention_moments,
    decoding,
    draw_features,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)
from kernelkit.attention._maps import build_log_map  # noqa: E402

EXP = ("positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf")
FITTED = ("gerf", "saderf", "aderf", "sderf")
EPS = torch.finfo(torch.float64).eps

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------------------
# the dense reference


def _log_features(name, W, mom, x, y):
    """Log features (..., n, M') of the scaled queries ``x`` and keys ``y``, float64.

    positive / hyperbolic: the FAVOR+ formula ``w.x - |x|^2 / 2`` written out (the
    ``1/sqrt(M)`` is common to all weights and cancels); fitted maps: the library's
    feature parameters for the given moments (the fit is not what is tested here)."""
    W = W.double()
    if name in ("positive", "hyperbolic"):
        Wp = torch.cat([W, -W]) if name == "hyperbolic" else W
        lq = x @ Wp.T - 0.5 * (x * x).sum(-1, keepdim=True)
        lk = y @ Wp.T - 0.5 * (y * y).sum(-1, keepdim=True)
        return lq, lk
    fmap = build_log_map(name, W, mom, x.shape[-1])
    return fmap.log_features(x, "q"), fmap.log_features(y, "k")


def _dense(name, W, mom, q, k, v, scale=None, causal=False, pad=None):
    """Dense FAVOR estimate ``A v / A 1`` in float64; ``pad`` (..., S) True = padded key.
    Returns the output and the largest log-feature magnitude (for the tolerance)."""
    q, k, v = q.double(), k.double(), v.double()
    d = q.shape[-1]
    r = math.sqrt(1.0 / math.sqrt(d) if scale is None else scale)
    lq, lk = _log_features(name, W, mom, q * r, k * r)
    # log A_ij = logsumexp_m (lq_im + lk_jm), (..., L, S)
    logA = torch.logsumexp(lq[..., :, None, :] + lk[..., None, :, :], dim=-1)
    L, S = logA.shape[-2:]
    blocked = torch.zeros(L, S, dtype=torch.bool)
    if causal:
        blocked = torch.ones(L, S, dtype=torch.bool).triu(1)  # top left: j <= i
    if pad is not None:
        blocked = blocked | pad[..., None, :]
    logA = logA.masked_fill(blocked, -math.inf)
    top = logA.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    w = torch.exp(logA - top)  # masked: exactly 0; rows without keys: all 0
    den = w.sum(-1, keepdim=True)
    out = (w @ v) / torch.where(den > 0, den, torch.ones_like(den))
    lam = float(lq.detach().abs().amax() + lk.detach().abs().amax())
    return out, lam


def _tol(lam, v):
    # module docstring: relative rounding of the weights ~(1 + Lam) eps, sums ~n eps
    return 1e3 * (1.0 + lam) * EPS * max(1.0, float(v.abs().amax()))


def _assert_matches(out, ref, lam, v):
    assert torch.isfinite(out).all()
    err = float((out.double() - ref).abs().amax()) if out.numel() else 0.0
    assert err <= _tol(lam, v), f"max abs error {err:.3e} > {_tol(lam, v):.3e}"


def _projection(name, M, d, seed):
    return torch.as_tensor(draw_features(name, M, d, seed, "iid")["W"], dtype=torch.float64)


def _moments(name, batch, d, seed, scale=None):
    # calibration moments with a head dim (the last batch dim) or shared, from other data
    if name not in FITTED:
        return None
    g = torch.Generator().manual_seed(seed + 7)
    hb = batch[-1:] if batch else ()
    qc = torch.randn(*hb, 9, d, generator=g, dtype=torch.float64) * 0.8
    kc = torch.randn(*hb, 9, d, generator=g, dtype=torch.float64) * 1.2 + 0.3
    return attention_moments(qc, kc, scale=scale)


def _inputs(batch, L, S, d, e, qn, kn, seed, kv_batch=None):
    g = torch.Generator().manual_seed(seed)
    kv_batch = batch if kv_batch is None else kv_batch
    q = torch.randn(*batch, L, d, generator=g, dtype=torch.float64)
    k = torch.randn(*kv_batch, S, d, generator=g, dtype=torch.float64)
    # rows of norm up to qn / kn (some much shorter): where the stabilisers matter
    q = q / q.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    k = k / k.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    q = q * qn * torch.rand(*batch, L, 1, generator=g, dtype=torch.float64)
    k = k * kn * torch.rand(*kv_batch, S, 1, generator=g, dtype=torch.float64)
    v = torch.randn(*kv_batch, S, e, generator=g, dtype=torch.float64)
    return q, k, v


def _pad(kind, shape, seed):
    """Key padding (True = padded) of ``shape`` (..., S): none, random, all but one key,
    or a whole first instance (the documented zeros)."""
    if kind == "none":
        return None
    g = torch.Generator().manual_seed(seed + 3)
    S = shape[-1]
    if kind == "random":
        return torch.rand(*shape, generator=g) < 0.4
    if kind == "all_but_one":
        pad = torch.ones(*shape, dtype=torch.bool)
        keep = torch.randint(0, S, shape[:-1], generator=g)
        return pad.scatter(-1, keep[..., None], False)
    pad = torch.rand(*shape, generator=g) < 0.3
    flat = pad.reshape(-1, S)
    flat[0] = True  # every key of the first instance (head) masked
    return flat.reshape(shape)


# short lengths, and one less / more than chunk and block sizes (powers of two and not)
_LENGTHS = st.one_of(st.integers(1, 40), st.sampled_from([47, 48, 49, 63, 64, 65, 95, 129]))


@st.composite
def _cases(draw, causal):
    return dict(
        name=draw(st.sampled_from(EXP)),
        batch=tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))),
        L=draw(_LENGTHS),
        S=draw(_LENGTHS),
        d=draw(st.integers(1, 6)),
        e=draw(st.integers(1, 5)),
        M=draw(st.integers(1, 9)),
        chunk=draw(st.sampled_from([1, 2, 4, 8, 16, 64])),
        blocks=draw(st.sampled_from([1, 2, 3, 8])),
        # the causal scan's chunk states by prefix sums (accelerators) or by a chain
        parallel=draw(st.booleans()),
        rows=draw(st.integers(1, 20)),
        qn=draw(st.sampled_from([0.5, 2.0, 10.0, 30.0])),
        kn=draw(st.sampled_from([0.5, 2.0, 10.0, 30.0])),
        scale=draw(st.sampled_from([None, 0.05, 0.3, 1.0, 2.5])),
        pad=draw(st.sampled_from(["none", "random", "all_but_one", "whole"])),
        seed=draw(st.integers(0, 2**16)),
    )


def _run_case(c, causal):
    name, batch, d, e, M = c["name"], c["batch"], c["d"], c["e"], c["M"]
    L, S = c["L"], c["S"]
    q, k, v = _inputs(batch, L, S, d, e, c["qn"], c["kn"], c["seed"])
    W = _projection(name, M, d, c["seed"])
    mom = _moments(name, batch, d, c["seed"])
    pad = _pad(c["pad"], (*batch, S), c["seed"])
    chunk = c["chunk"]
    # block sizes are internal: the causal scan's rows per block (a multiple of the
    # chunk) and the bidirectional stream's rows per block; so is the causal scan's
    # chaining of chunk states (prefix sums on accelerators)
    with (
        mock.patch.object(_linear, "_block_rows", lambda n, ch: ch * c["blocks"]),
        mock.patch.object(_bidirectional, "block_rows", lambda *a: c["rows"]),
        mock.patch.object(_linear, "_parallel_scan", lambda device: c["parallel"]),
    ):
        out = linear_attention(
            q,
            k,
            v,
            name,
            M,
            is_causal=causal,
            key_padding_mask=pad,
            scale=c["scale"],
            projection=W,
            moments=mom,
            chunk_size=chunk,
        )
    ref, lam = _dense(name, W, mom, q, k, v, c["scale"], causal, pad)
    assert out.shape == ref.shape
    _assert_matches(out, ref, lam, v)


# --------------------------------------------------------------------------------------
# forward: bidirectional and causal, every positive map


@SETTINGS
@given(_cases(causal=False))
def test_bidirectional_stream_equals_dense_estimator(c):
    _run_case(c, causal=False)


@SETTINGS
@given(_cases(causal=True))
def test_causal_scan_equals_dense_estimator(c):
    _run_case(c, causal=True)


# --------------------------------------------------------------------------------------
# SDPA's attn_mask forms: the same result as is_causal / key_padding_mask and the dense


@SETTINGS
@given(
    name=st.sampled_from(EXP),
    L=st.integers(1, 20),
    S=st.integers(1, 20),
    causal=st.booleans(),
    form=st.sampled_from(["bool", "float_inf", "float_min"]),
    full=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_attn_mask_forms_equal_dense_estimator(name, L, S, causal, form, full, seed):
    batch, d, e, M = (2, 3), 3, 2, 5
    q, k, v = _inputs(batch, L, S, d, e, 3.0, 3.0, seed)
    W = _projection(name, M, d, seed)
    mom = _moments(name, batch, d, seed)
    pad = _pad("random", (batch[0], 1, S), seed)
    blocked = pad[..., None, :]  # (2, 1, 1, S)
    if causal:
        blocked = blocked | torch.ones(L, S, dtype=torch.bool).triu(1)
    elif full:
        blocked = blocked.expand(*batch, L, S)  # the padding repeated in every row
    if form == "bool":
        mask = ~blocked
    else:
        neg = -math.inf if form == "float_inf" else torch.finfo(torch.float64).min
        mask = torch.zeros(blocked.shape, dtype=torch.float64).masked_fill(blocked, neg)
    out = linear_attention(
        q, k, v, name, M, attn_mask=mask, projection=W, moments=mom, chunk_size=4
    )
    ref, lam = _dense(name, W, mom, q, k, v, None, causal, pad)
    _assert_matches(out, ref, lam, v)


# --------------------------------------------------------------------------------------
# grouped-query attention: the keys of head h // g, as SDPA


@SETTINGS
@given(
    name=st.sampled_from(EXP),
    causal=st.booleans(),
    L=st.integers(1, 24),
    S=st.integers(1, 24),
    Hkv=st.integers(1, 3),
    g=st.integers(1, 3),
    shared_moments=st.booleans(),
    pad=st.sampled_from(["none", "per_key_head", "shared"]),
    seed=st.integers(0, 2**16),
)
def test_gqa_equals_dense_estimator_on_repeated_keys(
    name, causal, L, S, Hkv, g, shared_moments, pad, seed
):
    N, d, e, M = 2, 3, 2, 6
    Hq = g * Hkv
    q, k, v = _inputs((N, Hq), L, S, d, e, 4.0, 4.0, seed, kv_batch=(N, Hkv))
    W = _projection(name, M, d, seed)
    mom = _moments(name, () if shared_moments else (N, Hq), d, seed)
    kpm = None
    if pad != "none":
        kpm = _pad("random", (N, Hkv if pad == "per_key_head" else 1, S), seed)
    out = linear_attention(
        q,
        k,
        v,
        name,
        M,
        is_causal=causal,
        key_padding_mask=kpm,
        projection=W,
        moments=mom,
        chunk_size=8,
        enable_gqa=True,
    )
    kr, vr = (t.repeat_interleave(g, dim=-3) for t in (k, v))
    pr = None
    if kpm is not None:
        pr = kpm.repeat_interleave(g, dim=-2) if pad == "per_key_head" else kpm
        pr = pr.expand(N, Hq, S)
    ref, lam = _dense(name, W, mom, q, kr, vr, None, causal, pr)
    _assert_matches(out, ref, lam, v)


# --------------------------------------------------------------------------------------
# gradients: autograd of the streaming output vs autograd of the dense float64 reference


@settings(SETTINGS, max_examples=30)
@given(
    name=st.sampled_from(EXP),  # positive and sderf asked; the others cost nothing more
    causal=st.booleans(),
    L=st.sampled_from([1, 2, 5, 8, 9, 17]),
    S=st.sampled_from([1, 3, 8, 9, 17]),
    d=st.integers(1, 4),
    M=st.integers(1, 6),
    norm=st.sampled_from([0.5, 3.0, 10.0]),
    pad=st.sampled_from(["none", "random", "all_but_one", "whole"]),
    chunk=st.sampled_from([1, 2, 4, 8]),
    scale=st.sampled_from([None, 0.1, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_gradients_equal_dense_autograd(name, causal, L, S, d, M, norm, pad, chunk, scale, seed):
    batch, e = (2,), 3
    q, k, v = _inputs(batch, L, S, d, e, norm, norm, seed)
    W = _projection(name, M, d, seed)
    mom = _moments(name, batch, d, seed)
    kpm = _pad(pad, (*batch, S), seed)
    w = torch.randn(*batch, L, e, generator=torch.Generator().manual_seed(seed + 1))
    w = w.double()

    def grads(fn):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        (fn(qq, kk, vv) * w).sum().backward()
        return qq.grad, kk.grad, vv.grad

    with mock.patch.object(_linear, "_block_rows", lambda n, ch: ch * 2):
        got = grads(
            lambda a, b, c: linear_attention(
                a,
                b,
                c,
                name,
                M,
                is_causal=causal,
                key_padding_mask=kpm,
                projection=W,
                moments=mom,
                chunk_size=chunk,
                scale=scale,
            )
        )
    want = grads(lambda a, b, c: _dense(name, W, mom, a, b, c, scale, causal, kpm)[0])
    lam = _dense(name, W, mom, q, k, v, scale, causal, kpm)[1]
    # the gradients are sums of the same weights times inputs of norm <= norm (the
    # query / key gradients carry the projections and inputs): the forward's tolerance
    # scaled by (1 + norm) (1 + max |W|)
    tol = _tol(lam, v) * (1.0 + norm) * (1.0 + float(W.abs().amax()))
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        assert float((a - b).abs().amax()) <= tol


# --------------------------------------------------------------------------------------
# decoding: the step API fed the same sequence in random blocks equals the causal pass


@SETTINGS
@given(
    name=st.sampled_from(EXP),
    L=st.one_of(st.integers(1, 30), st.sampled_from([63, 65, 129])),
    cuts=st.lists(st.integers(0, 70), min_size=1, max_size=8),
    d=st.integers(1, 5),
    e=st.integers(1, 4),
    M=st.integers(1, 8),
    norm=st.sampled_from([0.5, 3.0, 10.0, 30.0]),
    pad=st.sampled_from(["none", "random", "all_but_one"]),
    scale=st.sampled_from([None, 0.2, 2.0]),
    gqa=st.booleans(),
    no_grad=st.booleans(),
    chunk=st.sampled_from([2, 4, 64]),
    parallel=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decoding_in_random_blocks_equals_causal_pass(
    name, L, cuts, d, e, M, norm, pad, scale, gqa, no_grad, chunk, parallel, seed
):
    # blocks of the cut lengths (0: an empty block; 1: also as a single token (..., d))
    batch, kv_batch = (2, 2), ((2, 1) if gqa else (2, 2))
    q, k, v = _inputs(batch, L, L, d, e, norm, norm, seed, kv_batch=kv_batch)
    W = _projection(name, M, d, seed)
    mom = _moments(name, batch, d, seed)
    kpm = _pad(pad, (*kv_batch, L), seed)
    blocks, left = [], L
    for n in cuts:
        if left == 0:
            break
        blocks.append(min(n, left))
        left -= blocks[-1]
    if left:
        blocks.append(left)
    state = init_decoding_state(
        batch,
        d,
        name,
        M,
        e=e,
        projection=W,
        moments=mom,
        scale=scale,
        dtype=torch.float64,
        enable_gqa=gqa,
        num_kv_heads=kv_batch[-1] if gqa else None,
    )
    outs, lo = [], 0
    # the step's chunk of a block and its prefill blocks (internal) made small, so that
    # short blocks take the chunked and the batched prefill paths
    with (
        torch.set_grad_enabled(not no_grad),
        mock.patch.object(decoding, "_PREFILL_CHUNK", chunk),
        mock.patch.object(_linear, "_block_rows", lambda n, ch: 2 * ch),
        # the prefill's chunk states by prefix sums (accelerators) or by the chain
        mock.patch.object(_linear, "_parallel_scan", lambda device: parallel),
    ):
        qq = q.clone().requires_grad_(not no_grad)
        for i, n in enumerate(blocks):
            sl = lo if n == 1 and i % 2 else slice(lo, lo + n)  # every other 1: a token
            m = None if kpm is None else kpm[..., sl]
            o, state = linear_attention_step(
                qq[..., sl, :],
                k[..., sl, :],
                v[..., sl, :],
                state,
                key_padding_mask=m,
                enable_gqa=gqa,
                inplace=no_grad,  # a static-cache update where autograd is off
            )
            outs.append(o[..., None, :] if isinstance(sl, int) else o)
            lo += n
    stepped = torch.cat(outs, dim=-2).detach()
    full = linear_attention(
        q,
        k,
        v,
        name,
        M,
        is_causal=True,
        key_padding_mask=kpm,
        projection=W,
        moments=mom,
        scale=scale,
        enable_gqa=gqa,
    )
    rep = batch[-1] // kv_batch[-1]
    kr, vr = (t.repeat_interleave(rep, dim=-3) for t in (k, v))
    pr = None if kpm is None else kpm.repeat_interleave(rep, dim=-2)
    ref, lam = _dense(name, W, mom, q, kr, vr, scale, True, pr)
    _assert_matches(stepped, ref, lam, v)
    _assert_matches(full, ref, lam, v)
    assert state.t == L


@settings(SETTINGS, max_examples=25)
@given(
    name=st.sampled_from(["positive", "sderf"]),
    L=st.integers(1, 16),
    cuts=st.lists(st.integers(0, 9), min_size=1, max_size=5),
    d=st.integers(1, 4),
    M=st.integers(1, 6),
    norm=st.sampled_from([0.5, 3.0, 10.0]),
    pad=st.sampled_from(["none", "random", "all_but_one"]),
    gqa=st.booleans(),
    chunk=st.sampled_from([2, 64]),
    seed=st.integers(0, 2**16),
)
@example(  # a row padded everywhere but at t = 3: NaN gradients before the fix
    name="positive",
    L=7,
    cuts=[1],
    d=1,
    M=1,
    norm=0.5,
    pad="all_but_one",
    gqa=False,
    chunk=2,
    seed=1,
)
def test_gradients_through_decoding_steps_equal_dense_autograd(
    name, L, cuts, d, M, norm, pad, gqa, chunk, seed
):
    # autograd through the step (blocks and single tokens, the state carried) vs the
    # dense causal reference
    batch, kv_batch, e = (2, 2), ((2, 1) if gqa else (2, 2)), 3
    q, k, v = _inputs(batch, L, L, d, e, norm, norm, seed, kv_batch=kv_batch)
    W = _projection(name, M, d, seed)
    mom = _moments(name, batch, d, seed)
    kpm = _pad(pad, (*kv_batch, L), seed)
    blocks, left = [], L
    for n in cuts:
        blocks.append(min(n, left))
        left -= blocks[-1]
    if left:
        blocks.append(left)
    w = torch.randn(*batch, L, e, generator=torch.Generator().manual_seed(seed + 1)).double()
    g = batch[-1] // kv_batch[-1]

    def stepped(a, b, c):
        state = init_decoding_state(
            batch,
            d,
            name,
            M,
            e=e,
            projection=W,
            moments=mom,
            dtype=torch.float64,
            enable_gqa=gqa,
            num_kv_heads=kv_batch[-1] if gqa else None,
        )
        outs, lo = [], 0
        with mock.patch.object(decoding, "_PREFILL_CHUNK", chunk):
            for i, n in enumerate(blocks):
                sl = lo if n == 1 and i % 2 else slice(lo, lo + n)
                o, state = linear_attention_step(
                    a[..., sl, :],
                    b[..., sl, :],
                    c[..., sl, :],
                    state,
                    key_padding_mask=None if kpm is None else kpm[..., sl],
                    enable_gqa=gqa,
                )
                outs.append(o[..., None, :] if isinstance(sl, int) else o)
                lo += n
        return torch.cat(outs, dim=-2)

    pr = None if kpm is None else kpm.repeat_interleave(g, dim=-2)

    def dense(a, b, c):
        b, c = (t.repeat_interleave(g, dim=-3) for t in (b, c))
        return _dense(name, W, mom, a, b, c, None, True, pr)[0]

    def grads(fn):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        (fn(qq, kk, vv) * w).sum().backward()
        return qq.grad, kk.grad, vv.grad

    kr, vr = (t.repeat_interleave(g, dim=-3) for t in (k, v))
    lam = _dense(name, W, mom, q, kr, vr, None, True, pr)[1]
    # as test_gradients_equal_dense_autograd
    tol = _tol(lam, v) * (1.0 + norm) * (1.0 + float(W.abs().amax()))
    for a, b in zip(grads(stepped), grads(dense), strict=True):
        assert torch.isfinite(a).all()
        assert float((a - b).abs().amax()) <= tol


# --------------------------------------------------------------------------------------
# defects found by the searches above, pinned


@pytest.mark.parametrize("single", [False, True])
def test_left_padded_prompt_gives_finite_gradients_through_the_step(single):
    # four padded tokens, then one real one (a left-padded prompt): the padded rows see no
    # key (num = den = 0, output 0), and their output's gradient must not be 1 / tiny
    # per row (four of them overflowed to inf, and inf * 0 gave a NaN value gradient)
    L = 5
    W = torch.ones(1, 1, dtype=torch.float64)
    q = torch.full((L, 1), 0.5, dtype=torch.float64, requires_grad=True)
    k = torch.full((L, 1), 0.5, dtype=torch.float64, requires_grad=True)
    v = torch.arange(float(L), dtype=torch.float64)[:, None].requires_grad_(True)
    pad = torch.tensor([True, True, True, True, False])
    state = init_decoding_state((), 1, "positive", 1, projection=W, dtype=torch.float64)
    if single:
        outs = []
        for t in range(L):
            o, state = linear_attention_step(q[t], k[t], v[t], state, key_padding_mask=pad[t])
            outs.append(o)
        out = torch.stack(outs)
    else:
        out, state = linear_attention_step(q, k, v, state, key_padding_mask=pad)
    out.sum().backward()
    # one visible key: the last row is v_4 (weight exactly 1), the others are zeros, so
    # dv = e_4 and dq = dk = 0 exactly (the weights' rounding cancels in w / w)
    torch.testing.assert_close(out.detach(), torch.tensor([[0.0], [0], [0], [0], [4]]).double())
    torch.testing.assert_close(v.grad, torch.tensor([[0.0], [0], [0], [0], [1]]).double())
    assert torch.equal(q.grad, torch.zeros_like(q)) and torch.equal(k.grad, torch.zeros_like(k))
