"""Review cases for the causal kernel's accelerator settings and the host fits: the fits
of the matrix maps on the host where the moments live on an accelerator, the chunk
states chained by prefix sums (forced on the CPU) and the first-visible-key rule, each
against what the CPU computes or FAVOR# eq. 4 computed densely."""

from __future__ import annotations

from dataclasses import fields

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import causal_dense_log  # noqa: E402

from kernelkit.attention import _maps, attention_moments, draw_features  # noqa: E402
from kernelkit.features import favor  # noqa: E402


def _on_fake_accelerator(monkeypatch, mom):
    """``mom`` with its tensors on the ``meta`` device (not the CPU, so the fits take the
    accelerator's route), whose host copies (``.cpu()``) are the real moments: the fit on
    the host runs on real numbers, and the parameters go back to ``meta``."""
    pairs = [(getattr(mom, f.name).to("meta"), getattr(mom, f.name)) for f in fields(mom)]
    real_cpu = torch.Tensor.cpu

    def cpu(self, *args, **kw):
        for dev, host in pairs:
            if dev is self:
                return host
        return real_cpu(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "cpu", cpu)
    return favor.Moments(*(dev for dev, _ in pairs))


def test_host_fit_keeps_one_rotation_for_both_sides_of_sderf(monkeypatch):
    """SDERF's fit is one rotation for both sides (``B_x is B_y``: ``symmetric``), and
    its log map then has one weight for queries and keys (``W_q is W_k``, which a
    decoding state uses to compute both sides' features in one product). The fit on the
    host must bring the parameters back as they were fitted: moving ``B_x`` and ``B_y``
    one by one made two tensors, parameters that look edited (another branch of
    ``derf_log_weights``, two weights, two feature products per decoding step)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 24, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 24, 4, generator=g, dtype=torch.float64) * 0.7
    mom = attention_moments(q, k)
    on_cpu = favor.fit_derf("sderf", mom)
    assert on_cpu.symmetric  # what the fit gives, and what the CPU keeps
    dev = _on_fake_accelerator(monkeypatch, mom)
    params = _maps._fit_on_host("sderf", dev)
    assert params.B_x.is_meta and params.a.is_meta  # the host fit ran, moved back
    assert params.symmetric and params.orthogonal and params.rotate_projections
    W = torch.as_tensor(draw_features("sderf", 8, 4, 0)["W"]).to("meta")
    fmap = _maps.build_log_map("sderf", W, dev, 4)
    assert fmap.W_q is fmap.W_k
    # ADERF's two sides stay two tensors
    aderf = _maps._fit_on_host("aderf", dev)
    assert aderf.B_x.is_meta and aderf.B_y.is_meta and not aderf.symmetric


# --------------------------------------------------------------------------------------
# the decoding prefill on the accelerator's settings (prefix sums, blocks of many chunks)


def _prefill_setup(monkeypatch, chunk=8, rows=64):
    """The prefill of ``linear_attention_step`` as on an accelerator, on the CPU: chunks
    of ``chunk`` tokens, blocks of ``rows`` rows, chunk states chained by prefix sums.
    Returns spies on the batched block (True where it ran) and on the prefix sums."""
    from attention_helpers import spy_paths

    from kernelkit.attention import _linear as lin
    from kernelkit.attention import decoding

    monkeypatch.setattr(decoding, "_PREFILL_CHUNK", chunk)
    monkeypatch.setattr(lin, "_block_rows", lambda n, ch: rows)
    monkeypatch.setattr(lin, "_parallel_scan", lambda device: True)
    prefix = []
    orig = lin._prefix_states

    def spy(*args, **kw):
        prefix.append(True)
        return orig(*args, **kw)

    monkeypatch.setattr(lin, "_prefix_states", spy)
    return spy_paths(monkeypatch, decoding, "_fwd_block"), prefix


def _tol(dtype, *xs):
    """``10 (1 + Lam) eps``: the weights come from log features of magnitude up to ``Lam``
    (here ``|w| |x| + |x|^2 / 2`` of the scaled inputs, ``|w| <= 4``), whose rounding
    ``Lam eps`` is a relative error of each weight; the factor covers the sums."""
    big = max(float(x.norm(dim=-1).max()) for x in xs) * 0.5**0.5  # scale 1/sqrt(4)
    return 10 * (1 + 4 * big + big**2 / 2) * torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("where", ["above", "below"])
def test_prefill_by_prefix_sums_from_a_state_far_from_the_new_keys(where, dtype, monkeypatch):
    """A 48-token prefill (one block of six chunks, states by prefix sums) from a state
    of six tokens whose key maxima lie far above the new keys (their norms x8: the new
    terms are e^-15 to e^-40 of the state's) or far below (the state's keys x8); a second
    row reset before the block, whose first 11 tokens are padded (the first-visible-key
    rule keeps it batched), and a third padded in the middle. Every output equals the
    causal pass over the whole sequence (float64), the reset row's prefix left out."""
    from kernelkit.attention import init_decoding_state, linear_attention, linear_attention_step

    fwd, prefix = _prefill_setup(monkeypatch)
    g = torch.Generator().manual_seed(7)
    P, T, shape = 6, 48, (3, 2)
    q = torch.randn(*shape, P + T, 4, generator=g, dtype=torch.float64) * 0.5
    k = torch.randn(*shape, P + T, 4, generator=g, dtype=torch.float64) * 0.5
    v = torch.randn(*shape, P + T, 3, generator=g, dtype=torch.float64)
    if where == "above":
        k[..., P:, :] *= 8.0
    else:
        k[..., :P, :] *= 8.0
    q, k, v = (t.to(dtype) for t in (q, k, v))
    pad = torch.zeros(*shape, P + T, dtype=torch.bool)
    pad[1, :, : P + 11] = True  # reset, then left padding
    pad[2, :, P + 20 : P + 30] = True
    kw = dict(random_state=0)
    with torch.no_grad():
        st = init_decoding_state(shape, 4, "positive", 8, e=3, dtype=dtype, **kw)
        _, st = linear_attention_step(q[..., :P, :], k[..., :P, :], v[..., :P, :], st)
        st = st.reset(torch.tensor([False, True, False]))
        out, st = linear_attention_step(
            q[..., P:, :], k[..., P:, :], v[..., P:, :], st, key_padding_mask=pad[..., P:]
        )
    ref = linear_attention(
        *(t.double() for t in (q, k, v)), "positive", 8, is_causal=True, key_padding_mask=pad, **kw
    )[..., P:, :]
    assert fwd == [True] and prefix  # one batched block, states by prefix sums
    assert torch.all(out[1, :, :11] == 0)  # no key seen yet
    tol = _tol(dtype, q, k) * float(v.abs().max())
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=tol)


