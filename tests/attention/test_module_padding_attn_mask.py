"""``FavorAttention`` takes nn.MultiheadAttention's ``attn_mask`` as key padding (the same
keys blocked in every row and every head of a batch element), alone or combined with the
causal mask, as ``linear_attention`` takes SDPA's: the same output and gradients as the
equivalent ``key_padding_mask``, and clear errors for masks it cannot apply."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

from kernelkit.attention import FavorAttention  # noqa: E402

N, L, E, H = 3, 7, 8, 2


def _setup(name="sderf"):
    fav = FavorAttention(E, H, feature_map=name, n_features=16, random_state=0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, L, E, generator=g)
    pad = torch.zeros(N, L, dtype=torch.bool)
    pad[0, :2] = True  # left padding
    pad[1, 5:] = True  # right padding
    pad[1, 3] = True  # a hole
    return fav, x, pad


def _run(fav, x, **kw):
    """Output and input gradient of a copy of ``fav`` (a training-mode call updates the
    running statistics of the fitted maps: every call starts from the same module)."""
    fav = copy.deepcopy(fav)
    xg = x.clone().requires_grad_(True)
    out, _ = fav(xg, xg, xg, **kw)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (gx,) = torch.autograd.grad((out * w).sum(), xg)
    return out.detach(), gx


def _per_head(mask):
    """(N, L, S) -> nn.MultiheadAttention's (N * num_heads, L, S) layout."""
    return mask.repeat_interleave(H, dim=0)


@pytest.mark.parametrize("name", ["positive", "sderf"])
@pytest.mark.parametrize("form", ["bool", "float"])
@pytest.mark.parametrize("causal", [False, True])
def test_padding_attn_mask_equals_key_padding_mask(name, form, causal):
    fav, x, pad = _setup(name)
    ref = _run(fav, x, key_padding_mask=pad, is_causal=causal)
    blocked = pad[:, None, :].expand(N, L, L)  # (N, L, S)
    if causal:
        blocked = blocked | torch.ones(L, L, dtype=torch.bool).triu(1)
    mask = _per_head(blocked)
    if form == "float":
        mask = torch.zeros(mask.shape).masked_fill(mask, float("-inf"))
    for m in (mask, mask.contiguous()):
        got = _run(fav, x, attn_mask=m)
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_two_dimensional_padding_mask_applies_to_every_batch_element():
    fav, x, _ = _setup()
    pad = torch.zeros(L, dtype=torch.bool)
    pad[[1, 4]] = True
    ref = _run(fav, x, key_padding_mask=pad.expand(N, L))
    got = _run(fav, x, attn_mask=pad.expand(L, L))
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_attn_mask_padding_combines_with_key_padding_mask():
    """A padding attn_mask and a key_padding_mask block the union of their keys."""
    fav, x, pad = _setup()
    other = torch.zeros(N, L, dtype=torch.bool)
    other[2, 6] = True
    other[0, 1] = True  # also in pad
    ref = _run(fav, x, key_padding_mask=pad | other)
    got = _run(fav, x, key_padding_mask=other, attn_mask=_per_head(pad[:, None, :].expand(N, L, L)))
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_attn_mask_that_blocks_nothing_is_no_mask():
    fav, x, _ = _setup()
    ref = _run(fav, x)
    for m in (torch.zeros(L, L, dtype=torch.bool), torch.zeros(N * H, L, L)):
        got = _run(fav, x, attn_mask=m)
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fully_padded_row_gives_zeros_as_with_key_padding_mask():
    fav, x, pad = _setup("positive")
    pad[2] = True
    ref, _ = _run(fav, x, key_padding_mask=pad)
    got, _ = _run(fav, x, attn_mask=_per_head(pad[:, None, :].expand(N, L, L)))
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[2], fav.out_proj.bias.detach().expand(L, E))


def test_masks_it_cannot_apply_raise():
    fav, x, pad = _setup()
    # different keys in different heads of one batch element
    per_head = _per_head(pad[:, None, :].expand(N, L, L)).clone()
    per_head[1, :, 6] = True  # batch element 0, head 1 only
    with pytest.raises(ValueError, match="different heads"):
        fav(x, x, x, attn_mask=per_head)
    # a key blocked in some rows only (neither padding nor causal)
    rows = pad[:, None, :].expand(N, L, L).clone()
    rows[0, 3, 4] = True
    with pytest.raises(ValueError, match="key-padding one"):
        fav(x, x, x, attn_mask=_per_head(rows))
    # the transposed causal mask (padding-like rows nowhere)
    anti = nn.Transformer.generate_square_subsequent_mask(L).T.contiguous()
    with pytest.raises(ValueError, match="only the causal attn_mask"):
        fav(x, x, x, attn_mask=anti)
