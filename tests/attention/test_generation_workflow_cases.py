"""Generating text with the decoding step, as a user of PyTorch's KV-cache conventions
would: a tiny decoder-only LM of causal ``FavorAttention`` layers prefilled in blocks and
decoded token by token, left-padded batches, beams (``index_select``, copies, pickling),
module changes between steps, ``torch.compile`` and long generations. The reference is
always the module's (or ``linear_attention``'s) causal full-sequence pass."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import rel_error as _rel  # noqa: E402
from attention_helpers import spy_paths  # noqa: E402
from torch import nn  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FITTED_MAPS,
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

V, E, H = 30, 16, 2  # vocabulary, model dim, heads (head_dim 8)


class _TinyLM(nn.Module):
    """Embedding, two pre-residual causal FavorAttention + MLP layers, LM head."""

    def __init__(self, feature_map, num_kv_heads=None, n_features=32):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.attn = nn.ModuleList(
            FavorAttention(
                E,
                H if num_kv_heads is None else 4,
                feature_map=feature_map,
                n_features=n_features,
                random_state=i,
                num_kv_heads=num_kv_heads,
            )
            for i in range(2)
        )
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(E, 2 * E), nn.GELU(), nn.Linear(2 * E, E)) for _ in range(2)
        )
        self.head = nn.Linear(E, V)

    def forward(self, ids, pad=None):  # ids (N, L) -> logits (N, L, V)
        x = self.emb(ids)
        for a, f in zip(self.attn, self.mlp, strict=True):
            x = x + a(x, x, x, key_padding_mask=pad, is_causal=True)[0]
            x = x + f(x)
        return self.head(x)

    def init_state(self, n):
        return [a.init_state(n) for a in self.attn]

    def step(self, ids, states, pad=None, inplace=False):  # ids (N,) or (N, T)
        x = self.emb(ids)
        new = []
        for a, f, s in zip(self.attn, self.mlp, states, strict=True):
            o, s = a.step(x, x, x, s, key_padding_mask=pad, inplace=inplace)
            x = x + o
            x = x + f(x)
            new.append(s)
        return self.head(x), new


def _trained_lm(feature_map, dtype=torch.float64, **kw):
    """A few SGD steps in training mode, so that a fitted map has running moments."""
    torch.manual_seed(0)
    m = _TinyLM(feature_map, **kw).to(dtype)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        ids = torch.randint(0, V, (4, 12))
        logits = m(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    if feature_map == "sderf":
        assert all(bool(a.num_batches_tracked > 0) for a in m.attn)
    return m.eval()


def _generate(m, ids, blocks, inplace=False):
    """Logits (N, L, V) of ``ids`` (N, L) stepped through ``blocks`` (1 = one token)."""
    states, outs, lo = m.init_state(ids.shape[0]), [], 0
    for n in blocks:
        if n == 1:
            o, states = m.step(ids[:, lo], states, inplace=inplace)
            o = o[:, None]
        else:
            o, states = m.step(ids[:, lo : lo + n], states, inplace=inplace)
        outs.append(o)
        lo += n
    assert lo == ids.shape[1]
    return torch.cat(outs, 1), states


# float64: the steps reorder the causal pass's sums only (round-off ~ 1e-16 per layer)
@pytest.mark.parametrize("feature_map", ["sderf", "positive", "hyperbolic"])
def test_lm_prefill_in_uneven_chunks_then_tokens_equals_the_forward(feature_map):
    m = _trained_lm(feature_map)
    ids = torch.randint(0, V, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = m(ids)
        chunks, _ = _generate(m, ids, [1, 3, 7, 9])
        prefill, st = _generate(m, ids, [8] + [1] * 12, inplace=True)
    assert _rel(chunks, ref) < 1e-12 and _rel(prefill, ref) < 1e-12
    assert [s.t for s in st] == [20, 20]


def test_lm_float32_generation_equals_the_forward_to_float32_round_off():
    m = _trained_lm("sderf", dtype=torch.float32)
    ids = torch.randint(0, V, (2, 20), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ref = m(ids)
        out, _ = _generate(m, ids, [5, 1, 1, 6] + [1] * 7, inplace=True)
    # float32 eps 1.2e-7 times sums of 20 terms through two layers: 1e-5 leaves 4x margin
    assert out.dtype == torch.float32 and _rel(out, ref) < 1e-5


def test_left_padded_batch_generation_equals_each_prompt_alone():
    """Prompts of lengths 12, 7, 3 left-padded to 12, prefilled with the padding mask,
    then 5 generated tokens: each row equals that prompt decoded alone, and the forward
    with the same mask; garbage in the padded slots changes nothing."""
    m = _trained_lm("sderf")
    g = torch.Generator().manual_seed(3)
    lens, P = [12, 7, 3], 12
    ids = torch.randint(0, V, (3, P), generator=g)
    new = torch.randint(0, V, (3, 5), generator=g)
    pad = torch.arange(P)[None, :] < torch.tensor([P - n for n in lens])[:, None]  # (3, P)
    with torch.no_grad():
        st = m.init_state(3)
        o, st = m.step(ids, st, pad=pad)
        outs = [o]
        for t in range(5):
            o, st = m.step(new[:, t], st)
            outs.append(o[:, None])
        out = torch.cat(outs, 1)  # (3, P + 5, V)
        ids2 = torch.where(pad, (ids + 11) % V, ids)  # other tokens where padded
        o2, st2 = m.step(ids2, m.init_state(3), pad=pad)
        o2, _ = m.step(new[:, 0], st2)
        full = m(torch.cat([ids, new], 1), pad=torch.cat([pad, pad.new_zeros(3, 5)], 1))
        for i, n in enumerate(lens):
            alone = m(torch.cat([ids[i : i + 1, P - n :], new[i : i + 1]], 1))[0]
            assert _rel(out[i, P - n :], alone) < 1e-12, i
    keep = torch.cat([~pad, pad.new_ones(3, 5)], 1)
    assert _rel(out[keep], full[keep]) < 1e-12
    assert _rel(o2, out[:, P]) < 1e-12


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_beams_reorder_duplicate_and_copies_survive_inplace_steps(num_kv_heads):
    """Beam search bookkeeping: after 7 tokens, beams (1, 0, 1) (a duplicated sequence)
    from ``index_select``, decoded in place; a deepcopy taken before, and a float32 copy
    (``state.to``) in a float32 copy of the model, continue equally."""
    m = _trained_lm("sderf", num_kv_heads=num_kv_heads)
    ids = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(4))
    idx = torch.tensor([1, 0, 1])
    with torch.no_grad():
        _, st = m.step(ids[:, :7], m.init_state(2))
        beams = [s.index_select(0, idx) for s in st]
        kept = copy.deepcopy(beams)
        outs = []
        for t in range(7, 10):
            o, beams = m.step(ids[idx, t], beams, inplace=True)
            outs.append(o)
        ref = m(ids[idx])[:, 7:]
        again, _ = m.step(ids[idx, 7], kept)
        m32 = copy.deepcopy(m).float()
        o32, _ = m32.step(ids[:, 7], [s.to(dtype=torch.float32) for s in st])
        ref8 = m(ids[:, :8])[:, -1]
    assert _rel(torch.stack(outs, 1), ref) < 1e-12
    assert _rel(again, ref[:, 0]) < 1e-12
    # the float32 model differs from the float64 one by its rounded weights only
    assert o32.dtype == torch.float32 and _rel(o32.double(), ref8) < 1e-5


def test_a_state_keeps_its_features_when_the_module_changes():
    """A redraw (training forward, redraw_interval=1), an update of the running moments
    and a load_state_dict of other feature buffers between prefill and decoding: the
    state keeps the features it was made with, so decoding continues the prompt with one
    consistent feature map (equal to the module as it was at init_state), never a mix of
    old and new features."""
    m = _trained_lm("sderf")
    snapshot = copy.deepcopy(m)
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, st = m.step(ids[:, :6], m.init_state(2))
        m.train()
        for a in m.attn:
            a.redraw_interval = 1
        m(ids * 0 + 3)  # redraws and updates the running moments
        m(ids)
        m.eval()
        assert not torch.equal(m.attn[0].projection, snapshot.attn[0].projection)
        o, st = m.step(ids[:, 6], st)
        other = _TinyLM("sderf").double()  # other projections and running moments
        for a in other.attn:
            a.redraw_features()
            a.running_mean_q.normal_()
        buffers = ("projection", "running_mean_q", "running_second_q", "running_mean_k")
        feats = {k: t for k, t in other.state_dict().items() if k.endswith(buffers)}
        m.load_state_dict(feats, strict=False)
        assert not torch.equal(m.attn[1].projection, snapshot.attn[1].projection)
        assert not torch.equal(m.attn[1].running_mean_q, snapshot.attn[1].running_mean_q)
        o2, st = m.step(ids[:, 7:], st)
        ref = snapshot(ids)
    assert _rel(o, ref[:, 6]) < 1e-12 and _rel(o2, ref[:, 7:]) < 1e-12


def test_compiled_decode_step_has_no_graph_break_nor_a_recompile_per_token():
    """``torch.compile(fullgraph=True)`` of a decode step calling FavorAttention.step
    (out of place and in place, with a per-token padding mask): equal to eager, and at
    most two graphs for 8 tokens (the second when ``state.t`` becomes dynamic)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    att = _trained_lm("sderf", dtype=torch.float32).attn[0]
    x = torch.randn(2, 12, E)
    for inplace in (False, True):
        torch._dynamo.reset()
        counters.clear()

        def dec(x_t, st, pad, inplace=inplace):
            return att.step(x_t, x_t, x_t, st, key_padding_mask=pad, inplace=inplace)

        cdec = torch.compile(dec, fullgraph=True, backend="aot_eager")
        with torch.no_grad():
            _, st = att.step(x[:, :4], x[:, :4], x[:, :4], att.init_state(2))
            se = copy.deepcopy(st)
            outs, refs = [], []
            for t in range(4, 12):
                pad = torch.tensor([t == 6, False])
                o, st = cdec(x[:, t], st, pad)
                r, se = att.step(x[:, t], x[:, t], x[:, t], se, key_padding_mask=pad)
                outs.append(o)
                refs.append(r)
        torch.testing.assert_close(torch.stack(outs), torch.stack(refs), rtol=1e-5, atol=1e-6)
        assert st.t == 12 and counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])
    torch._dynamo.reset()


