"""A user training with the causal kernel's backward (one reverse pass over the blocks
from the forward's saved block states): gradients against autograd through the dense
causal formula (FAVOR# eq. 4) for every positive map, masks and ragged lengths, the
chunk-by-chunk path, partial ``requires_grad``, checkpointing, autocast, GQA and
compiled training steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import attention_moments, linear_attention  # noqa: E402


def _qkv4(B=2, H=2, L=45, d=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, d, generator=g) for _ in range(3)]


@pytest.mark.slow
def test_compiled_causal_training_step_with_left_padding_equals_eager():
    """torch.compile(fullgraph=True) of a causal training step whose padding mask hides
    the first keys (left padding: the first block runs chunk by chunk): the compiled
    backward op gives eager's gradients instead of failing in its local autograd."""
    q, k, v = _qkv4()
    w = _qkv4(seed=2)[0]
    mask = torch.zeros(2, 45, dtype=torch.bool)
    mask[0, :3] = True  # left padding of the first sequence
    mom = attention_moments(*_qkv4(seed=3)[:2])

    def step(q, k, v):
        out = linear_attention(
            q, k, v, "sderf", 16, is_causal=True, moments=mom, random_state=0,
            chunk_size=8, key_padding_mask=mask,
        )  # fmt: skip
        return (out * w).sum()

    def grads(f):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        f(*leaves).backward()
        return [t.grad for t in leaves]

    torch._dynamo.reset()
    try:
        got = grads(torch.compile(step, fullgraph=True, backend="aot_eager"))
    finally:
        torch._dynamo.reset()
    for x, y in zip(got, grads(step), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
