"""Grouped-query attention as a new user tries it from the guide (docs/guide/attention.md):
per-key-head padding in ``linear_attention`` as in decoding, moments shared by the query
heads but not by the keys, an empty batch prefilled as a block, ``state_dict`` across
``num_kv_heads``, and the messages of refused head counts. The references are the same
call with the keys (and the padding) repeated over each group, as SDPA's ``enable_gqa``
does, equal to round-off in float64; and SDPA itself for the estimate."""

from __future__ import annotations

import math

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

B, HQ, HKV, L, S, D, E, M = 2, 6, 2, 9, 7, 5, 3, 24
G = HQ // HKV
# float64 sums of a few hundred terms of size O(1): round-off ~1e-15, so 1e-12 leaves a
# factor 1000 and still catches any difference in the features or the padding
TOL = 1e-12


def _qkv(S=S, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = 0.5 * torch.randn(B, HQ, L, D, generator=g, dtype=torch.float64)
    k = 0.5 * torch.randn(B, HKV, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, HKV, S, E, generator=g, dtype=torch.float64)
    return q, k, v


def _rep(t):
    """Key / value heads (dim 1) repeated over their groups, as SDPA's enable_gqa."""
    return t.repeat_interleave(G, dim=1)


def _steps(q, k, v, state, blocks, pad=None):
    # every block, length 1 too, as a (..., n, d) block
    return step_in_blocks(q, k, v, state, blocks, pad, single_tokens=False, enable_gqa=True)


def _gqa_state(name, dtype, moments=None, enable_gqa=True):
    """Empty grouped decoding state (B, HQ) with HKV key heads, seed 0."""
    return init_decoding_state(
        (B, HQ),
        D,
        name,
        M,
        e=E,
        random_state=0,
        moments=moments,
        dtype=dtype,
        enable_gqa=enable_gqa,
        num_kv_heads=HKV,
    )


# ------------------------------------------------------------- padding per key head
@pytest.mark.parametrize(
    ("name", "causal"), [("positive", False), ("elu", False), ("positive", True)]
)
def test_padding_mask_per_key_head(name, causal, monkeypatch):
    """A key_padding_mask masks keys, so with enable_gqa it may have the key heads
    (B, Hkv, S), as linear_attention_step requires: equal to the mask repeated with the
    keys, outputs and gradients to q, k, v; bidirectional, still without repeating the
    keys; and the decoding steps with the same mask equal the causal pass."""
    from kernelkit.attention import functional

    q, k, v = (t.requires_grad_(True) for t in _qkv(S=L))
    pad = torch.rand(B, HKV, L, generator=torch.Generator().manual_seed(1)) < 0.3
    pad[0, 1] = True  # key head 1 of batch 0 sees nothing: zeros for its query heads
    kw = {"random_state": 0, "is_causal": causal}
    ref = linear_attention(q, _rep(k), _rep(v), name, M, key_padding_mask=_rep(pad), **kw)
    grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    if not causal:

        def no_repeat(*args):
            raise AssertionError("keys repeated")

        monkeypatch.setattr(functional, "_expand_gqa", no_repeat)
    out = linear_attention(q, k, v, name, M, key_padding_mask=pad, enable_gqa=True, **kw)
    assert _rel(out.detach(), ref.detach()) < TOL
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    assert all(_rel(a, b) < TOL for a, b in zip(got, grads, strict=True))
    out = out.detach()
    assert torch.equal(out[0, G : 2 * G], torch.zeros_like(out[0, G : 2 * G]))
    if causal:
        st = _gqa_state(name, q.dtype)
        steps, _ = _steps(q, k, v, st, [4, 1, 4], pad=pad)
        assert _rel(steps.detach(), out) < 1e-10  # as test_gqa: sums in another order


def test_padding_mask_with_neither_head_count_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"key_padding_mask.*\(2, 4, 7\)"):
        linear_attention(
            q, k, v, key_padding_mask=torch.zeros(B, 4, S, dtype=torch.bool), enable_gqa=True
        )


# ------------------------------------------- moments shared by the queries, not the keys
def _mixed_moments():
    """Query moments shared by every head (d,), key moments per query head (B, Hq, d):
    the key features differ between the query heads of a group."""
    g = torch.Generator().manual_seed(5)
    qc, kc = (torch.randn(B, HQ, 30, D, generator=g, dtype=torch.float64) for _ in range(2))
    kc = kc * torch.linspace(0.3, 1.5, HQ, dtype=torch.float64)[:, None, None]  # heads differ
    mom = attention_moments(qc, kc)
    return Moments(mom.mean_x.mean((0, 1)), mom.second_x.mean((0, 1)), mom.mean_y, mom.second_y)