@pytest.mark.parametrize(
    ("feature_map", "dtype", "tol"),
    # float64: round-off; float32: eps 1.2e-7 times the 4096-term sums' condition, 4x margin
    [("positive", torch.float64, 1e-12), ("hyperbolic", torch.float32, 2e-5)],
)
def test_long_generation_with_growing_key_norms(feature_map, dtype, tol):
    """4096 tokens (d = 16, M = 32) whose key norms grow 12-fold: the running maxima
    rescale the state, the outputs stay finite and equal the causal pass, and the state
    has the same size at every step."""
    L, d, M = 4096, 16, 32
    g = torch.Generator().manual_seed(6)
    grow = torch.linspace(0.5, 6.0, L, dtype=dtype)[:, None]  # (L, 1)
    q = torch.randn(1, 2, L, d, generator=g, dtype=dtype)
    k = torch.randn(1, 2, L, d, generator=g, dtype=dtype) * grow
    v = torch.randn(1, 2, L, d, generator=g, dtype=dtype)
    ref = linear_attention(q, k, v, feature_map, M, is_causal=True, random_state=0)
    st = init_decoding_state((1, 2), d, feature_map, M, random_state=0, dtype=dtype)
    size, outs = st.nbytes(), []
    with torch.no_grad():
        for t in range(L):
            o, st = linear_attention_step(
                q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=True
            )
            outs.append(o)
            assert st.nbytes() == size
    out = torch.stack(outs, -2)
    assert bool(out.isfinite().all()) and _rel(out, ref) < tol and st.t == L


