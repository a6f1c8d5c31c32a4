"""A seventh user sweep of kernelkit.attention, as someone replacing
``nn.MultiheadAttention`` / SDPA in a model would call it: one regression test per
case it found broken."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention,
)


# ------------------------------------------------------------------ module masks
def _module_and_input(L=5):
    fav = FavorAttention(8, 2, feature_map="positive", n_features=16, random_state=0).eval()
    x = torch.randn(2, L, 8, generator=torch.Generator().manual_seed(0))
    return fav, x


def test_module_integer_attn_mask_raises_a_type_error_naming_the_dtypes():
    """An integer causal mask (``torch.triu(torch.ones(L, L, dtype=int), 1)``) is refused
    by nn.MultiheadAttention as neither bool nor float; FavorAttention used to fail inside
    ``torch.finfo`` with a message about finfo, not about the mask."""
    fav, x = _module_and_input()
    upper = torch.ones(5, 5, dtype=torch.int64).triu(1)
    for mask in (upper, upper.to(torch.uint8), upper.to(torch.int32)):
        with pytest.raises(TypeError, match=r"attn_mask must be bool or float, got torch\.\w+"):
            fav(x, x, x, attn_mask=mask)


def test_module_float_attn_mask_of_large_negatives_says_which_values_it_takes():
    """A causal float mask written with -1e9 (a common idiom) is not one FavorAttention
    takes (0 and -inf or the dtype's minimum only), but the error used to say it was not
    the causal mask; it names the float values instead, as linear_attention does. The
    same mask with -inf still selects causal attention."""
    fav, x = _module_and_input()
    causal = nn.Transformer.generate_square_subsequent_mask(5)  # 0 / -inf
    with torch.no_grad():
        ref, _ = fav(x, x, x, is_causal=True)
        out, _ = fav(x, x, x, attn_mask=causal)
    assert torch.equal(out, ref)
    with pytest.raises(ValueError, match=r"float attn_mask may only hold 0 .* -inf"):
        fav(x, x, x, attn_mask=causal.clamp(min=-1e9))
    # a 0 / -inf mask that is not causal keeps the message about the pattern
    with pytest.raises(ValueError, match="only the causal attn_mask"):
        fav(x, x, x, attn_mask=causal.T.contiguous())


# ------------------------------------------------------------------ module step
def test_module_step_names_an_input_dtype_that_is_not_the_modules():
    """``forward`` names a dtype mismatch between its inputs and the module's parameters
    (TypeError); ``step`` passed the tokens on to F.linear, whose RuntimeError ('mat1 and
    mat2 must have the same dtype') names no argument. Under autocast the step still takes
    bfloat16 tokens for a float32 module, as forward does."""
    fav, x = _module_and_input()
    state = fav.init_state(2)
    x64 = x[:, 0].double()
    with pytest.raises(TypeError, match=r"query_t has dtype torch\.float64.*torch\.float32"):
        fav.step(x64, x64, x64, state)
    with pytest.raises(TypeError, match="must share one dtype"):
        fav.step(x[:, 0], x64, x[:, 0], state)
    with pytest.raises(TypeError, match="floating point"):
        fav.step(*(torch.ones(2, 8, dtype=torch.int64),) * 3, state)
    with torch.no_grad():
        ref, _ = fav.step(x[:, 0], x[:, 0], x[:, 0], state)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            xb = x[:, 0].bfloat16()
            out, _ = fav.step(xb, xb, xb, state)
    # bfloat16 tokens and projections under autocast: within a few bfloat16 roundings
    # (eps 2^-8) of the float32 step for outputs of size about 1
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=0.1)


# ------------------------------------------------------------------ SDPA's scale
def test_a_zero_dim_tensor_scale_is_taken_as_sdpa_takes_it():
    """SDPA takes ``scale=torch.tensor(0.5)`` (a temperature kept as a tensor) as the float
    it holds; linear_attention refused it with a message about scale <= 0. A tensor scale
    that requires grad would silently get no gradient (the scale is folded into the
    features as a constant), so it raises; so does a tensor of more than one value."""
    s = torch.tensor(0.3, dtype=torch.float64)  # holds the float 0.3 exactly
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    kw = dict(feature_map="positive", n_features=16, random_state=0)
    for causal in (False, True):
        ref = linear_attention(q, k, v, scale=0.3, is_causal=causal, **kw)
        out = linear_attention(q, k, v, scale=s, is_causal=causal, **kw)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)  # the same float
    m_ref = attention_moments(q, k, scale=0.3)
    m_t = attention_moments(q, k, scale=s)
    assert torch.equal(m_t.second_y, m_ref.second_y)
    st = init_decoding_state((2, 3), 4, "positive", 16, random_state=0, scale=s)
    assert st.scale == 0.3
    with pytest.raises(ValueError, match="requires grad"):
        linear_attention(q, k, v, scale=torch.tensor(0.3, requires_grad=True), **kw)
    with pytest.raises(ValueError, match="scale must be a positive finite float"):
        linear_attention(q, k, v, scale=torch.tensor([0.3, 0.3]), **kw)
    with pytest.raises(ValueError, match="scale <= 0"):
        linear_attention(q, k, v, scale=torch.tensor(-0.3), **kw)