@pytest.mark.parametrize("causal", [False, True])
def test_moments_per_head_on_the_key_side_only(causal):
    """Whether the key features are shared by a group depends on every moment, not only
    the queries' means: equal to the repeated keys, and decoding keeps a state per query
    head (it crashed with a RuntimeError in both)."""
    q, k, v = _qkv(S=L)
    mom = _mixed_moments()
    kw = {"random_state": 0, "is_causal": causal, "moments": mom}
    ref = linear_attention(q, _rep(k), _rep(v), "sderf", M, **kw)
    out = linear_attention(q, k, v, "sderf", M, enable_gqa=True, **kw)
    assert _rel(out, ref) < TOL
    if causal:
        st = _gqa_state("sderf", q.dtype, moments=mom)
        assert st.kvz.shape == (B, HQ, M, E + 1) and st.group == 1
        steps, _ = _steps(q, k, v, st, [4, 1, 4])
        assert _rel(steps, ref) < 1e-10


# ---------------------------------------------------------------- an empty batch
@pytest.mark.parametrize("gqa", [True, False])
def test_empty_batch_prefills_as_a_block(gqa):
    """Batch 0 (as SDPA and linear_attention allow): a prefilled block gives an empty
    output and advances the state, then single tokens do too (the block raised a
    RuntimeError from amax on an empty tensor)."""
    hk = HKV if gqa else HQ
    st = init_decoding_state(
        (0, HQ), D, "positive", M, e=E, enable_gqa=gqa, num_kv_heads=hk if gqa else None
    )
    q, k, v = torch.randn(0, HQ, 4, D), torch.randn(0, hk, 4, D), torch.randn(0, hk, 4, E)
    out, st = linear_attention_step(q, k, v, st, enable_gqa=gqa)
    assert out.shape == (0, HQ, 4, E) and st.t == 4
    ref = linear_attention(q, k, v, "positive", M, is_causal=True, enable_gqa=gqa)
    assert ref.shape == out.shape
    out1, st = linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], st, enable_gqa=gqa)
    assert out1.shape == (0, HQ, E) and st.t == 5


# ------------------------------------------------------- messages naming the argument
def test_different_head_counts_without_enable_gqa_name_it():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="enable_gqa=True"):
        linear_attention(q, k, v)


def _fav(hkv, **kw):
    return FavorAttention(
        16, 4, num_kv_heads=hkv, feature_map="positive", n_features=8, random_state=0, **kw
    )


@pytest.mark.parametrize(("src", "dst"), [(2, 4), (2, None), (None, 2), (1, 2), (2, 1)])
def test_state_dict_across_num_kv_heads_names_them(src, dst):
    """A checkpoint of another key / value head count cannot load (the key / value
    projections differ in size): the error says which counts, not only torch's size
    mismatch of in_proj_bias; also with strict=False."""
    sd = _fav(src).state_dict()
    have = 4 if src is None else src
    want = 4 if dst is None else dst
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=f"num_kv_heads={have}.*num_kv_heads={want}"):
            _fav(dst).load_state_dict(sd, strict=strict)


def test_state_dict_of_the_same_head_count_loads_and_reproduces():
    a, b = _fav(2).eval(), _fav(2, bias=True).eval()
    b.redraw_features()  # other projections: outputs differ until loaded
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert not torch.allclose(a(x, x, x)[0], b(x, x, x)[0])
        b.load_state_dict(a.state_dict())
        assert torch.equal(a(x, x, x)[0], b(x, x, x)[0])