# ------------------------------------------------------------------ defects found
def _stepped_in_place(n=3, inference=False):
    """A state after a prefill of 4 tokens and ``n`` in-place steps, and its inputs."""
    q, k, v = (
        torch.randn(2, 2, 10, 4, generator=torch.Generator().manual_seed(s)) for s in (7, 8, 9)
    )
    ctx = torch.inference_mode() if inference else torch.no_grad()
    with ctx:
        st = init_decoding_state((2, 2), 4, "positive", 16, random_state=0)
        _, st = linear_attention_step(q[..., :4, :], k[..., :4, :], v[..., :4, :], st)
        for t in range(4, 4 + n):
            _, st = linear_attention_step(
                q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=True
            )
    return st, (q, k, v)


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_a_saved_state_still_refuses_reuse_after_an_in_place_step(how):
    """A state pickled or torch.save'd mid-generation (after in-place steps) and loaded:
    its tensors restart the in-place version counter at 0, below the recorded version,
    so reusing the loaded state after an in-place step of it went unnoticed (silently
    wrong outputs, as for any stale state)."""
    import io
    import pickle

    st, (q, k, v) = _stepped_in_place()
    if how == "pickle":
        loaded = pickle.loads(pickle.dumps(st))
    else:
        buf = io.BytesIO()
        torch.save(st, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)  # a Python object, as a KV cache class
    with torch.no_grad():
        ref, _ = linear_attention_step(q[..., 7, :], k[..., 7, :], v[..., 7, :], st)
        out, new = linear_attention_step(
            q[..., 7, :], k[..., 7, :], v[..., 7, :], loaded, inplace=True
        )
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 7, :], k[..., 7, :], v[..., 7, :], loaded)
        linear_attention_step(q[..., 8, :], k[..., 8, :], v[..., 8, :], new)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_inference_mode_steps_refuse_a_stale_state():
    """Under torch.inference_mode() (tensors without version counters) the stale-state
    check was off: stepping a state again after an in-place step of it silently gave
    wrong outputs. States made there are checked as everywhere in eager mode."""
    st, (q, k, v) = _stepped_in_place(inference=True)
    with torch.inference_mode():
        _, new = linear_attention_step(q[..., 7, :], k[..., 7, :], v[..., 7, :], st, inplace=True)
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 7, :], k[..., 7, :], v[..., 7, :], st, inplace=True)
        kept = copy.deepcopy(new)
        _, new2 = linear_attention_step(q[..., 8, :], k[..., 8, :], v[..., 8, :], new, inplace=True)
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 8, :], k[..., 8, :], v[..., 8, :], new)
        a, _ = linear_attention_step(q[..., 8, :], k[..., 8, :], v[..., 8, :], kept)
        b, _ = linear_attention_step(q[..., 9, :], k[..., 9, :], v[..., 9, :], new2)
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    torch.testing.assert_close(a, ref[..., 8, :], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b, ref[..., 9, :], rtol=1e-5, atol=1e-6)


