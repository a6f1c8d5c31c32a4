"""Activation checkpointing of a FavorAttention called more than once per backward.

A checkpoint recomputes each call during the backward pass, and the recomputation must
use that call's features and statistics. The module kept only its last call's: with a
layer shared across depth, two views through one encoder, or several micro-batches
before one ``backward()``, every recomputation used the projection and running
statistics of the last call (after later redraws and updates), and the gradients were
off by 50-70% (relative, ``in_proj_weight``) with the loss unchanged.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from kernelkit.attention import FavorAttention

_CASES = [("positive", False, 1), ("sderf", True, None), ("gerf", True, 1), ("sderf", False, 1)]


def _model(name, redraw):
    torch.manual_seed(0)
    return FavorAttention(
        8, 2, feature_map=name, n_features=16, random_state=0, redraw_interval=redraw
    )


@pytest.mark.parametrize("name, causal, redraw", _CASES)
@pytest.mark.parametrize("reentrant", [False, True])
def test_two_checkpointed_calls_per_backward(name, causal, redraw, reentrant):
    m = _model(name, redraw)
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(2, 6, 8, generator=g)
    m(x0, x0, x0, is_causal=causal)  # an earlier call: statistics and counter move
    ref = copy.deepcopy(m)
    x1, x2 = (torch.randn(2, 6, 8, generator=g) for _ in range(2))

    def f(mod, x):
        return mod(x, x, x, is_causal=causal)[0]

    xs = [t.clone().requires_grad_(True) for t in (x1, x2)]
    loss = sum(checkpoint(lambda x: f(m, x), x, use_reentrant=reentrant).square().sum() for x in xs)
    loss.backward()
    rs = [t.clone().requires_grad_(True) for t in (x1, x2)]
    loss_ref = sum(f(ref, x).square().sum() for x in rs)
    loss_ref.backward()
    torch.testing.assert_close(loss, loss_ref, rtol=0, atol=0)
    torch.testing.assert_close(m.in_proj_weight.grad, ref.in_proj_weight.grad)
    for a, b in zip(xs, rs, strict=True):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("name, causal, redraw", _CASES)
def test_shared_layer_in_a_checkpointed_residual_stack(name, causal, redraw):
    """The attention's input is computed inside the checkpointed block (a layer norm), so
    the recomputation sees a new tensor with the same values."""
    m = _model(name, redraw)
    norm = torch.nn.LayerNorm(8)
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(2, 6, 8, generator=g)
    m(x0, x0, x0, is_causal=causal)
    ref = copy.deepcopy(m)

    def block(mod, h):
        u = norm(h)
        return h + mod(u, u, u, is_causal=causal)[0]

    x = torch.randn(2, 6, 8, generator=g)
    h, r = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out, out_ref = h, r
    for _ in range(3):  # one layer applied three times
        out = checkpoint(lambda t: block(m, t), out, use_reentrant=False)
        out_ref = block(ref, out_ref)
    out.square().sum().backward()
    out_ref.square().sum().backward()
    torch.testing.assert_close(m.in_proj_weight.grad, ref.in_proj_weight.grad)
    torch.testing.assert_close(h.grad, r.grad)


@pytest.mark.parametrize("name, causal, redraw", _CASES)
def test_reentrant_checkpoint_of_self_attention_arguments(name, causal, redraw):
    """``checkpoint(fn, x, x, x, use_reentrant=True)`` detaches each argument separately,
    so the recomputation's key is not its query: the call is found by value and keeps its
    self-attention (padded queries out of the fit)."""
    m = _model(name, redraw)
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(2, 6, 8, generator=g)
    m(x0, x0, x0, is_causal=causal)
    ref = copy.deepcopy(m)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    x = torch.randn(2, 6, 8, generator=g)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)

    def f(q, k, v):
        return m(q, k, v, key_padding_mask=pad, is_causal=causal)[0]

    out = checkpoint(f, a, a, a, use_reentrant=True)
    out.square().sum().backward()
    ref(b, b, b, key_padding_mask=pad, is_causal=causal)[0].square().sum().backward()
    torch.testing.assert_close(m.in_proj_weight.grad, ref.in_proj_weight.grad)


def test_a_second_backward_recomputes_with_the_same_calls():
    m = _model("positive", 1)
    g = torch.Generator().manual_seed(4)
    x0 = torch.randn(2, 6, 8, generator=g)
    m(x0, x0, x0)
    xs = [torch.randn(2, 6, 8, generator=g).requires_grad_(True) for _ in range(2)]
    loss = sum(checkpoint(lambda x: m(x, x, x)[0], x, use_reentrant=False).sum() for x in xs)
    loss.backward(retain_graph=True)
    first = m.in_proj_weight.grad.clone()
    m.in_proj_weight.grad = None
    loss.backward()
    torch.testing.assert_close(m.in_proj_weight.grad, first)


def test_a_call_no_longer_recorded_warns():
    from kernelkit.attention.module import _RECORDED_CALLS

    m = _model("positive", 1)
    x = torch.randn(2, 6, 8).requires_grad_(True)
    out = checkpoint(lambda t: m(t, t, t)[0], x, use_reentrant=False)
    for _ in range(_RECORDED_CALLS):  # later training calls push it out
        m(torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8))
    with pytest.warns(UserWarning, match="found no record of its call"):
        out.sum().backward()


def test_equal_inputs_with_different_features_warn():
    m = _model("positive", 1)
    x = torch.randn(2, 6, 8).requires_grad_(True)
    loss = sum(checkpoint(lambda t: m(t, t, t)[0], x, use_reentrant=False).sum() for _ in range(2))
    with pytest.warns(UserWarning, match="calls on equal inputs used different features"):
        loss.backward()


def test_records_are_not_pickled():
    import pickle

    m = _model("positive", 1)
    x = torch.randn(2, 6, 8)
    m(x, x, x)
    assert len(m.__dict__["_calls"]) == 1
    assert "_calls" not in pickle.loads(pickle.dumps(m)).__dict__
