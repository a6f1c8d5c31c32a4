"""Review of the day's changes, sixth session: cases the merged changes missed.

- The decoding states' feature fingerprint held the softmax scale as the exact
  ``repr`` of the float, while ``FavorAttention.step`` accepts any scale within
  ``1e-9`` (relative) of ``1 / sqrt(head_dim)``: a state made by
  ``init_decoding_state(..., projection=module.projection, scale=head_dim ** -0.5)``
  (the usual spelling of the scale, one ulp off ``1 / sqrt(head_dim)`` for head_dim
  8, 32, 48, ...) stepped in the module before the fingerprint, and was then refused
  as "the softmax scales differ"; ``restore`` refused its saved states the same way.
  The scales of two fingerprints are now compared as ``step`` compares them.
- The fingerprint was "the same for every dtype" only down to float32: a module
  converted to bfloat16 or float16 (its projection and running statistics rounded to
  half) refused the states saved from it in float32 ("the random projections
  differ"), as did a half copy loaded from its ``state_dict``. The fingerprint now
  also holds digests of the values rounded to float16 and bfloat16, and features held
  in half are compared with others at the half precision.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import FavorAttention, init_decoding_state  # noqa: E402

E, H = 16, 2  # head_dim 8: 8 ** -0.5 is one ulp off 1 / sqrt(8)
HD = E // H


def _seq(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _module():
    torch.manual_seed(1)
    return FavorAttention(E, H, n_features=16, random_state=0).double().eval()


def test_scale_spelled_head_dim_pow_minus_half_is_the_modules_scale():
    assert HD**-0.5 != 1.0 / math.sqrt(HD)  # the case: the two spellings differ by an ulp
    m = _module()
    x = _seq(2, 6, E)
    own = m.init_state(2)
    theirs = init_decoding_state(
        (2, H), HD, "positive", 16, projection=m.projection, scale=HD**-0.5, dtype=torch.float64
    )
    with torch.no_grad():
        out_own, own = m.step(x, x, x, own)
        out_theirs, theirs = m.step(x, x, x, theirs)
        # the same features and a scale one ulp apart: equal to float64 rounding of a few
        # exp / matmul stages on O(1) values (1e-12 is ~5e3 ulps of headroom)
        torch.testing.assert_close(out_theirs, out_own, rtol=1e-12, atol=1e-12)
        # saved states restore into each other's kind of state
        back = own.restore(theirs.state_dict())
        assert back.t == theirs.t
        again = theirs.restore(own.state_dict())
        assert again.t == own.t
        m.step(x[:, :1], x[:, :1], x[:, :1], back)
        m.step(x[:, :1], x[:, :1], x[:, :1], again)


def test_a_truly_other_scale_is_still_refused_by_restore():
    m = _module()
    own = m.init_state(1)
    other = init_decoding_state(
        (1, H), HD, "positive", 16, projection=m.projection, scale=0.5, dtype=torch.float64
    )
    with pytest.raises(ValueError, match="softmax scales differ"):
        own.restore(other.state_dict())


@pytest.mark.parametrize("feature_map", ["positive", "sderf"])
@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_state_of_a_float32_module_restores_into_it_converted_to_half(half, feature_map):
    # the fingerprint was "the same for every dtype" only down to float32: the module's
    # projection rounded to half digests otherwise, so a state saved from the float32
    # module (a cached prompt) was refused as "the random projections differ" by the
    # same module served in half precision, and by a half copy loaded from its state_dict
    torch.manual_seed(1)
    m = FavorAttention(E, H, feature_map=feature_map, n_features=16, random_state=0)
    x = _seq(2, 5, E).float()
    with torch.no_grad():
        m(x, x, x, is_causal=True)  # training mode: running statistics (sderf)
        m.eval()
        sd = m.step(x, x, x, m.init_state(2))[1].state_dict()
        served = FavorAttention(E, H, feature_map=feature_map, n_features=16, random_state=7)
        served.load_state_dict(m.state_dict())
        served = served.to(half).eval()
        for mod in (m.to(half), served):
            st = mod.init_state(2).restore(sd)
            assert st.t == 5
            out, _ = mod.step(x[:, :1].to(half), x[:, :1].to(half), x[:, :1].to(half), st)
            assert torch.isfinite(out).all()
        # another module's state stays refused in half precision
        other = FavorAttention(E, H, feature_map=feature_map, n_features=16, random_state=3)
        other.eval()
        with pytest.raises(ValueError, match="random projections differ"):
            served.init_state(2).restore(other.step(x, x, x, other.init_state(2))[1].state_dict())
