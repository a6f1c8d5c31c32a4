"""Recurrent decoding: stepping equals causal linear_attention for every causal map, in
blocks (prefill) and token by token, at large norms, in the module, with constant
memory, in float32 / bfloat16, and with clear errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import rel_error as _rel  # noqa: E402
from attention_helpers import step_in_blocks  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    LinearAttentionState,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

CAUSAL_MAPS = ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf", "relu", "elu"]
B, H, L, D, E, M = 2, 3, 21, 6, 5, 24


def _qkv(scale=1.0, dtype=torch.float64, seed=0, L=L):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=g, dtype=dtype) * scale
    k = torch.randn(B, H, L, D, generator=g, dtype=dtype) * scale
    v = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    return q, k, v


def _moments():
    qc, kc, _ = _qkv(seed=7, L=40)  # calibration batch: other data than the decoded one
    return attention_moments(qc, kc)


def _state(name, dtype=torch.float64, mom=None, **kw):
    return init_decoding_state(
        (B, H), D, name, M, e=E, random_state=0, moments=mom, dtype=dtype, **kw
    )


def _step_all(q, k, v, state, blocks=None):
    """Outputs (B, H, L, E) stepping one token at a time or through the given blocks."""
    if blocks is None:
        return step_in_blocks(q, k, v, state, [1] * q.shape[-2])
    return step_in_blocks(q, k, v, state, blocks, single_tokens=False)


@pytest.mark.parametrize("name", CAUSAL_MAPS)
def test_steps_and_prefill_equal_causal_linear_attention(name):
    q, k, v = _qkv(scale=1.5)
    mom = _moments()
    ref = linear_attention(q, k, v, name, M, random_state=0, is_causal=True, moments=mom)
    out, state = _step_all(q, k, v, _state(name, mom=mom))
    assert _rel(out, ref) < 1e-10 and state.t == L
    # prefill of a block, then single steps, then another block
    out2, _ = _step_all(q, k, v, _state(name, mom=mom), blocks=[9, 1, 1, 7, 1, 2])
    assert _rel(out2, ref) < 1e-10


@pytest.mark.parametrize("name", ["positive", "sderf", "elu"])
@pytest.mark.parametrize("order", ["growing", "shrinking"])
def test_large_norms_do_not_overflow(name, order, monkeypatch):
    """Huge key norms in float32 and float64: finite and equal to the stabilised causal
    pass. Shrinking norms make the running key maximum jump by hundreds inside a block,
    beyond the one-pivot bound, so the block falls back to token steps."""
    from kernelkit.attention import decoding

    calls = []
    token = decoding._token
    monkeypatch.setattr(decoding, "_token", lambda *a: calls.append(1) or token(*a))
    mom = _moments()
    for dtype, tol in ((torch.float32, 1e-4), (torch.float64, 1e-10)):
        q, k, v = _qkv(scale=6.0, dtype=dtype, seed=3)
        norms = torch.linspace(0.5, 4.0, L, dtype=dtype)
        k = k * (norms if order == "growing" else norms.flip(0))[:, None]
        ref = linear_attention(q, k, v, name, M, random_state=0, is_causal=True, moments=mom)
        assert torch.isfinite(ref).all()
        st = _state(name, dtype, mom)
        for blocks in (None, [3, L - 3]):
            calls.clear()
            out, _ = _step_all(q, k, v, st, blocks)
            assert torch.isfinite(out).all()
            assert _rel(out, ref) < tol, (dtype, blocks)
            if blocks and order == "shrinking" and name != "elu":
                assert len(calls) >= L - 3  # the second block ran token by token


def test_key_padding_mask_equals_causal_padding():
    q, k, v = _qkv()
    pad = torch.rand(B, H, L, generator=torch.Generator().manual_seed(2)) < 0.3
    pad[..., 0] = True  # a first query with no visible key: zeros, as linear_attention
    # real keys of huge norm (log features ~ -1e3), padded keys 0 (log features ~ 0): a
    # padded key in the running maximum would underflow every real key to zero
    k = torch.where(pad[..., None], 0.0, 30.0 * k)
    ref = linear_attention(
        q, k, v, "positive", M, random_state=0, is_causal=True, key_padding_mask=pad
    )
    st = _state("positive")
    outs = []
    for t in range(L):
        o, st = linear_attention_step(
            q[..., t, :], k[..., t, :], v[..., t, :], st, key_padding_mask=pad[..., t]
        )
        outs.append(o)
    assert _rel(torch.stack(outs, -2), ref) < 1e-10
    out, _ = linear_attention_step(q, k, v, _state("positive"), key_padding_mask=pad)
    assert _rel(out, ref) < 1e-10
    assert torch.equal(out[..., 0, :], torch.zeros_like(out[..., 0, :]))


def test_state_memory_is_constant_and_input_state_unchanged():
    q, k, v = _qkv(L=200)
    st0 = _state("sderf", mom=_moments())
    shapes = [(t.shape, t.numel()) for t in (st0.kv, st0.z, st0.c)]
    st = st0
    for t in range(200):
        _, st = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], st)
    assert [(t.shape, t.numel()) for t in (st.kv, st.z, st.c)] == shapes
    assert st.nbytes() == st0.nbytes() == 8 * B * H * M * (E + 2)
    assert st.t == 200 and st0.t == 0
    assert torch.equal(st0.z, torch.zeros_like(st0.z))  # functional: the old state is kept


def test_inplace_steps_reuse_the_state_tensors():
    q, k, v = _qkv()
    ref, _ = _step_all(q, k, v, _state("sderf", mom=_moments()))
    st = _state("sderf", mom=_moments())
    ptrs = (st.kvz.data_ptr(), st.c.data_ptr())
    outs = []
    with torch.no_grad():
        o, st = linear_attention_step(q[..., :8, :], k[..., :8, :], v[..., :8, :], st, inplace=True)
        outs.append(o)
        for t in range(8, L):
            o, st = linear_attention_step(
                q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=True
            )
            outs.append(o[..., None, :])
    assert (st.kvz.data_ptr(), st.c.data_ptr()) == ptrs
    assert _rel(torch.cat(outs, -2), ref) < 1e-10
    with pytest.raises(ValueError, match="no_grad"):
        linear_attention_step(
            q[..., 0, :].requires_grad_(True), k[..., 0, :], v[..., 0, :], st, inplace=True
        )
    m = FavorAttention(12, 2, n_features=16, random_state=0).double().eval()
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    with torch.no_grad():
        st = m.init_state(3)
        out, st2 = m.step(x, x, x, st, inplace=True)
        assert st2.kvz is st.kvz
        torch.testing.assert_close(out, m(x, x, x, is_causal=True)[0], rtol=1e-10, atol=1e-12)


def test_module_step_equals_causal_forward():
    torch.manual_seed(0)
    x = torch.randn(3, 14, 12, dtype=torch.float64)
    for fm in ("sderf", "positive", "relu"):
        m = FavorAttention(12, 2, feature_map=fm, n_features=16, random_state=0).double()
        if fm == "sderf":  # no statistics yet: FAVOR+ fallback, as the causal forward
            m.eval()
            with torch.no_grad():
                ref, _ = m(x, x, x, is_causal=True)
                out = torch.stack([o for o, _ in _module_steps(m, x)], dim=1)  # one token at a time
            assert _rel(out, ref) < 1e-10
            m.train()
            m(x, x, x, is_causal=True)  # running statistics
        m.eval()
        with torch.no_grad():
            ref, _ = m(x, x, x, is_causal=True)
            out = torch.stack([o for o, _ in _module_steps(m, x)], dim=1)
            st = m.init_state(3)
            a, st = m.step(x[:, :6], x[:, :6], x[:, :6], st)  # prefill
            b, st = m.step(x[:, 6], x[:, 6], x[:, 6], st)
            c, st = m.step(x[:, 7:], x[:, 7:], x[:, 7:], st)
        assert _rel(out, ref) < 1e-10, fm
        assert _rel(torch.cat([a, b[:, None], c], 1), ref) < 1e-10, fm
    # sequence-first layout for blocks
    m = FavorAttention(12, 2, n_features=16, batch_first=False, random_state=0).double().eval()
    xs = x.transpose(0, 1)  # (L, N, E)
    with torch.no_grad():
        ref, _ = m(xs, xs, xs, is_causal=True)
        out, _ = m.step(xs, xs, xs, m.init_state(3))
    assert _rel(out, ref) < 1e-10


def _module_steps(m, x):
    st = m.init_state(x.shape[0])
    for t in range(x.shape[1]):
        o, st = m.step(x[:, t], x[:, t], x[:, t], st)
        yield o, st


def test_float32_bfloat16_grad_and_no_grad():
    q, k, v = _qkv(dtype=torch.float32)
    ref = linear_attention(q, k, v, "positive", M, random_state=0, is_causal=True)
    st = _state("positive", torch.float32)
    with torch.no_grad():
        out, _ = _step_all(q, k, v, st)
    assert out.dtype == torch.float32 and _rel(out, ref) < 1e-5
    qb, kb, vb = (t.bfloat16() for t in (q, k, v))
    refb = linear_attention(qb, kb, vb, "positive", M, random_state=0, is_causal=True)
    stb = _state("positive", torch.bfloat16)
    assert stb.dtype == torch.float32  # computed in float32
    outb, _ = _step_all(qb, kb, vb, stb, blocks=[10, 1, 10])
    assert outb.dtype == torch.bfloat16
    assert _rel(outb.float(), refb.float()) < 1e-2
    # gradients flow through the steps and match those of the causal pass
    q, k, v = _qkv()
    q.requires_grad_(True)
    out, _ = _step_all(q, k, v, _state("positive"), blocks=[5, 1, 15])
    (g,) = torch.autograd.grad(out.square().sum(), q)
    q2 = q.detach().requires_grad_(True)
    ref = linear_attention(q2, k, v, "positive", M, random_state=0, is_causal=True)
    (g2,) = torch.autograd.grad(ref.square().sum(), q2)
    assert _rel(g, g2) < 1e-10


def test_projection_argument_and_module_state_dtype():
    q, k, v = _qkv()
    from kernelkit.attention import draw_features

    W = torch.as_tensor(draw_features("hyperbolic", M, D, 5)["W"])
    ref = linear_attention(q, k, v, "hyperbolic", M, projection=W, is_causal=True)
    out, _ = _step_all(q, k, v, _state("hyperbolic", projection={"W": W}))
    assert _rel(out, ref) < 1e-10
    m = FavorAttention(12, 2, feature_map="positive", n_features=16, random_state=0)
    st = m.init_state(4)
    assert isinstance(st, LinearAttentionState)
    assert st.batch_shape == (4, 2) and st.dtype == torch.float32 and st.kv.shape == (4, 2, 16, 6)


def test_bad_input_errors():
    q, k, v = _qkv()
    st = _state("positive")
    q1, k1, v1 = q[..., 0, :], k[..., 0, :], v[..., 0, :]
    with pytest.raises(ValueError, match="bidirectional only"):
        _state("trig")
    with pytest.raises(ValueError, match="hybrid_angular"):
        _state("hybrid_angular")
    with pytest.raises(ValueError, match="moments="):
        _state("sderf")
    with pytest.raises(ValueError, match="feature_map"):
        _state("nope")
    with pytest.raises(ValueError, match="projection"):
        _state("positive", projection=torch.zeros(4, D + 1))
    with pytest.raises(ValueError, match="'W' entry"):
        _state("positive", projection={"T": torch.zeros(4, D)})
    with pytest.raises(ValueError, match="n_features"):
        init_decoding_state((B, H), D, "positive", 0)
    with pytest.raises(ValueError, match="q_t must have last dim"):
        linear_attention_step(q1[..., :-1], k1, v1, st)
    with pytest.raises(ValueError, match="v_t must have last dim"):
        linear_attention_step(q1, k1, v1[..., :-1], st)
    with pytest.raises(ValueError, match="batch_shape"):
        linear_attention_step(q1[:1], k1[:1], v1[:1], st)
    with pytest.raises(ValueError, match="k_t must have the leading dims"):
        linear_attention_step(q[..., :3, :], k[..., :2, :], v[..., :3, :], st)
    with pytest.raises(TypeError, match="state"):
        linear_attention_step(q1, k1, v1, None)
    with pytest.raises(TypeError, match="q_t"):
        linear_attention_step(q1.numpy(), k1, v1, st)
    with pytest.raises(TypeError, match="state computes in"):
        linear_attention_step(q1.float(), k1.float(), v1.float(), st)
    with pytest.raises(TypeError, match="share one dtype"):
        linear_attention_step(q1, k1.float(), v1, st)
    bad = k1.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="k_t contains NaN"):
        linear_attention_step(q1, bad, v1, st)
    with pytest.raises(ValueError, match="key_padding_mask"):
        linear_attention_step(q1, k1, v1, st, key_padding_mask=torch.zeros(B, dtype=torch.bool))
    m = FavorAttention(12, 2, n_features=16, random_state=0)
    x = torch.randn(3, 12)
    with pytest.raises(ValueError, match="module needs"):
        m.step(x, x, x, _state("positive"))
    with pytest.raises(ValueError, match="query_t"):
        m.step(x[None, None], x, x, m.init_state(3))
    with pytest.raises(ValueError, match="module expects"):
        m.step(x[:, :8], x[:, :8], x[:, :8], m.init_state(3))


@pytest.mark.parametrize("T", [6, 80])  # a block by tokens and chunks; one through the kernel
@pytest.mark.parametrize("name", ["positive", "saderf"])
def test_a_query_whose_squared_norm_overflows_still_decodes(name, T):
    # a finite float32 query of norm ~1e20 (its squared norm overflows): the step leaves
    # out the queries' row term as the causal kernel does, so its output is finite and
    # equals the causal pass (before, NaN with no error); float32 rounding of the features
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, T, 8, generator=g) for _ in range(3))
    q[0, 0, 3] *= 1e20
    calib = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(2))  # FAVOR#: other data
    extra = {"moments": attention_moments(*calib)} if name == "saderf" else {}
    ref = linear_attention(q, k, v, name, 16, is_causal=True, random_state=0, **extra)
    st = init_decoding_state((1, 2), 8, name, 16, random_state=0, **extra)
    tokens = []
    for t in range(4):
        o, st = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], st)
        tokens.append(o)
    rest, _ = linear_attention_step(q[..., 4:, :], k[..., 4:, :], v[..., 4:, :], st)
    out = torch.cat([torch.stack(tokens, -2), rest], -2)
    assert torch.isfinite(out).all()
    assert _rel(out, ref) < 1e-5


def test_a_key_whose_features_overflow_is_an_error_as_in_linear_attention():
    # a finite key of norm ~1e20: linear_attention raises; so does the step (token and
    # block), where before the key was silently left out; check_finite=False skips it
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 70, 8, generator=g) for _ in range(3))
    k[0, 1, 2] *= 1e20
    with pytest.raises(ValueError, match="squared norm of a key"):
        linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    st = init_decoding_state((1, 2), 8, "positive", 16, random_state=0)
    for sl in (slice(2, 3), slice(0, 6), slice(0, 70)):
        args = (q[..., sl, :], k[..., sl, :], v[..., sl, :])
        if sl.stop - sl.start == 1:
            args = tuple(a[..., 0, :] for a in args)
        with pytest.raises(ValueError, match=r"squared norm of a key.*k_t"):
            linear_attention_step(*args, st)
    out, _ = linear_attention_step(q[..., 2, :], k[..., 2, :], v[..., 2, :], st, check_finite=False)
    assert out.shape == (1, 2, 8)
