"""FavorAttention, linear_attention and the decoding API inside training and serving code
(third new-user sweep): compiled training steps, module state, padded batched generation,
beam-search reordering of states, torch.func."""

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