def test_prefill_from_a_state_does_not_take_the_first_visible_key_for_the_first_key(
    monkeypatch,
):
    """A state of five tokens whose keys lie about 200 nats below the new ones (norms
    x40), then a block whose first key is padded (float32): the block's first query sees
    only the state's keys, so the growth from them to the block's keys (beyond the bound
    of 60) must send the block chunk by chunk, and that query gets the state's average
    of values (the first-visible-key rule, for chunks with no key before them, must not
    apply: with it, the query's stabiliser would sit 200 nats above its keys and give
    zero)."""
    from kernelkit.attention import init_decoding_state, linear_attention, linear_attention_step

    fwd, _ = _prefill_setup(monkeypatch)
    g = torch.Generator().manual_seed(1)
    P, T = 5, 24
    q = torch.randn(1, 2, P + T, 4, generator=g, dtype=torch.float64) * 0.5
    k = torch.randn(1, 2, P + T, 4, generator=g, dtype=torch.float64) * 0.5
    v = torch.randn(1, 2, P + T, 3, generator=g, dtype=torch.float64)
    k[..., :P, :] *= 40.0
    q, k, v = (t.float() for t in (q, k, v))
    pad = torch.zeros(1, 2, P + T, dtype=torch.bool)
    pad[..., P] = True
    kw = dict(random_state=0)
    with torch.no_grad():
        st = init_decoding_state((1, 2), 4, "positive", 8, e=3, dtype=torch.float32, **kw)
        _, st = linear_attention_step(q[..., :P, :], k[..., :P, :], v[..., :P, :], st)
        out, _ = linear_attention_step(
            q[..., P:, :], k[..., P:, :], v[..., P:, :], st, key_padding_mask=pad[..., P:]
        )
    ref = linear_attention(
        *(t.double() for t in (q, k, v)), "positive", 8, is_causal=True, key_padding_mask=pad, **kw
    )[..., P:, :]
    assert fwd == [False]  # declined: chunk by chunk
    assert float(ref[..., 0, :].abs().min()) > 1e-3  # the first query's output is not 0
    tol = _tol(torch.float32, q, k) * float(v.abs().max())
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=tol)


