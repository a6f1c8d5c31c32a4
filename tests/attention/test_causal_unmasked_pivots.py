"""Without a mask the causal kernel skips the search for every chunk's first visible key
(it is the chunk's first key): the pivots, and so the outputs, are those of the search."""

import pytest
import torch

from kernelkit.attention import _linear as lin


@pytest.mark.parametrize("first_block", [True, False])
@pytest.mark.parametrize("jump", [0.0, 5.0, 200.0])
def test_unmasked_pivots_equal_the_searched_ones(first_block, jump):
    g = torch.Generator().manual_seed(7)
    B, n, C, M = 3, 4, 8, 5
    lk = torch.randn(B, n, C, M, generator=g, dtype=torch.float64)
    lk[:, 2, 3] += jump  # a key jump inside a chunk (beyond G for the largest)
    c0 = torch.full((B, M), lin._NEG, dtype=torch.float64)
    if not first_block:
        c0 = torch.randn(B, M, generator=g, dtype=torch.float64)
    G = lin._growth_bound(torch.float64)
    searched = lin._block_pivots(lk.clone(), c0, G, masked=True)
    direct = lin._block_pivots(lk.clone(), c0, G, masked=False)
    if searched is None:
        assert direct is None
        return
    for a, b in zip(searched, direct, strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        else:
            assert a == b


def test_unmasked_forward_matches_an_all_true_mask():
    # keep=None (no search) and an all-True keep (the search) give the same output
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 300, 8, generator=g, dtype=torch.float64) for _ in range(3))
    from kernelkit.attention import linear_attention

    kw = dict(feature_map="positive", n_features=16, is_causal=True, random_state=0)
    a = linear_attention(q, k, v, **kw)
    b = linear_attention(q, k, v, attn_mask=torch.ones(2, 1, 1, 300, dtype=torch.bool), **kw)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
