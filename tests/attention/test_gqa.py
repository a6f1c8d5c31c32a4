"""Grouped-query attention (``enable_gqa``): decoding from a state per key head (or per
query head for fitted maps with per-head moments) equals causal ``linear_attention(...,
enable_gqa=True)`` for every causal map, in blocks and token by token, with padding, in
float32 and float64; the state's size; its batch operations; clear errors. Also: the
redrawn projections of a converted ``FavorAttention`` keep its dtype."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import rel_error as _rel  # noqa: E402
from attention_helpers import step_in_blocks  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)
from kernelkit.features.favor import Moments  # noqa: E402

CAUSAL_MAPS = ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf", "relu", "elu"]
FITTED = ("gerf", "saderf", "aderf", "sderf")
B, HQ, HKV, L, D, E, M = 2, 6, 2, 17, 5, 4, 24
G = HQ // HKV
# float64: round-off of sums of L terms (as test_decoding); float32: its unit roundoff
# 6e-8 times the same few hundred operations per output
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _qkv(dtype=torch.float64, seed=0, L=L, hkv=HKV):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, HQ, L, D, generator=g, dtype=dtype)
    k = torch.randn(B, hkv, L, D, generator=g, dtype=dtype)
    v = torch.randn(B, hkv, L, E, generator=g, dtype=dtype)
    return q, k, v


def _moments(shared):
    """Calibration moments (other data): per query head (HQ,), or one set for all heads."""
    g = torch.Generator().manual_seed(7)
    qc, kc = (torch.randn(B, HQ, 40, D, generator=g, dtype=torch.float64) for _ in range(2))
    mom = attention_moments(qc, kc)
    dims = (0, 1) if shared else (0,)
    return Moments(*(t.mean(dims) for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)))


def _state(name, dtype=torch.float64, mom=None, **kw):
    return init_decoding_state(
        (B, HQ),
        D,
        name,
        M,
        e=E,
        random_state=0,
        moments=mom,
        dtype=dtype,
        enable_gqa=True,
        num_kv_heads=HKV,
        **kw,
    )


def _decode(q, k, v, state, blocks, pad=None, inplace=False):
    """Outputs (B, HQ, L, E) through blocks of the given lengths (1: a single token)."""
    return step_in_blocks(q, k, v, state, blocks, pad, enable_gqa=True, inplace=inplace)


def _cases():
    for name in CAUSAL_MAPS:
        for mom in ("per_head", "shared") if name in FITTED else (None,):
            yield name, mom


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("name", "mom"), list(_cases()))
def test_gqa_steps_equal_causal_linear_attention(name, mom, dtype):
    q, k, v = _qkv(dtype)
    mom = None if mom is None else _moments(mom == "shared")
    kw = {"random_state": 0, "is_causal": True, "moments": mom}
    ref = linear_attention(q, k, v, name, M, enable_gqa=True, **kw)
    # the reference itself: SDPA's GQA is the keys repeated over each group
    rep = [t.repeat_interleave(G, dim=1) for t in (k, v)]
    assert _rel(ref, linear_attention(q, *rep, name, M, **kw)) < TOL[dtype]
    st = _state(name, dtype, mom)
    per_kv = name not in FITTED or mom.mean_x.dim() == 1  # moments shared by the heads
    heads = HKV if per_kv else HQ
    assert st.kvz.shape == (B, heads, M if name not in ("relu", "elu") else D, E + 1)
    assert st.batch_shape == (B, HQ) and st.kv_batch_shape == (B, HKV)
    for blocks in ([1] * L, [6, 1, 1, 7, 2], [L]):
        out, end = _decode(q, k, v, st, blocks)
        assert out.dtype == dtype and _rel(out, ref) < TOL[dtype], blocks
        assert end.t == L and end.kvz.shape == st.kvz.shape


@pytest.mark.parametrize(("name", "mom"), [("positive", None), ("elu", None), ("sderf", True)])
@pytest.mark.parametrize("kv_mask", [False, True])
def test_gqa_key_padding_mask(name, mom, kv_mask):
    """Padding masks keys: (B, 1, L) over every head, or (B, HKV, L) per key head (the
    reference then gets it repeated over the query groups, as the keys)."""
    q, k, v = _qkv()
    mom = _moments(False) if mom else None
    g = torch.Generator().manual_seed(2)
    pad = torch.rand(B, HKV if kv_mask else 1, L, generator=g) < 0.3
    pad[..., 0] = True  # a first query without a visible key: zeros
    ref_pad = pad.repeat_interleave(G, dim=1) if kv_mask else pad
    ref = linear_attention(
        q,
        k,
        v,
        name,
        M,
        random_state=0,
        is_causal=True,
        moments=mom,
        key_padding_mask=ref_pad,
        enable_gqa=True,
    )
    for blocks in ([1] * L, [5, 1, 11]):
        out, _ = _decode(q, k, v, _state(name, mom=mom), blocks, pad=pad)
        assert _rel(out, ref) < 1e-10
    assert torch.equal(out[..., 0, :], torch.zeros_like(out[..., 0, :]))


def test_gqa_state_bytes():
    """nbytes: (e + 1) M + M floats per state head; per key head g times less than per
    query head (the same map without enable_gqa, keys repeated); fitted maps with
    per-head moments keep a state per query head."""
    for dtype, size in ((torch.float64, 8), (torch.float32, 4), (torch.bfloat16, 4)):
        gqa = _state("positive", dtype)
        full = init_decoding_state((B, HQ), D, "positive", M, e=E, random_state=0, dtype=dtype)
        assert gqa.nbytes() == size * B * HKV * M * (E + 2)
        assert full.nbytes() == size * B * HQ * M * (E + 2) == G * gqa.nbytes()
    assert _state("sderf", mom=_moments(False)).nbytes() == 8 * B * HQ * M * (E + 2)
    assert _state("sderf", mom=_moments(True)).nbytes() == 8 * B * HKV * M * (E + 2)


def test_gqa_state_inplace_index_select_to_and_grad():
    q, k, v = _qkv()
    ref = linear_attention(q, k, v, "positive", M, random_state=0, is_causal=True, enable_gqa=True)
    st = _state("positive")
    ptr = st.kvz.data_ptr()
    with torch.no_grad():
        out, end = _decode(q, k, v, st, [8] + [1] * (L - 8), inplace=True)
    assert end.kvz.data_ptr() == ptr and _rel(out, ref) < 1e-10
    # beam search: reorder the batch after 8 tokens, continue
    idx = torch.tensor([1, 1])
    _, st8 = _decode(q[..., :8, :], k[..., :8, :], v[..., :8, :], _state("positive"), [8])
    beams = st8.index_select(0, idx)
    assert beams.kvz.shape == st8.kvz.shape and beams.group == G
    out9, _ = linear_attention_step(
        q[..., 8, :], k[..., 8, :], v[..., 8, :], beams, enable_gqa=True
    )
    qb, kb, vb = (torch.cat([t[idx, :, :8], t[:, :, 8:9]], dim=2) for t in (q, k, v))
    refb = linear_attention(
        qb, kb, vb, "positive", M, random_state=0, is_causal=True, enable_gqa=True
    )
    assert _rel(out9, refb[..., -1, :]) < 1e-10
    with pytest.raises(ValueError, match="head dim of a GQA state"):
        st8.index_select(1, torch.tensor([0, 1]))
    # .to(float32) keeps the grouping and continues the sequence
    st32 = copy.deepcopy(st8).to(dtype=torch.float32)
    assert st32.group == G and st32.kv_heads == HKV and st32.kvz.dtype == torch.float32
    o32, _ = linear_attention_step(
        *(t[..., 8, :].float() for t in (q, k, v)), st32, enable_gqa=True
    )
    assert _rel(o32.double(), ref[..., 8, :]) < 1e-5
    # gradients through the grouped steps equal those of the causal pass
    qg = q.clone().requires_grad_(True)
    kg = k.clone().requires_grad_(True)
    out, _ = _decode(qg, kg, v, _state("positive"), [6, 1, 10])
    gq, gk = torch.autograd.grad(out.square().sum(), (qg, kg))
    ref = linear_attention(
        qg, kg, v, "positive", M, random_state=0, is_causal=True, enable_gqa=True
    )
    rq, rk = torch.autograd.grad(ref.square().sum(), (qg, kg))
    assert _rel(gq, rq) < 1e-10 and _rel(gk, rk) < 1e-10


def test_gqa_bad_head_counts():
    q, k, v = _qkv()
    q1, k1, v1 = q[..., 0, :], k[..., 0, :], v[..., 0, :]
    with pytest.raises(ValueError, match="num_kv_heads=4 must divide"):
        init_decoding_state((B, HQ), D, enable_gqa=True, num_kv_heads=4)
    with pytest.raises(ValueError, match="needs num_kv_heads"):
        init_decoding_state((B, HQ), D, enable_gqa=True)
    with pytest.raises(ValueError, match="num_kv_heads"):
        init_decoding_state((B, HQ), D, enable_gqa=True, num_kv_heads=0)
    with pytest.raises(ValueError, match="needs enable_gqa=True"):
        init_decoding_state((B, HQ), D, num_kv_heads=2)
    with pytest.raises(ValueError, match="batch_shape"):
        init_decoding_state((), D, enable_gqa=True, num_kv_heads=1)
    with pytest.raises(TypeError, match="enable_gqa"):
        init_decoding_state((B, HQ), D, enable_gqa=1, num_kv_heads=2)
    st = _state("positive")
    with pytest.raises(ValueError, match="enable_gqa=False but the state"):
        linear_attention_step(q1, k1, v1, st)
    plain = init_decoding_state((B, HQ), D, "positive", M, e=E, dtype=torch.float64)
    with pytest.raises(ValueError, match="enable_gqa=True but the state"):
        linear_attention_step(q1, q1, q1[..., :E], plain, enable_gqa=True)
    with pytest.raises(ValueError, match="k_t must have the leading dims of q_t with 2 heads"):
        linear_attention_step(q1, q1, v1, st, enable_gqa=True)
    with pytest.raises(ValueError, match="v_t must have the leading dims"):
        linear_attention_step(q1, k1, q1[..., :E], st, enable_gqa=True)
    with pytest.raises(ValueError, match="key_padding_mask"):
        linear_attention_step(
            q1, k1, v1, st, key_padding_mask=torch.zeros(B, HQ, dtype=torch.bool), enable_gqa=True
        )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("feature_map", ["positive", "hybrid_angular"])
def test_redrawn_projections_keep_the_module_dtype(dtype, feature_map):
    """After .to(dtype) every redraw (explicit, or by the training forward) gives
    projection buffers in that dtype on the module's device, rounded from the float64
    draw; the module then computes and returns that dtype."""
    m = FavorAttention(
        8, 2, feature_map=feature_map, n_features=16, redraw_interval=1, random_state=0
    ).to(dtype)
    twin = copy.deepcopy(m)
    m.redraw_features()
    for buf in ("projection", "sign_projection"):
        t = getattr(m, buf)
        assert t.dtype == dtype and t.device == m.out_proj.weight.device, buf
    # the same draw as a float64 module's, rounded once to dtype
    ref = FavorAttention(
        8, 2, feature_map=feature_map, n_features=16, redraw_interval=1, random_state=0
    ).double()
    ref.redraw_features()
    assert torch.equal(m.projection, ref.projection.to(dtype))
    assert not torch.equal(m.projection, twin.projection)  # a new draw
    x = torch.randn(1, 5, 8).to(dtype)
    for _ in range(2):  # training forwards, each redrawing
        out, _ = twin(x, x, x)
    assert twin.projection.dtype == dtype and out.dtype == dtype
    # a module built in that dtype starts with its projections in it too
    built = FavorAttention(8, 2, feature_map=feature_map, n_features=16, dtype=dtype)
    assert built.projection.dtype == dtype and built.sign_projection.dtype == dtype


# ------------------------------------------------ linear_attention: once per key head
BIDIRECTIONAL = ["positive", "hyperbolic", "relu", "elu", "trig", "hybrid_angular", *FITTED]


def _repeat(k, v, g=G):
    return k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)


@pytest.mark.parametrize("name", BIDIRECTIONAL)
def test_bidirectional_gqa_runs_once_per_key_head(name, monkeypatch):
    """Bidirectional, key features shared by a group (unfitted maps; fitted maps with
    moments shared by the heads), with and without a (B, 1, S) padding mask: outputs and
    gradients equal those of the repeated keys to round-off, and no key is repeated."""
    from kernelkit.attention import functional

    q, k, v = _qkv(L=L)
    k, v = k[..., :11, :], v[..., :11, :]  # S = 11 != L
    mom = _moments(True) if name in FITTED else None
    pad = torch.rand(B, 1, 11, generator=torch.Generator().manual_seed(3)) < 0.3
    pad[1] = True  # batch entry 1: no visible key, zeros
    kw = {"random_state": 0, "moments": mom}
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    ref = {
        m: linear_attention(qg, *_repeat(kg, vg), name, M, key_padding_mask=m, **kw)
        for m in (None, pad)
    }
    grads = {m: torch.autograd.grad(ref[m].square().sum(), (qg, kg, vg)) for m in ref}

    def no_repeat(*args):
        raise AssertionError("keys repeated")

    monkeypatch.setattr(functional, "_expand_gqa", no_repeat)
    for m in (None, pad):
        out = linear_attention(qg, kg, vg, name, M, key_padding_mask=m, enable_gqa=True, **kw)
        assert out.shape == (B, HQ, L, E) and _rel(out.detach(), ref[m].detach()) < 1e-12
        got = torch.autograd.grad(out.square().sum(), (qg, kg, vg))
        assert all(_rel(a, b) < 1e-12 for a, b in zip(got, grads[m], strict=True))
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    # NumPy in, NumPy out
    out_np = linear_attention(q.numpy(), k.numpy(), v.numpy(), name, M, enable_gqa=True, **kw)
    assert _rel(torch.as_tensor(out_np), ref[None].detach()) < 1e-12


@pytest.mark.parametrize(
    "case", ["causal", "per_head_moments", "fitted_per_instance", "per_head_mask", "attn_mask"]
)
def test_gqa_that_needs_the_repeat_still_equals_it(case):
    """Where the query heads of a group differ on the key side (per-head moments, a
    per-instance fit, a per-head mask) or the mask is SDPA's, and in causal mode, the
    keys are repeated: still equal to explicit repetition."""
    q, k, v = _qkv()
    name = {"per_head_moments": "sderf", "fitted_per_instance": "gerf"}.get(case, "positive")
    kw = {"random_state": 0, "is_causal": case == "causal"}
    if case == "per_head_moments":
        kw["moments"] = _moments(False)
    if case == "per_head_mask":
        pad = torch.rand(B, HKV, L, generator=torch.Generator().manual_seed(4)) < 0.3
        kw["key_padding_mask"] = pad.repeat_interleave(G, dim=1)
    if case == "attn_mask":
        kw["attn_mask"] = torch.ones(L, L, dtype=torch.bool).tril()
    ref = linear_attention(q, *_repeat(k, v), name, M, **kw)
    out = linear_attention(q, k, v, name, M, enable_gqa=True, **kw)
    assert _rel(out, ref) < 1e-12


def test_gqa_bad_heads_in_linear_attention():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="Hq=6, Hk=4, Hv=4"):
        linear_attention(q, *_repeat(k, v, 2), enable_gqa=True)
    with pytest.raises(ValueError, match="Hk=2, Hv=3"):
        linear_attention(q, k, torch.cat([v, v[:, :1]], 1), enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa needs"):
        linear_attention(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True)
