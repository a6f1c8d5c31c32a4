"""A given projection with NaN or inf is named in the error.

The positive maps check their inputs through the output (eager CPU); a NaN in a
``projection`` passed by the caller made that check report "the attention output is not
finite although q, k, v are: the exponential features overflow (very large query or key
norms)", sending the user after the inputs' scale; ``trig`` and ``hybrid_angular``
returned NaN, or for a NaN in the hybrid's ``T`` finite but wrong values, without an
error. The projection is now checked as the inputs are.
"""

from __future__ import annotations

import pytest
import torch

from kernelkit.attention import draw_features, linear_attention


@pytest.mark.parametrize("name", ["positive", "hyperbolic", "sderf"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("is_causal", [False, True])
def test_non_finite_projection_is_named(name, bad, is_causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 4, generator=g) for _ in range(3))
    W = torch.as_tensor(draw_features(name, 8, 4, 0)["W"])
    W[1, 2] = bad
    kw = {"moments": None}
    if is_causal and name == "sderf":
        from kernelkit.attention import attention_moments

        kw["moments"] = attention_moments(q, k)
    with pytest.raises(ValueError, match=r"^projection contains NaN or inf"):
        linear_attention(q, k, v, name, 8, projection=W, is_causal=is_causal, **kw)


def test_large_inputs_still_report_an_overflow():
    """Control: finite inputs and projection whose features overflow keep that message."""
    q = torch.full((1, 1, 4, 2), 1e20)  # float32: |k|^2 overflows
    W = torch.as_tensor(draw_features("positive", 8, 2, 0)["W"])
    with pytest.raises(ValueError, match="overflow"):
        linear_attention(q, q, q, "positive", 8, projection=W)


@pytest.mark.parametrize(
    "name, key", [("trig", "W"), ("hybrid_angular", "W"), ("hybrid_angular", "T")]
)
def test_non_finite_projection_of_the_other_maps_is_named(name, key):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 4, generator=g) for _ in range(3))
    params = {a: torch.as_tensor(b) for a, b in draw_features(name, 72, 4, 0).items()}
    params[key][0, 1] = float("nan")
    proj = params if name == "hybrid_angular" else params["W"]
    what = "projection" if key == "W" else r"projection\['T'\]"
    with pytest.raises(ValueError, match=rf"^{what} contains NaN or inf"):
        linear_attention(q, k, v, name, 72, projection=proj)
    # check_finite=False: no check, as for the inputs
    linear_attention(q, k, v, name, 72, projection=proj, check_finite=False)
