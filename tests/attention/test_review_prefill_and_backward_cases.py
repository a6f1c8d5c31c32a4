"""Review cases for the prefill through the causal kernel's forward (a block given to
``linear_attention_step`` without autograd) and for the causal backward's folded suffix
side: each against the causal full-sequence pass (float64) or autograd through it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv  # noqa: E402
from attention_helpers import rel_error as _rel  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)


def test_block_from_a_state_that_requires_grad_keeps_the_graph():
    """A state that carries autograd (a token whose key requires grad) then a 149-token
    block of plain inputs with grad enabled: the block cannot run the in-place kernel
    forward (it raised torch's in-place-on-a-view error); it steps with autograd, and
    the output and the key's gradient equal the causal pass."""
    q, k, v = qkv((2, 3, 150, 8), e=8, seed=4)
    w = torch.randn(2, 3, 149, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    kw = dict(random_state=0)
    k0 = k[..., 0, :].clone().requires_grad_(True)
    st = init_decoding_state((2, 3), 8, "positive", 16, dtype=torch.float64, **kw)
    _, st = linear_attention_step(q[..., 0, :], k0, v[..., 0, :], st)
    out, st = linear_attention_step(q[..., 1:, :], k[..., 1:, :], v[..., 1:, :], st)
    (out * w).sum().backward()
    kr = torch.cat([k0.detach()[..., None, :], k[..., 1:, :]], dim=-2).requires_grad_(True)
    ref = linear_attention(q, kr, v, "positive", 16, is_causal=True, **kw)[..., 1:, :]
    (ref * w).sum().backward()
    assert st.t == 150 and _rel(out.detach(), ref.detach()) < 1e-12
    assert _rel(k0.grad, kr.grad[..., 0, :]) < 1e-10
