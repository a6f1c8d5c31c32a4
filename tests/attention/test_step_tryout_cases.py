"""Tryout of the decoding step as a demanding user: the key-overflow check of
``linear_attention_step`` against ``linear_attention`` (finite keys whose row terms are
finite but whose sum over the features overflows; huge padded keys; GQA)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import rel_error as _rel  # noqa: E402
from attention_helpers import step_in_blocks  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

# float32: the outputs of the step and of the causal pass are ratios of sums of the same
# features, each exp of a log feature of size ~|x| |w| <= ~10 with a relative error of a
# few eps there (eps = 1.2e-7): ~1e-6 relative; 1e-5 leaves a margin of 10
F32_TOL = 1e-5


def _qkv(L, hkv=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, L, 8, generator=g)
    k, v = (torch.randn(1, hkv, L, 8, generator=g) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("blocks", [[1] * 8, [5, 3], [8]])
def test_a_key_with_a_finite_row_term_whose_feature_sum_overflows_decodes(blocks):
    # a finite float32 key whose squared norm (x scale) is ~2.6e37: its row term
    # -|y|^2 / 2 is finite, so linear_attention (which checks the keys' row terms) gives
    # a finite output; the sum of that row term over M = 256 features is -3.3e39, past
    # float32's 3.4e38, and the step's check read that sum as an overflowing key
    # (ValueError "the squared norm of a key") for a key linear_attention accepts
    q, k, v = _qkv(8)
    k[0, 1, 3] *= 4e18
    ref = linear_attention(q, k, v, "positive", 256, is_causal=True, random_state=0)
    assert torch.isfinite(ref).all()
    st = init_decoding_state((1, 2), 8, "positive", 256, random_state=0)
    out, _ = step_in_blocks(q, k, v, st, blocks)
    assert _rel(out, ref) < F32_TOL


@pytest.mark.parametrize("blocks", [[1] * 70, [5] * 14, [70]])
def test_a_huge_padded_key_raises_as_in_linear_attention(blocks):
    # a padded finite key whose squared norm overflows: linear_attention checks its keys'
    # row terms before the mask, so it raises; the step (token, chunk and kernel paths)
    # does the same, and with check_finite=False equals the causal pass without the key
    q, k, v = _qkv(70)
    k[0, 1, 2] *= 1e20
    pad = torch.zeros(1, 2, 70, dtype=torch.bool)
    pad[0, 1, 2] = True
    with pytest.raises(ValueError, match="squared norm of a key"):
        linear_attention(
            q, k, v, "positive", 16, is_causal=True, random_state=0, key_padding_mask=pad
        )
    st = init_decoding_state((1, 2), 8, "positive", 16, random_state=0)
    with torch.no_grad(), pytest.raises(ValueError, match=r"squared norm of a key.*k_t"):
        step_in_blocks(q, k, v, st, blocks, pad=pad)
    k0 = k.clone()
    k0[0, 1, 2] = 0.0  # a padded key's value does not matter to the causal pass
    ref = linear_attention(
        q, k0, v, "positive", 16, is_causal=True, random_state=0, key_padding_mask=pad
    )
    with torch.no_grad():
        out, _ = step_in_blocks(q, k, v, st, blocks, pad=pad, check_finite=False)
    assert _rel(out, ref) < F32_TOL


def test_gqa_huge_query_and_key_as_in_linear_attention():
    # GQA (grouped state, 2 query heads per key head): a query of norm ~1e20 decodes
    # finitely and equals the causal pass; a key of norm ~1e20 raises in both
    q, k, v = _qkv(12, hkv=1)
    q[0, 1, 4] *= 1e20
    ref = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0, enable_gqa=True)
    st = init_decoding_state(
        (1, 2), 8, "positive", 16, random_state=0, enable_gqa=True, num_kv_heads=1
    )
    out, _ = step_in_blocks(q, k, v, st, [1] * 6 + [6], enable_gqa=True)
    assert torch.isfinite(out).all() and _rel(out, ref) < F32_TOL
    k[0, 0, 5] *= 1e20
    with pytest.raises(ValueError, match="squared norm of a key"):
        linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0, enable_gqa=True)
    with pytest.raises(ValueError, match="squared norm of a key"):
        linear_attention_step(q[..., 5, :], k[..., 5, :], v[..., 5, :], st, enable_gqa=True)
