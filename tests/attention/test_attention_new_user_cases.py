"""A second new-user sweep of kernelkit.attention: the cases it found broken, one
regression test each (decoding-state copies, empty sequences as SDPA, ...)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv as _qkv  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)


# ------------------------------------------------------------------ decoding
def test_deepcopy_of_an_empty_state_is_a_fresh_state():
    """The documented way to share a state between sequences is to step copies of it;
    a copy of an *empty* state used to be refused as stale (copy.deepcopy advances the
    copied tensor's in-place counter). A copy of a stale state stays stale."""
    q, k, v = _qkv((2, 3, 4, 5))
    empty = init_decoding_state((2, 3), 5, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    ref = linear_attention(q, k, v, "positive", 16, random_state=0, is_causal=True)
    with torch.no_grad():
        for _ in range(2):  # two sequences from one shared empty state
            st = copy.deepcopy(empty)
            for t in range(4):
                out, st = linear_attention_step(
                    q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=True
                )
            torch.testing.assert_close(out, ref[..., -1, :], rtol=1e-12, atol=1e-12)
        linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], empty, inplace=True)
    # empty is now stale (stepped in place and not the returned state), and so is its copy
    for st in (empty, copy.deepcopy(empty)):
        with pytest.raises(ValueError, match="stale"):
            linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], st)


def test_empty_prefill_block_returns_an_empty_output_and_the_same_state():
    """A prompt of length 0 (T = 0) used to raise a shape error."""
    q, k, v = _qkv((2, 3, 4, 5))
    st = init_decoding_state((2, 3), 5, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    out, st2 = linear_attention_step(q[..., :0, :], k[..., :0, :], v[..., :0, :], st)
    assert out.shape == (2, 3, 0, 3) and st2 is st and st2.t == 0
    m = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0).eval()
    x = torch.randn(2, 0, 8)
    y, ms = m.step(x, x, x, m.init_state(2))
    assert y.shape == (2, 0, 8) and ms.t == 0


# ------------------------------------------------------------------ empty sequences
@pytest.mark.parametrize(
    "name,causal",
    [("positive", False), ("positive", True), ("sderf", False), ("sderf", True), ("trig", False)],
)
def test_empty_sequences_give_sdpa_outputs(name, causal):
    """L = 0: an empty output; S = 0: zeros (no visible key), as SDPA; gradients flow
    (zero). Both used to raise 'empty attention input'."""
    q, k, v = _qkv((2, 3, 5, 4), (2, 3, 6, 4), e=3)
    mom = attention_moments(q, k) if causal else None
    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases = [(q[..., :0, :], k, v)]  # L = 0
    if not causal:
        cases.append((q, k[..., :0, :], v[..., :0, :]))  # S = 0
    else:
        cases.append((q[..., :0, :], k[..., :0, :], v[..., :0, :]))  # L = S = 0
    for a, b, c in cases:
        ins = [t.clone().requires_grad_(True) for t in (a, b, c)]
        out = linear_attention(*ins, name, 16, random_state=0, is_causal=causal, moments=mom)
        torch.testing.assert_close(out, sdpa(a, b, c), rtol=0, atol=0)
        out.sum().backward()
        assert all(t.grad is not None and not t.grad.any() for t in ins)
    # module: MultiheadAttention's shapes (S = 0 gives out_proj(0), its bias)
    m = FavorAttention(8, 2, feature_map=name, n_features=16, random_state=0).train()
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    m.load_state_dict(mha.state_dict(), strict=False)
    x = torch.randn(2, 5, 8)
    x0 = x[:, :0]
    for a, b in ((x0, x), (x, x0)) if not causal else ((x0, x0),):
        out, _ = m(a, b, b, is_causal=causal)
        torch.testing.assert_close(out, mha(a, b, b, need_weights=False)[0])
    assert int(m.num_batches_tracked) == 0  # an empty batch has no statistics
