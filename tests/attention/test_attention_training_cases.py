"""FavorAttention, linear_attention and the decoding API inside training and serving code
(third new-user sweep).

Training: a 2-layer encoder learns a majority task like exact attention (positive,
sderf, saderf; causal and bidirectional; gradient clipping, bfloat16 autocast, no_grad
eval); running statistics against momentum. torch.compile(fullgraph=True): encoder
layers with a causal src_mask and is_causal, with a key padding mask, compiled training
steps without retracing, dynamic shapes, the token step in a generation loop, SDPA
padding masks. Module state: torch.save / weights_only load, deepcopy, dtype
conversions, torch.manual_seed. Serving: left / right padded batched prefill, beam
reordering (index_select), state dtype moves. torch.func and gradcheck."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

from kernelkit.attention import FavorAttention  # noqa: E402


def _tokens(N, L, seed):
    return torch.randn(N, L, 16, generator=torch.Generator().manual_seed(seed))


def _encoder_layer(feature_map, **kw):
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    layer.self_attn = FavorAttention(
        16, 2, feature_map=feature_map, n_features=16, random_state=0, **kw
    )
    return layer


@pytest.fixture
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


V, L = 4, 32  # vocabulary, sequence length of the toy task


def _majority_batch(g, N=16):
    """Tokens (N, L) where one token per row is frequent, and the target (N, L): the most
    frequent token of the row (bidirectional) or of its prefix (causal)."""
    dom = torch.randint(0, V, (N, 1), generator=g)
    noise = torch.randint(0, V, (N, L), generator=g)
    tokens = torch.where(torch.rand(N, L, generator=g) < 0.4, dom, noise)
    onehot = nn.functional.one_hot(tokens, V).float()  # (N, L, V)
    return tokens, onehot, onehot.sum(1, keepdim=True), onehot.cumsum(1)


class _Classifier(nn.Module):
    """Embedding + 2 nn.TransformerEncoderLayer whose self_attn is a FavorAttention
    (``name="exact"``: nn.MultiheadAttention, the reference) + a linear head."""

    def __init__(self, name, E=16, H=2):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.pos = nn.Parameter(0.1 * torch.randn(L, E))
        self.layers = nn.ModuleList()
        for i in range(2):
            layer = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True)
            if name != "exact":
                layer.self_attn = FavorAttention(
                    E, H, feature_map=name, n_features=32, redraw_interval=10, random_state=i
                )
            self.layers.append(layer)
        self.head = nn.Linear(E, V)

    def forward(self, tokens, causal):
        h = self.emb(tokens) + self.pos  # (N, L, E)
        mask = nn.Transformer.generate_square_subsequent_mask(L) if causal else None
        for layer in self.layers:
            h = layer(h, src_mask=mask, is_causal=causal)
        return self.head(h)  # (N, L, V)


def _train(name, causal, steps=50, autocast=False):
    """AdamW with gradient clipping on the majority task; the loss is taken on the second
    half of the positions (the prefix majority is ambiguous early on). Returns the model
    and the losses."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = _Classifier(name)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        tokens, _, total, prefix = _majority_batch(g)
        target = (prefix if causal else total.expand_as(prefix)).argmax(-1)  # (N, L)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(tokens, causal)
        loss = nn.functional.cross_entropy(
            logits.float()[:, L // 2 :].reshape(-1, V), target[:, L // 2 :].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return model, losses


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", ["exact", "positive", "sderf", "saderf"])
def test_small_model_learns_the_majority_task_like_exact_attention(name, causal):
    """50 AdamW steps: the loss falls from chance (log 4 = 1.39) to below 0.3 (exact
    attention reaches about 0.02) with finite gradients, and the eval model under
    no_grad (frozen features and statistics) labels at least 90% of held-out positions."""
    model, losses = _train(name, causal)
    assert losses[0] > 1.0 and max(losses[-5:]) < 0.3, losses[::10]
    model.eval()
    tokens, _, total, prefix = _majority_batch(torch.Generator().manual_seed(99), N=64)
    target = (prefix if causal else total.expand_as(prefix)).argmax(-1)
    with torch.no_grad():
        pred = model(tokens, causal).argmax(-1)
    assert (pred == target)[:, L // 2 :].float().mean() > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_small_model_trains_under_bfloat16_autocast(causal):
    """The same training with the forward under torch.autocast('cpu', bfloat16) (the
    attention itself in float32, backward outside the region) learns as well."""
    _, losses = _train("sderf", causal, autocast=True)
    assert losses[0] > 1.0 and max(losses[-5:]) < 0.3, losses[::10]


@pytest.mark.slow
def test_compiled_encoder_layer_takes_its_causal_src_mask_with_is_causal(_fresh_dynamo):
    """nn.TransformerEncoderLayer(x, src_mask=causal, is_causal=True) hands the mask and
    the hint to self_attn; a compiled graph cannot read the mask's values, so the hint is
    trusted there (as nn.MultiheadAttention does), and the result equals eager."""
    torch.manual_seed(0)
    layer = _encoder_layer("positive").eval()
    x = _tokens(2, 12, 1)
    mask = nn.Transformer.generate_square_subsequent_mask(12)
    ref = layer(x, src_mask=mask, is_causal=True)
    out = torch.compile(layer, fullgraph=True)(x, src_mask=mask, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_compiled_causal_training_steps_update_statistics_without_retracing(_fresh_dynamo):
    """Compiled train-mode steps of causal FAVOR# (redraw_interval=None) equal eager ones,
    running statistics included, and trace at most twice (before and after the first
    update), not once per step as when the count of updates was a Python value."""
    torch.manual_seed(0)
    eager = _encoder_layer("sderf", redraw_interval=None, momentum=None)
    compiled = copy.deepcopy(eager)
    step = torch.compile(lambda x: compiled(x, is_causal=True), fullgraph=True)
    for i in range(4):
        x = _tokens(2, 12, i)
        with torch._dynamo.config.patch(error_on_recompile=i >= 2):
            out = step(x)
        ref = eager(x, is_causal=True)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
        out.square().mean().backward()
        ref.square().mean().backward()
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
            a.grad = b.grad = None
    for (name, a), b in zip(eager.named_buffers(), compiled.buffers(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert int(compiled.self_attn.num_batches_tracked) == 4


@pytest.mark.slow
def test_compiled_module_step_in_a_generation_loop_equals_the_causal_forward(_fresh_dynamo):
    """FavorAttention.step on one token at a time compiles with fullgraph=True (the
    one-token path, with no block pivot read from the keys) and, in place after an
    eager prefill, reproduces the causal forward; a compiled prefill block says why not."""
    torch.manual_seed(0)
    m = FavorAttention(16, 2, feature_map="sderf", n_features=16, random_state=0)
    m(_tokens(2, 8, 5), _tokens(2, 8, 5), _tokens(2, 8, 5), is_causal=True)  # statistics
    m.eval()
    x = _tokens(2, 12, 1)
    step = torch.compile(
        lambda x_t, state: m.step(x_t, x_t, x_t, state, inplace=True), fullgraph=True
    )
    with torch.no_grad():
        ref, _ = m(x, x, x, is_causal=True)
        out, state = m.step(x[:, :4], x[:, :4], x[:, :4], m.init_state(2))  # eager prefill
        outs = [out]
        for t in range(4, 12):
            out_t, state = step(x[:, t], state)  # (2, 16)
            outs.append(out_t[:, None])
        torch.testing.assert_close(torch.cat(outs, 1), ref, rtol=1e-4, atol=1e-5)
        with pytest.raises(Exception, match="T > 1 tokens"):
            torch.compile(lambda x: m.step(x, x, x, m.init_state(2)), fullgraph=True)(x)


def test_state_index_select_reorders_beams_with_per_sequence_parameters():
    """Beam search: state.index_select(0, beam_idx) continues each beam from the prefix
    it was chosen from, feature parameters fitted per sequence included (moments per
    batch entry), and equals causal attention over the reordered sequences."""
    from kernelkit.attention import (
        attention_moments,
        init_decoding_state,
        linear_attention,
        linear_attention_step,
    )

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mom = attention_moments(*(torch.randn(3, 2, 20, 8, generator=g) for _ in range(2)))
    state = init_decoding_state(
        (3, 2), 8, "sderf", 16, random_state=0, moments=mom, dtype=torch.float64
    )
    _, state = linear_attention_step(q[..., :6, :], k[..., :6, :], v[..., :6, :], state)
    beam = torch.tensor([2, 0, 0])
    out, _ = linear_attention_step(
        q[..., 6, :], k[..., 6, :], v[..., 6, :], state.index_select(0, beam)
    )
    # reference: the prefixes of the chosen beams, the new token of each position
    qr, kr, vr = (torch.cat([t[beam, :, :6], t[:, :, 6:]], dim=2) for t in (q, k, v))
    mom_r = type(mom)(*(t[beam] for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)))
    ref = linear_attention(qr, kr, vr, "sderf", 16, random_state=0, is_causal=True, moments=mom_r)
    torch.testing.assert_close(out, ref[..., -1, :], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="dim"):
        state.index_select(2, beam)


def test_state_to_moves_features_and_sums_to_the_new_dtype():
    """A float32 state moved with .to(dtype=torch.float64) keeps its prefix and steps
    float64 tokens (feature parameters converted too), to float32 round-off of the float64
    causal pass."""
    from kernelkit.attention import init_decoding_state, linear_attention, linear_attention_step

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    state = init_decoding_state((2,), 8, "positive", 32, random_state=0)
    _, state = linear_attention_step(*(t[:, :6].float() for t in (q, k, v)), state)
    state = state.to(dtype=torch.float64)
    assert state.dtype == torch.float64 and state.kvz.dtype == torch.float64
    out, state = linear_attention_step(q[:, 6:], k[:, 6:], v[:, 6:], state)
    ref = linear_attention(q, k, v, "positive", 32, random_state=0, is_causal=True)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref[:, 6:], rtol=1e-5, atol=1e-6)


def test_torch_manual_seed_makes_a_module_without_random_state_reproducible():
    """Built twice after torch.manual_seed(0) with random_state=None, two modules have
    the same weights, projections and redraws (as every torch module); another torch seed
    gives other projections."""

    def build(seed):
        torch.manual_seed(seed)
        return FavorAttention(16, 2, feature_map="positive", n_features=16, redraw_interval=1)

    a, b, c = build(0), build(0), build(1)
    for name, t in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[name], t, rtol=0, atol=0, msg=name)
    assert not torch.equal(a.projection, c.projection)
    x = _tokens(2, 6, 0)
    a(x, x, x)
    a(x, x, x)  # second training call: redrawn
    b(x, x, x)
    b(x, x, x)
    assert torch.equal(a.projection, b.projection)
    assert not torch.equal(a.projection, build(0).projection)  # a redraw happened


def test_torch_func_runs_the_plain_maps_and_names_the_kernels_it_cannot_run():
    """torch.func: bidirectional relu / trig and the one-token decoding step run under
    vmap and grad (equal to a loop and to autograd); the custom-autograd kernels (positive
    maps, causal mode) raise a ValueError naming the map instead of torch's
    setup_context error."""
    from torch.func import grad, vmap

    from kernelkit.attention import init_decoding_state, linear_attention, linear_attention_step

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    for name in ("relu", "trig"):

        def attend(qi, name=name):
            return linear_attention(qi, k[0], v[0], name, 16, random_state=0)

        loop = torch.stack([attend(qi) for qi in q])
        torch.testing.assert_close(vmap(attend)(q), loop, rtol=1e-12, atol=1e-12)
        qg = q[0].clone().requires_grad_(True)
        attend(qg).square().sum().backward()
        gf = grad(lambda qi, name=name: attend(qi, name).square().sum())(q[0])
        torch.testing.assert_close(gf, qg.grad, rtol=1e-12, atol=1e-12)
    state = init_decoding_state((2,), 4, "positive", 8, random_state=0, dtype=torch.float64)

    def step(x):
        return linear_attention_step(x, x, x, state)[0]  # (2, 4)

    loop = torch.stack([step(x) for x in q[:, :, 0]])
    torch.testing.assert_close(vmap(step)(q[:, :, 0]), loop, rtol=1e-12, atol=1e-12)
    for causal in (False, True):
        with pytest.raises(ValueError, match=r"feature_map='positive'.*torch\.func"):
            grad(
                lambda qi, c=causal: linear_attention(
                    qi, k[0], v[0], "positive", 16, random_state=0, is_causal=c
                ).sum()
            )(q[0])
    with pytest.raises(ValueError, match="feature_map='relu' with is_causal=True"):
        vmap(lambda qi: linear_attention(qi, qi, qi, "relu", 16, is_causal=True))(q)


@pytest.mark.parametrize(("name", "causal"), [("positive", False), ("sderf", True)])
def test_module_gradcheck_float64_and_functional_call(name, causal):
    """FavorAttention's gradients (inputs and in-projection weight) pass gradcheck at
    float64 in eval mode, and torch.func.functional_call with its parameters and buffers
    equals the module call. (Bidirectional fitted maps are left out: their per-call fit
    is a constant for autograd, as in the FAVOR# paper, so finite differences see it.)"""
    from torch.func import functional_call

    torch.manual_seed(0)
    m = FavorAttention(8, 2, feature_map=name, n_features=16, random_state=0)
    m = m.double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    m(x, x, x, is_causal=causal)  # running statistics for causal sderf
    m.eval()
    state = {**dict(m.named_parameters()), **dict(m.named_buffers())}
    ref, _ = m(x, x, x, is_causal=causal)
    out, _ = functional_call(m, state, (x, x, x), {"is_causal": causal})
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    xs = x[:1, :4].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: m(t, t, t, is_causal=causal)[0], (xs,))
    w = m.in_proj_weight.detach().clone().requires_grad_(True)

    def with_weight(w):
        args = (xs.detach(),) * 3
        return functional_call(m, {**state, "in_proj_weight": w}, args, {"is_causal": causal})[0]

    assert torch.autograd.gradcheck(with_weight, (w,))


def _trained_attention(seed=0):
    """A causal FAVOR# module after 3 training steps (2 redraws, running statistics)."""
    torch.manual_seed(seed)
    m = FavorAttention(16, 2, feature_map="sderf", n_features=16, redraw_interval=1)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    for i in range(3):
        x = _tokens(2, 12, i)
        loss = m(x, x, x, is_causal=True)[0].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


def test_saved_state_dict_restores_outputs_and_decoding_in_a_fresh_module(tmp_path):
    """torch.save(state_dict) + torch.load(weights_only=True) into a module built with
    another seed (strict=True) gives the trained module's outputs exactly, causal (the
    running statistics) and bidirectional (the projections), and the same decoding steps;
    so does copy.deepcopy."""
    m = _trained_attention()
    assert int(m.num_batches_tracked) == 3
    torch.save(m.state_dict(), tmp_path / "attn.pt")
    fresh = _trained_attention(seed=1)
    assert not torch.equal(fresh.projection, m.projection)
    fresh.load_state_dict(torch.load(tmp_path / "attn.pt", weights_only=True), strict=True)
    x = _tokens(2, 10, 7)
    with torch.no_grad():
        for other in (fresh, copy.deepcopy(m)):
            for causal in (False, True):
                assert torch.equal(
                    other(x, x, x, is_causal=causal)[0], m(x, x, x, is_causal=causal)[0]
                )
            a, _ = other.step(x[:, :4], x[:, :4], x[:, :4], other.init_state(2))
            b, _ = m.step(x[:, :4], x[:, :4], x[:, :4], m.init_state(2))
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_converted_module_computes_in_its_dtype(dtype):
    """.to(dtype) of a trained module: outputs and decoding steps in that dtype, equal to
    the float32 module to that dtype's precision (float16 / bfloat16 parameters round the
    projections and statistics; the attention runs in float32)."""
    m = _trained_attention()
    x = _tokens(2, 10, 7)
    # float32 round-off for float64; about 8 unit roundoffs of float16 (2^-11) and
    # bfloat16 (2^-8) for the rounded inputs, weights, projections and statistics
    tol = {torch.float64: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    conv = copy.deepcopy(m).to(dtype)
    xd = x.to(dtype)
    with torch.no_grad():
        for causal in (False, True):
            out, _ = conv(xd, xd, xd, is_causal=causal)
            ref, _ = m(x, x, x, is_causal=causal)
            assert out.dtype == dtype
            torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
        out_t, _ = conv.step(xd[:, :3], xd[:, :3], xd[:, :3], conv.init_state(2))
        ref_t, _ = m.step(x[:, :3], x[:, :3], x[:, :3], m.init_state(2))
    assert out_t.dtype == dtype
    torch.testing.assert_close(out_t.float(), ref_t, rtol=tol, atol=tol)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batched_generation_equals_each_sequence_alone(side):
    """Serving: prompts of lengths 5, 9 and 3 padded to 9 on the left (as Hugging Face
    generation) or the right, prefilled as one block with key_padding_mask, then 4 tokens
    stepped in place; every sequence's outputs equal its own unpadded causal forward, and
    the padded causal forward agrees on the real rows. Then beam search: the batch state
    reordered with index_select continues the chosen prefixes."""
    m = _trained_attention()
    lens, G, P = [5, 9, 3], 4, 9
    seqs = [_tokens(1, n + G, 10 + i)[0] for i, n in enumerate(lens)]  # (n + G, 16)
    x = torch.zeros(3, P, 16)
    pad = torch.ones(3, P, dtype=torch.bool)
    rows = [slice(P - n, P) if side == "left" else slice(0, n) for n in lens]
    for i, n in enumerate(lens):
        x[i, rows[i]], pad[i, rows[i]] = seqs[i][:n], False
    with torch.no_grad():
        refs = [m(s[None], s[None], s[None], is_causal=True)[0][0] for s in seqs]
        padded, _ = m(x, x, x, key_padding_mask=pad, is_causal=True)
        prompt_out, state = m.step(x, x, x, m.init_state(3), key_padding_mask=pad)
        for i, n in enumerate(lens):
            torch.testing.assert_close(prompt_out[i, rows[i]], refs[i][:n], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(padded[i, rows[i]], refs[i][:n], rtol=1e-5, atol=1e-6)
        for g in range(G):
            x_t = torch.stack([s[n + g] for s, n in zip(seqs, lens, strict=True)])  # (3, 16)
            out_t, state = m.step(x_t, x_t, x_t, state, inplace=True)
            for i, n in enumerate(lens):
                torch.testing.assert_close(out_t[i], refs[i][n + g], rtol=1e-5, atol=1e-6)
        beam = torch.tensor([1, 1, 0])
        nxt = _tokens(3, 1, 20)[:, 0]  # (3, 16)
        out_b, _ = m.step(nxt, nxt, nxt, state.index_select(0, beam))
        for j, i in enumerate(beam.tolist()):
            s = torch.cat([seqs[i], nxt[j, None]])[None]
            torch.testing.assert_close(
                out_b[j], m(s, s, s, is_causal=True)[0][0, -1], rtol=1e-5, atol=1e-6
            )


@pytest.mark.slow
def test_compiled_causal_module_with_dynamic_shapes_traces_once_for_two_lengths(_fresh_dynamo):
    """torch.compile(dynamic=True) of causal FavorAttention: one graph serves L = 12 and
    L = 20 (the causal op fits its chunk to the concrete length inside, instead of the
    graph branching on a symbolic L), and both equal eager."""
    torch.manual_seed(0)
    m = FavorAttention(16, 2, feature_map="positive", n_features=16, random_state=0).eval()
    f = torch.compile(lambda x: m(x, x, x, is_causal=True)[0], fullgraph=True, dynamic=True)
    for i, n in enumerate((12, 20)):
        x = _tokens(2, n, n)
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            out = f(x)
        torch.testing.assert_close(out, m(x, x, x, is_causal=True)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("momentum", [0.25, None])
def test_running_statistics_follow_momentum_in_training_only(momentum):
    """Causal training calls update the running second moment of the scaled queries as
    batch norm does: the first batch's value, then an exponential average with
    ``momentum`` (None: the cumulative mean); eval calls and bidirectional calls leave
    it alone."""
    from kernelkit.attention import attention_moments

    torch.manual_seed(0)
    m = FavorAttention(16, 2, feature_map="sderf", n_features=16, momentum=momentum)
    batches, expected = [_tokens(2, 12, i) for i in range(3)], None
    for n, x in enumerate(batches, start=1):
        q, k, _ = m._in_projection(x, x, x)
        q, k = (t.view(2, 12, 2, 8).transpose(1, 2).detach() for t in (q, k))  # (N, H, L, hd)
        new = attention_moments(q, k).second_x.mean(0)  # of the scaled q: (H, hd, hd)
        f = 1.0 if n == 1 else (1.0 / n if momentum is None else momentum)
        expected = new if expected is None else (1 - f) * expected + f * new
        m(x, x, x, is_causal=True)
        m(x, x, x)  # bidirectional: fitted per call, no update
        torch.testing.assert_close(m.running_second_q.double(), expected, rtol=1e-5, atol=1e-6)
    m.eval()
    m(batches[0], batches[0], batches[0], is_causal=True)
    torch.testing.assert_close(m.running_second_q.double(), expected, rtol=1e-5, atol=1e-6)
    assert int(m.num_batches_tracked) == 3


@pytest.mark.slow
def test_compiled_encoder_layer_takes_a_key_padding_mask(_fresh_dynamo):
    """nn.TransformerEncoderLayer turns a bool src_key_padding_mask into a float one
    before self_attn; its validation is an asynchronous assert in a compiled graph (no
    host read), so the layer compiles with fullgraph=True and equals eager on real rows."""
    torch.manual_seed(0)
    layer = _encoder_layer("positive").eval()
    x = _tokens(2, 12, 1)
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[1, 8:] = True
    ref = layer(x, src_key_padding_mask=pad)
    out = torch.compile(layer, fullgraph=True)(x, src_key_padding_mask=pad)
    torch.testing.assert_close(out[~pad], ref[~pad], rtol=1e-4, atol=1e-5)


def test_float_key_padding_mask_is_validated_in_eager_mode():
    """A float key_padding_mask (as nn.TransformerEncoderLayer passes it) blocks -inf and
    the dtype's minimum, keeps 0, and any other value raises a ValueError."""
    m = FavorAttention(16, 2, feature_map="positive", n_features=16, random_state=0).eval()
    x = _tokens(2, 6, 0)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    ref, _ = m(x, x, x, key_padding_mask=pad)
    for blocked in (float("-inf"), torch.finfo(torch.float32).min):
        fm = torch.zeros(2, 6).masked_fill(pad, blocked)
        assert torch.equal(m(x, x, x, key_padding_mask=fm)[0], ref)
    with pytest.raises(ValueError, match="float key_padding_mask may only hold 0"):
        m(x, x, x, key_padding_mask=torch.zeros(2, 6).masked_fill(pad, 1.0))


@pytest.mark.slow
def test_compiled_linear_attention_takes_an_sdpa_padding_mask(_fresh_dynamo):
    """An SDPA-style padding attn_mask (B, 1, 1, S) needs no mask values in a compiled
    graph (its float check is an asynchronous assert) and equals eager; an (L, S) mask
    would have to be read to tell causal from padding, so there it raises, saying what
    to pass instead."""
    from kernelkit.attention import linear_attention

    q, k, v = (_tokens(2, 12, i).view(2, 12, 2, 8).transpose(1, 2) for i in range(3))
    keep = torch.ones(2, 1, 1, 12, dtype=torch.bool)
    keep[1, ..., 9:] = False
    for mask in (keep, torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))):

        def f(q, k, v, mask=mask):
            return linear_attention(q, k, v, "positive", 16, random_state=0, attn_mask=mask)

        torch.testing.assert_close(
            torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v), rtol=1e-4, atol=1e-5
        )
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    with pytest.raises(Exception, match="cannot be read to tell a causal mask"):
        torch.compile(
            lambda q: linear_attention(q, q, q, "positive", 16, attn_mask=causal), fullgraph=True
        )(q)


def test_module_without_random_state_builds_on_the_meta_device():
    """Under torch.device('meta') (empty-weight initialisation before loading a
    checkpoint), the seed for random_state=None is still drawn on the CPU."""
    with torch.device("meta"):
        m = FavorAttention(16, 2, feature_map="positive", n_features=16)
    assert m.in_proj_weight.is_meta and m.projection.is_meta