def test_module_converted_after_init_state_names_state_to():
    """``.double()`` of a model after ``init_state`` (a float32 state) used to fail
    inside the functional step with a hint at init_decoding_state(dtype=...), an argument
    a module user never passes; it now names ``state.to(dtype=...)`` and init_state, and
    the converted state continues equally."""
    torch.manual_seed(0)
    m = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=0).eval()
    x = torch.randn(2, 6, E)
    with torch.no_grad():
        _, st = m.step(x[:, :5], x[:, :5], x[:, :5], m.init_state(2))
        m.double()
        x = x.double()
        with pytest.raises(TypeError, match=r"state\.to\(dtype=torch\.float64\).*init_state"):
            m.step(x[:, 5], x[:, 5], x[:, 5], st)
        out, _ = m.step(x[:, 5], x[:, 5], x[:, 5], st.to(dtype=torch.float64))
        ref, _ = m(x, x, x, is_causal=True)
    # the prefix was summed in float32: float32 round-off
    assert _rel(out, ref[:, 5]) < 1e-5
    q = torch.randn(2, H, E // H, dtype=torch.float64)  # the functional step names it too
    with pytest.raises(TypeError, match=r"state\.to\(dtype=torch\.float64\)"):
        linear_attention_step(q, q, q, init_decoding_state((2, H), E // H, "positive", 16))


@pytest.mark.parametrize(
    ("other", "what"),
    [
        ({"feature_map": "positive", "n_features": 8}, "n_features"),
        ({"feature_map": "relu", "n_features": 16}, "feature_map"),
        ({"feature_map": "hyperbolic", "n_features": 16}, "feature_map"),
    ],
)
def test_a_state_of_another_module_is_refused(other, what):
    """A state made by another module's init_state (other M, or another map) was stepped
    silently with that module's features: the outputs were no longer this module's."""
    m = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=0)
    st = FavorAttention(E, H, random_state=1, **other).init_state(2)
    x = torch.randn(2, E)
    with pytest.raises(ValueError, match=f"init_state.*{what}|{what}.*init_state"):
        m.step(x, x, x, st)


def test_module_step_errors_speak_of_the_module_shapes():
    """A step with another batch size than the state named the per-head shape (N, H,
    head_dim) of the functional step; a token's mask of the wrong length reported
    (N, S) = (N, 1); init_state(batch_size) took -1 (a torch error) and True."""
    m = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=0)
    st = m.init_state(3)
    x = torch.randn(2, E)
    with pytest.raises(ValueError, match=r"batch size 2.*state.*3.*init_state"):
        m.step(x, x, x, st)
    with pytest.raises(ValueError, match=r"batch size 2.*state.*3"):
        m.step(x[:, None], x[:, None], x[:, None], st)
    x3 = torch.randn(3, E)
    with pytest.raises(ValueError, match=r"key_padding_mask.*\(N,\) = \(3,\).*\(2,\)"):
        m.step(x3, x3, x3, st, key_padding_mask=torch.zeros(2, dtype=torch.bool))
    for bad in (-1, True, 2.0, "2"):
        with pytest.raises(ValueError, match="batch_size"):
            m.init_state(bad)
    assert m.init_state(0).kvz.shape == (0, H, 16, E // H + 1)


def test_beams_of_a_stale_state_are_refused():
    """``index_select`` (beam reordering) or ``to`` of a state after an in-place step of
    it gave a fresh-looking state whose tensors hold one more token than its ``t``; they
    now raise as stepping the stale state does."""
    st, (q, k, v) = _stepped_in_place(n=0)
    with torch.no_grad():
        _, new = linear_attention_step(q[..., 4, :], k[..., 4, :], v[..., 4, :], st, inplace=True)
    with pytest.raises(ValueError, match="stale"):
        st.index_select(0, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="stale"):
        st.to(dtype=torch.float64)
    beams = new.index_select(0, torch.tensor([1, 1]))  # the returned state is fine
    out, _ = linear_attention_step(q[[1, 1], :, 5], k[[1, 1], :, 5], v[[1, 1], :, 5], beams)
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    torch.testing.assert_close(out, ref[[1, 1], :, 5], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_long_prefill_goes_in_chunks_and_equals_the_causal_pass(dtype, monkeypatch):
    """A prompt of 300 tokens prefilled as one block formed (..., 300, 300) scores:
    O(T^2 M) work and memory, 5 times slower than the causal forward at T = 2048. It now
    goes in chunks of 64 tokens (the state carried between them), each with its own
    pivot; a chunk whose key maxima grow by more than the bound G (the first, whose
    first key is 20 times too long, so its log features start ~570 nats low, beyond G
    in float32 and float64) steps its tokens one by one, the others stay batched."""
    from kernelkit.attention import decoding

    sizes, tokens = [], []
    chunk, token = decoding._chunk, decoding._token

    def spy_chunk(lq, lk, *args):
        sizes.append(lk.shape[-2])
        return chunk(lq, lk, *args)

    def spy_token(*args):
        tokens.append(1)
        return token(*args)

    monkeypatch.setattr(decoding, "_chunk", spy_chunk)
    monkeypatch.setattr(decoding, "_token", spy_token)
    T, d = 300, 8
    g = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(2, 2, T, d, generator=g, dtype=dtype) for _ in range(3))
    k[..., 0, :] *= 20.0  # log features ~ -|y|^2 / 2 ~ -(400 * 8 / sqrt(8)) / 2 ~ -570
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    st = init_decoding_state((2, 2), d, "positive", 16, random_state=0, dtype=dtype)
    # with autograd (values requiring grad): the chunk loop, differentiable
    out, st = linear_attention_step(q, k, v.clone().requires_grad_(True), st)
    assert sizes == [64, 64, 64, 64, 44] and len(tokens) == 64 and st.t == T
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert _rel(out.detach(), ref) < tol


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_long_prefill_without_autograd_runs_the_causal_kernel(dtype, monkeypatch):
    """Without autograd a block (prefill) runs the forward of the causal kernel: blocks of
    chunks in batched products, starting from the state and ending as the new one. A
    block whose first chunk's key maxima jump (a key 20 times too long) goes chunk by
    chunk; the output, the state and the decoding after it equal the causal pass, also
    with left padding."""
    from kernelkit.attention import decoding

    paths = spy_paths(monkeypatch, decoding, "_fwd_block")  # batched (True) or by chunks
    T, d = 300, 8
    g = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(2, 2, T + 3, d, generator=g, dtype=dtype) for _ in range(3))
    k[..., 0, :] *= 20.0  # the first block's first chunk: a key jump beyond G
    pad = torch.zeros(2, T + 3, dtype=torch.bool)
    pad[1, :5] = True  # the second row left-padded by 5
    ref = linear_attention(
        q, k, v, "positive", 16, is_causal=True, random_state=0, key_padding_mask=pad[:, None]
    )
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for inplace in (False, True):
        paths.clear()
        st = init_decoding_state((2, 2), d, "positive", 16, random_state=0, dtype=dtype)
        with torch.no_grad():
            out, st = linear_attention_step(
                q[..., :T, :], k[..., :T, :], v[..., :T, :], st,
                key_padding_mask=pad[:, None, :T], inplace=inplace,
            )  # fmt: skip
            assert paths == [False, True] and st.t == T  # blocks of 256 rows; first by chunks
            outs = [out]
            for t in range(T, T + 3):  # then token by token from the kernel's state
                o, st = linear_attention_step(
                    q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=inplace
                )
                outs.append(o[..., None, :])
        assert _rel(torch.cat(outs, -2), ref) < tol
    k[..., 0, :] /= 20.0  # no jump: the batched path
    paths.clear()
    st = init_decoding_state((2, 2), d, "positive", 16, random_state=0, dtype=dtype)
    with torch.no_grad():
        out, st = linear_attention_step(q, k, v, st)
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    assert paths == [True, True] and _rel(out, ref) < tol


def test_an_inference_mode_state_stepped_in_place_outside_it_names_the_fix():
    """A state made under torch.inference_mode() (e.g. a prompt prefilled there) then
    decoded in place under torch.no_grad() failed with torch's internal "Inplace update
    to inference tensor outside InferenceMode"; the error now says what to do, and an
    out-of-place step (which reads it) continues equally."""
    st, (q, k, v) = _stepped_in_place(n=0, inference=True)
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"inference_mode.*inplace=False"):
            linear_attention_step(q[..., 4, :], k[..., 4, :], v[..., 4, :], st, inplace=True)
        out, st = linear_attention_step(q[..., 4, :], k[..., 4, :], v[..., 4, :], st)
        out2, _ = linear_attention_step(q[..., 5, :], k[..., 5, :], v[..., 5, :], st, inplace=True)
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    torch.testing.assert_close(out, ref[..., 4, :], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out2, ref[..., 5, :], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("feature_map", ["positive", "sderf"])
def test_a_long_grouped_prefill_with_left_padding_equals_the_causal_pass(feature_map):
    """The chunked prefill with GQA (a state per key head for ``positive``, per query head
    for ``sderf`` with per-head moments), a padded first row over 70 tokens (two chunks)
    and gradients through the chunks: equal to ``linear_attention(..., enable_gqa=True)``."""
    from kernelkit.attention import attention_moments

    T, d = 150, 8
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 4, T, d, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 2, T, d, generator=g, dtype=torch.float64) for _ in range(2))
    mom = None
    if feature_map == "sderf":
        qc, kc = torch.randn(2, 4, 30, d, generator=g), torch.randn(2, 2, 30, d, generator=g)
        mom = attention_moments(qc.double(), kc.double(), enable_gqa=True)
    pad = torch.zeros(2, 2, T, dtype=torch.bool)
    pad[0, :, :70] = True  # (N, Hkv, T): left padding of the first row
    kw = {"random_state": 0, "moments": mom, "enable_gqa": True}
    ref = linear_attention(q, k, v, feature_map, 16, is_causal=True, key_padding_mask=pad, **kw)
    st = init_decoding_state((2, 4), d, feature_map, 16, num_kv_heads=2, dtype=torch.float64, **kw)
    assert st.group == (2 if feature_map == "positive" else 1)
    out, st = linear_attention_step(q, k, v, st, key_padding_mask=pad, enable_gqa=True)
    keep = torch.ones(2, 4, T, dtype=torch.bool)
    keep[0, :, :70] = False  # queries with no visible key: zeros in both
    assert _rel(out[keep].detach(), ref[keep].detach()) < 1e-12
    assert float(out[~keep].detach().abs().max()) == 0.0
    (ga,) = torch.autograd.grad((out[keep] ** 2).sum(), q)
    (gb,) = torch.autograd.grad((ref[keep] ** 2).sum(), q)
    assert _rel(ga, gb) < 1e-12


