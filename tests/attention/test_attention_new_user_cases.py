"""A second new-user sweep of kernelkit.attention: the cases it found broken, one
regression test each (decoding-state copies, empty sequences as SDPA, ...)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv as _qkv  # noqa: E402

from kernelkit.attention import (  # noqa: E402
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