# --------------------------------------------------------------------------------------
# the causal kernel: float32 keys rising by about the growth bound across a block, padded


@pytest.mark.parametrize("rise,prefix_sums", [(55.0, True), (70.0, False)])
def test_float32_rising_keys_with_padding_everywhere(rise, prefix_sums, monkeypatch):
    """Float32, one block of 12 chunks of 8 on the accelerator's settings, key log
    features rising steadily by ``rise`` nats (55: the pivots spread by less than the
    bound of 60, states by prefix sums, forward and backward; 70: the chain), rows
    padded at the start (past the first chunk: pivots -1e30, the first-visible-key rule),
    in the middle (two whole chunks), at the end, everywhere, and not at all. Outputs and
    gradients equal eq. 4 (float64, log space) to float32's rounding of the features."""
    from attention_helpers import LinearLogFeatures, spy_paths

    from kernelkit.attention import _linear as lin

    monkeypatch.setattr(lin, "_parallel_scan", lambda device: True)
    prefix = spy_paths(monkeypatch, lin, "_prefix_states")
    suffix = spy_paths(monkeypatch, lin, "_suffix_prefix_sums")
    fwd = spy_paths(monkeypatch, lin, "_fwd_block")
    L, d, M = 96, 4, 6
    g = torch.Generator().manual_seed(11)
    q = torch.randn(5, L, d, generator=g, dtype=torch.float64)
    k = torch.randn(5, L, d, generator=g, dtype=torch.float64) * 0.5
    k[..., 0] += torch.linspace(0.0, rise, L, dtype=torch.float64)
    v = torch.randn(5, L, 3, generator=g, dtype=torch.float64)
    W = torch.randn(d, M, generator=g, dtype=torch.float64) * 0.5
    W[0] = 1.0  # every feature rises with the keys
    q, k, v, W = (t.float() for t in (q, k, v, W))
    pos = torch.arange(L)
    keep = torch.stack(
        [
            pos >= 13,  # left: the first chunk fully padded, the second from row 13
            (pos < 24) | (pos >= 40),  # the middle: chunks 3 and 4
            pos < 70,  # the end
            torch.zeros(L, dtype=torch.bool),  # everything
            torch.ones(L, dtype=torch.bool),
        ]
    )
    feat = LinearLogFeatures(W)
    args = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = lin.causal_exp(*args, keep, feat, 8, L)
    ref_args = [t.double().clone().requires_grad_(True) for t in (q, k, v)]
    ref = causal_dense_log(ref_args[0] @ W.double(), ref_args[1] @ W.double(), ref_args[2], keep)
    # features of magnitude up to Lam: a relative error Lam eps of every weight
    lam = float((q @ W).abs().max() + (k @ W).abs().max())
    tol = 10 * (1 + lam) * torch.finfo(torch.float32).eps
    assert torch.isfinite(out).all() and torch.all(out[~keep & (pos < 13)] == 0)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=tol * float(v.abs().max()))
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out.double() * w).sum(), args)
    ref_grads = torch.autograd.grad((ref * w).sum(), ref_args)
    for a, b in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.double(), b, rtol=0, atol=tol * float(b.abs().max()))
    assert fwd == [True]  # one batched block
    assert prefix == ([True, True] if prefix_sums else [])  # forward, backward
    assert suffix == ([True] if prefix_sums else [])
