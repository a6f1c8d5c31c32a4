"""An independent tryout of kernelkit.attention with the user guide as the only map: one
regression test per case it found broken (non-bool ``is_causal`` / ``chunk_size``, the
module's constructor arguments, causal training with no keys, fully padded sequences in
the running statistics), and checks of guide claims no earlier sweep covered (``scale=``
against pre-scaled inputs, strided inputs, inputs without a head axis)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv as _qkv  # noqa: E402

from kernelkit.attention import FavorAttention, attention_moments, linear_attention  # noqa: E402
from kernelkit.kernels import softmax_attention  # noqa: E402

ALL_MAPS = (
    "positive",
    "hyperbolic",
    "gerf",
    "saderf",
    "aderf",
    "sderf",
    "trig",
    "hybrid_angular",
    "relu",
    "elu",
)
RUNNING = ("mean_q", "second_q", "mean_k", "second_k")


# ------------------------------------------------------------------ argument checks
@pytest.mark.parametrize("bad", ["yes", 1, 0.0, torch.tensor(True)])
def test_non_bool_is_causal_is_refused_by_name(bad):
    """SDPA and softmax_attention take a bool ``is_causal``; a string (or any other
    truthy object) used to select causal attention silently."""
    q, k, v = _qkv((1, 2, 5, 4))
    with pytest.raises(TypeError, match="is_causal"):
        linear_attention(q, k, v, "positive", 16, is_causal=bad, random_state=0)
    fav = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(TypeError, match="is_causal"):
        fav(x, x, x, is_causal=bad)


def test_bool_chunk_size_is_refused():
    """``True`` is an integral power of two to Python; as a chunk length it is a slip."""
    q, k, v = _qkv((1, 2, 5, 4))
    with pytest.raises(ValueError, match="chunk_size"):
        linear_attention(q, k, v, "positive", 16, is_causal=True, chunk_size=True)
    with pytest.raises(ValueError, match="chunk_size"):
        FavorAttention(8, 2, chunk_size=True)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"kdim": 0}, "kdim"),
        ({"kdim": 6.5}, "kdim"),
        ({"vdim": -1}, "vdim"),
        ({"vdim": True}, "vdim"),
        ({"dropout": "a"}, "dropout"),
        ({"dropout": None}, "dropout"),
        ({"momentum": "a"}, "momentum"),
    ],
)
def test_module_constructor_names_the_bad_argument(kwargs, name):
    """kdim = 0 or 6.5 used to build a module, vdim = -1 failed in torch.empty, and a
    non-numeric dropout / momentum raised float()'s error without the argument's name."""
    with pytest.raises((TypeError, ValueError), match=name):
        FavorAttention(8, 2, **kwargs)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"key_padding_mask": "pad"}, "key_padding_mask"),
        ({"attn_mask": "causal"}, "attn_mask"),
        ({"projection": "W"}, "projection"),
        ({"projection": torch.randn(16, 4, dtype=torch.complex128)}, "projection"),
    ],
)
def test_non_array_masks_and_projections_are_named(kwargs, name):
    """A string mask or projection used to fail in torch.as_tensor ("new(): invalid data
    type 'str'") without the argument's name, and a complex projection was cast to its
    real part with a warning."""
    q, k, v = _qkv((1, 2, 5, 4))
    with pytest.raises(TypeError, match=name):
        linear_attention(q, k, v, "positive", 16, random_state=0, **kwargs)
    if name != "projection":
        fav = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0)
        x = torch.randn(2, 5, 8)
        with pytest.raises(TypeError, match=name):
            fav(x, x, x, **kwargs)
    with pytest.raises(TypeError, match="q"):
        linear_attention([["a"]], [["b"]], [["c"]])


@pytest.mark.parametrize("bad", ["yes", 1, torch.tensor(True)])
def test_enable_gqa_must_be_a_bool(bad):
    """As ``is_causal``: a string, an int or a tensor used to select GQA by truthiness."""
    q = torch.randn(1, 4, 5, 8)
    k = v = torch.randn(1, 2, 5, 8)
    with pytest.raises(TypeError, match="enable_gqa"):
        linear_attention(q, k, v, enable_gqa=bad)


# ------------------------------------------------------------------ running statistics
def test_causal_training_without_keys_gives_zeros_and_tracks_nothing():
    """As SDPA (and linear_attention), no keys (S = 0) give zeros; the causal training
    forward of a fitted map used to raise while updating its running statistics from the
    empty keys."""
    fav = FavorAttention(8, 2, feature_map="sderf", n_features=16, random_state=0)
    x = torch.randn(2, 5, 8)
    out, _ = fav(x, x[:, :0], x[:, :0], is_causal=True)
    assert out.shape == x.shape
    torch.testing.assert_close(out, fav.out_proj.bias.expand_as(out).detach())
    assert int(fav.num_batches_tracked) == 0


@pytest.mark.parametrize("momentum", [None, 0.3])
def test_fully_padded_sequences_do_not_dilute_the_running_statistics(momentum):
    """Padded keys (and, in self-attention, queries) stay out of the fitted parameters:
    adding a fully padded sequence to a batch must leave the running statistics as they
    are for the real sequences alone. They used to enter the batch mean as zeros
    (halving the statistics here)."""
    x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(1))
    x2 = torch.cat([x, 5.0 * torch.randn(1, 6, 8)])
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1] = True
    stats = []
    for inp, mask in ((x, pad[:1]), (x2, pad)):
        torch.manual_seed(0)  # same in-projection weights
        fav = FavorAttention(8, 2, feature_map="sderf", n_features=16, momentum=momentum)
        for _ in range(2):
            fav(inp, inp, inp, is_causal=True, key_padding_mask=mask)
        stats.append([getattr(fav, f"running_{n}").clone() for n in RUNNING])
    assert int(fav.num_batches_tracked) == 2
    for a, b in zip(*stats, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("momentum", [None, 0.3])
def test_an_all_padded_batch_tracks_nothing(momentum):
    """A training batch whose every sequence is fully padded has no statistics: the
    running statistics and ``num_batches_tracked`` stay as they are (decided on the
    device, without a host read), and the next real batch is the first tracked one
    (weight 1, as if the padded batch had not been seen)."""
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(2))
    all_pad = torch.ones(2, 6, dtype=torch.bool)
    no_pad = torch.zeros(2, 6, dtype=torch.bool)
    stats = []
    for first in (True, False):
        torch.manual_seed(0)  # same in-projection weights
        fav = FavorAttention(8, 2, feature_map="sderf", n_features=16, momentum=momentum)
        if first:
            fav(x, x, x, is_causal=True, key_padding_mask=all_pad)
            assert int(fav.num_batches_tracked) == 0
            for n in RUNNING:
                assert not getattr(fav, f"running_{n}").any()
        fav(x, x, x, is_causal=True, key_padding_mask=no_pad)
        assert int(fav.num_batches_tracked) == 1
        stats.append([getattr(fav, f"running_{n}").clone() for n in RUNNING])
    for a, b in zip(*stats, strict=True):
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ------------------------------------------------------------------ guide claims
@pytest.mark.parametrize("name", ALL_MAPS)
@pytest.mark.parametrize("causal", [False, True])
def test_scale_argument_equals_pre_scaled_inputs(name, causal):
    """The guide: inputs are scaled to ``sqrt(scale) q``, ``sqrt(scale) k`` so that
    ``exp(x.y)`` is the attention kernel. So ``scale=s`` must equal the default scale
    ``1/sqrt(d)`` applied to ``q r``, ``k r`` with ``r^2 = s sqrt(d)``, for every map and
    the fitted parameters too (their moments are those of the scaled inputs). float64:
    the two differ by the rounding of the products only."""
    if causal and name in ("trig", "hybrid_angular"):
        pytest.skip("bidirectional only")
    d, s = 8, 0.37
    q, k, v = _qkv((2, 2, 12, d), scale=0.6)
    r = math.sqrt(s * math.sqrt(d))
    kw = {"random_state": 0, "is_causal": causal, "chunk_size": 4}
    mom_args = {}
    if causal and name in ("gerf", "saderf", "aderf", "sderf"):
        # moments of the scaled inputs are the same either way (scale given or applied)
        mom_args = {"moments": attention_moments(q, k, scale=s)}
        assert torch.allclose(
            attention_moments(q * r, k * r).second_x, mom_args["moments"].second_x
        )
        a = linear_attention(q, k, v, name, 64, scale=s, **kw, **mom_args)
        b = linear_attention(q * r, k * r, v, name, 64, scale=None, **kw, **mom_args)
    else:
        a = linear_attention(q, k, v, name, 64, scale=s, **kw)
        b = linear_attention(q * r, k * r, v, name, 64, **kw)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    # and the same scale in the exact reference (a loose sanity bound: M = 64 features)
    if name in ("positive", "sderf", "gerf") and not causal:
        exact = softmax_attention(q, k, v, scale=s)
        assert float((a - exact).norm() / exact.norm()) < 0.5


@pytest.mark.parametrize("causal", [False, True])
def test_strided_expanded_and_headless_inputs_equal_the_contiguous_call(causal):
    """Transposed (non-contiguous) queries, stride-0 expanded keys shared by every head,
    and (B, L, d) inputs without a head axis give the contiguous 4-D call's output."""
    q, k, v = _qkv((2, 3, 10, 4), e=5)
    kw = {"random_state": 0, "is_causal": causal, "chunk_size": 4}
    ref = linear_attention(q, k[:, :1].contiguous().expand(2, 3, 10, 4).contiguous(), v, **kw)
    qt = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not qt.is_contiguous()
    ke = k[:, :1].expand(2, 3, 10, 4)
    assert ke.stride(1) == 0
    out = linear_attention(qt, ke, v, **kw)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    # no head axis: (B, L, d) is the per-head call
    ref3 = linear_attention(q[:, 1], k[:, 1], v[:, 1], **kw)
    torch.testing.assert_close(ref3, linear_attention(q, k, v, **kw)[:, 1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ["gerf", "saderf", "aderf", "sderf"])
def test_attention_moments_broadcast_like_linear_attention(name):
    """One key / value head for every query head (multi-query attention): the leading
    dims broadcast in linear_attention, and ``moments=attention_moments(q, k)`` of the
    same inputs gives its own fit (it used to demand equal leading dims)."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 10, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 1, 10, 8, generator=g, dtype=torch.float64) for _ in range(2))
    own = linear_attention(q, k, v, name, 16, random_state=0)
    mom = attention_moments(q, k)
    assert mom.mean_x.shape == (2, 4, 8) and mom.mean_y.shape == (2, 1, 8)
    given = linear_attention(q, k, v, name, 16, random_state=0, moments=mom)
    torch.testing.assert_close(given, own, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="broadcastable"):
        attention_moments(q, k.expand(2, 3, 10, 8).contiguous())