def test_the_chunk_paths_of_a_prefill_are_read_at_once_and_as_each_chunk_would():
    """The chunked prefill with autograd decides every chunk's path (one pivot, or token
    by token) with one host read; each decision equals the test on that chunk with the maxima
    the state carries into it. Keys 0-69 are 100 times too long (log features ~10^4
    nats low), so the second chunk of the block (tokens 65-128) starts low and jumps:
    token by token."""
    from kernelkit.attention import decoding

    seen, chunk = [], decoding._chunk

    def spy(lq, lk, va, keep, kvz, c, inplace, grouped, one_pivot=None):
        growth = torch.maximum(c, lk.amax(-2)) - torch.maximum(c, lk[..., 0, :])
        seen.append((one_pivot, float(growth.amax()) <= 500.0))  # G in float64
        return chunk(lq, lk, va, keep, kvz, c, inplace, grouped, one_pivot)

    T, d = 200, 8
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(2, 2, T, d, generator=g, dtype=torch.float64) for _ in range(3))
    k[..., :70, :] *= 100.0
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
    st = init_decoding_state((2, 2), d, "positive", 16, random_state=0, dtype=torch.float64)
    _, st = linear_attention_step(q[..., :1, :], k[..., :1, :], v[..., :1, :], st)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoding, "_chunk", spy)
        vg = v[..., 1:, :].clone().requires_grad_(True)  # autograd: the chunk loop
        out, st = linear_attention_step(q[..., 1:, :], k[..., 1:, :], vg, st)
    assert len(seen) == 4 and all(got == want for got, want in seen)
    assert seen[1][0] is False and seen[3][0] is True
    assert _rel(out.detach(), ref[..., 1:, :]) < 1e-12


