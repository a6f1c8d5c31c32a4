"""Integer seeds beyond 64 bits in linear_attention.

NumPy seeds a generator from an integer of any size, and ``draw_features``,
``init_decoding_state`` and ``FavorAttention`` accept one; ``linear_attention`` passed
every integer seed to its projection-drawing custom op, whose ``int`` argument is a
64-bit integer, and a seed of 2**63 or more raised "Expected a value of type 'int' for
argument 'seed' but instead found type 'int'".
"""

from __future__ import annotations

import pytest
import torch

from kernelkit.attention import draw_features, linear_attention


@pytest.mark.parametrize("seed", [2**63 - 1, 2**63, 2**64 + 5, 2**70])
@pytest.mark.parametrize("name", ["positive", "trig", "sderf", "hybrid_angular"])
def test_large_integer_seeds_draw_as_numpy_does(seed, name):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out = linear_attention(q, k, v, name, 72, random_state=seed)
    ref = linear_attention(q, k, v, name, 72, projection=draw_features(name, 72, 4, seed))
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@pytest.mark.slow
def test_large_integer_seed_compiles_fullgraph():
    """Kept as an op argument (a decimal string): drawn once, no graph break."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))

    def f(q, k, v):
        return linear_attention(q, k, v, "positive", 16, random_state=2**70)

    torch._dynamo.reset()
    try:
        torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v))
    finally:
        torch._dynamo.reset()