# ------------------------------------------------------------------- SDPA as the peer
@pytest.mark.parametrize(
    ("name", "causal"), [("positive", False), ("sderf", False), ("positive", True), ("sderf", True)]
)
def test_estimate_converges_to_sdpa_with_enable_gqa(name, causal):
    """torch's SDPA with enable_gqa=True is the exact peer (query head h reads key head
    h // g), here with S != L (causal: top-left aligned), e != d and padding per key head
    (SDPA: the same blocked keys as a bool attn_mask (B, Hq, 1, S)). A Monte Carlo
    estimate's error falls as M^{-1/2}: from M = 64 to 4096 by 8 on average over seeds
    (measured 5.6 to 6.0, fixed seeds); a wrong head pairing leaves an error floor
    instead (measured ratio 1.0, error 0.76 to 0.85). Allowed: a factor 4, and the error
    at M = 4096 below 0.05 (measured 0.008 to 0.019)."""
    F = torch.nn.functional
    q, k, v = _qkv(S=S)
    pad = torch.rand(B, HKV, S, generator=torch.Generator().manual_seed(3)) < 0.3
    pad[..., 0] = False  # every query keeps a key (SDPA gives NaN rows otherwise)
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=~_rep(pad)[:, :, None, :], is_causal=False, enable_gqa=True
    )
    if causal:
        allowed = torch.ones(L, S, dtype=torch.bool).tril()  # SDPA's is_causal, L != S
        ref = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed & ~_rep(pad)[:, :, None, :], enable_gqa=True
        )
    mom = None
    if name == "sderf":  # calibration moments from other data, shared by the heads
        g = torch.Generator().manual_seed(9)
        qc, kc = (0.5 * torch.randn(4, HQ, 16, D, generator=g, dtype=torch.float64) for _ in "qk")
        mom = attention_moments(qc, kc)
        mom = Moments(
            *(t.mean((0, 1)) for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y))
        )
    err = {}
    for m in (64, 4096):
        outs = [
            linear_attention(
                q,
                k,
                v,
                name,
                m,
                key_padding_mask=pad,
                is_causal=causal,
                moments=mom,
                random_state=seed,
                enable_gqa=True,
            )
            for seed in range(4)
        ]
        err[m] = sum(_rel(o, ref) for o in outs) / len(outs)
    assert err[4096] < 0.05 and err[64] / err[4096] > 4, err


# --------------------------------------------------------------- a Llama-like block
class _RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * self.weight


class _Block(torch.nn.Module):
    """Pre-norm decoder block as in Llama: RMSNorm, GQA attention without biases, SiLU MLP."""

    def __init__(self, dim, heads, kv_heads, feature_map):
        super().__init__()
        self.norm1, self.norm2 = _RMSNorm(dim), _RMSNorm(dim)
        self.attn = FavorAttention(
            dim,
            heads,
            num_kv_heads=kv_heads,
            bias=False,
            feature_map=feature_map,
            n_features=32,
            redraw_interval=4,
            random_state=0,
        )
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim, bias=False),
            torch.nn.SiLU(),
            torch.nn.Linear(2 * dim, dim, bias=False),
        )

    def forward(self, x, pad=None):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, key_padding_mask=pad, is_causal=True)[0]
        return x + self.mlp(self.norm2(x))


@pytest.mark.parametrize("feature_map", ["positive", "sderf"])
def test_llama_like_block_trains_with_left_padding(feature_map):
    """A drop-in in a small decoder trained for 12 Adam steps on a fixed left-padded batch:
    no NaN anywhere, gradients reach the grouped key / value projections, the loss on
    the real tokens falls below 3/4 of its start (measured: 0.53 to 0.56), the fitted map
    tracks its statistics; then, in eval mode, decoding token by token equals the causal
    forward (float32 round-off)."""
    torch.manual_seed(0)
    V, dim = 11, 16
    emb, block, head = (
        torch.nn.Embedding(V, dim),
        _Block(dim, 4, 2, feature_map),
        torch.nn.Linear(dim, V),
    )
    params = [*emb.parameters(), *block.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-2)
    tokens = torch.randint(0, V, (4, 13))
    pad = torch.zeros(4, 12, dtype=torch.bool)
    pad[0, :3] = pad[1, :5] = True  # left-padded prompts
    losses = []
    for _ in range(12):
        logits = head(block(emb(tokens[:, :-1]), pad))  # (4, 12, V)
        loss = torch.nn.functional.cross_entropy(logits[~pad], tokens[:, 1:][~pad])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(p).all() for p in params) and all(map(math.isfinite, losses))
    assert losses[-1] < 0.75 * losses[0], losses
    for w in (block.attn.k_proj_weight, block.attn.v_proj_weight):
        assert w.shape == (8, dim) and torch.isfinite(w.grad).all() and w.grad.norm() > 0
    tracked = int(block.attn.num_batches_tracked)
    assert tracked == (12 if feature_map == "sderf" else 0)
    block.eval()
    attn, x = block.attn, block.norm1(emb(tokens[:, :-1])).detach()
    with torch.no_grad():
        full, _ = attn(x, x, x, key_padding_mask=pad, is_causal=True)
        state, outs = attn.init_state(4), []
        for t in range(12):
            y, state = attn.step(x[:, t], x[:, t], x[:, t], state, key_padding_mask=pad[:, t])
            outs.append(y)
    keep = ~pad
    assert _rel(torch.stack(outs, 1)[keep], full[keep]) < 1e-5