def test_to_without_a_change_shares_the_tensors_and_their_staleness():
    """``state.to()`` to its own dtype and device returns the same tensors (as
    ``Tensor.to``): an in-place step of either makes the other stale; a real conversion
    is independent."""
    st, (q, k, v) = _stepped_in_place(n=0)
    same, other = st.to(dtype=torch.float32), st.to(dtype=torch.float64)
    assert same.kvz is st.kvz and other.kvz is not st.kvz
    with torch.no_grad():
        out, _ = linear_attention_step(q[..., 4, :], k[..., 4, :], v[..., 4, :], same, inplace=True)
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 4, :], k[..., 4, :], v[..., 4, :], st)
        out64, _ = linear_attention_step(*(t[..., 4, :].double() for t in (q, k, v)), other)
    torch.testing.assert_close(out64.float(), out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name", ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf", "relu", "elu"]
)
def test_every_causal_map_prefills_through_the_kernel_then_decodes(name, monkeypatch):
    """Five tokens one at a time, then a 145-token block (two full chunks and a partial
    one) with padded keys in one row, without autograd (the causal kernel's forward from
    the state of the five tokens, seen by a spy), then three tokens one at a time: equal
    to the causal pass in float64 for every causal map, fitted ones with calibration
    moments."""
    from kernelkit.attention import decoding

    calls = spy_paths(monkeypatch, decoding, "_fwd_block")
    T, d = 153, 8
    g = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(2, 3, T, d, generator=g, dtype=torch.float64) for _ in range(3))
    qc, kc = (torch.randn(2, 3, 40, d, generator=g, dtype=torch.float64) for _ in range(2))
    mom = attention_moments(qc, kc)  # calibration data
    pad = torch.zeros(2, T, dtype=torch.bool)
    pad[0, 140:150] = True  # padded keys inside the prompt of the first row
    kw = dict(random_state=0, moments=mom if name in FITTED_MAPS else None)
    ref = linear_attention(q, k, v, name, 16, is_causal=True, key_padding_mask=pad[:, None], **kw)
    st = init_decoding_state((2, 3), d, name, 16, dtype=torch.float64, **kw)
    with torch.no_grad():
        outs = []
        for t in (*range(5), None, *range(150, T)):
            if t is None:  # the block of tokens 5-149
                o, st = linear_attention_step(
                    q[..., 5:150, :], k[..., 5:150, :], v[..., 5:150, :], st,
                    key_padding_mask=pad[:, None, 5:150],
                )  # fmt: skip
            else:
                o, st = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], st)
                o = o[..., None, :]
            outs.append(o)
    assert calls and st.t == T
    assert _rel(torch.cat(outs, -2), ref) < 1e-10


def test_an_empty_batch_prefills_a_long_block():
    """A batch of zero sequences and a block longer than one chunk (the kernel's path
    reads the keys' growth by a reduction, which an empty batch cannot give): an empty
    output, the state advanced by T and decoding on, as for one chunk."""
    st = init_decoding_state((0, 2), 8, "positive", 16, random_state=0)
    q = torch.randn(0, 2, 100, 8)
    with torch.no_grad():
        out, st = linear_attention_step(q, q, q, st)
        out1, st = linear_attention_step(q[..., 0, :], q[..., 0, :], q[..., 0, :], st)
    assert out.shape == (0, 2, 100, 8) and out1.shape == (0, 2, 8) and st.t == 101