def test_numpy_bool_enable_gqa_as_in_linear_attention():
    """linear_attention takes enable_gqa=np.True_ (as is_causal); so do the decoding
    functions (they raised a TypeError), with the same outputs."""
    np = pytest.importorskip("numpy")
    q, k, v = _qkv(S=L)
    st = _gqa_state("positive", q.dtype, enable_gqa=np.True_)
    out, _ = linear_attention_step(q, k, v, st, enable_gqa=np.True_)
    ref = linear_attention(
        q, k, v, "positive", M, random_state=0, is_causal=True, enable_gqa=np.True_
    )
    assert _rel(out, ref) < 1e-10
    with pytest.raises(TypeError, match="enable_gqa must be a bool"):
        init_decoding_state((B, HQ), D, enable_gqa=np.int64(1), num_kv_heads=HKV)


# ------------------------------------------------- calibration moments of GQA inputs
def test_attention_moments_of_grouped_keys():
    """Causal FAVOR# needs moments of other data (the guide's calibration set); with GQA
    those queries have Hq heads and the keys Hkv. attention_moments(..., enable_gqa=True)
    gives each query head the moments of the keys it attends (key head h // g): equal to
    the moments with the keys (and a per-key-head padding mask) repeated, and usable as
    linear_attention's and init_decoding_state's moments. Without enable_gqa the head
    counts do not broadcast, and the error says to pass it (it did not)."""
    qc, kc, _ = _qkv(S=L, seed=3)
    pad = torch.rand(B, HKV, L, generator=torch.Generator().manual_seed(4)) < 0.3
    with pytest.raises(ValueError, match="enable_gqa=True"):
        attention_moments(qc, kc)
    for mask in (None, pad, pad[:, :1]):
        got = attention_moments(qc, kc, key_padding_mask=mask, enable_gqa=True)
        rep_mask = None if mask is None else (_rep(mask) if mask.shape[1] == HKV else mask)
        ref = attention_moments(qc, _rep(kc), key_padding_mask=rep_mask)
        for f in ("mean_x", "second_x", "mean_y", "second_y"):
            assert torch.equal(getattr(got, f), getattr(ref, f)), (f, mask is None)
    with pytest.raises(TypeError, match="enable_gqa must be a bool"):
        attention_moments(qc, kc, enable_gqa="yes")
    # per query head (H,) moments of the calibration batch: causal pass == decoding
    mom = Moments(*(t.mean(0) for t in (got.mean_x, got.second_x, got.mean_y, got.second_y)))
    q, k, v = _qkv(S=L)
    ref = linear_attention(
        q, k, v, "sderf", M, random_state=0, is_causal=True, moments=mom, enable_gqa=True
    )
    st = _gqa_state("sderf", q.dtype, moments=mom)
    steps, _ = _steps(q, k, v, st, [5, 1, 3])
    assert _rel(steps, ref) < 1e-10


# ------------------------------------------------------------- shapes SDPA accepts
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hkv", [1, HQ])
def test_unbatched_mqa_and_equal_head_counts(causal, hkv):
    """3-D inputs without a batch axis (SDPA takes them with enable_gqa) equal each batch
    entry of the batched call; Hkv = 1 (MQA) and Hkv = Hq (g = 1) equal the keys
    repeated (or not) without enable_gqa."""
    g = torch.Generator().manual_seed(6)
    q = 0.5 * torch.randn(B, HQ, L, D, generator=g, dtype=torch.float64)
    k = 0.5 * torch.randn(B, hkv, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, hkv, S, E, generator=g, dtype=torch.float64)
    kw = {"random_state": 0, "is_causal": causal}
    out = linear_attention(q, k, v, "positive", M, enable_gqa=True, **kw)
    rep = [t.repeat_interleave(HQ // hkv, dim=1) for t in (k, v)]
    assert _rel(out, linear_attention(q, *rep, "positive", M, **kw)) < TOL
    for b in range(B):
        one = linear_attention(q[b], k[b], v[b], "positive", M, enable_gqa=True, **kw)
        assert one.shape == (HQ, L, E) and _rel(one, out[b]) < TOL
